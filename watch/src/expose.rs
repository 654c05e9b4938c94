//! The Prometheus text exposition format (version 0.0.4) of a [`Sample`]:
//! one family per counter, each queue a series labelled with its id
//! (`queue`) and name (`name`). The first `max_listed` queues by id are
//! listed one by one; the rest are summed into one series labelled
//! `queue="other"`, so that a scrape of many queues stays small. The names
//! and what each counts are in docs/metrics.md.

use crate::collect::{QueueSample, Sample};
use std::fmt::Write;

/// The content type of the exposition.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Which queues a family has a series for.
#[derive(Clone, Copy, PartialEq)]
enum Only {
    Every,
    Leases,
    /// Leased queues whose lease table was read (in this sample or before).
    LeasesRead,
    Durable,
}

impl Only {
    fn has(self, q: &QueueSample) -> bool {
        match self {
            Only::Every => true,
            Only::Leases => q.snap.leases,
            Only::LeasesRead => q.snap.leases && q.leases_read.is_some(),
            Only::Durable => q.snap.durable.is_some(),
        }
    }
}

/// A per-queue family: name, type, help, which queues, value.
struct Family {
    name: &'static str,
    kind: &'static str,
    help: &'static str,
    only: Only,
    value: fn(&QueueSample) -> u64,
}

const FAMILIES: &[Family] = &[
    Family {
        name: "tvmq_queue_depth",
        kind: "gauge",
        help: "Records queued now (leased records not counted).",
        only: Only::Every,
        value: |q| q.snap.depth,
    },
    Family {
        name: "tvmq_queue_capacity",
        kind: "gauge",
        help: "Records the queue holds at most.",
        only: Only::Every,
        value: |q| q.snap.capacity,
    },
    Family {
        name: "tvmq_queue_pushed_total",
        kind: "counter",
        help: "Records pushed since the queue was created.",
        only: Only::Every,
        value: |q| q.snap.pushed,
    },
    Family {
        name: "tvmq_queue_popped_total",
        kind: "counter",
        help: "Records popped or leased since the queue was created.",
        only: Only::Every,
        value: |q| q.snap.popped,
    },
    Family {
        name: "tvmq_queue_waiters",
        kind: "gauge",
        help: "Threads of every process asleep in a blocking pop now.",
        only: Only::Every,
        value: |q| q.snap.waiters,
    },
    Family {
        name: "tvmq_queue_processes",
        kind: "gauge",
        help: "Processes attached to the queue now.",
        only: Only::Every,
        value: |q| q.snap.processes,
    },
    Family {
        name: "tvmq_queue_leases_in_flight",
        kind: "gauge",
        help: "Leases held by consumers (queues with leases; as last read, see tvmq_queues_leases_stale).",
        only: Only::LeasesRead,
        value: |q| q.snap.leases_in_flight,
    },
    Family {
        name: "tvmq_queue_redelivered_total",
        kind: "counter",
        help: "Records delivered again after a lease ran out, its holder died or it was released.",
        only: Only::Leases,
        value: |q| q.snap.redelivered,
    },
    Family {
        name: "tvmq_queue_expired_total",
        kind: "counter",
        help: "Leases that ran out.",
        only: Only::Leases,
        value: |q| q.snap.expired,
    },
    Family {
        name: "tvmq_queue_dead_lettered_total",
        kind: "counter",
        help: "Records moved to the dead-letter queue.",
        only: Only::Leases,
        value: |q| q.snap.dead_lettered,
    },
    Family {
        name: "tvmq_queue_syncs_total",
        kind: "counter",
        help: "Syncs to stable storage completed since the queue was created (durable queues).",
        only: Only::Durable,
        value: |q| q.snap.syncs,
    },
];

/// Appends `text` to `out` as a label value: backslash, double quote and
/// line feed escaped, as the format asks.
pub fn label_value(out: &mut String, text: &str) {
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// Appends the `# HELP` and `# TYPE` lines of a family.
pub fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// Appends the families of every queue of `s`, the first `max_listed` by
/// id one by one and the rest summed (`queue="other"`), and the families
/// that describe the sample itself.
pub fn write_queues(out: &mut String, s: &Sample, max_listed: usize) {
    let (listed, rest) = s.queues.split_at(s.queues.len().min(max_listed));
    let labels: Vec<String> = listed
        .iter()
        .map(|q| {
            let mut l = format!("{{queue=\"{}\",name=\"", q.id);
            label_value(&mut l, &q.name);
            l.push_str("\"}");
            l
        })
        .collect();
    for f in FAMILIES {
        let summed: Option<u64> = rest.iter().filter(|q| f.only.has(q)).map(f.value).reduce(|a, b| a + b);
        if summed.is_none() && !listed.iter().any(|q| f.only.has(q)) {
            continue;
        }
        header(out, f.name, f.kind, f.help);
        for (q, l) in listed.iter().zip(&labels) {
            if f.only.has(q) {
                let _ = writeln!(out, "{}{l} {}", f.name, (f.value)(q));
            }
        }
        if let Some(v) = summed {
            let _ = writeln!(out, "{}{{queue=\"other\",name=\"\"}} {v}", f.name);
        }
    }
    header(out, "tvmq_queues", "gauge", "Queues in the queue directory that could be read.");
    let _ = writeln!(out, "tvmq_queues {}", s.queues.len());
    header(
        out,
        "tvmq_queues_summed",
        "gauge",
        "Queues beyond the bound of those listed one by one, summed into queue=\"other\".",
    );
    let _ = writeln!(out, "tvmq_queues_summed {}", rest.len());
    header(
        out,
        "tvmq_queues_unreadable",
        "gauge",
        "Queue files that could not be read (another user's, invalid, being made).",
    );
    let _ = writeln!(out, "tvmq_queues_unreadable {}", s.unreadable);
    header(
        out,
        "tvmq_queues_transient",
        "gauge",
        "Queues read through a view opened for this reading alone (beyond the views kept open).",
    );
    let _ = writeln!(out, "tvmq_queues_transient {}", s.transient);
    header(
        out,
        "tvmq_queues_leases_stale",
        "gauge",
        "Leased queues whose leases in flight are from an earlier reading, or not read yet (then not listed): \
         the lease-table entries read per reading are bounded.",
    );
    let _ = writeln!(out, "tvmq_queues_leases_stale {}", s.leases_stale + s.leases_unread);
    header(out, "tvmq_sample_duration_seconds", "gauge", "How long reading every queue took.");
    let _ = writeln!(out, "tvmq_sample_duration_seconds {}", s.took.as_secs_f64());
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};
    use tvm::Snapshot;

    fn q(id: u32, name: &str, depth: u64, leases: bool) -> QueueSample {
        QueueSample {
            id,
            name: name.into(),
            snap: Snapshot { depth, capacity: 10, pushed: depth, leases, ..Snapshot::default() },
            leases_read: leases.then(Instant::now),
        }
    }

    #[test]
    fn listed_then_summed_with_escaped_names() {
        let s = Sample {
            at: Instant::now(),
            wall_ns: 0,
            queues: vec![
                q(1, "a\"b\\c\nd", 3, false),
                q(2, "B", 4, true),
                q(3, "C", 5, false),
                q(4, "D", 6, true),
                QueueSample { leases_read: None, ..q(5, "E", 7, true) },
            ],
            unreadable: 1,
            unreadable_why: None,
            transient: 2,
            leases_stale: 1,
            leases_unread: 1,
            took: Duration::from_millis(2),
        };
        let mut out = String::new();
        write_queues(&mut out, &s, 2);
        assert!(out.contains("tvmq_queue_depth{queue=\"1\",name=\"a\\\"b\\\\c\\nd\"} 3\n"), "{out}");
        assert!(out.contains("tvmq_queue_depth{queue=\"2\",name=\"B\"} 4\n"));
        assert!(out.contains("tvmq_queue_depth{queue=\"other\",name=\"\"} 18\n"), "3, 4 and 5 summed");
        assert!(!out.contains("queue=\"3\""));
        assert!(out.contains("tvmq_queue_capacity{queue=\"other\",name=\"\"} 30\n"));
        // Lease families: queue 2, and queue 4 summed; never queue 1.
        assert!(out.contains("tvmq_queue_leases_in_flight{queue=\"2\",name=\"B\"} 0\n"));
        assert!(out.contains("tvmq_queue_leases_in_flight{queue=\"other\",name=\"\"} 0\n"));
        assert!(!out.contains("tvmq_queue_leases_in_flight{queue=\"1\""));
        // Queue 5's table not read yet: its counters summed, its in-flight gauge left out.
        assert!(out.contains("tvmq_queue_expired_total{queue=\"other\",name=\"\"} 0\n"));
        assert!(out.contains("tvmq_queues_leases_stale 2\n"));
        assert!(out.contains("tvmq_queues_transient 2\n"));
        assert!(!out.contains("tvmq_queue_syncs_total"), "no durable queue: no family");
        assert!(out.contains("tvmq_queues 5\n"));
        assert!(out.contains("tvmq_queues_summed 3\n"));
        assert!(out.contains("tvmq_queues_unreadable 1\n"));
        assert_eq!(out.matches("# TYPE tvmq_queue_depth gauge").count(), 1);
    }
}
