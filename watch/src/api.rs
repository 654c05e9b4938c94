//! `/api/queues`: the latest sample as JSON, for the dashboard and for
//! scripts (documented in docs/metrics.md). A request chooses which queues
//! and how many: `sort`, `order`, `offset`, `limit` (at most
//! [`MAX_LIMIT`]), `match` (a text the id or the name contains) and `ids`
//! (at most [`MAX_IDS`] ids, comma-separated), so that an answer stays
//! small whatever the number of queues.

use crate::collect::QueueSample;
use crate::rates::Rates;
use crate::state::{Latest, Source};
use serde_json::{Map, Value, json};
use std::cmp::Ordering;
use std::sync::Arc;

/// The most queues one answer lists.
pub const MAX_LIMIT: usize = 1000;
/// The default number of queues listed.
pub const DEFAULT_LIMIT: usize = 100;
/// The most ids `ids` may name.
pub const MAX_IDS: usize = 100;

/// How the queues are ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SortKey {
    /// By id.
    Id,
    /// By name.
    Name,
    /// By depth.
    Depth,
    /// By depth / capacity.
    Fill,
    /// By pushes per second.
    PushRate,
    /// By pops per second.
    PopRate,
    /// By waiters.
    Waiters,
    /// By processes attached.
    Processes,
    /// By leases in flight.
    Leases,
    /// By records dead-lettered.
    DeadLettered,
}

impl SortKey {
    /// Every key with its name in the query.
    pub const ALL: [(&'static str, SortKey); 10] = [
        ("id", SortKey::Id),
        ("name", SortKey::Name),
        ("depth", SortKey::Depth),
        ("fill", SortKey::Fill),
        ("push_rate", SortKey::PushRate),
        ("pop_rate", SortKey::PopRate),
        ("waiters", SortKey::Waiters),
        ("processes", SortKey::Processes),
        ("leases", SortKey::Leases),
        ("dead_lettered", SortKey::DeadLettered),
    ];

    /// The key named `name` in a query.
    pub fn parse(name: &str) -> Option<SortKey> {
        Self::ALL.iter().find(|(n, _)| *n == name).map(|&(_, k)| k)
    }

    /// Compares two queues (with their rates) by this key, ascending.
    pub fn compare(self, a: (&QueueSample, Option<&Rates>), b: (&QueueSample, Option<&Rates>)) -> Ordering {
        let f = |x: f64, y: f64| x.partial_cmp(&y).unwrap_or(Ordering::Equal);
        let fill = |q: &QueueSample| q.snap.depth as f64 / q.snap.capacity.max(1) as f64;
        let rate = |r: Option<&Rates>, pick: fn(&Rates) -> f64| r.map_or(-1.0, pick);
        let (qa, ra, qb, rb) = (a.0, a.1, b.0, b.1);
        let by = match self {
            SortKey::Id => Ordering::Equal,
            SortKey::Name => qa.name.cmp(&qb.name),
            SortKey::Depth => qa.snap.depth.cmp(&qb.snap.depth),
            SortKey::Fill => f(fill(qa), fill(qb)),
            SortKey::PushRate => f(rate(ra, |r| r.push), rate(rb, |r| r.push)),
            SortKey::PopRate => f(rate(ra, |r| r.pop), rate(rb, |r| r.pop)),
            SortKey::Waiters => qa.snap.waiters.cmp(&qb.snap.waiters),
            SortKey::Processes => qa.snap.processes.cmp(&qb.snap.processes),
            SortKey::Leases => qa.snap.leases_in_flight.cmp(&qb.snap.leases_in_flight),
            SortKey::DeadLettered => qa.snap.dead_lettered.cmp(&qb.snap.dead_lettered),
        };
        by.then(qa.id.cmp(&qb.id))
    }
}

/// What a request to `/api/queues` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    /// The order.
    pub sort: SortKey,
    /// Largest first.
    pub descending: bool,
    /// Queues skipped (after sorting and filtering).
    pub offset: usize,
    /// Queues listed, at most [`MAX_LIMIT`].
    pub limit: usize,
    /// Only queues whose id or name contains this (case-insensitive).
    pub matching: Option<String>,
    /// Only these queues.
    pub ids: Option<Vec<u32>>,
}

impl Default for Query {
    fn default() -> Query {
        Query { sort: SortKey::Id, descending: false, offset: 0, limit: DEFAULT_LIMIT, matching: None, ids: None }
    }
}

/// Decodes `%XX` and `+` in a query's value.
fn unescape(v: &str) -> String {
    let b = v.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                match u8::from_str_radix(std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("zz"), 16) {
                    Ok(x) => {
                        out.push(x);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl Query {
    /// Parses a query string (`sort=depth&order=desc&limit=20`). Unknown
    /// parameters are ignored; a bad value is an error saying which.
    pub fn parse(query: &str) -> Result<Query, String> {
        let mut q = Query::default();
        let mut order = None;
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let value = unescape(value);
            let number = |what: &str| value.parse::<usize>().map_err(|_| format!("{what}={value:?}: not a number"));
            match key {
                "sort" => {
                    q.sort = SortKey::parse(&value).ok_or_else(|| {
                        let names: Vec<&str> = SortKey::ALL.iter().map(|(n, _)| *n).collect();
                        format!("sort={value:?}: one of {}", names.join(", "))
                    })?
                }
                "order" => match value.as_str() {
                    "asc" => order = Some(false),
                    "desc" => order = Some(true),
                    _ => return Err(format!("order={value:?}: asc or desc")),
                },
                "offset" => q.offset = number("offset")?,
                "limit" => q.limit = number("limit")?.min(MAX_LIMIT),
                "match" if !value.is_empty() => q.matching = Some(value.to_lowercase()),
                "ids" => {
                    let ids: Result<Vec<u32>, _> =
                        value.split(',').filter(|s| !s.is_empty()).map(|s| s.trim().parse::<u32>()).collect();
                    let ids = ids.map_err(|_| format!("ids={value:?}: queue ids separated by commas"))?;
                    if ids.len() > MAX_IDS {
                        return Err(format!("ids: at most {MAX_IDS} ids"));
                    }
                    q.ids = Some(ids);
                }
                _ => {}
            }
        }
        // Names and ids ascending by default, amounts largest first.
        q.descending = order.unwrap_or(!matches!(q.sort, SortKey::Id | SortKey::Name));
        Ok(q)
    }
}

/// A rate rounded for people and JSON (null without one).
fn rate(r: Option<f64>) -> Value {
    r.map_or(Value::Null, |v| json!((v * 100.0).round() / 100.0))
}

/// One queue's object (`at`: when the sample was taken).
fn queue_json(q: &QueueSample, r: Option<&Rates>, at: std::time::Instant) -> Value {
    let s = &q.snap;
    let mut m = Map::new();
    m.insert("id".into(), json!(q.id));
    m.insert("name".into(), json!(&*q.name));
    m.insert("record_size".into(), json!(s.record_size));
    m.insert("capacity".into(), json!(s.capacity));
    m.insert("depth".into(), json!(s.depth));
    m.insert("pushed".into(), json!(s.pushed));
    m.insert("popped".into(), json!(s.popped));
    m.insert("push_rate".into(), rate(r.map(|r| r.push)));
    m.insert("pop_rate".into(), rate(r.map(|r| r.pop)));
    m.insert("waiters".into(), json!(s.waiters));
    m.insert("processes".into(), json!(s.processes));
    m.insert("leases".into(), json!(s.leases));
    // A lease table not read yet: its gauges unknown.
    let unread = s.leases && q.leases_read.is_none();
    m.insert("leases_in_flight".into(), if unread { Value::Null } else { json!(s.leases_in_flight) });
    m.insert("leases_waiting".into(), if unread { Value::Null } else { json!(s.leases_waiting) });
    m.insert(
        "leases_age_ms".into(),
        q.leases_read.map_or(Value::Null, |t| json!(at.saturating_duration_since(t).as_millis() as u64)),
    );
    m.insert("redelivered".into(), json!(s.redelivered));
    m.insert("redelivered_rate".into(), rate(r.map(|r| r.redelivered)));
    m.insert("expired".into(), json!(s.expired));
    m.insert("dead_lettered".into(), json!(s.dead_lettered));
    m.insert("durable".into(), s.durable.map_or(Value::Null, |d| json!(d.to_string())));
    m.insert("syncs".into(), json!(s.syncs));
    m.insert("last_sync_ns".into(), json!(s.last_sync_ns));
    Value::Object(m)
}

/// The answer to `/api/queues` with `query`, from `latest` (and `source`'s
/// `server` object).
pub fn queues(latest: &Latest, query: &Query, dir: &std::path::Path, source: Option<&Arc<dyn Source>>) -> Value {
    let s = &latest.sample;
    let all = s.queues.iter().zip(latest.rates.iter().map(Option::as_ref));
    let (mut depth, mut capacity, mut pushed, mut popped, mut in_flight, mut dead) =
        (0u64, 0u64, 0u64, 0u64, 0u64, 0u64);
    let (mut push_rate, mut pop_rate) = (0.0f64, 0.0f64);
    for (q, r) in all.clone() {
        depth += q.snap.depth;
        capacity += q.snap.capacity;
        pushed += q.snap.pushed;
        popped += q.snap.popped;
        in_flight += q.snap.leases_in_flight;
        dead += q.snap.dead_lettered;
        push_rate += r.map_or(0.0, |r| r.push);
        pop_rate += r.map_or(0.0, |r| r.pop);
    }
    let mut chosen: Vec<(&QueueSample, Option<&Rates>)> = all
        .filter(|(q, _)| query.ids.as_ref().is_none_or(|ids| ids.contains(&q.id)))
        .filter(|(q, _)| {
            query
                .matching
                .as_ref()
                .is_none_or(|m| q.id.to_string().contains(m.as_str()) || q.name.to_lowercase().contains(m.as_str()))
        })
        .collect();
    let matched = chosen.len();
    chosen.sort_by(|&a, &b| {
        let o = query.sort.compare(a, b);
        if query.descending { o.reverse() } else { o }
    });
    let listed: Vec<Value> =
        chosen.into_iter().skip(query.offset).take(query.limit).map(|(q, r)| queue_json(q, r, s.at)).collect();
    json!({
        "time_ns": s.wall_ns,
        "dir": dir.display().to_string(),
        "rate_span_s": latest.rate_span.map(|d| d.as_secs_f64()),
        "sample_ms": s.took.as_secs_f64() * 1000.0,
        "total": s.queues.len(),
        "unreadable": s.unreadable,
        "unreadable_why": s.unreadable_why,
        "transient": s.transient,
        "leases_stale": s.leases_stale + s.leases_unread,
        "matched": matched,
        "offset": query.offset,
        "totals": {
            "depth": depth, "capacity": capacity, "pushed": pushed, "popped": popped,
            "push_rate": rate(latest.rate_span.map(|_| push_rate)), "pop_rate": rate(latest.rate_span.map(|_| pop_rate)),
            "leases_in_flight": in_flight, "dead_lettered": dead,
        },
        "queues": listed,
        "server": source.map_or(Value::Null, |s| s.api()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries() {
        assert_eq!(Query::parse("").unwrap(), Query::default());
        let q = Query::parse("sort=depth&limit=5000&offset=3&match=Ord%45rs&ids=1,%202,3&x=y").unwrap();
        assert_eq!(q.sort, SortKey::Depth);
        assert!(q.descending, "amounts largest first by default");
        assert_eq!((q.limit, q.offset), (MAX_LIMIT, 3));
        assert_eq!(q.matching.as_deref(), Some("orders"));
        assert_eq!(q.ids, Some(vec![1, 2, 3]));
        assert!(!Query::parse("sort=name").unwrap().descending);
        assert!(!Query::parse("sort=depth&order=asc").unwrap().descending);
        for bad in ["sort=size", "order=up", "limit=-1", "offset=x", "ids=1,a"] {
            assert!(Query::parse(bad).is_err(), "{bad}");
        }
        let many: Vec<String> = (0..=MAX_IDS).map(|i| i.to_string()).collect();
        assert!(Query::parse(&format!("ids={}", many.join(","))).is_err());
        assert_eq!(unescape("a%2"), "a%2");
        assert_eq!(unescape("%zz%41"), "%zzA");
    }
}
