//! `tvmq metrics`: every queue's counters in the Prometheus text format,
//! once on stdout (for node_exporter's textfile collector, or a look), or
//! served with the web dashboard (`--listen`) by a process of its own, for
//! a machine that runs only local programs (no `tvmq serve`).

use clap::Args;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tvm::Error;
use tvm::error::{BOOT_PARM_ERR, SOCK_BIND_ERR, SVR_EXCEPTION};
use tvmq_watch::{Http, HttpOptions, Watch};

#[derive(Args)]
#[command(after_help = "Examples:\n  \
    tvmq metrics                                   # one exposition on stdout\n  \
    tvmq metrics > /var/lib/node_exporter/textfile/tvmq.prom.$$ && mv ...   # textfile collector\n  \
    tvmq metrics --listen 127.0.0.1:9100           # /metrics, the dashboard at /, /api/queues\n\n\
    The metric names are in docs/metrics.md.")]
pub struct MetricsArgs {
    /// Serve /metrics, the dashboard (/) and /api/queues on this address until SIGINT or SIGTERM
    /// (64 connections at once, fewer, with a warning, when the open-file limit leaves less)
    #[arg(long, value_name = "ADDR:PORT")]
    listen: Option<SocketAddr>,
    /// Queues listed one by one (the lowest ids); the rest are summed into one series, queue="other"
    #[arg(long, default_value_t = tvmq_watch::DEFAULT_MAX_LISTED, value_name = "N")]
    max_queues: usize,
    /// Require this password file's first line on every request (HTTP Basic, any user, or Bearer);
    /// else $TVMQ_REQUIREPASS, if set
    #[arg(long, value_name = "FILE")]
    requirepass_file: Option<PathBuf>,
    /// Refuse to listen on a non-loopback address without a password (no: allow it)
    #[arg(long, default_value = "yes", value_name = "yes|no", value_parser = tvmq_server::config::parse_yes_no, action = clap::ArgAction::Set)]
    protected_mode: bool,
}

pub fn run(dir: &Path, args: &MetricsArgs) -> Result<(), Error> {
    let Some(addr) = args.listen else {
        let watch = Watch::new(dir, args.max_queues, None);
        let text = watch.exposition()?;
        let mut out = std::io::stdout().lock();
        return out
            .write_all(&text)
            .and_then(|()| out.flush())
            .map_err(|e| Error::new(SVR_EXCEPTION, format!("stdout: {e}")));
    };
    // The password as tvmq serve reads it: the file's first line, else the environment's.
    let serve = tvmq_server::ServeArgs { requirepass_file: args.requirepass_file.clone(), ..Default::default() };
    let password = serve
        .password(std::env::var_os(tvmq_server::config::PASSWORD_ENV))
        .map_err(|e| Error::new(BOOT_PARM_ERR, e))?;
    let give = format!("--requirepass-file FILE or ${}", tvmq_server::config::PASSWORD_ENV);
    if let Some(refusal) =
        tvmq_watch::http::protected_mode_refusal(addr.ip(), password.is_some(), args.protected_mode, &give)
    {
        return Err(Error::new(BOOT_PARM_ERR, refusal));
    }
    let listener = std::net::TcpListener::bind(addr).map_err(|e| Error::new(SOCK_BIND_ERR, format!("{addr}: {e}")))?;
    let max_connections = connections_within_the_limit()?;
    let watch = Arc::new(Watch::new(dir, args.max_queues, None));
    let http = Http::start(listener, watch, HttpOptions { password, max_connections })?;
    println!(
        "tvmq metrics: serving http://{0}/metrics, the dashboard at http://{0}/ and /api/queues; queues in {1}",
        http.local_addr(),
        dir.display()
    );
    let _ = std::io::stdout().flush();
    wait_for_a_stop_signal()?;
    http.stop();
    Ok(())
}

/// Blocks until SIGINT or SIGTERM.
fn wait_for_a_stop_signal() -> Result<(), Error> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::new(SVR_EXCEPTION, format!("cannot start a runtime: {e}")))?;
    rt.block_on(async {
        use tokio::signal::unix::{SignalKind, signal};
        let mut int = signal(SignalKind::interrupt())?;
        let mut term = signal(SignalKind::terminate())?;
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
        Ok::<(), std::io::Error>(())
    })
    .map_err(|e| Error::new(SVR_EXCEPTION, format!("cannot handle signals: {e}")))
}

/// Descriptors kept beside the metrics server's for this process's own
/// (the signals' runtime, the standard streams' spares).
const OWN: usize = 8;

/// The connections `--listen` serves at once: the default, or, when this
/// process's open-file limit (raised to the hard one at the start) leaves
/// less beside what it holds now and what the metrics server needs of its
/// own (its reading of the queues holds at most 4), fewer, with a warning on
/// stderr. Errors: `BOOT_PARM_ERR` when it leaves none.
fn connections_within_the_limit() -> Result<usize, Error> {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit with a valid rlimit pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 || lim.rlim_cur == libc::RLIM_INFINITY {
        return Ok(0);
    }
    let limit = usize::try_from(lim.rlim_cur).unwrap_or(usize::MAX);
    // Those open now (the listing's own descriptor included).
    let open = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count());
    let fixed = tvmq_watch::http::most_descriptors(&HttpOptions { password: None, max_connections: 1 }) - 1;
    let room = limit.saturating_sub(open + fixed + OWN);
    let default = tvmq_watch::http::DEFAULT_MAX_CONNECTIONS;
    if room >= default {
        return Ok(0);
    }
    if room == 0 {
        return Err(Error::new(
            BOOT_PARM_ERR,
            format!(
                "the open-file limit is {limit} (hard limit {}), too low to serve metrics: {open} descriptors are \
                 open and the server needs {} of its own; raise it (ulimit -n, LimitNOFILE=)",
                lim.rlim_max,
                fixed + OWN + 1
            ),
        ));
    }
    eprintln!(
        "tvmq metrics: warning: the open-file limit is {limit} (hard limit {}): serving {room} connections at once, \
         not {default} (beyond, 503); raise it with ulimit -n or LimitNOFILE=",
        lim.rlim_max
    );
    Ok(room)
}
