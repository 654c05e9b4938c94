//! Crash test: producer and consumer processes of tagged records, killed with
//! SIGKILL at random moments (at least 200 kills) and replaced. At the end,
//! every record whose push was acknowledged was popped exactly once, no
//! popped record was torn, nothing was popped twice, and no call waited on a
//! dead process's slot for longer than the unblock timeout plus a margin.
//!
//! How a popped record is accounted for, whatever instant a kill hits:
//! - a producer publishes in shared memory how many of its records have been
//!   acknowledged (`push` returned Ok): records are numbered in order, so one
//!   counter per producer process says which must be delivered;
//! - a consumer pops straight into its in-flight buffer in shared memory,
//!   checks the record, then counts it in a shared array (one byte per
//!   record). A consumer killed between the pop and the count leaves the
//!   record in its in-flight buffer, where the checker finds it.
//!
//! `TVMQ_CRASH_KILLS` (default 200) and `TVMQ_CRASH_SECONDS` (default 40, the
//! longest the killing goes on) size the run.

mod common;
use common::{child_env, child_test};
use memmap2::{MmapMut, MmapOptions};
use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
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
const MAX_PROCS: u64 = 4096;
const UNBLOCK_TIMEOUT_MS: u64 = 2000;
/// Allowed on top of the unblock timeout for one call (scheduling, a busy machine).
const WAIT_MARGIN_MS: u64 = 2000;

/// Per process (producer or consumer), in the shared `stats` file.
#[repr(C)]
struct ProcStats {
    /// Producer: records acknowledged (pushed with Ok), numbered 0..acked.
    acked: AtomicU64,
    /// Longest single push/pop call that did not sleep on an empty queue, in ns.
    max_call_ns: AtomicU64,
    /// Records whose content was wrong (torn or foreign).
    torn: AtomicU64,
    /// Errors no caller should ever see here.
    unexpected: AtomicU64,
    /// Last unexpected error code.
    last_error: AtomicU64,
    /// Consumer: the in-flight buffer (a record being popped and counted).
    inflight: [AtomicU8; RECORD],
    _pad: [u8; 128 - 40 - RECORD % 128],
}

fn fnv(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5u32, |h, &b| (h ^ u32::from(b)).wrapping_mul(0x0100_0193))
}

/// Records numbered 4..8 modulo 8 are full-size and pushed as one batch.
fn in_batch(seq: u32) -> bool {
    seq % 8 >= 4
}

/// Record `seq` of producer `proc`: [proc u32][seq u32][len u32][payload][fnv u32], 16..=64 bytes.
fn record(proc: u32, seq: u32) -> Vec<u8> {
    let len = if in_batch(seq) { RECORD } else { 16 + (seq as usize * 7 + proc as usize) % (RECORD - 15) };
    let mut r = Vec::with_capacity(len);
    r.extend_from_slice(&proc.to_le_bytes());
    r.extend_from_slice(&seq.to_le_bytes());
    r.extend_from_slice(&(len as u32).to_le_bytes());
    while r.len() < len - 4 {
        r.push((seq as usize + r.len() * 31) as u8);
    }
    let sum = fnv(&r);
    r.extend_from_slice(&sum.to_le_bytes());
    r
}

/// `(proc, seq)` of a popped record of `len` bytes, if it is intact.
fn check(rec: &[u8], len: usize) -> Option<(u32, u32)> {
    if !(16..=RECORD).contains(&len) || rec.len() < len {
        return None;
    }
    let word = |at: usize| u32::from_le_bytes(rec[at..at + 4].try_into().unwrap());
    let (proc, seq) = (word(0), word(4));
    (word(8) as usize == len && word(len - 4) == fnv(&rec[..len - 4]) && record(proc, seq) == rec[..len])
        .then_some((proc, seq))
}

fn map(path: &Path, len: u64) -> MmapMut {
    let f =
        OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path).expect("open shared file");
    f.set_len(len).expect("size shared file");
    // SAFETY: a file of this test's, shared with its children only.
    unsafe { MmapOptions::new().map_mut(&f) }.expect("map shared file")
}

/// The shared files of a run.
struct Shared {
    stats: MmapMut,
    seen: MmapMut,
}

impl Shared {
    fn open(dir: &Path) -> Shared {
        Shared {
            stats: map(&dir.join("stats"), MAX_PROCS * std::mem::size_of::<ProcStats>() as u64),
            seen: map(&dir.join("seen"), MAX_PROCS * MAX_SEQ),
        }
    }

    fn stats(&self, proc: u32) -> &ProcStats {
        assert!(u64::from(proc) < MAX_PROCS);
        // SAFETY: in bounds; ProcStats is atomics and bytes, any content valid.
        unsafe { &*self.stats.as_ptr().cast::<ProcStats>().add(proc as usize) }
    }

    fn seen(&self, proc: u32, seq: u32) -> &AtomicU8 {
        assert!(u64::from(proc) < MAX_PROCS && u64::from(seq) < MAX_SEQ);
        // SAFETY: in bounds of the mapping.
        unsafe { &*self.seen.as_ptr().cast::<AtomicU8>().add((u64::from(proc) * MAX_SEQ + u64::from(seq)) as usize) }
    }
}

fn note_call(s: &ProcStats, started: Instant) {
    s.max_call_ns.fetch_max(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
}

fn unexpected(s: &ProcStats, e: &Error) {
    s.unexpected.fetch_add(1, Ordering::Relaxed);
    s.last_error.store(u64::from(e.code()), Ordering::Relaxed);
}

fn producer(dir: &Path, shared: &Shared, me: u32) {
    let s = shared.stats(me);
    let Ok(q) = Queue::open(dir, QUEUE) else { return };
    let stop = dir.join("stop");
    let mut seq = 0u32;
    while u64::from(seq) < MAX_SEQ && !stop.exists() {
        for _ in 0..256 {
            let started = Instant::now();
            let r = if seq % 8 == 4 && u64::from(seq) + 4 <= MAX_SEQ {
                // Four full-size records in one call, acknowledged together
                // (as far as they went in; the rest go one by one).
                let batch: Vec<u8> = (seq..seq + 4).flat_map(|i| record(me, i)).collect();
                match q.push_many(&batch, RECORD) {
                    (0, Some(e)) => Err(e),
                    (n, _) => Ok(n as u32),
                }
            } else {
                q.push(&record(me, seq)).map(|()| 1)
            };
            note_call(s, started);
            match r {
                Ok(n) => {
                    seq += n;
                    s.acked.store(u64::from(seq), Ordering::Release);
                }
                Err(e) if e.code() == DATA_SPC_FULL => std::thread::yield_now(),
                // Its slot was recovered while it stalled: not pushed; try again.
                Err(e) if e.code() == MQUE_WAIT_ERR => {}
                Err(e) => {
                    unexpected(s, &e);
                    return;
                }
            }
            if u64::from(seq) >= MAX_SEQ {
                break;
            }
        }
    }
}

fn consumer(dir: &Path, shared: &Shared, me: u32) {
    let s = shared.stats(me);
    let Ok(q) = Queue::open(dir, QUEUE) else { return };
    let stop = dir.join("stop");
    // SAFETY: the in-flight buffer is this process's alone (others read it
    // only after this process is dead).
    let inflight = unsafe { std::slice::from_raw_parts_mut(s.inflight.as_ptr() as *mut u8, RECORD) };
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
            note_call(s, started);
        }
        match r {
            Ok(len) => match check(inflight, len) {
                Some((proc, seq)) => {
                    shared.seen(proc, seq).fetch_add(1, Ordering::SeqCst);
                }
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
                unexpected(s, &e);
                return;
            }
        }
    }
}

/// Child process entry: a producer or a consumer of `crash_test`.
#[test]
#[ignore = "child process of crash_test: started by it"]
fn crash_child() {
    let (role, dir, me) = (child_env("TVMQ_CRASH_ROLE"), child_env("TVMQ_CRASH_DIR"), child_env("TVMQ_CRASH_ME"));
    let dir = PathBuf::from(dir);
    let shared = Shared::open(&dir);
    let me: u32 = me.parse().expect("process number");
    match role.as_str() {
        "producer" => producer(&dir, &shared, me),
        _ => consumer(&dir, &shared, me),
    }
}

struct Proc {
    child: Child,
    me: u32,
    producer: bool,
}

fn spawn(dir: &Path, me: u32, producer: bool) -> Proc {
    let child = child_test("crash_child")
        .env("TVMQ_CRASH_ROLE", if producer { "producer" } else { "consumer" })
        .env("TVMQ_CRASH_DIR", dir)
        .env("TVMQ_CRASH_ME", me.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn child");
    Proc { child, me, producer }
}

/// A tiny deterministic generator (the run is reproducible up to scheduling).
struct Rng(u64);
impl Rng {
    fn next(&mut self, below: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % below
    }
}

#[test]
fn crash_test() {
    let kills_wanted: u64 = std::env::var("TVMQ_CRASH_KILLS").ok().and_then(|v| v.parse().ok()).unwrap_or(200);
    let seconds: u64 = std::env::var("TVMQ_CRASH_SECONDS").ok().and_then(|v| v.parse().ok()).unwrap_or(40);
    let dir = PathBuf::from(format!("/dev/shm/tvmq-crash-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut spec = Spec::new(CAPACITY, RECORD as u64);
    spec.unblock_timeout_ms = UNBLOCK_TIMEOUT_MS;
    Queue::create(&dir, QUEUE, &spec).unwrap();
    let shared = Shared::open(&dir);

    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut next_me = 0u32;
    let mut procs: Vec<Proc> = Vec::new();
    let mut killed: Vec<(u32, bool)> = Vec::new();
    for i in 0..4 {
        procs.push(spawn(&dir, next_me, i % 2 == 0));
        next_me += 1;
    }
    let started = Instant::now();
    while (killed.len() as u64) < kills_wanted && started.elapsed() < Duration::from_secs(seconds) {
        std::thread::sleep(Duration::from_millis(rng.next(60)));
        // Replace producers that finished their numbers.
        for p in procs.iter_mut() {
            if let Ok(Some(_)) = p.child.try_wait() {
                let producer = p.producer;
                *p = spawn(&dir, next_me, producer);
                next_me += 1;
            }
        }
        let victim = rng.next(procs.len() as u64) as usize;
        let p = &mut procs[victim];
        let _ = p.child.kill();
        let _ = p.child.wait();
        killed.push((p.me, p.producer));
        let producer = p.producer;
        *p = spawn(&dir, next_me, producer);
        next_me += 1;
        assert!(u64::from(next_me) < MAX_PROCS - 8, "too many processes for the shared files");
    }
    // Stop: producers finish their batch and exit, consumers drain and exit.
    std::fs::write(dir.join("stop"), b"").unwrap();
    for p in procs.iter_mut() {
        let deadline = Instant::now() + Duration::from_secs(20);
        while p.child.try_wait().ok().flatten().is_none() {
            if Instant::now() > deadline {
                // The queue's counters as `tvmq stat` shows them, and the stuck process's stacks.
                let stat = format!("{:?}", Queue::inspect(&dir, QUEUE).map(|q| q.stats()));
                let pid = p.child.id();
                let stack = Command::new("gdb")
                    .args(["-p", &pid.to_string(), "-batch", "-ex", "thread apply all bt"])
                    .output()
                    .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                    .unwrap_or_default();
                panic!(
                    "{} {} (pid {pid}) did not stop\n{stat}\n{stack}",
                    if p.producer { "producer" } else { "consumer" },
                    p.me
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    let killing = started.elapsed();

    // What the killed processes left: attaching repairs after deaths, and
    // an explicit repair (this process is alone now) makes every recovered
    // record poppable. Then drain.
    let q = Queue::open(&dir, QUEUE).unwrap();
    let repair = q.repair();
    let mut out = [0u8; RECORD];
    let mut drained = 0u64;
    loop {
        match q.pop(&mut out, Wait::NoWait) {
            Ok(len) => {
                let (proc, seq) = check(&out, len).expect("a torn record in the queue");
                shared.seen(proc, seq).fetch_add(1, Ordering::SeqCst);
                drained += 1;
            }
            Err(e) if e.code() == NO_DATA_FOUND => break,
            Err(e) => panic!("drain: {e}"),
        }
    }
    let stats = q.stats();

    // The checks.
    let killed_consumers: Vec<u32> = killed.iter().filter(|k| !k.1).map(|k| k.0).collect();
    let mut inflight_candidates = std::collections::HashSet::new();
    for &c in &killed_consumers {
        let s = shared.stats(c);
        let buf: Vec<u8> = s.inflight.iter().map(|b| b.load(Ordering::Relaxed)).collect();
        let len = u32::from_le_bytes(buf[8..12].try_into().unwrap()) as usize;
        if let Some(id) = check(&buf, len) {
            inflight_candidates.insert(id);
        }
    }
    let (mut acked_total, mut delivered, mut max_call_ns) = (0u64, 0u64, 0u64);
    let (mut torn, mut unexpected_errors, mut in_flight_only) = (0u64, 0u64, 0u64);
    let mut problems = Vec::new();
    for me in 0..next_me {
        let s = shared.stats(me);
        torn += s.torn.load(Ordering::Relaxed);
        let u = s.unexpected.load(Ordering::Relaxed);
        if u > 0 {
            problems.push(format!(
                "process {me}: {u} unexpected error(s), last code {}",
                s.last_error.load(Ordering::Relaxed)
            ));
        }
        unexpected_errors += u;
        max_call_ns = max_call_ns.max(s.max_call_ns.load(Ordering::Relaxed));
        let acked = s.acked.load(Ordering::Relaxed);
        acked_total += acked;
        for seq in 0..MAX_SEQ as u32 {
            let n = shared.seen(me, seq).load(Ordering::Relaxed);
            delivered += u64::from(n);
            if n > 1 {
                problems.push(format!("record ({me}, {seq}) popped {n} times"));
            } else if n == 0 && u64::from(seq) < acked {
                if inflight_candidates.contains(&(me, seq)) {
                    in_flight_only += 1;
                } else {
                    problems.push(format!("acknowledged record ({me}, {seq}) never popped"));
                }
            }
            if n == 0 && u64::from(seq) >= acked && u64::from(seq) > acked + 8 {
                // Nothing beyond a producer's last acknowledged records can have been pushed.
                break;
            }
        }
    }
    println!(
        "crash test: {} kills ({} producers, {} consumers) in {:.1} s; {} processes; {acked_total} records \
         acknowledged, {delivered} popped ({drained} drained at the end, {in_flight_only} found in a killed \
         consumer's hands); recoveries: {} pushes skipped, {} records delivered again, {} calls told they \
         were robbed, {} sleepers uncounted; repair at the end: {:?}; longest call {:.0} ms (limit {} ms)",
        killed.len(),
        killed.iter().filter(|k| k.1).count(),
        killed_consumers.len(),
        killing.as_secs_f64(),
        next_me,
        stats.recovered_pushes,
        stats.recovered_pops,
        stats.robbed,
        stats.reconciled_waiters,
        repair,
        max_call_ns as f64 / 1e6,
        UNBLOCK_TIMEOUT_MS + WAIT_MARGIN_MS,
    );
    drop(q);
    let _ = std::fs::remove_dir_all(&dir);
    let unexpected_lines: Vec<_> = problems.iter().filter(|p| p.contains("unexpected")).collect();
    let lost = problems.iter().filter(|p| p.contains("never popped")).count();
    let dups = problems.iter().filter(|p| p.contains("times")).count();
    println!("problems: {lost} lost, {dups} popped twice, {torn} torn, unexpected errors: {unexpected_lines:?}");
    assert!(
        problems.is_empty(),
        "{} problem(s), first ones: {:#?}",
        problems.len(),
        &problems[..problems.len().min(20)]
    );
    assert_eq!(torn, 0, "torn records");
    assert_eq!(unexpected_errors, 0);
    assert!(killed.len() as u64 >= kills_wanted, "only {} kills in {seconds} s", killed.len());
    assert!(acked_total > 10_000, "too little traffic to mean anything: {acked_total}");
    assert!(
        max_call_ns <= (UNBLOCK_TIMEOUT_MS + WAIT_MARGIN_MS) * 1_000_000,
        "a call waited {:.0} ms",
        max_call_ns as f64 / 1e6
    );
}
