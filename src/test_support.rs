//! Helpers for tests, shared by the library's unit tests and (through
//! `tests/common`) the integration tests, so that there is one copy of each:
//! - directories: [`TempDir`] under /dev/shm, [`DiskDir`] on a disk;
//! - numbers: [`splitmix64`], [`fnv32`], [`Rng`], [`env_num`];
//! - checked test records: [`record`];
//! - child processes: [`child_test`], [`child_env`], and [`Children`], which
//!   starts them, watches them, kills them at random (the kill loop of the
//!   kill tests) and kills what is left when the test ends;
//! - files that a test and its children map: [`SharedArray`], and on it the
//!   [`Ledger`] of the kill tests (what was acknowledged, what was popped,
//!   what a killed consumer held);
//! - outside tools: [`have_tool`], [`promtool_complaints`].
//!
//! Only std and libc here: the file is compiled into the library's unit
//! tests and into the test binaries of the workspace's crates.
#![allow(dead_code)]

use std::collections::{HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::ops::Range;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

// ---------------------------------------------------------------- outside tools

/// Is `tool` a command on the PATH?
pub fn have_tool(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// What `promtool check metrics` says of the exposition `text` ("" when it
/// finds nothing to fix), or None without promtool (Debian: prometheus).
pub fn promtool_complaints(text: &str) -> Option<String> {
    use std::io::Write;
    let mut p = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .ok()?;
    p.stdin.take()?.write_all(text.as_bytes()).ok()?;
    let out = p.wait_with_output().ok()?;
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    Some(if out.status.success() { said } else { format!("promtool failed: {said}") })
}

// ---------------------------------------------------------------- directories

/// `<root>/tvmq-test-<suite>-<pid>-<tag>-<n>`, fresh and empty.
fn fresh_dir(root: &Path, suite: &str, tag: &str) -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let p = root.join(format!("tvmq-test-{suite}-{}-{tag}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&p);
    std::fs::create_dir_all(&p).expect("create test dir");
    p
}

/// A fresh directory under /dev/shm for one test's queues, removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    /// `/dev/shm/tvmq-test-<suite>-<pid>-<tag>-<n>`, empty.
    pub fn new(suite: &str, tag: &str) -> TempDir {
        TempDir(fresh_dir(Path::new("/dev/shm"), suite, tag))
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        remove_live_parts(&self.0);
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A fresh directory on the project's disk (under `target/`: durable queues
/// refuse tmpfs), removed on drop.
pub struct DiskDir(pub PathBuf);

impl DiskDir {
    /// `target/tvmq-test-durable-<pid>-<tag>-<n>`, empty.
    pub fn new(tag: &str) -> DiskDir {
        DiskDir(fresh_dir(&Path::new(env!("CARGO_MANIFEST_DIR")).join("target"), "durable", tag))
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for DiskDir {
    fn drop(&mut self) {
        remove_live_parts(&self.0);
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Removes the live parts in tmpfs of the `interval` queues whose files are
/// under `dir` (their names begin `.interval-<dev>-<inode>-` of the queue
/// file, in `/dev/shm/tvmq-<uid>`: see the library's `file::live`), which a
/// test that does not drop its queues would leave behind.
pub fn remove_live_parts(dir: &Path) {
    use std::os::unix::fs::MetadataExt;
    let mut prefixes = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let Ok(m) = e.metadata() else { continue };
            if m.is_dir() {
                todo.push(e.path());
            } else if m.is_file() {
                prefixes.push(format!(".interval-{:x}-{}-", m.dev(), m.ino()));
            }
        }
    }
    // SAFETY: geteuid has no preconditions.
    let live = PathBuf::from(format!("/dev/shm/tvmq-{}", unsafe { libc::geteuid() }));
    for e in std::fs::read_dir(&live).into_iter().flatten().flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        if prefixes.iter().any(|p| name.starts_with(p.as_str())) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

// ---------------------------------------------------------------- numbers

/// SplitMix64's output function: a well-mixed 64-bit value of `x`.
pub fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// FNV-1a (32 bits) of the concatenation of `parts`.
pub fn fnv32(parts: &[&[u8]]) -> u32 {
    let mut h = 0x811c_9dc5u32;
    for part in parts {
        for &b in *part {
            h = (h ^ u32::from(b)).wrapping_mul(0x0100_0193);
        }
    }
    h
}

/// A small deterministic generator (xorshift64*): a test's run is
/// reproducible up to scheduling.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(splitmix64(seed) | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below((hi - lo + 1) as u64) as usize
    }

    pub fn one_in(&mut self, n: u64) -> bool {
        self.below(n) == 0
    }

    /// Uniform in `lo..=hi` ms.
    pub fn millis(&mut self, lo: usize, hi: usize) -> Duration {
        Duration::from_millis(self.range(lo, hi) as u64)
    }
}

/// The number in environment variable `key` (a knob that sizes a test run),
/// else `default`.
pub fn env_num<T: std::str::FromStr>(key: &str, default: T) -> T {
    std::env::var(key).ok().and_then(|v| v.trim().parse().ok()).unwrap_or(default)
}

/// Writes a small file atomically (tmp + rename), so readers never see half.
pub fn write_atomic(path: &Path, data: &[u8]) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, data).expect("write report");
    std::fs::rename(&tmp, path).expect("rename report");
}

// ---------------------------------------------------------------- records

/// Checked test records, which tell an intact record of a known id from a
/// torn, foreign or misplaced one: `[stream u32][seq u64][checksum u32]`
/// then a payload of any length derived from the id `(stream, seq)`; the
/// checksum is [`fnv32`] of the first 12 bytes and the payload. A test picks
/// what a stream is (a producer, a tag) and how long each record is.
pub mod record {
    use super::{fnv32, splitmix64};

    /// Bytes of the header, the shortest record.
    pub const HDR: usize = 16;

    /// The payload bytes of record `(stream, seq)`.
    fn payload(stream: u32, seq: u64) -> impl Iterator<Item = u8> {
        let mut x = splitmix64(splitmix64(u64::from(stream)) ^ seq) | 1;
        std::iter::repeat_with(move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
    }

    /// Writes record `(stream, seq)` as all of `out` (at least [`HDR`] bytes).
    pub fn encode(stream: u32, seq: u64, out: &mut [u8]) {
        assert!(out.len() >= HDR, "a record of {} bytes", out.len());
        out[0..4].copy_from_slice(&stream.to_le_bytes());
        out[4..12].copy_from_slice(&seq.to_le_bytes());
        for (b, p) in out[HDR..].iter_mut().zip(payload(stream, seq)) {
            *b = p;
        }
        let ck = fnv32(&[&out[..12], &out[HDR..]]);
        out[12..16].copy_from_slice(&ck.to_le_bytes());
    }

    /// Record `(stream, seq)` of `len` bytes.
    pub fn new(stream: u32, seq: u64, len: usize) -> Vec<u8> {
        let mut r = vec![0; len];
        encode(stream, seq, &mut r);
        r
    }

    /// The id a record's header names, unchecked (to find its length, say).
    pub fn id(rec: &[u8]) -> Option<(u32, u64)> {
        let stream = u32::from_le_bytes(rec.get(0..4)?.try_into().ok()?);
        let seq = u64::from_le_bytes(rec.get(4..12)?.try_into().ok()?);
        Some((stream, seq))
    }

    /// The id of `rec` (all of it one record) if it is intact, else why not.
    pub fn decode(rec: &[u8]) -> Result<(u32, u64), String> {
        let Some((stream, seq)) = id(rec).filter(|_| rec.len() >= HDR) else {
            return Err(format!("{} bytes: shorter than a record header", rec.len()));
        };
        let ck = u32::from_le_bytes(rec[12..16].try_into().unwrap());
        if ck != fnv32(&[&rec[..12], &rec[HDR..]]) {
            return Err(format!("record ({stream:#x}, {seq}) of {} bytes: checksum mismatch (torn)", rec.len()));
        }
        if !rec[HDR..].iter().copied().eq(payload(stream, seq).take(rec.len() - HDR)) {
            return Err(format!("record ({stream:#x}, {seq}) of {} bytes: payload differs", rec.len()));
        }
        Ok((stream, seq))
    }
}

// ---------------------------------------------------------------- child processes

/// A command running test `name` (its full path in this test binary) as a
/// child process. Child entry points are `#[ignore]`d tests, so that a
/// normal run lists them as ignored instead of passing them without doing
/// anything; `--ignored --exact` selects the one asked for. A child test
/// reads its parameters with [`child_env`] and fails when run on its own.
pub fn child_test(name: &str) -> Command {
    let mut cmd = Command::new(std::env::current_exe().expect("the test binary"));
    cmd.args(["--ignored", "--exact", name, "--nocapture", "--test-threads=1"]);
    cmd
}

/// Runs child test `name` (see [`child_test`]) with `$TVMDBD` = `dir` (the
/// C layer's queue directory) and `TVMQ_TEST_CHILD` set; panics with its
/// output if it fails.
pub fn run_child_in(name: &str, dir: &Path) {
    let out = child_test(name).env("TVMDBD", dir).env("TVMQ_TEST_CHILD", "1").output().expect("run the child");
    assert!(
        out.status.success(),
        "the child {name} failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A child test's parameter `key`; panics (the test fails) when the test
/// was not started by its parent test through [`child_test`].
#[track_caller]
pub fn child_env(key: &str) -> String {
    std::env::var(key)
        .unwrap_or_else(|_| panic!("{key} is not set: this test is a child process, started by its parent test"))
}

/// The threads' stacks of process `pid`, as gdb shows them (empty without gdb).
pub fn stacks(pid: u32) -> String {
    Command::new("gdb")
        .args(["-p", &pid.to_string(), "-batch", "-ex", "thread apply all bt"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

/// How long the kill loop of a kill test goes on: until `kills` kills, or
/// `seconds`, whichever comes first.
pub struct KillPlan {
    pub kills: usize,
    pub seconds: u64,
}

impl KillPlan {
    /// `kills` and `seconds`, unless the environment variables `<prefix>S`
    /// and `<prefix>_SECONDS` say otherwise.
    pub fn from_env(prefix: &str, kills: usize, seconds: u64) -> KillPlan {
        KillPlan {
            kills: env_num(&format!("{prefix}S"), kills),
            seconds: env_num(&format!("{prefix}_SECONDS"), seconds),
        }
    }
}

/// A child process of a test, its output in a log file.
pub struct Kid {
    pub name: String,
    /// Its number: [`Children`] counts every process it starts, from 0.
    pub me: u32,
    pub child: Child,
    pub log: PathBuf,
}

impl Kid {
    /// What the child printed so far.
    pub fn output(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// The child processes of a test, one in each of a fixed number of slots,
/// killed (by their own pid) when dropped, so that a failing test leaves none
/// behind. `start(slot, me)` gives the name and command of the process
/// number `me` (counting every process started, from 0) for `slot`; its
/// output goes to `<logs>/child-<me>.log`.
pub struct Children<'a> {
    pub kids: Vec<Kid>,
    /// How many processes were started.
    pub started: u32,
    max: u32,
    logs: PathBuf,
    start: Box<dyn FnMut(usize, u32) -> (String, Command) + 'a>,
}

impl<'a> Children<'a> {
    /// Starts `slots` children; never more than `max` processes in all.
    pub fn start(
        slots: usize,
        max: u32,
        logs: &Path,
        start: impl FnMut(usize, u32) -> (String, Command) + 'a,
    ) -> Children<'a> {
        let mut c = Children { kids: Vec::new(), started: 0, max, logs: logs.to_path_buf(), start: Box::new(start) };
        for slot in 0..slots {
            let kid = c.spawn(slot);
            c.kids.push(kid);
        }
        c
    }

    fn spawn(&mut self, slot: usize) -> Kid {
        let me = self.started;
        assert!(me < self.max, "too many processes for the shared files");
        self.started += 1;
        let (name, mut cmd) = (self.start)(slot, me);
        let log = self.logs.join(format!("child-{me}.log"));
        let out = File::create(&log).expect("create a child's log");
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("the child's log"))
            .stderr(out)
            .spawn()
            .expect("spawn child");
        Kid { name, me, child, log }
    }

    /// Panics with its output if a child has failed or, when they should
    /// all be `running`, has exited.
    pub fn check(&mut self, running: bool) {
        for k in &mut self.kids {
            if let Some(status) = k.child.try_wait().expect("try_wait") {
                assert!(
                    status.success() && !running,
                    "{} exited ({status}){}; its output:\n{}",
                    k.name,
                    if running { " before the end" } else { "" },
                    k.output()
                );
            }
        }
    }

    pub fn all_exited(&mut self) -> bool {
        self.kids.iter_mut().all(|k| k.child.try_wait().expect("try_wait").is_some())
    }

    /// Waits for every child to exit, each until `deadline()` (asked when
    /// its turn comes), which `must_succeed` or may exit as it likes. A
    /// child still running then fails the test with its output, its stacks
    /// and `what()`.
    pub fn wait_all(&mut self, deadline: impl Fn() -> Instant, must_succeed: bool, what: impl Fn() -> String) {
        for k in &mut self.kids {
            let deadline = deadline();
            loop {
                if let Some(status) = k.child.try_wait().expect("try_wait") {
                    assert!(
                        !must_succeed || status.success(),
                        "{} failed ({status}); its output:\n{}",
                        k.name,
                        k.output()
                    );
                    break;
                }
                if Instant::now() > deadline {
                    let pid = k.child.id();
                    panic!(
                        "{} (pid {pid}) did not stop\n{}\nits output:\n{}\n{}",
                        k.name,
                        what(),
                        k.output(),
                        stacks(pid)
                    );
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    }

    /// The kill loop of the kill tests: every `pause` ms (a random number
    /// in that range) a random child is killed with SIGKILL and replaced at
    /// once; children that exited by themselves meanwhile are replaced too,
    /// without counting as kills. Until the `plan`'s kills or time, whichever
    /// comes first. Returns the processes killed, as `(slot, me)`.
    pub fn kill_randomly(&mut self, rng: &mut Rng, pause: (usize, usize), plan: &KillPlan) -> Vec<(usize, u32)> {
        let started = Instant::now();
        let mut killed = Vec::new();
        while killed.len() < plan.kills && started.elapsed() < Duration::from_secs(plan.seconds) {
            std::thread::sleep(rng.millis(pause.0, pause.1));
            for slot in 0..self.kids.len() {
                if let Ok(Some(_)) = self.kids[slot].child.try_wait() {
                    self.kids[slot] = self.spawn(slot);
                }
            }
            let victim = rng.below(self.kids.len() as u64) as usize;
            let k = &mut self.kids[victim];
            let _ = k.child.kill();
            let _ = k.child.wait();
            killed.push((victim, k.me));
            self.kids[victim] = self.spawn(victim);
        }
        killed
    }

    /// SIGKILL to every child at once, then reaped.
    pub fn kill_all(&mut self) {
        for k in &mut self.kids {
            let _ = k.child.kill();
        }
        for k in &mut self.kids {
            let _ = k.child.wait();
        }
    }
}

impl Drop for Children<'_> {
    fn drop(&mut self) {
        for k in &mut self.kids {
            if k.child.try_wait().ok().flatten().is_none() {
                let _ = k.child.kill();
                let _ = k.child.wait();
            }
        }
    }
}

// ---------------------------------------------------------------- shared files

/// A type that may live in a file several processes map: any bytes are a
/// valid value, and it is used through shared references only (atomics).
///
/// # Safety
/// Implement it only for types of atomics (and arrays and `repr(C)` structs
/// of them), whose every bit pattern is valid.
pub unsafe trait Shareable: Sync {}

// SAFETY: atomics accept any bit pattern and are used through `&`.
unsafe impl Shareable for AtomicU8 {}
// SAFETY: as above.
unsafe impl Shareable for AtomicU32 {}
// SAFETY: as above.
unsafe impl Shareable for AtomicU64 {}

/// A file mapped by a test and its child processes, seen as an array of `T`.
pub struct SharedArray<T: Shareable> {
    base: *mut T,
    len: usize,
}

// SAFETY: the mapping is shared memory of `Shareable` (Sync) values, used
// through shared references only; it lives until the array is dropped.
unsafe impl<T: Shareable> Send for SharedArray<T> {}
// SAFETY: as above.
unsafe impl<T: Shareable> Sync for SharedArray<T> {}

impl<T: Shareable> SharedArray<T> {
    /// The file at `path` (created, or extended, to `len` values of `T`)
    /// mapped shared; with `populate`, its pages faulted in now (so that
    /// touching them later does not grow the resident memory). A file
    /// extended here is sparse: only what is written takes room.
    pub fn map(path: &Path, len: usize, populate: bool) -> SharedArray<T> {
        let bytes = len * size_of::<T>();
        assert!(bytes > 0, "an empty shared file");
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .expect("open shared file");
        if f.metadata().expect("stat shared file").len() < bytes as u64 {
            f.set_len(bytes as u64).expect("size shared file");
        }
        let flags = libc::MAP_SHARED | if populate { libc::MAP_POPULATE } else { 0 };
        // SAFETY: a new mapping of a file of at least `bytes` bytes, which
        // this test and its children only use through `Shareable` values.
        let base = unsafe {
            libc::mmap(std::ptr::null_mut(), bytes, libc::PROT_READ | libc::PROT_WRITE, flags, f.as_raw_fd(), 0)
        };
        assert!(base != libc::MAP_FAILED, "map shared file: {}", std::io::Error::last_os_error());
        SharedArray { base: base.cast(), len }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn get(&self, i: usize) -> &T {
        assert!(i < self.len, "{i} is beyond the {} values of a shared file", self.len);
        // SAFETY: in bounds of the mapping, page aligned and so aligned for
        // T; any bytes are a valid T (`Shareable`), used through `&` only.
        unsafe { &*self.base.add(i) }
    }
}

impl<T: Shareable> Drop for SharedArray<T> {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, no longer referenced (every
        // reference borrows self).
        unsafe { libc::munmap(self.base.cast(), self.len * size_of::<T>()) };
    }
}

// ---------------------------------------------------------------- the ledger

/// Errors no caller should ever see, as a process counts them in a shared
/// file: how many, and the last one's code.
#[repr(C)]
pub struct Unexpected {
    count: AtomicU64,
    last: AtomicU64,
}

// SAFETY: repr(C) of atomics only.
unsafe impl Shareable for Unexpected {}

impl Unexpected {
    pub fn note(&self, code: u32) {
        self.count.fetch_add(1, Ordering::SeqCst);
        self.last.store(u64::from(code), Ordering::SeqCst);
    }

    /// How many; if any, a line in `problems` saying so of `who`.
    pub fn report(&self, who: &str, problems: &mut Vec<String>) -> u64 {
        let n = self.count.load(Ordering::SeqCst);
        if n > 0 {
            problems.push(format!("{who}: {n} unexpected error(s), last code {}", self.last.load(Ordering::SeqCst)));
        }
        n
    }
}

/// Bytes of a process's in-flight buffer in the [`Ledger`].
pub const INFLIGHT: usize = 88;

/// Per process, in the [`Ledger`].
#[repr(C)]
pub struct ProcLedger {
    /// A producer: how many of its records were acknowledged (numbered
    /// 0..acked, pushed in order).
    pub acked: AtomicU64,
    /// Longest single call the test measured, in ns.
    pub max_call_ns: AtomicU64,
    /// Records whose content was wrong (torn or foreign).
    pub torn: AtomicU64,
    pub unexpected: Unexpected,
    /// A consumer's in-flight buffer: it pops straight into it and counts
    /// the record after, so that if it is killed in between, the record is
    /// found here.
    inflight: [AtomicU8; INFLIGHT],
}

// SAFETY: repr(C) of atomics only.
unsafe impl Shareable for ProcLedger {}

impl ProcLedger {
    pub fn note_call(&self, started: Instant) {
        self.max_call_ns.fetch_max(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
    }

    /// The first `len` bytes of the in-flight buffer, to pop into.
    ///
    /// # Safety
    /// Only the process this entry belongs to may call it, once: others read
    /// the buffer only after that process is dead.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn inflight_mut(&self, len: usize) -> &mut [u8] {
        assert!(len <= INFLIGHT);
        // SAFETY: the buffer's bytes, written by this process alone (the
        // caller's promise); atomics of u8 have u8's layout.
        unsafe { std::slice::from_raw_parts_mut(self.inflight.as_ptr() as *mut u8, len) }
    }

    /// What the in-flight buffer holds.
    pub fn inflight(&self) -> Vec<u8> {
        self.inflight.iter().map(|b| b.load(Ordering::SeqCst)).collect()
    }
}

/// The ledger of a kill test, in two files of its directory that the test
/// and its children map: per process (by number), a [`ProcLedger`]; per
/// record `(producer, seq)`, a byte counting its deliveries. A producer
/// publishes how many of its records were acknowledged; a consumer pops
/// into its in-flight buffer and then counts the record. Whatever instant
/// a kill hits, [`Ledger::audit`] can then tell each acknowledged record
/// delivered once, lost, or delivered twice.
pub struct Ledger {
    procs: SharedArray<ProcLedger>,
    seen: SharedArray<AtomicU8>,
    max_seq: u64,
}

/// What [`Ledger::audit`] found.
#[derive(Debug, Default)]
pub struct Audit {
    /// Records acknowledged, all producers.
    pub acked: u64,
    /// Deliveries counted.
    pub delivered: u64,
    /// Acknowledged records found only in a killed consumer's hands.
    pub in_hands: u64,
    pub lost: u64,
    pub twice: u64,
    /// Records delivered that were never pushed.
    pub unpushed: u64,
    /// One line per record lost, delivered twice or never pushed.
    pub problems: Vec<String>,
}

impl Ledger {
    /// The ledger in `dir` (files `procs` and `seen`, created if missing) of
    /// processes numbered below `max_procs`, each pushing records numbered
    /// below `max_seq`.
    pub fn open(dir: &Path, max_procs: u32, max_seq: u64) -> Ledger {
        Ledger {
            procs: SharedArray::map(&dir.join("procs"), max_procs as usize, false),
            seen: SharedArray::map(&dir.join("seen"), (u64::from(max_procs) * max_seq) as usize, false),
            max_seq,
        }
    }

    pub fn proc(&self, me: u32) -> &ProcLedger {
        self.procs.get(me as usize)
    }

    /// Deliveries of record `seq` of producer `p`.
    pub fn seen(&self, p: u32, seq: u64) -> &AtomicU8 {
        assert!(seq < self.max_seq, "record ({p}, {seq}) beyond the ledger");
        self.seen.get((u64::from(p) * self.max_seq + seq) as usize)
    }

    /// Counts a delivery of record `seq` of producer `p`.
    pub fn deliver(&self, p: u32, seq: u64) {
        self.seen(p, seq).fetch_add(1, Ordering::SeqCst);
    }

    /// Checks the records of `producers`, counting as delivered those the
    /// ledger counted and those of `extra` (popped by the test itself), and
    /// as held those in the in-flight buffers of `holders` (consumers
    /// killed), which `parse` reads (given the whole buffer, [`INFLIGHT`]
    /// bytes, longer than most records). Every acknowledged record must be
    /// delivered once or held, none twice; with `in_progress`, none past
    /// the first `in_progress` records after a producer's acknowledged ones
    /// (its pushes under way when it died). Past its acknowledged records
    /// and 8 more, a producer's records are read up to the first one never
    /// delivered.
    pub fn audit(
        &self,
        producers: Range<u32>,
        holders: impl IntoIterator<Item = u32>,
        parse: impl Fn(&[u8]) -> Option<(u32, u64)>,
        extra: &[(u32, u64)],
        in_progress: Option<u64>,
    ) -> Audit {
        let held: HashSet<(u32, u64)> = holders.into_iter().filter_map(|c| parse(&self.proc(c).inflight())).collect();
        let mut more: HashMap<(u32, u64), u64> = HashMap::new();
        for &id in extra {
            *more.entry(id).or_default() += 1;
        }
        let mut a = Audit::default();
        for p in producers {
            let acked = self.proc(p).acked.load(Ordering::SeqCst);
            a.acked += acked;
            for seq in 0..self.max_seq {
                let n = u64::from(self.seen(p, seq).load(Ordering::SeqCst)) + more.get(&(p, seq)).copied().unwrap_or(0);
                a.delivered += n;
                if n > 1 {
                    a.twice += 1;
                    a.problems.push(format!("record ({p}, {seq}) delivered {n} times"));
                } else if n == 0 && seq < acked {
                    if held.contains(&(p, seq)) {
                        a.in_hands += 1;
                    } else {
                        a.lost += 1;
                        a.problems.push(format!("acknowledged record ({p}, {seq}) never delivered"));
                    }
                }
                if in_progress.is_some_and(|k| n > 0 && seq >= acked + k) {
                    a.unpushed += 1;
                    a.problems.push(format!("record ({p}, {seq}) delivered, never pushed ({acked} acknowledged)"));
                }
                if n == 0 && seq > acked + 8 {
                    break;
                }
            }
        }
        a
    }
}
