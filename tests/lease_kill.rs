//! Lease crash test: consumer processes take records with `pop_lease`,
//! "process" them, and acknowledge them, while the test kills them with
//! SIGKILL at random moments (at least 150 kills) and replaces them; a few
//! deliveries are stalled on purpose past a short lease, and their late
//! acknowledgement must fail with `LEASE_EXPIRED`. At the end:
//! - every record pushed was acknowledged exactly once (counted by the
//!   consumers, or found in the hands of a consumer killed between its
//!   acknowledgement and its count), none lost, none acknowledged twice;
//! - the records delivered more than once are exactly those whose consumer
//!   died holding them or whose lease ran out: each record's last delivery
//!   count, minus one, equals the deliveries of it that ended by a kill or
//!   an expiry (the kills that hit a consumer before it could note what it
//!   held are counted apart and may explain at most one delivery each), and
//!   the queue's own counters agree (redelivered = orphaned + expired).
//!
//! How a consumer notes what it does, in a shared file:
//! - `popping` (1 around each `pop_lease` call) and `holding` (the record and
//!   its delivery count, from the return of `pop_lease` to the count of its
//!   acknowledgement); the test reads both of a consumer it has killed;
//! - per record: acknowledgements (with the delivery count acknowledged) and
//!   stalls whose late acknowledgement was refused.
//!
//! `TVMQ_LEASE_CRASH_KILLS` (default 150) and `TVMQ_LEASE_CRASH_SECONDS`
//! (default 20, the longest the killing goes on) size the run.

mod common;
use common::{child_env, child_test};
use memmap2::{MmapMut, MmapOptions};
use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tvm::error::*;
use tvm::{LeaseSpec, Queue, Spec, Wait};

const QUEUE: u32 = 1;
const RECORDS: u32 = 100_000;
const RECORD: usize = 16;
const CONSUMERS: usize = 3;
const MAX_PROCS: usize = 1024;
/// Lease of an ordinary delivery: long (a dead holder's leases come back at
/// once through the registry, not when they run out), so that no ordinary
/// delivery runs out on a busy machine.
const LEASE: Duration = Duration::from_secs(20);
/// A stalled delivery's lease, and how long its consumer stalls.
const STALL_LEASE: Duration = Duration::from_millis(20);
const STALL: Duration = Duration::from_millis(45);

/// Per consumer process.
#[repr(C)]
struct ProcState {
    /// 1 while in `pop_lease`.
    popping: AtomicU32,
    /// 1 when the delivery held is a deliberate stall.
    stalling: AtomicU32,
    /// `seq + 1 | deliveries << 32` of the record held (0: none).
    holding: AtomicU64,
    /// Errors no caller should see here (count, last code).
    unexpected: AtomicU64,
    last_error: AtomicU64,
    /// Late acknowledgements refused with LEASE_EXPIRED after a stall.
    late_refused: AtomicU64,
    /// Late acknowledgements that succeeded (must not happen).
    late_accepted: AtomicU64,
    _pad: [u64; 2],
}

/// Per record.
#[repr(C)]
struct RecState {
    /// Successful acknowledgements.
    acks: AtomicU32,
    /// The delivery count of the acknowledged delivery.
    acked_delivery: AtomicU32,
    /// Deliveries of it that a stall let run out (counted after the late
    /// acknowledgement was refused).
    stalls: AtomicU32,
    _pad: AtomicU32,
}

fn map(path: &Path, len: usize) -> MmapMut {
    let f =
        OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path).expect("open shared file");
    f.set_len(len as u64).expect("size shared file");
    // SAFETY: a file of this test's, shared with its children only.
    unsafe { MmapOptions::new().map_mut(&f) }.expect("map shared file")
}

struct Shared {
    procs: MmapMut,
    recs: MmapMut,
}

impl Shared {
    fn open(dir: &Path) -> Shared {
        Shared {
            procs: map(&dir.join("procs"), MAX_PROCS * size_of::<ProcState>()),
            recs: map(&dir.join("recs"), RECORDS as usize * size_of::<RecState>()),
        }
    }

    fn proc(&self, me: usize) -> &ProcState {
        assert!(me < MAX_PROCS);
        // SAFETY: in bounds; atomics only, any content valid.
        unsafe { &*self.procs.as_ptr().cast::<ProcState>().add(me) }
    }

    fn rec(&self, seq: u32) -> &RecState {
        assert!(seq < RECORDS, "record {seq} out of range");
        // SAFETY: in bounds; atomics only, any content valid.
        unsafe { &*self.recs.as_ptr().cast::<RecState>().add(seq as usize) }
    }
}

fn record(seq: u32) -> [u8; RECORD] {
    let mut r = [0u8; RECORD];
    r[..4].copy_from_slice(&seq.to_le_bytes());
    r[4..8].copy_from_slice(&(!seq).to_le_bytes());
    r
}

fn seq_of(rec: &[u8]) -> Option<u32> {
    let seq = u32::from_le_bytes(rec.get(..4)?.try_into().ok()?);
    (rec.len() == RECORD && rec == record(seq) && seq < RECORDS).then_some(seq)
}

fn unexpected(p: &ProcState, e: &Error) {
    p.unexpected.fetch_add(1, Ordering::SeqCst);
    p.last_error.store(u64::from(e.code()), Ordering::SeqCst);
}

/// A tiny deterministic generator.
struct Rng(u64);
impl Rng {
    fn next(&mut self, below: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % below
    }
}

fn consumer(dir: &Path, shared: &Shared, me: usize) {
    let p = shared.proc(me);
    let q = match Queue::open(dir, QUEUE) {
        Ok(q) => q,
        Err(e) => return unexpected(p, &e),
    };
    let stop = dir.join("stop");
    let mut rng = Rng(0x2545_f491_4f6c_dd1d ^ ((me as u64 + 1) * 0x9e37_79b9));
    let mut out = [0u8; RECORD];
    loop {
        let stall = rng.next(1500) == 0;
        p.stalling.store(u32::from(stall), Ordering::SeqCst);
        p.popping.store(1, Ordering::SeqCst);
        let wait = Wait::Until(Instant::now() + Duration::from_millis(20));
        let r = q.pop_lease(&mut out, wait, if stall { STALL_LEASE } else { LEASE });
        let (n, lease) = match r {
            Ok(got) => got,
            Err(e) if matches!(e.code(), NO_DATA_FOUND | MQUE_WAIT_TMO) => {
                p.popping.store(0, Ordering::SeqCst);
                if stop.exists() {
                    return;
                }
                continue;
            }
            Err(e) => return unexpected(p, &e),
        };
        let Some(seq) = seq_of(&out[..n]) else {
            return unexpected(p, &Error::new(SHM_ERR_INVAL, "a torn or foreign record"));
        };
        p.holding.store(u64::from(seq + 1) | u64::from(lease.deliveries()) << 32, Ordering::SeqCst);
        p.popping.store(0, Ordering::SeqCst);
        // "Processing": mostly nothing, sometimes a little, rarely a stall
        // past the lease.
        match rng.next(4) {
            _ if stall => std::thread::sleep(STALL),
            0 => std::thread::sleep(Duration::from_micros(100)),
            1 => std::thread::yield_now(),
            _ => {}
        }
        let rec = shared.rec(seq);
        match q.ack(&lease) {
            Ok(()) => {
                if stall {
                    p.late_accepted.fetch_add(1, Ordering::SeqCst);
                }
                rec.acked_delivery.store(lease.deliveries(), Ordering::SeqCst);
                rec.acks.fetch_add(1, Ordering::SeqCst);
            }
            Err(e) if stall && e.code() == LEASE_EXPIRED => {
                p.late_refused.fetch_add(1, Ordering::SeqCst);
                rec.stalls.fetch_add(1, Ordering::SeqCst);
            }
            Err(e) => return unexpected(p, &e),
        }
        p.holding.store(0, Ordering::SeqCst);
    }
}

/// Child process entry: a consumer of `lease_crash_test`.
#[test]
#[ignore = "child process of lease_crash_test: started by it"]
fn lease_crash_child() {
    let dir = PathBuf::from(child_env("TVMQ_LEASE_CRASH_DIR"));
    let me: usize = child_env("TVMQ_LEASE_CRASH_ME").parse().expect("process number");
    let shared = Shared::open(&dir);
    consumer(&dir, &shared, me);
}

fn spawn(dir: &Path, me: usize) -> (Child, usize) {
    let child = child_test("lease_crash_child")
        .env("TVMQ_LEASE_CRASH_DIR", dir)
        .env("TVMQ_LEASE_CRASH_ME", me.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn child");
    (child, me)
}

/// What a killed consumer left: the record it held and that delivery's
/// count, or whether it was inside `pop_lease`.
#[derive(Debug, Clone, Copy)]
enum Left {
    Held { seq: u32, deliveries: u32, stalling: bool },
    InPop,
    Nothing,
}

#[test]
fn lease_crash_test() {
    let kills_wanted: usize = std::env::var("TVMQ_LEASE_CRASH_KILLS").ok().and_then(|v| v.parse().ok()).unwrap_or(150);
    let seconds: u64 = std::env::var("TVMQ_LEASE_CRASH_SECONDS").ok().and_then(|v| v.parse().ok()).unwrap_or(20);
    let dir = PathBuf::from(format!("/dev/shm/tvmq-lease-crash-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut spec = Spec::new(u64::from(RECORDS), RECORD as u64);
    spec.leases = Some(LeaseSpec { lease_ms: 20_000, max_leases: 64, ..LeaseSpec::default() });
    Queue::create(&dir, QUEUE, &spec).unwrap();
    let shared = Shared::open(&dir);
    {
        let q = Queue::open(&dir, QUEUE).unwrap();
        for seq in 0..RECORDS {
            q.push(&record(seq)).unwrap();
        }
    }

    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut next_me = 0usize;
    let mut procs: Vec<(Child, usize)> = (0..CONSUMERS).map(|i| spawn(&dir, i)).collect();
    next_me += CONSUMERS;
    let mut left: Vec<Left> = Vec::new();
    let started = Instant::now();
    while left.len() < kills_wanted && started.elapsed() < Duration::from_secs(seconds) {
        std::thread::sleep(Duration::from_millis(5 + rng.next(40)));
        let victim = rng.next(procs.len() as u64) as usize;
        let (child, me) = &mut procs[victim];
        let _ = child.kill();
        let _ = child.wait();
        let p = shared.proc(*me);
        let held = p.holding.load(Ordering::SeqCst);
        left.push(if held != 0 {
            let stalling = p.stalling.load(Ordering::SeqCst) == 1;
            Left::Held { seq: (held as u32) - 1, deliveries: (held >> 32) as u32, stalling }
        } else if p.popping.load(Ordering::SeqCst) == 1 {
            Left::InPop
        } else {
            Left::Nothing
        });
        procs[victim] = spawn(&dir, next_me);
        next_me += 1;
        assert!(next_me < MAX_PROCS, "too many processes for the shared file");
    }
    let killing = started.elapsed();
    // Stop: the consumers drain what is left and exit.
    std::fs::write(dir.join("stop"), b"").unwrap();
    for (child, me) in procs.iter_mut() {
        let deadline = Instant::now() + Duration::from_secs(60);
        while child.try_wait().ok().flatten().is_none() {
            assert!(Instant::now() < deadline, "consumer {me} did not stop");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    // What is still queued or leased (a consumer may have stopped while the
    // last stalled records were waiting): taken here, counted the same way.
    let q = Queue::open(&dir, QUEUE).unwrap();
    q.repair();
    let mut out = [0u8; RECORD];
    let mut drained = 0u64;
    loop {
        let s = q.lease_stats().unwrap();
        let wait = if q.depth() == 0 && s.in_flight + s.waiting == 0 {
            Wait::NoWait
        } else {
            Wait::Until(Instant::now() + Duration::from_secs(30))
        };
        match q.pop_lease(&mut out, wait, LEASE) {
            Ok((n, lease)) => {
                let seq = seq_of(&out[..n]).expect("a torn record at the end");
                q.ack(&lease).unwrap();
                let rec = shared.rec(seq);
                rec.acked_delivery.store(lease.deliveries(), Ordering::SeqCst);
                rec.acks.fetch_add(1, Ordering::SeqCst);
                drained += 1;
            }
            Err(e) if e.code() == NO_DATA_FOUND => break,
            Err(e) => panic!("drain: {e}; {:?}", q.lease_stats()),
        }
    }
    let stats = q.lease_stats().unwrap();

    // The checks.
    let mut problems = Vec::new();
    let (mut unexpected_errors, mut late_refused, mut late_accepted) = (0, 0, 0);
    for me in 0..next_me {
        let p = shared.proc(me);
        let u = p.unexpected.load(Ordering::SeqCst);
        if u > 0 {
            problems.push(format!(
                "consumer {me}: {u} unexpected error(s), last code {}",
                p.last_error.load(Ordering::SeqCst)
            ));
        }
        unexpected_errors += u;
        late_refused += p.late_refused.load(Ordering::SeqCst);
        late_accepted += p.late_accepted.load(Ordering::SeqCst);
    }
    // Per record: the deliveries that ended without an acknowledgement, as
    // the consumers explain them (kills holding it, stalls on it).
    let mut killed_holding: Vec<Vec<u32>> = vec![Vec::new(); RECORDS as usize];
    for l in &left {
        if let Left::Held { seq, deliveries, .. } = *l {
            killed_holding[seq as usize].push(deliveries);
        }
    }
    let in_pop_kills = left.iter().filter(|l| matches!(l, Left::InPop)).count() as u64;
    let (mut redelivered, mut unexplained, mut in_hands, mut twice_delivered) = (0u64, 0u64, 0u64, 0u64);
    for seq in 0..RECORDS {
        let rec = shared.rec(seq);
        let acks = rec.acks.load(Ordering::SeqCst);
        let mut kills = killed_holding[seq as usize].clone();
        kills.sort_unstable();
        let last = match acks {
            1 => rec.acked_delivery.load(Ordering::SeqCst),
            // Never counted: acknowledged by a consumer killed before it
            // could count it (its last holder), else lost.
            0 => match kills.pop() {
                Some(d) => {
                    in_hands += 1;
                    d
                }
                None => {
                    problems.push(format!("record {seq} never acknowledged"));
                    continue;
                }
            },
            n => {
                problems.push(format!("record {seq} acknowledged {n} times"));
                continue;
            }
        };
        let explained = kills.len() as u64 + u64::from(rec.stalls.load(Ordering::SeqCst));
        let extra = u64::from(last) - 1;
        redelivered += extra;
        if extra > 0 {
            twice_delivered += 1;
        }
        if explained > extra {
            problems
                .push(format!("record {seq}: delivered {last} times, but {explained} deliveries ended unacknowledged"));
        } else {
            unexplained += extra - explained;
        }
    }
    let kills_holding = left.iter().filter(|l| matches!(l, Left::Held { .. })).count();
    println!(
        "lease crash test: {} kills in {:.1} s ({kills_holding} holding a lease, {in_pop_kills} inside pop_lease); \
         {next_me} processes; {RECORDS} records, {twice_delivered} delivered more than once ({redelivered} \
         redeliveries: {} stalls past the lease, {unexplained} by kills inside pop_lease), {in_hands} acknowledged \
         by a consumer killed before it counted it, {drained} drained at the end; queue counters: {stats:?}",
        left.len(),
        killing.as_secs_f64(),
        late_refused,
    );
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        problems.is_empty(),
        "{} problem(s), first ones: {:#?}",
        problems.len(),
        &problems[..problems.len().min(20)]
    );
    assert_eq!(unexpected_errors, 0);
    assert_eq!(late_accepted, 0, "a late acknowledgement after a stall past the lease was accepted");
    assert!(
        unexplained <= in_pop_kills,
        "{unexplained} redeliveries unexplained (kills inside pop_lease: {in_pop_kills})"
    );
    assert_eq!(stats.redelivered, redelivered, "the queue's count of redeliveries");
    assert_eq!(stats.redelivered, stats.orphaned + stats.expired, "every redelivery ended by a death or an expiry");
    // A stalled consumer killed during its stall may have its lease run out
    // before it is found dead: counted expired, or orphaned.
    let stalled_kills = left.iter().filter(|l| matches!(l, Left::Held { stalling: true, .. })).count() as u64;
    assert!(
        (late_refused..=late_refused + stalled_kills).contains(&stats.expired),
        "expired leases are the stalls: {} expired, {late_refused} stalls refused, {stalled_kills} killed stalling",
        stats.expired
    );
    assert!(stats.orphaned <= kills_holding as u64 + in_pop_kills, "more orphaned leases than kills");
    assert_eq!((stats.in_flight, stats.waiting, stats.released), (0, 0, 0));
    assert_eq!(q.depth(), 0);
    assert!(left.len() >= kills_wanted, "only {} kills in {seconds} s", left.len());
    assert!(kills_holding >= kills_wanted / 4, "too few kills hit a consumer holding a lease: {kills_holding}");
    assert!(late_refused > 0, "no stall happened");
}
