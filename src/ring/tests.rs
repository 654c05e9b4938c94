//! Unit tests of the ring (single-threaded cases, recovery, batches, threads).

use super::*;
use std::collections::HashMap;
use std::sync::Arc;

fn ring(cap: usize, size: usize) -> Ring<HeapStorage> {
    Ring::new(HeapStorage::new(cap, size), cap as u64, size)
}

fn push(r: &Ring<HeapStorage>, v: &[u8]) -> Result<(), RingError> {
    r.push(v, &Silent, &mut NeverRecover)
}

fn pop(r: &Ring<HeapStorage>) -> Result<Vec<u8>, RingError> {
    let mut out = vec![0u8; r.record_size()];
    let n = r.pop(&mut out, &Silent, &mut NeverRecover)?;
    out.truncate(n);
    Ok(out)
}

#[test]
fn capacity_is_exact_for_odd_sizes() {
    for cap in [1usize, 2, 3, 5, 7, 100, 127, 128, 129, 1000, 4095] {
        let r = ring(cap, 8);
        for i in 0..cap {
            push(&r, &(i as u64).to_le_bytes()).unwrap_or_else(|e| panic!("cap {cap}: push {i}: {e:?}"));
        }
        assert_eq!(push(&r, b"x"), Err(RingError::Full), "cap {cap}");
        assert_eq!(r.depth(), cap as u64);
        for i in 0..cap {
            assert_eq!(pop(&r).unwrap(), (i as u64).to_le_bytes(), "cap {cap}");
        }
        assert_eq!(pop(&r), Err(RingError::Empty), "cap {cap}");
        assert_eq!(r.depth(), 0);
    }
}

#[test]
fn wraps_around_many_times_in_order() {
    for cap in [1usize, 3, 10, 33] {
        let r = ring(cap, 16);
        let mut next_in = 0u64;
        let mut next_out = 0u64;
        // Irregular batches so that head and tail cross the lap boundary at
        // every offset.
        for round in 0..2000u64 {
            let k = (round * 7 % (cap as u64 + 1)).max(1);
            for _ in 0..k {
                match push(&r, &next_in.to_le_bytes()) {
                    Ok(()) => next_in += 1,
                    Err(RingError::Full) => break,
                    Err(e) => panic!("{e:?}"),
                }
            }
            let k = (round * 5 % (cap as u64 + 1)).max(1);
            for _ in 0..k {
                match pop(&r) {
                    Ok(v) => {
                        assert_eq!(v, next_out.to_le_bytes());
                        next_out += 1;
                    }
                    Err(RingError::Empty) => break,
                    Err(e) => panic!("{e:?}"),
                }
            }
            assert_eq!(r.depth(), next_in - next_out);
        }
        assert!(next_out > 10 * cap as u64, "cap {cap}: only {next_out} records went round");
        assert_eq!(r.pushed(), next_in);
        assert_eq!(r.popped(), next_out);
    }
}

#[test]
fn lengths_are_kept() {
    let r = ring(4, 300);
    for len in [1usize, 2, 150, 299, 300] {
        let rec: Vec<u8> = (0..len).map(|i| (i % 251) as u8 + 1).collect();
        push(&r, &rec).unwrap();
        assert_eq!(pop(&r).unwrap(), rec);
    }
}

#[test]
fn empty_and_full_codes() {
    let r = ring(2, 4);
    assert_eq!(pop(&r), Err(RingError::Empty));
    push(&r, b"a").unwrap();
    push(&r, b"b").unwrap();
    assert_eq!(push(&r, b"c"), Err(RingError::Full));
    assert_eq!(pop(&r).unwrap(), b"a");
    push(&r, b"c").unwrap();
    assert_eq!(push(&r, b"d"), Err(RingError::Full));
    assert_eq!(pop(&r).unwrap(), b"b");
    assert_eq!(pop(&r).unwrap(), b"c");
    assert_eq!(pop(&r), Err(RingError::Empty));
}

#[test]
fn count_matches_positions() {
    let r = ring(5, 1);
    for i in 0..23u64 {
        assert_eq!(r.pushed(), i);
        push(&r, b"x").unwrap();
        pop(&r).unwrap();
    }
}

#[test]
fn corrupted_cursor_or_seq_is_reported_not_followed() {
    let r = ring(5, 8);
    // An index beyond the capacity.
    r.storage().cursors().tail.0.pos.store(6, Ordering::Relaxed);
    assert_eq!(push(&r, b"x"), Err(RingError::Corrupt));
    r.storage().cursors().tail.0.pos.store(0, Ordering::Relaxed);
    // A seq that no lap can produce.
    r.storage().slot(0).seq.store(3, Ordering::Relaxed);
    assert_eq!(push(&r, b"x"), Err(RingError::Corrupt));
    assert_eq!(pop(&r), Err(RingError::Corrupt));
    // A published record with a length beyond the record size.
    let r = ring(5, 8);
    push(&r, b"abc").unwrap();
    r.storage().slot(0).len.store(9, Ordering::Relaxed);
    assert_eq!(pop(&r), Err(RingError::Corrupt));
    // ...after which the queue goes on.
    push(&r, b"def").unwrap();
    assert_eq!(pop(&r).unwrap(), b"def");
}

/// A policy for tests: the holders of the positions numbered in `dead`
/// are dead, others alive.
struct Dead(Vec<u64>);
impl Stall for Dead {
    fn decide(&mut self, _: u64, _: Holder, at: u64) -> Verdict {
        if self.0.contains(&at) { Verdict::Recover } else { Verdict::Wait }
    }
}

#[test]
fn abandoned_push_is_skipped() {
    let r = ring(3, 8);
    push(&r, b"one").unwrap();
    // A producer claims position 1 and dies before publishing.
    let c = r.storage().cursors();
    c.tail.0.pos.store(2, Ordering::Relaxed);
    push(&r, b"three").unwrap();
    let mut out = [0u8; 8];
    let mut policy = Dead(vec![1]);
    assert_eq!(r.pop(&mut out, &Silent, &mut policy), Ok(3));
    assert_eq!(&out[..3], b"one");
    assert_eq!(r.pop(&mut out, &Silent, &mut policy), Ok(5));
    assert_eq!(&out[..5], b"three");
    assert_eq!(r.pop(&mut out, &Silent, &mut policy), Err(RingError::Empty));
    // The late producer's publish fails: it reports instead of corrupting.
    assert_eq!(r.fill(Claim { lap: 0, index: 1, seq: 0 }, b"late"), Err(RingError::Robbed));
}

#[test]
fn stranded_record_is_delivered_again() {
    let r = ring(2, 8);
    push(&r, b"a").unwrap();
    push(&r, b"b").unwrap();
    // A consumer takes "a" (position 0: moves head) and dies before releasing.
    r.storage().cursors().head.0.store(1, Ordering::Relaxed);
    let mut policy = Dead(vec![0]);
    // The next push reaches slot 0, finds it stranded, republishes "a"
    // there; the ring then holds "b" and "a", so its own record does not fit.
    assert_eq!(r.push(b"c", &Silent, &mut policy), Err(RingError::Full));
    let mut out = [0u8; 8];
    let mut got = Vec::new();
    while let Ok(n) = r.pop(&mut out, &Silent, &mut policy) {
        got.push(out[..n].to_vec());
    }
    assert_eq!(got, [b"b".to_vec(), b"a".to_vec()]);
    r.push(b"c", &Silent, &mut policy).unwrap();
    assert_eq!(r.pop(&mut out, &Silent, &mut policy), Ok(1));
    assert_eq!(out[0], b'c');
    assert_eq!(r.pop(&mut out, &Silent, &mut policy), Err(RingError::Empty));
}

#[test]
fn repair_recovers_what_nobody_waits_on() {
    let r = ring(4, 8);
    push(&r, b"a").unwrap();
    push(&r, b"b").unwrap();
    // A consumer takes "a" (position 0) and dies holding it.
    r.claim_pop(&Silent, &mut NeverRecover).unwrap();
    // A producer claims position 2 and dies before writing.
    r.claim_push(&Silent, &mut NeverRecover).unwrap();
    // A live producer is in the middle of a push at position 3.
    let live = r.claim_push(&Silent, &mut NeverRecover).unwrap();
    let dead = |_, at: u64| at == 0 || at == 2;
    assert_eq!(r.repair(dead, false), (1, 1));
    // Nothing more to do, and the live holder is untouched.
    assert_eq!(r.repair(dead, false), (0, 0));
    r.fill(live, b"c").unwrap();
    let mut got = Vec::new();
    while let Ok(v) = pop(&r) {
        got.push(v);
    }
    // "b", then the dead producer's skipped claim, "c"; "a" is published
    // again one lap later, beyond the tail: the consumer that finds the
    // ring empty moves the tail to it.
    assert_eq!(got, [b"b".to_vec(), b"c".to_vec(), b"a".to_vec()]);
    push(&r, b"d").unwrap();
    assert_eq!(pop(&r).unwrap(), b"d");
    assert_eq!(pop(&r), Err(RingError::Empty));
}

/// A ring filled once, no producer after; a consumer dies holding a
/// record, which a repair (not alone) publishes again one lap later,
/// beyond the tail. It must still be popped once the records before it
/// are, and not be taken for room by the passing.
#[test]
fn a_record_published_again_beyond_the_tail_is_reached_without_pushes() {
    let cap = 300u64;
    let r = ring(cap as usize, 8);
    for v in 0..cap {
        push(&r, &v.to_le_bytes()).unwrap();
    }
    let mut seen = Vec::new();
    for _ in 0..100 {
        seen.push(u64::from_le_bytes(pop(&r).unwrap()[..8].try_into().unwrap()));
    }
    // A consumer takes record 100 and dies holding it; record 101 too,
    // and 102 is held by a live (slow) consumer.
    let dead_claims =
        [r.claim_pop(&Silent, &mut NeverRecover).unwrap(), r.claim_pop(&Silent, &mut NeverRecover).unwrap()];
    let live = r.claim_pop(&Silent, &mut NeverRecover).unwrap();
    assert_eq!(dead_claims.len(), 2);
    assert_eq!(r.repair(|_, at| at == 100 || at == 101, false), (0, 2));
    assert_eq!(r.depth(), cap - 103, "published again beyond the tail: not counted yet");
    let mut out = [0u8; 8];
    assert_eq!(r.take(live, &mut out, true), Ok(Some(8)));
    seen.push(u64::from_le_bytes(out));
    while let Ok(v) = pop(&r) {
        seen.push(u64::from_le_bytes(v[..8].try_into().unwrap()));
        // The tail is moved a few positions at a time, never far ahead.
        assert!(r.depth() <= cap - 103 + 2 * MAX_CLAIM);
    }
    seen.sort_unstable();
    assert_eq!(seen, (0..cap).collect::<Vec<_>>(), "every record once");
    assert_eq!(r.depth(), 0);
    // The ring goes on normally, at full capacity.
    for v in 0..cap {
        push(&r, &v.to_le_bytes()).unwrap();
    }
    assert_eq!(push(&r, b"x"), Err(RingError::Full));
    for v in 0..cap {
        assert_eq!(pop(&r).unwrap(), v.to_le_bytes());
    }
    assert_eq!(pop(&r), Err(RingError::Empty));
}

/// A corrupted `stranded` word (beyond any position a record published
/// again can hold) is ignored: pops of an empty ring say so at once.
#[test]
fn a_corrupted_stranded_mark_is_ignored() {
    let r = std::sync::Arc::new(ring(4, 8));
    push(&r, b"a").unwrap();
    assert_eq!(pop(&r).unwrap(), b"a");
    for bad in [u64::MAX, 1 << 40, 6] {
        r.storage().cursors().tail.0.stranded.store(bad, Ordering::Relaxed);
        // Followed, such a mark made the pop step over empty records
        // it kept making, forever: a failure here, not a hung test.
        let (tx, rx) = std::sync::mpsc::channel();
        let r2 = r.clone();
        std::thread::spawn(move || tx.send(pop(&r2)));
        let got = rx.recv_timeout(std::time::Duration::from_secs(10));
        assert_eq!(got, Ok(Err(RingError::Empty)), "mark {bad}");
        assert_eq!(r.depth(), 0, "mark {bad}: no empty records made");
    }
    // A mark a lap past the head at most is followed (here: nothing
    // but free slots, which become empty records stepped over).
    r.storage().cursors().tail.0.stranded.store(4, Ordering::Relaxed);
    assert_eq!(pop(&r), Err(RingError::Empty));
    assert_eq!(r.pushed(), 4);
    push(&r, b"b").unwrap();
    assert_eq!(pop(&r).unwrap(), b"b");
}

/// A consumer that finds the ring empty moves the tail towards a record
/// published again, but not past a slot an earlier consumer still
/// holds; once that slot is released, the next one goes on.
#[test]
fn reaching_a_stranded_record_waits_for_slots_still_held() {
    let r = ring(4, 8);
    for v in [b"a", b"b", b"c", b"d"] {
        push(&r, v).unwrap();
    }
    // "a" and "b" taken; "a"'s consumer is slow, "b"'s dies.
    let slow = r.claim_pop(&Silent, &mut NeverRecover).unwrap();
    let _dead = r.claim_pop(&Silent, &mut NeverRecover).unwrap();
    assert_eq!(r.repair(|_, at| at == 1, false), (0, 1));
    assert_eq!(pop(&r).unwrap(), b"c");
    assert_eq!(pop(&r).unwrap(), b"d");
    // "b" lies at position 5 (slot 1, next lap); position 4 is slot 0,
    // still "a"'s: the tail cannot pass it yet.
    assert_eq!(pop(&r), Err(RingError::Empty));
    assert_eq!(r.depth(), 0);
    let mut out = [0u8; 8];
    assert_eq!(r.take(slow, &mut out, true), Ok(Some(1)));
    assert_eq!(out[0], b'a');
    // Now position 4 becomes an empty record, and "b" is reached.
    assert_eq!(pop(&r).unwrap(), b"b");
    assert_eq!(pop(&r), Err(RingError::Empty));
    assert_eq!(r.depth(), 0);
    push(&r, b"e").unwrap();
    assert_eq!(pop(&r).unwrap(), b"e");
}

#[test]
fn exclusive_repair_makes_stranded_records_poppable_at_once() {
    let r = ring(4, 8);
    for v in [b"a", b"b", b"c"] {
        push(&r, v).unwrap();
    }
    // Two consumers take "a" and "b" and die holding them.
    for _ in 0..2 {
        r.claim_pop(&Silent, &mut NeverRecover).unwrap();
    }
    assert_eq!(r.repair(|_, _| true, true), (0, 2));
    let mut got = Vec::new();
    while let Ok(v) = pop(&r) {
        got.push(v);
    }
    assert_eq!(got, [b"c".to_vec(), b"a".to_vec(), b"b".to_vec()]);
    // The ring goes on normally.
    push(&r, b"d").unwrap();
    assert_eq!(pop(&r).unwrap(), b"d");
}

/// A record published again by a repair lands on its slot's next lap,
/// whose position a consumer that died too had already claimed (waiting
/// there for a producer that died as well): the repair publishes it again
/// once more, so that the living reach it.
#[test]
fn a_repair_steps_a_record_past_a_dead_consumer_of_its_next_lap() {
    let r = ring(4, 8);
    for v in [b"a", b"b", b"c", b"d"] {
        push(&r, v).unwrap();
    }
    // A consumer takes "a" (position 0) and dies holding it.
    r.claim_pop(&Silent, &mut NeverRecover).unwrap();
    for _ in 0..3 {
        pop(&r).unwrap();
    }
    // A producer claims position 4 (slot 0, still held) and dies waiting;
    // a consumer claims it too and dies waiting for that producer.
    assert_eq!(r.claim_range(Holder::Producer, 1, &Silent).unwrap().1, 1);
    assert_eq!(r.claim_range(Holder::Consumer, 1, &Silent).unwrap().1, 1);
    assert_eq!(r.repair(|_, _| true, true), (0, 2));
    let mut got = Vec::new();
    while let Ok(v) = pop(&r) {
        got.push(v);
    }
    assert_eq!(got, [b"a".to_vec()]);
    push(&r, b"e").unwrap();
    assert_eq!(pop(&r).unwrap(), b"e");
}

/// A producer and a consumer of the same position both died (the consumer
/// waiting for the producer): the repair skips the producer's claim and
/// steps over the empty record for the consumer, so the slot is free for
/// its next lap (nobody else would release it).
#[test]
fn a_repair_frees_a_position_whose_producer_and_consumer_died() {
    let r = ring(4, 8);
    for v in [b"a", b"b", b"c", b"d"] {
        push(&r, v).unwrap();
    }
    for _ in 0..4 {
        pop(&r).unwrap();
    }
    assert_eq!(r.claim_range(Holder::Producer, 1, &Silent).unwrap().1, 1);
    assert_eq!(r.claim_range(Holder::Consumer, 1, &Silent).unwrap().1, 1);
    assert_eq!(r.repair(|_, _| true, true), (1, 0));
    // Slot 0 is free for lap 2 (position 8).
    assert_eq!(r.storage().slot(0).seq.load(Ordering::SeqCst), 2 * r.one_lap);
    for v in [b"e", b"f", b"g", b"h"] {
        push(&r, v).unwrap();
    }
    let mut got = Vec::new();
    while let Ok(v) = pop(&r) {
        got.push(v);
    }
    assert_eq!(got, [b"e".to_vec(), b"f".to_vec(), b"g".to_vec(), b"h".to_vec()]);
}

fn batch(first: u64, n: u64) -> Vec<u8> {
    (first..first + n).flat_map(|v| v.to_le_bytes()).collect()
}

#[test]
fn batches_respect_room_and_emptiness() {
    let r = ring(5, 8);
    assert_eq!(r.push_batch(&batch(0, 3), 8, &Silent, &mut NeverRecover), (3, None));
    // Room for 2 more: the batch of 4 stops there, in order.
    assert_eq!(r.push_batch(&batch(3, 4), 8, &Silent, &mut NeverRecover), (2, Some(RingError::Full)));
    assert_eq!(r.push_batch(&batch(9, 1), 8, &Silent, &mut NeverRecover), (0, Some(RingError::Full)));
    let mut out = vec![0u8; 8 * 7];
    let mut lens = [0usize; 7];
    assert_eq!(r.pop_batch(&mut out, 8, &mut lens, &Silent, &mut NeverRecover), (5, Some(RingError::Empty)));
    assert_eq!(out[..40], batch(0, 5)[..]);
    assert_eq!(lens[..5], [8; 5]);
    assert_eq!(r.pop_batch(&mut out, 8, &mut lens, &Silent, &mut NeverRecover), (0, Some(RingError::Empty)));
}

#[test]
fn batches_wrap_around_in_order() {
    for (cap, push, pop) in [(1usize, 1u64, 1usize), (3, 2, 5), (7, 5, 3), (64, 64, 63), (10, 7, 7)] {
        let r = ring(cap, 8);
        let (mut next_in, mut next_out) = (0u64, 0u64);
        let mut out = vec![0u8; 8 * pop];
        let mut lens = vec![0usize; pop];
        for _ in 0..500 {
            let (n, _) = r.push_batch(&batch(next_in, push), 8, &Silent, &mut NeverRecover);
            next_in += n as u64;
            let (n, _) = r.pop_batch(&mut out, 8, &mut lens, &Silent, &mut NeverRecover);
            for i in 0..n {
                assert_eq!(out[i * 8..(i + 1) * 8], next_out.to_le_bytes(), "cap {cap}");
                next_out += 1;
            }
        }
        assert!(next_out > 100, "cap {cap}: only {next_out} records");
        assert_eq!(r.depth(), next_in - next_out);
    }
}

#[test]
fn batch_threads_deliver_every_record_once_in_producer_order() {
    const PER: u64 = 50_000;
    let r = Arc::new(ring(37, 16));
    let producers: Vec<_> = (0..2u64)
        .map(|p| {
            let r = r.clone();
            std::thread::spawn(move || {
                let mut i = 0;
                while i < PER {
                    let k = (i % 13 + 1).min(PER - i);
                    let recs: Vec<u8> = (i..i + k).flat_map(|v| [p.to_le_bytes(), v.to_le_bytes()].concat()).collect();
                    let (n, err) = r.push_batch(&recs, 16, &Silent, &mut NeverRecover);
                    assert!(matches!(err, None | Some(RingError::Full)), "{err:?}");
                    i += n as u64;
                    if n == 0 {
                        std::thread::yield_now();
                    }
                }
            })
        })
        .collect();
    let taken = Arc::new(AtomicU64::new(0));
    let consumers: Vec<_> = (0..2)
        .map(|_| {
            let (r, taken) = (r.clone(), taken.clone());
            std::thread::spawn(move || {
                let mut got = Vec::new();
                let mut out = vec![0u8; 16 * 9];
                let mut lens = [0usize; 9];
                while taken.load(Ordering::Relaxed) < 2 * PER {
                    let (n, err) = r.pop_batch(&mut out, 16, &mut lens, &Silent, &mut NeverRecover);
                    assert!(matches!(err, None | Some(RingError::Empty)), "{err:?}");
                    taken.fetch_add(n as u64, Ordering::Relaxed);
                    for rec in out[..n * 16].chunks(16) {
                        got.push((
                            u64::from_le_bytes(rec[..8].try_into().unwrap()),
                            u64::from_le_bytes(rec[8..].try_into().unwrap()),
                        ));
                    }
                    if n == 0 {
                        std::thread::yield_now();
                    }
                }
                got
            })
        })
        .collect();
    producers.into_iter().for_each(|t| t.join().unwrap());
    let mut seen: HashMap<u64, Vec<u64>> = HashMap::new();
    for c in consumers {
        let got = c.join().unwrap();
        let mut last: HashMap<u64, u64> = HashMap::new();
        for (p, i) in got {
            assert!(last.get(&p).is_none_or(|&prev| i > prev), "producer {p}: order");
            last.insert(p, i);
            seen.entry(p).or_default().push(i);
        }
    }
    for p in 0..2 {
        let mut v = seen.remove(&p).unwrap();
        v.sort_unstable();
        assert!(v.iter().copied().eq(0..PER), "producer {p}: a record missing or duplicated");
    }
}

#[test]
fn threads_deliver_every_record_once_in_producer_order() {
    const PRODUCERS: u64 = 3;
    const CONSUMERS: usize = 3;
    const PER: u64 = 100_000;
    let r = Arc::new(ring(61, 16));
    let mut handles = Vec::new();
    for p in 0..PRODUCERS {
        let r = r.clone();
        handles.push(std::thread::spawn(move || {
            for i in 0..PER {
                let mut rec = [0u8; 16];
                rec[..8].copy_from_slice(&p.to_le_bytes());
                rec[8..].copy_from_slice(&i.to_le_bytes());
                loop {
                    match r.push(&rec, &Silent, &mut NeverRecover) {
                        Ok(()) => break,
                        Err(RingError::Full) => std::thread::yield_now(),
                        Err(e) => panic!("{e:?}"),
                    }
                }
            }
            Vec::new()
        }));
    }
    let taken = Arc::new(AtomicU64::new(0));
    for _ in 0..CONSUMERS {
        let r = r.clone();
        let taken = taken.clone();
        handles.push(std::thread::spawn(move || {
            let mut got = Vec::new();
            let mut out = [0u8; 16];
            while taken.load(Ordering::Relaxed) < PRODUCERS * PER {
                match r.pop(&mut out, &Silent, &mut NeverRecover) {
                    Ok(n) => {
                        assert_eq!(n, 16);
                        taken.fetch_add(1, Ordering::Relaxed);
                        got.push((
                            u64::from_le_bytes(out[..8].try_into().unwrap()),
                            u64::from_le_bytes(out[8..].try_into().unwrap()),
                        ));
                    }
                    Err(RingError::Empty) => std::thread::yield_now(),
                    Err(e) => panic!("{e:?}"),
                }
            }
            got
        }));
    }
    let mut seen: HashMap<u64, Vec<u64>> = HashMap::new();
    for h in handles {
        let got = h.join().unwrap();
        // Per consumer, each producer's records come in push order.
        let mut last: HashMap<u64, u64> = HashMap::new();
        for &(p, i) in &got {
            if let Some(&prev) = last.get(&p) {
                assert!(i > prev, "producer {p}: {i} after {prev}");
            }
            last.insert(p, i);
            seen.entry(p).or_default().push(i);
        }
    }
    for p in 0..PRODUCERS {
        let mut v = seen.remove(&p).unwrap();
        v.sort_unstable();
        assert_eq!(v.len() as u64, PER, "producer {p}");
        assert!(v.iter().enumerate().all(|(k, &i)| k as u64 == i), "producer {p}: a record missing or duplicated");
    }
}
