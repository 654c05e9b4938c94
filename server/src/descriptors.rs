//! Descriptors: the soft `RLIMIT_NOFILE` raised to the hard limit at the
//! start, and how the server shares what it then has, as Redis does: a
//! reserve for what the server itself opens (listeners, runtimes, the
//! index's inotify, the spare descriptor of the acceptor, queues being
//! created, dropped or repaired, INFO's headers, and with `--metrics-port`
//! the metrics server: its connections and its reading of the queues), the
//! queues it holds open, and the clients, whose `--maxclients` is lowered,
//! with a warning, to what is left. So accepting, opening queues and the sync threads never
//! take each other's descriptors.

/// Descriptors kept for the server itself, besides [`PER_THREAD`] for each
/// thread with a runtime.
pub(crate) const RESERVE: u64 = 64;
/// Descriptors a runtime thread takes (its epoll and its waker), counted
/// in the reserve.
pub(crate) const PER_THREAD: u64 = 4;
/// Descriptors counted for each open queue: a plain queue takes 1, a durable
/// one 2 or 3 (its image, an `interval` queue's live part), and a leased
/// queue keeps its dead-letter queue open once it moved a record there.
pub(crate) const PER_QUEUE: u64 = 4;
/// The most queues held open unless `--max-open-queues` says otherwise.
pub(crate) const DEFAULT_MAX_OPEN_QUEUES: usize = 65_536;

/// What the descriptors allow.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Plan {
    /// The soft limit in effect.
    pub(crate) limit: u64,
    /// Clients served at once (`--maxclients`, perhaps lowered).
    pub(crate) maxclients: usize,
    /// Queues held open at once.
    pub(crate) open_queues: usize,
    /// What was lowered, and why: a line each, for stderr.
    pub(crate) warnings: Vec<String>,
}

/// Raises the soft limit of open files to the hard one (or to the most the
/// kernel allows a process, `fs.nr_open`, when the hard limit is higher or
/// infinite); returns the soft limit in effect, and why it could not be
/// raised, if it could not.
pub(crate) fn raise_limit() -> (u64, Option<String>) {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let now = getrlimit(Resource::Nofile);
    let soft = now.current.unwrap_or(u64::MAX);
    let nr_open = std::fs::read_to_string("/proc/sys/fs/nr_open").ok().and_then(|s| s.trim().parse().ok());
    let mut want = now.maximum.unwrap_or(u64::MAX).min(nr_open.unwrap_or(1 << 20));
    let mut why = None;
    while want > soft {
        match setrlimit(Resource::Nofile, Rlimit { current: Some(want), maximum: now.maximum }) {
            Ok(()) => return (want, None),
            Err(e) => why = Some(e.to_string()),
        }
        // As Redis does: try less.
        want = soft.max(want / 2);
    }
    (soft, why.map(|e| format!("cannot raise the open-file limit above {soft} ({e})")))
}

/// Shares `limit` descriptors between the server (the reserve, for
/// `threads` runtime threads, and `metrics` more for `--metrics-port`'s
/// server), the open queues and the clients.
///
/// Queues get what `maxclients` clients leave, but at least a quarter of
/// what is not reserved and at most three quarters, and at most
/// `max_open_queues` (0: [`DEFAULT_MAX_OPEN_QUEUES`]); clients get the
/// rest, at most `maxclients`. Every lowered figure has its warning.
pub(crate) fn plan(limit: u64, threads: usize, metrics: u64, maxclients: usize, max_open_queues: usize) -> Plan {
    let reserve = RESERVE + PER_THREAD * threads as u64 + metrics;
    let avail = limit.saturating_sub(reserve);
    let mut warnings = Vec::new();
    let left = avail.saturating_sub(maxclients as u64);
    let default = (left.max(avail / 4) / PER_QUEUE).min(DEFAULT_MAX_OPEN_QUEUES as u64);
    let asked = if max_open_queues > 0 { max_open_queues as u64 } else { default };
    let most = avail / 4 * 3 / PER_QUEUE;
    let open_queues = asked.min(most).max(1);
    if max_open_queues > 0 && asked > most {
        warnings.push(format!(
            "--max-open-queues {asked} lowered to {open_queues}: the open-file limit is {limit}, and queues may \
             take three quarters of it ({PER_QUEUE} descriptors counted for each queue)"
        ));
    }
    let for_clients = avail.saturating_sub(open_queues * PER_QUEUE).max(1);
    let clients = (maxclients as u64).min(for_clients);
    if clients < maxclients as u64 {
        warnings.push(format!(
            "--maxclients {maxclients} lowered to {clients}: the open-file limit is {limit} (raise it with \
             `ulimit -n` or LimitNOFILE=), of which {reserve} are kept for the server and {} for {open_queues} \
             open queues",
            open_queues * PER_QUEUE
        ));
    }
    Plan { limit, maxclients: clients as usize, open_queues: open_queues as usize, warnings }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clients_are_lowered_to_what_the_limit_leaves() {
        // 1,024 descriptors, two workers: 72 reserved, a quarter of the rest for queues.
        let p = plan(1024, 2, 0, 10_000, 0);
        assert_eq!((p.open_queues, p.maxclients), (59, 716));
        assert_eq!(p.warnings.len(), 1);
        assert!(p.warnings[0].starts_with("--maxclients 10000 lowered to 716"), "{:?}", p.warnings);
        // Enough: nothing lowered, queues get what the clients leave.
        let p = plan(20_000, 2, 0, 10_000, 0);
        assert_eq!((p.maxclients, p.open_queues), (10_000, (20_000 - 72 - 10_000) / 4));
        assert!(p.warnings.is_empty());
        // Plenty: the default bound on queues.
        let p = plan(1 << 20, 2, 0, 10_000, 0);
        assert_eq!((p.maxclients, p.open_queues), (10_000, DEFAULT_MAX_OPEN_QUEUES));
        // An explicit bound on queues, within reach and beyond.
        let p = plan(20_000, 2, 0, 10_000, 100);
        assert_eq!((p.maxclients, p.open_queues), (10_000, 100));
        let p = plan(1024, 2, 0, 100, 100_000);
        assert_eq!(p.open_queues, 952 / 4 * 3 / 4);
        assert!(p.warnings[0].starts_with("--max-open-queues 100000 lowered to 178"), "{:?}", p.warnings);
        // The metrics server's descriptors are kept beside the server's own
        // (docs/server.md says 29).
        let metrics = crate::config::ServeArgs { metrics_port: Some(0), ..Default::default() };
        assert_eq!(crate::metrics::descriptors(&metrics), 29);
        assert_eq!(crate::metrics::descriptors(&crate::config::ServeArgs::default()), 0);
        let p = plan(1024, 2, 29, 10_000, 0);
        assert_eq!((p.open_queues, p.maxclients), (57, 695));
        assert!(p.warnings[0].contains("of which 101 are kept for the server"), "{:?}", p.warnings);
        // Every figure fits the limit.
        for limit in [16, 100, 1024, 4096, 65_536] {
            for maxclients in [1, 10, 10_000] {
                let p = plan(limit, 2, 0, maxclients, 0);
                let used = 72 + p.open_queues as u64 * PER_QUEUE + p.maxclients as u64;
                assert!(used <= limit.max(72 + PER_QUEUE + 1), "{limit} {maxclients}: {p:?}");
                assert!(p.maxclients >= 1 && p.open_queues >= 1);
            }
        }
    }
}
