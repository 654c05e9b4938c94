//! Helpers of the server's tests: a fresh queue directory, a server in this
//! process or in a child process (this test binary, re-executed), a small
//! RESP client, redis-cli.
#![allow(dead_code)]

#[path = "../../../src/test_support.rs"]
mod support;

pub use support::*;

use clap::Parser;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};
use tvmq_server::{ServeArgs, Server};

/// A server in this process on a free loopback port, `extra` options on top.
pub fn start(dir: &TempDir, extra: &[&str]) -> Server {
    Server::start(dir.path(), &args(extra)).expect("server starts")
}

/// `tvmq serve` options parsed as the command line does, with `--port 0`
/// and two worker threads before `extra`.
pub fn args(extra: &[&str]) -> ServeArgs {
    #[derive(Parser)]
    #[command(args_override_self = true)]
    struct Cli {
        #[command(flatten)]
        serve: ServeArgs,
    }
    let mut all = vec!["serve", "--port", "0", "--threads", "2"];
    all.extend_from_slice(extra);
    Cli::try_parse_from(all).expect("valid options").serve
}

/// A server in a child process: this test binary running [`server_child`].
pub struct ChildServer {
    pub child: Child,
    pub addr: SocketAddr,
    /// Its TLS address, with `--tls-port`.
    pub tls_addr: Option<SocketAddr>,
    /// Its metrics address, with `--metrics-port`.
    pub metrics_addr: Option<SocketAddr>,
    /// Its stderr lines so far, when [`Spawn::capture_stderr`] asked for them.
    pub stderr: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

/// How [`ChildServer::spawn`] starts the child.
#[derive(Default)]
pub struct Spawn<'a> {
    /// Environment variables set for it.
    pub env: &'a [(&'a str, &'a str)],
    /// The umask it runs with (through `sh -c 'umask ...; exec ...'`).
    pub umask: Option<u32>,
    /// Keep its stderr lines (else they go to the test's stderr).
    pub capture_stderr: bool,
    /// Its soft and hard limit of open files (through `prlimit`).
    pub nofile: Option<u64>,
}

/// The command that runs [`server_child`] serving `dir` with `extra`.
pub fn server_child_command(dir: &Path, extra: &[&str], how: &Spawn<'_>) -> Command {
    let mut cmd = match how.umask {
        None => child_test("common::server_child"),
        Some(mask) => {
            let inner = child_test("common::server_child");
            let mut sh = Command::new("sh");
            sh.arg("-c").arg(format!("umask {mask:03o}; exec \"$@\"")).arg("sh").arg(inner.get_program());
            sh.args(inner.get_args());
            sh
        }
    };
    if let Some(n) = how.nofile {
        let mut limited = Command::new("prlimit");
        limited.arg(format!("--nofile={n}:{n}")).arg("--").arg(cmd.get_program()).args(cmd.get_args());
        cmd = limited;
    }
    cmd.env("TVMQ_TEST_DIR", dir).env("TVMQ_TEST_ARGS", extra.join("\u{1f}"));
    for (k, v) in how.env {
        cmd.env(k, v);
    }
    cmd
}

impl ChildServer {
    /// Starts it and waits for its "listening on" line.
    pub fn start(dir: &TempDir, extra: &[&str]) -> ChildServer {
        Self::spawn(dir, extra, &Spawn::default())
    }

    /// Starts it as `how` says and waits for its "listening on" line.
    pub fn spawn(dir: &TempDir, extra: &[&str], how: &Spawn<'_>) -> ChildServer {
        Self::spawn_in(dir.path(), extra, how)
    }

    /// [`spawn`](Self::spawn) serving any directory (a [`DiskDir`] for
    /// durable queues).
    pub fn spawn_in(dir: &Path, extra: &[&str], how: &Spawn<'_>) -> ChildServer {
        let mut cmd = server_child_command(dir, extra, how);
        cmd.stdout(Stdio::piped()).stderr(if how.capture_stderr { Stdio::piped() } else { Stdio::inherit() });
        let mut child = cmd.spawn().expect("start the server child");
        let stderr_lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        if let Some(err) = child.stderr.take() {
            let lines = stderr_lines.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(err).lines().map_while(Result::ok) {
                    lines.lock().unwrap().push(line);
                }
            });
        }
        let stdout = child.stdout.take().expect("its stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(rest) = line.split("listening on ").nth(1) {
                    let addr = rest.split([' ', ';']).next().unwrap_or("").to_string();
                    let tls = rest.split(" and ").find(|a| a.contains("(TLS")).and_then(|a| a.split(' ').next());
                    let metrics =
                        rest.split(" and ").find_map(|a| a.strip_prefix("http://")).and_then(|a| a.split('/').next());
                    let _ = tx.send((addr, tls.map(str::to_string), metrics.map(str::to_string)));
                }
            }
        });
        let (addr, tls, metrics) =
            rx.recv_timeout(Duration::from_secs(20)).expect("the server child says where it listens");
        let tls_addr = tls.map(|a| a.parse().expect("a socket address"));
        let metrics_addr = metrics.map(|a| a.parse().expect("a socket address"));
        ChildServer {
            child,
            addr: addr.parse().expect("a socket address"),
            tls_addr,
            metrics_addr,
            stderr: stderr_lines,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Resident memory of the server, in KiB.
    pub fn rss_kib(&self) -> u64 {
        rss_kib(self.pid())
    }

    /// Sends `sig`, waits for the exit (at most `limit`), returns the status code.
    pub fn signal_and_wait(&mut self, sig: i32, limit: Duration) -> Option<i32> {
        let _ = Command::new("kill").arg(format!("-{sig}")).arg(self.pid().to_string()).status();
        let deadline = Instant::now() + limit;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.code();
            }
            assert!(Instant::now() < deadline, "the server did not stop within {limit:?}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for ChildServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Descriptors process `pid` has open.
pub fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// Raises this process's soft limit of open files to its hard limit (a
/// test that opens thousands of connections).
pub fn raise_nofile() {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let now = getrlimit(Resource::Nofile);
    let _ = setrlimit(Resource::Nofile, Rlimit { current: now.maximum, maximum: now.maximum });
}

/// The names of process `pid`'s threads.
pub fn thread_names(pid: u32) -> Vec<String> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return Vec::new() };
    let comm = |t: std::fs::DirEntry| std::fs::read_to_string(t.path().join("comm")).ok();
    tasks.flatten().filter_map(comm).map(|c| c.trim().to_string()).collect()
}

/// Process `pid`'s threads but those of the server's bounded pools, which
/// start their threads as jobs come (opening a queue, closing one) and never
/// more than `--pool-threads` (8 by default) and 4 a worker's runtime
/// (`tvmq-blocking`): the others, and the pools'.
pub fn threads_and_pools(pid: u32) -> (usize, usize) {
    let names = thread_names(pid);
    let pool = names.iter().filter(|n| n.starts_with("tvmq-pool") || n.starts_with("tvmq-blocking")).count();
    (names.len() - pool, pool)
}

/// VmRSS of process `pid`, in KiB.
pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// The server of [`ChildServer`]: `tvmq serve` as the CLI runs it (signals
/// included), with the options of its parent.
#[test]
#[ignore = "a child process of the server tests"]
fn server_child() {
    let dir = child_env("TVMQ_TEST_DIR");
    let extra = child_env("TVMQ_TEST_ARGS");
    let extra: Vec<&str> = extra.split('\u{1f}').filter(|s| !s.is_empty()).collect();
    tvmq_server::run(Path::new(&dir), &args(&extra)).expect("the server runs");
}

/// A reply, owned, for assertions.
#[derive(Clone, Debug, PartialEq)]
pub enum V {
    Simple(String),
    Err(String),
    Int(i64),
    Bulk(Vec<u8>),
    Nil,
    Arr(Vec<V>),
    /// A RESP3 map, its pairs flattened.
    Map(Vec<V>),
    Other(String),
}

impl V {
    pub fn bulk(s: &[u8]) -> V {
        V::Bulk(s.to_vec())
    }

    pub fn err_text(&self) -> &str {
        match self {
            V::Err(e) => e,
            other => panic!("expected an error, got {other:?}"),
        }
    }

    fn from(r: &resp::Reply<'_>) -> V {
        use resp::Reply as R;
        match r {
            R::Simple(s) => V::Simple(String::from_utf8_lossy(s).into_owned()),
            R::Error(s) | R::BlobError(s) => V::Err(String::from_utf8_lossy(s).into_owned()),
            R::Integer(i) => V::Int(*i),
            R::Bulk(b) => V::Bulk(b.to_vec()),
            R::Verbatim { text, .. } => V::Bulk(text.to_vec()),
            R::Null => V::Nil,
            R::Array(a) | R::Set(a) | R::Push(a) => V::Arr(a.iter().map(V::from).collect()),
            R::Map(m) => V::Map(m.iter().flat_map(|(k, v)| [V::from(k), V::from(v)]).collect()),
            other => V::Other(format!("{other:?}")),
        }
    }
}

/// A raw RESP connection.
pub struct Conn {
    pub s: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    pub fn connect(addr: SocketAddr) -> Conn {
        let s = TcpStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s.set_nodelay(true).unwrap();
        Conn { s, buf: Vec::new() }
    }

    pub fn send(&mut self, args: &[&[u8]]) {
        let mut out = Vec::new();
        resp::command(&mut out, args);
        self.s.write_all(&out).expect("send");
    }

    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.s.write_all(bytes).expect("send");
    }

    /// The next reply (panics on EOF or after the read timeout).
    pub fn read(&mut self) -> V {
        self.try_read().expect("a reply")
    }

    /// The next reply, or None at EOF (or a reset).
    pub fn try_read(&mut self) -> Option<V> {
        loop {
            if let Some((r, used)) = resp::parse_reply(&self.buf, &resp::Limits::default()).expect("a valid reply") {
                let v = V::from(&r);
                self.buf.drain(..used);
                return Some(v);
            }
            let mut chunk = [0u8; 65536];
            match self.s.read(&mut chunk) {
                Ok(0) => return None,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return None,
                // A read with a timeout (SO_RCVTIMEO) fails with EINTR when
                // the process was stopped and continued (man 7 signal), as
                // on a machine whose tools pause processes: read again.
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => panic!("read: {e}"),
            }
        }
    }

    /// The next reply if one arrives within `limit` (zero: only what is
    /// there already), else None; the read timeout is restored after.
    pub fn try_read_within(&mut self, limit: Duration) -> Option<V> {
        if let Some((r, used)) = resp::parse_reply(&self.buf, &resp::Limits::default()).expect("a valid reply") {
            let v = V::from(&r);
            self.buf.drain(..used);
            return Some(v);
        }
        self.s.set_nonblocking(limit.is_zero()).unwrap();
        self.s.set_read_timeout(Some(limit.max(Duration::from_millis(1)))).unwrap();
        let mut chunk = [0u8; 65536];
        let got = self.s.read(&mut chunk);
        self.s.set_nonblocking(false).unwrap();
        self.s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        match got {
            Ok(n) if n > 0 => {
                self.buf.extend_from_slice(&chunk[..n]);
                self.try_read_within(Duration::ZERO)
            }
            _ => None,
        }
    }

    /// Sends `bytes`; false if the connection is gone.
    pub fn try_send_raw(&mut self, bytes: &[u8]) -> bool {
        self.s.write_all(bytes).is_ok()
    }

    pub fn cmd(&mut self, args: &[&[u8]]) -> V {
        self.send(args);
        self.read()
    }

    /// Is the connection closed by the server (EOF within `limit`)?
    pub fn closed_within(&mut self, limit: Duration) -> bool {
        self.s.set_read_timeout(Some(limit)).unwrap();
        let mut chunk = [0u8; 4096];
        let deadline = Instant::now() + limit;
        loop {
            match self.s.read(&mut chunk) {
                Ok(0) => return true,
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
                // Stopped and continued (see `try_read`): look again.
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
            if Instant::now() >= deadline {
                return false;
            }
        }
    }
}

/// Runs redis-cli with `args` against `addr`; its output.
pub fn redis_cli(addr: SocketAddr, args: &[&str]) -> Output {
    Command::new("redis-cli")
        .args(["-h", &addr.ip().to_string(), "-p", &addr.port().to_string()])
        .args(args)
        .output()
        .expect("redis-cli runs (apt-get install redis-tools)")
}

/// redis-cli's stdout, trimmed.
pub fn cli(addr: SocketAddr, args: &[&str]) -> String {
    let out = redis_cli(addr, args);
    assert!(out.status.success(), "redis-cli {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim_end().to_string()
}

/// Creates queue `id` (named `name`) of `rows` records of `size` bytes.
pub fn create(dir: &TempDir, id: u32, name: &str, rows: u64, size: u64) {
    let mut spec = tvm::Spec::new(rows, size);
    spec.name = name.into();
    tvm::Queue::create(dir.path(), id, &spec).expect("create the queue");
}

/// Waits until `f` is true, at most `limit`.
#[track_caller]
pub fn wait_until(limit: Duration, what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// A Python with redis-py, in a virtual environment under target/ (made,
/// and redis-py installed from PyPI, the first time). The tests that use it
/// run in processes of their own, at once: on a fresh clone each would make
/// the environment and install into it over the other's (a half-made one
/// looks ready, or pip fails): the first makes it while holding a lock on
/// `target/redis-py-venv.lock`, the others wait for it.
pub fn redis_py() -> PathBuf {
    use std::os::fd::AsRawFd;
    let target = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target");
    let venv = target.join("redis-py-venv");
    let python = venv.join("bin/python");
    let ready = |p: &Path| Command::new(p).args(["-c", "import redis"]).status().is_ok_and(|s| s.success());
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(target.join("redis-py-venv.lock"))
        .expect("open target/redis-py-venv.lock");
    // SAFETY: flock on a descriptor we own; held until `lock` is closed.
    while unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) } != 0 {
        assert_eq!(std::io::Error::last_os_error().kind(), std::io::ErrorKind::Interrupted, "flock the venv's lock");
    }
    if !ready(&python) {
        let made = Command::new("python3").args(["-m", "venv"]).arg(&venv).status().expect("python3 runs");
        assert!(made.success(), "python3 -m venv failed (apt-get install python3-venv)");
        let pip = Command::new(&python).args(["-m", "pip", "install", "-q", "redis"]).status().expect("pip runs");
        assert!(pip.success(), "pip install redis failed");
    }
    assert!(ready(&python), "redis-py is not importable from {}", python.display());
    python
}

/// The value of field `key` in the text of an INFO reply.
#[track_caller]
pub fn info_field(text: &str, key: &str) -> u64 {
    let line = text.lines().find(|l| l.starts_with(&format!("{key}:"))).unwrap_or_else(|| panic!("{key} in {text}"));
    line[key.len() + 1..].trim().parse().unwrap()
}

/// What the server says it has read and run, asked over a connection of
/// its own (`INFO stats`), from a base taken when it is made: so that a
/// test knows when the server has read every byte of an attack (it counts
/// bytes as it reads them, before it runs their commands), and how many of
/// the attack's commands it had run at some point. Its own INFO commands
/// are left out of both counts. No other client may send meanwhile.
pub struct Meter {
    c: Conn,
    infos: u64,
    base_input: u64,
    base_commands: u64,
}

/// `INFO stats` as RESP.
fn info_stats_command() -> Vec<u8> {
    let mut out = Vec::new();
    resp::command(&mut out, &[b"INFO", b"stats"]);
    out
}

impl Meter {
    pub fn new(addr: SocketAddr, password: Option<&str>) -> Meter {
        let mut c = Conn::connect(addr);
        if let Some(p) = password {
            assert_eq!(c.cmd(&[b"AUTH", p.as_bytes()]), V::Simple("OK".into()));
        }
        let mut m = Meter { c, infos: 0, base_input: 0, base_commands: 0 };
        let stats = m.stats();
        // This INFO's bytes are in the count, itself not yet.
        m.base_input = info_field(&stats, "total_net_input_bytes");
        m.base_commands = info_field(&stats, "total_commands_processed");
        m.infos = 0;
        m
    }

    /// `INFO stats`, asked on the meter's connection.
    pub fn stats(&mut self) -> String {
        self.c.send_raw(&info_stats_command());
        self.infos += 1;
        match self.c.read() {
            V::Bulk(b) => String::from_utf8_lossy(&b).into_owned(),
            other => panic!("INFO stats: {other:?}"),
        }
    }

    /// Bytes read from clients since the base, this meter's INFOs left out.
    pub fn input(&mut self) -> u64 {
        let stats = self.stats();
        info_field(&stats, "total_net_input_bytes") - self.base_input - self.infos * info_stats_command().len() as u64
    }

    /// Waits until the server has read `bytes` since the base. A minute at
    /// most: a guard against a hang, not a bound on speed.
    #[track_caller]
    pub fn wait_for_input(&mut self, bytes: u64) {
        wait_until(Duration::from_secs(60), "the server to read the attack", || self.input() >= bytes);
    }

    /// Commands the server had counted as run since the base in `stats`
    /// (an `INFO stats` text taken after), this meter's INFOs left out. A
    /// connection's commands are counted once it has run all it read at
    /// once (and before it answers them).
    pub fn commands_in(&self, stats: &str) -> u64 {
        // The base's INFO, and those after it.
        info_field(stats, "total_commands_processed") - self.base_commands - 1 - self.infos
    }
}

/// PING and `INFO stats` sent at once on `c`, which a worker answers in
/// one turn: the PONG checked, the INFO's text returned, which tells what
/// the server had done when it answered the PING.
#[track_caller]
pub fn pong_and_stats(c: &mut Conn) -> String {
    let mut out = Vec::new();
    resp::command(&mut out, &[b"PING"]);
    out.extend_from_slice(&info_stats_command());
    c.send_raw(&out);
    assert_eq!(c.read(), V::Simple("PONG".into()));
    match c.read() {
        V::Bulk(b) => String::from_utf8_lossy(&b).into_owned(),
        other => panic!("INFO stats: {other:?}"),
    }
}
