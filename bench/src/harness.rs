//! What the parts of the matrix share: queues made anew, child processes
//! killed when dropped, servers started and asked things over the loopback,
//! and redis-benchmark run and read.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::ops::{Deref, DerefMut};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Records for a record-size cell: the cell's count, capped so that a run
/// moves about 1.2 GB (20 KB records would otherwise need 80 GB).
pub(crate) fn records_for_size(records: u64, size: u64) -> u64 {
    records.min((1_200_000_000 / tvm::slot_stride(size)).max(1000))
}

/// A fresh queue `id` in `dir` for `rows` records of `size` bytes.
pub(crate) fn fresh_queue(dir: &Path, id: u32, rows: u64, size: u64) -> Result<(), String> {
    let _ = tvm::Queue::drop_queue(dir, id);
    tvm::Queue::create(dir, id, &tvm::Spec::new(rows, size)).map_err(|e| e.to_string())
}

/// A child process (a server, a driver), killed and waited for when dropped.
pub(crate) struct KillOnDrop(pub(crate) Child);

impl Deref for KillOnDrop {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl DerefMut for KillOnDrop {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A server this run started on a loopback port, killed when dropped.
pub(crate) struct Server {
    pub(crate) port: u16,
    /// Held for its drop, which kills the server.
    pub(crate) _child: KillOnDrop,
}

/// A TCP port on the loopback that nobody listens on now.
pub(crate) fn free_port() -> Result<u16, String> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    l.local_addr().map(|a| a.port()).map_err(|e| e.to_string())
}

/// One command over a fresh connection, inline; the reply's first line.
pub(crate) fn ask(port: u16, line: &str) -> Result<String, String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(10))).map_err(|e| e.to_string())?;
    s.write_all(format!("{line}\r\n").as_bytes()).map_err(|e| e.to_string())?;
    let mut got = Vec::new();
    let mut b = [0u8; 256];
    while !got.ends_with(b"\r\n") {
        let n = s.read(&mut b).map_err(|e| e.to_string())?;
        if n == 0 {
            break;
        }
        got.extend_from_slice(&b[..n]);
    }
    Ok(String::from_utf8_lossy(&got).trim_end().to_string())
}

/// Starts the server `cmd` runs (its output dropped) and waits until it
/// answers PING on `port`, 20 s at most. `name` names it in errors; `hint`
/// follows the name when it cannot start (how to install it).
pub(crate) fn start_server(mut cmd: Command, name: &str, hint: &str, port: u16) -> Result<KillOnDrop, String> {
    let child = cmd.stdout(Stdio::null()).spawn().map_err(|e| format!("cannot start {name}{hint}: {e}"))?;
    let mut child = KillOnDrop(child);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if ask(port, "PING").is_ok_and(|r| r == "+PONG") {
            return Ok(child);
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("{name} exited at start ({status})"));
        }
        if Instant::now() > deadline {
            return Err(format!("{name} does not answer PING"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs redis-benchmark as `cmd` says (with `--csv`); the requests per
/// second of its row `row` (`"LPUSH"`, `"PING_MBULK"`, ...).
pub(crate) fn redis_benchmark(cmd: &mut Command, row: &str) -> Result<f64, String> {
    let out = cmd.output().map_err(|e| format!("cannot run redis-benchmark (apt-get install redis-tools): {e}"))?;
    redis_benchmark_rate(&out, row)
}

/// Requests per second of row `row` (`"LPUSH"`, ...) in what `redis-benchmark
/// --csv` printed, or its error.
fn redis_benchmark_rate(out: &std::process::Output, row: &str) -> Result<f64, String> {
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() || text.contains("rror") {
        return Err(format!("redis-benchmark: {}{}", text.trim(), String::from_utf8_lossy(&out.stderr).trim()));
    }
    text.lines()
        .find_map(|l| {
            let mut f = l.split(',').map(|x| x.trim_matches('"'));
            (f.next() == Some(row)).then(|| f.next().and_then(|r| r.parse().ok())).flatten()
        })
        .ok_or_else(|| format!("no {row} figure in redis-benchmark's output: {text}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;
    use std::process::{ExitStatus, Output};

    fn output(code: i32, stdout: &str) -> Output {
        Output { status: ExitStatus::from_raw(code << 8), stdout: stdout.into(), stderr: Vec::new() }
    }

    #[test]
    fn redis_benchmark_csv_rows_are_read_by_name() {
        let csv = "\"test\",\"rps\",\"avg_latency_ms\"\n\"PING_INLINE\",\"90000.00\",\"0.3\"\n\"LPUSH\",\"123456.79\",\"0.2\"\n";
        assert_eq!(redis_benchmark_rate(&output(0, csv), "LPUSH"), Ok(123456.79));
        assert!(redis_benchmark_rate(&output(0, csv), "RPOP").unwrap_err().starts_with("no RPOP figure"));
        assert!(redis_benchmark_rate(&output(1, csv), "LPUSH").is_err(), "a failed run has no figure");
        let failed = "Error: Server closed the connection\n";
        assert!(redis_benchmark_rate(&output(0, failed), "LPUSH").unwrap_err().starts_with("redis-benchmark: Error"));
    }
}
