//! The options of `tvmq serve`, as the command line gives them and as the
//! in-process API ([`crate::Server::start`]) takes them.

use clap::Args;
use std::ffi::OsString;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The default TCP port: STVM's.
pub const DEFAULT_PORT: u16 = 5050;
/// The default `--maxclients`, Redis's.
pub const DEFAULT_MAXCLIENTS: usize = 10_000;
/// The default `--write-timeout`, in seconds.
pub const DEFAULT_WRITE_TIMEOUT_SECS: u64 = 10;
/// The default `--max-bulk-len`: 64 MiB.
pub const DEFAULT_MAX_BULK_LEN: usize = 64 * 1024 * 1024;
/// The default `--unixsocketperm`: the owner only.
pub const DEFAULT_UNIXSOCKETPERM: u32 = 0o700;
/// The environment variable read for the password when neither
/// `--requirepass` nor `--requirepass-file` is given.
pub const PASSWORD_ENV: &str = "TVMQ_REQUIREPASS";
/// The longest password file read, in bytes.
const MAX_PASSWORD_FILE: u64 = 64 * 1024;
/// The default `--tls-handshake-timeout`, in seconds.
pub const DEFAULT_TLS_HANDSHAKE_TIMEOUT_SECS: u64 = 5;
/// The default `--metrics-max-queues`.
pub const DEFAULT_METRICS_MAX_QUEUES: usize = 10_000;
/// The default `--pool-threads`.
pub const DEFAULT_POOL_THREADS: usize = 8;
/// The default `--max-queues`.
pub const DEFAULT_MAX_QUEUES: usize = 10_000;
/// The default `--auth-timeout`, in seconds.
pub const DEFAULT_AUTH_TIMEOUT_SECS: u64 = 5;
/// The default `--tls-handshakes-per-second`.
pub const DEFAULT_TLS_HANDSHAKES_PER_SECOND: u32 = 500;
/// The shortest password accepted at the start, in bytes: a shorter one is
/// guessed too soon at the 10 tries a second a connection may make.
pub const MIN_PASSWORD_LEN: usize = 8;
/// The longest argument a client that has not authenticated may send
/// (Redis's bound before AUTH).
pub const PREAUTH_MAX_ARG_LEN: usize = 16 * 1024;
/// The longest password accepted at the start, in bytes: the longest
/// argument an unauthenticated client may send (a longer one could never
/// be given).
pub const MAX_PASSWORD_LEN: usize = PREAUTH_MAX_ARG_LEN;
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
    /// Do not listen on plain TCP (serve only --unixsocket and/or --tls-port)
    #[arg(long)]
    pub no_tcp: bool,
    /// Also listen on this unix socket (removed when the server stops, if it is still the server's)
    #[arg(long, value_name = "PATH")]
    pub unixsocket: Option<PathBuf>,
    /// Mode of the unix socket, in octal (Redis's unixsocketperm); 700: its owner only
    #[arg(long, default_value = "700", value_name = "OCTAL", value_parser = parse_octal_mode)]
    pub unixsocketperm: u32,
    /// Require AUTH with this password (8 bytes to 16 KiB) before anything else; other users see
    /// it in ps: prefer --requirepass-file or $TVMQ_REQUIREPASS
    #[arg(long, value_name = "SECRET", conflicts_with = "requirepass_file")]
    pub requirepass: Option<String>,
    /// Require AUTH with the password on the first line of this file (its newline stripped)
    #[arg(long, value_name = "FILE")]
    pub requirepass_file: Option<PathBuf>,
    /// Refuse to listen on a non-loopback address without a password (no: allow it)
    #[arg(long, default_value = "yes", value_name = "yes|no", value_parser = parse_yes_no, action = clap::ArgAction::Set)]
    pub protected_mode: bool,
    /// Connections served at once; more are told "-ERR max number of clients reached" and closed (on the TLS port, closed alone)
    /// (lowered, with a warning, to what the open-file limit allows)
    #[arg(long, default_value_t = DEFAULT_MAXCLIENTS, value_name = "N")]
    pub maxclients: usize,
    /// Connections that have not authenticated yet (with a password); beyond, the oldest of them
    /// is closed (0: half of --maxclients)
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub max_unauthenticated: usize,
    /// Close a connection that has not authenticated within this many seconds (with a password;
    /// 0: never)
    #[arg(long, default_value_t = DEFAULT_AUTH_TIMEOUT_SECS, value_name = "SECS")]
    pub auth_timeout: u64,
    /// Queues held open at once (durable ones still being closed count); near it, the least
    /// recently used ones nobody is using are closed (0: sized from the open-file limit)
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub max_open_queues: usize,
    /// Create a missing queue on first use (push, blocking pop) with ROWS records of SIZE bytes
    #[arg(long, value_name = "ROWSxSIZE", value_parser = parse_auto_create)]
    pub auto_create: Option<AutoCreate>,
    /// Queues made by --auto-create (of any run or server: marked so in their header) that may exist in the
    /// directory; beyond, a command that would create one is refused
    #[arg(long, default_value_t = DEFAULT_MAX_QUEUES, value_name = "N")]
    pub max_queues: usize,
    /// Bytes the files of the queues made by --auto-create (of any run or server) may take (suffixes k, m, g: KiB,
    /// MiB, GiB; default: half the directory's filesystem)
    #[arg(long, value_name = "BYTES", value_parser = parse_bytes)]
    pub max_memory: Option<u64>,
    /// Worker threads (0: one per available core)
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub threads: usize,
    /// Threads that run the work taken off the workers (queue creation, TVMQ.REPAIR, LTRIM, DEL, scans,
    /// leases of always queues); more work waits in line, in order
    #[arg(long, default_value_t = DEFAULT_POOL_THREADS, value_name = "N", value_parser = parse_pool_threads)]
    pub pool_threads: usize,
    /// Close a connection idle for this many seconds (0: never); blocked clients are not idle
    #[arg(long, default_value_t = 0, value_name = "SECS")]
    pub timeout: u64,
    /// Close a connection that reads none of its replies for this many seconds
    #[arg(long, default_value_t = DEFAULT_WRITE_TIMEOUT_SECS, value_name = "SECS")]
    pub write_timeout: u64,
    /// The longest argument a client may send, in bytes (Redis's proto-max-bulk-len)
    #[arg(long, default_value_t = DEFAULT_MAX_BULK_LEN, value_name = "BYTES")]
    pub max_bulk_len: usize,
    /// Also listen for TLS on this port of --bind (0: any free port, printed at startup)
    #[arg(long, value_name = "PORT", requires_all = ["tls_cert_file", "tls_key_file"])]
    pub tls_port: Option<u16>,
    /// The server's certificate chain, PEM (leaf first)
    #[arg(long, value_name = "FILE", requires = "tls_port")]
    pub tls_cert_file: Option<PathBuf>,
    /// The private key of --tls-cert-file, PEM (PKCS#8, PKCS#1 or SEC1)
    #[arg(long, value_name = "FILE", requires = "tls_port")]
    pub tls_key_file: Option<PathBuf>,
    /// Require a client certificate signed by a CA of this PEM file on TLS connections
    #[arg(long, value_name = "FILE", requires = "tls_port")]
    pub tls_ca_cert_file: Option<PathBuf>,
    /// Close a TLS connection whose handshake has not completed within this many seconds
    #[arg(long, default_value_t = DEFAULT_TLS_HANDSHAKE_TIMEOUT_SECS, value_name = "SECS")]
    pub tls_handshake_timeout: u64,
    /// Serve Prometheus metrics (/metrics), the web dashboard (/) and /api/queues on this HTTP port
    /// (0: any free port, printed at startup)
    #[arg(long, value_name = "PORT")]
    pub metrics_port: Option<u16>,
    /// Address of --metrics-port (loopback by default; elsewhere protected mode asks for a password,
    /// which every request must then carry: HTTP Basic, any user, or a Bearer token)
    #[arg(long, default_value = "127.0.0.1", value_name = "ADDR", requires = "metrics_port")]
    pub metrics_bind: IpAddr,
    /// Queues the metrics list one by one (the lowest ids); the rest are summed into queue="other"
    #[arg(long, default_value_t = DEFAULT_METRICS_MAX_QUEUES, value_name = "N")]
    pub metrics_max_queues: usize,
    /// TLS handshakes begun per second at most; a TLS connection beyond is closed at once
    #[arg(long, default_value_t = DEFAULT_TLS_HANDSHAKES_PER_SECOND, value_name = "N")]
    pub tls_handshakes_per_second: u32,
}

impl Default for ServeArgs {
    fn default() -> Self {
        ServeArgs {
            bind: IpAddr::from([127, 0, 0, 1]),
            port: DEFAULT_PORT,
            no_tcp: false,
            unixsocket: None,
            unixsocketperm: DEFAULT_UNIXSOCKETPERM,
            requirepass: None,
            requirepass_file: None,
            protected_mode: true,
            maxclients: DEFAULT_MAXCLIENTS,
            max_unauthenticated: 0,
            auth_timeout: DEFAULT_AUTH_TIMEOUT_SECS,
            max_open_queues: 0,
            auto_create: None,
            max_queues: DEFAULT_MAX_QUEUES,
            max_memory: None,
            threads: 0,
            pool_threads: DEFAULT_POOL_THREADS,
            timeout: 0,
            write_timeout: DEFAULT_WRITE_TIMEOUT_SECS,
            max_bulk_len: DEFAULT_MAX_BULK_LEN,
            tls_port: None,
            tls_cert_file: None,
            tls_key_file: None,
            tls_ca_cert_file: None,
            tls_handshake_timeout: DEFAULT_TLS_HANDSHAKE_TIMEOUT_SECS,
            metrics_port: None,
            metrics_bind: IpAddr::from([127, 0, 0, 1]),
            metrics_max_queues: DEFAULT_METRICS_MAX_QUEUES,
            tls_handshakes_per_second: DEFAULT_TLS_HANDSHAKES_PER_SECOND,
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

    /// How long a connection may take to authenticate, if a limit is set.
    pub fn auth_limit(&self) -> Option<Duration> {
        (self.auth_timeout > 0).then(|| Duration::from_secs(self.auth_timeout))
    }

    /// How long a TLS handshake may take (at least a second).
    pub fn tls_handshake(&self) -> Duration {
        Duration::from_secs(self.tls_handshake_timeout.max(1))
    }

    /// Do TLS connections have to show a client certificate that verifies
    /// (`--tls-ca-cert-file`)? Such a certificate authenticates its client
    /// as a password does.
    pub fn tls_client_certs_required(&self) -> bool {
        self.tls_port.is_some() && self.tls_ca_cert_file.is_some()
    }

    /// The password clients must give: `--requirepass`, else the first line
    /// of `--requirepass-file`, else `env` (the value of
    /// [`PASSWORD_ENV`], which [`crate::Server::start`] reads), else none.
    /// Wherever it comes from, one shorter than [`MIN_PASSWORD_LEN`] or
    /// longer than [`MAX_PASSWORD_LEN`] bytes is an error that says why.
    pub fn password(&self, env: Option<OsString>) -> Result<Option<Vec<u8>>, String> {
        let (secret, from) = if let Some(p) = &self.requirepass {
            (p.as_bytes().to_vec(), "--requirepass".to_string())
        } else if let Some(path) = &self.requirepass_file {
            (read_password_file(path)?, format!("--requirepass-file {}", path.display()))
        } else if let Some(v) = env {
            (std::os::unix::ffi::OsStringExt::into_vec(v), format!("${PASSWORD_ENV}"))
        } else {
            return Ok(None);
        };
        if secret.is_empty() {
            return Err(format!("{from}: the password is empty; give a non-empty one, or none to need no AUTH"));
        }
        if secret.len() < MIN_PASSWORD_LEN {
            return Err(format!(
                "{from}: the password is {} bytes, at least {MIN_PASSWORD_LEN} are needed: a connection may try \
                 10 passwords a second, so a short one is soon guessed (make one with `openssl rand -base64 24`)",
                secret.len()
            ));
        }
        if secret.len() > MAX_PASSWORD_LEN {
            return Err(format!(
                "{from}: the password is {} bytes, at most {MAX_PASSWORD_LEN} are allowed: an unauthenticated \
                 client may send no longer argument, so no client could ever give it",
                secret.len()
            ));
        }
        Ok(Some(secret))
    }

    /// Does the server make clients prove who they are before serving
    /// them (a password, from any source)? Protected mode asks this.
    pub fn authenticates_clients(&self, env: Option<&std::ffi::OsStr>) -> bool {
        self.requirepass.is_some() || self.requirepass_file.is_some() || env.is_some()
    }

    /// Protected mode's refusal: listening on a non-loopback address
    /// while not [authenticating clients](Self::authenticates_clients),
    /// unless `--protected-mode no`. A client certificate required on the
    /// TLS port (`--tls-ca-cert-file`) authenticates that port only: a
    /// plain TCP port beside it still needs a password. The message says
    /// how to proceed.
    pub fn protected_mode_refusal(&self, env: Option<&std::ffi::OsStr>) -> Option<String> {
        if !self.protected_mode || is_loopback(self.bind) || self.authenticates_clients(env) {
            return None;
        }
        let open_tcp = !self.no_tcp;
        let open_tls = self.tls_port.is_some() && !self.tls_client_certs_required();
        if !open_tcp && !open_tls {
            return None;
        }
        Some(format!(
            "protected mode: refusing to listen on {} without a password, where anyone who reaches the port could \
             read and write every queue; give one (--requirepass-file FILE, ${PASSWORD_ENV} or --requirepass), \
             or require TLS client certificates (--tls-ca-cert-file with --no-tcp), \
             or listen on loopback (--bind 127.0.0.1) or a unix socket (--unixsocket PATH --no-tcp), \
             or, on a network you trust, say --protected-mode no",
            self.bind
        ))
    }
}

/// Is `ip` a loopback address (an IPv4-mapped one included)?
fn is_loopback(ip: IpAddr) -> bool {
    ip.to_canonical().is_loopback()
}

/// The first line of a password file, its line end stripped. A file that
/// others than its owner may read gives a warning on stderr.
fn read_password_file(path: &Path) -> Result<Vec<u8>, String> {
    use std::io::Read;
    use std::os::unix::fs::PermissionsExt;
    let what = |e: std::io::Error| format!("--requirepass-file {}: {e}", path.display());
    let file = std::fs::File::open(path).map_err(what)?;
    let mode = file.metadata().map_err(what)?.permissions().mode();
    if mode & 0o077 != 0 {
        eprintln!(
            "tvmq serve: warning: --requirepass-file {} is readable by others than its owner (mode {:o}); \
             chmod 600 it",
            path.display(),
            mode & 0o777
        );
    }
    let mut bytes = Vec::new();
    file.take(MAX_PASSWORD_FILE).read_to_end(&mut bytes).map_err(what)?;
    let line = bytes.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    Ok(line.to_vec())
}

/// The most `--pool-threads`.
pub const MAX_POOL_THREADS: usize = 1024;

/// Parses `--pool-threads`: 1 to [`MAX_POOL_THREADS`].
pub fn parse_pool_threads(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if (1..=MAX_POOL_THREADS).contains(&n) => Ok(n),
        _ => Err(format!("{s:?}: expected 1 to {MAX_POOL_THREADS} threads")),
    }
}

/// Parses `yes` or `no` (Redis's spelling of its boolean settings).
pub fn parse_yes_no(s: &str) -> Result<bool, String> {
    match s.to_ascii_lowercase().as_str() {
        "yes" => Ok(true),
        "no" => Ok(false),
        _ => Err(format!("{s:?}: expected yes or no")),
    }
}

/// Parses a file mode in octal (`700`, `0770`).
pub fn parse_octal_mode(s: &str) -> Result<u32, String> {
    match u32::from_str_radix(s, 8) {
        Ok(m) if m <= 0o777 => Ok(m),
        _ => Err(format!("{s:?}: expected a mode in octal, 0 to 777 (e.g. 700, 770)")),
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
    fn passwords_come_from_one_place_and_are_never_empty() {
        let none = ServeArgs::default();
        assert_eq!(none.password(None), Ok(None));
        assert_eq!(none.password(Some("s3cret-s3cret".into())), Ok(Some(b"s3cret-s3cret".to_vec())));
        assert!(none.password(Some("".into())).is_err());
        let given = ServeArgs { requirepass: Some("aaaaaaaa".into()), ..ServeArgs::default() };
        assert_eq!(given.password(Some("bbbbbbbb".into())), Ok(Some(b"aaaaaaaa".to_vec())), "the option wins");
        assert!(ServeArgs { requirepass: Some(String::new()), ..ServeArgs::default() }.password(None).is_err());
        assert!(Cli::try_parse_from(["serve", "--requirepass", "a", "--requirepass-file", "f"]).is_err());
    }

    #[test]
    fn passwords_are_8_bytes_to_the_preauth_argument_limit() {
        let with = |len: usize| ServeArgs { requirepass: Some("p".repeat(len)), ..ServeArgs::default() }.password(None);
        let short = with(MIN_PASSWORD_LEN - 1).unwrap_err();
        assert!(short.contains("is 7 bytes, at least 8") && short.contains("guessed"), "{short}");
        assert!(with(MIN_PASSWORD_LEN).is_ok());
        assert!(with(MAX_PASSWORD_LEN).is_ok());
        let long = with(MAX_PASSWORD_LEN + 1).unwrap_err();
        assert!(long.contains("at most 16384") && long.contains("no client could ever give it"), "{long}");
        let env = ServeArgs::default().password(Some("x".into())).unwrap_err();
        assert!(env.starts_with("$TVMQ_REQUIREPASS: the password is 1 bytes"), "{env}");
    }

    #[test]
    fn protected_mode() {
        let open = |bind: &str, extra: &[&str]| {
            let mut all = vec!["serve", "--bind", bind];
            all.extend_from_slice(extra);
            Cli::parse_from(all).serve.protected_mode_refusal(None)
        };
        assert!(open("0.0.0.0", &[]).is_some());
        assert!(open("::", &[]).is_some());
        assert!(open("127.0.0.1", &[]).is_none());
        assert!(open("::1", &[]).is_none());
        assert!(open("::ffff:127.0.0.1", &[]).is_none());
        assert!(open("0.0.0.0", &["--requirepass", "x"]).is_none(), "its length is checked later");
        assert!(open("0.0.0.0", &["--protected-mode", "no"]).is_none());
        assert!(
            Cli::parse_from(["serve", "--bind", "0.0.0.0"]).serve.protected_mode_refusal(Some("x".as_ref())).is_none()
        );
        assert!(Cli::try_parse_from(["serve", "--protected-mode", "maybe"]).is_err());
        // Required client certificates authenticate the TLS port only.
        let tls = ["--tls-port", "6390", "--tls-cert-file", "c", "--tls-key-file", "k"];
        let certs = [&tls[..], &["--tls-ca-cert-file", "ca"]].concat();
        assert!(open("0.0.0.0", &[&tls[..], &["--no-tcp"]].concat()).is_some(), "TLS without client certificates");
        assert!(open("0.0.0.0", &certs).is_some(), "the plain port beside it is open");
        assert!(open("0.0.0.0", &[&certs[..], &["--no-tcp"]].concat()).is_none(), "TLS only, certificates required");
    }

    #[test]
    fn socket_modes_are_octal() {
        assert_eq!(parse_octal_mode("700"), Ok(0o700));
        assert_eq!(parse_octal_mode("0770"), Ok(0o770));
        for bad in ["", "8", "1777", "rwx", "-1"] {
            assert!(parse_octal_mode(bad).is_err(), "{bad}");
        }
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
