//! Durable queues across processes, on the project's disk (a directory under
//! `target/`, since durable queues refuse tmpfs):
//! - kill -9 of every attached process (producers and consumers of an
//!   `always` queue) in mid-run, then reopen: every acknowledged push is
//!   delivered exactly once. The same file, with its boot id cleared (as
//!   after a machine restart: the queue is rebuilt from its slots), gives
//!   the same records;
//! - the same with leasing consumers on an `always` queue with leases: every
//!   acknowledged record acknowledged exactly once, the leases of the killed
//!   consumers delivered again, after the kill and after a machine restart;
//! - refusals: a durable queue on tmpfs, and a corrupted durable file, give
//!   clear errors.
//!
//! How a popped record is accounted for (as in `tests/kill.rs`, with the
//! [`common::Ledger`]): a producer publishes how many of its records were
//! acknowledged (numbered in order); a consumer pops into its in-flight
//! buffer in a shared file, then counts the record in a shared array (one
//! byte per record), so that a consumer killed between the pop and the
//! count leaves the record where the checker finds it.

mod common;
use common::{Children, DiskDir, Ledger, child_env, child_test, env_num, record};
use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tvm::error::*;
use tvm::{Durability, Queue, Spec, Wait};

const QUEUE: u32 = 7;
const CAPACITY: u64 = 500;
const RECORD: usize = 48;
const PRODUCERS: u32 = 3;
const CONSUMERS: u32 = 2;
const MAX_SEQ: u64 = 1 << 16;

/// `(proc, seq)` of an intact record of this test.
fn parse(rec: &[u8]) -> Option<(u32, u64)> {
    let (proc, seq) = record::decode(rec).ok()?;
    (rec.len() == RECORD && proc < PRODUCERS && seq < MAX_SEQ).then_some((proc, seq))
}

/// A child: producer `me` (< PRODUCERS) or consumer, until killed. With
/// `TVMQ_DURABLE_LEASE`, consumers lease: the record goes into the
/// in-flight buffer, is acknowledged, then counted (a consumer killed
/// after the acknowledgement leaves it in its hands; one killed before
/// leaves it leased, to be delivered again).
#[test]
#[ignore = "child process of kill9_of_every_process_loses_no_acknowledged_push"]
fn durable_child() {
    let dir = PathBuf::from(child_env("TVMQ_DURABLE_DIR"));
    let queues = PathBuf::from(child_env("TVMQ_DURABLE_QUEUES"));
    let me: u32 = child_env("TVMQ_DURABLE_ME").parse().expect("number");
    let ledger = Ledger::open(&dir, PRODUCERS + CONSUMERS, MAX_SEQ);
    let q = Queue::open(&queues, QUEUE).expect("open");
    let slot = ledger.proc(me);
    if me < PRODUCERS {
        let mut seq = slot.acked.load(Ordering::SeqCst);
        while seq < MAX_SEQ {
            match q.push(&record::new(me, seq, RECORD)) {
                Ok(()) => {
                    seq += 1;
                    slot.acked.store(seq, Ordering::SeqCst);
                }
                Err(e) if e.code() == DATA_SPC_FULL => std::thread::sleep(Duration::from_micros(200)),
                Err(e) => panic!("push: {e}"),
            }
        }
    } else {
        // SAFETY: this process's own entry (the checker reads it once every
        // process is dead).
        let buf = unsafe { slot.inflight_mut(RECORD) };
        if std::env::var_os("TVMQ_DURABLE_LEASE").is_some() {
            loop {
                match q.pop_lease(buf, Wait::Until(Instant::now() + Duration::from_millis(50)), Duration::ZERO) {
                    Ok((_, lease)) => {
                        let (p, s) = parse(buf).expect("an intact record");
                        q.ack(&lease).expect("ack");
                        ledger.deliver(p, s);
                        buf.fill(0);
                    }
                    Err(e) if e.code() == MQUE_WAIT_TMO || e.code() == NO_DATA_FOUND => {}
                    Err(e) => panic!("pop_lease: {e}"),
                }
            }
        }
        loop {
            match q.pop(buf, Wait::Until(Instant::now() + Duration::from_millis(50))) {
                Ok(_) => {
                    let (p, s) = parse(buf).expect("an intact record");
                    ledger.deliver(p, s);
                    buf.fill(0);
                }
                Err(e) if e.code() == MQUE_WAIT_TMO || e.code() == NO_DATA_FOUND => {}
                Err(e) => panic!("pop: {e}"),
            }
        }
    }
}

/// The 16 bytes of this boot's id as the control block stores them.
fn boot_id_bytes() -> [u8; 16] {
    let text = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").expect("boot id");
    let hex: String = text.trim().chars().filter(|c| *c != '-').collect();
    let hi = u64::from_str_radix(&hex[..16], 16).unwrap();
    let lo = u64::from_str_radix(&hex[16..], 16).unwrap();
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&hi.to_ne_bytes());
    b[8..].copy_from_slice(&lo.to_ne_bytes());
    b
}

/// Clears the boot id in the control page of the queue file at `path`, as
/// if the machine had restarted since processes last attached.
fn forget_boot(path: &Path) {
    assert!(forget_boot_if_there(path), "the boot id is in the control page once");
}

/// [`forget_boot`] for a copy of a queue that may keep its live part in
/// tmpfs (an `always` or `interval` queue without leases): its file then
/// holds no control page, and the copy, having no live part of its own, is
/// rebuilt from its image when opened, as after a restart. False then.
fn forget_boot_if_there(path: &Path) -> bool {
    let f = OpenOptions::new().read(true).write(true).open(path).unwrap();
    let mut page = vec![0u8; 4096];
    f.read_exact_at(&mut page, 4096).unwrap();
    let id = boot_id_bytes();
    let at: Vec<usize> = (0..4096 - 16).step_by(8).filter(|&i| page[i..i + 16] == id).collect();
    assert!(at.len() <= 1, "the boot id is in the control page at most once");
    if let Some(&at) = at.first() {
        f.write_all_at(&[0u8; 16], 4096 + at as u64).unwrap();
    }
    !at.is_empty()
}

/// Creates durable queue `id` in `dir` (`rows` records of `size` bytes).
fn create_durable(dir: &Path, id: u32, rows: u64, size: u64, policy: Durability) {
    let mut spec = Spec::new(rows, size);
    spec.durability = Some(policy);
    Queue::create(dir, id, &spec).unwrap();
}

/// Leases and acknowledges everything left in queue QUEUE of `dir` (records
/// waiting to be delivered again included); also the queue's lease
/// counters after.
fn drain_leases(dir: &Path) -> (Vec<(u32, u64)>, Option<tvm::RecoveryStats>, tvm::LeaseStats) {
    let q = Queue::open(dir, QUEUE).expect("reopen");
    let mut out = [0u8; RECORD];
    let mut got = Vec::new();
    loop {
        match q.pop_lease(&mut out, Wait::NoWait, Duration::ZERO) {
            Ok((n, lease)) => {
                assert_eq!(n, RECORD);
                got.push(parse(&out).unwrap_or_else(|| panic!("a record never pushed, or torn: {out:?}")));
                q.ack(&lease).expect("ack");
            }
            Err(e) if e.code() == NO_DATA_FOUND => break,
            Err(e) => panic!("drain: {e}"),
        }
    }
    let stats = q.lease_stats().expect("a queue with leases");
    assert_eq!((stats.in_flight, stats.waiting), (0, 0), "drained: {stats:?}");
    (got, q.durable_stats().and_then(|d| d.last_recovery), stats)
}

/// Pops everything left in queue QUEUE of `dir`.
fn drain(dir: &Path) -> (Vec<(u32, u64)>, Option<tvm::RecoveryStats>) {
    let q = Queue::open(dir, QUEUE).expect("reopen");
    let mut out = [0u8; RECORD];
    let mut got = Vec::new();
    loop {
        match q.pop(&mut out, Wait::NoWait) {
            Ok(n) => {
                assert_eq!(n, RECORD);
                got.push(parse(&out).unwrap_or_else(|| panic!("a record never pushed, or torn: {out:?}")));
            }
            Err(e) if e.code() == NO_DATA_FOUND => break,
            Err(e) => panic!("drain: {e}"),
        }
    }
    (got, q.durable_stats().and_then(|d| d.last_recovery))
}

#[test]
fn kill9_of_every_process_loses_no_acknowledged_push() {
    let rounds: u32 = env_num("TVMQ_DURABLE_ROUNDS", 3);
    for round in 0..rounds {
        let work = DiskDir::new(&format!("kill9-{round}"));
        let queues = work.0.join("queues");
        let restarted = work.0.join("restarted");
        std::fs::create_dir_all(&queues).unwrap();
        std::fs::create_dir_all(&restarted).unwrap();
        create_durable(&queues, QUEUE, CAPACITY, RECORD as u64, Durability::Always);
        let ledger = Ledger::open(&work.0, PRODUCERS + CONSUMERS, MAX_SEQ);
        let mut kids = Children::start((PRODUCERS + CONSUMERS) as usize, PRODUCERS + CONSUMERS, &work.0, |_, me| {
            let mut cmd = child_test("durable_child");
            cmd.env("TVMQ_DURABLE_DIR", &work.0)
                .env("TVMQ_DURABLE_QUEUES", &queues)
                .env("TVMQ_DURABLE_ME", me.to_string());
            (format!("{} {me}", if me < PRODUCERS { "producer" } else { "consumer" }), cmd)
        });
        // Until every producer has pushed a little, then a bit more.
        let deadline = Instant::now() + Duration::from_secs(20);
        while (0..PRODUCERS).any(|p| ledger.proc(p).acked.load(Ordering::SeqCst) < 50) {
            assert!(Instant::now() < deadline, "the producers do not push");
            // A child that died on its own fails the test.
            kids.check(true);
            std::thread::sleep(Duration::from_millis(10));
        }
        std::thread::sleep(Duration::from_millis(100 + 150 * u64::from(round)));
        kids.kill_all();
        drop(kids);
        // The machine-restart view: a copy of the file (its live part, in
        // tmpfs, is not copied: the copy is rebuilt from its image, which
        // holds what the syncs wrote).
        let file = tvm::queue_path(&queues, QUEUE);
        let copy = tvm::queue_path(&restarted, QUEUE);
        std::fs::copy(&file, &copy).unwrap();
        assert!(!forget_boot_if_there(&copy), "an `always` queue's control page is in its live part");

        let (left, none) = drain(&queues);
        assert!(none.is_none(), "no recovery after process deaths on the same boot");
        let (rebuilt, found) = drain(&restarted);
        let found = found.expect("a recovery ran on the copy");
        assert_eq!(found.kept, rebuilt.len() as u64);
        // (Torn slots may be found: an image page copied while a producer,
        // whose push had not returned, was writing its record. The audit
        // below proves that no acknowledged push is among them.)

        for (name, rest) in [("after the kill", &left), ("after the rebuild", &rebuilt)] {
            // Every acknowledged push delivered once or in a consumer's
            // hands; at most the one push in progress when a producer died
            // delivered beyond.
            let held = |buf: &[u8]| parse(&buf[..RECORD]);
            let audit = ledger.audit(0..PRODUCERS, PRODUCERS..PRODUCERS + CONSUMERS, held, rest, Some(1));
            assert!(audit.problems.is_empty(), "{name}: {:#?}", &audit.problems[..audit.problems.len().min(20)]);
            eprintln!(
                "round {round} {name}: {} acknowledged pushes, {} left in the queue, {found:?}",
                audit.acked,
                rest.len()
            );
        }
    }
}

#[test]
fn a_durable_queue_on_tmpfs_is_refused() {
    let dir = common::TempDir::new("durable", "tmpfs");
    let mut spec = Spec::new(16, 64);
    spec.durability = Some(Durability::Interval(100));
    let e = Queue::create(dir.path(), 1, &spec).unwrap_err();
    assert_eq!(e.code(), NOT_DURABLE, "{e}");
    assert!(e.to_string().contains("tmpfs"), "a clear message: {e}");
    assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none(), "no file left behind");
    // Nor a directory that create would have made.
    let nested = dir.path().join("a").join("b");
    assert_eq!(Queue::create(&nested, 1, &spec).unwrap_err().code(), NOT_DURABLE);
    assert!(!dir.path().join("a").exists(), "no directory left behind");
    // A plain queue there is fine; syncing it says why it cannot be durable.
    spec.durability = None;
    Queue::create(dir.path(), 1, &spec).unwrap();
    let q = Queue::open(dir.path(), 1).unwrap();
    assert_eq!(q.sync().unwrap_err().code(), NOT_DURABLE);
}

#[test]
fn a_durable_file_copied_to_tmpfs_opens_only_for_inspection() {
    let disk = DiskDir::new("copied");
    // With leases: its live part is in its queue file (without, an `always`
    // queue's live part is in tmpfs and a copy holds only its image, which
    // inspection does not read).
    let mut spec = Spec::new(16, 64);
    spec.durability = Some(Durability::Always);
    spec.leases = Some(tvm::LeaseSpec { max_leases: 4, ..Default::default() });
    Queue::create(&disk.0, 1, &spec).unwrap();
    Queue::open(&disk.0, 1).unwrap().push(b"kept").unwrap();
    let shm = common::TempDir::new("durable", "copied");
    std::fs::copy(tvm::queue_path(&disk.0, 1), tvm::queue_path(shm.path(), 1)).unwrap();
    let e = Queue::open(shm.path(), 1).unwrap_err();
    assert_eq!(e.code(), NOT_DURABLE, "{e}");
    assert!(e.to_string().contains("tmpfs"), "a clear message: {e}");
    let view = Queue::inspect(shm.path(), 1).unwrap();
    assert_eq!(view.depth(), 1, "still readable for tvmq stat and peek");
    // An `interval` queue's file copied there: refused too, and the live
    // part the attempt made in tmpfs is not left behind.
    create_durable(&disk.0, 2, 16, 64, Durability::Interval(1000));
    let copy = tvm::queue_path(shm.path(), 2);
    std::fs::copy(tvm::queue_path(&disk.0, 2), &copy).unwrap();
    assert_eq!(Queue::open(shm.path(), 2).unwrap_err().code(), NOT_DURABLE);
    let meta = std::fs::metadata(&copy).unwrap();
    let prefix = format!(
        ".interval-{:x}-{}-",
        std::os::unix::fs::MetadataExt::dev(&meta),
        std::os::unix::fs::MetadataExt::ino(&meta)
    );
    // SAFETY: geteuid has no preconditions.
    let live = PathBuf::from(format!("/dev/shm/tvmq-{}", unsafe { libc::geteuid() }));
    let left: Vec<_> = std::fs::read_dir(live)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .collect();
    assert!(left.is_empty(), "a live part left: {left:?}");
}

#[test]
fn a_corrupted_durable_file_gives_the_clear_errors_of_today() {
    let work = DiskDir::new("corrupt");
    create_durable(&work.0, 1, 64, 100, Durability::Always);
    let path = tvm::queue_path(&work.0, 1);
    {
        let q = Queue::open(&work.0, 1).unwrap();
        q.push(b"kept").unwrap();
        assert_eq!(q.durability(), Some(Durability::Always));
        let d = q.durable_stats().unwrap();
        assert!(d.syncs >= 1 && d.last_sync_ns > 0, "{d:?}");
    }
    let pristine = std::fs::read(&path).unwrap();
    let open_err = |bytes: &[u8]| {
        std::fs::write(&path, bytes).unwrap();
        Queue::open(&work.0, 1).err().map(|e| (e.code(), e.to_string()))
    };
    // The header's geometry, a byte of the options block (the policy), the
    // durable flag cleared, a file cut short: each refused, saying why.
    let options = |b: &mut Vec<u8>, at: usize, v: u8| b[at] = v;
    let mut cases: Vec<(&str, Vec<u8>)> = Vec::new();
    let mut b = pristine.clone();
    b[0] ^= 0xff;
    cases.push(("magic", b));
    let mut b = pristine.clone();
    // The options block follows the Info header in the first page: find its
    // policy word (1 = always) after the flags (durable 2 | image 8) by
    // searching the first page for the flags word followed by spin_us and
    // the policy.
    let flag_at = (0..4096 - 24)
        .step_by(8)
        .find(|&i| {
            b[i..i + 8] == 10u64.to_ne_bytes() && b[i + 8..i + 16] == [0; 8] && b[i + 16..i + 24] == 1u64.to_ne_bytes()
        })
        .expect("the options block");
    options(&mut b, flag_at + 16, 2);
    cases.push(("policy", b));
    let mut b = pristine.clone();
    options(&mut b, flag_at, 0);
    cases.push(("durable flag", b));
    cases.push(("short file", pristine[..pristine.len() - 100].to_vec()));
    for (what, bytes) in cases {
        let (code, text) = open_err(&bytes).unwrap_or_else(|| panic!("{what}: opened"));
        assert!(matches!(code, SHM_ERR_INVAL | VER_NOT_MATCH), "{what}: {code} {text}");
        assert!(text.contains(&*path.display().to_string()) || text.contains("queue file"), "{what}: {text}");
    }
    // Restored, it opens and delivers its record.
    std::fs::write(&path, &pristine).unwrap();
    let q = Queue::open(&work.0, 1).unwrap();
    let mut out = [0u8; 100];
    assert_eq!(q.pop(&mut out, Wait::NoWait).unwrap(), 4);
    assert_eq!(&out[..4], b"kept");
}

#[test]
fn the_flusher_finds_pushes_and_pops_alone_and_syncs_them() {
    let disk = DiskDir::new("flusher");
    create_durable(&disk.0, 1, 64, 32, Durability::Interval(100));
    let q = Queue::open(&disk.0, 1).unwrap();
    // Waits for what `done` checks (up to 30 s, far beyond the interval: a
    // hang guard; how soon the flusher comes is a loaded machine's say).
    let wait_for = |what: &str, done: &dyn Fn(&tvm::DurableStats) -> bool| {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let s = q.durable_stats().unwrap();
            if done(&s) {
                return s;
            }
            assert!(Instant::now() < deadline, "{what}: not synced: {s:?}");
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    let before = q.durable_stats().unwrap().syncs;
    for i in 0..10u8 {
        q.push(&[i; 8]).unwrap();
    }
    let s = wait_for("pushes", &|s| s.syncs > before && !s.dirty);
    let syncs = s.syncs;
    // Pops alone (no push) move the consumed watermark the next sync writes.
    let mut out = [0u8; 32];
    for _ in 0..4 {
        q.pop(&mut out, Wait::NoWait).unwrap();
    }
    // A sync moves the watermark in memory before it writes and counts
    // itself after: wait for both, or a sync under way is seen half done.
    let s = wait_for("pops", &|s| s.watermark == 4 && s.syncs > syncs);
    // Nothing changes: no more syncs.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(q.durable_stats().unwrap().syncs, s.syncs, "a sync with nothing to sync");
}

/// A queue that changes all the time is synced about once per interval,
/// not once per flusher tick: a sync covers every change made before it
/// started, so the next one is due an interval after that (a flusher that
/// dated such a change from its last look that found the queue unchanged,
/// long before, would sync again as soon as each sync ended: 10 syncs a
/// second with a 1 s interval); not once per push, and not never.
///
/// Asserted on the time that passed, not on how much of it the test gets:
/// a sync begins the interval less two ticks and twice the last sync's
/// length after the one before began, and never sooner than a quarter of
/// the interval after it (the floor a loaded machine, whose syncs take
/// long, may reach). So, n syncs completed between two reads of the
/// counter: all but the first began after the first read (the flusher
/// syncs one at a time), a quarter of the interval apart at least, the
/// last before the second read; n <= elapsed / (interval / 4) + 2, elapsed
/// measured around both reads. Syncing at every tick (25 ms here) or every
/// push exceeds that; load only lengthens the elapsed time. The run lasts
/// until 2 syncs are seen (at least 2 s): a queue never synced ends it at
/// the hang guard, a count of pushes that takes 40 s at least.
#[test]
fn a_busy_interval_queue_is_synced_about_once_per_interval() {
    const INTERVAL_MS: u32 = 400;
    let disk = DiskDir::new("busy");
    create_durable(&disk.0, 1, 64, 32, Durability::Interval(INTERVAL_MS));
    let q = Queue::open(&disk.0, 1).unwrap();
    let started = Instant::now();
    let before = q.durable_stats().unwrap().syncs;
    let mut out = [0u8; 32];
    let mut pushes = 0u64;
    while started.elapsed() < Duration::from_secs(2) || q.durable_stats().unwrap().syncs - before < 2 {
        // Each turn sleeps 200 us at least: 200,000 take 40 s or more.
        assert!(pushes < 200_000, "not synced in {pushes} pushes: {:?}", q.durable_stats().unwrap());
        q.push(&[1; 32]).unwrap();
        q.pop(&mut out, Wait::NoWait).unwrap();
        pushes += 1;
        std::thread::sleep(Duration::from_micros(200));
    }
    let stats = q.durable_stats().unwrap();
    let elapsed = started.elapsed();
    let syncs = stats.syncs - before;
    let most = elapsed.as_millis() as u64 / u64::from(INTERVAL_MS / 4) + 2;
    eprintln!("{syncs} syncs, {pushes} pushes in {elapsed:?} with an interval of {INTERVAL_MS} ms (at most {most})");
    assert_eq!(stats.failures, 0, "{stats:?}");
    assert!(syncs <= most, "{syncs} syncs in {elapsed:?} with an interval of {INTERVAL_MS} ms: at most {most}");
}

#[test]
fn an_interval_queue_recovers_from_its_image_not_from_its_live_pages() {
    let disk = DiskDir::new("image");
    let restarted = DiskDir::new("image-restarted");
    // An interval of an hour: no flush during the test.
    create_durable(&disk.0, 1, 64, 16, Durability::Interval(3_600_000));
    let q = Queue::open(&disk.0, 1).unwrap();
    let rec = |i: u32| [i.to_le_bytes(), [7; 4], [8; 4], [9; 4]].concat();
    let mut out = [0u8; 16];
    let mut pop = |n: u32| {
        for _ in 0..n {
            q.pop(&mut out, Wait::NoWait).unwrap();
        }
    };
    for i in 1..=20 {
        q.push(&rec(i)).unwrap();
    }
    pop(5);
    q.sync().unwrap(); // the image: 6..=20 queued, 1..=5 consumed
    for i in 21..=30 {
        q.push(&rec(i)).unwrap();
    }
    pop(3); // 6..=8, not synced
    // The machine-restart view, taken while the queue is attached (its
    // drop would sync): the live pages hold 9..=30, the image 6..=20.
    // The copy is another file (another inode): it has no live part in
    // tmpfs, so it opens as after a restart, from its image.
    let copy = tvm::queue_path(&restarted.0, 1);
    std::fs::copy(tvm::queue_path(&disk.0, 1), &copy).unwrap();
    let r = Queue::open(&restarted.0, 1).unwrap();
    let mut got = Vec::new();
    while let Ok(n) = r.pop(&mut out, Wait::NoWait) {
        assert_eq!(n, 16);
        got.push(u32::from_le_bytes(out[..4].try_into().unwrap()));
    }
    assert_eq!(got, (6..=20).collect::<Vec<u32>>(), "what the last sync wrote, popped records after it again");
    let found = r.durable_stats().unwrap().last_recovery.expect("a recovery ran");
    assert_eq!((found.kept, found.watermark), (15, 5), "{found:?}");
    drop(q);
}

#[test]
fn kill9_of_leasing_consumers_of_a_durable_queue_acknowledges_each_record_once() {
    kill9_of_leasing_consumers(Durability::Always, "always", true);
}

/// The same on an `interval` queue with leases, checked after the kill
/// only (see the next test).
#[test]
fn kill9_of_leasing_consumers_of_an_interval_queue_acknowledges_each_record_once() {
    kill9_of_leasing_consumers(Durability::Interval(50), "interval", false);
}

/// The same on an `interval` queue with leases, with a process that
/// attaches, syncs and detaches after the kill (which syncs what the killed
/// ones left: with every attached process killed, their last interval
/// reaches the image only then), and the restart view checked too.
///
/// It found two faults (a full ring makes both likely, about 4 runs in 10
/// with `TVMQ_DURABLE_ROUNDS=12`): a record that a killed consumer held
/// while a producer had claimed its slot's next lap lay more than a lap
/// behind the tail, where the seal pass did not look, so the restart found
/// it torn (`kept: 499, torn: 1, holes: 1`); and the attach's repair left
/// a record published again onto a position that a killed consumer had
/// claimed (or an empty record of a killed producer and consumer) held by
/// the dead, so the drain on the same boot never reached it.
#[test]
fn kill9_of_leasing_consumers_of_an_interval_queue_then_an_attach_acknowledges_each_record_once() {
    kill9_of_leasing_consumers(Durability::Interval(50), "interval-attach", true);
}

/// kill -9 of producers and leasing consumers of a durable queue with
/// leases of `policy`, then (with `attach`) a process attaches, syncs and
/// detaches, then reopen (and, with `attach`, restart, the boot id
/// cleared): every acknowledged push acknowledged exactly once, the leases
/// the killed consumers held delivered again.
fn kill9_of_leasing_consumers(policy: Durability, name: &str, attach: bool) {
    let rounds: u32 = env_num("TVMQ_DURABLE_ROUNDS", 3);
    let mut redelivered = 0;
    for round in 0..rounds {
        let work = DiskDir::new(&format!("kill9-lease-{name}-{round}"));
        let queues = work.0.join("queues");
        let restarted = work.0.join("restarted");
        std::fs::create_dir_all(&queues).unwrap();
        std::fs::create_dir_all(&restarted).unwrap();
        let mut spec = Spec::new(CAPACITY, RECORD as u64);
        spec.durability = Some(policy);
        spec.leases = Some(tvm::LeaseSpec { max_leases: 64, ..Default::default() });
        Queue::create(&queues, QUEUE, &spec).unwrap();
        let ledger = Ledger::open(&work.0, PRODUCERS + CONSUMERS, MAX_SEQ);
        let mut kids = Children::start((PRODUCERS + CONSUMERS) as usize, PRODUCERS + CONSUMERS, &work.0, |_, me| {
            let mut cmd = child_test("durable_child");
            cmd.env("TVMQ_DURABLE_DIR", &work.0)
                .env("TVMQ_DURABLE_QUEUES", &queues)
                .env("TVMQ_DURABLE_ME", me.to_string())
                .env("TVMQ_DURABLE_LEASE", "1");
            (format!("{} {me}", if me < PRODUCERS { "producer" } else { "lease consumer" }), cmd)
        });
        let deadline = Instant::now() + Duration::from_secs(20);
        let consumed = |l: &Ledger| {
            (0..PRODUCERS)
                .flat_map(|p| (0..50).map(move |s| (p, s)))
                .any(|(p, s)| l.seen(p, s).load(Ordering::SeqCst) > 0)
        };
        while (0..PRODUCERS).any(|p| ledger.proc(p).acked.load(Ordering::SeqCst) < 50) || !consumed(&ledger) {
            assert!(Instant::now() < deadline, "the producers or consumers do not work");
            kids.check(true);
            std::thread::sleep(Duration::from_millis(10));
        }
        // (`interval` runs through the producers' records in about a second.)
        let ms = if policy == Durability::Always { 100 + 150 * u64::from(round) } else { 10 + 20 * u64::from(round) };
        std::thread::sleep(Duration::from_millis(ms));
        kids.kill_all();
        drop(kids);
        if attach {
            // Syncs what the killed processes left (an `interval` queue's
            // last interval reaches the image only so), repairs what they
            // held, and detaches.
            let q = Queue::open(&queues, QUEUE).unwrap();
            q.sync().unwrap();
        }
        let file = tvm::queue_path(&queues, QUEUE);
        let copy = tvm::queue_path(&restarted, QUEUE);
        std::fs::copy(&file, &copy).unwrap();
        forget_boot(&copy);

        let (left, none, after_kill) = drain_leases(&queues);
        assert!(none.is_none(), "no recovery after process deaths on the same boot");
        if !attach {
            // The restart view is not checked without the attach: after a
            // kill of every attached process of an `interval` queue, their
            // last interval reaches the image only when a process attaches
            // again.
            let held = |buf: &[u8]| parse(&buf[..RECORD]);
            let audit = ledger.audit(0..PRODUCERS, PRODUCERS..PRODUCERS + CONSUMERS, held, &left, Some(1));
            assert!(
                audit.problems.is_empty(),
                "after the kill: {:#?}",
                &audit.problems[..audit.problems.len().min(20)]
            );
            eprintln!(
                "{policy:?} round {round} after the kill: {} acknowledged pushes, {} left, {} in a killed consumer's hands, {} leases of killed consumers",
                audit.acked,
                left.len(),
                audit.in_hands,
                after_kill.orphaned
            );
            redelivered += after_kill.orphaned;
            continue;
        }
        let (rebuilt, found, after_restart) = drain_leases(&restarted);
        let found = found.expect("a recovery ran on the copy");
        // Nothing torn: every page is the latest. (`interval`: its
        // producers seal nothing, its syncs seal what is published; slots of
        // records consumed before a sync, or being written when their
        // producers were killed, stay unsealed. The audit below tells.)
        if policy == Durability::Always {
            assert_eq!(found.torn, 0, "nothing torn: every page is the latest ({found:?})");
        }
        // The leases the kill left: ended by the deaths, or by the restart.
        assert_eq!(after_kill.orphaned, after_restart.orphaned, "{after_kill:?} {after_restart:?}");
        redelivered += after_kill.orphaned;
        for (name, rest) in [("after the kill", &left), ("after the restart", &rebuilt)] {
            let held = |buf: &[u8]| parse(&buf[..RECORD]);
            let audit = ledger.audit(0..PRODUCERS, PRODUCERS..PRODUCERS + CONSUMERS, held, rest, Some(1));
            assert!(
                audit.problems.is_empty(),
                "{name}: {:#?} {found:?}",
                &audit.problems[..audit.problems.len().min(20)]
            );
            eprintln!(
                "{policy:?} round {round} {name}: {} acknowledged pushes, {} left, {} in a killed consumer's hands, {} leases of killed consumers",
                audit.acked,
                rest.len(),
                audit.in_hands,
                after_kill.orphaned
            );
        }
    }
    // Consumers of an `always` queue hold a lease most of the time (it
    // spans their acknowledgement's sync); an `interval` queue's hold it
    // for a moment, and a kill may catch none.
    if policy == Durability::Always {
        assert!(redelivered > 0, "no kill caught a consumer holding a lease in {rounds} rounds");
    }
    eprintln!("{policy:?}: {redelivered} leases of killed consumers in {rounds} rounds");
}

/// The rate of `pop_lease` + `ack` on an `always` queue with leases, one
/// thread, beside `pop` on an `always` queue without (each a sync, or two
/// for the lease: its saving and its acknowledgement). Run by hand, in
/// release: `cargo test --release -p tvmq --test durable lease_ack_rate -- --ignored --nocapture`.
#[test]
#[ignore = "a measurement, run by hand"]
fn lease_ack_rate_of_an_always_queue() {
    let n: usize = env_num("TVMQ_RATE_RECORDS", 3000);
    let work = DiskDir::new("rate");
    let record = [7u8; 304];
    let mut plain = Spec::new(n as u64, 304);
    plain.durability = Some(Durability::Always);
    let mut leased = plain.clone();
    leased.leases = Some(tvm::LeaseSpec::default());
    Queue::create(&work.0, 1, &plain).unwrap();
    Queue::create(&work.0, 2, &leased).unwrap();
    let (p, l) = (Queue::open(&work.0, 1).unwrap(), Queue::open(&work.0, 2).unwrap());
    for q in [&p, &l] {
        let batch: Vec<u8> = record.iter().copied().cycle().take(304 * n).collect();
        assert_eq!(q.push_many(&batch, 304).0, n);
    }
    let mut out = [0u8; 304];
    let t = Instant::now();
    for _ in 0..n {
        p.pop(&mut out, Wait::NoWait).unwrap();
    }
    let pop = n as f64 / t.elapsed().as_secs_f64();
    let t = Instant::now();
    for _ in 0..n {
        let (_, lease) = l.pop_lease(&mut out, Wait::NoWait, Duration::ZERO).unwrap();
        l.ack(&lease).unwrap();
    }
    let lease = n as f64 / t.elapsed().as_secs_f64();
    let syncs = l.durable_stats().unwrap().syncs;
    eprintln!(
        "always, 1 thread, {n} records of 304 bytes: pop {pop:.0}/s, pop_lease + ack {lease:.0}/s ({syncs} syncs of the leased queue)"
    );
}

/// What an `interval` queue's lease table, persisted in place (`msync` of
/// its pages at each sync, which write-protects them: the next lease call
/// that writes each page faults), costs lease calls: `pop_lease` + `ack`
/// with 1 and 4 threads on an `interval=100` queue with leases (its syncs
/// fall inside the measurement), against the same on a leased queue that
/// is not durable, in the same directory: 200,000 records pushed, then
/// leased and acknowledged, again for 2 s (the pushes not timed),
/// alternated 3 times (`TVMQ_RATE_RECORDS`, `TVMQ_RATE_ROUNDS`). Run by hand, in release: `cargo test --release -p
/// tvmq --test durable lease_ack_rate_of_an_interval -- --ignored --nocapture`.
#[test]
#[ignore = "a measurement, run by hand"]
fn lease_ack_rate_of_an_interval_queue_against_a_plain_leased_one() {
    let n: u64 = env_num("TVMQ_RATE_RECORDS", 200_000);
    let rounds: usize = env_num("TVMQ_RATE_ROUNDS", 3);
    let work = DiskDir::new("rate-interval");
    let mut plain = Spec::new(n, 304);
    plain.leases = Some(tvm::LeaseSpec { max_leases: 1024, ..Default::default() });
    let mut interval = plain.clone();
    interval.durability = Some(Durability::Interval(100));
    Queue::create(&work.0, 1, &plain).unwrap();
    Queue::create(&work.0, 2, &interval).unwrap();
    let queues =
        [std::sync::Arc::new(Queue::open(&work.0, 1).unwrap()), std::sync::Arc::new(Queue::open(&work.0, 2).unwrap())];
    let rate = |q: &std::sync::Arc<Queue>, threads: u64| -> f64 {
        let batch = vec![7u8; 304 * 1000];
        let (mut timed, mut done) = (Duration::ZERO, 0);
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(2) {
            for _ in 0..n / 1000 {
                assert_eq!(q.push_many(&batch, 304).0, 1000);
            }
            let t = Instant::now();
            std::thread::scope(|s| {
                for _ in 0..threads {
                    s.spawn(|| {
                        let mut out = [0u8; 304];
                        for _ in 0..n / threads {
                            let (_, lease) = q.pop_lease(&mut out, Wait::NoWait, Duration::ZERO).unwrap();
                            q.ack(&lease).unwrap();
                        }
                    });
                }
            });
            timed += t.elapsed();
            done += n / threads * threads;
            q.truncate().unwrap();
        }
        done as f64 / timed.as_secs_f64()
    };
    for threads in [1, 4] {
        for round in 0..rounds {
            let (a, b) = if round % 2 == 0 {
                let a = rate(&queues[0], threads);
                (a, rate(&queues[1], threads))
            } else {
                let b = rate(&queues[1], threads);
                (rate(&queues[0], threads), b)
            };
            eprintln!(
                "{threads} thr., round {round}: plain leased {:.2} M/s, interval=100 leased {:.2} M/s: {:.2}x",
                a / 1e6,
                b / 1e6,
                b / a
            );
        }
    }
    let syncs = queues[1].durable_stats().unwrap().syncs;
    eprintln!("the interval queue's syncs meanwhile: {syncs}");
    drop(queues);
    Queue::drop_queue(&work.0, 1).unwrap();
    Queue::drop_queue(&work.0, 2).unwrap();
}

#[test]
fn leases_go_with_both_policies() {
    let dir = DiskDir::new("lease-policies");
    let mut spec = Spec::new(10, 16);
    spec.leases = Some(tvm::LeaseSpec::default());
    for (id, policy) in [(1, Durability::Always), (2, Durability::Interval(100))] {
        spec.durability = Some(policy);
        Queue::create(&dir.0, id, &spec).unwrap();
        let q = Queue::open(&dir.0, id).unwrap();
        assert_eq!(q.durability(), Some(policy));
        q.push(b"one").unwrap();
        let mut out = [0u8; 16];
        let (n, lease) = q.pop_lease(&mut out, Wait::NoWait, Duration::ZERO).unwrap();
        assert_eq!(&out[..n], b"one");
        q.ack(&lease).unwrap();
        assert_eq!(q.pop(&mut out, Wait::NoWait).unwrap_err().code(), NO_DATA_FOUND);
        // An acknowledgement alone is a change the flusher finds and syncs.
        q.push(b"two").unwrap();
        let (_, lease) = q.pop_lease(&mut out, Wait::NoWait, Duration::ZERO).unwrap();
        q.sync().unwrap();
        let before = q.durable_stats().unwrap().syncs;
        q.ack(&lease).unwrap();
        if policy != Durability::Always {
            // 30 s: a guard against a hang (a flusher that never finds the
            // change), not a bound on how soon it syncs (100 ms here).
            let deadline = Instant::now() + Duration::from_secs(30);
            while q.durable_stats().unwrap().syncs == before {
                assert!(Instant::now() < deadline, "the flusher did not sync an acknowledgement");
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        assert!(q.durable_stats().unwrap().syncs > before);
        // ack_pop_lease, record after record, then an empty queue: every
        // record once, nothing left in flight, nothing back after a reopen.
        for r in [b"3", b"4", b"5"] {
            q.push(r).unwrap();
        }
        let (_, mut lease) = q.pop_lease(&mut out, Wait::NoWait, Duration::ZERO).unwrap();
        let mut got = vec![out[0]];
        loop {
            match q.ack_pop_lease(&lease, &mut out, Wait::NoWait, Duration::ZERO).unwrap() {
                Ok((_, next)) => {
                    got.push(out[0]);
                    lease = next;
                }
                Err(e) => {
                    assert_eq!(e.code(), NO_DATA_FOUND);
                    break;
                }
            }
        }
        assert_eq!(got, b"345");
        assert_eq!(q.lease_stats().unwrap().in_flight, 0);
        drop(q);
        let q = Queue::open(&dir.0, id).unwrap();
        assert_eq!(q.pop_lease(&mut out, Wait::NoWait, Duration::ZERO).unwrap_err().code(), NO_DATA_FOUND);
        assert_eq!(q.lease_stats().unwrap().in_flight, 0);
    }
}

/// After a machine restart (the file copied with its boot id cleared):
/// leases held, released with a delay, or run out are delivered again at
/// once with their delivery counts raised; an acknowledged one is not.
#[test]
fn a_restart_ends_every_lease_and_keeps_the_delivery_counts() {
    let work = DiskDir::new("lease-restart");
    let (queues, restarted) = (work.0.join("queues"), work.0.join("restarted"));
    std::fs::create_dir_all(&queues).unwrap();
    std::fs::create_dir_all(&restarted).unwrap();
    let mut spec = Spec::new(10, 16);
    spec.durability = Some(Durability::Always);
    spec.leases = Some(tvm::LeaseSpec { max_leases: 8, ..Default::default() });
    Queue::create(&queues, QUEUE, &spec).unwrap();
    {
        let q = Queue::open(&queues, QUEUE).unwrap();
        for r in [b"held", b"ackd", b"rels", b"twic", b"left"] {
            q.push(r).unwrap();
        }
        let mut out = [0u8; 16];
        let mut take = || q.pop_lease(&mut out, Wait::NoWait, Duration::ZERO).unwrap().1;
        let _held = take();
        q.ack(&take()).unwrap();
        q.release(&take(), Duration::from_secs(3600)).unwrap();
        let twice = take();
        q.release(&twice, Duration::ZERO).unwrap();
        let again = q.pop_lease(&mut out, Wait::NoWait, Duration::ZERO).unwrap().1;
        assert_eq!((&out[..4], again.deliveries()), (&b"twic"[..], 2));
    }
    let copy = tvm::queue_path(&restarted, QUEUE);
    std::fs::copy(tvm::queue_path(&queues, QUEUE), &copy).unwrap();
    forget_boot(&copy);
    let q = Queue::open(&restarted, QUEUE).unwrap();
    let before = q.lease_stats().unwrap();
    assert_eq!((before.in_flight, before.waiting), (0, 3), "{before:?}");
    let mut got = Vec::new();
    let mut out = [0u8; 16];
    loop {
        match q.pop_lease(&mut out, Wait::NoWait, Duration::ZERO) {
            Ok((n, lease)) => {
                got.push((String::from_utf8_lossy(&out[..n]).into_owned(), lease.deliveries()));
                q.ack(&lease).unwrap();
            }
            Err(e) if e.code() == NO_DATA_FOUND => break,
            Err(e) => panic!("pop_lease: {e}"),
        }
    }
    got.sort();
    let want = [("held", 2), ("left", 1), ("rels", 2), ("twic", 3)].map(|(r, d)| (r.to_string(), d));
    assert_eq!(got, want);
    // The two leases in flight at the restart (held, twic): ended as by a death.
    assert_eq!(q.lease_stats().unwrap().orphaned, 2);
}

/// With its syncs put off (`defer_syncs`, as `tvmq serve` runs its
/// commands), a lease pop of an `always` queue still syncs before it
/// releases the record's ring slot (the record saved in the lease table
/// must reach the disk first, or a machine crash could lose it), while an
/// ack's sync is put off, for its ticket.
#[test]
fn a_lease_pop_syncs_its_saved_record_even_with_syncs_put_off() {
    let dir = DiskDir::new("lease-defer");
    let mut spec = Spec::new(10, 16);
    spec.durability = Some(Durability::Always);
    spec.leases = Some(tvm::LeaseSpec::default());
    Queue::create(&dir.0, 1, &spec).unwrap();
    let q = Queue::open(&dir.0, 1).unwrap();
    q.push(b"one").unwrap();
    let syncs = || q.durable_stats().unwrap().syncs;
    let before = syncs();
    let mut out = [0u8; 16];
    let (got, _) = q.defer_syncs(|q| q.pop_lease(&mut out, Wait::NoWait, Duration::ZERO));
    let (n, lease) = got.unwrap();
    assert_eq!(&out[..n], b"one");
    assert!(syncs() > before, "the lease pop synced the saved record");
    let before = syncs();
    let (acked, ticket) = q.defer_syncs(|q| q.ack(&lease));
    acked.unwrap();
    let ticket = ticket.expect("an ack of an always queue waits for a sync");
    assert_eq!(syncs(), before, "the ack's sync was put off");
    assert!(!q.is_synced(ticket));
    q.sync_ticket(ticket).unwrap();
    assert!(q.is_synced(ticket));
}

/// An `interval` queue with leases restarts from what its last sync wrote
/// into the slots' image, and from its lease table, which lives in place:
/// the sync persisted it, and the kernel may write later versions back
/// whenever it likes (a copy of the file reads the latest, as here). So:
/// pushes after the sync are gone, records acknowledged before it do not
/// come back, those acknowledged after it may not either (the table says
/// so), and a record leased after it comes back from the table with its
/// delivery counted.
#[test]
fn an_interval_queue_with_leases_restarts_from_its_last_sync() {
    let disk = DiskDir::new("image-leases");
    let restarted = DiskDir::new("image-leases-restarted");
    let mut spec = Spec::new(64, 16);
    // An hour: no flush during the test.
    spec.durability = Some(Durability::Interval(3_600_000));
    spec.leases = Some(tvm::LeaseSpec { max_leases: 8, ..Default::default() });
    Queue::create(&disk.0, 1, &spec).unwrap();
    let q = Queue::open(&disk.0, 1).unwrap();
    let rec = |i: u32| [i.to_le_bytes(), [7; 4], [8; 4], [9; 4]].concat();
    let mut out = [0u8; 16];
    let mut lease = || {
        let (_, l) = q.pop_lease(&mut out, Wait::NoWait, Duration::ZERO).unwrap();
        (u32::from_le_bytes(out[..4].try_into().unwrap()), l)
    };
    for i in 1..=20 {
        q.push(&rec(i)).unwrap();
    }
    let mut held = Vec::new();
    for _ in 0..5 {
        let (i, l) = lease();
        if i <= 3 {
            q.ack(&l).unwrap(); // 1..=3 acknowledged
        } else {
            held.push(l); // 4 and 5 leased at the sync
        }
    }
    q.sync().unwrap();
    for i in 21..=30 {
        q.push(&rec(i)).unwrap();
    }
    for l in held.drain(..) {
        q.ack(&l).unwrap(); // after the sync, in the live table
    }
    let (six, _) = lease(); // 6, leased after the sync, in the live table
    assert_eq!(six, 6);
    let copy = tvm::queue_path(&restarted.0, 1);
    std::fs::copy(tvm::queue_path(&disk.0, 1), &copy).unwrap();
    forget_boot(&copy);
    let r = Queue::open(&restarted.0, 1).unwrap();
    let mut got = Vec::new();
    while let Ok((n, l)) = r.pop_lease(&mut out, Wait::NoWait, Duration::ZERO) {
        assert_eq!(n, 16);
        got.push((u32::from_le_bytes(out[..4].try_into().unwrap()), l.deliveries()));
        r.ack(&l).unwrap();
    }
    got.sort_unstable();
    let want: Vec<(u32, u32)> = [(6, 2)].into_iter().chain((7..=20).map(|i| (i, 1))).collect();
    assert_eq!(got, want, "the records of the last sync, less those the live table acknowledged");
    drop(q);
}

/// Child of `a_killed_process_leaves_an_interval_queues_live_part_to_the_next_attach`:
/// pushes 100 records into queue 1 (an interval of an hour: no sync), says
/// so, and waits to be killed.
#[test]
#[ignore = "child process of a_killed_process_leaves_an_interval_queues_live_part_to_the_next_attach"]
fn interval_kill_child() {
    let dir = PathBuf::from(child_env("TVMQ_DURABLE_DIR"));
    let q = Queue::open(&dir, 1).expect("open");
    for i in 0..100u32 {
        q.push(&i.to_le_bytes()).expect("push");
    }
    println!("pushed");
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// kill -9 of the only process attached to an `interval` queue leaves its
/// live part (in tmpfs) as it was: the next attach uses it, without a
/// recovery, and finds every record the killed process pushed (none of
/// which any sync wrote into the image).
#[test]
fn a_killed_process_leaves_an_interval_queues_live_part_to_the_next_attach() {
    use std::io::BufRead;
    let disk = DiskDir::new("interval-kill");
    create_durable(&disk.0, 1, 256, 16, Durability::Interval(3_600_000));
    let mut child = child_test("interval_kill_child")
        .env("TVMQ_DURABLE_DIR", &disk.0)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("start the child");
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    assert!(lines.any(|l| l.is_ok_and(|l| l.ends_with("pushed"))), "the child did not push");
    child.kill().unwrap();
    child.wait().unwrap();
    let q = Queue::open(&disk.0, 1).unwrap();
    assert!(q.durable_stats().unwrap().last_recovery.is_none(), "no recovery after a process kill");
    let mut out = [0u8; 16];
    let got: Vec<u32> = std::iter::from_fn(|| {
        q.pop(&mut out, Wait::NoWait).ok().map(|_| u32::from_le_bytes(out[..4].try_into().unwrap()))
    })
    .collect();
    assert_eq!(got, (0..100).collect::<Vec<u32>>());
}

/// The live part in `/dev/shm/tvmq-<uid>` of queue `id` in `dir` (found by
/// the queue file's device and inode, which begin its name).
fn live_part_of(dir: &Path, id: u32) -> Option<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(tvm::queue_path(dir, id)).ok()?;
    let mine = format!(".interval-{:x}-{}-{id}-", m.dev(), m.ino());
    // SAFETY: geteuid has no preconditions.
    let shm = PathBuf::from(format!("/dev/shm/tvmq-{}", unsafe { libc::geteuid() }));
    std::fs::read_dir(&shm)
        .ok()?
        .flatten()
        .find(|e| e.file_name().to_string_lossy().starts_with(&mine))
        .map(|e| e.path())
}

/// Child of `a_live_part_in_use_is_never_removed_by_the_sweeps`: creates
/// and drops an `interval` queue in its own directory (each create sweeps
/// the orphaned live parts) and sweeps once more, over and over, until the
/// file `stop` appears there; then prints how many live parts it removed.
#[test]
#[ignore = "child process of a_live_part_in_use_is_never_removed_by_the_sweeps"]
fn orphan_sweeper_child() {
    let dir = PathBuf::from(child_env("TVMQ_DURABLE_DIR"));
    let mut spec = Spec::new(8, 16);
    spec.durability = Some(Durability::Interval(3_600_000));
    let mut rounds = 0u64;
    while !dir.join("stop").exists() {
        Queue::create(&dir, 1, &spec).expect("create");
        Queue::drop_queue(&dir, 1).expect("drop");
        Queue::remove_orphaned_live_parts();
        rounds += 1;
    }
    println!("{rounds} rounds, {} live part(s) removed", Queue::orphaned_live_parts_removed().0);
}

/// Another process sweeps orphaned live parts all the time (at each of its
/// creates, and on its own) while this one uses an `interval` queue:
/// - its queue file in place, attached and let go over and over: the live
///   part is never removed (the same file throughout), though nobody holds
///   it between two attachments;
/// - its directory moved back and forth while nobody is attached (the live
///   part then records a path that is gone: the sweep may remove it, and
///   the next attach rebuilds it from the image), then two attachments at
///   the new place, one pushing, the other popping: both use the same live
///   part (an attach that a sweep's removal overtook looks again, never
///   keeps a removed file while the other makes a new one), so every
///   record is popped once, in order.
#[test]
fn a_live_part_in_use_is_never_removed_by_the_sweeps() {
    const ROUNDS: u32 = 300;
    let disk = DiskDir::new("live-in-use");
    let sweeper_dir = disk.0.join("sweeper");
    let (a, b) = (disk.0.join("a"), disk.0.join("b"));
    std::fs::create_dir(&sweeper_dir).unwrap();
    std::fs::create_dir(&a).unwrap();
    create_durable(&a, 1, 512, 16, Durability::Interval(3_600_000));
    let sweeper = child_test("orphan_sweeper_child")
        .env("TVMQ_DURABLE_DIR", &sweeper_dir)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("start the sweeper");
    // Killed if this test fails before it stops the sweeper.
    struct Sweeper(Option<std::process::Child>);
    impl Drop for Sweeper {
        fn drop(&mut self) {
            if let Some(mut c) = self.0.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
    let mut sweeper = Sweeper(Some(sweeper));
    Queue::open(&a, 1).unwrap().push(b"first").unwrap();
    let live = live_part_of(&a, 1).expect("the live part");
    let ino = |p: &Path| std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(p).unwrap());
    let first = ino(&live);
    for i in 0..ROUNDS {
        let q = Queue::open(&a, 1).unwrap();
        q.push(&i.to_le_bytes()).unwrap();
        drop(q);
        assert!(live.exists() && ino(&live) == first, "round {i}: the live part of a queue in place was removed");
    }
    let q = Queue::open(&a, 1).unwrap();
    let mut out = [0u8; 16];
    assert_eq!(q.pop(&mut out, Wait::NoWait).unwrap(), 5);
    for i in 0..ROUNDS {
        assert_eq!(q.pop(&mut out, Wait::NoWait).unwrap(), 4);
        assert_eq!(u32::from_le_bytes(out[..4].try_into().unwrap()), i);
    }
    drop(q);
    let mut at = a.clone();
    let mut popped = Vec::new();
    for i in 0..ROUNDS {
        let next = if at == a { b.clone() } else { a.clone() };
        std::fs::rename(&at, &next).unwrap();
        at = next;
        let pusher = Queue::open(&at, 1).unwrap();
        let popper = Queue::open(&at, 1).unwrap();
        pusher.push(&i.to_le_bytes()).unwrap();
        match popper.pop(&mut out, Wait::NoWait) {
            Ok(4) => popped.push(u32::from_le_bytes(out[..4].try_into().unwrap())),
            other => panic!("round {i}: the second attachment popped {other:?}, not the first's push"),
        }
    }
    std::fs::write(sweeper_dir.join("stop"), b"").unwrap();
    let out = sweeper.0.take().unwrap().wait_with_output().unwrap();
    assert!(out.status.success(), "the sweeper failed: {}", String::from_utf8_lossy(&out.stdout));
    eprintln!("sweeper: {}", String::from_utf8_lossy(&out.stdout).lines().find(|l| l.contains("rounds")).unwrap_or(""));
    assert_eq!(popped, (0..ROUNDS).collect::<Vec<u32>>());
    assert_eq!(Queue::open(&at, 1).unwrap().depth(), 0);
    Queue::drop_queue(&at, 1).unwrap();
}
