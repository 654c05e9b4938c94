//! The "beyond one machine" cells of `make bench-net`, on the redis-server
//! of the other cells (with the C client, `bench/drivers/net_driver.c`):
//!
//! - leases: `lTvmPopLease` + `lTvmAck` (tvmq's lease script, one EVALSHA
//!   each: fenced, counted, delivery limit, dead letters, no daemon), and
//!   `lTvmAckPopLease` (the acknowledgement and the next lease in one
//!   run), beside Redis's reliable-queue pattern written by hand in the
//!   same driver on raw sockets (`--op blmove`): `BLMOVE` to a processing
//!   list then `LREM` (no count, no limit, no fencing, and a dead
//!   consumer's records stay in its processing list until a reaper moves
//!   them), each a round trip, or the `LREM` in the same write as the next
//!   `BLMOVE`; 1 and 4 consumers;
//! - replicas: `lTvmPush` with `lTvmRequireReplicas(p, 1, ...)` (WAIT
//!   pipelined with each push) beside `lTvmPush` alone, on the same
//!   server with one replica attached (started here), 1 and 4 threads.
//!
//! Each group runs its subjects alternately within a round.

use crate::cell::{self, Cell};
use crate::ctx::Ctx;
use crate::harness::{KillOnDrop, ask, free_port};
use crate::net_client::drive_with;
use crate::net_servers::{REDIS, Target, kilo, measuring};
use std::fmt::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The section's name in the table and the CSV.
pub(crate) const SECTION: &str = "Redis beyond one machine, C client, TCP";
const LEASE: &str = "lTvmPopLease + lTvmAck";
const ACKPOP: &str = "lTvmAckPopLease";
const HAND: &str = "BLMOVE + LREM by hand";
const HAND_PIPE: &str = "BLMOVE + LREM by hand, LREM with the next BLMOVE";
const PUSH: &str = "lTvmPush";
const PUSH_WAIT: &str = "lTvmPush, 1 replica required";
/// The queue the driver uses (key "21") and its lease keys.
const KEYS: &str = "21 {21}:stage {21}:retry {21}:leased {21}:rec {21}:delayed {21}:opts {21}:stats {21}:seq {21}:dead";

/// A replica of the server on `master`, until dropped, and the file it
/// keeps its copy in (to remove after).
fn replica_of(master: u16) -> Result<(KillOnDrop, std::path::PathBuf), String> {
    let port = free_port()?;
    // The replica's files (the copy of the master it loads) in a directory
    // of the system's, never in the working directory.
    let dir = std::env::temp_dir();
    let file = format!("tvmq-bench-replica-{port}.rdb");
    let child = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
        .arg("--dir")
        .arg(&dir)
        .args(["--dbfilename", &file])
        .args(["--replicaof", "127.0.0.1", &master.to_string()])
        .stdout(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start a replica: {e}"))?;
    let child = KillOnDrop(child);
    let until = Instant::now() + Duration::from_secs(20);
    while Instant::now() < until {
        if ask(master, "INFO replication").is_ok_and(|i| i.contains("state=online")) {
            return Ok((child, dir.join(file)));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err("the replica did not come online within 20 s".into())
}

/// The cells, against `redis` (the cells' redis-server).
pub(crate) fn cells(ctx: &mut Ctx, redis: &Target, driver: &Path) -> Result<(), String> {
    let smoke = ctx.args.smoke;
    for consumers in [1u32, 4] {
        let n = if smoke { 2_000 } else { 10_000 * u64::from(consumers) };
        let param = format!("{consumers} consumer{}", if consumers == 1 { "" } else { "s" });
        measuring(SECTION, &param);
        let tests = [(LEASE, REDIS), (ACKPOP, REDIS), (HAND, REDIS), (HAND_PIPE, REDIS)];
        ctx.measure_group(SECTION, &tests, &param, n, 304, |_| {
            let mut ms = Vec::new();
            for (op, extra) in [("lease", &[][..]), ("ackpoplease", &[]), ("blmove", &[]), ("blmove", &["--pipelined"])]
            {
                ask(
                    redis.port,
                    &format!("DEL {KEYS} 21:processing:0 21:processing:1 21:processing:2 21:processing:3"),
                )?;
                ms.push(drive_with(driver, redis.port, op, consumers, n, extra)?);
            }
            Ok(ms)
        });
    }
    ask(redis.port, &format!("DEL {KEYS}"))?;
    let (replica, file) = replica_of(redis.port)?;
    for threads in [1u32, 4] {
        let n = if smoke { 2_000 } else { 10_000 * u64::from(threads) };
        let param = format!("{threads} thread{}, 1 replica", if threads == 1 { "" } else { "s" });
        measuring(SECTION, &param);
        ctx.measure_group(SECTION, &[(PUSH, REDIS), (PUSH_WAIT, REDIS)], &param, n, 304, |_| {
            ask(redis.port, "DEL 21")?;
            let a = drive_with(driver, redis.port, "push", threads, n, &[])?;
            ask(redis.port, "DEL 21")?;
            let b = drive_with(driver, redis.port, "push", threads, n, &["--replicas", "1"])?;
            Ok(vec![a, b])
        });
    }
    ask(redis.port, "DEL 21")?;
    drop(replica);
    let _ = std::fs::remove_file(file);
    // The master forgets the replica (its INFO no longer lists it) soon; the
    // cells after these do not use replicas.
    let _ = ask(redis.port, "REPLICAOF NO ONE");
    Ok(())
}

/// The section's table.
pub(crate) fn table(cells: &[Cell]) -> String {
    let mut t = String::new();
    if !cells.iter().any(|c| c.section == SECTION) {
        return t;
    }
    let _ = writeln!(t, "\n{SECTION}: records/s against one redis-server, median (min-max)");
    let show = |c: Option<&Cell>| match c.and_then(|c| c.rates()) {
        Some((med, lo, hi)) => format!("{} ({:.1}-{:.1} K)", kilo(med), lo / 1e3, hi / 1e3),
        None => c.and_then(|c| c.error.clone()).map_or("-".into(), |e| format!("error: {e:.40}")),
    };
    let rate = |test: &str, param: &str| cell::rate(cells, SECTION, test, param, REDIS);
    let mut params: Vec<&str> = Vec::new();
    for c in cells.iter().filter(|c| c.section == SECTION) {
        if !params.contains(&c.param.as_str()) {
            params.push(&c.param);
        }
    }
    for param in params {
        let find = |test: &str| cell::find(cells, SECTION, test, param, REDIS);
        if param.contains("replica") {
            let goal = match (rate(PUSH_WAIT, param), rate(PUSH, param)) {
                (Some(x), Some(y)) => format!("{:.2}x without", x / y),
                _ => String::new(),
            };
            let _ = writeln!(
                t,
                "{param:<22} | {PUSH_WAIT}: {} | {PUSH}: {} | {goal}",
                show(find(PUSH_WAIT)),
                show(find(PUSH))
            );
            continue;
        }
        let ratio = |a: &str, b: &str| match (rate(a, param), rate(b, param)) {
            (Some(x), Some(y)) => format!("{} ({:.2}x)", if x >= y { "met" } else { "MISSED" }, x / y),
            _ => "-".into(),
        };
        let _ = writeln!(
            t,
            "{param:<22} | {LEASE}: {} | {ACKPOP}: {} | {HAND}: {} | LREM pipelined: {} | >= by hand: two calls {}, one call {}; one call >= pipelined: {}",
            show(find(LEASE)),
            show(find(ACKPOP)),
            show(find(HAND)),
            show(find(HAND_PIPE)),
            ratio(LEASE, HAND),
            ratio(ACKPOP, HAND),
            ratio(ACKPOP, HAND_PIPE)
        );
    }
    t
}
