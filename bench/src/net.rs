//! `tvmq bench --net` (`make bench-net`): `tvmq serve` side by side with a
//! redis-server started on another loopback port (`--save '' --appendonly
//! no`), both driven by redis-benchmark, each cell run alternately on the
//! two servers so that the machine's drift hits both alike.
//!
//! Cells: LPUSH and RPOP pipelined (`-P 64 -c 4`), LPUSH synchronous (`-c 1`)
//! beside PING_MBULK `-c 1`, LPUSH with 50 clients, the same over unix
//! sockets, TLS beside plain TCP (LPUSH and RPOP at `-P 16 -c 4` and `-c 1`,
//! and a connection per request, `-k 0`, for the handshake), a value-size
//! sweep, acknowledged consumption over the network (`net_lease`: lease +
//! ack beside Redis's BLMOVE + LREM and plain pops; `--only leases` runs
//! them alone), and the resident memory of each server with
//! 5,000 idle connections. tvmq's queue `mylist` is created before each
//! cell with room for what the cell pushes (records of the cell's value
//! size), and redis's list deleted; RPOP cells pop what the LPUSH cell
//! before them pushed, and LLEN before and after proves that every RPOP
//! popped a record (a nil reply is not a pop).

use crate::args::Part;
use crate::cell::{self, Cell, rate};
use crate::ctx::Ctx;
use crate::harness::ask;
use crate::lean_server::Design;
use crate::net_durable::{self, Bounds};
use crate::net_servers::{
    REDIS, THREADS, TVMQ, Target, Via, benchmark, cpu_per_request, kilo, make_certs, measuring, start_redis, start_tvmq,
};
use crate::{chart, net_client, net_lease, net_redis, report};
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use tvm::error::{Error, SVR_EXCEPTION};

/// The id of tvmq's `mylist` queue in the benchmark's directory (any id:
/// the server finds it by name).
const LIST_ID: u32 = 900_001;

fn llen(port: u16) -> Result<u64, String> {
    let r = ask(port, "LLEN mylist")?;
    r.strip_prefix(':').and_then(|n| n.parse().ok()).ok_or_else(|| format!("LLEN answered {r:?}"))
}

/// Empties `mylist`: tvmq's queue made anew for `rows` records of `size`
/// bytes, redis's list deleted.
fn fresh_list(t: &Target, dir: &Path, rows: u64, size: u64) -> Result<(), String> {
    if t.name == TVMQ {
        let _ = tvm::Queue::drop_queue(dir, LIST_ID);
        let mut spec = tvm::Spec::new(rows, size);
        spec.name = "mylist".into();
        tvm::Queue::create(dir, LIST_ID, &spec).map_err(|e| e.to_string())
    } else {
        ask(t.port, "DEL mylist").map(|_| ())
    }
}

/// A pipelined LPUSH then RPOP of `n` values of `size` bytes on `t`,
/// checking that the RPOPs took exactly what the LPUSHes left.
fn push_then_pop(t: &Target, dir: &Path, via: Via, n: u64, size: u64, pop: bool) -> Result<Vec<f64>, String> {
    fresh_list(t, dir, n + 4096, size)?;
    let pipe = ["-P", "64", "-c", "4", "-d"];
    let mut extra: Vec<String> = pipe.iter().map(|s| s.to_string()).collect();
    extra.push(size.to_string());
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    let push = benchmark(t, via, "lpush", "LPUSH", n, &extra)?;
    let depth = llen(t.port)?;
    if depth != n {
        return Err(format!("{}: LPUSH left {depth} records, not {n}", t.name));
    }
    if !pop {
        return Ok(vec![push]);
    }
    let popped = benchmark(t, via, "rpop", "RPOP", n, &extra)?;
    let left = llen(t.port)?;
    if left != 0 {
        return Err(format!("{}: {left} of {n} records left after {n} RPOPs (nil replies are not pops)", t.name));
    }
    Ok(vec![push, popped])
}

/// The sections of the TLS cells (their param says TCP or TLS): pipelined,
/// one client, a connection per request.
const TLS_PIPELINED: &str = "TLS beside TCP, pipelined";
const TLS_ONE: &str = "TLS beside TCP, one client";
const TLS_CONNECT: &str = "TLS beside TCP, a connection per request";

/// LPUSH then RPOP of `n` values of 304 bytes with redis-benchmark options
/// `opts`, the pops checked to take exactly what the pushes left.
fn push_pop_with(t: &Target, dir: &Path, via: Via, n: u64, opts: &[&str]) -> Result<Vec<f64>, String> {
    fresh_list(t, dir, n + 4096, 304)?;
    let mut extra = opts.to_vec();
    extra.extend(["-d", "304"]);
    let push = benchmark(t, via, "lpush", "LPUSH", n, &extra)?;
    let depth = llen(t.port)?;
    if depth != n {
        return Err(format!("{}: LPUSH left {depth} records, not {n}", t.name));
    }
    let popped = benchmark(t, via, "rpop", "RPOP", n, &extra)?;
    let left = llen(t.port)?;
    if left != 0 {
        return Err(format!("{}: {left} of {n} records left after {n} RPOPs", t.name));
    }
    Ok(vec![push, popped])
}

/// The TLS cells, each beside the same over plain TCP: what encryption
/// costs (LPUSH and RPOP pipelined, `-P 16 -c 4`, and one at a time, `-c 1`)
/// and what a handshake costs (PING over a new connection each time, `-k 0`).
fn tls_cells(ctx: &mut Ctx, both: [&Target; 2], dir: &Path, smoke: bool) {
    let scale = |n: u64| if smoke { (n / 100).max(2048) / 64 * 64 } else { n };
    for via in [Via::Tcp, Via::Tls] {
        let param = if via == Via::Tls { "TLS" } else { "TCP" };
        let n = scale(640_000);
        measuring(TLS_PIPELINED, param);
        let tests = [
            ("LPUSH -P 16 -c 4", TVMQ),
            ("RPOP -P 16 -c 4", TVMQ),
            ("LPUSH -P 16 -c 4", REDIS),
            ("RPOP -P 16 -c 4", REDIS),
        ];
        ctx.measure_group(TLS_PIPELINED, &tests, param, n, 304, |_| {
            let mut ms = Vec::new();
            for t in both {
                ms.extend(push_pop_with(t, dir, via, n, &["-P", "16", "-c", "4"])?);
            }
            Ok(ms)
        });
        let n = if smoke { 2000 } else { 40_000 };
        let tests = [("LPUSH -c 1", TVMQ), ("RPOP -c 1", TVMQ), ("LPUSH -c 1", REDIS), ("RPOP -c 1", REDIS)];
        measuring(TLS_ONE, param);
        ctx.measure_group(TLS_ONE, &tests, param, n, 304, |_| {
            let mut ms = Vec::new();
            for t in both {
                ms.extend(push_pop_with(t, dir, via, n, &["-c", "1"])?);
            }
            Ok(ms)
        });
        let n = if smoke { 200 } else { 5000 };
        let tests = [("PING_MBULK -c 1 -k 0", TVMQ), ("PING_MBULK -c 1 -k 0", REDIS)];
        measuring(TLS_CONNECT, param);
        ctx.measure_group(TLS_CONNECT, &tests, param, n, 0, |_| {
            let mut ms = Vec::new();
            for t in both {
                ms.push(benchmark(t, via, "ping_mbulk", "PING_MBULK", n, &["-c", "1", "-k", "0"])?);
            }
            Ok(ms)
        });
    }
}

/// `n` rounded down to a multiple of 256 (64 pipelined x 4 clients), so that
/// redis-benchmark sends exactly `n`.
fn whole(n: u64) -> u64 {
    (n / 256).max(1) * 256
}

/// Resident memory of `pid`, in KiB.
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmRSS:")).and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// RSS before, and with `n` idle connections open.
fn idle_memory(t: &Target, n: usize) -> Result<(u64, u64), String> {
    if t.name == REDIS {
        // Give back what the lists of the cells before left in the allocator.
        ask(t.port, "FLUSHALL")?;
        ask(t.port, "MEMORY PURGE")?;
        std::thread::sleep(Duration::from_millis(500));
    }
    let before = rss_kib(t.pid());
    let mut conns = Vec::with_capacity(n);
    for _ in 0..n {
        conns.push(TcpStream::connect(("127.0.0.1", t.port)).map_err(|e| format!("connection {}: {e}", conns.len()))?);
    }
    // Each one says something once (so that the server has served it), then idles.
    for c in &mut conns {
        c.write_all(b"PING\r\n").map_err(|e| e.to_string())?;
    }
    for c in &mut conns {
        let mut b = [0u8; 7];
        c.set_read_timeout(Some(Duration::from_secs(20))).map_err(|e| e.to_string())?;
        c.read_exact(&mut b).map_err(|e| format!("{}: {e}", t.name))?;
    }
    std::thread::sleep(Duration::from_millis(500));
    let with = rss_kib(t.pid());
    drop(conns);
    Ok((before, with))
}

/// Runs the network matrix and writes its report.
pub(crate) fn run(ctx: &mut Ctx) -> Result<(), Error> {
    let fail = |e: String| Error::new(SVR_EXCEPTION, e);
    let scratch = PathBuf::from(format!("/tmp/tvmq-bench-net-{}", std::process::id()));
    crate::scratch::remember(&scratch);
    std::fs::create_dir_all(&scratch).map_err(|e| fail(e.to_string()))?;
    // `--only durable`, `--only leases`, `--only redis`: those cells alone (any
    // other part names none of the network matrix: the whole of it runs).
    let only = ctx.args.only.clone();
    let result = if named_parts(&only) {
        let wants_matrix = only.contains(&Part::Leases) || only.contains(&Part::Redis);
        let leases = if wants_matrix { matrix(ctx, &scratch).map(|_| ()) } else { Ok(()) };
        leases.and_then(|()| {
            if only.contains(&Part::Durable) {
                net_durable::cells(ctx, &scratch).map(|b| (Vec::new(), Some(b)))
            } else {
                Ok((Vec::new(), None))
            }
        })
    } else {
        matrix(ctx, &scratch)
    };
    let _ = std::fs::remove_dir_all(&scratch);
    let (memory, bounds) = result.map_err(fail)?;
    write(ctx, &memory, bounds.as_ref())
}

/// Does `--only` name parts of the network matrix (durable, leases, redis) and
/// nothing else? Those then run alone.
fn named_parts(only: &[Part]) -> bool {
    !only.is_empty() && only.iter().all(|p| matches!(p, Part::Durable | Part::Leases | Part::Redis))
}

/// RSS figures: (server, KiB before, KiB with the idle connections).
type Memory = Vec<(&'static str, u64, u64)>;

fn matrix(ctx: &mut Ctx, scratch: &Path) -> Result<(Memory, Option<Bounds>), String> {
    let dir = ctx.dir.clone();
    let smoke = ctx.args.smoke;
    let scale = |n: u64| whole(if smoke { (n / 100).max(2560) } else { n });
    // TLS listeners too, when the test certificates can be made (else the
    // TLS cells say why).
    let certs = make_certs(scratch);
    let tvmq = start_tvmq(&dir, scratch, certs.as_deref().ok())?;
    // A redis-server built without TLS refuses --tls-port: then without.
    let redis = match start_redis(scratch, certs.as_deref().ok()) {
        Ok(r) => r,
        Err(e) if certs.is_ok() => {
            eprintln!("redis-server with --tls-port: {e}; its TLS cells are left out");
            start_redis(scratch, None)?
        }
        Err(e) => return Err(e),
    };
    let both = [&tvmq, &redis];
    // `--only leases` (with or without `durable`, which `run` runs): the
    // lease cells alone.
    if named_parts(&ctx.args.only) {
        if ctx.args.only.contains(&Part::Leases) {
            net_lease::cells(ctx, both, &dir);
        }
        if let (true, Some(driver)) = (ctx.args.only.contains(&Part::Redis), ctx.args.net_driver.clone()) {
            net_redis::cells(ctx, &redis, &driver)?;
        }
        return Ok((Vec::new(), None));
    }
    // Warm up both (connections, first faults of tvmq's queue and redis's allocator).
    for t in both {
        push_then_pop(t, &dir, Via::Tcp, scale(200_000), 304, true)?;
    }

    for via in [Via::Tcp, Via::Unix] {
        let section = if via == Via::Tcp { "pipelined, TCP" } else { "pipelined, unix socket" };
        let n = scale(2_000_000);
        let tests = [
            ("LPUSH -P 64 -c 4", TVMQ),
            ("RPOP -P 64 -c 4", TVMQ),
            ("LPUSH -P 64 -c 4", REDIS),
            ("RPOP -P 64 -c 4", REDIS),
        ];
        measuring(section, "");
        ctx.measure_group(section, &tests, "", n, 304, |_| {
            let mut ms = push_then_pop(&tvmq, &dir, via, n, 304, true)?;
            ms.extend(push_then_pop(&redis, &dir, via, n, 304, true)?);
            Ok(ms)
        });

        let section = if via == Via::Tcp { "one client, TCP" } else { "one client, unix socket" };
        let n = if smoke { 2000 } else { 40_000 };
        let tests =
            [("PING_MBULK -c 1", TVMQ), ("LPUSH -c 1", TVMQ), ("PING_MBULK -c 1", REDIS), ("LPUSH -c 1", REDIS)];
        measuring(section, "");
        ctx.measure_group(section, &tests, "", n, 304, |_| {
            let mut ms = Vec::new();
            for t in both {
                fresh_list(t, &dir, n + 1000, 304)?;
                ms.push(benchmark(t, via, "ping", "PING_MBULK", n, &["-c", "1"])?);
                ms.push(benchmark(t, via, "lpush", "LPUSH", n, &["-c", "1", "-d", "304"])?);
            }
            Ok(ms)
        });
    }

    if let Err(e) = &certs {
        eprintln!("the TLS cells: {e}");
    }
    tls_cells(ctx, both, &dir, smoke);

    let n = scale(500_000);
    measuring("50 clients, TCP", "");
    ctx.measure_group("50 clients, TCP", &[("LPUSH -c 50", TVMQ), ("LPUSH -c 50", REDIS)], "", n, 304, |_| {
        let mut ms = Vec::new();
        for t in both {
            fresh_list(t, &dir, n + 1000, 304)?;
            ms.push(benchmark(t, Via::Tcp, "lpush", "LPUSH", n, &["-c", "50", "-d", "304"])?);
        }
        Ok(ms)
    });

    for size in [20u64, 100, 512, 1024, 2048, 5120, 10240, 20480] {
        // About 400 MB a run (and at most 1,000,000 values).
        let n = scale((400_000_000 / size).min(1_000_000));
        let param = format!("{size} B");
        measuring("value size, LPUSH -P 64 -c 4, TCP", &param);
        ctx.measure_group(
            "value size, LPUSH -P 64 -c 4, TCP",
            &[("LPUSH", TVMQ), ("LPUSH", REDIS)],
            &param,
            n,
            size,
            |_| {
                let mut ms = Vec::new();
                for t in both {
                    ms.extend(push_then_pop(t, &dir, Via::Tcp, n, size, false)?);
                }
                Ok(ms)
            },
        );
    }
    for t in both {
        fresh_list(t, &dir, 1000, 304)?;
    }
    net_lease::cells(ctx, both, &dir);
    let mut bounds = None;
    if ctx.args.wants(crate::args::Part::Durable) {
        bounds = Some(net_durable::cells(ctx, scratch)?);
    }
    if let Some(driver) = ctx.args.net_driver.clone() {
        net_client::cells(ctx, both, &driver)?;
        net_redis::cells(ctx, &redis, &driver)?;
        let _ = tvm::Queue::drop_queue(&dir, 21);
    }

    // The server lets go of the dropped queues' mappings within a second.
    std::thread::sleep(Duration::from_millis(1500));
    let conns = if smoke { 500 } else { 5000 };
    let mut memory = Vec::new();
    for t in both {
        ctx.progress(&format!("memory: {} with {conns} idle connections", t.name));
        let (before, with) = idle_memory(t, conns)?;
        memory.push((t.name, before, with));
    }
    Ok((memory, bounds))
}

/// The target of a row, and whether it is met (given tvmq's and redis's rates).
fn target(cells: &[Cell], c: &Cell, tvmq: f64, redis: f64) -> String {
    let ratio = tvmq / redis;
    let check = |ok: bool| if ok { "met" } else { "MISSED" };
    match (c.section, c.test.as_str()) {
        (net_durable::SECTION, _) => net_durable::target(&c.param, ratio),
        (s, _) if s.starts_with("TLS") && c.param != "TLS" => String::new(),
        (s, t) if s.starts_with("TLS") => {
            let tcp = |subject| rate(cells, s, t, "TCP", subject).unwrap_or(f64::NAN);
            let (a, b) = (tcp(TVMQ), tcp(REDIS));
            if t.contains("-k 0") {
                // A connection per request: the difference is the handshake's cost.
                let ms = |tls: f64, tcp: f64| 1e3 / tls - 1e3 / tcp;
                format!("handshake: +{:.2} ms tvmq, +{:.2} ms redis a connection", ms(tvmq, a), ms(redis, b))
            } else {
                format!("TLS/TCP: {:.2}x tvmq, {:.2}x redis", tvmq / a, redis / b)
            }
        }
        (s, "LPUSH -P 64 -c 4" | "RPOP -P 64 -c 4") if s.ends_with("TCP") => {
            format!(">= 2x redis: {} ({ratio:.2}x)", check(ratio >= 2.0))
        }
        (s, "LPUSH -c 1") => {
            let ping = rate(cells, s, "PING_MBULK -c 1", "", REDIS).unwrap_or(f64::INFINITY);
            format!(">= redis PING_MBULK -c 1: {} ({:.2}x)", check(tvmq >= ping), tvmq / ping)
        }
        (_, "LPUSH -c 50") => format!(">= 1.5x redis: {} ({ratio:.2}x)", check(ratio >= 1.5)),
        (s, t) if s.contains("unix") && t != "PING_MBULK -c 1" => {
            let tcp = rate(cells, &s.replace("unix socket", "TCP"), t, "", TVMQ).unwrap_or(f64::INFINITY);
            format!("faster than TCP: {} ({:.2}x TCP)", check(tvmq > tcp), tvmq / tcp)
        }
        (s, _) if s.starts_with("value size") => format!(">= redis: {} ({ratio:.2}x)", check(ratio >= 1.0)),
        (net_lease::SECTION, t) if t.starts_with("lease") => {
            let pop = t.replacen("lease + ack", "pop", 1);
            let plain = rate(cells, net_lease::SECTION, &pop, "", TVMQ).unwrap_or(f64::NAN);
            format!(
                ">= 2x redis BLMOVE+LREM: {} ({ratio:.2}x); >= 0.5x tvmq pop: {} ({:.2}x)",
                check(ratio >= 2.0),
                check(tvmq / plain >= 0.5),
                tvmq / plain
            )
        }
        _ => String::new(),
    }
}

fn table(cells: &[Cell], memory: &Memory, bounds: Option<&Bounds>, ctx: &Ctx) -> String {
    let mut t = String::new();
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let redis_version = Command::new("redis-server")
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).split_whitespace().nth(2).unwrap_or("").to_string())
        .unwrap_or_default();
    let _ = writeln!(t, "tvmq bench --net on {}", report::machine());
    let _ = writeln!(
        t,
        "tvmq serve --threads {THREADS} (redis-benchmark takes most of one core), redis-server, redis-benchmark: all on this machine"
    );
    let _ = writeln!(
        t,
        "redis-benchmark requests/s, median of {} run(s) (min-max); CPU us/request: the server's user+system time per request (tvmq / redis);\nredis-server {redis_version} with --save '' --appendonly no (the durable cells: appendonly yes, appendfsync always); values of 304 bytes unless told; load average at the end: {}{}",
        cells.iter().map(|c| c.ms.len()).max().unwrap_or(0),
        load.split_whitespace().take(3).collect::<Vec<_>>().join(" "),
        if ctx.args.smoke { " (SMOKE RUN: small counts, figures not meaningful)" } else { "" }
    );
    let mut sections: Vec<&str> = Vec::new();
    for c in cells.iter().filter(|c| c.section != net_client::SECTION && c.section != net_redis::SECTION) {
        if !sections.contains(&c.section) {
            sections.push(c.section);
        }
    }
    for s in sections {
        let _ = writeln!(t, "\n{s}");
        let _ = writeln!(
            t,
            "{:<20} | {:<30} | {:<30} | {:<7} | {:<15} | target",
            "", TVMQ, REDIS, "ratio", "CPU us/request"
        );
        let mut rows: Vec<(String, String)> = Vec::new();
        for c in cells.iter().filter(|c| c.section == s) {
            if !rows.contains(&(c.test.clone(), c.param.clone())) {
                rows.push((c.test.clone(), c.param.clone()));
            }
        }
        for (test, param) in rows {
            let find = |subj| cell::find(cells, s, &test, &param, subj);
            let text = |c: Option<&Cell>| match c {
                Some(c) if c.error.is_some() => {
                    format!("error: {}", c.error.as_deref().unwrap_or("").chars().take(60).collect::<String>())
                }
                Some(c) => match c.rates() {
                    Some((med, lo, hi)) => {
                        let mb = if s.starts_with("value size") {
                            format!(" {:.0} MB/s", med * c.record_bytes as f64 / 1e6)
                        } else {
                            String::new()
                        };
                        format!("{}{mb} ({:.0}-{:.0} K)", kilo(med), lo / 1e3, hi / 1e3)
                    }
                    None => "-".into(),
                },
                None => "-".into(),
            };
            let (a, b) = (find(TVMQ), find(REDIS));
            let (ra, rb) = (rate(cells, s, &test, &param, TVMQ), rate(cells, s, &test, &param, REDIS));
            let (ratio, goal) = match (a, ra, rb) {
                (Some(c), Some(x), Some(y)) => (format!("{:.2}x", x / y), target(cells, c, x, y)),
                _ => ("-".into(), String::new()),
            };
            let label = if param.is_empty() { test.clone() } else { format!("{test} {param}") };
            let row = test.split(' ').next().unwrap_or("");
            let cpu = match (cpu_per_request(s, &param, row, TVMQ), cpu_per_request(s, &param, row, REDIS)) {
                (Some(x), Some(y)) => format!("{x:.2} / {y:.2}"),
                _ => "-".into(),
            };
            let _ = writeln!(t, "{label:<20} | {:<30} | {:<30} | {ratio:<7} | {cpu:<15} | {goal}", text(a), text(b));
            // The durable cells' client ceiling: the same cell to a plain queue.
            if let Some(p) = find(net_durable::PLAIN) {
                let (ratio, goal) = match (rate(cells, s, &test, &param, net_durable::PLAIN), rb) {
                    (Some(x), Some(y)) => (format!("{:.2}x", x / y), net_durable::ceiling(&param, x / y)),
                    _ => ("-".into(), String::new()),
                };
                let cpu = cpu_per_request(s, &net_durable::plain_param(&param), row, TVMQ)
                    .map_or("-".into(), |x| format!("{x:.2} / -"));
                let _ = writeln!(
                    t,
                    "{:<20} | {:<30} | {:<30} | {ratio:<7} | {cpu:<15} | {goal}",
                    "  plain (ceiling)",
                    text(Some(p)),
                    "-"
                );
            }
            // The durable cells' design ceilings: the same cell to each lean server.
            for design in Design::ALL {
                let (name, design) = (design.subject(), design.name());
                let Some(l) = find(name) else { continue };
                let (ratio, goal) = match (rate(cells, s, &test, &param, name), rb) {
                    (Some(x), Some(y)) => (format!("{:.2}x", x / y), net_durable::design(&param, x / y)),
                    _ => ("-".into(), String::new()),
                };
                let cpu = cpu_per_request(s, &param, row, name).map_or("-".into(), |x| format!("{x:.2} / -"));
                let label = format!("  {design} (design)");
                let _ =
                    writeln!(t, "{label:<20} | {:<30} | {:<30} | {ratio:<7} | {cpu:<15} | {goal}", text(Some(l)), "-");
            }
        }
        if let (net_durable::SECTION, Some(b)) = (s, bounds) {
            t.push_str(&net_durable::notes(b, cells));
        }
    }
    t.push_str(&net_client::table(cells));
    t.push_str(&net_redis::table(cells));
    let _ = writeln!(t, "\nResident memory (VmRSS), idle and with idle connections open (each sent one PING)");
    for (name, before, with) in memory {
        let n = if ctx.args.smoke { 500 } else { 5000 };
        let _ = writeln!(
            t,
            "{name:<12} {:>8} KiB idle, {:>8} KiB with {n} connections: {:.1} KiB per connection",
            before,
            with,
            with.saturating_sub(*before) as f64 / n as f64
        );
    }
    t
}

fn write(ctx: &Ctx, memory: &Memory, bounds: Option<&Bounds>) -> Result<(), Error> {
    let out = &ctx.args.out;
    let io =
        |e: std::io::Error| Error::new(tvm::error::SHM_ERR_ACCES, format!("cannot write to {}: {e}", out.display()));
    std::fs::create_dir_all(out).map_err(io)?;
    let text = table(&ctx.cells, memory, bounds, ctx);
    print!("{text}");
    std::fs::write(out.join("table.txt"), &text).map_err(io)?;
    let mut csv = report::csv(&ctx.cells);
    for (name, before, with) in memory {
        let _ = writeln!(
            csv,
            "memory,idle connections,{},{name},0,0,1,{before},{with},{with},,",
            if ctx.args.smoke { 500 } else { 5000 }
        );
    }
    if let Some(b) = bounds {
        csv.push_str(&net_durable::csv_rows(b));
    }
    std::fs::write(out.join("results.csv"), csv).map_err(io)?;
    match chart(&ctx.cells, &out.join("chart.png")) {
        Ok(()) => println!("\nwrote {0}/table.txt, {0}/results.csv, {0}/chart.png", out.display()),
        Err(e) => println!("\nwrote {0}/table.txt, {0}/results.csv; no chart: {e}", out.display()),
    }
    Ok(())
}

/// chart.png: tvmq serve's rate over redis-server's for each cell (left),
/// MB/s against value size for both (right).
fn chart(cells: &[Cell], path: &Path) -> Result<(), String> {
    use plotters::prelude::*;
    chart::load_font()?;
    let e = |x: &dyn std::fmt::Display| x.to_string();
    let root = BitMapBackend::new(path, (1400, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let (left, right) = root.split_horizontally(820);
    let colors = [(TVMQ, RGBColor(200, 30, 30)), (REDIS, RGBColor(30, 90, 200))];

    let mut rows: Vec<(String, &str, &str)> = Vec::new();
    let charted = |c: &&Cell| {
        !c.section.starts_with("value size")
            && !c.section.starts_with("TLS")
            && c.section != net_client::SECTION
            && c.section != net_redis::SECTION
    };
    for c in cells.iter().filter(charted) {
        let label = format!("{} ({})", c.test, c.section.split(", ").last().unwrap_or(""));
        if !rows.iter().any(|r| r.0 == label) {
            rows.push((label, c.section, Box::leak(c.test.clone().into_boxed_str())));
        }
    }
    // tvmq serve's rate over redis-server's, both measured in the same run.
    let ratios: Vec<(usize, f64)> = rows
        .iter()
        .enumerate()
        .filter_map(|(i, r)| Some((i, rate(cells, r.1, r.2, "", TVMQ)? / rate(cells, r.1, r.2, "", REDIS)?)))
        .collect();
    let top = ratios.iter().map(|r| r.1).fold(2.0, f64::max) * 1.1;
    let mut ch = ChartBuilder::on(&left)
        .caption("tvmq serve / redis-server, requests/s (same run)", ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(230)
        .build_cartesian_2d(0f64..top, 0f64..rows.len() as f64)
        .map_err(|x| e(&x))?;
    let labels: Vec<String> = rows.iter().map(|r| r.0.clone()).collect();
    ch.configure_mesh()
        .disable_y_mesh()
        .y_labels(rows.len() * 2 + 1)
        .y_label_formatter(&|y| {
            let i = (*y - 0.5).round();
            if (y - 0.5 - i).abs() < 1e-6 && i >= 0.0 {
                labels.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .x_desc("times redis-server's rate (1 = as fast)")
        .draw()
        .map_err(|x| e(&x))?;
    let red = colors[0].1;
    ch.draw_series(
        ratios.iter().map(|&(i, v)| Rectangle::new([(0.0, i as f64 + 0.2), (v, i as f64 + 0.8)], red.filled())),
    )
    .map_err(|x| e(&x))?;
    ch.draw_series(std::iter::once(PathElement::new(
        vec![(1.0, 0.0), (1.0, rows.len() as f64)],
        BLACK.stroke_width(2),
    )))
    .map_err(|x| e(&x))?;

    let series = |subject: &str| -> Vec<(f64, f64)> {
        cells
            .iter()
            .filter(|c| c.section.starts_with("value size") && c.subject == subject && c.error.is_none())
            .filter_map(|c| Some(((c.record_bytes as f64).log10(), c.rates()?.0 * c.record_bytes as f64 / 1e6)))
            .collect()
    };
    let all: Vec<(f64, f64)> = colors.iter().flat_map(|(s, _)| series(s)).collect();
    let top = all.iter().map(|p| p.1).fold(1.0, f64::max) * 1.15;
    let mut ch = ChartBuilder::on(&right)
        .caption("LPUSH -P 64 -c 4 by value size (MB/s)", ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(56)
        .build_cartesian_2d(1.2f64..4.4f64, 0f64..top)
        .map_err(|x| e(&x))?;
    ch.configure_mesh()
        .x_desc("value bytes")
        .x_label_formatter(&|x| format!("{:.0}", 10f64.powf(*x)))
        .y_desc("MB / s")
        .draw()
        .map_err(|x| e(&x))?;
    for (subject, color) in colors {
        chart::draw_line(&mut ch, subject, color, series(subject))?;
    }
    chart::legend(&mut ch).position(SeriesLabelPosition::UpperLeft).draw().map_err(|x| e(&x))?;
    root.present().map_err(|x| e(&x))
}
