//! INFO: the sections written on the worker (server, clients, stats,
//! keyspace, ...) and those that read queue headers (`queues`, the
//! per-queue lines of `durability`), read in the pool after them.

use super::context::Ctx;
use super::server::REDIS_VERSION;
use crate::slice::Slicer;
use crate::state::{InfoScan, ServerState};
use resp::{Proto, Request};
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// The most queues `INFO queues` and `INFO durability` describe (the
/// lowest ids; a line says how many more there are): each costs a header
/// read, in the pool.
const INFO_QUEUES_MAX: usize = 256;

/// The sections of an INFO that read queue headers, to run off the worker
/// ([`info_off_worker`]) after the others, written on the worker.
pub(crate) struct InfoRest {
    /// The reply's text so far.
    text: String,
    /// `# Durability` is wanted: its per-queue lines, then its end.
    durability: bool,
    /// `# Queues` is wanted.
    queues: bool,
    proto: Proto,
}

/// The sections of INFO.
const SECTIONS: [&str; 5] = ["server", "clients", "stats", "durability", "queues"];

/// INFO [section ...]: server, clients, stats and per-queue figures. The
/// sections made of counters are written here; those that read queue
/// headers (`durability`'s per-queue lines, `queues`) are given back to run
/// off the worker (`None`: the reply is written).
/// The sections are read from the arguments in slices ([`Slicer`]): a
/// million of them let the worker serve its other connections.
pub(crate) async fn info(ctx: &mut Ctx<'_>, buf: &[u8], req: &Request, out: &mut Vec<u8>) -> Option<InfoRest> {
    let mut named = [req.len() == 1; SECTIONS.len()];
    let mut slicer = Slicer::new();
    for s in req.iter(buf).skip(1) {
        slicer.tick().await;
        let every = [&b"all"[..], b"everything", b"default"].iter().any(|e| s.eq_ignore_ascii_case(e));
        for (n, section) in named.iter_mut().zip(SECTIONS) {
            *n = *n || every || s.eq_ignore_ascii_case(section.as_bytes());
        }
        if named.iter().all(|n| *n) {
            break;
        }
    }
    let wants = |section: &str| SECTIONS.iter().position(|s| *s == section).is_some_and(|i| named[i]);
    let shared = ctx.shared;
    let st = &shared.stats;
    let (commands, input, output) = shared.totals();
    let created = shared.index.created_queues();
    let pool = shared.pool.stats();
    let mut t = String::new();
    if wants("server") {
        let _ = write!(
            t,
            "# Server\r\nredis_version:{REDIS_VERSION}\r\ntvmq_version:{}\r\nredis_mode:standalone\r\nos:{} {}\r\n\
             multiplexing_api:epoll\r\nprocess_id:{}\r\ntcp_port:{}\r\nunix_socket:{}\r\nuptime_in_seconds:{}\r\n\
             io_threads_active:{}\r\nqueue_dir:{}\r\n\r\n",
            env!("CARGO_PKG_VERSION"),
            std::env::consts::OS,
            std::env::consts::ARCH,
            std::process::id(),
            shared.tcp_addr.map_or(0, |a| a.port()),
            shared.unix_path.as_deref().map(|p| p.display().to_string()).unwrap_or_default(),
            shared.started.elapsed().as_secs(),
            shared.threads,
            shared.dir.display(),
        );
    }
    if wants("clients") {
        let unauthenticated = shared.unauthenticated.counts();
        let _ = write!(
            t,
            "# Clients\r\nconnected_clients:{}\r\nmaxclients:{}\r\nblocked_clients:{}\r\n\
             unauthenticated_clients:{}\r\nmax_unauthenticated:{}\r\nopen_files_limit:{}\r\n\r\n",
            st.connected.load(Ordering::Relaxed),
            shared.maxclients,
            st.blocked.load(Ordering::Relaxed),
            unauthenticated.0,
            unauthenticated.1,
            shared.nofile,
        );
    }
    if wants("stats") {
        let orphans = tvm::Queue::orphaned_live_parts_removed();
        let open = shared.attachments.counts();
        let leases = &shared.leases;
        let _ = write!(
            t,
            "# Stats\r\ntotal_connections_received:{}\r\ntotal_commands_processed:{}\r\nrejected_connections:{}\r\n\
             total_net_input_bytes:{}\r\ntotal_net_output_bytes:{}\r\nqueue_watchers_started:{}\r\n\
             queue_watchers:{}\r\nqueues_watched:{}\r\nblocked_wakeups:{}\r\nblocked_wakeups_late:{}\r\n\
             pool_threads:{}\r\npool_threads_max:{}\r\npool_threads_started:{}\r\npool_waiting:{}\r\n\
             pool_waiting_most:{}\r\n\
             auth_failures:{}\r\nunauthenticated_closed:{}\r\nunauthenticated_evicted:{}\r\nauth_timeouts:{}\r\n\
             accept_errors:{}\r\ntls_handshakes_refused:{}\r\nopen_queues:{}\r\nmax_open_queues:{}\r\n\
             queues_closed:{}\r\nqueues_closing:{}\r\n\
             queues_indexed:{}\r\nqueues_created:{}\r\nqueues_created_bytes:{}\r\nindex_rescans:{}\r\n\
             index_headers_read:{}\r\nlive_parts_removed:{}\r\nlive_parts_removed_bytes:{}\r\n\
             index_orphan_sweeps:{}\r\nleases_granted:{}\r\nleases_acked:{}\r\nleases_released:{}\r\n\
             leases_returned:{}\r\nleases_dead_lettered:{}\r\nleases_dropped:{}\r\n\r\n",
            st.total_connections.load(Ordering::Relaxed),
            commands,
            st.rejected.load(Ordering::Relaxed),
            input,
            output,
            shared.waiters.watchers_started.load(Ordering::Relaxed),
            shared.waiters.watchers(),
            shared.waiters.watched(),
            shared.waiters.wakeups.all.load(Ordering::Relaxed),
            shared.waiters.wakeups.late.load(Ordering::Relaxed),
            pool.threads,
            pool.max_threads,
            pool.started,
            pool.waiting,
            pool.longest,
            st.auth_failures.load(Ordering::Relaxed),
            st.unauthenticated_closed.load(Ordering::Relaxed),
            shared.unauthenticated.evicted.load(Ordering::Relaxed),
            shared.unauthenticated.timed_out.load(Ordering::Relaxed),
            st.accept_errors.load(Ordering::Relaxed),
            st.tls_handshakes_refused.load(Ordering::Relaxed),
            open.0,
            open.1,
            open.2,
            open.3,
            shared.index.len(),
            created.0,
            created.1,
            shared.index.rescans.load(Ordering::Relaxed),
            shared.index.headers_read.load(Ordering::Relaxed),
            orphans.0,
            orphans.1,
            shared.index.orphan_sweeps.load(Ordering::Relaxed),
            leases.granted.load(Ordering::Relaxed),
            leases.acked.load(Ordering::Relaxed),
            leases.released.load(Ordering::Relaxed),
            leases.returned.load(Ordering::Relaxed),
            leases.dead_lettered.load(Ordering::Relaxed),
            leases.dropped.load(Ordering::Relaxed),
        );
    }
    let durability = wants("durability");
    if durability {
        durability_head(shared, &mut t);
    }
    let queues = wants("queues");
    if durability || queues {
        return Some(InfoRest { text: t, durability, queues, proto: ctx.client.proto });
    }
    resp::verbatim(out, ctx.client.proto, b"txt", t.as_bytes());
    None
}

/// Reads the queue headers INFO's last sections show, in the pool (as a
/// scan: see [`crate::pool`]), and writes the whole reply.
pub(crate) async fn info_off_worker(rest: InfoRest, shared: &Arc<ServerState>, out: &mut Vec<u8>) {
    let InfoRest { mut text, durability, queues, proto } = rest;
    for (wanted, part) in [(durability, InfoScan::Durability), (queues, InfoScan::Queues)] {
        if !wanted {
            continue;
        }
        let me = shared.clone();
        match shared.info_scans.scan(&shared.pool, part, move || info_scan(&me, part)).await {
            Ok(lines) => text.push_str(&lines),
            Err(_) => return super::off_worker::failed(out),
        }
    }
    resp::verbatim(out, proto, b"txt", text.as_bytes());
}

/// The lines of `part`, from the index (not the directory), at most
/// [`INFO_QUEUES_MAX`] headers read.
fn info_scan(shared: &ServerState, part: InfoScan) -> String {
    let mut t = String::new();
    let (ids, all) = shared.index.lowest_ids(INFO_QUEUES_MAX);
    match part {
        InfoScan::Queues => {
            t.push_str("# Queues\r\n");
            if all > ids.len() {
                let _ = write!(t, "queues_not_listed:{} (tvmq list shows every queue)\r\n", all - ids.len());
            }
            for id in ids {
                let Ok(q) = tvm::Queue::inspect(shared.dir(), id) else { continue };
                let s = q.stats();
                let _ = write!(
                    t,
                    "queue_{id}:name={},record_size={},capacity={},depth={},pushed={},popped={},waiters={}\r\n",
                    tvm::escape_word(q.name().as_bytes()).replace(',', "\\x2c"),
                    q.record_size(),
                    q.capacity(),
                    s.depth,
                    s.pushed,
                    s.popped,
                    s.waiters,
                );
            }
        }
        InfoScan::Durability => {
            if all > ids.len() {
                let _ = write!(t, "queues_not_looked_at:{}\r\n", all - ids.len());
            }
            for id in ids {
                let Ok(q) = tvm::Queue::inspect(shared.dir(), id) else { continue };
                let Some(d) = q.durable_stats() else { continue };
                let _ = write!(
                    t,
                    "durable_queue_{id}:policy={},syncs={},failures={},last_sync_us={},dirty={}\r\n",
                    d.policy,
                    d.syncs,
                    d.failures,
                    d.last_sync_took_ns / 1000,
                    u8::from(d.dirty),
                );
            }
        }
    }
    t.push_str("\r\n");
    t
}

/// INFO's `# Durability` but its per-queue lines: the syncs this server
/// ran for the replies that waited for them (pushes and pops of `always`
/// queues answered only once on stable storage). Each durable queue's own
/// sync counters (every process's syncs, from the queue file) follow, read
/// off the worker ([`info_scan`]).
fn durability_head(shared: &ServerState, t: &mut String) {
    let s = shared.durable.stats();
    let syncs = s.syncs.load(Ordering::Relaxed);
    let records = s.records.load(Ordering::Relaxed);
    let total_us = s.total_us.load(Ordering::Relaxed);
    let ratio = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
    let _ = write!(
        t,
        "# Durability\r\ndurable_ring_workers:{}\r\ndurable_sync_threads:{}\r\ndurable_syncs:{syncs}\r\n\
         durable_inline_syncs:{}\r\ndurable_sync_failures:{}\r\ndurable_records_held:{records}\r\ndurable_records_per_sync:{:.2}\r\n\
         durable_sync_last_us:{}\r\ndurable_sync_avg_us:{:.0}\r\ndurable_ask_to_sync_avg_us:{:.0}\r\n\
         durable_handover_avg_us:{:.0}\r\ndurable_behind_sync_avg_us:{:.0}\r\ndurable_wake_avg_us:{:.0}\r\ndurable_release_avg_us:{:.0}\r\n",
        shared.durable.ring_workers(),
        shared.durable.syncers.threads(),
        s.inline.load(Ordering::Relaxed),
        s.failures.load(Ordering::Relaxed),
        ratio(records, syncs),
        s.last_us.load(Ordering::Relaxed),
        ratio(total_us, syncs),
        ratio(s.ask_us.load(Ordering::Relaxed), s.asked.load(Ordering::Relaxed)),
        ratio(s.handover_us.load(Ordering::Relaxed), s.asked.load(Ordering::Relaxed)),
        ratio(s.behind_us.load(Ordering::Relaxed), s.asked.load(Ordering::Relaxed)),
        ratio(s.wake_us.load(Ordering::Relaxed), s.woken.load(Ordering::Relaxed)),
        ratio(s.release_us.load(Ordering::Relaxed), s.released.load(Ordering::Relaxed)),
    );
}
