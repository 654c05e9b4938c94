//! The options of `tvmq serve`, as the command line gives them and as the
//! in-process API ([`crate::Server::start`]) takes them.

use clap::Args;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

/// The default TCP port: STVM's.
pub const DEFAULT_PORT: u16 = 5050;
/// The default `--maxclients`, Redis's.
pub const DEFAULT_MAXCLIENTS: usize = 10_000;
/// The default `--write-timeout`, in seconds.
pub const DEFAULT_WRITE_TIMEOUT_SECS: u64 = 10;
/// The default `--max-bulk-len`: 64 MiB.
pub const DEFAULT_MAX_BULK_LEN: usize = 64 * 1024 * 1024;
/// The default `--max-queues`.
pub const DEFAULT_MAX_QUEUES: usize = 10_000;
/// Without `--max-memory`, the queues the server creates may take this
/// share of the size of the filesystem that holds the queue directory
/// (numerator, denominator): half (of a tmpfs, half of its size).
pub const DEFAULT_MAX_MEMORY_SHARE: (u64, u64) = (1, 2);

/// The options of `tvmq serve`. [`ServeArgs::default`] gives the command
/// line's defaults.
#[derive(Args, Clone, Debug, PartialEq, Eq)]
pub struct ServeArgs {
    /// Address to listen on (loopback by default; 0.0.0.0 or :: for every interface)
    #[arg(long, default_value = "127.0.0.1", value_name = "ADDR")]
    pub bind: IpAddr,
    /// TCP port (0: any free port, printed at startup)
    #[arg(long, default_value_t = DEFAULT_PORT)]
    pub port: u16,
    /// Do not listen on TCP (serve only --unixsocket)
    #[arg(long, requires = "unixsocket")]
    pub no_tcp: bool,
    /// Also listen on this unix socket (removed when the server stops)
    #[arg(long, value_name = "PATH")]
    pub unixsocket: Option<PathBuf>,
    /// Require AUTH with this password before anything else (compared in constant time)
    #[arg(long, value_name = "SECRET")]
    pub requirepass: Option<String>,
    /// Connections served at once; more are told "-ERR max number of clients reached" and closed
    #[arg(long, default_value_t = DEFAULT_MAXCLIENTS, value_name = "N")]
    pub maxclients: usize,
    /// Create a missing queue on first use (push, blocking pop) with ROWS records of SIZE bytes
    #[arg(long, value_name = "ROWSxSIZE", value_parser = parse_auto_create)]
    pub auto_create: Option<AutoCreate>,
    /// Queues --auto-create may have made that still exist; beyond, a command that would create one is refused
    #[arg(long, default_value_t = DEFAULT_MAX_QUEUES, value_name = "N")]
    pub max_queues: usize,
    /// Bytes the files of the queues --auto-create made may take (suffixes k, m, g: KiB, MiB, GiB; default: half the directory's filesystem)
    #[arg(long, value_name = "BYTES", value_parser = parse_bytes)]
    pub max_memory: Option<u64>,
    /// Worker threads (0: one per available core)
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub threads: usize,
    /// Close a connection idle for this many seconds (0: never); blocked clients are not idle
    #[arg(long, default_value_t = 0, value_name = "SECS")]
    pub timeout: u64,
    /// Close a connection that reads none of its replies for this many seconds
    #[arg(long, default_value_t = DEFAULT_WRITE_TIMEOUT_SECS, value_name = "SECS")]
    pub write_timeout: u64,
    /// The longest argument a client may send, in bytes (Redis's proto-max-bulk-len)
    #[arg(long, default_value_t = DEFAULT_MAX_BULK_LEN, value_name = "BYTES")]
    pub max_bulk_len: usize,
}

impl Default for ServeArgs {
    fn default() -> Self {
        ServeArgs {
            bind: IpAddr::from([127, 0, 0, 1]),
            port: DEFAULT_PORT,
            no_tcp: false,
            unixsocket: None,
            requirepass: None,
            maxclients: DEFAULT_MAXCLIENTS,
            auto_create: None,
            max_queues: DEFAULT_MAX_QUEUES,
            max_memory: None,
            threads: 0,
            timeout: 0,
            write_timeout: DEFAULT_WRITE_TIMEOUT_SECS,
            max_bulk_len: DEFAULT_MAX_BULK_LEN,
        }
    }
}

impl ServeArgs {
    /// Worker threads to run: `--threads`, or the available cores.
    pub fn worker_threads(&self) -> usize {
        if self.threads > 0 { self.threads } else { std::thread::available_parallelism().map_or(1, |n| n.get()) }
    }

    /// The idle timeout, if any.
    pub fn idle_timeout(&self) -> Option<Duration> {
        (self.timeout > 0).then(|| Duration::from_secs(self.timeout))
    }

    /// How long a write may make no progress before the client is dropped.
    pub fn write_stall(&self) -> Duration {
        Duration::from_secs(self.write_timeout.max(1))
    }
}

/// The geometry of the queues `--auto-create` makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AutoCreate {
    /// Capacity in records.
    pub rows: u64,
    /// Largest record in bytes.
    pub size: u64,
}

/// Parses `ROWSxSIZE` (e.g. `1000000x304`).
pub fn parse_auto_create(s: &str) -> Result<AutoCreate, String> {
    let bad = || format!("{s:?}: expected ROWSxSIZE, e.g. 1000000x304");
    let (rows, size) = s.split_once(['x', 'X']).ok_or_else(bad)?;
    let rows: u64 = rows.trim().parse().map_err(|_| bad())?;
    let size: u64 = size.trim().parse().map_err(|_| bad())?;
    if rows == 0 || size == 0 {
        return Err(format!("{s:?}: rows and size must both be at least 1"));
    }
    Ok(AutoCreate { rows, size })
}

/// Parses a byte count: digits, optionally followed by `k`, `m` or `g`
/// (KiB, MiB, GiB; either case, a trailing `b` allowed).
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let bad = || format!("{s:?}: expected a number of bytes, e.g. 1073741824, 512m or 4g");
    let t = s.trim().to_ascii_lowercase();
    let t = t.strip_suffix('b').unwrap_or(&t);
    let (digits, shift) = match t.chars().last() {
        Some('k') => (&t[..t.len() - 1], 10),
        Some('m') => (&t[..t.len() - 1], 20),
        Some('g') => (&t[..t.len() - 1], 30),
        _ => (t, 0),
    };
    let n: u64 = digits.parse().map_err(|_| bad())?;
    n.checked_mul(1 << shift).ok_or_else(bad)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        serve: ServeArgs,
    }

    #[test]
    fn default_is_what_the_command_line_gives() {
        assert_eq!(Cli::parse_from(["serve"]).serve, ServeArgs::default());
    }

    #[test]
    fn auto_create_geometry() {
        assert_eq!(parse_auto_create("1000x304"), Ok(AutoCreate { rows: 1000, size: 304 }));
        for bad in ["", "x", "10", "0x5", "5x0", "-1x4", "axb", "1x2x3"] {
            assert!(parse_auto_create(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn byte_counts() {
        assert_eq!(parse_bytes("1000"), Ok(1000));
        assert_eq!(parse_bytes("64k"), Ok(64 << 10));
        assert_eq!(parse_bytes("512MB"), Ok(512 << 20));
        assert_eq!(parse_bytes("4g"), Ok(4 << 30));
        for bad in ["", "k", "-1", "1t", "99999999999999999999g", "1.5g"] {
            assert!(parse_bytes(bad).is_err(), "{bad}");
        }
    }
}
