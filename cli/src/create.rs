//! `tvmq create`: one queue from the command line, or the queues of an STVM
//! definition file (`--def`).

use crate::def;
use clap::Args;
use std::path::{Path, PathBuf};
use tvm::error::{CONDIT_IS_NIL, FIL_NOT_EXIST, SQL_SYNTX_ERR};
use tvm::{Error, Queue, Spec};

#[derive(Args)]
#[command(after_help = "Examples:\n  \
    tvmq create 21 --rows 4000000 --size 304 --name QUEUE_USER_INFO\n  \
    tvmq create --def queues.def          # the queues of an STVM definition file\n  \
    tvmq create 21 --rows 100000 --size 304 --spin-us 1000   # pops spin 1 ms before sleeping\n  \
    tvmq --dir /var/lib/tvmq create 21 --rows 100000 --size 304 --durable always   # survives a machine crash\n  \
    tvmq create 21 --rows 100000 --size 304 --lease-ms 30000 --max-deliveries 5 --dead-letter 22   # leases (lPopLease)\n\n\
    A definition file sets the next queue's id and rows, then describes its record as a C struct:\n  \
    set TABLE=22\n  set TABLESPACE=10000\n  create queue QUEUE_USER_FIELD ( acct_id long, user_no char(21), user_nm char[81] );\n\
    Types: long, int, short, double, char, char(n) / char[n]; comments: --, #, //, /* */.")]
pub struct CreateArgs {
    /// Queue id (the TABLE number programs use, e.g. 21)
    #[arg(required_unless_present = "def", conflicts_with = "def")]
    id: Option<u32>,
    /// Exact capacity in records
    #[arg(long, value_name = "N", required_unless_present = "def", conflicts_with = "def", value_parser = parse_count)]
    rows: Option<u64>,
    /// Largest record in bytes
    #[arg(long, value_name = "BYTES", required_unless_present = "def", conflicts_with = "def", value_parser = parse_count)]
    size: Option<u64>,
    /// Queue name, at most 63 bytes (default: the id)
    #[arg(long, conflicts_with = "def", value_parser = parse_name)]
    name: Option<String>,
    /// Create the queues of an STVM queue definition file (ids, rows, record layouts)
    #[arg(long, value_name = "FILE")]
    def: Option<PathBuf>,
    /// Partition text stored with the queue, at most 31 bytes
    #[arg(long, default_value = "", value_parser = parse_part)]
    part: String,
    /// Permission bits of the queue file, in octal
    #[arg(long, default_value = "0600", value_parser = parse_mode)]
    mode: u32,
    /// How long a waiter waits for a stalled slot whose holder cannot be
    /// identified, before recovering it (dead holders are recovered at once)
    #[arg(long, value_name = "MS", default_value_t = tvm::DEFAULT_UNBLOCK_TIMEOUT_MS)]
    unblock_timeout_ms: u64,
    /// How long a blocking pop spins on an empty queue before it sleeps, in
    /// microseconds (one CPU busy meanwhile); -1: never sleep. Default: a few
    /// microseconds of spinning. $TVMQ_SPIN_US overrides it per process
    #[arg(long, value_name = "US", allow_negative_numbers = true, value_parser = parse_spin)]
    spin_us: Option<i64>,
    /// Make the queue durable (its directory must be on a disk, not tmpfs):
    /// `always` (a push or pop returns once it is on stable storage) or
    /// `interval=MS` (changes reach the disk within MS milliseconds; a
    /// machine crash may lose the last MS of pushes and deliver again the
    /// last MS of pops). A queue with leases may be durable with either
    /// policy: its leases and acknowledgements survive a machine crash too
    /// (with `interval=MS`, those of the last sync). Default: not durable
    /// (survives process crashes only)
    #[arg(long, value_name = "always|interval=MS", value_parser = parse_durable)]
    durable: Option<tvm::Durability>,
    /// Give the queue leases (acknowledged consumption: lPopLease, lAck, ...,
    /// docs/leases.md), with this default lease time in milliseconds. Any of
    /// the four lease options turns leases on; the others take their defaults
    /// (lease 30000 ms, no delivery limit, no dead-letter queue, 1024 leases)
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..))]
    lease_ms: Option<u64>,
    /// Leases: a record delivered this many times without an acknowledgement
    /// goes to the dead-letter queue (dropped, counted, without one); 0: no limit
    #[arg(long, value_name = "N")]
    max_deliveries: Option<u32>,
    /// Leases: the queue that rejected records (and those past
    /// --max-deliveries) go to; without it they are dropped, counted
    #[arg(long, value_name = "ID")]
    dead_letter: Option<u32>,
    /// Leases: most leases in flight at once (like a consumer prefetch; a
    /// pop beyond it fails with LEASE_LIMIT); sizes the file's lease table
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    max_leases: Option<u64>,
}

impl CreateArgs {
    /// The lease settings the options ask for (`None`: a plain queue).
    fn leases(&self) -> Option<tvm::LeaseSpec> {
        if self.lease_ms.is_none()
            && self.max_deliveries.is_none()
            && self.dead_letter.is_none()
            && self.max_leases.is_none()
        {
            return None;
        }
        let d = tvm::LeaseSpec::default();
        Some(tvm::LeaseSpec {
            lease_ms: self.lease_ms.unwrap_or(d.lease_ms),
            max_deliveries: self.max_deliveries.unwrap_or(d.max_deliveries),
            dead_letter: self.dead_letter,
            max_leases: self.max_leases.unwrap_or(d.max_leases),
        })
    }
}

fn parse_count(s: &str) -> Result<u64, String> {
    match s.parse::<u64>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("{s:?} is not a whole number")),
    }
}

fn parse_durable(s: &str) -> Result<tvm::Durability, String> {
    tvm::Durability::parse(s).map_err(|e| e.detail().to_string())
}

fn parse_spin(s: &str) -> Result<i64, String> {
    s.parse::<i64>()
        .ok()
        .filter(|&v| v >= -1)
        .ok_or_else(|| format!("{s:?}: -1 (never sleep) or a number of microseconds >= 0"))
}

/// A text the queue's header keeps whole: at most `max` bytes, no NUL (the
/// library cuts a longer one, as STVM programs expect; a command refuses it).
fn fits(what: &str, s: &str, max: usize) -> Result<String, String> {
    if s.contains('\0') {
        return Err(format!("a {what} cannot contain a NUL byte"));
    }
    if s.len() > max {
        return Err(format!("a {what} of {} bytes is longer than the {max} a queue keeps", s.len()));
    }
    Ok(s.to_string())
}

fn parse_name(s: &str) -> Result<String, String> {
    fits("queue name", s, tvm::MAX_NAME)
}

fn parse_part(s: &str) -> Result<String, String> {
    fits("partition text", s, tvm::MAX_PART)
}

fn parse_mode(s: &str) -> Result<u32, String> {
    u32::from_str_radix(s.trim_start_matches("0o"), 8)
        .ok()
        .filter(|m| *m <= 0o777)
        .ok_or_else(|| format!("{s:?} is not an octal permission mode such as 0600 or 0660"))
}

fn create_one(dir: &Path, id: u32, spec: &Spec) -> Result<(), Error> {
    let started = std::time::Instant::now();
    Queue::create(dir, id, spec)?;
    warn_dead_letter(dir, id, spec);
    let durable = spec.durability.map(|d| format!(", durable {d}")).unwrap_or_default();
    let leases = spec.leases.as_ref().map_or(String::new(), |l| {
        let dl = l.dead_letter.map_or("none".to_string(), |d| d.to_string());
        let limit = match l.max_deliveries {
            0 => "no delivery limit".to_string(),
            1 => "at most 1 delivery".to_string(),
            n => format!("at most {n} deliveries"),
        };
        format!(", leases: {} ms, {limit}, dead letter {dl}, max leases {}", l.lease_ms, l.max_leases)
    });
    println!(
        "created queue {id} ({} x {}, mode {:04o}{durable}{leases}) in {} ms: {}",
        count(spec.rows, "row"),
        count(spec.record_size, "byte"),
        spec.mode,
        started.elapsed().as_millis(),
        tvm::queue_path(dir, id).display()
    );
    Ok(())
}

/// The options other than the queue's id, geometry and name.
fn base_spec(a: &CreateArgs) -> Spec {
    let mut base = Spec::new(0, 0);
    base.part = a.part.clone();
    base.mode = a.mode;
    base.unblock_timeout_ms = a.unblock_timeout_ms;
    base.spin_us = a.spin_us;
    base.durability = a.durable;
    base.leases = a.leases();
    base
}

/// The queue the options describe, unless they name a definition file.
fn one_queue(a: &CreateArgs) -> Option<(u32, Spec)> {
    let (Some(id), Some(rows), Some(size)) = (a.id, a.rows, a.size) else { return None };
    let mut spec = base_spec(a);
    spec.rows = rows;
    spec.record_size = size;
    spec.name = a.name.clone().unwrap_or_else(|| id.to_string());
    Some((id, spec))
}

/// What clap cannot check of the options: the queue's settings together
/// (a queue its own dead-letter queue, more rows than a queue holds, ...).
/// An error is a usage error.
pub fn check(a: &CreateArgs) -> Result<(), Error> {
    match one_queue(a) {
        Some((id, spec)) => spec.check(id),
        None => Ok(()),
    }
}

pub fn run(dir: &Path, a: &CreateArgs) -> Result<(), Error> {
    if let Some(path) = &a.def {
        return create_from_file(dir, path, &base_spec(a));
    }
    let Some((id, spec)) = one_queue(a) else {
        return Err(Error::new(CONDIT_IS_NIL, "give <id>, --rows and --size, or --def FILE"));
    };
    create_one(dir, id, &spec)
}

/// A dead-letter queue that does not exist, or takes shorter records, makes
/// rejected records (and those past the delivery limit) wait in the lease
/// table instead: said on stderr, since the queue may well be created later.
fn warn_dead_letter(dir: &Path, id: u32, spec: &Spec) {
    let Some(dl) = spec.leases.as_ref().and_then(|l| l.dead_letter) else { return };
    let waits = format!(
        "records queue {id} rejects, or delivers too often, wait in its lease table (\"dead-letter pending\" \
         in tvmq stat)"
    );
    match Queue::inspect(dir, dl) {
        Ok(q) if (q.record_size() as u64) < spec.record_size => eprintln!(
            "tvmq: warning: dead-letter queue {dl} takes records of up to {} bytes, queue {id}'s are up to {}: \
             {waits} when longer",
            q.record_size(),
            spec.record_size
        ),
        Ok(_) => {}
        Err(e) if e.code() == tvm::error::TBL_NOT_FOUND => eprintln!(
            "tvmq: warning: dead-letter queue {dl} does not exist in {}: until it is created, {waits}",
            dir.display()
        ),
        Err(e) => eprintln!("tvmq: warning: dead-letter queue {dl} cannot be read: {e}"),
    }
}

/// `1 row`, `2 rows`.
pub fn count(n: u64, what: &str) -> String {
    format!("{n} {what}{}", if n == 1 { "" } else { "s" })
}

/// Creates every queue of the file, in order; stops at the first failure
/// (the queues before it stay created, and the error says which one failed).
fn create_from_file(dir: &Path, path: &Path, base: &Spec) -> Result<(), Error> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::new(FIL_NOT_EXIST, format!("cannot read {}: {e}", path.display())))?;
    let queues = def::parse(&text)
        .map_err(|e| Error::new(SQL_SYNTX_ERR, format!("{}:{}:{}: {}", path.display(), e.line, e.column, e.message)))?;
    for q in &queues {
        create_one(dir, q.id, &q.spec(base)).map_err(|e| {
            Error::new(e.code(), format!("{}:{}: queue {} ({}): {}", path.display(), q.line, q.id, q.name, e.what()))
        })?;
    }
    Ok(())
}
