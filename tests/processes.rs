//! Exactly-once delivery across processes and threads.
//!
//! The parent test creates a queue in a fresh directory under /dev/shm and
//! re-executes this test binary once per child process, running its ignored
//! `child` test (`common::child_test`), which fails when it is run on its
//! own. A child runs the producer and consumer threads listed in its
//! environment (records: `common::record`):
//!
//! * producer `p` pushes records `(p, 0..per_producer)`: a 16-byte header
//!   (producer, sequence number, checksum) and a payload of 1 to (record
//!   size minus 16) bytes whose length and content are derived from `(p, s)`;
//!   on `DATA_SPC_FULL` it counts and retries. When done it writes `done-p<p>`.
//! * consumer `c` pops (a mix of `Wait::Until`, `NoWait` with retries,
//!   `Wait::Forever` and `pop_many`), verifies every record (length, checksum,
//!   payload, zeroed tail) and writes what it got, in order, to `c<c>.bin`,
//!   plus a summary `c<c>.sum`. It stops at a sentinel record, which the
//!   parent pushes once per consumer after every producer has finished.
//!
//! The parent then checks: every record exactly once, none torn, each
//! producer's records in order as seen by each consumer, and the counters.

mod common;
use common::record::{self, HDR};
use common::{Children, TempDir, child_env, child_test, code_name, splitmix64, write_atomic};
use std::collections::HashMap;
use std::fs;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tvm::error::{DATA_SPC_FULL, MQUE_WAIT_TMO, NO_DATA_FOUND};
use tvm::{Queue, Spec, Wait};

const QID: u32 = 21;
/// Producer id of the end-of-stream records.
const SENTINEL: u32 = u32::MAX;
/// Hang guard for a whole scenario (never reached when things work).
const SCENARIO_DEADLINE: Duration = Duration::from_secs(100);

// ---------------------------------------------------------------- helpers

fn mix(p: u32, s: u64) -> u64 {
    splitmix64((u64::from(p) << 40) ^ s ^ 0x5bd1_e995)
}

/// Length of record `(p, s)`: header plus 1..=(size - HDR) payload bytes.
fn record_len(p: u32, s: u64, size: usize) -> usize {
    HDR + 1 + (mix(p, s) % (size - HDR) as u64) as usize
}

/// Writes record `(p, s)` into `buf` (at least `size` bytes); returns its length.
fn encode(p: u32, s: u64, size: usize, buf: &mut [u8]) -> usize {
    let len = record_len(p, s, size);
    record::encode(p, s, &mut buf[..len]);
    len
}

fn encode_sentinel(buf: &mut [u8]) -> usize {
    record::encode(SENTINEL, 0, &mut buf[..HDR]);
    HDR
}

/// Checks a popped record: `rec` is the record-size buffer, `n` the length
/// the queue reported. Returns `(producer, seq)`.
fn verify(rec: &[u8], n: usize, nproducers: u32, per: u64) -> Result<(u32, u64), String> {
    let size = rec.len();
    if n < HDR || n > size {
        return Err(format!("length {n} outside {HDR}..={size}"));
    }
    let (p, s) = record::id(rec).expect("a record-size buffer");
    if let Some(i) = rec[n..].iter().position(|&b| b != 0) {
        return Err(format!("record ({p}, {s}) of {n} bytes: tail byte {} is {:#x}, not 0", n + i, rec[n + i]));
    }
    if p == SENTINEL {
        if n != HDR || s != 0 || record::decode(&rec[..n]).is_err() {
            return Err(format!("torn sentinel (len {n}, seq {s})"));
        }
        return Ok((p, s));
    }
    if p >= nproducers || s >= per {
        return Err(format!("impossible tag (producer {p}, seq {s}), len {n}"));
    }
    let want = record_len(p, s, size);
    if n != want {
        return Err(format!("record ({p}, {s}): length {n}, pushed {want}"));
    }
    record::decode(&rec[..n])
}

fn parse_summary(text: &str) -> HashMap<String, String> {
    text.lines().filter_map(|l| l.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn num(m: &HashMap<String, String>, key: &str) -> u64 {
    m.get(key).unwrap_or_else(|| panic!("summary lacks {key}: {m:?}")).parse().unwrap()
}

fn retry_pause(misses: &mut u32) {
    *misses += 1;
    if *misses < 16 {
        std::thread::yield_now();
    } else {
        std::thread::sleep(Duration::from_micros(50));
    }
}

// ---------------------------------------------------------------- the child

struct ChildCfg {
    dir: PathBuf,
    producers: Vec<u32>,
    consumers: Vec<u32>,
    nproducers: u32,
    per: u64,
    strict: bool,
}

fn env_list(key: &str) -> Vec<u32> {
    child_env(key).split(',').filter(|s| !s.is_empty()).map(|s| s.parse().unwrap()).collect()
}

/// Entry point of the child processes of the scenarios.
#[test]
#[ignore = "child process of the scenarios: started by them"]
fn child() {
    let cfg = ChildCfg {
        dir: PathBuf::from(child_env("TVMQ_CHILD_DIR")),
        producers: env_list("TVMQ_CHILD_PRODUCERS"),
        consumers: env_list("TVMQ_CHILD_CONSUMERS"),
        nproducers: child_env("TVMQ_CHILD_NPRODUCERS").parse().unwrap(),
        per: child_env("TVMQ_CHILD_PER").parse().unwrap(),
        strict: child_env("TVMQ_CHILD_STRICT") == "1",
    };
    let q = Queue::open(&cfg.dir, QID).expect("child: open queue");
    std::thread::scope(|sc| {
        for &p in &cfg.producers {
            let (q, cfg) = (&q, &cfg);
            sc.spawn(move || produce(q, cfg, p));
        }
        for &c in &cfg.consumers {
            let (q, cfg) = (&q, &cfg);
            sc.spawn(move || consume(q, cfg, c));
        }
    });
}

fn produce(q: &Queue, cfg: &ChildCfg, p: u32) {
    let size = q.record_size();
    let mut buf = vec![0u8; size];
    let (mut full, mut errors, mut first) = (0u64, 0u64, String::new());
    for s in 0..cfg.per {
        let len = encode(p, s, size, &mut buf);
        let mut misses = 0;
        loop {
            match q.push(&buf[..len]) {
                Ok(()) => break,
                Err(e) => {
                    if e.code() == DATA_SPC_FULL {
                        full += 1;
                    }
                    if cfg.strict || e.code() != DATA_SPC_FULL {
                        errors += 1;
                        if first.is_empty() {
                            first = format!("{} at seq {s}: {e}", code_name(e.code()));
                        }
                        assert!(
                            e.code() == DATA_SPC_FULL || errors < 1000,
                            "producer {p}: too many errors, first: {first}"
                        );
                    }
                    retry_pause(&mut misses);
                }
            }
        }
    }
    write_atomic(
        &cfg.dir.join(format!("done-p{p}")),
        format!("full={full}\nerrors={errors}\nfirst={first}\n").as_bytes(),
    );
}

fn consume(q: &Queue, cfg: &ChildCfg, c: u32) {
    let go = cfg.dir.join("go");
    let start = Instant::now();
    while !go.exists() {
        assert!(start.elapsed() < SCENARIO_DEADLINE, "consumer {c}: never told to start");
        std::thread::sleep(Duration::from_millis(1));
    }
    let size = q.record_size();
    let mut buf = vec![0u8; size];
    let mut many: Vec<u8> = Vec::new();
    let mut got: Vec<u8> = Vec::new(); // (u32 producer, u64 seq) little-endian, in pop order
    let (mut records, mut bad, mut first_bad) = (0u64, 0u64, String::new());
    let (mut errors, mut first_err) = (0u64, String::new());
    let mut sentinels = 0u64;
    let mut misses = 0;
    let mut i = 0u64;
    let mut take = |rec: &[u8], n: usize, sentinels: &mut u64| match verify(rec, n, cfg.nproducers, cfg.per) {
        Ok((SENTINEL, _)) => *sentinels += 1,
        Ok((p, s)) => {
            records += 1;
            got.extend_from_slice(&p.to_le_bytes());
            got.extend_from_slice(&s.to_le_bytes());
        }
        Err(why) => {
            bad += 1;
            if first_bad.is_empty() {
                first_bad = why;
            }
        }
    };
    while sentinels == 0 {
        i += 1;
        // 0: Wait::Until (QUE-style blocking with a deadline), 1: NoWait,
        // 2: Forever, 3: pop_many(NoWait).
        let mode = if cfg.strict {
            0
        } else {
            match c % 3 {
                0 => 0,
                1 => 1,
                _ => (i % 4) as u32,
            }
        };
        let result = match mode {
            0 => {
                let wait = if cfg.strict { Duration::from_secs(20) } else { Duration::from_millis(50) };
                q.pop(&mut buf, Wait::Until(Instant::now() + wait)).map(Some)
            }
            1 => q.pop(&mut buf, Wait::NoWait).map(Some),
            2 => q.pop(&mut buf, Wait::Forever).map(Some),
            _ => {
                many.clear();
                let (k, err) = q.pop_many(&mut many, size, 16, Wait::NoWait);
                for rec in many.chunks_exact(size).take(k) {
                    // pop_many does not return lengths: use the one the header implies.
                    let n = implied_len(rec);
                    take(rec, n, &mut sentinels);
                }
                match err {
                    Some(e) if k == 0 => Err(e),
                    _ => Ok(None),
                }
            }
        };
        match result {
            Ok(Some(n)) => {
                misses = 0;
                take(&buf, n, &mut sentinels);
            }
            Ok(None) => misses = 0,
            Err(e) if !cfg.strict && (e.code() == NO_DATA_FOUND || e.code() == MQUE_WAIT_TMO) => {
                retry_pause(&mut misses)
            }
            Err(e) => {
                assert!(e.code() != MQUE_WAIT_TMO, "consumer {c}: no record for 20 s after {records} records");
                errors += 1;
                if first_err.is_empty() {
                    first_err = format!("{}: {e}", code_name(e.code()));
                }
                assert!(errors < 1000, "consumer {c}: too many errors, first: {first_err}");
                retry_pause(&mut misses);
            }
        }
    }
    // pop_many may take several sentinels: give the extra ones back, for the
    // other consumers.
    let repushed = sentinels - 1;
    let len = encode_sentinel(&mut buf);
    for _ in 0..repushed {
        while let Err(e) = q.push(&buf[..len]) {
            assert_eq!(e.code(), DATA_SPC_FULL, "consumer {c}: re-pushing a sentinel: {e}");
            std::thread::yield_now();
        }
    }
    fs::write(cfg.dir.join(format!("c{c}.bin")), &got).expect("write consumer report");
    write_atomic(
        &cfg.dir.join(format!("c{c}.sum")),
        format!(
            "records={records}\nbad={bad}\nfirst_bad={first_bad}\nerrors={errors}\nfirst_error={first_err}\nrepushed={repushed}\n"
        )
        .as_bytes(),
    );
}

/// Length of a record popped by `pop_many` (which does not report lengths),
/// as its header says; `verify` then checks content and zeroed tail.
fn implied_len(rec: &[u8]) -> usize {
    let (p, s) = record::id(rec).expect("a record-size buffer");
    if p == SENTINEL { HDR } else { record_len(p, s, rec.len()).min(rec.len()) }
}

// ---------------------------------------------------------------- the parent

struct Scenario {
    tag: &'static str,
    capacity: u64,
    record_size: u64,
    per_producer: u64,
    /// (producer ids, consumer ids) of each child process.
    children: Vec<(Vec<u32>, Vec<u32>)>,
    /// Consumers start only once producers have filled the queue.
    gate: bool,
    /// Any error at all (even DATA_SPC_FULL) is a failure.
    strict: bool,
}

fn join(ids: &[u32]) -> String {
    ids.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
}

fn wait_for(what: &str, kids: &mut Children, deadline: Instant, mut cond: impl FnMut() -> bool) {
    while !cond() {
        kids.check(false);
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn run(sc: Scenario) {
    let tmp = TempDir::new("processes", sc.tag);
    let dir = tmp.path();
    Queue::create(dir, QID, &Spec::new(sc.capacity, sc.record_size)).expect("create queue");
    let producers: Vec<u32> = sc.children.iter().flat_map(|c| c.0.clone()).collect();
    let consumers: Vec<u32> = sc.children.iter().flat_map(|c| c.1.clone()).collect();
    let nproducers = producers.len() as u32;
    assert!(producers.iter().copied().eq(0..nproducers), "producer ids must be 0..n");
    if !sc.gate {
        fs::write(dir.join("go"), b"").unwrap();
    }
    let deadline = Instant::now() + SCENARIO_DEADLINE;
    // The child processes, killed (by their own pid) if the test fails.
    let mut kids = Children::start(sc.children.len(), sc.children.len() as u32, dir, |k, _| {
        let (ps, cs) = &sc.children[k];
        let mut cmd = child_test("child");
        cmd.env("TVMQ_CHILD_DIR", dir)
            .env("TVMDBD", dir)
            .env("TVMQ_CHILD_PRODUCERS", join(ps))
            .env("TVMQ_CHILD_CONSUMERS", join(cs))
            .env("TVMQ_CHILD_NPRODUCERS", nproducers.to_string())
            .env("TVMQ_CHILD_PER", sc.per_producer.to_string())
            .env("TVMQ_CHILD_STRICT", if sc.strict { "1" } else { "0" });
        (format!("child #{k} (producers [{}], consumers [{}])", join(ps), join(cs)), cmd)
    });

    let q = Queue::open(dir, QID).expect("parent: open queue");
    if sc.gate {
        // Producers fill the queue before any consumer starts: they must see
        // DATA_SPC_FULL and retry.
        wait_for("producers to fill the queue", &mut kids, deadline, || q.depth() == sc.capacity);
        fs::write(dir.join("go"), b"").unwrap();
    }
    wait_for("every producer to finish", &mut kids, deadline, || {
        producers.iter().all(|p| dir.join(format!("done-p{p}")).exists())
    });
    // Every record is published: one end-of-stream record per consumer.
    let mut buf = vec![0u8; sc.record_size as usize];
    let len = encode_sentinel(&mut buf);
    for _ in &consumers {
        while let Err(e) = q.push(&buf[..len]) {
            assert_eq!(e.code(), DATA_SPC_FULL, "parent: pushing a sentinel: {e}");
            kids.check(false);
            assert!(Instant::now() < deadline, "timed out pushing sentinels");
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    kids.wait_all(|| deadline, true, String::new);
    drop(kids);

    // Producers' reports.
    let mut full_total = 0;
    let mut problems: Vec<String> = Vec::new();
    for p in &producers {
        let m = parse_summary(&fs::read_to_string(dir.join(format!("done-p{p}"))).unwrap());
        full_total += num(&m, "full");
        if num(&m, "errors") != 0 {
            problems.push(format!(
                "producer {p}: {} errors ({} DATA_SPC_FULL), first: {}",
                num(&m, "errors"),
                num(&m, "full"),
                m["first"]
            ));
        }
    }
    // Consumers' reports.
    let per = sc.per_producer as usize;
    let mut seen = vec![vec![0u8; per]; nproducers as usize];
    let (mut repushed, mut popped_records) = (0, 0);
    let mut order_violations = 0u64;
    for c in &consumers {
        let m = parse_summary(&fs::read_to_string(dir.join(format!("c{c}.sum"))).unwrap());
        repushed += num(&m, "repushed");
        if num(&m, "bad") != 0 {
            problems.push(format!("consumer {c}: {} torn or wrong records, first: {}", num(&m, "bad"), m["first_bad"]));
        }
        if num(&m, "errors") != 0 {
            problems.push(format!("consumer {c}: {} errors, first: {}", num(&m, "errors"), m["first_error"]));
        }
        let got = fs::read(dir.join(format!("c{c}.bin"))).unwrap();
        assert_eq!(got.len() % 12, 0);
        assert_eq!((got.len() / 12) as u64, num(&m, "records"));
        let mut last: Vec<Option<u64>> = vec![None; nproducers as usize];
        for e in got.chunks_exact(12) {
            let p = u32::from_le_bytes(e[0..4].try_into().unwrap()) as usize;
            let s = u64::from_le_bytes(e[4..12].try_into().unwrap());
            popped_records += 1;
            seen[p][s as usize] = seen[p][s as usize].saturating_add(1);
            if last[p].is_some_and(|l| l >= s) {
                order_violations += 1;
                if order_violations <= 5 {
                    problems.push(format!("consumer {c}: producer {p}'s seq {s} after seq {}", last[p].unwrap()));
                }
            }
            last[p] = Some(s);
        }
    }
    let total = u64::from(nproducers) * sc.per_producer;
    let (mut missing, mut duplicated) = (0u64, 0u64);
    for (p, counts) in seen.iter().enumerate() {
        for (s, &n) in counts.iter().enumerate() {
            match n {
                1 => {}
                0 => {
                    missing += 1;
                    if missing <= 5 {
                        problems.push(format!("record ({p}, {s}) never popped"));
                    }
                }
                _ => {
                    duplicated += 1;
                    if duplicated <= 5 {
                        problems.push(format!("record ({p}, {s}) popped {n} times"));
                    }
                }
            }
        }
    }
    if order_violations + missing + duplicated > 0 {
        problems
            .push(format!("{missing} missing, {duplicated} duplicated, {order_violations} out of order (of {total})"));
    }
    if sc.gate && full_total == 0 {
        problems.push("producers never saw DATA_SPC_FULL although the queue was full".into());
    }
    let stats = q.stats();
    let pushed = total + consumers.len() as u64 + repushed;
    if stats.pushed != pushed || stats.popped != pushed || stats.depth != 0 {
        problems.push(format!(
            "stats: pushed {} popped {} depth {}, expected {pushed} {pushed} 0",
            stats.pushed, stats.popped, stats.depth
        ));
    }
    if stats.recovered_pushes + stats.recovered_pops + stats.robbed != 0 {
        problems.push(format!("recoveries without any crash: {stats:?}"));
    }
    assert!(problems.is_empty(), "{} ({popped_records} records popped):\n{}", sc.tag, problems.join("\n"));
    eprintln!("{}: {total} records, {full_total} DATA_SPC_FULL retries, {} laps", sc.tag, pushed / sc.capacity);
    drop(q);
    Queue::drop_queue(dir, QID).expect("drop queue");
}

// ---------------------------------------------------------------- the cases

/// 3 producer processes and 3 consumer processes, 300 000 records through a
/// 61-record queue (about 5 000 laps); producers fill it before consumers start.
#[test]
fn three_producer_processes_three_consumer_processes() {
    run(Scenario {
        tag: "3p3c",
        capacity: 61,
        record_size: 100,
        per_producer: 100_000,
        children: vec![
            (vec![0], vec![]),
            (vec![], vec![0]),
            (vec![1], vec![]),
            (vec![], vec![1]),
            (vec![2], vec![]),
            (vec![], vec![2]),
        ],
        gate: true,
        strict: false,
    });
}

/// The same with threads: 2 processes, each with 2 producer and 2 consumer
/// threads sharing one `Queue`; 300 000 records through a 100-record queue.
#[test]
fn producer_and_consumer_threads_in_two_processes() {
    run(Scenario {
        tag: "2x2p2c",
        capacity: 100,
        record_size: 37,
        per_producer: 75_000,
        children: vec![(vec![0, 1], vec![0, 1]), (vec![2, 3], vec![2, 3])],
        gate: true,
        strict: false,
    });
}

/// The mix that broke STVM: 2 threads pushing while 2 threads pop (blocking
/// pops, QUE_NORMAL style), queue far from full: no error of any kind, in
/// particular no DATA_SPC_FULL.
#[test]
fn stvm_mix_two_pushing_two_popping_threads_no_errors() {
    run(Scenario {
        tag: "stvm-threads",
        capacity: 1 << 19,
        record_size: 64,
        per_producer: 250_000,
        children: vec![(vec![0, 1], vec![0, 1])],
        gate: false,
        strict: true,
    });
}

/// The same mix with each of the 4 roles in its own process.
#[test]
fn stvm_mix_two_pushing_two_popping_processes_no_errors() {
    run(Scenario {
        tag: "stvm-procs",
        capacity: 1 << 19,
        record_size: 64,
        per_producer: 250_000,
        children: vec![(vec![0], vec![]), (vec![1], vec![]), (vec![], vec![0]), (vec![], vec![1])],
        gate: false,
        strict: true,
    });
}

/// The record codec the other tests rely on detects what it must.
#[test]
fn record_codec_detects_torn_records() {
    let size = 100;
    let mut buf = vec![0u8; size];
    for s in 0..1000 {
        buf.fill(0);
        let n = encode(3, s, size, &mut buf);
        assert!((HDR + 1..=size).contains(&n));
        assert_eq!(verify(&buf, n, 4, 1000), Ok((3, s)));
        let mut torn = buf.clone();
        torn[HDR + (s as usize % (n - HDR))] ^= 1;
        assert!(verify(&torn, n, 4, 1000).is_err());
        if n < size {
            let mut dirty = buf.clone();
            dirty[size - 1] = 1;
            assert!(verify(&dirty, n, 4, 1000).is_err());
            assert!(verify(&buf, n + 1, 4, 1000).is_err());
        }
    }
    let lens: std::collections::HashSet<usize> = (0..1000).map(|s| record_len(0, s, size)).collect();
    assert_eq!(lens.len(), size - HDR, "every payload length 1..={} occurs", size - HDR);
}
