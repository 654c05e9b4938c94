//! What `tvmq stat` and `tvmq peek --leases` show of a queue with leases
//! (acknowledged consumption, docs/leases.md): its settings, the leases in
//! flight, the counters, and the records of its lease table.

use serde_json::{Value, json};
use std::time::Duration;
use tvm::{LeaseState, Queue};

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The `"leases"` value of `tvmq stat --json`: null for a plain queue.
pub fn stat_json(q: &Queue) -> Value {
    let (Some(l), Some(s)) = (&q.info().leases, q.lease_stats()) else { return Value::Null };
    json!({
        "lease_ms": l.lease_ms,
        "max_deliveries": l.max_deliveries,
        "dead_letter": l.dead_letter,
        "max_leases": l.max_leases,
        "in_flight": s.in_flight,
        "oldest_ms": s.oldest.map(ms),
        "waiting": s.waiting,
        "dead_letter_pending": s.dead_letter_pending,
        "redelivered": s.redelivered,
        "expired": s.expired,
        "orphaned": s.orphaned,
        "released": s.released,
        "dead_lettered": s.dead_lettered,
        "dropped": s.dropped,
        "late": s.late,
    })
}

/// The lines of `tvmq stat` about leases ("leases  no" for a plain queue).
pub fn stat_text(q: &Queue) {
    let (Some(l), Some(s)) = (&q.info().leases, q.lease_stats()) else {
        println!("leases           no (a plain queue)");
        return;
    };
    let limit = if l.max_deliveries == 0 { "no limit".to_string() } else { l.max_deliveries.to_string() };
    let dl = l.dead_letter.map_or("none (rejected records are dropped)".to_string(), |d| format!("queue {d}"));
    println!("leases           {} ms by default, at most {} in flight", l.lease_ms, l.max_leases);
    println!("  max deliveries {limit}");
    println!("  dead letter    {dl}");
    let oldest = s.oldest.map_or(String::new(), |d| format!(" (oldest {} ms)", ms(d)));
    println!("  in flight      {}{oldest}", s.in_flight);
    println!("  waiting        {} (to be delivered again)", s.waiting);
    println!("  redelivered    {} (records delivered again)", s.redelivered);
    println!("  expired        {} (leases that ran out)", s.expired);
    println!("  orphaned       {} (leases of consumers that died)", s.orphaned);
    println!("  released       {} (put back by their consumer)", s.released);
    println!(
        "  dead-lettered  {} (+ {} dropped, {} dead-letter pending)",
        s.dead_lettered, s.dropped, s.dead_letter_pending
    );
    println!("  late calls     {} (refused with LEASE_EXPIRED)", s.late);
}

fn state_name(s: LeaseState) -> &'static str {
    match s {
        LeaseState::Leased => "leased",
        LeaseState::Waiting => "waiting",
        LeaseState::DeadLetter => "dead-letter",
        LeaseState::Busy => "busy",
    }
}

/// `tvmq peek --leases`: the records of the lease table (leased, waiting
/// for another delivery, bound for the dead-letter queue), `decode` giving
/// each record's fields (or its hex, as `tvmq peek` does).
pub fn peek(
    q: &Queue,
    id: u32,
    count: usize,
    as_json: bool,
    decode: impl Fn(&[u8]) -> (&'static str, Value),
) -> Result<(), tvm::Error> {
    if q.info().leases.is_none() {
        return Err(tvm::Error::new(
            tvm::error::NOT_SUPPT_OPT,
            format!("queue {id} has no leases (created without --lease-ms and the other lease options)"),
        ));
    }
    let seen = q.peek_leases(count);
    if as_json {
        let records: Vec<Value> = seen
            .iter()
            .map(|r| {
                let mut v = json!({
                    "entry": r.entry,
                    "state": state_name(r.state),
                    "deliveries": r.deliveries,
                    "position": r.position,
                    "age_ms": ms(r.age),
                    "due_ms": ms(r.due),
                    "length": r.record.len(),
                });
                let (key, value) = decode(&r.record);
                v[key] = value;
                v
            })
            .collect();
        println!("{}", json!({ "id": id, "leases": records }));
        return Ok(());
    }
    println!("queue {id}: {} in the lease table", crate::create::count(seen.len() as u64, "record"));
    for r in &seen {
        let (key, value) = decode(&r.record);
        let shown = match (key, &value) {
            ("fields", Value::Object(m)) => m.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" "),
            (_, Value::String(h)) => format!("({} bytes) {h}", r.record.len()),
            (_, v) => v.to_string(),
        };
        println!(
            "{:>12}  entry {:>6}  {:<11} delivered {:>3}x  age {:>7} ms  due in {:>7} ms  {shown}",
            r.position,
            r.entry,
            state_name(r.state),
            r.deliveries,
            ms(r.age),
            ms(r.due)
        );
    }
    Ok(())
}
