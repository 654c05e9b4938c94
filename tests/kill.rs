//! Kill test: producer and consumer processes of tagged records, killed with
//! SIGKILL at random moments (at least 200 kills) and replaced. At the end,
//! every record whose push was acknowledged was popped exactly once, no
//! popped record was torn, nothing was popped twice, and no call waited on a
//! dead process's slot for longer than the unblock timeout plus a margin.
//!
//! How a popped record is accounted for, whatever instant a kill hits (the
//! [`common::Ledger`]):
//! - a producer publishes in shared memory how many of its records have been
//!   acknowledged (`push` returned Ok): records are numbered in order, so one
//!   counter per producer process says which must be delivered;
//! - a consumer pops straight into its in-flight buffer in shared memory,
//!   checks the record, then counts it in a shared array (one byte per
//!   record). A consumer killed between the pop and the count leaves the
//!   record in its in-flight buffer, where the checker finds it.
//!
//! `TVMQ_KILLS` (default 200) and `TVMQ_KILL_SECONDS` (default 40, the
//! longest the killing goes on) size the run.

mod common;
use common::{Children, KillPlan, Ledger, ProcLedger, Rng, child_env, child_test, record};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tvm::error::*;
use tvm::{Queue, Spec, Wait};

const QUEUE: u32 = 1;
/// Small, so that the ring wraps constantly and producers meet full queues.
const CAPACITY: u64 = 1000;
const RECORD: usize = 64;
/// Records a producer process pushes at most (then it exits and is replaced).
const MAX_SEQ: u64 = 1 << 20;
/// Producer and consumer processes, counting every replacement.
const MAX_PROCS: u32 = 4096;
const UNBLOCK_TIMEOUT_MS: u64 = 2000;
/// Allowed on top of the unblock timeout for one call (scheduling, a busy machine).
const WAIT_MARGIN_MS: u64 = 2000;

/// Records numbered 4..8 modulo 8 are full-size and pushed as one batch.
fn in_batch(seq: u64) -> bool {
    seq % 8 >= 4
}

/// Length of record `seq` of producer `proc`: 16..=64 bytes.
fn length(proc: u32, seq: u64) -> usize {
    if in_batch(seq) { RECORD } else { record::HDR + (seq as usize * 7 + proc as usize) % (RECORD - 15) }
}

/// `(proc, seq)` of a popped record of `len` bytes, if it is intact.
fn check(rec: &[u8], len: usize) -> Option<(u32, u64)> {
    let (proc, seq) = record::id(rec)?;
    if len != length(proc, seq) || rec.len() < len {
        return None;
    }
    record::decode(&rec[..len]).ok()
}

/// A record found in a killed consumer's in-flight buffer, if intact.
fn held(buf: &[u8]) -> Option<(u32, u64)> {
    let (proc, seq) = record::id(buf)?;
    check(buf, length(proc, seq))
}

fn producer(dir: &Path, ledger: &Ledger, me: u32) {
    let s = ledger.proc(me);
    let Ok(q) = Queue::open(dir, QUEUE) else { return };
    let stop = dir.join("stop");
    let mut seq = 0u64;
    while seq < MAX_SEQ && !stop.exists() {
        for _ in 0..256 {
            let started = Instant::now();
            let r = if seq % 8 == 4 && seq + 4 <= MAX_SEQ {
                // Four full-size records in one call, acknowledged together
                // (as far as they went in; the rest go one by one).
                let batch: Vec<u8> = (seq..seq + 4).flat_map(|i| record::new(me, i, RECORD)).collect();
                match q.push_many(&batch, RECORD) {
                    (0, Some(e)) => Err(e),
                    (n, _) => Ok(n as u64),
                }
            } else {
                q.push(&record::new(me, seq, length(me, seq))).map(|()| 1)
            };
            s.note_call(started);
            match r {
                Ok(n) => {
                    seq += n;
                    s.acked.store(seq, Ordering::Release);
                }
                Err(e) if e.code() == DATA_SPC_FULL => std::thread::yield_now(),
                // Its slot was recovered while it stalled: not pushed; try again.
                Err(e) if e.code() == MQUE_WAIT_ERR => {}
                Err(e) => {
                    s.unexpected.note(e.code());
                    return;
                }
            }
            if seq >= MAX_SEQ {
                break;
            }
        }
    }
}

fn consumer(dir: &Path, ledger: &Ledger, me: u32) {
    let s = ledger.proc(me);
    let Ok(q) = Queue::open(dir, QUEUE) else { return };
    let stop = dir.join("stop");
    // SAFETY: this process's own entry (the test reads it once this process is dead).
    let inflight = unsafe { s.inflight_mut(RECORD) };
    let mut n = 0u64;
    loop {
        n += 1;
        // Mostly non-blocking pops (their time is checked); sometimes a
        // short blocking one, which may sleep on an empty queue.
        let blocking = n % 16 == 0;
        let wait = if blocking { Wait::Until(Instant::now() + Duration::from_millis(20)) } else { Wait::NoWait };
        let started = Instant::now();
        let r = q.pop(inflight, wait);
        if !blocking {
            s.note_call(started);
        }
        match r {
            Ok(len) => match check(inflight, len) {
                Some((proc, seq)) => ledger.deliver(proc, seq),
                None => {
                    s.torn.fetch_add(1, Ordering::SeqCst);
                }
            },
            Err(e) if matches!(e.code(), NO_DATA_FOUND | MQUE_WAIT_TMO) => {
                if stop.exists() {
                    return;
                }
                if !blocking {
                    std::thread::sleep(Duration::from_micros(50));
                }
            }
            // The record was delivered to another consumer after this one stalled.
            Err(e) if e.code() == MQUE_WAIT_ERR => {}
            Err(e) => {
                s.unexpected.note(e.code());
                return;
            }
        }
    }
}

/// Producers in the even slots, consumers in the odd ones.
fn is_producer(slot: usize) -> bool {
    slot % 2 == 0
}

/// Child process entry: a producer or a consumer of `kill_test`.
#[test]
#[ignore = "child process of kill_test: started by it"]
fn kill_child() {
    let (role, dir, me) = (child_env("TVMQ_KILL_ROLE"), child_env("TVMQ_KILL_DIR"), child_env("TVMQ_KILL_ME"));
    let dir = PathBuf::from(dir);
    let ledger = Ledger::open(&dir, MAX_PROCS, MAX_SEQ);
    let me: u32 = me.parse().expect("process number");
    match role.as_str() {
        "producer" => producer(&dir, &ledger, me),
        _ => consumer(&dir, &ledger, me),
    }
}

#[test]
fn kill_test() {
    let plan = KillPlan::from_env("TVMQ_KILL", 200, 40);
    let tmp = common::TempDir::new("kill", "run");
    let dir = tmp.path();
    let mut spec = Spec::new(CAPACITY, RECORD as u64);
    spec.unblock_timeout_ms = UNBLOCK_TIMEOUT_MS;
    Queue::create(dir, QUEUE, &spec).unwrap();
    let ledger = Ledger::open(dir, MAX_PROCS, MAX_SEQ);

    let mut kids = Children::start(4, MAX_PROCS - 8, dir, |slot, me| {
        let role = if is_producer(slot) { "producer" } else { "consumer" };
        let mut cmd = child_test("kill_child");
        cmd.env("TVMQ_KILL_ROLE", role).env("TVMQ_KILL_DIR", dir).env("TVMQ_KILL_ME", me.to_string());
        (format!("{role} {me}"), cmd)
    });
    let started = Instant::now();
    let killed = kids.kill_randomly(&mut Rng::new(0x9e37_79b9_7f4a_7c15), (0, 59), &plan);
    // Stop: producers finish their batch and exit, consumers drain and exit.
    std::fs::write(dir.join("stop"), b"").unwrap();
    // The queue's counters as `tvmq stat` shows them, for a process that does not stop.
    let stat = || format!("{:?}", Queue::inspect(dir, QUEUE).map(|q| q.stats()));
    kids.wait_all(|| Instant::now() + Duration::from_secs(20), false, stat);
    let killing = started.elapsed();
    let next_me = kids.started;
    drop(kids);

    // What the killed processes left: attaching repairs after deaths, and
    // an explicit repair (this process is alone now) makes every recovered
    // record poppable. Then drain.
    let q = Queue::open(dir, QUEUE).unwrap();
    let repair = q.repair();
    let mut out = [0u8; RECORD];
    let mut drained = Vec::new();
    loop {
        match q.pop(&mut out, Wait::NoWait) {
            Ok(len) => drained.push(check(&out, len).expect("a torn record in the queue")),
            Err(e) if e.code() == NO_DATA_FOUND => break,
            Err(e) => panic!("drain: {e}"),
        }
    }
    let stats = q.stats();

    // The checks.
    let killed_consumers: Vec<u32> = killed.iter().filter(|k| !is_producer(k.0)).map(|k| k.1).collect();
    let audit = ledger.audit(0..next_me, killed_consumers.iter().copied(), held, &drained, None);
    let (mut max_call_ns, mut torn, mut unexpected_errors) = (0u64, 0u64, 0u64);
    let mut problems = Vec::new();
    for me in 0..next_me {
        let s: &ProcLedger = ledger.proc(me);
        torn += s.torn.load(Ordering::Relaxed);
        unexpected_errors += s.unexpected.report(&format!("process {me}"), &mut problems);
        max_call_ns = max_call_ns.max(s.max_call_ns.load(Ordering::Relaxed));
    }
    println!(
        "kill test: {} kills ({} producers, {} consumers) in {:.1} s; {} processes; {} records \
         acknowledged, {} popped ({} drained at the end, {} found in a killed \
         consumer's hands); recoveries: {} pushes skipped, {} records delivered again, {} calls told they \
         were robbed, {} sleepers uncounted; repair at the end: {:?}; longest call {:.0} ms (limit {} ms)",
        killed.len(),
        killed.len() - killed_consumers.len(),
        killed_consumers.len(),
        killing.as_secs_f64(),
        next_me,
        audit.acked,
        audit.delivered,
        drained.len(),
        audit.in_hands,
        stats.recovered_pushes,
        stats.recovered_pops,
        stats.robbed,
        stats.reconciled_waiters,
        repair,
        max_call_ns as f64 / 1e6,
        UNBLOCK_TIMEOUT_MS + WAIT_MARGIN_MS,
    );
    drop(q);
    println!(
        "problems: {} lost, {} popped twice, {torn} torn, unexpected errors: {problems:?}",
        audit.lost, audit.twice
    );
    problems.extend(audit.problems);
    assert!(
        problems.is_empty(),
        "{} problem(s), first ones: {:#?}",
        problems.len(),
        &problems[..problems.len().min(20)]
    );
    assert_eq!(torn, 0, "torn records");
    assert_eq!(unexpected_errors, 0);
    assert!(killed.len() >= plan.kills, "only {} kills in {} s", killed.len(), plan.seconds);
    assert!(audit.acked > 10_000, "too little traffic to mean anything: {}", audit.acked);
    assert!(
        max_call_ns <= (UNBLOCK_TIMEOUT_MS + WAIT_MARGIN_MS) * 1_000_000,
        "a call waited {:.0} ms",
        max_call_ns as f64 / 1e6
    );
}
