//! The "beyond one machine" cells of `make bench-net`, on the redis-server
//! of the other cells (with the C client, `bench/drivers/net_driver.c`):
//!
//! - leases: `lTvmPopLease` + `lTvmAck` (tvmq's lease script, one EVALSHA
//!   each: fenced, counted, delivery limit, dead letters, no daemon)
//!   beside Redis's reliable-queue pattern written by hand, `BLMOVE` to a
//!   processing list then `LREM` (no count, no limit, no fencing, and a
//!   consumer's dead records stay in its processing list until a reaper
//!   moves them), each a round trip of its own as the C client's two calls
//!   are, 1 and 4 consumers;
//! - replicas: `lTvmPush` with `lTvmRequireReplicas(p, 1, ...)` (WAIT
//!   pipelined with each push) beside `lTvmPush` alone, on the same
//!   server with one replica attached (started here), 1 and 4 threads.
//!
//! Each group runs its subjects alternately within a round.

use crate::cell::{self, Cell};
use crate::ctx::Ctx;
use crate::harness::{KillOnDrop, ask, free_port};
use crate::net_client::drive_with;
use crate::net_lease::hand_written;
use crate::net_servers::{REDIS, Target, kilo, measuring};
use std::fmt::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The section's name in the table and the CSV.
pub(crate) const SECTION: &str = "Redis beyond one machine, C client, TCP";
const LEASE: &str = "lTvmPopLease + lTvmAck";
const HAND: &str = "BLMOVE + LREM by hand";
const PUSH: &str = "lTvmPush";
const PUSH_WAIT: &str = "lTvmPush, 1 replica required";
/// The queue the driver uses (key "21") and its lease keys.
const KEYS: &str = "21 {21}:stage {21}:retry {21}:leased {21}:rec {21}:dlv {21}:delayed {21}:opts {21}:stats {21}:seq";

/// A replica of the server on `master`, until dropped.
fn replica_of(master: u16) -> Result<KillOnDrop, String> {
    let port = free_port()?;
    let child = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
        .args(["--replicaof", "127.0.0.1", &master.to_string()])
        .stdout(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start a replica: {e}"))?;
    let child = KillOnDrop(child);
    let until = Instant::now() + Duration::from_secs(20);
    while Instant::now() < until {
        if ask(master, "INFO replication").is_ok_and(|i| i.contains("state=online")) {
            return Ok(child);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err("the replica did not come online within 20 s".into())
}

/// The cells, against `redis` (the cells' redis-server).
pub(crate) fn cells(ctx: &mut Ctx, redis: &Target, driver: &Path) -> Result<(), String> {
    let smoke = ctx.args.smoke;
    let dir = ctx.dir.clone();
    for consumers in [1u32, 4] {
        let n = if smoke { 2_000 } else { 10_000 * u64::from(consumers) };
        let param = format!("{consumers} consumer{}", if consumers == 1 { "" } else { "s" });
        measuring(SECTION, &param);
        ctx.measure_group(SECTION, &[(LEASE, REDIS), (HAND, REDIS)], &param, n, 304, |_| {
            ask(redis.port, &format!("DEL {KEYS}"))?;
            let a = drive_with(driver, redis.port, "lease", consumers, n, &[])?;
            let b = hand_written(redis, &dir, n, consumers as usize)?;
            Ok(vec![a, b])
        });
    }
    ask(redis.port, &format!("DEL {KEYS}"))?;
    let replica = replica_of(redis.port)?;
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
        let (a, b) = if param.contains("replica") { (PUSH_WAIT, PUSH) } else { (LEASE, HAND) };
        let find = |test: &str| cell::find(cells, SECTION, test, param, REDIS);
        let goal = match (rate(a, param), rate(b, param)) {
            (Some(x), Some(y)) if a == LEASE => {
                format!(">= BLMOVE+LREM: {} ({:.2}x)", if x >= y { "met" } else { "MISSED" }, x / y)
            }
            (Some(x), Some(y)) => format!("{:.2}x without", x / y),
            _ => String::new(),
        };
        let _ = writeln!(t, "{:<22} | {a}: {:<26} | {b}: {:<26} | {goal}", param, show(find(a)), show(find(b)));
    }
    t
}
