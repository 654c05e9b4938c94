//! Lease kill test: consumer processes take records with `pop_lease`,
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
//! `TVMQ_LEASE_KILLS` (default 150) and `TVMQ_LEASE_KILL_SECONDS` (default
//! 20, the longest the killing goes on) size the run.

mod common;
use common::{Children, KillPlan, Rng, Shareable, SharedArray, Unexpected, child_env, child_test, record};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tvm::error::*;
use tvm::{LeaseSpec, Queue, Spec, Wait};

const QUEUE: u32 = 1;
const RECORDS: u32 = 100_000;
const RECORD: usize = 16;
const CONSUMERS: usize = 3;
const MAX_PROCS: u32 = 1024;
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
    /// Errors no caller should see here.
    unexpected: Unexpected,
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

// SAFETY: repr(C) of atomics, and padding never read.
unsafe impl Shareable for ProcState {}
// SAFETY: repr(C) of atomics only.
unsafe impl Shareable for RecState {}

/// The shared files of a run.
struct Shared {
    procs: SharedArray<ProcState>,
    recs: SharedArray<RecState>,
}

impl Shared {
    fn open(dir: &Path) -> Shared {
        Shared {
            procs: SharedArray::map(&dir.join("procs"), MAX_PROCS as usize, false),
            recs: SharedArray::map(&dir.join("recs"), RECORDS as usize, false),
        }
    }

    fn proc(&self, me: u32) -> &ProcState {
        self.procs.get(me as usize)
    }

    fn rec(&self, seq: u32) -> &RecState {
        self.recs.get(seq as usize)
    }
}

fn seq_of(rec: &[u8]) -> Option<u32> {
    let (_, seq) = record::decode(rec).ok()?;
    (rec.len() == RECORD && seq < u64::from(RECORDS)).then_some(seq as u32)
}

fn unexpected(p: &ProcState, e: &Error) {
    p.unexpected.note(e.code());
}

fn consumer(dir: &Path, shared: &Shared, me: u32) {
    let p = shared.proc(me);
    let q = match Queue::open(dir, QUEUE) {
        Ok(q) => q,
        Err(e) => return unexpected(p, &e),
    };
    let stop = dir.join("stop");
    let mut rng = Rng::new(0x2545_f491_4f6c_dd1d ^ ((u64::from(me) + 1) * 0x9e37_79b9));
    let mut out = [0u8; RECORD];
    loop {
        let stall = rng.one_in(1500);
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
        match rng.below(4) {
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

/// Child process entry: a consumer of `lease_kill_test`.
#[test]
#[ignore = "child process of lease_kill_test: started by it"]
fn lease_kill_child() {
    let dir = PathBuf::from(child_env("TVMQ_LEASE_KILL_DIR"));
    let me: u32 = child_env("TVMQ_LEASE_KILL_ME").parse().expect("process number");
    let shared = Shared::open(&dir);
    consumer(&dir, &shared, me);
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
fn lease_kill_test() {
    let plan = KillPlan::from_env("TVMQ_LEASE_KILL", 150, 20);
    let tmp = common::TempDir::new("lease-kill", "run");
    let dir = tmp.path();
    let mut spec = Spec::new(u64::from(RECORDS), RECORD as u64);
    spec.leases = Some(LeaseSpec { lease_ms: 20_000, max_leases: 64, ..LeaseSpec::default() });
    Queue::create(dir, QUEUE, &spec).unwrap();
    let shared = Shared::open(dir);
    {
        let q = Queue::open(dir, QUEUE).unwrap();
        for seq in 0..RECORDS {
            q.push(&record::new(0, u64::from(seq), RECORD)).unwrap();
        }
    }

    let mut kids = Children::start(CONSUMERS, MAX_PROCS, dir, |_, me| {
        let mut cmd = child_test("lease_kill_child");
        cmd.env("TVMQ_LEASE_KILL_DIR", dir).env("TVMQ_LEASE_KILL_ME", me.to_string());
        (format!("consumer {me}"), cmd)
    });
    let started = Instant::now();
    let killed = kids.kill_randomly(&mut Rng::new(0x9e37_79b9_7f4a_7c15), (5, 44), &plan);
    let killing = started.elapsed();
    // What each killed consumer left (a dead process's entry stays as it was).
    let left: Vec<Left> = killed
        .iter()
        .map(|&(_, me)| {
            let p = shared.proc(me);
            let held = p.holding.load(Ordering::SeqCst);
            if held != 0 {
                let stalling = p.stalling.load(Ordering::SeqCst) == 1;
                Left::Held { seq: (held as u32) - 1, deliveries: (held >> 32) as u32, stalling }
            } else if p.popping.load(Ordering::SeqCst) == 1 {
                Left::InPop
            } else {
                Left::Nothing
            }
        })
        .collect();
    // Stop: the consumers drain what is left and exit.
    std::fs::write(dir.join("stop"), b"").unwrap();
    kids.wait_all(|| Instant::now() + Duration::from_secs(60), false, String::new);
    let next_me = kids.started;
    drop(kids);
    // What is still queued or leased (a consumer may have stopped while the
    // last stalled records were waiting): taken here, counted the same way.
    let q = Queue::open(dir, QUEUE).unwrap();
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
        unexpected_errors += p.unexpected.report(&format!("consumer {me}"), &mut problems);
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
        "lease kill test: {} kills in {:.1} s ({kills_holding} holding a lease, {in_pop_kills} inside pop_lease); \
         {next_me} processes; {RECORDS} records, {twice_delivered} delivered more than once ({redelivered} \
         redeliveries: {} stalls past the lease, {unexplained} by kills inside pop_lease), {in_hands} acknowledged \
         by a consumer killed before it counted it, {drained} drained at the end; queue counters: {stats:?}",
        left.len(),
        killing.as_secs_f64(),
        late_refused,
    );
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
    assert!(left.len() >= plan.kills, "only {} kills in {} s", left.len(), plan.seconds);
    assert!(kills_holding >= plan.kills / 4, "too few kills hit a consumer holding a lease: {kills_holding}");
    assert!(late_refused > 0, "no stall happened");
}
