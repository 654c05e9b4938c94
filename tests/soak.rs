//! Soak test: two queues used for a long time by threads and processes at once.
//!
//! For `TVMQ_SOAK_SECONDS` (default 5, as `make test` runs it; `make soak`
//! runs 600), this process and 3 child processes
//! (this test binary re-executed to run its ignored `child` test, as in
//! tests/processes.rs) run together:
//!
//! * on queue A, which stays: producers pushing single records and batches
//!   (`push`, `push_many`), consumers popping with every wait mode
//!   (`Wait::Until` with deadlines of a few ms, `NoWait`, `Forever`) and in
//!   batches (`pop_many`, `pop_into`);
//! * on queue B, which a dropper thread drops and re-creates (with another
//!   size each time) every 0.5 to 1 s: producers and consumers of the same
//!   kinds, which re-open B whenever it was dropped.
//!
//! Records are 1..=record size bytes long. Those longer than 16 bytes are
//! tagged (queue, producer, sequence number, length) and carry a checksum
//! over a payload derived from the tag; shorter ones carry their queue,
//! producer, length and a pattern. Every popped record is checked: intact,
//! of the length the queue reports, zeroed after its end, from the right
//! queue, and each producer's records in increasing order per consumer
//! (except in a call on B that a drop of B interrupted: see [`Seen::settle`]).
//!
//! Exactly-once delivery on A is checked with a ledger in shared memory (a
//! file of the test directory that every process maps): for each A
//! producer, a window of [`W`] words, word `s % W` saying whether the
//! producer's record `s` is pending (about to be pushed), delivered, or
//! skipped (its push failed). A producer marks a record pending before
//! pushing it and skipped when the push fails; a consumer turns pending
//! into delivered, and finding anything else is a duplicate, a record
//! delivered although its push failed, or a stale record. Before reusing a
//! word, a producer waits (up to [`LEDGER_PATIENCE`], or until the stop)
//! for the record `W` sequence numbers back to be delivered if it was
//! pushed; after the drain, no word may still be pending. On top, each
//! producer's count of acknowledged records must equal the count of its
//! records popped (short records, which have no sequence number, are
//! checked by count only), and queue A's counters must agree.
//! Records lost with a dropped queue B are expected and not checked.
//!
//! At the end the producers stop; the test pushes one sentinel per A
//! consumer, the consumers drain A up to their sentinel, and the dropper
//! drops B a last time (which wakes B's sleepers). Every worker writes a
//! report (`w<id>.rep`) to the test directory; the parent reads them all.
//! Meanwhile the parent prints, every few seconds, the operations so far and
//! the RSS of each process, and at the end a one-line summary.
//!
//! Expected errors: `DATA_SPC_FULL`, `NO_DATA_FOUND` and `MQUE_WAIT_TMO` on
//! both queues, and on B also `SHM_ERR_EIDRM` and `TBL_NOT_FOUND`. Any other
//! error fails the test, as does a process whose resident memory (VmRSS) at
//! the end exceeds its RSS after the first 20% of the run by more than 16
//! MiB, or whose count of open descriptors or of mappings of the test
//! directory's files grew by more than [`HANDLE_SLACK`] (leaked handles of
//! queue B, which every B worker maps and unmaps again at each drop).

mod common;
use common::{Children, Rng, SharedArray, TempDir, child_env, child_test, code_name, record, write_atomic};
use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tvm::error::{DATA_SPC_FULL, Error, MQUE_WAIT_TMO, NO_DATA_FOUND, SHM_ERR_EIDRM, TBL_NOT_FOUND};
use tvm::{Queue, Spec, Wait};

/// The queue that stays.
const QA: u32 = 1;
/// The queue that is dropped and re-created.
const QB: u32 = 2;
const A_ROWS: u64 = 512;
const A_SIZE: u64 = 256;
/// Header of a tagged record (a `common::record` whose stream is the tag
/// byte, 0 and the length as u16): tag byte, 0, length (u16), sequence
/// (u64), checksum (u32).
const HDR: usize = record::HDR;
/// Ledger words per A producer.
const W: u64 = 1 << 15;
/// How long a producer waits for an acknowledged record to be delivered
/// before it reuses the record's ledger word (then: reported as missing).
const LEDGER_PATIENCE: Duration = Duration::from_secs(10);
/// Allowed growth of a process's RSS between 20% of the run and its end.
const RSS_GROWTH_LIMIT_KIB: u64 = 16 * 1024;
/// Allowed growth of open descriptors and of mappings of the test directory
/// (handles of queue B open at the moment of a sample).
const HANDLE_SLACK: usize = 8;
const CHILDREN: usize = 3;
/// Time allowed, after the stop, for the producers to stop and the queues to drain.
const FINISH_DEADLINE: Duration = Duration::from_secs(40);
const SHARED_FILE: &str = "soak.shm";

const ENV_DIR: &str = "TVMQ_SOAK_DIR";
const ENV_WORKERS: &str = "TVMQ_SOAK_WORKERS";
const ENV_PRODUCERS: &str = "TVMQ_SOAK_PRODUCERS";
const ENV_SEED: &str = "TVMQ_SOAK_SEED";

// ---------------------------------------------------------------- helpers

fn pause(d: Duration) {
    std::thread::sleep(d);
}

/// After an empty or full queue: yield a few times, then sleep a little.
fn backoff(misses: &mut u32) {
    *misses += 1;
    if *misses < 8 {
        std::thread::yield_now();
    } else {
        pause(Duration::from_micros(100));
    }
}

// ---------------------------------------------------------------- records

const KIND: u8 = 0xC0;
const TAGGED: u8 = 0x40;
const SHORT: u8 = 0x80;
/// The end-of-stream record of queue A: this one byte.
const SENTINEL: u8 = 0xC0;
const ON_B: u8 = 0x20;
const PRODUCER: u8 = 0x1F;

fn tag(kind: u8, on_b: bool, p: u32) -> u8 {
    assert!(p <= u32::from(PRODUCER));
    kind | if on_b { ON_B } else { 0 } | p as u8
}

/// Byte `i` (>= 2) of a short record; never 0.
fn short_byte(tag: u8, len: usize, i: usize) -> u8 {
    ((usize::from(tag) * 31 + len * 17 + i * 7) % 255 + 1) as u8
}

/// Tagged record `(p, s)` of `len` (> HDR) bytes into `out[..len]`.
fn encode_tagged(on_b: bool, p: u32, s: u64, len: usize, out: &mut [u8]) {
    let stream = u32::from(tag(TAGGED, on_b, p)) | (len as u32) << 16;
    record::encode(stream, s, &mut out[..len]);
}

/// Short record of producer `p`, `len` (1..=HDR) bytes, into `out[..len]`.
fn encode_short(on_b: bool, p: u32, len: usize, out: &mut [u8]) {
    let out = &mut out[..len];
    out[0] = tag(SHORT, on_b, p);
    if len >= 2 {
        out[1] = len as u8;
        for (i, b) in out.iter_mut().enumerate().skip(2) {
            *b = short_byte(tag(SHORT, on_b, p), len, i);
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rec {
    Tagged(u32, u64),
    Short(u32),
    Sentinel,
}

fn hex(rec: &[u8]) -> String {
    let n = rec.len().min(24);
    let mut s: String = rec[..n].iter().map(|b| format!("{b:02x}")).collect();
    if n < rec.len() {
        s.push_str("..");
    }
    s
}

/// Checks a popped record: `rec` is its buffer (at least `size` bytes, all
/// zero after the record), `reported` the length the queue gave (none for
/// `pop_many`), `size` the queue's record size.
fn decode(rec: &[u8], reported: Option<usize>, size: usize, on_b: bool, producers: u32) -> Result<Rec, String> {
    let t = rec[0];
    let (len, what) = match t & KIND {
        TAGGED => (usize::from(u16::from_le_bytes([rec[2], rec[3]])), "tagged"),
        SHORT => (if rec[1] == 0 { 1 } else { usize::from(rec[1]) }, "short"),
        SENTINEL => (1, "sentinel"),
        _ => return Err(format!("record of unknown kind ({} bytes reported): {}", fmt_len(reported), hex(rec))),
    };
    if reported.is_some_and(|n| n != len) {
        return Err(format!("{what} record of {len} bytes popped as {} bytes: {}", fmt_len(reported), hex(rec)));
    }
    let len_ok = match t & KIND {
        TAGGED => len > HDR && len <= size,
        SHORT => (1..=HDR).contains(&len),
        _ => true,
    };
    if !len_ok {
        return Err(format!("{what} record with impossible length {len} (record size {size}): {}", hex(rec)));
    }
    if let Some(i) = rec[len..].iter().position(|&b| b != 0) {
        return Err(format!(
            "{what} record of {len} bytes: byte {} after its end is {:#04x}: {}",
            len + i,
            rec[len + i],
            hex(rec)
        ));
    }
    if t & KIND == SENTINEL {
        if on_b {
            return Err("a sentinel of queue A popped from queue B".into());
        }
        return Ok(Rec::Sentinel);
    }
    if (t & ON_B != 0) != on_b {
        let (from, to) = if on_b { ("A", "B") } else { ("B", "A") };
        return Err(format!("a record of queue {from} popped from queue {to}: {}", hex(rec)));
    }
    let p = u32::from(t & PRODUCER);
    if p >= producers {
        return Err(format!("{what} record of unknown producer {p}: {}", hex(rec)));
    }
    if t & KIND == SHORT {
        if let Some(i) = (2..len).find(|&i| rec[i] != short_byte(t, len, i)) {
            return Err(format!("short record of producer {p}, {len} bytes: byte {i} is wrong: {}", hex(rec)));
        }
        return Ok(Rec::Short(p));
    }
    if rec[1] != 0 {
        return Err(format!("record of producer {p}, {len} bytes: byte 1 is not 0 (torn): {}", hex(rec)));
    }
    let (_, s) = record::decode(&rec[..len]).map_err(|why| format!("producer {p}: {why}: {}", hex(rec)))?;
    Ok(Rec::Tagged(p, s))
}

fn fmt_len(n: Option<usize>) -> String {
    n.map_or_else(|| "unknown".into(), |n| n.to_string())
}

// ---------------------------------------------------------------- shared memory

/// Counters of a worker, one cache line each, published every few operations.
const MAX_WORKERS: usize = 32;
const LINE: usize = 8;

/// A worker's counters: each the word of its line at its number.
#[derive(Clone, Copy)]
enum Counter {
    Ops,
    APushed,
    APopped,
    BPushed,
    BPopped,
    Unexpected,
    Drops,
}
/// First word of the ledger (word 0 is the phase, then the counter lines).
const LEDGER_AT: usize = (1 + MAX_WORKERS) * LINE;

/// Ledger word states (`(s + 1) << 2 | state`; 0: never used).
const PENDING: u64 = 1;
const DELIVERED: u64 = 2;
const SKIPPED: u64 = 3;

fn entry(s: u64, state: u64) -> u64 {
    ((s + 1) << 2) | state
}

fn describe(v: u64) -> String {
    if v == 0 {
        return "nothing".into();
    }
    let state = ["in an unknown state", "pending", "delivered", "skipped"][(v & 3) as usize];
    format!("record {} {state}", (v >> 2) - 1)
}

/// The file `soak.shm` of the test directory, mapped by every process: the
/// phase (0 running, 1 stopping), the workers' counters, the ledger.
struct Shared {
    words: SharedArray<AtomicU64>,
}

impl Shared {
    fn create(path: &Path, a_producers: u32) {
        let words = LEDGER_AT + a_producers as usize * W as usize;
        fs::write(path, vec![0u8; words * 8]).expect("create the shared file");
    }

    fn open(path: &Path) -> Shared {
        let len = fs::metadata(path).expect("stat the shared file").len() as usize;
        // Populated now, so that touching the ledger later does not grow RSS.
        Shared { words: SharedArray::map(path, len / 8, true) }
    }

    fn word(&self, i: usize) -> &AtomicU64 {
        self.words.get(i)
    }

    fn running(&self) -> bool {
        self.word(0).load(Relaxed) == 0
    }

    fn stop(&self) {
        self.word(0).store(1, SeqCst);
    }

    fn counter(&self, worker: usize, field: Counter) -> &AtomicU64 {
        assert!(worker < MAX_WORKERS && (field as usize) < LINE);
        self.word((1 + worker) * LINE + field as usize)
    }

    fn total(&self, field: Counter) -> u64 {
        (0..MAX_WORKERS).map(|w| self.counter(w, field).load(Relaxed)).sum()
    }

    fn ledger(&self, p: u32, s: u64) -> &AtomicU64 {
        self.word(LEDGER_AT + p as usize * W as usize + (s % W) as usize)
    }
}

/// Before pushing A record `(p, s)`: its ledger word must be free (the record
/// `W` back delivered or skipped); then it is marked pending. False (and
/// nothing marked) if the run stopped while waiting: the word stays pending,
/// for the check after the drain.
fn reserve(sh: &Shared, p: u32, s: u64, rep: &mut Report) -> bool {
    let slot = sh.ledger(p, s);
    let cur = slot.load(SeqCst);
    if s >= W {
        let prev = s - W;
        if cur == entry(prev, PENDING) {
            let since = Instant::now();
            while slot.load(SeqCst) == entry(prev, PENDING) {
                if since.elapsed() > LEDGER_PATIENCE {
                    rep.bad(format!(
                        "A record ({p}, {prev}) was acknowledged but not delivered within {LEDGER_PATIENCE:?} (missing)"
                    ));
                    break;
                }
                if !sh.running() {
                    return false;
                }
                pause(Duration::from_micros(100));
            }
        } else if cur != entry(prev, DELIVERED) && cur != entry(prev, SKIPPED) {
            rep.bad(format!("ledger word of A record ({p}, {s}) holds {} before its push", describe(cur)));
        }
    } else if cur != 0 {
        rep.bad(format!("ledger word of A record ({p}, {s}) holds {} before its push", describe(cur)));
    }
    slot.store(entry(s, PENDING), SeqCst);
    true
}

/// A record `(p, s)` was not pushed (its push returned an error).
fn skip(sh: &Shared, p: u32, s: u64, rep: &mut Report) {
    if let Err(cur) = sh.ledger(p, s).compare_exchange(entry(s, PENDING), entry(s, SKIPPED), SeqCst, SeqCst) {
        rep.bad(format!("A record ({p}, {s}): its push failed, yet its ledger word holds {}", describe(cur)));
    }
}

/// A record `(p, s)` was popped.
fn deliver(sh: &Shared, p: u32, s: u64) -> Result<(), String> {
    match sh.ledger(p, s).compare_exchange(entry(s, PENDING), entry(s, DELIVERED), SeqCst, SeqCst) {
        Ok(_) => Ok(()),
        Err(cur) if cur == entry(s, DELIVERED) => Err(format!("A record ({p}, {s}) delivered twice")),
        Err(cur) if cur == entry(s, SKIPPED) => Err(format!("A record ({p}, {s}) delivered although its push failed")),
        Err(cur) => Err(format!("A record ({p}, {s}) popped while its ledger word holds {} (stale)", describe(cur))),
    }
}

// ---------------------------------------------------------------- workers

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    ProduceA,
    ConsumeA,
    ProduceB,
    ConsumeB,
    Dropper,
}

impl Role {
    fn name(self) -> &'static str {
        match self {
            Role::ProduceA => "pa",
            Role::ConsumeA => "ca",
            Role::ProduceB => "pb",
            Role::ConsumeB => "cb",
            Role::Dropper => "drop",
        }
    }

    fn parse(s: &str) -> Role {
        [Role::ProduceA, Role::ConsumeA, Role::ProduceB, Role::ConsumeB, Role::Dropper]
            .into_iter()
            .find(|r| r.name() == s)
            .unwrap_or_else(|| panic!("unknown role {s}"))
    }
}

/// A worker thread: its id (counter line, report file), role, and producer
/// number on its queue (producers only).
#[derive(Debug, Clone, Copy)]
struct Worker {
    id: usize,
    role: Role,
    producer: u32,
}

fn format_workers(ws: &[Worker]) -> String {
    ws.iter().map(|w| format!("{}:{}:{}", w.id, w.role.name(), w.producer)).collect::<Vec<_>>().join(",")
}

fn parse_workers(s: &str) -> Vec<Worker> {
    s.split(',')
        .map(|w| {
            let f: Vec<&str> = w.split(':').collect();
            Worker { id: f[0].parse().unwrap(), role: Role::parse(f[1]), producer: f[2].parse().unwrap() }
        })
        .collect()
}

/// The workers of each process: the parent's first, then each child's.
fn plan() -> Vec<Vec<Worker>> {
    use Role::*;
    let (mut id, mut pa, mut pb) = (0, 0, 0);
    let mut make = |roles: &[Role]| -> Vec<Worker> {
        roles
            .iter()
            .map(|&role| {
                let producer = match role {
                    ProduceA => (pa, pa += 1).0,
                    ProduceB => (pb, pb += 1).0,
                    _ => 0,
                };
                id += 1;
                Worker { id: id - 1, role, producer }
            })
            .collect()
    };
    let mut procs = vec![make(&[ProduceA, ProduceA, ConsumeA, ConsumeA, ProduceB, ConsumeB, Dropper])];
    for _ in 0..CHILDREN {
        procs.push(make(&[ProduceA, ConsumeA, ProduceB, ConsumeB]));
    }
    procs
}

/// What a worker did; written to `w<id>.rep` at its end.
#[derive(Default)]
struct Report {
    ops: u64,
    a_pushed: u64,
    a_popped: u64,
    b_pushed: u64,
    b_popped: u64,
    drops: u64,
    opens: u64,
    /// A producer: tagged records acknowledged, short ones, tagged ones whose push failed.
    ok: u64,
    short_ok: u64,
    skipped: u64,
    /// A consumer: records popped per producer.
    tagged: BTreeMap<u32, u64>,
    short: BTreeMap<u32, u64>,
    sentinels: u64,
    repushed: u64,
    unexpected: u64,
    errors: Vec<String>,
    /// Wrong records: torn, duplicated, out of order, missing...
    bad: u64,
    bads: Vec<String>,
    /// B records delivered out of order by a call that a drop of B interrupted.
    reordered: u64,
    notes: Vec<String>,
}

impl Report {
    fn unexpected(&mut self, what: &str, e: &Error) {
        self.unexpected += 1;
        if self.errors.len() < 5 {
            self.errors.push(format!("{what}: {} ({e})", code_name(e.code())));
        }
    }

    fn bad(&mut self, msg: String) {
        self.bad += 1;
        if self.bads.len() < 5 {
            self.bads.push(msg);
        }
    }

    fn publish(&self, sh: &Shared, id: usize) {
        for (field, v) in [
            (Counter::Ops, self.ops),
            (Counter::APushed, self.a_pushed),
            (Counter::APopped, self.a_popped),
            (Counter::BPushed, self.b_pushed),
            (Counter::BPopped, self.b_popped),
            (Counter::Unexpected, self.unexpected),
            (Counter::Drops, self.drops),
        ] {
            sh.counter(id, field).store(v, Relaxed);
        }
    }

    fn text(&self, w: Worker) -> String {
        let mut t = format!("role={}\nproducer={}\n", w.role.name(), w.producer);
        for (k, v) in [
            ("ops", self.ops),
            ("a_pushed", self.a_pushed),
            ("a_popped", self.a_popped),
            ("b_pushed", self.b_pushed),
            ("b_popped", self.b_popped),
            ("drops", self.drops),
            ("opens", self.opens),
            ("ok", self.ok),
            ("short_ok", self.short_ok),
            ("skipped", self.skipped),
            ("sentinels", self.sentinels),
            ("repushed", self.repushed),
            ("unexpected", self.unexpected),
            ("bad", self.bad),
            ("reordered", self.reordered),
        ] {
            t += &format!("{k}={v}\n");
        }
        for (p, n) in &self.tagged {
            t += &format!("tagged.{p}={n}\n");
        }
        for (p, n) in &self.short {
            t += &format!("short.{p}={n}\n");
        }
        for e in &self.errors {
            t += &format!("error={}\n", e.replace('\n', " "));
        }
        for b in &self.bads {
            t += &format!("bad_record={}\n", b.replace('\n', " "));
        }
        for n in &self.notes {
            t += &format!("note={}\n", n.replace('\n', " "));
        }
        t
    }
}

/// A report as read back.
struct Parsed {
    worker: Worker,
    nums: HashMap<String, u64>,
    errors: Vec<String>,
    bads: Vec<String>,
    notes: Vec<String>,
}

impl Parsed {
    fn read(path: &Path, worker: Worker) -> Parsed {
        let text = fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        let mut p = Parsed { worker, nums: HashMap::new(), errors: Vec::new(), bads: Vec::new(), notes: Vec::new() };
        for line in text.lines() {
            let Some((k, v)) = line.split_once('=') else { continue };
            match k {
                "error" => p.errors.push(v.to_string()),
                "bad_record" => p.bads.push(v.to_string()),
                "note" => p.notes.push(v.to_string()),
                "role" => {}
                _ => {
                    p.nums.insert(
                        k.to_string(),
                        v.parse().unwrap_or_else(|_| panic!("{}: bad line {line}", path.display())),
                    );
                }
            }
        }
        p
    }

    fn get(&self, k: &str) -> u64 {
        self.nums.get(k).copied().unwrap_or(0)
    }
}

/// What the workers of a process share.
struct Ctx {
    dir: PathBuf,
    shared: Shared,
    /// This process's handle of queue A, shared by its A workers.
    a: Queue,
    a_producers: u32,
    b_producers: u32,
    seed: u64,
}

impl Ctx {
    fn open(dir: &Path, a_producers: u32, b_producers: u32, seed: u64) -> Ctx {
        Ctx {
            dir: dir.to_path_buf(),
            shared: Shared::open(&dir.join(SHARED_FILE)),
            a: Queue::open(dir, QA).expect("open queue A"),
            a_producers,
            b_producers,
            seed,
        }
    }
}

fn report_path(dir: &Path, id: usize) -> PathBuf {
    dir.join(format!("w{id}.rep"))
}

fn run_worker(ctx: &Ctx, w: Worker) {
    let mut rep = Report::default();
    let result = std::panic::catch_unwind(AssertUnwindSafe(|| match w.role {
        Role::ProduceA => produce(ctx, w, &mut rep, false),
        Role::ProduceB => produce(ctx, w, &mut rep, true),
        Role::ConsumeA => consume(ctx, w, &mut rep, false),
        Role::ConsumeB => consume(ctx, w, &mut rep, true),
        Role::Dropper => dropper(ctx, w, &mut rep),
    }));
    if let Err(panic) = result {
        let msg = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        rep.unexpected += 1;
        rep.errors.push(format!("worker panicked: {msg}"));
    }
    rep.publish(&ctx.shared, w.id);
    write_atomic(&report_path(&ctx.dir, w.id), rep.text(w).as_bytes());
}

/// The start of every worker turn: reports progress every 64 turns, pauses
/// now and then, and (re)opens queue B when the worker uses it and has no
/// handle. False: the turn went to opening B; start the next one.
fn begin_turn(
    ctx: &Ctx,
    w: Worker,
    rep: &mut Report,
    rng: &mut Rng,
    turns: &mut u64,
    handle: &mut Option<Queue>,
    on_b: bool,
) -> bool {
    *turns += 1;
    if *turns % 64 == 0 {
        rep.publish(&ctx.shared, w.id);
    }
    if rng.one_in(1024) {
        pause(Duration::from_micros(rng.below(3000)));
    }
    if on_b && handle.is_none() {
        open_b(ctx, handle, rep, rng);
        return false;
    }
    true
}

/// Opens queue B into `handle`; a missing B (between a drop and its
/// re-creation) is expected.
fn open_b(ctx: &Ctx, handle: &mut Option<Queue>, rep: &mut Report, rng: &mut Rng) {
    rep.ops += 1;
    match Queue::open(&ctx.dir, QB) {
        Ok(q) => {
            rep.opens += 1;
            *handle = Some(q);
        }
        Err(e) if e.code() == TBL_NOT_FOUND => pause(Duration::from_micros(rng.range(100, 1000) as u64)),
        Err(e) => {
            rep.unexpected("open B", &e);
            pause(Duration::from_millis(1));
        }
    }
}

fn queue_name(on_b: bool) -> &'static str {
    if on_b { "B" } else { "A" }
}

/// Pushes single records and batches of tagged and short records until the stop.
fn produce(ctx: &Ctx, w: Worker, rep: &mut Report, on_b: bool) {
    let sh = &ctx.shared;
    let p = w.producer;
    let mut rng = Rng::new(ctx.seed ^ ((w.id as u64) << 40));
    let mut handle: Option<Queue> = None;
    let (mut seq, mut misses, mut turns) = (0u64, 0u32, 0u64);
    let mut buf = Vec::new();
    while sh.running() {
        if !begin_turn(ctx, w, rep, &mut rng, &mut turns, &mut handle, on_b) {
            continue;
        }
        let q = if on_b { handle.as_ref().unwrap() } else { &ctx.a };
        let size = q.record_size();
        let k = if rng.one_in(3) { rng.range(2, 16) } else { 1 };
        let short = rng.one_in(16);
        let len = if short { rng.range(1, HDR) } else { rng.range(HDR + 1, size) };
        if !on_b && !short {
            if let Some(i) = (0..k).find(|&i| !reserve(sh, p, seq + i as u64, rep)) {
                // Stopped while waiting: give back what was reserved.
                for j in 0..i {
                    skip(sh, p, seq + j as u64, rep);
                }
                break;
            }
        }
        buf.resize(k * len, 0);
        for (i, rec) in buf.chunks_exact_mut(len).enumerate() {
            if short {
                encode_short(on_b, p, len, rec);
            } else {
                encode_tagged(on_b, p, seq + i as u64, len, rec);
            }
        }
        let (done, err) = if k == 1 {
            match q.push(&buf) {
                Ok(()) => (1, None),
                Err(e) => (0, Some(e)),
            }
        } else {
            q.push_many(&buf, len)
        };
        rep.ops += 1;
        if done > k || (done < k && err.is_none()) {
            rep.bad(format!("push of {k} records on {} returned {done} and {err:?}", queue_name(on_b)));
        }
        let done = done.min(k);
        if on_b {
            rep.b_pushed += done as u64;
        } else {
            rep.a_pushed += done as u64;
            if short {
                rep.short_ok += done as u64;
            } else {
                rep.ok += done as u64;
                rep.skipped += (k - done) as u64;
                for i in done..k {
                    skip(sh, p, seq + i as u64, rep);
                }
            }
        }
        if !short {
            seq += k as u64;
        }
        match err {
            None => misses = 0,
            Some(e) if e.code() == DATA_SPC_FULL => backoff(&mut misses),
            Some(e) if on_b && e.code() == SHM_ERR_EIDRM => handle = None,
            Some(e) => {
                rep.unexpected(&format!("push on {}", queue_name(on_b)), &e);
                pause(Duration::from_millis(1));
            }
        }
    }
}

/// What a consumer checks across records: each producer's last sequence number.
struct Seen {
    on_b: bool,
    producers: u32,
    /// Per producer: the last sequence number and the handle it came from.
    last: Vec<Option<(u64, u64)>>,
    /// The current handle (count of opens of B; 0 on A).
    handle: u64,
    /// Order violations of the current call, judged after it (see `settle`).
    disorder: Vec<String>,
}

impl Seen {
    fn take(&mut self, sh: &Shared, rec: &[u8], reported: Option<usize>, size: usize, rep: &mut Report) {
        match decode(rec, reported, size, self.on_b, self.producers) {
            Ok(Rec::Sentinel) => rep.sentinels += 1,
            Ok(Rec::Short(p)) => {
                if self.on_b {
                    rep.b_popped += 1;
                } else {
                    rep.a_popped += 1;
                    *rep.short.entry(p).or_default() += 1;
                }
            }
            Ok(Rec::Tagged(p, s)) => {
                if self.on_b {
                    rep.b_popped += 1;
                } else {
                    rep.a_popped += 1;
                    *rep.tagged.entry(p).or_default() += 1;
                    if let Err(msg) = deliver(sh, p, s) {
                        rep.bad(msg);
                    }
                }
                let last = &mut self.last[p as usize];
                if let Some((l, h)) = last.filter(|&(l, _)| l >= s) {
                    self.disorder.push(format!(
                        "{} record ({p}, {s}) popped from handle #{} after ({p}, {l}) from handle #{h} by the same consumer",
                        queue_name(self.on_b),
                        self.handle
                    ));
                }
                *last = Some((s, self.handle));
            }
            Err(msg) => rep.bad(format!("{}: {msg}", queue_name(self.on_b))),
        }
    }

    /// After a call: its order violations are failures, unless the queue was
    /// dropped meanwhile. (A batch pop that a drop interrupts publishes the
    /// records it claimed but did not take again, one lap later; calls still
    /// running on the dropped queue may then get them after newer ones. That
    /// is about records of a dropped queue, which are not checked.)
    fn settle(&mut self, dropped: bool, call: &str, rep: &mut Report) {
        for msg in self.disorder.drain(..) {
            let msg = format!("{msg}, in a {call} call");
            if dropped {
                rep.reordered += 1;
                if rep.notes.len() < 3 {
                    rep.notes.push(format!("{msg} (the queue was dropped during the call: not checked)"));
                }
            } else {
                rep.bad(msg);
            }
        }
    }
}

/// Pops with every wait mode, singly and in batches: on A until a sentinel,
/// on B until the stop.
fn consume(ctx: &Ctx, w: Worker, rep: &mut Report, on_b: bool) {
    let sh = &ctx.shared;
    let mut rng = Rng::new(ctx.seed ^ ((w.id as u64) << 40));
    let producers = if on_b { ctx.b_producers } else { ctx.a_producers };
    let mut seen = Seen { on_b, producers, last: vec![None; producers as usize], handle: 0, disorder: Vec::new() };
    let mut handle: Option<Queue> = None;
    let (mut one, mut many, mut into) = (Vec::new(), Vec::new(), Vec::new());
    let mut lens = [0usize; 32];
    let (mut misses, mut turns) = (0u32, 0u64);
    loop {
        if if on_b { !sh.running() } else { rep.sentinels > 0 } {
            break;
        }
        if !begin_turn(ctx, w, rep, &mut rng, &mut turns, &mut handle, on_b) {
            continue;
        }
        let q = if on_b { handle.as_ref().unwrap() } else { &ctx.a };
        seen.handle = rep.opens;
        let size = q.record_size();
        let short_wait = rng.millis(1, 20);
        let wait = match rng.below(4) {
            0 => Wait::NoWait,
            _ => Wait::Until(Instant::now() + short_wait),
        };
        let before = rep.a_popped + rep.b_popped + rep.sentinels;
        let mode = rng.below(16);
        let err = match mode {
            0..=9 => {
                let wait = match mode {
                    0..=4 => Wait::Until(Instant::now() + short_wait),
                    5..=8 => Wait::NoWait,
                    _ => Wait::Forever,
                };
                one.resize(size, 0);
                rep.ops += 1;
                match q.pop(&mut one, wait) {
                    Ok(n) => {
                        seen.take(sh, &one, Some(n), size, rep);
                        None
                    }
                    Err(e) => Some(e),
                }
            }
            10..=12 => {
                many.clear();
                let (n, err) = q.pop_many(&mut many, size, rng.range(2, 32), wait);
                rep.ops += 1;
                if many.len() != n * size {
                    rep.bad(format!("pop_many took {n} records but left {} bytes", many.len()));
                }
                for rec in many.chunks_exact(size).take(n) {
                    seen.take(sh, rec, None, size, rep);
                }
                err
            }
            _ => {
                let each = size + 8 * rng.range(0, 1);
                let max = rng.range(1, lens.len());
                into.clear();
                into.resize(each * max, 0xEE);
                let (n, err) = q.pop_into(&mut into, each, &mut lens[..max], wait);
                rep.ops += 1;
                for (i, rec) in into.chunks_exact(each).take(n).enumerate() {
                    seen.take(sh, rec, Some(lens[i]), size, rep);
                }
                err
            }
        };
        let call = match mode {
            0..=9 => "pop",
            10..=12 => "pop_many",
            _ => "pop_into",
        };
        seen.settle(q.is_dropped(), call, rep);
        let took = rep.a_popped + rep.b_popped + rep.sentinels > before;
        match err {
            None => misses = 0,
            Some(e) if matches!(e.code(), NO_DATA_FOUND | MQUE_WAIT_TMO) => {
                if took {
                    misses = 0;
                } else {
                    backoff(&mut misses);
                }
            }
            Some(e) if on_b && e.code() == SHM_ERR_EIDRM => handle = None,
            Some(e) => {
                rep.unexpected(&format!("pop on {}", queue_name(on_b)), &e);
                pause(Duration::from_millis(1));
            }
        }
    }
    // A batch may have taken several sentinels: the others are someone else's.
    for _ in 1..rep.sentinels.max(1) {
        loop {
            rep.ops += 1;
            match ctx.a.push(&[SENTINEL]) {
                Ok(()) => break,
                Err(e) if e.code() == DATA_SPC_FULL => pause(Duration::from_micros(100)),
                Err(e) => {
                    rep.unexpected("re-push of a sentinel on A", &e);
                    break;
                }
            }
        }
        rep.repushed += 1;
    }
}

/// A spec for queue B, of another size each time.
fn b_spec(rng: &mut Rng) -> Spec {
    Spec::new(rng.range(16, 256) as u64, rng.range(48, 160) as u64)
}

/// Drops and re-creates queue B every 0.5 to 1 s, then drops it a last time.
fn dropper(ctx: &Ctx, w: Worker, rep: &mut Report) {
    let sh = &ctx.shared;
    let mut rng = Rng::new(ctx.seed ^ ((w.id as u64) << 40));
    loop {
        let until = Instant::now() + rng.millis(500, 1000);
        while sh.running() && Instant::now() < until {
            pause(Duration::from_millis(5));
        }
        if !sh.running() {
            break;
        }
        rep.ops += 2;
        match Queue::drop_queue(&ctx.dir, QB) {
            Ok(()) => rep.drops += 1,
            Err(e) => rep.unexpected("drop B", &e),
        }
        if let Err(e) = Queue::create(&ctx.dir, QB, &b_spec(&mut rng)) {
            rep.unexpected("create B", &e);
        }
        rep.publish(sh, w.id);
    }
    // The last drop wakes B's sleepers, which then see the stop.
    rep.ops += 1;
    match Queue::drop_queue(&ctx.dir, QB) {
        Ok(()) => rep.drops += 1,
        Err(e) => rep.unexpected("last drop of B", &e),
    }
}

// ---------------------------------------------------------------- the child

fn parse_producers() -> (u32, u32) {
    let v = child_env(ENV_PRODUCERS);
    let (a, b) = v.split_once(',').unwrap();
    (a.parse().unwrap(), b.parse().unwrap())
}

/// Entry point of the child processes.
#[test]
#[ignore = "child process of the soak: started by it"]
fn child() {
    let dir = child_env(ENV_DIR);
    let workers = parse_workers(&child_env(ENV_WORKERS));
    let (a_producers, b_producers) = parse_producers();
    let ctx = Ctx::open(Path::new(&dir), a_producers, b_producers, child_env(ENV_SEED).parse().unwrap());
    std::thread::scope(|sc| {
        for &w in &workers {
            let ctx = &ctx;
            sc.spawn(move || run_worker(ctx, w));
        }
    });
}

// ---------------------------------------------------------------- the parent

#[derive(Debug, Clone, Copy, Default)]
struct Mem {
    rss_kib: u64,
    fds: usize,
    maps: usize,
}

/// VmRSS, open descriptors, and mappings of files of `dir`, of process `pid`.
fn sample(pid: u32, dir: &Path) -> Mem {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let rss_kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0);
    let fds = fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count());
    let d = dir.to_str().unwrap();
    let maps =
        fs::read_to_string(format!("/proc/{pid}/maps")).map_or(0, |m| m.lines().filter(|l| l.contains(d)).count());
    Mem { rss_kib, fds, maps }
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn wait_until(deadline: Instant, kids: &mut Children, mut cond: impl FnMut(&mut Children) -> bool) -> bool {
    loop {
        if cond(kids) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        pause(Duration::from_millis(5));
    }
}

#[test]
fn soak() {
    let secs: f64 = std::env::var("TVMQ_SOAK_SECONDS")
        .ok()
        .map_or(5.0, |v| v.trim().parse().expect("TVMQ_SOAK_SECONDS: a number of seconds"));
    assert!(secs > 0.0, "TVMQ_SOAK_SECONDS must be positive");
    let run_for = Duration::from_secs_f64(secs);
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    let tmp = TempDir::new("soak", "run");
    let dir = tmp.path().to_path_buf();

    Queue::create(&dir, QA, &Spec::new(A_ROWS, A_SIZE)).expect("create queue A");
    Queue::create(&dir, QB, &b_spec(&mut Rng::new(seed))).expect("create queue B");
    let plan = plan();
    let all: Vec<Worker> = plan.iter().flatten().copied().collect();
    let count = |role| all.iter().filter(|w| w.role == role).count() as u32;
    let (a_producers, b_producers, a_consumers) = (count(Role::ProduceA), count(Role::ProduceB), count(Role::ConsumeA));
    assert!(all.len() <= MAX_WORKERS && a_producers <= 32 && b_producers <= 32);
    Shared::create(&dir.join(SHARED_FILE), a_producers);

    // The child processes, killed (by their own pid) if the test fails.
    let mut kids = Children::start(CHILDREN, CHILDREN as u32, &dir, |k, _| {
        let mut cmd = child_test("child");
        cmd.env(ENV_DIR, &dir)
            .env(ENV_WORKERS, format_workers(&plan[k + 1]))
            .env(ENV_PRODUCERS, format!("{a_producers},{b_producers}"))
            .env(ENV_SEED, seed.to_string());
        (format!("child{}", k + 1), cmd)
    });
    let ctx = Arc::new(Ctx::open(&dir, a_producers, b_producers, seed));
    let threads: Vec<(Worker, JoinHandle<()>)> = plan[0]
        .iter()
        .map(|&w| {
            let ctx = ctx.clone();
            let t = std::thread::Builder::new()
                .name(format!("{}{}", w.role.name(), w.id))
                .spawn(move || run_worker(&ctx, w))
                .expect("spawn worker");
            (w, t)
        })
        .collect();
    let start = Instant::now();

    // The run: sample and print while the workers work.
    let mut procs: Vec<(String, u32)> = vec![("parent".into(), std::process::id())];
    procs.extend(kids.kids.iter().map(|k| (k.name.clone(), k.child.id())));
    let sample_all = || procs.iter().map(|(_, pid)| sample(*pid, &dir)).collect::<Vec<Mem>>();
    let print_row = |t: Duration, mems: &[Mem], note: &str| {
        let rss: String = mems.iter().map(|m| format!("{:>9.1}", mib(m.rss_kib))).collect();
        println!(
            "{:>7.1} {:>13} {:>7}  {rss}  {note}",
            t.as_secs_f64(),
            ctx.shared.total(Counter::Ops),
            ctx.shared.total(Counter::Drops)
        );
    };
    println!(
        "soak: {secs} s; queue A {A_ROWS} x {A_SIZE} B; queue B dropped and re-created every 0.5-1 s; \
         {} processes, {} worker threads",
        procs.len(),
        all.len()
    );
    let names: String = procs.iter().map(|(n, _)| format!("{n:>9}")).collect();
    println!("{:>7} {:>13} {:>7}  {names}  (RSS, MiB)", "t (s)", "operations", "B drops");
    let sample_every = Duration::from_secs_f64((secs / 10.0).clamp(0.5, 3.0));
    let print_every = sample_every.max(run_for / 20);
    let (mut next_sample, mut next_print) = (Duration::ZERO, Duration::ZERO);
    let mut baseline: Option<Vec<Mem>> = None;
    let mut max_rss = vec![0u64; procs.len()];
    loop {
        let t = start.elapsed();
        if t >= run_for {
            break;
        }
        kids.check(true);
        let at_baseline = baseline.is_none() && t >= run_for.mul_f64(0.2);
        if t >= next_sample || at_baseline {
            let mems = sample_all();
            for (m, mem) in max_rss.iter_mut().zip(&mems) {
                *m = (*m).max(mem.rss_kib);
            }
            let due = t >= next_print;
            if due {
                next_print += print_every;
            }
            if at_baseline {
                print_row(t, &mems, "<- after 20%: the reference");
                baseline = Some(mems);
            } else if due {
                print_row(t, &mems, "");
            }
            next_sample += sample_every;
        }
        pause(Duration::from_millis(20).min(run_for.saturating_sub(start.elapsed())));
    }
    let end = sample_all();
    let ran = start.elapsed();
    print_row(ran, &end, "<- end");
    let baseline = baseline.unwrap_or_else(|| end.clone());

    // The stop: producers stop, consumers drain A up to their sentinels.
    ctx.shared.stop();
    let stopped = Instant::now();
    let deadline = stopped + FINISH_DEADLINE;
    let producers_done = wait_until(deadline, &mut kids, |kids| {
        kids.check(false);
        all.iter()
            .filter(|w| matches!(w.role, Role::ProduceA | Role::ProduceB))
            .all(|w| report_path(&dir, w.id).exists())
    });
    assert!(producers_done, "the producers did not stop within {FINISH_DEADLINE:?}");
    for _ in 0..a_consumers {
        loop {
            match ctx.a.push(&[SENTINEL]) {
                Ok(()) => break,
                Err(e) if e.code() == DATA_SPC_FULL && Instant::now() < deadline => pause(Duration::from_micros(200)),
                Err(e) => panic!("pushing a sentinel on A: {e}"),
            }
        }
    }
    let finished = wait_until(deadline, &mut kids, |kids| {
        kids.check(false);
        all.iter().all(|w| report_path(&dir, w.id).exists())
            && kids.all_exited()
            && threads.iter().all(|(_, t)| t.is_finished())
    });
    if !finished {
        let missing: Vec<String> = all
            .iter()
            .filter(|w| !report_path(&dir, w.id).exists())
            .map(|w| format!("{}{}", w.role.name(), w.id))
            .collect();
        panic!(
            "workers did not finish within {FINISH_DEADLINE:?} of the stop: {missing:?}; A depth {}, stats {:?}",
            ctx.a.depth(),
            ctx.a.stats()
        );
    }
    let drain = stopped.elapsed();
    for (w, t) in threads {
        t.join().unwrap_or_else(|_| panic!("worker {w:?} panicked"));
    }
    kids.check(false);

    // The checks.
    let reports: Vec<Parsed> = all.iter().map(|&w| Parsed::read(&report_path(&dir, w.id), w)).collect();
    let sum = |k: &str| reports.iter().map(|r| r.get(k)).sum::<u64>();
    let mut problems: Vec<String> = Vec::new();
    for r in &reports {
        let who = format!("{}{}", r.worker.role.name(), r.worker.id);
        if r.get("unexpected") > 0 {
            problems.push(format!("{who}: {} unexpected errors, first: {}", r.get("unexpected"), r.errors.join(" | ")));
        }
        if r.get("bad") > 0 {
            problems.push(format!("{who}: {} wrong records, first: {}", r.get("bad"), r.bads.join(" | ")));
        }
    }
    for r in reports.iter().filter(|r| r.worker.role == Role::ProduceA) {
        let p = r.worker.producer;
        let popped = sum(&format!("tagged.{p}"));
        let popped_short = sum(&format!("short.{p}"));
        if r.get("ok") != popped || r.get("short_ok") != popped_short {
            problems.push(format!(
                "A producer {p}: {} tagged and {} short records acknowledged, {popped} and {popped_short} popped",
                r.get("ok"),
                r.get("short_ok")
            ));
        }
    }
    let mut missing = Vec::new();
    for p in 0..a_producers {
        for i in 0..W {
            let v = ctx.shared.ledger(p, i).load(SeqCst);
            if v & 3 == PENDING {
                missing.push(format!("({p}, {})", (v >> 2) - 1));
            }
        }
    }
    if !missing.is_empty() {
        problems.push(format!(
            "{} A records acknowledged but never popped: {}",
            missing.len(),
            missing.iter().take(10).cloned().collect::<Vec<_>>().join(" ")
        ));
    }
    let stats = ctx.a.stats();
    let a_records = sum("a_pushed");
    let a_total = a_records + u64::from(a_consumers) + sum("repushed");
    if stats.depth != 0 || stats.pushed != a_total || stats.popped != a_total {
        problems.push(format!(
            "queue A after the drain: pushed {}, popped {}, depth {}; expected {a_total}, {a_total}, 0",
            stats.pushed, stats.popped, stats.depth
        ));
    }
    if stats.recovered_pushes + stats.recovered_pops + stats.robbed != 0 {
        problems.push(format!("queue A: recoveries without any crash: {stats:?}"));
    }
    if sum("a_popped") == 0 || sum("b_pushed") == 0 || sum("b_popped") == 0 || sum("drops") == 0 {
        problems.push("the soak did not exercise both queues (nothing pushed, popped or dropped)".into());
    }
    let mut memory = Vec::new();
    for (((name, _), base), (end, max)) in procs.iter().zip(&baseline).zip(end.iter().zip(&max_rss)) {
        memory.push(format!(
            "{name} {:.1}->{:.1} (max {:.1}, fds {}->{}, maps {}->{})",
            mib(base.rss_kib),
            mib(end.rss_kib),
            mib(*max),
            base.fds,
            end.fds,
            base.maps,
            end.maps
        ));
        if end.rss_kib > base.rss_kib + RSS_GROWTH_LIMIT_KIB {
            problems.push(format!(
                "{name}: RSS grew from {:.1} MiB after 20% of the run to {:.1} MiB at the end",
                mib(base.rss_kib),
                mib(end.rss_kib)
            ));
        }
        if end.fds > base.fds + HANDLE_SLACK || end.maps > base.maps + HANDLE_SLACK {
            problems.push(format!(
                "{name}: open descriptors {} -> {}, mappings of queue files {} -> {} (leaked handles)",
                base.fds, end.fds, base.maps, end.maps
            ));
        }
    }
    println!(
        "soak summary: {:.1} s (+{:.1} s to stop and drain), {} operations; A: {} records pushed, {} popped \
         ({} tagged records refused: full); B: {} pushed, {} popped ({} out of order from calls that a drop \
         interrupted), {} drops, {} opens; unexpected errors {}; wrong records {}; RSS MiB after 20% -> end: {}",
        ran.as_secs_f64(),
        drain.as_secs_f64(),
        sum("ops"),
        a_records,
        sum("a_popped"),
        sum("skipped"),
        sum("b_pushed"),
        sum("b_popped"),
        sum("reordered"),
        sum("drops"),
        sum("opens"),
        sum("unexpected"),
        sum("bad"),
        memory.join(", ")
    );
    for note in reports.iter().flat_map(|r| &r.notes).take(3) {
        println!("note: {note}");
    }
    assert!(problems.is_empty(), "soak failed:\n{}", problems.join("\n"));
}

/// The record checks the soak relies on detect what they must.
#[test]
fn record_checks_detect_damage() {
    let size = 100;
    for len in 1..=size {
        for on_b in [false, true] {
            let mut rec = vec![0u8; size];
            let want = if len > HDR {
                encode_tagged(on_b, 3, len as u64 * 7, len, &mut rec);
                Rec::Tagged(3, len as u64 * 7)
            } else {
                encode_short(on_b, 3, len, &mut rec);
                Rec::Short(3)
            };
            assert_eq!(decode(&rec, Some(len), size, on_b, 4), Ok(want));
            assert_eq!(decode(&rec, None, size, on_b, 4), Ok(want));
            assert!(decode(&rec, Some(len), size, !on_b, 4).is_err(), "queue mix-up, len {len}");
            assert!(decode(&rec, Some(len), size, on_b, 3).is_err(), "unknown producer, len {len}");
            if len < size {
                assert!(decode(&rec, Some(len + 1), size, on_b, 4).is_err(), "length, len {len}");
                let mut tail = rec.clone();
                tail[size - 1] = 1;
                assert!(decode(&tail, Some(len), size, on_b, 4).is_err(), "tail, len {len}");
            }
            for i in 0..len {
                let mut torn = rec.clone();
                torn[i] ^= 0x10;
                assert!(decode(&torn, None, size, on_b, 4) != Ok(want), "byte {i} of {len} changed unnoticed");
            }
        }
    }
    let mut rec = vec![0u8; size];
    rec[0] = SENTINEL;
    assert_eq!(decode(&rec, Some(1), size, false, 4), Ok(Rec::Sentinel));
    assert!(decode(&rec, Some(1), size, true, 4).is_err());
    assert!(decode(&vec![0u8; size], None, size, false, 4).is_err(), "an empty record");
}
