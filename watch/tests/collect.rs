//! The collector's bounds on what it holds while it reads many queues: no
//! descriptor between samples, at most its `max_views` views kept (the rest
//! read through a view opened for the sample), and lease tables read
//! within a budget of entries a sample, in turn.

#[path = "../../tests/common/mod.rs"]
mod common;
use common::TempDir;
use std::time::Duration;
use tvm::{LeaseSpec, Queue, Spec, Wait};
use tvmq_watch::Collector;

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

#[test]
fn views_kept_are_bounded_the_rest_read_per_sample_and_no_descriptor_is_held() {
    let dir = TempDir::new("watch", "views");
    let d = dir.path();
    for id in 1..=6u32 {
        Queue::create(d, id, &Spec::new(8, 8)).unwrap();
        let q = Queue::open(d, id).unwrap();
        for _ in 0..id {
            q.push(b"r").unwrap();
        }
    }
    let before = open_fds();
    let mut c = Collector::with_max_views(d, 2);
    for round in 0..2 {
        let s = c.sample().unwrap();
        let depths: Vec<(u32, u64)> = s.queues.iter().map(|q| (q.id, q.snap.depth)).collect();
        assert_eq!(depths, (1..=6).map(|id| (id, u64::from(id))).collect::<Vec<_>>(), "round {round}");
        assert_eq!((s.transient, s.unreadable, c.open_views()), (4, 0, 2), "round {round}");
        assert_eq!(open_fds(), before, "no descriptor held between samples, round {round}");
    }
    // A process attached to a queue read through a kept view and one read
    // through a view of the sample alone: both counted.
    let (q1, q6) = (Queue::open(d, 1).unwrap(), Queue::open(d, 6).unwrap());
    let s = c.sample().unwrap();
    assert_eq!(s.get(1).map(|q| q.snap.processes), Some(1));
    assert_eq!(s.get(6).map(|q| q.snap.processes), Some(1));
    assert_eq!(s.get(2).map(|q| q.snap.processes), Some(0));
    drop((q1, q6));
    // Queue 1 dropped and made again: the new one is read.
    Queue::drop_queue(d, 1).unwrap();
    assert_eq!(c.sample().unwrap().queues.len(), 5);
    Queue::create(d, 1, &Spec::new(8, 8)).unwrap();
    let s = c.sample().unwrap();
    assert_eq!(s.get(1).map(|q| q.snap.depth), Some(0));
    assert_eq!(open_fds(), before);
    drop(c);
    for id in 1..=6 {
        Queue::drop_queue(d, id).unwrap();
    }
}

#[test]
fn lease_tables_are_read_within_the_budget_in_turn_and_the_others_say_when_they_were_read() {
    let dir = TempDir::new("watch", "lease-budget");
    let d = dir.path();
    let mut queues = Vec::new();
    for id in 1..=3u32 {
        let spec = Spec { leases: Some(LeaseSpec { max_leases: 64, ..LeaseSpec::default() }), ..Spec::new(8, 8) };
        Queue::create(d, id, &spec).unwrap();
        let q = Queue::open(d, id).unwrap();
        assert_eq!(q.lease_scan_len(), 64);
        // `id` leases in flight.
        for _ in 0..id {
            q.push(b"r").unwrap();
            q.pop_lease(&mut [0u8; 8], Wait::NoWait, Duration::from_secs(600)).unwrap();
        }
        queues.push(q);
    }
    // Room for one table a sample (64 of 100 entries).
    let mut c = Collector::new(d).lease_scan_budget(100);
    let mut read_at = [None; 3];
    let rounds = [(1, 0, 2), (2, 1, 1), (3, 2, 0), (1, 2, 0), (2, 2, 0)];
    for (round, (read, stale, unread)) in rounds.into_iter().enumerate() {
        let s = c.sample().unwrap();
        let q = s.get(read).unwrap();
        assert!(q.leases_read.is_some_and(|t| t + s.took >= s.at), "round {round}: queue {read} read now");
        read_at[read as usize - 1] = q.leases_read;
        for q in &s.queues {
            assert_eq!(q.leases_read, read_at[q.id as usize - 1], "round {round}: queue {}", q.id);
            let known = if q.leases_read.is_some() { u64::from(q.id) } else { 0 };
            assert_eq!(q.snap.leases_in_flight, known, "round {round}: queue {}", q.id);
            assert_eq!(q.snap.popped, u64::from(q.id), "the rest is read every time");
        }
        assert_eq!((s.leases_stale, s.leases_unread), (stale, unread), "round {round}");
    }
    // Enough budget: every table every time.
    let s = Collector::new(d).sample().unwrap();
    assert_eq!((s.leases_stale, s.leases_unread), (0, 0));
    assert_eq!(s.queues.iter().map(|q| q.snap.leases_in_flight).collect::<Vec<_>>(), [1, 2, 3]);
    drop(queues);
    for id in 1..=3 {
        Queue::drop_queue(d, id).unwrap();
    }
}
