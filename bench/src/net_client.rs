//! The C client's cells of `make bench-net`: tvm.h's network calls
//! (`lTvmPush`, `lTvmPop`, `lAsyPush`, a connection shared by threads),
//! driven by `bench/drivers/net_driver.c` against the same tvmq serve and
//! redis-server as the redis-benchmark cells, beside two floors that the
//! driver serves itself: a bare TCP echo of 320 bytes (the least one
//! synchronous round trip costs here) and the least a RESP server can do
//! (`:1` to every push: the client's own cost without any server's).
//!
//! Every cell runs alternately on each server within a round, so that the
//! machine's drift hits all alike. Queue 21 (key "21") is made anew before
//! each run: on tvmq's side a queue with room for the run, on redis's side
//! the list deleted. Each run must report every record done and no error.

use crate::cell::{self, Cell};
use crate::ctx::Ctx;
use crate::harness::{KillOnDrop, Server, ask, free_port};
use crate::net_servers::{self, REDIS, TVMQ, Target, Via, kilo, measuring};
use std::fmt::Write as _;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

/// The client section's name in the table and the CSV.
pub(crate) const SECTION: &str = "C client (tvm.h), TCP";
/// The floors, served by the driver itself.
const ECHO: &str = "bare echo";
const MINIMAL: &str = "minimal RESP server";
/// The queue the driver uses (its key on the servers is "21").
const QUEUE: u32 = 21;

/// The driver serving a floor (`op`), until the server returned is dropped.
fn serve_floor(driver: &Path, op: &str) -> Result<Server, String> {
    let port = free_port()?;
    let child = Command::new(driver)
        .args(["--op", op, "--host", "127.0.0.1", "--port", &port.to_string()])
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start {} --op {op}: {e}", driver.display()))?;
    let mut child = KillOnDrop(child);
    let mut line = String::new();
    if let Some(out) = child.stdout.take() {
        let _ = BufReader::new(out).read_line(&mut line);
    }
    if !line.starts_with("listening") {
        return Err(format!("{} --op {op} did not start: {line:?}", driver.display()));
    }
    Ok(Server { port, _child: child })
}

/// Queue 21 made anew on `t` for `rows` records.
fn fresh_queue(t: &Target, dir: &Path, rows: u64) -> Result<(), String> {
    if t.name == TVMQ {
        let _ = tvm::Queue::drop_queue(dir, QUEUE);
        tvm::Queue::create(dir, QUEUE, &tvm::Spec::new(rows, 304)).map_err(|e| e.to_string())
    } else {
        ask(t.port, &format!("DEL {QUEUE}")).map(|_| ())
    }
}

/// One driver run; its milliseconds. `args` are the driver's after
/// `--port`.
fn drive(driver: &Path, port: u16, op: &str, threads: u32, records: u64, shared: bool) -> Result<f64, String> {
    drive_with(driver, port, op, threads, records, if shared { &["--shared"] } else { &[] })
}

/// [`drive`] with the driver's other options (`--replicas K`, `--spread S`).
pub(crate) fn drive_with(
    driver: &Path,
    port: u16,
    op: &str,
    threads: u32,
    records: u64,
    extra: &[&str],
) -> Result<f64, String> {
    let shared = extra.contains(&"--shared");
    let mut cmd = Command::new(driver);
    cmd.args(["--host", "127.0.0.1", "--port", &port.to_string(), "--op", op])
        .args(["--threads", &threads.to_string(), "--records", &records.to_string()])
        .args(["--queue", &QUEUE.to_string(), "--timeout", "20"])
        .args(extra);
    let out = cmd.output().map_err(|e| format!("cannot run {}: {e}", driver.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().find(|l| l.starts_with("ok ")).unwrap_or("");
    let field =
        |name: &str| line.split_whitespace().find_map(|f| f.strip_prefix(name).and_then(|v| v.strip_prefix('=')));
    let done: Option<u64> = field("records").and_then(|v| v.parse().ok());
    match (out.status.success(), field("errors"), done, field("ms").and_then(|v| v.parse::<f64>().ok())) {
        (true, Some("0"), Some(n), Some(ms)) if n == records => Ok(ms),
        _ => Err(format!(
            "net_driver --op {op} --threads {threads}{}{}: {}{}",
            if shared { " --shared" } else { "" },
            extra.iter().filter(|a| **a != "--shared").map(|a| format!(" {a}")).collect::<String>(),
            text.trim(),
            String::from_utf8_lossy(&out.stderr).lines().take(3).collect::<Vec<_>>().join("; ")
        )),
    }
}

/// Runs the client's cells against `servers` (tvmq serve, redis-server).
pub(crate) fn cells(ctx: &mut Ctx, servers: [&Target; 2], driver: &Path) -> Result<(), String> {
    let dir = ctx.dir.clone();
    let smoke = ctx.args.smoke;
    let echo = serve_floor(driver, "echo-server")?;
    let minimal = serve_floor(driver, "resp-server")?;
    let sync_n = if smoke { 2_000 } else { 20_000 };

    // One thread, synchronous: the floors, then push and pop on each server.
    measuring(SECTION, "1 thread");
    let tests = [
        ("round trip", ECHO),
        ("lTvmPush", MINIMAL),
        ("lTvmPush", TVMQ),
        ("lTvmPop", TVMQ),
        ("lTvmPush", REDIS),
        ("lTvmPop", REDIS),
    ];
    ctx.measure_group(SECTION, &tests, "1 thread", sync_n, 304, |_| {
        let mut ms = vec![drive(driver, echo.port, "echo", 1, sync_n, false)?];
        ms.push(drive(driver, minimal.port, "push", 1, sync_n, false)?);
        for t in servers {
            fresh_queue(t, &dir, sync_n + 1000)?;
            ms.push(drive(driver, t.port, "push", 1, sync_n, false)?);
            fresh_queue(t, &dir, sync_n + 1000)?;
            ms.push(drive(driver, t.port, "pop", 1, sync_n, false)?);
        }
        Ok(ms)
    });

    // Several threads: each its own connection, or all sharing one.
    for threads in [4u32, 10] {
        let n = if smoke { 4_000 } else { 4_000 * threads as u64 };
        let param = format!("{threads} threads");
        let mut tests = Vec::new();
        for t in servers {
            tests.extend([("lTvmPush own", t.name), ("lTvmPush shared", t.name), ("lTvmPop own", t.name)]);
        }
        ctx.measure_group(SECTION, &tests, &param, n, 304, |_| {
            let mut ms = Vec::new();
            for t in servers {
                for shared in [false, true] {
                    fresh_queue(t, &dir, n + 1000)?;
                    ms.push(drive(driver, t.port, "push", threads, n, shared)?);
                }
                fresh_queue(t, &dir, n + 1000)?;
                ms.push(drive(driver, t.port, "pop", threads, n, false)?);
            }
            Ok(ms)
        });
    }

    // Asynchronous pushes, one thread, beside redis-benchmark pipelining 64 on one connection.
    let n = if smoke { 20_480 } else { 500_224 };
    let tests = [("lAsyPush", TVMQ), ("lAsyPush", REDIS), ("redis-benchmark LPUSH -P 64 -c 1", REDIS)];
    measuring(SECTION, "async");
    ctx.measure_group(SECTION, &tests, "1 thread", n, 304, |_| {
        let mut ms = Vec::new();
        for t in servers {
            fresh_queue(t, &dir, n + 1000)?;
            ms.push(drive(driver, t.port, "asypush", 1, n, false)?);
        }
        let redis = servers[1];
        fresh_queue(redis, &dir, n)?;
        let extra = ["-P", "64", "-c", "1", "-d", "304"];
        ms.push(net_servers::benchmark(redis, Via::Tcp, "lpush", "LPUSH", n, &extra)?);
        Ok(ms)
    });
    drop((echo, minimal));
    Ok(())
}

/// The median rate of the client's cell `test`, `param`, `subject`.
fn rate(cells: &[Cell], test: &str, param: &str, subject: &str) -> Option<f64> {
    cell::rate(cells, SECTION, test, param, subject)
}

/// The target of a row, given tvmq serve's figure in it.
fn target(cells: &[Cell], test: &str, param: &str, tvmq: Option<f64>) -> String {
    let check = |ok: bool| if ok { "met" } else { "MISSED" };
    let r = |t: &str, s: &str| rate(cells, t, param, s);
    match (test, param) {
        ("lTvmPush", "1 thread") => match (tvmq, r("round trip", ECHO)) {
            (Some(x), Some(e)) => format!(">= 0.95x echo: {} ({:.2}x)", check(x >= 0.95 * e), x / e),
            _ => String::new(),
        },
        ("lTvmPush shared", "10 threads") => match (tvmq, r("lTvmPush own", TVMQ)) {
            (Some(x), Some(own)) => format!("shared >= 2x own: {} ({:.2}x)", check(x >= 2.0 * own), x / own),
            _ => String::new(),
        },
        ("lAsyPush", _) => match (tvmq, r("lAsyPush", REDIS), r("redis-benchmark LPUSH -P 64 -c 1", REDIS)) {
            (Some(x), Some(y), Some(b)) => {
                format!(">= 1 M/s: {}; redis >= redis-benchmark: {} ({:.2}x)", check(x >= 1e6), check(y >= b), y / b)
            }
            _ => String::new(),
        },
        (t, _) if t.starts_with("lTvmPop") => {
            let push = if param == "1 thread" { "lTvmPush" } else { "lTvmPush own" };
            let mut out = Vec::new();
            for s in [TVMQ, REDIS] {
                if let (Some(pop), Some(p)) = (r(t, s), r(push, s)) {
                    out.push(format!(
                        "{}: {} ({:.2}x push)",
                        s.split(' ').next().unwrap_or(s),
                        check(pop >= 0.9 * p),
                        pop / p
                    ));
                }
            }
            format!("within 10% of push: {}", out.join(", "))
        }
        _ => String::new(),
    }
}

fn shown(c: Option<&Cell>) -> String {
    match c {
        Some(c) if c.error.is_some() => {
            format!("error: {}", c.error.as_deref().unwrap_or("").chars().take(40).collect::<String>())
        }
        Some(c) => match c.rates() {
            Some((med, lo, hi)) => format!("{} ({:.0}-{:.0} K)", kilo(med), lo / 1e3, hi / 1e3),
            None => "-".into(),
        },
        None => "-".into(),
    }
}

/// The client's section of the table.
pub(crate) fn table(cells: &[Cell]) -> String {
    let mut t = String::new();
    if !cells.iter().any(|c| c.section == SECTION) {
        return t;
    }
    let _ = writeln!(
        t,
        "\n{SECTION}: records/s (or round trips/s), median (min-max); the floors: a bare TCP echo of 320 B and a RESP server that only answers"
    );
    let _ = writeln!(t, "{:<40} | {:<26} | {:<26} | {:<40} | target", "", TVMQ, REDIS, "floor");
    let mut rows: Vec<(String, String)> = Vec::new();
    for c in cells.iter().filter(|c| c.section == SECTION) {
        if !rows.contains(&(c.test.clone(), c.param.clone())) {
            rows.push((c.test.clone(), c.param.clone()));
        }
    }
    for (test, param) in rows {
        let find = |s: &str| cell::find(cells, SECTION, &test, &param, s);
        let floor = find(ECHO).map(|c| (ECHO, c)).or_else(|| find(MINIMAL).map(|c| (MINIMAL, c)));
        let floor_text = floor.map_or("-".to_string(), |(name, c)| format!("{name}: {}", shown(Some(c))));
        let goal = target(cells, &test, &param, rate(cells, &test, &param, TVMQ));
        let label = format!("{test}, {param}");
        let _ = writeln!(
            t,
            "{label:<40} | {:<26} | {:<26} | {floor_text:<40} | {goal}",
            shown(find(TVMQ)),
            shown(find(REDIS))
        );
    }
    t
}
