//! Model checking with loom: `RUSTFLAGS="--cfg loom" cargo test --release --lib loom`
//! (see `make loom`). Every interleaving of 2-3 threads, up to the
//! preemption bound, is explored; a "dead" process is a thread that claims a
//! slot, says who it is, and stops.

use super::*;
use loom::sync::Arc;
use loom::sync::atomic::AtomicBool;
use loom::thread;

fn model(f: impl Fn() + Sync + Send + 'static) {
    model_bounded(3, f);
}

/// Explores every interleaving with up to `preemptions` forced switches.
fn model_bounded(preemptions: usize, f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(preemptions);
    b.max_branches = 100_000;
    b.check(f);
}

fn ring(cap: usize) -> Arc<Ring<HeapStorage>> {
    Arc::new(Ring::new(HeapStorage::new(cap, 1), cap as u64, 1))
}

/// An announcement kept where tests can see it.
#[derive(Default)]
struct Recorder(loom::sync::atomic::AtomicU64);
impl Announce for Recorder {
    fn claiming(&self, role: Holder, first: u64) {
        self.0.store(intent_word(role, first), Ordering::SeqCst);
    }
    fn idle(&self) {
        self.0.store(IDLE, Ordering::SeqCst);
    }
}

/// The queue's rule with these recorders as the live participants: a
/// holder announced by one of them is alive and waited for; any other is
/// dead (a test leaves out the recorders of threads that "die", or that
/// are wrongly believed dead).
struct Alive(Vec<Arc<Recorder>>);
impl Stall for Alive {
    fn decide(&mut self, _: u64, holder: Holder, at: u64) -> Verdict {
        if self.0.iter().any(|r| covers(r.0.load(Ordering::SeqCst), holder, at)) {
            thread::yield_now();
            Verdict::Wait
        } else {
            Verdict::Recover
        }
    }
}

fn recorder() -> Arc<Recorder> {
    Arc::new(Recorder::default())
}

fn push_retry(r: &Ring<HeapStorage>, v: u8, ann: &impl Announce, stall: &mut impl Stall) {
    loop {
        match r.push(&[v], ann, stall) {
            Ok(()) => return,
            Err(RingError::Full) => thread::yield_now(),
            Err(e) => panic!("push {v}: {e:?}"),
        }
    }
}

fn try_pop(r: &Ring<HeapStorage>, ann: &impl Announce, stall: &mut impl Stall) -> Option<u8> {
    let mut out = [0u8; 1];
    match r.pop(&mut out, ann, stall) {
        Ok(1) => Some(out[0]),
        Err(RingError::Empty) => None,
        other => panic!("pop: {other:?}"),
    }
}

fn pop_n(r: &Ring<HeapStorage>, n: usize, ann: &impl Announce, stall: &mut impl Stall) -> Vec<u8> {
    let mut got = Vec::new();
    while got.len() < n {
        match try_pop(r, ann, stall) {
            Some(v) => got.push(v),
            None => thread::yield_now(),
        }
    }
    got
}

#[test]
fn loom_two_producers_exactly_once_in_order() {
    model(|| {
        let r = ring(3);
        let a = {
            let r = r.clone();
            thread::spawn(move || {
                r.push(&[1], &Silent, &mut NeverRecover).unwrap();
                r.push(&[2], &Silent, &mut NeverRecover).unwrap();
            })
        };
        r.push(&[3], &Silent, &mut NeverRecover).unwrap();
        a.join().unwrap();
        let got = pop_n(&r, 3, &Silent, &mut NeverRecover);
        let mut sorted = got.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, [1, 2, 3]);
        let pos = |v| got.iter().position(|&x| x == v).unwrap();
        assert!(pos(1) < pos(2), "producer order broken: {got:?}");
        assert_eq!(try_pop(&r, &Silent, &mut NeverRecover), None);
    });
}

#[test]
fn loom_two_consumers_take_each_record_once() {
    model(|| {
        let r = ring(2);
        r.push(&[1], &Silent, &mut NeverRecover).unwrap();
        r.push(&[2], &Silent, &mut NeverRecover).unwrap();
        let other = {
            let r = r.clone();
            thread::spawn(move || try_pop(&r, &Silent, &mut NeverRecover))
        };
        let mine = try_pop(&r, &Silent, &mut NeverRecover);
        let theirs = other.join().unwrap();
        let mut got: Vec<u8> = [mine, theirs].into_iter().flatten().collect();
        got.sort_unstable();
        assert_eq!(got, [1, 2], "each record exactly once");
        assert_eq!(try_pop(&r, &Silent, &mut NeverRecover), None);
    });
}

#[test]
fn loom_batches_race_exactly_once_in_order() {
    model(|| {
        let r = ring(2);
        let p = {
            let r = r.clone();
            thread::spawn(move || {
                let mut sent = 0u8;
                while sent < 3 {
                    let recs: Vec<u8> = (sent + 1..=3).collect();
                    let (n, err) = r.push_batch(&recs, 1, &Silent, &mut NeverRecover);
                    assert!(matches!(err, None | Some(RingError::Full)), "{err:?}");
                    sent += n as u8;
                    if n == 0 {
                        thread::yield_now();
                    }
                }
            })
        };
        let mut got = Vec::new();
        let (mut out, mut lens) = ([0u8; 2], [0usize; 2]);
        while got.len() < 3 {
            let (n, err) = r.pop_batch(&mut out, 1, &mut lens, &Silent, &mut NeverRecover);
            assert!(matches!(err, None | Some(RingError::Empty)), "{err:?}");
            got.extend_from_slice(&out[..n]);
            if n == 0 {
                thread::yield_now();
            }
        }
        p.join().unwrap();
        assert_eq!(got, [1, 2, 3]);
    });
}

#[test]
fn loom_wrap_around_keeps_fifo() {
    model(|| {
        let r = ring(1);
        let p = {
            let r = r.clone();
            thread::spawn(move || {
                for v in 1..=3 {
                    push_retry(&r, v, &Silent, &mut NeverRecover);
                }
            })
        };
        assert_eq!(pop_n(&r, 3, &Silent, &mut NeverRecover), [1, 2, 3]);
        p.join().unwrap();
    });
}

#[test]
fn loom_capacity_is_exact_under_contention() {
    model(|| {
        let r = ring(1);
        let other = {
            let r = r.clone();
            thread::spawn(move || r.push(&[1], &Silent, &mut NeverRecover))
        };
        let mine = r.push(&[2], &Silent, &mut NeverRecover);
        let theirs = other.join().unwrap();
        let outcomes = [mine, theirs];
        assert_eq!(outcomes.iter().filter(|o| o.is_ok()).count(), 1, "{outcomes:?}");
        assert!(outcomes.contains(&Err(RingError::Full)));
    });
}

#[test]
fn loom_pop_racing_push_sees_record_or_empty_never_loses_it() {
    model(|| {
        let r = ring(2);
        let p = {
            let r = r.clone();
            thread::spawn(move || r.push(&[7], &Silent, &mut NeverRecover).unwrap())
        };
        let first = try_pop(&r, &Silent, &mut NeverRecover);
        p.join().unwrap();
        let rest = try_pop(&r, &Silent, &mut NeverRecover);
        assert_eq!((first.is_some() as u8) + (rest.is_some() as u8), 1, "{first:?} {rest:?}");
        assert_eq!(first.or(rest), Some(7));
    });
}

/// A record published again beyond the tail (its consumer died, no
/// producer came round to it) is reached by a consumer that finds the
/// ring empty, while a producer races it for the tail: each record
/// exactly once.
#[test]
fn loom_stranded_record_reached_while_a_producer_pushes() {
    model(|| {
        let r = ring(3);
        for v in [10, 11, 12] {
            r.push(&[v], &Silent, &mut NeverRecover).unwrap();
        }
        assert_eq!(try_pop(&r, &Silent, &mut NeverRecover), Some(10));
        // 11's consumer dies holding it; 12 is taken.
        let _dead = r.claim_pop(&Silent, &mut NeverRecover).unwrap();
        assert_eq!(try_pop(&r, &Silent, &mut NeverRecover), Some(12));
        // Published again at position 4, beyond the tail (3).
        assert_eq!(r.repair(|_, at| at == 1, false), (0, 1));
        let p = {
            let r = r.clone();
            thread::spawn(move || push_retry(&r, 13, &Silent, &mut NeverRecover))
        };
        let mut got = pop_n(&r, 2, &Silent, &mut NeverRecover);
        p.join().unwrap();
        got.sort_unstable();
        assert_eq!(got, [11, 13]);
        assert_eq!(try_pop(&r, &Silent, &mut NeverRecover), None);
        assert_eq!(r.depth(), 0);
    });
}

#[test]
fn loom_dead_producer_is_skipped() {
    model(|| {
        let r = ring(2);
        let dead = {
            let r = r.clone();
            // Claims a position (announcing it) and dies.
            thread::spawn(move || {
                let _ = r.claim_push(&*recorder(), &mut NeverRecover).unwrap();
            })
        };
        let (live_ann, main_ann) = (recorder(), recorder());
        let live = {
            let (r, ann) = (r.clone(), live_ann.clone());
            thread::spawn(move || r.push(&[5], &*ann, &mut NeverRecover).unwrap())
        };
        let mut stall = Alive(vec![live_ann]);
        assert_eq!(pop_n(&r, 1, &*main_ann, &mut stall), [5]);
        dead.join().unwrap();
        live.join().unwrap();
        assert_eq!(try_pop(&r, &*main_ann, &mut stall), None);
        // The ring goes on: both slots are usable again.
        r.push(&[6], &*main_ann, &mut stall).unwrap();
        r.push(&[8], &*main_ann, &mut stall).unwrap();
        assert_eq!(pop_n(&r, 2, &*main_ann, &mut stall), [6, 8]);
    });
}

#[test]
fn loom_slow_producer_is_either_delivered_or_told() {
    model(|| {
        let r = ring(2);
        let done = Arc::new(AtomicBool::new(false));
        let slow = {
            let (r, done) = (r.clone(), done.clone());
            thread::spawn(move || {
                let result = r.push(&[9], &*recorder(), &mut NeverRecover);
                done.store(true, Ordering::SeqCst);
                result
            })
        };
        // The producer is wrongly believed dead (an unknown holder past
        // the unblock timeout): the consumer may recover its slot.
        let mut stall = Alive(vec![]);
        let mut delivered = 0;
        loop {
            match try_pop(&r, &Silent, &mut stall) {
                Some(9) => delivered += 1,
                Some(v) => panic!("unexpected {v}"),
                None if done.load(Ordering::SeqCst) => break,
                None => thread::yield_now(),
            }
        }
        let result = slow.join().unwrap();
        while let Some(v) = try_pop(&r, &Silent, &mut stall) {
            assert_eq!(v, 9);
            delivered += 1;
        }
        match result {
            Ok(()) => assert_eq!(delivered, 1),
            Err(RingError::Robbed) => assert_eq!(delivered, 0),
            Err(e) => panic!("{e:?}"),
        }
    });
}

#[test]
fn loom_dead_consumer_record_is_delivered_again() {
    model(|| {
        let r = ring(1);
        r.push(&[1], &Silent, &mut NeverRecover).unwrap();
        let dead = {
            let r = r.clone();
            // Takes the record (announcing it) and dies.
            thread::spawn(move || {
                let _ = r.claim_pop(&*recorder(), &mut NeverRecover).unwrap();
            })
        };
        dead.join().unwrap();
        let (producer_ann, main_ann) = (recorder(), recorder());
        let producer = {
            let (r, ann, other) = (r.clone(), producer_ann.clone(), main_ann.clone());
            thread::spawn(move || push_retry(&r, 2, &*ann, &mut Alive(vec![other])))
        };
        let got = pop_n(&r, 2, &*main_ann, &mut Alive(vec![producer_ann]));
        producer.join().unwrap();
        assert_eq!(got, [1, 2]);
    });
}

#[test]
fn loom_slow_consumer_is_either_delivered_or_told() {
    model(|| {
        let r = ring(1);
        r.push(&[1], &Silent, &mut NeverRecover).unwrap();
        let slow = {
            let r = r.clone();
            thread::spawn(move || {
                let c = r.claim_pop(&*recorder(), &mut NeverRecover).unwrap();
                let mut out = [0u8; 1];
                r.take(c, &mut out, true).map(|n| n.map(|_| out[0]))
            })
        };
        // The consumer is wrongly believed dead: the producer may
        // republish the record it holds.
        let main_ann = recorder();
        let producer = {
            let (r, other) = (r.clone(), main_ann.clone());
            thread::spawn(move || push_retry(&r, 2, &Silent, &mut Alive(vec![other])))
        };
        let taken = slow.join().unwrap();
        let mut got = Vec::new();
        loop {
            match try_pop(&r, &*main_ann, &mut NeverRecover) {
                Some(v) => got.push(v),
                None if got.contains(&2) => break,
                None => thread::yield_now(),
            }
        }
        producer.join().unwrap();
        match taken {
            Ok(Some(1)) => assert_eq!(got, [2]),
            Err(RingError::Robbed) => assert_eq!(got, [1, 2]),
            other => panic!("{other:?}"),
        }
    });
}

/// An announcement that every policy honours: its holder cannot be robbed.
struct Honoured(Arc<Recorder>);
impl Announce for Honoured {
    fn claiming(&self, role: Holder, first: u64) {
        self.0.claiming(role, first)
    }
    fn idle(&self) {
        self.0.idle()
    }
    fn robbable(&self) -> bool {
        false
    }
}

/// A consumer that cannot be robbed (its announcement is honoured by
/// every policy) releases with a plain store: the producer of the next
/// lap waits for it, and every record comes out once.
#[test]
fn loom_unrobbable_consumer_releases_with_a_store() {
    model(|| {
        let r = ring(1);
        r.push(&[1], &Silent, &mut NeverRecover).unwrap();
        let consumer_ann = recorder();
        let consumer = {
            let (r, ann) = (r.clone(), Honoured(consumer_ann.clone()));
            thread::spawn(move || pop_n(&r, 2, &ann, &mut NeverRecover))
        };
        push_retry(&r, 2, &Silent, &mut Alive(vec![consumer_ann]));
        assert_eq!(consumer.join().unwrap(), [1, 2]);
    });
}

/// A producer that cannot be robbed publishes with a plain store: a
/// consumer waiting for its record (judging it by its announcement) gets
/// each record once, in order, and the producer's next lap waits for the
/// consumer's release.
#[test]
fn loom_unrobbable_producer_publishes_with_a_store() {
    model(|| {
        let r = ring(1);
        let producer_ann = recorder();
        let producer = {
            let (r, ann) = (r.clone(), Honoured(producer_ann.clone()));
            thread::spawn(move || {
                push_retry(&r, 1, &ann, &mut NeverRecover);
                push_retry(&r, 2, &ann, &mut NeverRecover);
            })
        };
        let got = pop_n(&r, 2, &Silent, &mut Alive(vec![producer_ann]));
        producer.join().unwrap();
        assert_eq!(got, [1, 2]);
    });
}

/// An `interval` ring's seal pass (sealing a record it read) racing the
/// record's consumer (erasing its checksum and releasing the slot with a
/// store) and the next lap's producer (publishing unsealed): the old
/// record's checksum never ends beside the next lap's record.
#[test]
fn loom_a_seal_pass_never_writes_back_an_erased_checksum() {
    const CHECK: u32 = 0x5ea1_c0de;
    model(|| {
        let r = Arc::new(Ring::new(HeapStorage::new(1, 1), 1, 1).erasing_seals(true));
        r.push(&[1], &Silent, &mut NeverRecover).unwrap();
        let consumer = {
            let r = r.clone();
            thread::spawn(move || {
                let ann = Honoured(recorder());
                let got = pop_n(&r, 1, &ann, &mut NeverRecover);
                push_retry(&r, 2, &Silent, &mut NeverRecover);
                got
            })
        };
        // The pass read the record at lap 0 (published) and sealed it.
        r.seal_if_held(0, 0, PUBLISHED, CHECK);
        assert_eq!(consumer.join().unwrap(), [1]);
        let slot = r.storage().slot(0);
        assert_eq!(slot.seq.load(Ordering::SeqCst), r.add_lap(0) | PUBLISHED);
        assert_ne!(slot.check.load(Ordering::SeqCst), CHECK, "the consumed record's checksum beside the next record");
    });
}
