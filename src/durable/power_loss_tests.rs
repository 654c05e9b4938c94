//! The power-loss model: what a machine crash (power cut, kernel panic,
//! reset) can leave of a durable queue, and what opening it must then make
//! of it. (Process kills are the other kind of crash: `tests/kill.rs`,
//! `tests/durable.rs`.)
//!
//! The queue's syncs go through a hook that copies the mapping (what
//! `msync` would write) and logs it; another thread copies it at random
//! instants. Producers and consumers log when each push and pop starts and
//! returns, in the same log. A crash image at a logged copy T is, for each
//! 4 KiB page (or, in half the images, each 512-byte sector), the version of
//! the last sync before T or any copy taken after it up to T: pages reach
//! the disk in any order, whenever the kernel writes them. Opening the
//! image (with the boot id cleared, as after a restart) must never fail or
//! crash, never yield a record that was not pushed or a torn one, never
//! lose a push acknowledged as durable, and deliver again only records
//! popped within the window (after the last sync before T).
//!
//! `TVMQ_POWER_LOSS_IMAGES` sets the number of images per run (`make soak` uses more).

use super::*;
use crate::file::layout::{BOOT_ID_OFFSET, CONTROL_OFFSET, DATA_OFFSET, TABLE_OFFSET};
use crate::file::queue_path;
use crate::queue::{Queue, Wait};
use crate::spec::Spec;
use crate::test_support::{DiskDir, TempDir, env_num, record, splitmix64};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const PAGE: usize = 4096;
const SECTOR: usize = 512;
const RECORD: u64 = 120;
const CAPACITY: u64 = 200;

/// One entry of the run's log.
enum Event {
    /// A copy of the file without its process table: bytes 0..TABLE_OFFSET
    /// then DATA_OFFSET..end. `synced`: taken by a sync (of the slots);
    /// `control`: the sync wrote the control page too.
    Copy {
        synced: bool,
        control: bool,
        bytes: Arc<Vec<u8>>,
        /// A sync of a queue with an image: its writes into it (see `SyncEvent`).
        writes: Vec<(u64, u64, u64)>,
        /// (`interval` with leases.) Taken as a sync persisted the lease
        /// table in place: the table's pages of this copy (or later) are on
        /// the disk from here on; the image writes of the sync logged just
        /// before start after it.
        table: bool,
    },
    /// A sync begins: pushes acknowledged before it are in it.
    SyncBegin,
    PushStart(u32),
    Acked(u32),
    PopStart(u8),
    Popped(u8, u32),
    /// (Leases.) Consumer `c` calls `pop_lease`.
    LeaseStart(u8),
    /// (Leases.) `pop_lease` of consumer `c` returned record `seq`, on its
    /// `deliveries`-th delivery: `Leased(c, seq, deliveries)`.
    Leased(u8, u32, u32),
    /// `ack` (or `reject`) of record `seq` called, and returned.
    AckStart(u32),
    AckDone(u32),
}

/// Record `seq` (unique over the run): its length follows from it.
fn record(seq: u32) -> Vec<u8> {
    let len = record::HDR + (splitmix64(u64::from(seq)) % (RECORD - record::HDR as u64 + 1)) as usize;
    record::new(0, u64::from(seq), len)
}

/// The sequence number a record's header names (unchecked).
fn seq_of(r: &[u8]) -> u32 {
    record::id(r).expect("a record header").1 as u32
}

/// The sequence number of a record, if it is exactly a record of [`record`].
fn parse(r: &[u8]) -> Option<u32> {
    let seq = seq_of(r);
    (record(seq) == r).then_some(seq)
}

/// Copies the queue's mapping of `len` bytes (all but the process table)
/// with volatile reads: other threads write it meanwhile, as they do while
/// the kernel writes pages out. The copy stands for the queue file of
/// `file_len` bytes: an `interval` queue without leases maps only its live
/// part (in tmpfs, everything before its image), and the rest is zeros.
fn copy(base: *const u8, len: usize, file_len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(copy_len(file_len));
    for range in [0..TABLE_OFFSET as usize, DATA_OFFSET as usize..len] {
        for off in range.step_by(8) {
            // SAFETY: off + 8 <= len (ranges of 8-byte multiples inside a
            // live mapping of len bytes); a volatile read of memory other
            // threads may be writing is how a snapshot is taken.
            let w = unsafe { std::ptr::read_volatile(base.add(off).cast::<u64>()) };
            out.extend_from_slice(&w.to_ne_bytes());
        }
    }
    out.resize(copy_len(file_len), 0);
    out
}

/// Logs what a sync hands its hook: the copy a sync makes durable (the
/// image's snapshot, or the synced mapping) and, for an `interval` queue
/// with leases, the lease table persisted after it.
fn log_sync_event(l: &mut Vec<Event>, event: &SyncEvent, file_len: usize) {
    match *event {
        SyncEvent::Begin => l.push(Event::SyncBegin),
        SyncEvent::Synced { base, len, control, writes } => {
            let bytes = Arc::new(copy(base, len, file_len));
            l.push(Event::Copy { synced: true, control, bytes, writes: writes.to_vec(), table: false })
        }
        SyncEvent::LeaseTable { base, len } => {
            let bytes = Arc::new(copy(base, len, file_len));
            l.push(Event::Copy { synced: false, control: false, bytes, writes: Vec::new(), table: true })
        }
    }
}

/// A logged run: the queue's policy, whether it has an image, the log and
/// the queue file's size.
struct Logged {
    policy: Durability,
    image: bool,
    log: Vec<Event>,
    file_len: usize,
}

/// Creates queue 1 in `dir` (an `always` queue without an image, as
/// earlier versions made them, unless `image`).
fn create(dir: &Path, spec: &Spec, image: bool) {
    crate::file::layout::LEGACY_ALWAYS.with(|l| l.set(!image));
    let made = Queue::create(dir, 1, spec);
    crate::file::layout::LEGACY_ALWAYS.with(|l| l.set(false));
    made.unwrap();
    let file = crate::file::map::QueueFile::open(dir, 1, crate::file::map::Access::ReadOnly).unwrap();
    assert_eq!(file.options().image(), image, "the queue's image");
}

/// A run of producers and consumers on a durable queue whose syncs are
/// logged copies; returns the log and the file size.
fn run(policy: Durability, image: bool, dir: &Path, seed: u64) -> Logged {
    let mut spec = Spec::new(CAPACITY, RECORD);
    spec.durability = Some(policy);
    create(dir, &spec, image);
    let path = queue_path(dir, 1);
    let log = Arc::new(Mutex::new(Vec::new()));
    let file_len = std::fs::metadata(&path).unwrap().len() as usize;
    let hook_log = log.clone();
    let hook: SyncHook = Arc::new(move |event| {
        log_sync_event(&mut hook_log.lock().unwrap(), event, file_len);
    });
    hooks().lock().unwrap().push((path.clone(), hook));
    let q = Arc::new(Queue::open(dir, 1).unwrap());
    // The queue's mapping (an `interval` queue's live part in tmpfs), as
    // created: the first entry of the log.
    let map = q.shared_map();
    {
        let bytes = Arc::new(copy(map.base(), map.len(), file_len));
        let first = Event::Copy { synced: true, control: true, bytes, writes: Vec::new(), table: false };
        log.lock().unwrap().insert(0, first);
    }
    let stop = Arc::new(AtomicBool::new(false));
    const PRODUCERS: u32 = 3;
    const PER_PRODUCER: u32 = 500;
    let pace = matches!(policy, Durability::Interval(_));
    const CONSUMERS: u8 = 3;
    let popped = Arc::new(AtomicU64::new(0));
    std::thread::scope(|s| {
        // Copies at random instants.
        {
            let (log, stop, map) = (log.clone(), stop.clone(), map.clone());
            s.spawn(move || {
                let mut x = seed;
                while !stop.load(Ordering::Relaxed) {
                    x = splitmix64(x);
                    std::thread::sleep(Duration::from_micros(20 + x % 300));
                    // Copied under the log's lock: the log's order is the copies' order.
                    let mut l = log.lock().unwrap();
                    let bytes = Arc::new(copy(map.base(), map.len(), file_len));
                    l.push(Event::Copy { synced: false, control: false, bytes, writes: Vec::new(), table: false });
                }
            });
        }
        for p in 0..PRODUCERS {
            let (q, log, pace) = (q.clone(), log.clone(), pace);
            s.spawn(move || {
                let mut x = seed ^ u64::from(p + 1);
                let mut seq = p * PER_PRODUCER;
                let end = seq + PER_PRODUCER;
                while seq < end {
                    x = splitmix64(x);
                    // Now and then a batch of 2..=4 (one sync for all), else one record.
                    let n = if x % 5 == 0 { (2 + (x >> 8) % 3) as u32 } else { 1 }.min(end - seq);
                    let recs: Vec<Vec<u8>> = (seq..seq + n).map(record).collect();
                    {
                        let mut l = log.lock().unwrap();
                        (seq..seq + n).for_each(|r| l.push(Event::PushStart(r)));
                    }
                    let done = if n == 1 {
                        match q.push(&recs[0]) {
                            Ok(()) => 1,
                            Err(e) if e.code() == DATA_SPC_FULL => 0,
                            Err(e) => panic!("push: {e}"),
                        }
                    } else {
                        // Batches need equal sizes: pad to the record size with the
                        // record's own tail rule (records are self-describing).
                        let mut bytes = Vec::new();
                        let each = RECORD as usize;
                        for r in &recs {
                            let mut b = r.clone();
                            b.resize(each, 0);
                            bytes.extend_from_slice(&b);
                        }
                        let (done, err) = q.push_many(&bytes, each);
                        if let Some(e) = err {
                            assert_eq!(e.code(), DATA_SPC_FULL, "push_many: {e}");
                        }
                        done as u32
                    };
                    {
                        let mut l = log.lock().unwrap();
                        (seq..seq + done).for_each(|r| l.push(Event::Acked(r)));
                    }
                    seq += done;
                    if done < n {
                        std::thread::yield_now();
                    }
                    if pace && x % 4 == 0 {
                        // Spread an `interval` run over many flushes.
                        std::thread::sleep(Duration::from_micros(100));
                    }
                }
            });
        }
        for c in 0..CONSUMERS {
            let (q, log, popped) = (q.clone(), log.clone(), popped.clone());
            s.spawn(move || {
                let mut out = vec![0u8; RECORD as usize];
                while popped.load(Ordering::SeqCst) < u64::from(PRODUCERS * PER_PRODUCER) {
                    log.lock().unwrap().push(Event::PopStart(c));
                    match q.pop(&mut out, Wait::NoWait) {
                        Ok(n) => {
                            // Batch-pushed records were padded: cut at the record's own length.
                            let seq = seq_of(&out);
                            let len = record(seq).len();
                            assert!(n == len || n == RECORD as usize, "length {n} for record {seq}");
                            assert_eq!(parse(&out[..len]), Some(seq), "a record that was pushed");
                            popped.fetch_add(1, Ordering::SeqCst);
                            log.lock().unwrap().push(Event::Popped(c, seq));
                        }
                        Err(e) if e.code() == NO_DATA_FOUND => std::thread::yield_now(),
                        Err(e) => panic!("pop: {e}"),
                    }
                }
            });
        }
        // The producers and consumers end by themselves; then stop the copier.
        while popped.load(Ordering::SeqCst) < u64::from(PRODUCERS * PER_PRODUCER) {
            std::thread::sleep(Duration::from_millis(5));
        }
        stop.store(true, Ordering::Relaxed);
    });
    drop(q);
    hooks().lock().unwrap().retain(|(p, _)| p != &path);
    Logged { policy, image, log: take_log(log), file_len }
}

/// The log of a run whose queue was dropped and its hook taken out of
/// [`hooks`], once the last sync has logged all of its events. The
/// flusher thread may still be running a sync of the queue (it holds the
/// queue's sync machinery, and so the hook, for its tick): the queue, clean
/// as that sync had begun, did not sync at its drop. Taken at once, the
/// log could end between that sync's copy and its lease table's
/// persisting, and the model would take the sync for one that persisted no
/// table, its image writes landed from its copy on, over a table older than
/// the acknowledgements before it. The hook holds a reference to the log:
/// the log is taken once that reference is gone.
fn take_log(log: Arc<Mutex<Vec<Event>>>) -> Vec<Event> {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while Arc::strong_count(&log) > 1 {
        assert!(std::time::Instant::now() < deadline, "the queue's sync machinery outlived the queue");
        std::thread::sleep(Duration::from_millis(1));
    }
    std::mem::take(&mut *log.lock().unwrap())
}

/// What the log says about each record, as event indices.
#[derive(Default, Clone, Copy)]
struct Life {
    push_start: Option<usize>,
    acked: Option<usize>,
    pop_start: Option<usize>,
    popped: Option<usize>,
}

fn lives(log: &[Event]) -> std::collections::HashMap<u32, Life> {
    let mut m: std::collections::HashMap<u32, Life> = Default::default();
    let mut pop_start: [usize; 256] = [0; 256];
    for (i, e) in log.iter().enumerate() {
        match e {
            Event::PushStart(r) => m.entry(*r).or_default().push_start = Some(i),
            Event::Acked(r) => m.entry(*r).or_default().acked = Some(i),
            Event::PopStart(c) => pop_start[*c as usize] = i,
            Event::Popped(c, r) => {
                let l = m.entry(*r).or_default();
                l.pop_start = Some(pop_start[*c as usize]);
                l.popped = Some(i);
            }
            _ => {}
        }
    }
    m
}

/// Builds crash images from a run's log and checks what opening each gives.
fn check_images(run: &Logged, images: usize, seed: u64) -> (u64, u64) {
    let Logged { policy, image, ref log, file_len } = *run;
    let lives = lives(log);
    let copies: Vec<usize> = (0..log.len()).filter(|&i| matches!(log[i], Event::Copy { .. })).collect();
    let returns: Vec<usize> =
        (0..log.len()).filter(|&i| matches!(log[i], Event::Acked(_) | Event::Popped(..))).collect();
    // In /dev/shm, with the images' syncs hooked (so the filesystem does
    // not matter, and opening is not refused there).
    let scratch = TempDir::new("durable", "images");
    let image_path = queue_path(scratch.path(), 1);
    hooks().lock().unwrap().push((image_path.clone(), Arc::new(|_: &SyncEvent| {})));
    let (mut redelivered, mut kept_total) = (0u64, 0u64);
    let mut x = seed;
    for n in 0..images {
        x = splitmix64(x);
        // The crash: after copy T, at random or (half the images) at the
        // first copy after a push or pop returned, where a missing sync shows.
        let t = if (x >> 40) % 2 == 0 {
            copies[(x % copies.len() as u64) as usize]
        } else {
            let returned = &returns[(x % returns.len() as u64) as usize];
            match copies.iter().find(|&&c| c > *returned) {
                Some(&c) => c,
                None => *copies.last().unwrap(),
            }
        };
        // A queue with an image, in half the images: the crash comes while
        // the next sync that writes into the image is writing (at its
        // copy, which is then not complete).
        let image_sync = |i: usize| matches!(&log[i], Event::Copy { writes, .. } if !writes.is_empty());
        let torn = image && (x >> 20) % 2 == 0;
        let (t, torn) = match copies.iter().copied().find(|&c| c > t && image_sync(c)) {
            Some(next) if torn => (next, true),
            _ => (t, false),
        };
        let (mut file, last_sync, grain, versions) = crash_file(log, &copies, t, torn, &mut x, file_len);
        if image {
            x = splitmix64(x);
            to_image(&mut file, log, t, torn, x);
        }
        let path = queue_path(scratch.path(), 1);
        let _ = std::fs::remove_file(&path);
        std::fs::write(&path, &file).unwrap();
        let q = Queue::open(scratch.path(), 1).unwrap_or_else(|e| panic!("image {n} (crash at event {t}): open: {e}"));
        let found = q.durable_stats().unwrap().last_recovery.expect("a recovery ran");
        // What the image delivers.
        let mut got = Vec::new();
        let mut out = vec![0u8; RECORD as usize];
        loop {
            match q.pop(&mut out, Wait::NoWait) {
                Ok(len) => {
                    let seq = seq_of(&out);
                    let want = record(seq);
                    let ok = (len == want.len() || len == RECORD as usize)
                        && out[..want.len()] == want[..]
                        && out[want.len()..len].iter().all(|&b| b == 0);
                    assert!(ok, "image {n}: a record that was never pushed, or torn: {:?}", &out[..len]);
                    let life = lives.get(&seq).copied().unwrap_or_default();
                    assert!(life.push_start.is_some_and(|s| s < t), "image {n}: record {seq} pushed after the crash");
                    got.push(seq);
                }
                Err(e) if e.code() == NO_DATA_FOUND => break,
                Err(e) => panic!("image {n}: pop: {e}"),
            }
        }
        drop(q);
        // With its live part in tmpfs (an `interval` queue), so that the
        // next image finds none and is rebuilt from its own image.
        Queue::drop_queue(scratch.path(), 1).unwrap();
        kept_total += got.len() as u64;
        assert_eq!(found.kept, got.len() as u64, "image {n}: recovery's count");
        let set: std::collections::HashSet<u32> = got.iter().copied().collect();
        assert_eq!(set.len(), got.len(), "image {n}: a record delivered twice");
        // The durable point: acknowledged pushes and completed pops before it are on disk.
        // (`interval`: what was acknowledged before the last sync began; its
        // pass seals the records, which their producers did not.)
        let durable_before = match policy {
            Durability::Always => t,
            Durability::Interval(_) => {
                log[..last_sync].iter().rposition(|e| matches!(e, Event::SyncBegin)).unwrap_or(0)
            }
        };
        for (&seq, life) in &lives {
            let acked = life.acked.is_some_and(|a| a < durable_before);
            let pop_began = life.pop_start.is_some_and(|s| s < t);
            if acked && !pop_began {
                assert!(
                    set.contains(&seq),
                    "image {n} (crash at {t}, last sync {last_sync}, grain {grain}): acknowledged push {seq} lost: {:?} {found:?} {}",
                    (life.push_start, life.acked, life.pop_start, life.popped),
                    describe(&versions, seq)
                );
            }
            if life.popped.is_some_and(|p| p < durable_before) {
                assert!(!set.contains(&seq), "image {n}: record {seq}, popped before the last sync, delivered again");
            }
            if set.contains(&seq) && life.popped.is_some_and(|p| p < t) {
                redelivered += 1;
            }
        }
    }
    hooks().lock().unwrap().retain(|(p, _)| p != &image_path);
    (kept_total, redelivered)
}

/// The file a crash after copy `t` leaves (see the module documentation):
/// each page (or sector) of the last sync before `t` (of the sync at `t`
/// unless `torn`) or of any copy after it up to `t`, the control page of
/// the last sync that wrote it or later, a zero process table, the boot id
/// cleared. Returns it, the last sync, the grain and the versions used.
fn crash_file(
    log: &[Event],
    copies: &[usize],
    t: usize,
    torn: bool,
    x: &mut u64,
    file_len: usize,
) -> (Vec<u8>, usize, usize, Vec<Arc<Vec<u8>>>) {
    let bytes = |i: usize| match &log[i] {
        Event::Copy { bytes, .. } => bytes.clone(),
        _ => unreachable!(),
    };
    let copied_len = copy_len(file_len);
    let last_sync = copies
        .iter()
        .copied()
        .filter(|&i| (i < t || (i == t && !torn)) && matches!(log[i], Event::Copy { synced: true, .. }))
        .max()
        .unwrap();
    // The control page is synced only by the syncs that wrote it.
    let last_control = copies
        .iter()
        .copied()
        .filter(|&i| i <= t && matches!(log[i], Event::Copy { synced: true, control: true, .. }))
        .max()
        .unwrap();
    let versions: Vec<Arc<Vec<u8>>> = copies.iter().copied().filter(|&i| i >= last_sync && i <= t).map(bytes).collect();
    let control_versions: Vec<Arc<Vec<u8>>> =
        copies.iter().copied().filter(|&i| i >= last_control && i <= t).map(bytes).collect();
    let grain = if (*x >> 32) % 2 == 0 { PAGE } else { SECTOR };
    let mut image = vec![0u8; copied_len];
    for (k, chunk) in image.chunks_mut(grain).enumerate() {
        *x = splitmix64(*x);
        let in_control = (CONTROL_OFFSET as usize..TABLE_OFFSET as usize).contains(&(k * grain));
        let from = if in_control { &control_versions } else { &versions };
        let v = &from[(*x % from.len() as u64) as usize];
        chunk.copy_from_slice(&v[k * grain..k * grain + chunk.len()]);
    }
    // As after a restart: another boot id.
    let boot = BOOT_ID_OFFSET as usize;
    image[boot..boot + 16].fill(0);
    // The file: header and control, a zero process table, the slots.
    let mut file = image[..TABLE_OFFSET as usize].to_vec();
    file.resize(DATA_OFFSET as usize, 0);
    file.extend_from_slice(&image[TABLE_OFFSET as usize..]);
    assert_eq!(file.len(), file_len);
    (file, last_sync, grain, versions)
}

/// Where record `seq` is in each version (for failure messages).
fn describe(versions: &[Arc<Vec<u8>>], seq: u32) -> String {
    let stride = crate::file::layout::stride_for(RECORD, true) as usize;
    let base = TABLE_OFFSET as usize;
    let mut s = String::new();
    for (k, v) in versions.iter().enumerate() {
        for i in 0..CAPACITY as usize {
            let at = base + i * stride;
            if seq_of(&v[at + 16..]) == seq {
                let seqw = u64::from_ne_bytes(v[at..at + 8].try_into().unwrap());
                let len = u32::from_ne_bytes(v[at + 12..at + 16].try_into().unwrap());
                s += &format!(" v{k}: slot {i} seq {seqw:#x} len {len};");
            }
        }
        let c = &v[CONTROL_OFFSET as usize..];
        let w = |o: usize| u64::from_ne_bytes(c[o..o + 8].try_into().unwrap());
        s += &format!(" v{k} tail {:#x} head {:#x};", w(0), w(128));
    }
    s
}

/// An `interval` queue keeps its durable state in the image at the end of
/// its file, which only its syncs write, page ranges copied from the live
/// mapping (see `durable::image`). The image at a crash after event `t`:
/// every image write of the syncs logged up to `t`, in order; with `torn`,
/// event `t` is a sync that was writing at the crash: only some of the
/// 512-byte sectors of its writes (chosen by `seed`). The live slots and watermark are cleared: after a crash they
/// are whatever the kernel wrote back, never read (a recovery that read
/// them would lose records and bring back consumed ones).
fn to_image(file: &mut [u8], log: &[Event], t: usize, torn: bool, seed: u64) {
    to_image_with(file, log, 0, seed, |i| (i <= t).then_some(torn && i == t));
}

/// [`to_image`] for a queue of `leases` lease entries, whose sync logged at
/// copy `i` has its image writes landed when `landed(i)` says so: all of
/// them (`Some(false)`), some of their sectors (`Some(true)`), or none.
fn to_image_with(file: &mut [u8], log: &[Event], leases: u64, seed: u64, landed: impl Fn(usize) -> Option<bool>) {
    use crate::file::layout::{Mark, image_offset, stride_for};
    let image = image_offset(CAPACITY, RECORD, leases).unwrap() as usize;
    file[image..].fill(0); // as created
    // A mapping offset's byte in a copy (which leaves out the process table).
    let at = |off: u64| if off < TABLE_OFFSET { off as usize } else { (off - DATA_OFFSET + TABLE_OFFSET) as usize };
    let mut x = seed;
    for (i, e) in log.iter().enumerate() {
        let Event::Copy { bytes, writes, .. } = e else { continue };
        let Some(partly) = landed(i) else { continue };
        for &(from, len, to) in writes {
            for s in (0..len).step_by(SECTOR) {
                x = splitmix64(x);
                if partly && x % 2 == 0 {
                    continue;
                }
                let (src, dst) = (at(from + s), (to + s) as usize);
                file[dst..dst + SECTOR].copy_from_slice(&bytes[src..src + SECTOR]);
            }
        }
    }
    let slots = (CAPACITY * stride_for(RECORD, true)) as usize;
    let marks = CONTROL_OFFSET as usize + std::mem::offset_of!(Control, marks);
    let data = DATA_OFFSET as usize;
    file[data..data + slots].fill(0);
    file[marks..marks + std::mem::size_of::<[Mark; 2]>()].fill(0);
}

/// Bytes of a copy of a file of `file_len` bytes.
fn copy_len(file_len: usize) -> usize {
    TABLE_OFFSET as usize + (file_len - DATA_OFFSET as usize)
}

/// The syncs a run logged.
fn synced(run: &Logged) -> usize {
    run.log.iter().filter(|e| matches!(e, Event::Copy { synced: true, .. })).count()
}

fn images_per_run() -> usize {
    env_num("TVMQ_POWER_LOSS_IMAGES", 700)
}

/// An `always` queue (its syncs write its image, half the crash images
/// taken while one is writing), and one made as earlier versions made them
/// (no image: its syncs `msync` the queue file in place).
fn always_keeps_every_acknowledged_push(image: bool) {
    let dir = DiskDir::new(if image { "always" } else { "always-in-place" });
    let logged = run(Durability::Always, image, &dir.0, 1);
    let (log, syncs) = (&logged.log, synced(&logged));
    let (kept, again) = check_images(&logged, images_per_run(), 7);
    eprintln!(
        "always (image: {image}): {} events, {syncs} syncs, {} images, {kept} records kept, {again} delivered again",
        log.len(),
        images_per_run()
    );
}

#[test]
fn power_loss_images_of_an_always_queue_keep_every_acknowledged_push() {
    always_keeps_every_acknowledged_push(true);
}

#[test]
fn power_loss_images_of_an_always_queue_synced_in_place_keep_every_acknowledged_push() {
    always_keeps_every_acknowledged_push(false);
}

#[test]
fn power_loss_images_of_an_interval_queue_lose_only_the_window() {
    // The run must span many syncs, which the images need. Under load the
    // flusher runs less often (19 and 20 seen with the two cores busy with
    // parallel builds, 6 once at load 6.6): a run with too few is run again
    // in a fresh directory, up to three times.
    let mut attempt = 0;
    let (logged, syncs) = loop {
        attempt += 1;
        let dir = DiskDir::new(&format!("interval-{attempt}"));
        let logged = run(Durability::Interval(1), true, &dir.0, 2);
        let syncs = synced(&logged);
        if syncs >= 8 || attempt == 3 {
            break (logged, syncs);
        }
        eprintln!("interval: the flusher synced {syncs} times in run {attempt}: running again");
    };
    assert!(syncs >= 8, "the flusher synced ({syncs}) in each of {attempt} runs");
    let (kept, again) = check_images(&logged, images_per_run(), 11);
    let log = &logged.log;
    eprintln!(
        "interval: {} events, {syncs} syncs, {} images, {kept} records kept, {again} delivered again",
        log.len(),
        images_per_run()
    );
}

/// Leases in flight at most in the lease runs: a small table, reused often.
const LEASES: u64 = 16;

/// A run of producers and leasing consumers on an `always` queue with
/// leases, logged as [`run`] logs: consumers acknowledge most deliveries,
/// release some, and let some leases run out (a lease of 1 ms, never
/// acknowledged), until every record is acknowledged.
fn run_leases(policy: Durability, image: bool, dir: &Path, seed: u64) -> Logged {
    let mut spec = Spec::new(CAPACITY, RECORD);
    spec.durability = Some(policy);
    spec.leases = Some(crate::spec::LeaseSpec { max_leases: LEASES, ..Default::default() });
    create(dir, &spec, image);
    let path = queue_path(dir, 1);
    let log = Arc::new(Mutex::new(Vec::new()));
    let file_len = std::fs::metadata(&path).unwrap().len() as usize;
    let hook_log = log.clone();
    // `interval`: the image's snapshot and the table's persisting are apart
    // by the time a system call takes (here 200 us before each copy), during
    // which consumers lease and acknowledge: a sync whose parts came in the
    // wrong order loses records in that gap.
    let gap = image;
    let hook: SyncHook = Arc::new(move |event| {
        if gap && !matches!(event, SyncEvent::Begin) {
            std::thread::sleep(Duration::from_micros(200));
        }
        log_sync_event(&mut hook_log.lock().unwrap(), event, file_len);
    });
    hooks().lock().unwrap().push((path.clone(), hook));
    let q = Arc::new(Queue::open(dir, 1).unwrap());
    // The queue's mapping (an `interval` queue's live part in tmpfs), as
    // created: the first entry of the log.
    let map = q.shared_map();
    {
        let bytes = Arc::new(copy(map.base(), map.len(), file_len));
        let first = Event::Copy { synced: true, control: true, bytes, writes: Vec::new(), table: false };
        log.lock().unwrap().insert(0, first);
    }
    let stop = Arc::new(AtomicBool::new(false));
    const PRODUCERS: u32 = 2;
    const PER_PRODUCER: u32 = 300;
    const CONSUMERS: u8 = 3;
    let acked = Arc::new(AtomicU64::new(0));
    let total = u64::from(PRODUCERS * PER_PRODUCER);
    std::thread::scope(|s| {
        {
            let (log, stop, map) = (log.clone(), stop.clone(), map.clone());
            s.spawn(move || {
                let mut x = seed;
                while !stop.load(Ordering::Relaxed) {
                    x = splitmix64(x);
                    std::thread::sleep(Duration::from_micros(20 + x % 300));
                    let mut l = log.lock().unwrap();
                    let bytes = Arc::new(copy(map.base(), map.len(), file_len));
                    l.push(Event::Copy { synced: false, control: false, bytes, writes: Vec::new(), table: false });
                }
            });
        }
        for p in 0..PRODUCERS {
            let (q, log) = (q.clone(), log.clone());
            let pace = matches!(policy, Durability::Interval(_));
            s.spawn(move || {
                let mut seq = p * PER_PRODUCER;
                while seq < (p + 1) * PER_PRODUCER {
                    log.lock().unwrap().push(Event::PushStart(seq));
                    match q.push(&record(seq)) {
                        Ok(()) => {
                            log.lock().unwrap().push(Event::Acked(seq));
                            seq += 1;
                            if pace && seq % 2 == 0 {
                                // Spread an `interval` run over many flushes.
                                std::thread::sleep(Duration::from_micros(100));
                            }
                        }
                        Err(e) if e.code() == DATA_SPC_FULL => std::thread::yield_now(),
                        Err(e) => panic!("push: {e}"),
                    }
                }
            });
        }
        for c in 0..CONSUMERS {
            let (q, log, acked) = (q.clone(), log.clone(), acked.clone());
            s.spawn(move || {
                let mut out = vec![0u8; RECORD as usize];
                let mut x = seed ^ (u64::from(c) << 32);
                while acked.load(Ordering::SeqCst) < total {
                    x = splitmix64(x);
                    // One delivery in ten is left to run out.
                    let expire = x % 10 == 0;
                    let time = if expire { Duration::from_millis(1) } else { Duration::ZERO };
                    log.lock().unwrap().push(Event::LeaseStart(c));
                    let (n, lease) = match q.pop_lease(&mut out, Wait::NoWait, time) {
                        Ok(got) => got,
                        Err(e) if e.code() == NO_DATA_FOUND || e.code() == LEASE_LIMIT => {
                            std::thread::sleep(Duration::from_micros(200));
                            continue;
                        }
                        Err(e) => panic!("pop_lease: {e}"),
                    };
                    let seq = seq_of(&out);
                    assert_eq!(parse(&out[..n]), Some(seq), "a record that was pushed");
                    log.lock().unwrap().push(Event::Leased(c, seq, lease.deliveries()));
                    if expire {
                        continue;
                    }
                    if x % 10 == 1 {
                        q.release(&lease, Duration::ZERO).unwrap();
                        continue;
                    }
                    // Acknowledged, or (one in twenty) rejected: dropped, as
                    // the queue has no dead-letter queue. Either ends it for good.
                    log.lock().unwrap().push(Event::AckStart(seq));
                    if (x >> 8) % 20 == 0 {
                        q.reject(&lease).unwrap();
                    } else {
                        q.ack(&lease).unwrap();
                    }
                    acked.fetch_add(1, Ordering::SeqCst);
                    log.lock().unwrap().push(Event::AckDone(seq));
                }
            });
        }
        while acked.load(Ordering::SeqCst) < total {
            std::thread::sleep(Duration::from_millis(5));
        }
        stop.store(true, Ordering::Relaxed);
    });
    drop(q);
    hooks().lock().unwrap().retain(|(p, _)| p != &path);
    Logged { policy, image, log: take_log(log), file_len }
}

/// What the log says about each record of a lease run, as event indices.
#[derive(Default, Clone)]
struct LeaseLife {
    push_start: Option<usize>,
    acked: Option<usize>,
    /// Its deliveries: (event index of the call's start, of its return, delivery count).
    leased: Vec<(usize, usize, u32)>,
    ack_start: Option<usize>,
    ack_done: Option<usize>,
}

/// Builds crash images of a lease run and checks what opening each gives:
/// every record delivered again from the image (with `pop_lease`) was
/// pushed, is whole, comes once; no record whose acknowledgement returned
/// before the durable point comes back; every push acknowledged before it
/// whose acknowledgement of delivery had not begun at the crash comes back.
/// Its delivery count: at least one more than that of its last delivery
/// that returned before the durable point (`interval`: the deliveries of
/// the window may be forgotten), at most one more than that of its last
/// delivery whose call began before the crash (deliveries under way may
/// have raised it). The durable point: `always`, the crash; `interval`, the
/// beginning of the last sync whose image writes all landed.
/// Returns (records delivered from the images, of which from the lease table).
fn check_lease_images(run: &Logged, images: usize, seed: u64) -> (u64, u64) {
    let Logged { policy, image, ref log, file_len } = *run;
    let mut lives: std::collections::HashMap<u32, LeaseLife> = Default::default();
    let mut lease_start: [usize; 256] = [0; 256];
    for (i, e) in log.iter().enumerate() {
        match e {
            Event::LeaseStart(c) => lease_start[*c as usize] = i,
            Event::PushStart(r) => lives.entry(*r).or_default().push_start = Some(i),
            Event::Acked(r) => lives.entry(*r).or_default().acked = Some(i),
            Event::Leased(c, r, d) => lives.entry(*r).or_default().leased.push((lease_start[*c as usize], i, *d)),
            Event::AckStart(r) => lives.entry(*r).or_default().ack_start = Some(i),
            Event::AckDone(r) => lives.entry(*r).or_default().ack_done = Some(i),
            _ => {}
        }
    }
    let interval = matches!(policy, Durability::Interval(_));
    let copies: Vec<usize> = (0..log.len()).filter(|&i| matches!(log[i], Event::Copy { .. })).collect();
    let returns: Vec<usize> =
        (0..log.len()).filter(|&i| matches!(log[i], Event::Acked(_) | Event::Leased(..) | Event::AckDone(_))).collect();
    // `interval`: each sync that writes the image, as (its copy, whose
    // bytes the image receives; the copy at which it persisted the lease
    // table, after which its image writes land).
    let image_syncs: Vec<(usize, usize)> = copies
        .iter()
        .copied()
        .filter(|&i| matches!(&log[i], Event::Copy { writes, .. } if !writes.is_empty()))
        .map(|i| {
            let e = copies.iter().copied().find(|&c| c > i && matches!(log[c], Event::Copy { table: true, .. }));
            // The table persisted by this sync, not a later one's (none: a
            // sync that skipped it, or did it first, whose writes land from
            // its copy on).
            let next = (i..log.len()).find(|&k| matches!(log[k], Event::SyncBegin));
            (i, e.filter(|&e| next.is_none_or(|n| e < n)).unwrap_or(i))
        })
        .collect();
    if interval {
        // Enough syncs for the images to span many (15 to 42 seen; fewer under load).
        assert!(image_syncs.len() >= 5, "the flusher synced ({} image syncs)", image_syncs.len());
    }
    let scratch = TempDir::new("durable", "lease-images");
    let image_path = queue_path(scratch.path(), 1);
    hooks().lock().unwrap().push((image_path.clone(), Arc::new(|_: &SyncEvent| {})));
    let (mut delivered, mut from_table) = (0u64, 0u64);
    let mut x = seed;
    for n in 0..images {
        x = splitmix64(x);
        let t = if (x >> 40) % 2 == 0 {
            copies[(x % copies.len() as u64) as usize]
        } else {
            let returned = &returns[(x % returns.len() as u64) as usize];
            copies.iter().copied().find(|&c| c > *returned).unwrap_or(*copies.last().unwrap())
        };
        // `interval`, in half the images: the crash comes while the next
        // sync's image writes are under way (after it persisted the table).
        let under_way =
            (image && (x >> 20) % 2 == 0).then(|| image_syncs.iter().copied().find(|&(_, e)| e >= t)).flatten();
        let t = under_way.map_or(t, |(_, e)| e);
        let (mut file, last_sync, grain, _) = crash_file(log, &copies, t, false, &mut x, file_len);
        let mut durable_point = t;
        if image {
            // The lease table lives in place: each page (or sector) as the
            // last sync that persisted it left it, or any later copy up to
            // the crash (the kernel writes pages back when it likes).
            let table_from = copies
                .iter()
                .copied()
                .filter(|&c| c <= t && matches!(log[c], Event::Copy { table: true, .. }))
                .max()
                .unwrap_or(copies[0]);
            let versions: Vec<usize> = copies.iter().copied().filter(|&c| c >= table_from && c <= t).collect();
            let from = crate::file::layout::lease_table_offset(CAPACITY, RECORD, true).unwrap() as usize;
            let len = crate::lease::table::table_bytes(LEASES, RECORD).unwrap() as usize;
            let in_copy = from - DATA_OFFSET as usize + TABLE_OFFSET as usize;
            for off in (0..len).step_by(grain) {
                x = splitmix64(x);
                let Event::Copy { bytes, .. } = &log[versions[(x % versions.len() as u64) as usize]] else {
                    unreachable!()
                };
                file[from + off..from + off + grain].copy_from_slice(&bytes[in_copy + off..in_copy + off + grain]);
            }
            x = splitmix64(x);
            let landed = |i: usize| {
                let &(_, e) = image_syncs.iter().find(|s| s.0 == i)?;
                if under_way.is_some_and(|u| u.0 == i) { Some(true) } else { (e <= t).then_some(false) }
            };
            to_image_with(&mut file, log, LEASES, x, landed);
            // (`always`: a call returns once its sync, writes and all, is
            // done: everything that returned before the crash is durable.)
            if interval {
                let complete = image_syncs.iter().rfind(|&&(i, e)| e <= t && under_way.is_none_or(|u| u.0 != i));
                durable_point = complete
                    .map_or(0, |&(i, _)| log[..i].iter().rposition(|e| matches!(e, Event::SyncBegin)).unwrap_or(0));
            }
        }
        let _ = std::fs::remove_file(&image_path);
        std::fs::write(&image_path, &file).unwrap();
        let q = Queue::open(scratch.path(), 1).unwrap_or_else(|e| panic!("image {n} (crash at event {t}): open: {e}"));
        let waiting = q.lease_stats().unwrap().waiting;
        from_table += waiting;
        let mut got: std::collections::HashMap<u32, u32> = Default::default();
        let mut out = vec![0u8; RECORD as usize];
        loop {
            match q.pop_lease(&mut out, Wait::NoWait, Duration::ZERO) {
                Ok((len, lease)) => {
                    let seq = seq_of(&out);
                    assert_eq!(parse(&out[..len]), Some(seq), "image {n}: a record never pushed, or torn");
                    let life = lives.get(&seq).cloned().unwrap_or_default();
                    assert!(life.push_start.is_some_and(|s| s < t), "image {n}: record {seq} pushed after the crash");
                    assert!(got.insert(seq, lease.deliveries()).is_none(), "image {n}: record {seq} delivered twice");
                    q.ack(&lease).unwrap();
                }
                Err(e) if e.code() == NO_DATA_FOUND => break,
                Err(e) => panic!("image {n}: pop_lease: {e}"),
            }
        }
        assert_eq!(q.lease_stats().unwrap().in_flight, 0);
        drop(q);
        delivered += got.len() as u64;
        let at = format!(
            "image {n} (crash at {t}, last sync {last_sync}, durable point {durable_point}, grain {grain}, \
             writes under way: {under_way:?})"
        );
        for (&seq, life) in &lives {
            let ack_began = life.ack_start.is_some_and(|a| a < t);
            if life.ack_done.is_some_and(|a| a < durable_point) {
                assert!(!got.contains_key(&seq), "{at}: record {seq}, acknowledged, delivered again");
            }
            if life.acked.is_some_and(|a| a < durable_point) && !ack_began {
                let Some(&d) = got.get(&seq) else {
                    panic!("{at}: acknowledged push {seq}, never acknowledged as consumed, lost")
                };
                // The lowest: one more than the count of its last delivery
                // that returned before the durable point (`always`: the
                // crash), whose raised count was on the disk then.
                let last_before = |until: usize| life.leased.iter().filter(|l| l.1 < until).map(|l| l.2).max();
                let last = last_before(t).unwrap_or(0);
                let lowest = if interval { last_before(durable_point).unwrap_or(0) + 1 } else { last + 1 };
                // The highest: one more than the count of its last delivery
                // whose call began before the crash. A count is raised only
                // by a delivery, inside its call, and a copy at or before
                // the crash holds only what calls begun before it did. The
                // log says when a call returned only once its thread logs
                // it, and a thread can be held up there (by the scheduler,
                // or waiting for the log's lock while a copy is taken) for
                // longer than a lease of 1 ms: another consumer may then
                // take the record again, its count raised once more, and
                // both deliveries be on the disk at the crash before either
                // is logged. (So the last count logged plus two, which
                // allowed one such delivery, is not a bound.)
                let begun = life.leased.iter().filter(|l| l.0 < t).map(|l| l.2).max().unwrap_or(0);
                assert!(
                    (lowest..=begun + 1).contains(&d),
                    "{at}: record {seq} delivered with count {d} after deliveries up to {last} ({:?} before the \
                     durable point, {begun} begun before the crash; deliveries as (call, return, count): {:?})",
                    last_before(durable_point),
                    life.leased
                );
            }
        }
    }
    hooks().lock().unwrap().retain(|(p, _)| p != &image_path);
    (delivered, from_table)
}

/// An `always` queue with leases (synced in place: it has no image).
#[test]
fn power_loss_images_of_an_always_queue_with_leases_keep_every_lease_and_acknowledgement() {
    let image = false;
    let dir = DiskDir::new("always-leases");
    let logged = run_leases(Durability::Always, image, &dir.0, 3);
    let (log, syncs) = (&logged.log, synced(&logged));
    let images = images_per_run() / 2;
    let (delivered, from_table) = check_lease_images(&logged, images, 13);
    assert!(from_table > 0, "some images held records in the lease table");
    eprintln!(
        "always with leases: {} events, {syncs} syncs, {images} images, {delivered} records delivered again \
         ({from_table} from the lease table)",
        log.len()
    );
}

/// The same over an `interval` queue with leases (its lease table synced in
/// place before each sync writes the slots into the image, from a snapshot
/// taken before the table was synced), with images also taken while a
/// sync's image writes are under way.
#[test]
fn power_loss_images_of_an_interval_queue_with_leases_lose_only_the_window() {
    let dir = DiskDir::new("interval-leases");
    let logged = run_leases(Durability::Interval(1), true, &dir.0, 5);
    let (log, syncs) = (&logged.log, synced(&logged));
    let images = images_per_run() / 2;
    let (delivered, from_table) = check_lease_images(&logged, images, 17);
    assert!(from_table > 0, "some images held records in the lease table");
    eprintln!(
        "interval with leases: {} events, {syncs} syncs, {images} images, {delivered} records delivered again \
         ({from_table} from the lease table)",
        log.len()
    );
}
