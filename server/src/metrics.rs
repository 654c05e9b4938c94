//! `--metrics-port`: the server's own counters beside the queues' in the
//! Prometheus exposition and the dashboard's JSON ([`ServerMetrics`], a
//! [`tvmq_watch::Source`]), served by `tvmq_watch`'s HTTP server on a
//! thread of its own, never on a RESP worker ([`start`]).

use crate::cmd::table::COMMANDS;
use crate::state::ServerState;
use serde_json::{Map, Value, json};
use std::fmt::Write;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use tvm::Error;
use tvm::error::{BOOT_PARM_ERR, SOCK_BIND_ERR};
use tvmq_watch::expose::header;
use tvmq_watch::{Http, HttpOptions, Source, Watch};

/// The server's counters, read when an exposition or an answer is made.
pub(crate) struct ServerMetrics(pub(crate) Arc<ServerState>);

impl ServerMetrics {
    /// Commands run by every worker, by the command table's order.
    fn commands(&self) -> Vec<u64> {
        (0..COMMANDS.len()).map(|k| self.0.worker_stats.iter().map(|w| w.command_count(k)).sum()).collect()
    }
}

impl Source for ServerMetrics {
    fn metrics(&self, out: &mut String) {
        let st = &self.0.stats;
        let gauge = |out: &mut String, name: &str, help: &str, v: u64| {
            header(out, name, "gauge", help);
            let _ = writeln!(out, "{name} {v}");
        };
        let counter = |out: &mut String, name: &str, help: &str, v: u64| {
            header(out, name, "counter", help);
            let _ = writeln!(out, "{name} {v}");
        };
        gauge(
            out,
            "tvmq_server_connected_clients",
            "Client connections open now.",
            st.connected.load(Ordering::Relaxed) as u64,
        );
        gauge(
            out,
            "tvmq_server_blocked_clients",
            "Clients blocked in BLPOP, BRPOP or TVMQ.LEASE now.",
            st.blocked.load(Ordering::Relaxed) as u64,
        );
        counter(
            out,
            "tvmq_server_connections_total",
            "Client connections accepted.",
            st.total_connections.load(Ordering::Relaxed),
        );
        header(out, "tvmq_server_commands_total", "counter", "Commands run, by command.");
        for (spec, n) in COMMANDS.iter().zip(self.commands()) {
            let _ = writeln!(out, "tvmq_server_commands_total{{command=\"{}\"}} {n}", spec.name);
        }
        counter(
            out,
            "tvmq_server_auth_failures_total",
            "Wrong passwords given (AUTH, HELLO ... AUTH).",
            st.auth_failures.load(Ordering::Relaxed),
        );
        counter(
            out,
            "tvmq_server_rejected_connections_total",
            "Connections refused by --maxclients, or for want of descriptors.",
            st.rejected.load(Ordering::Relaxed),
        );
        for (name, help, n) in lease_counts(&self.0) {
            counter(out, &format!("tvmq_server_leases_{name}_total"), help, n);
        }
        header(
            out,
            "tvmq_durable_sync_seconds",
            "histogram",
            "Syncs of always queues that tvmq serve ran for its replies, by duration.",
        );
        let (buckets, count, sum) = self.0.durable.stats().seconds.read();
        for (le, n) in buckets {
            let _ = writeln!(out, "tvmq_durable_sync_seconds_bucket{{le=\"{le}\"}} {n}");
        }
        let _ = writeln!(out, "tvmq_durable_sync_seconds_bucket{{le=\"+Inf\"}} {count}");
        let _ = writeln!(out, "tvmq_durable_sync_seconds_sum {sum}\ntvmq_durable_sync_seconds_count {count}");
    }

    fn api(&self) -> Value {
        let st = &self.0.stats;
        let commands: Map<String, Value> = COMMANDS
            .iter()
            .zip(self.commands())
            .filter(|(_, n)| *n > 0)
            .map(|(spec, n)| (spec.name.to_string(), json!(n)))
            .collect();
        let (_, syncs, sync_s) = self.0.durable.stats().seconds.read();
        json!({
            "uptime_s": self.0.started.elapsed().as_secs(),
            "connected_clients": st.connected.load(Ordering::Relaxed),
            "blocked_clients": st.blocked.load(Ordering::Relaxed),
            "connections_total": st.total_connections.load(Ordering::Relaxed),
            "commands_total": self.0.totals().0,
            "commands": commands,
            "auth_failures_total": st.auth_failures.load(Ordering::Relaxed),
            "rejected_connections_total": st.rejected.load(Ordering::Relaxed),
            "leases": lease_counts(&self.0).iter().map(|(name, _, n)| (name.to_string(), json!(n))).collect::<Map<_, _>>(),
            "syncs": syncs,
            "sync_seconds_total": sync_s,
        })
    }
}

/// The server's lease counts (INFO's `leases_*`): name, help, value.
fn lease_counts(st: &ServerState) -> [(&'static str, &'static str, u64); 6] {
    let l = &st.leases;
    let n = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
    [
        ("granted", "Leases handed to clients (TVMQ.LEASE).", n(&l.granted)),
        ("acked", "Leases acknowledged (TVMQ.ACK).", n(&l.acked)),
        ("released", "Leases put back by TVMQ.RELEASE.", n(&l.released)),
        ("returned", "Leases put back because their connection ended.", n(&l.returned)),
        (
            "dead_lettered",
            "Leased records moved to a dead-letter queue (TVMQ.REJECT, or a release at the delivery limit).",
            n(&l.dead_lettered),
        ),
        (
            "dropped",
            "Leased records dropped (TVMQ.REJECT, or a release at the delivery limit, without a dead-letter queue).",
            n(&l.dropped),
        ),
    ]
}

/// Connections the metrics port serves at once (Prometheus and a few
/// dashboards: a browser opens up to six); beyond, `503`.
pub(crate) const CONNECTIONS: usize = 16;

/// How the metrics server answers (`password`: the RESP port's).
fn options(password: Option<Vec<u8>>) -> HttpOptions {
    HttpOptions { password, max_connections: CONNECTIONS }
}

/// The descriptors the metrics server of `--metrics-port` holds at most
/// (0 without it), kept for it in the server's share of its open-file
/// limit ([`crate::descriptors::plan`]).
pub(crate) fn descriptors(args: &crate::config::ServeArgs) -> u64 {
    args.metrics_port.map_or(0, |_| tvmq_watch::http::most_descriptors(&options(None)) as u64)
}

/// Starts the metrics server of `--metrics-port` (None without it), the
/// password being the RESP port's. Errors: `BOOT_PARM_ERR` (protected
/// mode's refusal: `--metrics-bind` off loopback without a password),
/// `SOCK_BIND_ERR` (the port is in use), those of [`Http::start`].
pub(crate) fn start(shared: &Arc<ServerState>) -> Result<Option<Http>, Error> {
    let args = &shared.args;
    let Some(port) = args.metrics_port else { return Ok(None) };
    let give = format!("--requirepass-file FILE, ${} or --requirepass", crate::config::PASSWORD_ENV);
    if let Some(refusal) = tvmq_watch::http::protected_mode_refusal(
        args.metrics_bind,
        shared.password.is_some(),
        args.protected_mode,
        &give,
    ) {
        return Err(Error::new(BOOT_PARM_ERR, format!("--metrics-bind {}: {refusal}", args.metrics_bind)));
    }
    let addr = std::net::SocketAddr::new(args.metrics_bind, port);
    let listener = std::net::TcpListener::bind(addr)
        .map_err(|e| Error::new(SOCK_BIND_ERR, format!("--metrics-port {addr}: {e}")))?;
    let source: Arc<dyn Source> = Arc::new(ServerMetrics(shared.clone()));
    let watch = Arc::new(Watch::new(shared.dir(), args.metrics_max_queues, Some(source)));
    Http::start(listener, watch, options(shared.password.clone())).map(Some)
}
