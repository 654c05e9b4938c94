//! Unit tests of the queue that need its private parts (the public API is
//! tested in tests/).

use super::*;
use crate::ring::Peeked;
use crate::test_support::TempDir;
use std::time::Instant;

fn queue(dir: &TempDir) -> Arc<Queue> {
    Queue::create(dir.path(), 1, &Spec::new(16, 8)).unwrap();
    Arc::new(Queue::open(dir.path(), 1).unwrap())
}

/// A lease consumer dies between taking a record's slot and saving the
/// record in its lease entry, and no producer pushes again (made
/// deterministic here; the lease kill test meets it by chance). Another process's repair publishes the
/// record again one lap later, beyond the tail; a consumer must still
/// get it, once.
#[test]
fn a_record_taken_by_a_dying_lease_consumer_comes_back_without_further_pushes() {
    use crate::lease::state::Owner;
    use crate::ring::{NeverRecover, Silent};
    use crate::spec::LeaseSpec;
    let dir = TempDir::new("queue", "stranded");
    let mut spec = Spec::new(8, 8);
    spec.leases = Some(LeaseSpec { lease_ms: 60_000, max_leases: 4, ..LeaseSpec::default() });
    Queue::create(dir.path(), 1, &spec).unwrap();
    let q = Queue::open(dir.path(), 1).unwrap();
    // Another attached process (a second open file description: its own lock).
    let other = Queue::open(dir.path(), 1).unwrap();
    for v in 0..8u64 {
        q.push(&v.to_le_bytes()).unwrap();
    }
    let mut out = [0u8; 8];
    let mut take = |q: &Queue| {
        let (n, lease) = q.pop_lease(&mut out, Wait::NoWait, Duration::ZERO)?;
        q.ack(&lease)?;
        assert_eq!(lease.deliveries(), 1);
        Ok::<u64, Error>(u64::from_le_bytes(out[..n].try_into().unwrap()))
    };
    for v in 0..3 {
        assert_eq!(take(&q).unwrap(), v);
    }
    // The dying consumer, of a process-table entry nobody holds: its
    // lease entry names position 3, whose slot it claimed (announced
    // nowhere, as a dead process's announcements count for nothing).
    let l = q.leases.as_ref().unwrap();
    let ghost = Owner::new(200, 1);
    let (i, _filling) = l.table.claim(0, ghost).unwrap();
    l.table.entry(i).pos.store(3, Ordering::SeqCst);
    q.ring.claim_pop(&Silent, &mut NeverRecover).unwrap();
    for v in 4..8 {
        assert_eq!(take(&q).unwrap(), v);
    }
    // A process attaching after the death repairs: record 3 is
    // published again at position 11, beyond the tail (8).
    let r = other.repair();
    assert_eq!((r.recovered_pops, r.alone), (1, false));
    assert_eq!(q.depth(), 0);
    // The consumer that finds the queue empty moves the tail to it
    // (positions 8-10 become empty records) and gets it.
    assert_eq!(take(&q).unwrap(), 3);
    assert_eq!(take(&other).map_err(|e| e.code()), Err(NO_DATA_FOUND));
    assert_eq!(take(&q).map_err(|e| e.code()), Err(NO_DATA_FOUND));
    assert_eq!(q.depth(), 0);
    // The queue goes on at its full capacity.
    for v in 0..8u64 {
        q.push(&v.to_le_bytes()).unwrap();
    }
    assert_eq!(q.push(b"x").map_err(|e| e.code()), Err(DATA_SPC_FULL));
    for v in 0..8 {
        assert_eq!(take(&other).unwrap(), v);
    }
}

/// A thread waiting (20 s at most) for a push after `seen`, which returns
/// the push count then and how long it waited; started and left asleep
/// (counted as a waiter).
fn sleeping_watcher(q: &Arc<Queue>, seen: u64) -> std::thread::JoinHandle<(u64, Duration)> {
    let watcher = {
        let q = q.clone();
        std::thread::spawn(move || {
            let t = Instant::now();
            (q.wait_for_push(seen, Duration::from_secs(20)), t.elapsed())
        })
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while q.stats().waiters == 0 {
        assert!(Instant::now() < deadline, "the watcher never slept");
        std::thread::sleep(Duration::from_millis(1));
    }
    watcher
}

#[test]
fn a_push_wakes_a_watcher_and_takes_nothing_from_it() {
    let dir = TempDir::new("queue", "watch");
    let q = queue(&dir);
    let seen = q.push_count();
    let watcher = sleeping_watcher(&q, seen);
    q.push(b"abc").unwrap();
    let (count, slept) = watcher.join().unwrap();
    assert_eq!(count, seen + 1);
    assert!(slept < Duration::from_secs(10), "woken by the push, not the timeout ({slept:?})");
    assert_eq!(q.depth(), 1, "watching takes nothing");
    assert_eq!(q.stats().waiters, 0);
}

#[test]
fn a_watcher_returns_at_once_after_a_push_it_missed_and_at_its_timeout() {
    let dir = TempDir::new("queue", "watch2");
    let q = queue(&dir);
    let seen = q.push_count();
    q.push(b"x").unwrap();
    assert_eq!(q.wait_for_push(seen, Duration::from_secs(20)), seen + 1);
    let t = Instant::now();
    assert_eq!(q.wait_for_push(seen + 1, Duration::from_millis(50)), seen + 1);
    assert!(t.elapsed() >= Duration::from_millis(45));
}

#[test]
fn dropping_the_queue_wakes_a_watcher() {
    let dir = TempDir::new("queue", "watchdrop");
    let q = queue(&dir);
    let watcher = sleeping_watcher(&q, q.push_count());
    Queue::drop_queue(dir.path(), 1).unwrap();
    let (_, slept) = watcher.join().unwrap();
    assert!(q.is_dropped() && slept < Duration::from_secs(10));
}

#[test]
fn peek_shows_the_head_without_taking_it() {
    let dir = TempDir::new("queue", "peek");
    let q = queue(&dir);
    assert!(q.peek(5).is_empty());
    for r in [&b"one"[..], b"two", b"three"] {
        q.push(r).unwrap();
    }
    let mut out = [0u8; 8];
    q.pop(&mut out, Wait::NoWait).unwrap();
    let seen = Queue::inspect(dir.path(), 1).unwrap().peek(5);
    assert_eq!(seen, vec![(1, Peeked::Record(b"two".to_vec())), (2, Peeked::Record(b"three".to_vec()))]);
    assert_eq!(q.peek(1).len(), 1);
    assert_eq!(q.depth(), 2, "peeking takes nothing");
    // Wrapped around the ring: positions keep counting.
    for i in 0..20u8 {
        q.push(&[i]).unwrap();
        q.pop(&mut out, Wait::NoWait).unwrap();
    }
    let seen = q.peek(16);
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[1], (22, Peeked::Record(vec![19])));
}

#[test]
fn the_wait_strategy_comes_from_the_environment_then_the_queue() {
    use Strategy::*;
    let us = Duration::from_micros;
    assert_eq!(Strategy::choose(None, None), Default);
    assert_eq!(Strategy::choose(None, Some(1000)), Spin(us(1000)));
    assert_eq!(Strategy::choose(None, Some(-1)), NeverSleep);
    assert_eq!(Strategy::choose(Some("50"), Some(1000)), Spin(us(50)));
    assert_eq!(Strategy::choose(Some(" -1 "), None), NeverSleep);
    assert_eq!(Strategy::choose(Some("0"), Some(-1)), Spin(us(0)));
    for bad in ["", "x", "-2", "1.5"] {
        assert_eq!(Strategy::choose(Some(bad), Some(7)), Spin(us(7)), "{bad:?} is ignored");
    }
}

/// The default short spin stops once spins stop catching records (a pop
/// then sleeps at once), and a sleeping pop still gets its record.
#[test]
fn pops_whose_spins_catch_nothing_stop_spinning_and_still_get_records() {
    let dir = TempDir::new("queue", "credit");
    let q = queue(&dir);
    if q.wait_strategy() == Strategy::NeverSleep {
        return; // TVMQ_SPIN_US=-1: no short spin
    }
    let credit = || q.spin_credit.load(Ordering::Relaxed);
    assert_eq!(credit(), blocking::SPIN_CREDIT_MAX);
    let mut out = [0u8; 8];
    for left in (0..blocking::SPIN_CREDIT_MAX).rev() {
        // Nothing comes: the spin fails, and the sleep lasts until the deadline.
        let r = q.pop(&mut out, Wait::Until(Instant::now() + Duration::from_millis(2)));
        assert_eq!(r.unwrap_err().code(), MQUE_WAIT_TMO);
        assert_eq!(credit(), left, "one credit less per failed spin");
    }
    let r = q.pop(&mut out, Wait::Until(Instant::now() + Duration::from_millis(2)));
    assert_eq!(r.unwrap_err().code(), MQUE_WAIT_TMO);
    assert_eq!(credit(), 0, "no spin, no credit below 0");
    let producer = {
        let q = q.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            q.push(b"late").unwrap();
        })
    };
    let n = q.pop(&mut out, Wait::Forever).unwrap();
    assert_eq!(&out[..n], b"late");
    producer.join().unwrap();
    assert_eq!(credit(), 0, "a sleep of 20 ms earns nothing");
}

#[test]
fn a_queue_keeps_its_spin_time_and_spinning_pops_keep_their_deadline() {
    let dir = TempDir::new("queue", "spin");
    let mut spec = Spec::new(4, 8);
    spec.spin_us = Some(-1);
    Queue::create(dir.path(), 1, &spec).unwrap();
    let q = Arc::new(Queue::open(dir.path(), 1).unwrap());
    assert_eq!(q.info().spin_us, Some(-1));
    if std::env::var_os("TVMQ_SPIN_US").is_none() {
        assert_eq!(q.wait_strategy(), Strategy::NeverSleep);
    }
    let mut out = [0u8; 8];
    let t = Instant::now();
    let r = q.pop(&mut out, Wait::Until(Instant::now() + Duration::from_millis(30)));
    assert_eq!(r.unwrap_err().code(), MQUE_WAIT_TMO);
    assert!(t.elapsed() >= Duration::from_millis(30));
    // A spinning consumer gets a record pushed by another thread, and sees
    // a drop. (Whether it already spins when the record comes or finds it
    // at once, and whether its second pop starts before the drop or after,
    // the outcome is the same: each step waits for the one before it.)
    let (started, popped) = (std::sync::mpsc::channel(), std::sync::mpsc::channel());
    let consumer = {
        let q = q.clone();
        let (started, popped) = (started.0, popped.0);
        std::thread::spawn(move || {
            let mut out = [0u8; 8];
            started.send(()).unwrap();
            let n = q.pop(&mut out, Wait::Forever).map(|n| out[..n].to_vec());
            popped.send(()).unwrap();
            (n, q.pop(&mut out, Wait::Forever).map_err(|e| e.code()))
        })
    };
    started.1.recv().unwrap();
    q.push(b"spun").unwrap();
    popped.1.recv().unwrap();
    Queue::drop_queue(dir.path(), 1).unwrap();
    let (first, second) = consumer.join().unwrap();
    assert_eq!(first.unwrap(), b"spun");
    assert_eq!(second.unwrap_err(), SHM_ERR_EIDRM);
    assert!(
        Queue::create(dir.path(), 2, &{
            let mut s = Spec::new(1, 1);
            s.spin_us = Some(-2);
            s
        })
        .is_err()
    );
}

/// Threads that come and go, more of them than are numbered, each taking a
/// word: every word is given back when its thread ends, and so is what the
/// queue noted under the thread's number (a later thread with that number
/// takes a word of its own).
#[test]
fn threads_that_end_give_back_their_words_and_numbers() {
    let dir = TempDir::new("queue", "numbers");
    let q = queue(&dir);
    let noted = |q: &Queue| (0..crate::registry::NUMBERED_THREADS).filter(|&n| q.slots.noted(n).is_some()).count();
    for round in 0..2 * crate::registry::NUMBERED_THREADS as u64 {
        let q2 = q.clone();
        let (slot, in_use) = std::thread::spawn(move || {
            q2.push(&round.to_le_bytes()).unwrap();
            let mut out = [0u8; 8];
            assert_eq!(q2.pop(&mut out, Wait::NoWait).unwrap(), 8);
            assert_eq!(u64::from_le_bytes(out), round);
            (q2.thread_slot(), noted(&q2))
        })
        .join()
        .unwrap();
        assert_eq!((slot, in_use), (0, 1), "round {round}: the one thread holds word 0, noted once");
        assert_eq!(noted(&q), 0, "round {round}: forgotten when the thread ended");
    }
    // Two at once hold two words.
    let barrier = Arc::new(std::sync::Barrier::new(2));
    let both: Vec<usize> = (0..2)
        .map(|_| {
            let (q, b) = (q.clone(), barrier.clone());
            std::thread::spawn(move || {
                let slot = q.thread_slot();
                b.wait();
                slot
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|t| t.join().unwrap())
        .collect();
    assert_ne!(both[0], both[1]);
    assert_eq!(noted(&q), 0);
}

/// A process that attached a queue with leases when its file system had no
/// room for its entry in the process table is told so by its lease calls,
/// with the system's error (it was `LEASE_LIMIT`, as if 256 processes were
/// attached); pushes and pops still work; attached again with room, it leases.
#[test]
fn no_room_for_the_process_entry_is_the_disk_s_error_not_a_limit() {
    use crate::spec::LeaseSpec;
    let dir = TempDir::new("queue", "no-room");
    let mut spec = Spec::new(8, 8);
    spec.leases = Some(LeaseSpec::default());
    Queue::create(dir.path(), 1, &spec).unwrap();
    crate::registry::NO_ROOM.with(|c| c.set(true));
    let opened = Queue::open(dir.path(), 1);
    crate::registry::NO_ROOM.with(|c| c.set(false));
    let q = opened.unwrap();
    q.push(b"a").unwrap();
    let mut out = [0u8; 8];
    let e = q.pop_lease(&mut out, Wait::NoWait, Duration::ZERO).unwrap_err();
    assert_eq!(e.code(), SHM_ERR_NOMEM, "{e}");
    assert!(e.what().contains("No space left on device"), "{e}");
    assert!(e.what().contains("no room for this process's entry"), "{e}");
    assert_eq!(q.depth(), 1, "nothing taken");
    assert_eq!(q.pop(&mut out, Wait::NoWait).unwrap(), 1, "plain pops need no entry");
    drop(q);
    let q = Queue::open(dir.path(), 1).unwrap();
    q.push(b"b").unwrap();
    let (_, lease) = q.pop_lease(&mut out, Wait::NoWait, Duration::ZERO).unwrap();
    q.ack(&lease).unwrap();
}
