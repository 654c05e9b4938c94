//! Acknowledged consumption: every lease call and error code of the Rust API
//! (the C ABI's are in c-tests/test_lease.c): acknowledgement, expiry and the
//! late acknowledgement it fences off, extension, release with a delay, the
//! dead-letter queue after N deliveries and on rejection, the in-flight
//! bound, a dropped queue, stale tokens, tokens of another queue, a plain
//! queue, and a consumer process killed while it holds leases.

mod common;
use common::{TempDir, child_env, child_test};
use std::time::{Duration, Instant};
use tvm::error::*;
use tvm::{LeaseSpec, LeaseState, Queue, Spec, Wait};

const SIZE: u64 = 16;

fn lease_queue(dir: &TempDir, id: u32, rows: u64, leases: LeaseSpec) -> Queue {
    let mut spec = Spec::new(rows, SIZE);
    spec.leases = Some(leases);
    Queue::create(dir.path(), id, &spec).unwrap();
    Queue::open(dir.path(), id).unwrap()
}

fn leases(lease_ms: u64) -> LeaseSpec {
    LeaseSpec { lease_ms, ..LeaseSpec::default() }
}

fn code<T: std::fmt::Debug>(r: tvm::Result<T>) -> u32 {
    r.expect_err("an error").code()
}

fn out() -> [u8; SIZE as usize] {
    [0u8; SIZE as usize]
}

/// Pops with a lease until `deadline`, for records that come back after a
/// delay or an expiry (found by a sweep).
fn pop_lease_within(q: &Queue, secs: u64) -> (Vec<u8>, tvm::Lease) {
    let mut o = out();
    let (n, l) = q.pop_lease(&mut o, Wait::Until(Instant::now() + Duration::from_secs(secs)), Duration::ZERO).unwrap();
    (o[..n].to_vec(), l)
}

#[test]
fn a_leased_record_is_acknowledged_once() {
    let dir = TempDir::new("leases", "ack");
    let q = lease_queue(&dir, 1, 8, leases(30_000));
    assert_eq!(q.info().leases, Some(leases(30_000)));
    q.push(b"one").unwrap();
    q.push(b"two").unwrap();
    let mut o = out();
    let (n, l) = q.pop_lease(&mut o, Wait::NoWait, Duration::ZERO).unwrap();
    assert_eq!((&o[..n], l.deliveries(), l.queue()), (&b"one"[..], 1, 1));
    assert!(l.remaining() > Duration::from_secs(29), "the queue's lease time");
    assert_eq!(q.depth(), 1, "the leased record left the ring");
    let s = q.lease_stats().unwrap();
    assert_eq!((s.in_flight, s.waiting), (1, 0));
    q.ack(&l).unwrap();
    assert_eq!(code(q.ack(&l)), LEASE_EXPIRED, "a second acknowledgement");
    let s = q.lease_stats().unwrap();
    assert_eq!((s.in_flight, s.late, s.redelivered), (0, 1, 0));
    // Plain pops still work on a queue with leases.
    assert_eq!(q.pop(&mut o, Wait::NoWait).unwrap(), 3);
    assert_eq!(&o[..3], b"two");
    assert_eq!(code(q.pop_lease(&mut o, Wait::NoWait, Duration::ZERO)), NO_DATA_FOUND);
    assert_eq!(code(q.pop_lease(&mut [0u8; 4], Wait::NoWait, Duration::ZERO)), RECD_TOO_LONG);
}

/// Waits until `lease` has run out on the lease clock (whatever the wall
/// clock and the scheduler did meanwhile).
fn run_out(lease: &tvm::Lease) {
    while lease.remaining() > Duration::ZERO {
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn an_expired_lease_is_delivered_again_and_its_late_ack_fails() {
    let dir = TempDir::new("leases", "expire");
    let q = lease_queue(&dir, 1, 8, leases(30_000));
    q.push(b"slow").unwrap();
    let mut o = out();
    let (_, mut stale) = q.pop_lease(&mut o, Wait::NoWait, Duration::ZERO).unwrap();
    // Before it runs out, nobody else gets it.
    assert_eq!(code(q.pop_lease(&mut o, Wait::NoWait, Duration::ZERO)), NO_DATA_FOUND);
    // Then it runs out in a millisecond.
    q.extend_lease(&mut stale, Duration::from_millis(1)).unwrap();
    run_out(&stale);
    assert_eq!(code(q.ack(&stale)), LEASE_EXPIRED, "the lease ran out");
    // A blocking pop finds it when the sweep does.
    let (rec, again) = pop_lease_within(&q, 10);
    assert_eq!((rec.as_slice(), again.deliveries()), (&b"slow"[..], 2));
    assert_eq!(code(q.ack(&stale)), LEASE_EXPIRED, "fenced: never the new delivery's");
    assert_eq!(code(q.extend_lease(&mut stale.clone(), Duration::ZERO)), LEASE_EXPIRED);
    assert_eq!(code(q.release(&stale, Duration::ZERO)), LEASE_EXPIRED);
    assert_eq!(code(q.reject(&stale)), LEASE_EXPIRED);
    q.ack(&again).unwrap();
    let s = q.lease_stats().unwrap();
    assert_eq!((s.expired, s.redelivered, s.in_flight, s.orphaned), (1, 1, 0, 0));
    assert!(s.late >= 5);
}

#[test]
fn an_extended_lease_holds_and_its_old_token_is_stale() {
    let dir = TempDir::new("leases", "extend");
    let q = lease_queue(&dir, 1, 8, leases(30_000));
    q.push(b"x").unwrap();
    let mut o = out();
    // The deadline moves to the extension's, earlier or later: 30 s, then
    // 20 s from now, then the queue's 30 s again.
    let (_, mut l) = q.pop_lease(&mut o, Wait::NoWait, Duration::ZERO).unwrap();
    assert!(l.remaining() > Duration::from_secs(29));
    let old = l;
    q.extend_lease(&mut l, Duration::from_secs(20)).unwrap();
    assert!(l.remaining() > Duration::from_secs(19) && l.remaining() < Duration::from_secs(21), "{:?}", l.remaining());
    assert_eq!(code(q.pop_lease(&mut o, Wait::NoWait, Duration::ZERO)), NO_DATA_FOUND, "still leased");
    assert_eq!(code(q.ack(&old)), LEASE_EXPIRED, "the token before the extension");
    // Zero: the queue's lease time.
    q.extend_lease(&mut l, Duration::ZERO).unwrap();
    assert!(l.remaining() > Duration::from_secs(29));
    q.ack(&l).unwrap();
    // A lease that ran out cannot be extended.
    q.push(b"y").unwrap();
    let (_, mut l) = q.pop_lease(&mut o, Wait::NoWait, Duration::from_millis(20)).unwrap();
    run_out(&l);
    assert_eq!(code(q.extend_lease(&mut l, Duration::from_secs(5))), LEASE_EXPIRED);
}

#[test]
fn a_released_record_comes_back_after_its_delay() {
    let dir = TempDir::new("leases", "release");
    let q = lease_queue(&dir, 1, 8, leases(30_000));
    q.push(b"later").unwrap();
    let mut o = out();
    let (_, l) = q.pop_lease(&mut o, Wait::NoWait, Duration::ZERO).unwrap();
    let released = Instant::now();
    q.release(&l, Duration::from_millis(150)).unwrap();
    assert_eq!(code(q.ack(&l)), LEASE_EXPIRED, "released: the token is spent");
    assert_eq!(code(q.pop_lease(&mut o, Wait::NoWait, Duration::ZERO)), NO_DATA_FOUND, "not before its delay");
    assert_eq!(code(q.pop(&mut o, Wait::NoWait)), NO_DATA_FOUND, "for plain pops neither");
    let seen = q.peek_leases(10);
    assert_eq!(seen.len(), 1);
    assert_eq!((seen[0].state, seen[0].deliveries, seen[0].record.as_slice()), (LeaseState::Waiting, 1, &b"later"[..]));
    // A blocking pop sleeps (nothing is pushed) and is there when it is due.
    let (rec, again) = pop_lease_within(&q, 10);
    assert!(released.elapsed() >= Duration::from_millis(150), "delivered before its delay");
    assert_eq!((rec.as_slice(), again.deliveries()), (&b"later"[..], 2));
    // Released at once: the next pop, even a plain one, takes it.
    q.release(&again, Duration::ZERO).unwrap();
    assert_eq!(q.pop(&mut o, Wait::NoWait).unwrap(), 5);
    assert_eq!(&o[..5], b"later");
    assert!(q.peek_leases(10).is_empty());
    let s = q.lease_stats().unwrap();
    assert_eq!((s.released, s.redelivered, s.waiting), (2, 2, 0));
}

#[test]
fn lease_times_and_release_delays_beyond_a_year_are_refused() {
    let dir = TempDir::new("leases", "max-time");
    let q = lease_queue(&dir, 1, 8, leases(30_000));
    let year = Duration::from_millis(tvm::MAX_LEASE_MS);
    let beyond = year + Duration::from_millis(1);
    let mut o = out();
    q.push(b"a").unwrap();
    // Refused before anything is taken: the record stays in the ring.
    let e = q.pop_lease(&mut o, Wait::NoWait, beyond).unwrap_err();
    assert_eq!(e.code(), CONDIT_IS_NIL);
    assert!(e.what().contains("0 to 31536000000 ms"), "{e}");
    assert_eq!(code(q.pop_lease(&mut o, Wait::NoWait, Duration::MAX)), CONDIT_IS_NIL);
    assert_eq!(q.depth(), 1);
    let (_, mut l) = q.pop_lease(&mut o, Wait::NoWait, year).unwrap();
    assert!(l.remaining() > year - Duration::from_secs(1), "a year is allowed");
    assert_eq!(code(q.extend_lease(&mut l, beyond)), CONDIT_IS_NIL);
    assert_eq!(code(q.release(&l, beyond)), CONDIT_IS_NIL);
    q.push(b"b").unwrap();
    assert_eq!(code(q.ack_pop_lease(&l, &mut o, Wait::NoWait, beyond)), CONDIT_IS_NIL);
    // None of the refusals ended or changed the lease.
    q.extend_lease(&mut l, year).unwrap();
    q.release(&l, Duration::ZERO).unwrap();
    let s = q.lease_stats().unwrap();
    assert_eq!((s.released, s.in_flight, s.waiting), (1, 0, 1));
}

#[test]
fn a_record_delivered_the_maximum_times_goes_to_the_dead_letter_queue() {
    let dir = TempDir::new("leases", "dlq");
    let spec = LeaseSpec { max_deliveries: 3, dead_letter: Some(2), ..leases(30_000) };
    let q = lease_queue(&dir, 1, 8, spec);
    Queue::create(dir.path(), 2, &Spec::new(8, SIZE)).unwrap();
    let dlq = Queue::open(dir.path(), 2).unwrap();
    q.push(b"poison").unwrap();
    let mut o = out();
    for delivery in 1..=3 {
        let (_, l) = q.pop_lease(&mut o, Wait::NoWait, Duration::ZERO).unwrap();
        assert_eq!(l.deliveries(), delivery);
        q.release(&l, Duration::ZERO).unwrap();
    }
    assert_eq!(code(q.pop_lease(&mut o, Wait::NoWait, Duration::ZERO)), NO_DATA_FOUND);
    assert_eq!(dlq.pop(&mut o, Wait::NoWait).unwrap(), 6);
    assert_eq!(&o[..6], b"poison");
    // The same through expiry: the sweep sends it there.
    q.push(b"slow").unwrap();
    for _ in 1..=3 {
        pop_lease_briefly(&q);
    }
    // Sweeps are made by the calls on the queue (a consumer blocked on it
    // wakes at the deadline): the first call that finds the third lease run
    // out sends the record on, and none delivers it a fourth time. Leases
    // run on the coarse monotonic clock, which a busy VM can update later
    // than its tick: the 30 ms slept may not yet be 20 ms on it, so the
    // calls are repeated (up to 5 s) until the record is there.
    let mut got = out();
    let deadline = Instant::now() + Duration::from_secs(5);
    let n = loop {
        assert_eq!(code(q.pop_lease(&mut o, Wait::NoWait, Duration::ZERO)), NO_DATA_FOUND);
        match dlq.pop(&mut got, Wait::NoWait) {
            Ok(n) => break n,
            Err(e) if Instant::now() < deadline => {
                assert_eq!(e.code(), NO_DATA_FOUND, "{e}");
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(e) => panic!("nothing in the dead-letter queue: {e}; {:?}", q.lease_stats()),
        }
    };
    assert_eq!(&got[..n], b"slow");
    let s = q.lease_stats().unwrap();
    assert_eq!((s.dead_lettered, s.released, s.expired, s.in_flight, s.waiting), (2, 2, 3, 0, 0));
}

/// Takes the next record with a 20 ms lease and lets it run out.
fn pop_lease_briefly(q: &Queue) {
    let mut o = out();
    q.pop_lease(&mut o, Wait::Until(Instant::now() + Duration::from_secs(10)), Duration::from_millis(20)).unwrap();
    std::thread::sleep(Duration::from_millis(30));
}

#[test]
fn a_rejected_record_goes_to_the_dead_letter_queue_or_is_dropped() {
    let dir = TempDir::new("leases", "reject");
    let with = lease_queue(&dir, 1, 8, LeaseSpec { dead_letter: Some(3), ..leases(30_000) });
    let without = lease_queue(&dir, 2, 8, leases(30_000));
    let mut o = out();
    // The dead-letter queue does not exist yet: refused, the lease is kept.
    with.push(b"bad").unwrap();
    let (_, l) = with.pop_lease(&mut o, Wait::NoWait, Duration::ZERO).unwrap();
    assert_eq!(code(with.reject(&l)), TBL_NOT_FOUND);
    assert_eq!(with.lease_stats().unwrap().in_flight, 1);
    Queue::create(dir.path(), 3, &Spec::new(1, SIZE)).unwrap();
    with.reject(&l).unwrap();
    assert_eq!(code(with.ack(&l)), LEASE_EXPIRED, "rejected: the token is spent");
    let dlq = Queue::open(dir.path(), 3).unwrap();
    assert_eq!(dlq.depth(), 1);
    // Full: refused again, lease kept; then acknowledged after all.
    with.push(b"bad2").unwrap();
    let (_, l) = with.pop_lease(&mut o, Wait::NoWait, Duration::ZERO).unwrap();
    assert_eq!(code(with.reject(&l)), DATA_SPC_FULL);
    with.ack(&l).unwrap();
    // No dead-letter queue: dropped, counted.
    without.push(b"gone").unwrap();
    let (_, l) = without.pop_lease(&mut o, Wait::NoWait, Duration::ZERO).unwrap();
    without.reject(&l).unwrap();
    assert_eq!(code(without.pop(&mut o, Wait::NoWait)), NO_DATA_FOUND);
    let (a, b) = (with.lease_stats().unwrap(), without.lease_stats().unwrap());
    assert_eq!((a.dead_lettered, a.dropped, b.dead_lettered, b.dropped), (1, 0, 0, 1));
}

#[test]
fn leases_in_flight_are_bounded_and_a_full_queue_is_not_held_by_them() {
    let dir = TempDir::new("leases", "bound");
    let q = lease_queue(&dir, 1, 2, LeaseSpec { max_leases: 3, ..leases(30_000) });
    let mut o = out();
    for r in [b"a", b"b"] {
        q.push(r).unwrap();
    }
    assert_eq!(code(q.push(b"c")), DATA_SPC_FULL);
    let (_, a) = q.pop_lease(&mut o, Wait::NoWait, Duration::ZERO).unwrap();
    let (_, b) = q.pop_lease(&mut o, Wait::NoWait, Duration::ZERO).unwrap();
    // Both leased records left their slots: the queue takes two more.
    q.push(b"c").unwrap();
    q.push(b"d").unwrap();
    assert_eq!(code(q.push(b"e")), DATA_SPC_FULL);
    let (_, c) = q.pop_lease(&mut o, Wait::NoWait, Duration::ZERO).unwrap();
    // Three in flight: the fourth is refused at once, even a blocking pop.
    let t = Instant::now();
    assert_eq!(code(q.pop_lease(&mut o, Wait::Forever, Duration::ZERO)), LEASE_LIMIT);
    assert!(t.elapsed() < Duration::from_secs(5));
    assert_eq!(q.depth(), 1, "nothing taken by the refused pop");
    q.ack(&b).unwrap();
    let (n, d) = q.pop_lease(&mut o, Wait::NoWait, Duration::ZERO).unwrap();
    assert_eq!(&o[..n], b"d");
    for l in [a, c, d] {
        q.ack(&l).unwrap();
    }
    assert_eq!(q.lease_stats().unwrap().in_flight, 0);
}

#[test]
fn tokens_of_another_queue_or_a_dropped_one_are_refused() {
    let dir = TempDir::new("leases", "foreign");
    let q1 = lease_queue(&dir, 1, 4, leases(30_000));
    let q2 = lease_queue(&dir, 2, 4, leases(30_000));
    let plain = {
        Queue::create(dir.path(), 3, &Spec::new(4, SIZE)).unwrap();
        Queue::open(dir.path(), 3).unwrap()
    };
    let mut o = out();
    q1.push(b"x").unwrap();
    q2.push(b"y").unwrap();
    let (_, l1) = q1.pop_lease(&mut o, Wait::NoWait, Duration::ZERO).unwrap();
    let (_, l2) = q2.pop_lease(&mut o, Wait::NoWait, Duration::ZERO).unwrap();
    assert_eq!(code(q2.ack(&l1)), LEASE_INVALID);
    assert_eq!(code(plain.ack(&l1)), LEASE_INVALID);
    assert_eq!(code(q1.release(&l2, Duration::ZERO)), LEASE_INVALID);
    assert_eq!(code(q1.reject(&l2)), LEASE_INVALID);
    assert_eq!(code(q1.extend_lease(&mut l2.clone(), Duration::ZERO)), LEASE_INVALID);
    // A plain queue has no leases.
    plain.push(b"z").unwrap();
    assert_eq!(code(plain.pop_lease(&mut o, Wait::NoWait, Duration::ZERO)), NOT_SUPPT_OPT);
    assert!(plain.lease_stats().is_none() && plain.peek_leases(5).is_empty());
    // Dropped: the open queue says so; a queue re-created under its id
    // does not take the old queue's tokens.
    Queue::drop_queue(dir.path(), 1).unwrap();
    assert_eq!(code(q1.ack(&l1)), SHM_ERR_EIDRM);
    let q1b = lease_queue(&dir, 1, 4, leases(30_000));
    q1b.push(b"new").unwrap();
    let (_, fresh) = q1b.pop_lease(&mut o, Wait::NoWait, Duration::ZERO).unwrap();
    assert_eq!(code(q1b.ack(&l1)), LEASE_INVALID, "a token of the queue dropped before");
    q1b.ack(&fresh).unwrap();
    q2.ack(&l2).unwrap();
}

#[test]
fn lease_settings_are_checked_at_creation() {
    let dir = TempDir::new("leases", "spec");
    let bad = [
        (LeaseSpec { lease_ms: 0, ..LeaseSpec::default() }, CONDIT_IS_NIL),
        (LeaseSpec { lease_ms: tvm::MAX_LEASE_MS + 1, ..LeaseSpec::default() }, CONDIT_IS_NIL),
        (LeaseSpec { max_leases: 0, ..LeaseSpec::default() }, CONDIT_IS_NIL),
        (LeaseSpec { max_leases: tvm::MAX_LEASES + 1, ..LeaseSpec::default() }, MQUE_CRTE_BIG),
        (LeaseSpec { max_deliveries: 65_536, ..LeaseSpec::default() }, CONDIT_IS_NIL),
        (LeaseSpec { dead_letter: Some(9), ..LeaseSpec::default() }, NOT_SUPPT_OPT),
    ];
    for (l, want) in bad {
        let mut spec = Spec::new(4, SIZE);
        spec.leases = Some(l.clone());
        assert_eq!(code(Queue::create(dir.path(), 9, &spec)), want, "{l:?}");
    }
    let mut spec = Spec::new(4, SIZE);
    spec.leases = Some(LeaseSpec { max_leases: 10, ..LeaseSpec::default() });
    let size = spec.file_size().unwrap();
    Queue::create(dir.path(), 9, &spec).unwrap();
    assert_eq!(std::fs::metadata(tvm::queue_path(dir.path(), 9)).unwrap().len(), size);
    assert!(size > Spec::new(4, SIZE).file_size().unwrap());
}

/// Child of `a_consumer_killed_holding_leases_has_them_delivered_again_at_once`:
/// takes two records with long leases, acknowledges one, says so, and waits
/// to be killed.
#[test]
#[ignore = "child process of a test in this file: started by it"]
fn lease_holder_child() {
    let dir = std::path::PathBuf::from(child_env("TVMQ_LEASE_DIR"));
    let q = Queue::open(&dir, 1).unwrap();
    let mut o = out();
    let (_, first) = q.pop_lease(&mut o, Wait::NoWait, Duration::from_secs(600)).unwrap();
    let (_, _second) = q.pop_lease(&mut o, Wait::NoWait, Duration::from_secs(600)).unwrap();
    let (_, _third) = q.pop_lease(&mut o, Wait::NoWait, Duration::from_secs(600)).unwrap();
    q.ack(&first).unwrap();
    println!("holding");
    std::thread::sleep(Duration::from_secs(600));
}

#[test]
fn a_consumer_killed_holding_leases_has_them_delivered_again_at_once() {
    use std::io::BufRead;
    let dir = TempDir::new("leases", "killed");
    let q = lease_queue(&dir, 1, 8, leases(600_000));
    for r in [b"r0", b"r1", b"r2", b"r3"] {
        q.push(r).unwrap();
    }
    let mut child = child_test("lease_holder_child")
        .env("TVMQ_LEASE_DIR", dir.path())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    let mut reader = std::io::BufReader::new(child.stdout.take().unwrap());
    while !line.contains("holding") {
        line.clear();
        assert!(reader.read_line(&mut line).unwrap() > 0, "the child ended before holding its leases");
    }
    assert_eq!(q.lease_stats().unwrap().in_flight, 2);
    child.kill().unwrap();
    child.wait().unwrap();
    // Its two leases (10 minutes long) come back with the next sweep (at
    // most 10 ms away while leases are in flight), not when they run out.
    let killed = Instant::now();
    let mut got = Vec::new();
    while got.len() < 3 {
        let (rec, l) = pop_lease_within(&q, 60);
        got.push((rec, l.deliveries()));
        q.ack(&l).unwrap();
    }
    assert!(killed.elapsed() < Duration::from_secs(60), "the dead consumer's leases waited for their deadline");
    got.sort();
    assert_eq!(got, [(b"r1".to_vec(), 2), (b"r2".to_vec(), 2), (b"r3".to_vec(), 1)], "delivered again, counted");
    assert_eq!(code(q.pop_lease(&mut out(), Wait::NoWait, Duration::ZERO)), NO_DATA_FOUND);
    let s = q.lease_stats().unwrap();
    assert_eq!((s.orphaned, s.redelivered, s.expired, s.in_flight), (2, 2, 0, 0));
}

#[test]
fn peek_and_stats_show_the_leases() {
    let dir = TempDir::new("leases", "peek");
    let q = lease_queue(&dir, 1, 8, leases(30_000));
    q.push(b"held").unwrap();
    let mut o = out();
    let (_, l) = q.pop_lease(&mut o, Wait::NoWait, Duration::ZERO).unwrap();
    std::thread::sleep(Duration::from_millis(30));
    let view = Queue::inspect(dir.path(), 1).unwrap();
    let seen = view.peek_leases(10);
    assert_eq!(seen.len(), 1);
    let r = &seen[0];
    assert_eq!((r.state, r.deliveries, r.position, r.record.as_slice()), (LeaseState::Leased, 1, 0, &b"held"[..]));
    // Ages are read from a clock that moves by ticks (up to 10 ms).
    assert!(r.age >= Duration::from_millis(20) && r.due > Duration::from_secs(25), "{r:?}");
    let s = view.lease_stats().unwrap();
    assert_eq!(s.in_flight, 1);
    assert!(s.oldest.unwrap() >= Duration::from_millis(20), "{s:?}");
    q.ack(&l).unwrap();
    assert!(view.peek_leases(10).is_empty());
    assert_eq!(view.lease_stats().unwrap().oldest, None);
}

/// A table of 100,000 entries, filled: every lease call finds its entry
/// through the table's indexes (no scan), and stays exact: a full table
/// refuses one more lease, records released or acknowledged in scattered
/// order are each delivered again or gone exactly once, and leasing with
/// 99,000 leases in flight costs about what it costs with none.
#[test]
fn a_full_table_of_100000_leases_stays_exact_and_fast() {
    const MAX: u64 = 100_000;
    const RECORDS: u64 = 150_000;
    let dir = TempDir::new("leases", "big");
    let q = lease_queue(&dir, 1, RECORDS, LeaseSpec { max_leases: MAX, ..leases(3_600_000) });
    for r in 0..RECORDS {
        q.push(&r.to_le_bytes()).unwrap();
    }
    let take = |q: &Queue| {
        let mut o = out();
        let (n, l) = q.pop_lease(&mut o, Wait::NoWait, Duration::ZERO)?;
        assert_eq!(n, 8);
        Ok::<_, tvm::Error>((u64::from_le_bytes(o[..8].try_into().unwrap()), l))
    };
    // Filled; the first and the last thousand leases timed.
    let mut held = Vec::with_capacity(MAX as usize);
    let mut timed = [Duration::ZERO; 2];
    for k in 0..MAX {
        let t = Instant::now();
        held.push(take(&q).unwrap());
        match k {
            0..1000 => timed[0] += t.elapsed(),
            99_000.. => timed[1] += t.elapsed(),
            _ => {}
        }
    }
    assert!(
        timed[1] < timed[0] * 20 + Duration::from_millis(50),
        "1,000 leases took {:?} with 99,000 in flight against {:?} with none",
        timed[1],
        timed[0]
    );
    assert_eq!(code(take(&q)), LEASE_LIMIT, "the table is full");
    assert_eq!(held.iter().map(|h| h.0).collect::<Vec<_>>(), (0..MAX).collect::<Vec<_>>());
    // Interleaved across the table: a third released (they wait in the
    // table, before the queue's records), a third acknowledged, a third kept.
    let mut delivered = vec![0u32; RECORDS as usize];
    let mut kept = Vec::new();
    for (k, (r, l)) in held.into_iter().enumerate() {
        match k % 3 {
            0 => q.release(&l, Duration::ZERO).unwrap(),
            1 => {
                q.ack(&l).unwrap();
                delivered[r as usize] += 1;
            }
            _ => kept.push((r, l)),
        }
    }
    let s = q.lease_stats().unwrap();
    assert_eq!((s.in_flight, s.waiting), (kept.len() as u64, MAX / 3 + 1));
    // Everything else, acknowledged at once (one lease in flight besides
    // the kept ones); released records come first, delivered a second time.
    let mut again = 0;
    while let Ok((r, l)) = take(&q) {
        if l.deliveries() == 2 {
            again += 1;
        } else {
            assert_eq!(l.deliveries(), 1);
            assert!(r >= MAX, "record {r}: a first delivery of a record leased before");
        }
        assert!(l.deliveries() == 2 || again == MAX / 3 + 1, "the waiting ones come first");
        q.ack(&l).unwrap();
        delivered[r as usize] += 1;
    }
    assert_eq!(again, MAX / 3 + 1);
    for (r, l) in kept {
        q.ack(&l).unwrap();
        delivered[r as usize] += 1;
    }
    assert!(delivered.iter().all(|&d| d == 1), "every record acknowledged once");
    let s = q.lease_stats().unwrap();
    assert_eq!((s.in_flight, s.waiting, s.redelivered, s.released), (0, 0, MAX / 3 + 1, MAX / 3 + 1));
    assert_eq!(q.depth(), 0);
}

/// `ack_pop_lease`: the acknowledgement and the next lease in one call; an
/// acknowledgement that fails takes nothing; one that succeeds before an
/// empty queue leaves nothing in flight.
#[test]
fn ack_pop_lease_acknowledges_then_leases() {
    let dir = TempDir::new("leases", "ackpop");
    let q = lease_queue(&dir, 1, 8, leases(30_000));
    for r in [b"a", b"b", b"c"] {
        q.push(r).unwrap();
    }
    let mut o = out();
    let (_, first) = q.pop_lease(&mut o, Wait::NoWait, Duration::ZERO).unwrap();
    let (n, second) = q.ack_pop_lease(&first, &mut o, Wait::NoWait, Duration::ZERO).unwrap().unwrap();
    assert_eq!((&o[..n], second.deliveries()), (&b"b"[..], 1));
    assert_eq!(code(q.ack(&first)), LEASE_EXPIRED, "acknowledged already");
    assert_eq!(code(q.ack_pop_lease(&first, &mut o, Wait::NoWait, Duration::ZERO)), LEASE_EXPIRED);
    assert_eq!(q.depth(), 1, "a failed acknowledgement takes nothing");
    let (n, third) = q.ack_pop_lease(&second, &mut o, Wait::NoWait, Duration::ZERO).unwrap().unwrap();
    assert_eq!(&o[..n], b"c");
    let empty = q.ack_pop_lease(&third, &mut o, Wait::NoWait, Duration::ZERO).unwrap();
    assert_eq!(code(empty), NO_DATA_FOUND);
    let s = q.lease_stats().unwrap();
    assert_eq!((s.in_flight, s.waiting, q.depth()), (0, 0, 0));
}

/// `ack_pop_lease` claims the acknowledged entry for the next record, but a
/// record waiting for another delivery, due, comes first; no entry is lost
/// either way, nor when the queue is empty: a table of two entries keeps
/// going record after record.
#[test]
fn ack_pop_lease_takes_a_waiting_record_first_and_loses_no_entry() {
    let dir = TempDir::new("leases", "ackpop-ready");
    let q = lease_queue(&dir, 1, 64, LeaseSpec { max_leases: 2, ..leases(30_000) });
    for r in [b"a", b"b", b"c"] {
        q.push(r).unwrap();
    }
    let mut o = out();
    let (_, a) = q.pop_lease(&mut o, Wait::NoWait, Duration::ZERO).unwrap();
    let (_, b) = q.pop_lease(&mut o, Wait::NoWait, Duration::ZERO).unwrap();
    q.release(&b, Duration::ZERO).unwrap();
    let (n, again) = q.ack_pop_lease(&a, &mut o, Wait::NoWait, Duration::ZERO).unwrap().unwrap();
    assert_eq!((&o[..n], again.deliveries()), (&b"b"[..], 2), "the waiting record first");
    let (n, c) = q.ack_pop_lease(&again, &mut o, Wait::NoWait, Duration::ZERO).unwrap().unwrap();
    assert_eq!((&o[..n], c.deliveries()), (&b"c"[..], 1));
    let mut last = c;
    for round in 0..20u8 {
        let empty = q.ack_pop_lease(&last, &mut o, Wait::NoWait, Duration::ZERO).unwrap();
        assert_eq!(code(empty), NO_DATA_FOUND);
        assert_eq!(q.lease_stats().unwrap().in_flight, 0, "round {round}");
        q.push(&[round]).unwrap();
        q.push(&[round, round]).unwrap();
        let (_, first) = q.pop_lease(&mut o, Wait::NoWait, Duration::ZERO).unwrap();
        let (n, next) = q.ack_pop_lease(&first, &mut o, Wait::NoWait, Duration::ZERO).unwrap().unwrap();
        assert_eq!(&o[..n], &[round, round]);
        last = next;
    }
    q.ack(&last).unwrap();
    let s = q.lease_stats().unwrap();
    assert_eq!((s.in_flight, s.waiting, q.depth()), (0, 0, 0));
}

/// A snapshot without the lease scan has every counter of the full one, its
/// two scanned gauges zero; the scan's size is the lease table's.
#[test]
fn a_snapshot_without_the_lease_scan_leaves_only_the_scanned_gauges_out() {
    let dir = TempDir::new("leases", "snapshot-scan");
    let q = lease_queue(&dir, 1, 16, LeaseSpec { max_leases: 64, ..leases(60_000) });
    for i in 0..3u8 {
        q.push(&[i; SIZE as usize]).unwrap();
    }
    let mut out = [0u8; SIZE as usize];
    let (_, held) = q.pop_lease(&mut out, Wait::NoWait, Duration::ZERO).unwrap();
    let (_, released) = q.pop_lease(&mut out, Wait::NoWait, Duration::ZERO).unwrap();
    q.release(&released, Duration::from_secs(60)).unwrap();
    let full = q.snapshot();
    assert_eq!((full.leases_in_flight, full.leases_waiting), (1, 1));
    let cheap = q.snapshot_without_lease_scan();
    assert_eq!((cheap.leases_in_flight, cheap.leases_waiting), (0, 0));
    assert_eq!(tvm::Snapshot { leases_in_flight: 1, leases_waiting: 1, ..cheap }, full);
    assert_eq!(q.lease_scan_len(), 64);
    q.ack(&held).unwrap();
    Queue::create(dir.path(), 2, &Spec::new(4, SIZE)).unwrap();
    assert_eq!(Queue::inspect(dir.path(), 2).unwrap().lease_scan_len(), 0, "no lease table");
}
