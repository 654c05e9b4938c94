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
    let watch = Arc::new(Watch::new(dir, args.max_queues, None));
    let http = Http::start(listener, watch, HttpOptions { password, max_connections: 0 })?;
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
