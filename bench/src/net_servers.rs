//! The two servers of the network matrix, tvmq serve and redis-server,
//! each started on a free loopback port, its own unix socket and (when the
//! test certificates could be made) a TLS port, and redis-benchmark run
//! against them, noting the CPU time the server spent per request.

use crate::harness::{KillOnDrop, free_port, redis_benchmark, start_server};
use std::path::{Path, PathBuf};
use std::process::Command;

pub(crate) const TVMQ: &str = "tvmq serve";
/// tvmq serve's worker threads here: redis-benchmark takes most of one of
/// this machine's two cores, so the server has about one (redis-server runs
/// its commands on one thread too). `--threads` defaults to the cores.
pub(crate) const THREADS: usize = 1;
pub(crate) const REDIS: &str = "redis-server";

/// A server under test, killed when dropped.
pub(crate) struct Target {
    pub(crate) name: &'static str,
    pub(crate) port: u16,
    sock: PathBuf,
    /// The TLS port, and the CA file that signed its certificate.
    tls: Option<(u16, PathBuf)>,
    child: KillOnDrop,
}

impl Target {
    /// Starts server `name` on a free port, its unix socket at `sock`:
    /// `command` makes its command line for the port and the socket;
    /// `hint` follows the name if it cannot start.
    fn start(
        name: &'static str,
        hint: &str,
        sock: PathBuf,
        certs: Option<&Path>,
        command: impl FnOnce(u16, &Path, Option<(u16, &Path)>) -> Command,
    ) -> Result<Target, String> {
        let port = free_port()?;
        let tls = match certs {
            Some(dir) => Some((free_port()?, dir.to_path_buf())),
            None => None,
        };
        let child = start_server(command(port, &sock, tls.as_ref().map(|(p, d)| (*p, d.as_path()))), name, hint, port)?;
        Ok(Target { name, port, sock, tls: tls.map(|(p, d)| (p, d.join("ca.crt"))), child })
    }

    /// Its process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }
}

/// How to reach a server: TCP, its unix socket, or TLS.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Via {
    Tcp,
    Unix,
    Tls,
}

/// Test certificates in `scratch/certs`, made by scripts/tls-certs.sh (the
/// openssl command), for the TLS cells.
pub(crate) fn make_certs(scratch: &Path) -> Result<PathBuf, String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/tls-certs.sh");
    let dir = scratch.join("certs");
    let out = Command::new("bash")
        .arg(&script)
        .arg(&dir)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
    if !out.status.success() {
        return Err(format!(
            "no test certificates ({} needs openssl): {}",
            script.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(dir)
}

/// `--tls-port` and the certificate options (the same names on both servers).
fn tls_args(cmd: &mut Command, tls: Option<(u16, &Path)>) {
    if let Some((port, dir)) = tls {
        cmd.args(["--tls-port", &port.to_string(), "--tls-cert-file"])
            .arg(dir.join("server.crt"))
            .arg("--tls-key-file")
            .arg(dir.join("server.key"));
    }
}

/// tvmq serve (this program), its queues in `dir`, its socket in `scratch`;
/// TLS too with the certificates of `certs`.
pub(crate) fn start_tvmq(dir: &Path, scratch: &Path, certs: Option<&Path>) -> Result<Target, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    Target::start(TVMQ, "", scratch.join("tvmq.sock"), certs, |port, sock, tls| {
        let mut cmd = Command::new(exe);
        cmd.arg("--dir")
            .arg(dir)
            .args(["serve", "--port", &port.to_string(), "--threads", &THREADS.to_string()])
            .args(["--auto-create", "1000000x304", "--unixsocket"])
            .arg(sock);
        tls_args(&mut cmd, tls);
        cmd
    })
}

/// redis-server without persistence, its socket in `scratch`; TLS too
/// (clients not asked for certificates) with the certificates of `certs`.
pub(crate) fn start_redis(scratch: &Path, certs: Option<&Path>) -> Result<Target, String> {
    Target::start(REDIS, " (apt-get install redis-server)", scratch.join("redis.sock"), certs, |port, sock, tls| {
        let mut cmd = Command::new("redis-server");
        cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--maxclients", "10000", "--unixsocket"])
            .arg(sock);
        tls_args(&mut cmd, tls);
        if let Some((_, dir)) = tls {
            cmd.arg("--tls-ca-cert-file").arg(dir.join("ca.crt")).args(["--tls-auth-clients", "no"]);
        }
        cmd
    })
}

/// tvmq serve with the queues of `dir` (a directory on a disk, for the
/// durable cells), no auto-creation, its socket at `sock`.
pub(crate) fn start_tvmq_on(dir: &Path, sock: &Path) -> Result<Target, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    Target::start(TVMQ, "", sock.to_path_buf(), None, |port, sock, _| {
        let mut cmd = Command::new(exe);
        cmd.arg("--dir")
            .arg(dir)
            .args(["serve", "--port", &port.to_string(), "--threads", &THREADS.to_string(), "--unixsocket"])
            .arg(sock);
        cmd
    })
}

/// redis-server with `appendonly yes` and `appendfsync always`, its files
/// in `dir` (on a disk), its socket at `sock`.
pub(crate) fn start_redis_aof(dir: &Path, sock: &Path) -> Result<Target, String> {
    Target::start(REDIS, " (apt-get install redis-server)", sock.to_path_buf(), None, |port, sock, _| {
        let mut cmd = Command::new("redis-server");
        cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", ""])
            .args(["--appendonly", "yes", "--appendfsync", "always", "--maxclients", "10000", "--dir"])
            .arg(dir)
            .arg("--unixsocket")
            .arg(sock);
        cmd
    })
}

/// A lean durable server of design `design` (see `lean_server`), this
/// program with `--lean-server`, its log at `log` (on a disk); `name` is
/// its subject.
pub(crate) fn start_lean(name: &'static str, design: &str, log: &Path) -> Result<Target, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    Target::start(name, "", log.with_extension("sock"), None, |port, _, _| {
        let mut cmd = Command::new(exe);
        cmd.arg("bench").arg("--lean-server").arg(format!("{port}:{design}:{}", log.display()));
        cmd
    })
}

/// CPU time a server spent per request: (section, param, CSV row, server,
/// microseconds), one entry a run; `CELL` says which cell runs.
static CPU: std::sync::Mutex<Vec<CpuFigure>> = std::sync::Mutex::new(Vec::new());

/// (section, param, CSV row, server, microseconds per request).
type CpuFigure = (String, String, String, &'static str, f64);

thread_local! {
    /// The section and parameter of the cell being measured.
    static CELL: std::cell::RefCell<(String, String)> = const { std::cell::RefCell::new((String::new(), String::new())) };
}

/// Notes which cell runs, for the CPU figures of the redis-benchmark runs.
pub(crate) fn measuring(section: &str, param: &str) {
    CELL.with(|c| *c.borrow_mut() = (section.to_string(), param.to_string()));
}

/// User plus system CPU time of process `pid`, in seconds.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which is in parentheses): utime and stime are the 12th and 13th.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let field = |i: usize| f.get(i).and_then(|x| x.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime, in clock ticks (USER_HZ, 100 on Linux).
    (field(11) + field(12)) / 100.0
}

/// Median CPU microseconds per request of `server` in a cell.
pub(crate) fn cpu_per_request(section: &str, param: &str, row: &str, server: &str) -> Option<f64> {
    let all = CPU.lock().ok()?;
    let mut v: Vec<f64> =
        all.iter().filter(|e| e.0 == section && e.1 == param && e.2 == row && e.3 == server).map(|e| e.4).collect();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied()
}

/// Runs redis-benchmark; the requests per second of test `row` (its CSV
/// name, e.g. "LPUSH", "PING_MBULK"), as milliseconds for `n` requests.
/// Notes the server's CPU time per request too.
pub(crate) fn benchmark(t: &Target, via: Via, test: &str, row: &str, n: u64, extra: &[&str]) -> Result<f64, String> {
    let cpu_before = cpu_seconds(t.pid());
    let mut cmd = Command::new("redis-benchmark");
    match via {
        Via::Tcp => cmd.args(["-h", "127.0.0.1", "-p", &t.port.to_string()]),
        Via::Unix => cmd.arg("-s").arg(&t.sock),
        Via::Tls => {
            let (port, ca) = t.tls.as_ref().ok_or_else(|| format!("{}: no TLS port (no certificates)", t.name))?;
            cmd.args(["-h", "127.0.0.1", "-p", &port.to_string(), "--tls", "--cacert"]).arg(ca)
        }
    };
    let rps = redis_benchmark(cmd.args(["-t", test, "-n", &n.to_string(), "--csv"]).args(extra), row)?;
    // `-t ping` runs PING_INLINE too: both count.
    let requests = if test == "ping" { 2 * n } else { n };
    let us = (cpu_seconds(t.pid()) - cpu_before) * 1e6 / requests as f64;
    let (section, param) = CELL.with(|c| c.borrow().clone());
    if let Ok(mut all) = CPU.lock() {
        all.push((section, param, row.to_string(), t.name, us));
    }
    Ok(n as f64 / rps * 1000.0)
}

/// A rate as the network tables show it: M/s from a million, else K/s.
pub(crate) fn kilo(r: f64) -> String {
    if r >= 1e6 { format!("{:.2} M/s", r / 1e6) } else { format!("{:.1} K/s", r / 1e3) }
}
