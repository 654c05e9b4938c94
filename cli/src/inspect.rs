//! `tvmq list`, `tvmq stat`, `tvmq peek` (text, or one JSON document with
//! `--json`; the keys are documented in `docs/cli-json.md`) and `tvmq repair`.

use crate::create::count;
use serde_json::{Value, json};
use std::path::Path;
use tvm::{Error, Field, FieldValue, Peeked, Queue, QueueInfo};

/// Prints a JSON document on one line.
fn print_json(v: &Value) {
    println!("{v}");
}

pub fn list(dir: &Path, as_json: bool) -> Result<(), Error> {
    let ids = tvm::queue_ids(dir)?;
    if as_json {
        let queues: Vec<Value> = ids
            .iter()
            .map(|&id| match Queue::inspect(dir, id) {
                Ok(q) => json!({
                    "id": id,
                    "name": q.info().name,
                    "record_size": q.info().record_size,
                    "capacity": q.info().capacity,
                    "depth": q.depth(),
                    "file": q.path(),
                }),
                Err(e) => json!({ "id": id, "error": e.to_string() }),
            })
            .collect();
        print_json(&json!({ "dir": dir, "queues": queues }));
        return Ok(());
    }
    println!("{:>10}  {:<16} {:>10} {:>12} {:>12}  FILE", "ID", "NAME", "RECORD", "CAPACITY", "DEPTH");
    for id in ids {
        match Queue::inspect(dir, id) {
            Ok(q) => {
                let i = q.info();
                println!(
                    "{id:>10}  {:<16} {:>10} {:>12} {:>12}  {}",
                    tvm::escape_word(i.name.as_bytes()),
                    i.record_size,
                    i.capacity,
                    q.depth(),
                    q.path().display()
                );
            }
            Err(e) => println!("{id:>10}  (unreadable: {e})"),
        }
    }
    Ok(())
}

fn time(ns: u64) -> String {
    if ns == 0 {
        return "never".into();
    }
    let secs = (ns / 1_000_000_000) as i64;
    // SAFETY: libc::tm is plain data; all-zero is a valid value for gmtime_r to fill.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    let t = secs as libc::time_t;
    // SAFETY: gmtime_r with valid pointers.
    unsafe { libc::gmtime_r(&t, &mut tm) };
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02} UTC",
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec
    )
}

/// What blocking pops do on an empty queue, as the queue was created.
fn spin_text(spin_us: Option<i64>) -> String {
    match spin_us {
        None => "default (spin at most 5 us while such spins catch records, then sleep)".into(),
        Some(-1) => "spin, never sleep".into(),
        Some(us) => format!("spin {us} us, then sleep"),
    }
}

/// A duration in nanoseconds, for people.
fn took(ns: u64) -> String {
    if ns >= 10_000_000 { format!("{} ms", ns / 1_000_000) } else { format!("{:.2} ms", ns as f64 / 1e6) }
}

/// The `durability` object of `tvmq stat --json` (null for a queue that is not durable).
fn durability_json(q: &Queue) -> Value {
    let Some(d) = q.durable_stats() else { return Value::Null };
    let recovery = d.last_recovery.map_or(Value::Null, |r| {
        json!({
            "at_ns": r.at_ns, "kept": r.kept, "torn": r.torn, "stale": r.stale, "moved": r.moved,
            "holes": r.holes, "watermark": r.watermark, "runs": r.runs,
        })
    });
    json!({
        "policy": d.policy.to_string(),
        "window_ms": d.policy.window().as_millis() as u64,
        "last_sync_ns": d.last_sync_ns,
        "last_sync_took_ns": d.last_sync_took_ns,
        "syncs": d.syncs,
        "sync_failures": d.failures,
        "dirty": d.dirty,
        "watermark": d.watermark,
        "recovery_pending": d.recovery_pending,
        "last_recovery": recovery,
    })
}

/// The durability lines of `tvmq stat`.
fn durability_text(q: &Queue) {
    let Some(d) = q.durable_stats() else {
        println!("durable          no (survives process crashes, not a machine crash)");
        return;
    };
    let window = match d.policy {
        tvm::Durability::Always => "a push or pop returns once it is on disk".to_string(),
        tvm::Durability::Interval(ms) => format!("a machine crash may lose the last {ms} ms of changes"),
    };
    println!("durable          {} ({window})", d.policy);
    let last = if d.last_sync_ns == 0 {
        "never".to_string()
    } else {
        format!("{} (took {})", time(d.last_sync_ns), took(d.last_sync_took_ns))
    };
    println!("last sync        {last}");
    println!(
        "syncs            {} ({} failed){}",
        d.syncs,
        d.failures,
        if d.dirty { ", changes waiting for the next" } else { "" }
    );
    println!("consumed mark    {} (positions below it were consumed as of the last sync)", d.watermark);
    if d.recovery_pending {
        println!("restart recovery pending (the machine restarted; the next process to attach rebuilds the queue)");
    }
    match d.last_recovery {
        None => println!("restart recovery never"),
        Some(r) => println!(
            "restart recovery {}: {} kept, {} and {} dropped, {} moved, {} skipped (run {})",
            time(r.at_ns),
            count(r.kept, "record"),
            count(r.torn, "torn or unwritten slot"),
            count(r.stale, "consumed record"),
            r.moved,
            count(r.holes, "hole"),
            r.runs
        ),
    }
}

fn fields_json(i: &QueueInfo) -> Vec<Value> {
    i.fields
        .iter()
        .map(|f| json!({ "name": f.name, "offset": f.offset, "length": f.len, "kind": f.kind.c_name() }))
        .collect()
}

pub fn stat(dir: &Path, id: u32, as_json: bool) -> Result<(), Error> {
    let q = Queue::inspect(dir, id)?;
    let i = q.info();
    let s = q.stats();
    let procs = q.processes();
    if as_json {
        print_json(&json!({
            "id": id,
            "name": i.name,
            "partition": i.part,
            "file": q.path(),
            "layout_version": i.version,
            "mode": format!("{:04o}", i.mode),
            "created_ns": i.created_ns,
            "record_size": i.record_size,
            "slot_bytes": i.slot_stride,
            "capacity": i.capacity,
            "file_size": i.file_size,
            "unblock_timeout_ms": i.unblock_timeout_ms,
            "spin_us": i.spin_us,
            "depth": s.depth,
            "pushed": s.pushed,
            "popped": s.popped,
            "waiters": s.waiters,
            "dropped": s.dropped,
            "recovered_pushes": s.recovered_pushes,
            "recovered_pops": s.recovered_pops,
            "robbed": s.robbed,
            "reconciled_waiters": s.reconciled_waiters,
            "last_recovery_ns": s.last_recovery_ns,
            "durability": durability_json(&q),
            "processes": procs.iter().map(|p| json!({
                "entry": p.entry, "pid": p.pid, "since_ns": p.since_ns, "sleepers": p.sleepers,
            })).collect::<Vec<_>>(),
            "fields": fields_json(i),
            "leases": crate::leases::stat_json(&q),
        }));
        return Ok(());
    }
    println!("queue            {id}");
    // Words that any creator chose: escaped, so that they cannot pass for
    // other lines or columns (or drive the terminal).
    println!("name             {}", tvm::escape_word(i.name.as_bytes()));
    println!("partition        {}", tvm::escape_word(i.part.as_bytes()));
    println!("file             {}", q.path().display());
    println!("layout version   {}", i.version);
    println!("mode             {:04o}", i.mode);
    println!("created          {}", time(i.created_ns));
    println!("record size      {} bytes (slot {} bytes)", i.record_size, i.slot_stride);
    println!("capacity         {} records", i.capacity);
    println!("file size        {} bytes", i.file_size);
    println!("unblock timeout  {} ms", i.unblock_timeout_ms);
    println!("pop wait         {}", spin_text(i.spin_us));
    durability_text(&q);
    println!("depth            {}", s.depth);
    println!("pushed           {}", s.pushed);
    println!("popped           {}", s.popped);
    println!("waiters          {}", s.waiters);
    println!("dropped          {}", if s.dropped { "yes" } else { "no" });
    println!("recovered pushes {} (claims of dead producers skipped)", s.recovered_pushes);
    println!("recovered pops   {} (records of dead consumers delivered again)", s.recovered_pops);
    println!("robbed calls     {} (stalled calls whose slot was recovered)", s.robbed);
    println!("reconciled       {} (sleepers of dead processes uncounted)", s.reconciled_waiters);
    println!("last recovery    {}", time(s.last_recovery_ns));
    crate::leases::stat_text(&q);
    println!("processes        {}", procs.len());
    for p in procs {
        println!("  entry {:>4}  pid {:>8}  since {}  asleep {}", p.entry, p.pid, time(p.since_ns), p.sleepers);
    }
    println!("fields           {}", i.fields.len());
    for f in &i.fields {
        let name = tvm::escape_word(f.name.as_bytes());
        println!("  {name:<31} offset {:>6}  length {:>6}  {}", f.offset, f.len, f.kind.c_name());
    }
    Ok(())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A field's value in JSON, as the library decodes it ([`Field::value`]:
/// numbers in this machine's byte order, as the queue holds them):
/// strings up to their NUL, integers and doubles by their length, bytes in
/// hex otherwise.
fn field_value(f: &Field, rec: &[u8]) -> Value {
    match f.value(rec) {
        FieldValue::Text(t) => Value::String(String::from_utf8_lossy(t).into_owned()),
        FieldValue::Long(v) => json!(v),
        FieldValue::Float(v) => json!(v),
        FieldValue::Double(v) => json!(v),
        FieldValue::Bytes(b) => Value::String(hex(b)),
    }
}

/// A record decoded by the queue's field list, or `None` without one.
fn decode(i: &QueueInfo, rec: &[u8]) -> Option<serde_json::Map<String, Value>> {
    if i.fields.is_empty() {
        return None;
    }
    // A record shorter than the layout: the missing bytes are zero, as pop delivers them.
    let mut full = rec.to_vec();
    full.resize(usize::try_from(i.record_size).unwrap_or(0).max(rec.len()), 0);
    Some(i.fields.iter().map(|f| (f.name.clone(), field_value(f, &full))).collect())
}

pub fn peek(dir: &Path, id: u32, count: usize, as_json: bool, leases: bool) -> Result<(), Error> {
    let q = Queue::inspect(dir, id)?;
    let i = q.info();
    if leases {
        return crate::leases::peek(&q, id, count, as_json, |rec| match decode(i, rec) {
            Some(fields) => ("fields", Value::Object(fields)),
            None => ("hex", Value::String(hex(rec))),
        });
    }
    let seen = q.peek(count);
    if as_json {
        let records: Vec<Value> = seen
            .iter()
            .map(|(pos, p)| match p {
                Peeked::Record(rec) => {
                    let mut v = json!({ "position": pos, "state": "record", "length": rec.len() });
                    match decode(i, rec) {
                        Some(fields) => v["fields"] = Value::Object(fields),
                        None => v["hex"] = Value::String(hex(rec)),
                    }
                    v
                }
                Peeked::Skipped => json!({ "position": pos, "state": "skipped" }),
                Peeked::Busy => json!({ "position": pos, "state": "busy" }),
            })
            .collect();
        print_json(&json!({ "id": id, "depth": q.depth(), "records": records }));
        return Ok(());
    }
    println!("queue {id}: {} queued, showing {}", crate::create::count(q.depth(), "record"), seen.len());
    for (pos, p) in &seen {
        match p {
            Peeked::Record(rec) => match decode(i, rec) {
                Some(fields) => {
                    let text: Vec<String> = fields.iter().map(|(k, v)| format!("{k}={v}")).collect();
                    println!("{pos:>12}  {}", text.join(" "));
                }
                None => println!("{pos:>12}  ({} bytes) {}", rec.len(), hex(rec)),
            },
            Peeked::Skipped => println!("{pos:>12}  (skipped: an abandoned push)"),
            Peeked::Busy => println!("{pos:>12}  (busy: being written or taken)"),
        }
    }
    Ok(())
}

pub fn repair(dir: &Path, id: u32) -> Result<(), Error> {
    // Opening registers this process; that alone repairs after a death.
    let q = Queue::open_with(dir, id, false)?;
    let (at_open, r) = (q.repaired_at_open(), q.repair());
    let removed = Queue::remove_stale_temporaries(dir, id);
    let orphans = Queue::remove_orphaned_live_parts();
    println!(
        "queue {id}: {} of dead consumers published again, {} of dead producers skipped, \
         {} of dead processes uncounted, {} removed; {} of removed queues ({} bytes) and {} of their \
         temporary file(s) removed{}",
        count(r.recovered_pops + at_open.recovered_pops, "record"),
        count(r.recovered_pushes + at_open.recovered_pushes, "claim"),
        count(u64::from(r.reconciled_waiters + at_open.reconciled_waiters), "sleeper"),
        count(removed as u64, "stale temporary file"),
        count(orphans.live_parts, "orphaned live part"),
        orphans.bytes,
        orphans.temporaries,
        if r.alone {
            ""
        } else {
            "; other processes are attached: holders that could not be identified were left to the unblock timeout"
        }
    );
    Ok(())
}

pub fn sync(dir: &Path, id: u32) -> Result<(), Error> {
    let started = std::time::Instant::now();
    let q = Queue::open_with(dir, id, false)?;
    q.sync()?;
    println!("queue {id}: synced to stable storage in {} ms", started.elapsed().as_millis());
    Ok(())
}
