//! What a queue is asked to be: [`Spec`] (with [`LeaseSpec`] for
//! acknowledged consumption and [`Durability`] for durable queues), the
//! limits and defaults that bound it, and their validation. No I/O: the
//! file a spec describes is made by `file::create`, which also computes its
//! size ([`Spec::file_size`], from `file::layout`).

use crate::error::*;
use crate::lease::state::MAX_DELIVERIES;
use crate::ring::MAX_CAPACITY;
use crate::schema::Field;
use std::time::Duration;

/// Unblock timeout written into new queues unless told otherwise.
pub const DEFAULT_UNBLOCK_TIMEOUT_MS: u64 = 10_000;
/// Lease time of a queue with leases unless told otherwise (SQS's default
/// visibility timeout).
pub const DEFAULT_LEASE_MS: u64 = 30_000;
/// Leases in flight at most on a queue with leases unless told otherwise.
pub const DEFAULT_MAX_LEASES: u64 = 1024;
/// Largest record size (the slot keeps lengths in 32 bits).
pub const MAX_RECORD_SIZE: u64 = 1 << 30;
/// Longest interval a durable queue may have (one hour).
pub(crate) const MAX_INTERVAL_MS: u64 = 3_600_000;
/// Longest lease a queue may default to, and longest lease time or release
/// delay one call may give ([`crate::Queue::pop_lease`],
/// [`crate::Queue::extend_lease`], [`crate::Queue::release`]): a year.
pub const MAX_LEASE_MS: u64 = 365 * 24 * 3600 * 1000;
/// Most leases a queue may have in flight (entries of its lease table).
pub const MAX_LEASES: u64 = crate::lease::MAX_ENTRIES;
/// Longest queue name kept in the header, in bytes (a longer one is cut).
pub const MAX_NAME: usize = 63;
/// Longest partition text kept in the header, in bytes (a longer one is cut).
pub const MAX_PART: usize = 31;

/// The settings of a queue with acknowledged consumption ([`Spec::leases`]):
/// see [`crate::Queue::pop_lease`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseSpec {
    /// Lease time of a pop that gives none, in milliseconds (1 to a year;
    /// default [`DEFAULT_LEASE_MS`]).
    pub lease_ms: u64,
    /// A record delivered this many times without being acknowledged goes
    /// to the dead-letter queue (0, the default: no limit; at most 65,535).
    pub max_deliveries: u32,
    /// The queue that rejected records, and those past the delivery limit,
    /// go to (it must exist when they do); `None`: they are dropped, counted.
    pub dead_letter: Option<u32>,
    /// Most leases in flight at once (the size of the file's lease table;
    /// default [`DEFAULT_MAX_LEASES`], at most 1,048,576): like a consumer
    /// prefetch, a pop beyond it fails with `LEASE_LIMIT`.
    pub max_leases: u64,
}

impl Default for LeaseSpec {
    fn default() -> LeaseSpec {
        LeaseSpec { lease_ms: DEFAULT_LEASE_MS, max_deliveries: 0, dead_letter: None, max_leases: DEFAULT_MAX_LEASES }
    }
}

/// What [`crate::Queue::create`] makes.
#[derive(Clone, Debug)]
pub struct Spec {
    /// Exact capacity in records, >= 1.
    pub rows: u64,
    /// Largest record in bytes, >= 1.
    pub record_size: u64,
    /// The queue's name (at most 63 bytes are kept).
    pub name: String,
    /// Free text stored with the queue (at most 31 bytes are kept).
    pub part: String,
    /// The record layout, if any.
    pub fields: Vec<Field>,
    /// Permission bits of the file (0600 unless told otherwise).
    pub mode: u32,
    /// How long a stalled slot whose holder cannot be told dead or alive is
    /// waited for before it is recovered.
    pub unblock_timeout_ms: u64,
    /// How long a blocking pop spins (in microseconds) on an empty queue
    /// before it sleeps; `Some(-1)`: it never sleeps. `None`: the library's
    /// default (at most 5 microseconds of spinning, and only while such
    /// spins have been catching records).
    /// A process can override it with `$TVMQ_SPIN_US`.
    pub spin_us: Option<i64>,
    /// `Some`: a durable queue (see [`crate::Durability`]), whose directory
    /// must be on a filesystem that persists (not tmpfs or ramfs). `None`:
    /// as fast as memory; survives process crashes, not a machine crash.
    pub durability: Option<Durability>,
    /// Acknowledged consumption: `Some` gives the queue a lease table
    /// ([`crate::Queue::pop_lease`] and the other lease calls); `None`, the
    /// default, makes a plain queue.
    pub leases: Option<LeaseSpec>,
}

impl Spec {
    /// A queue of `rows` records of up to `record_size` bytes, mode 0600.
    pub fn new(rows: u64, record_size: u64) -> Spec {
        Spec {
            rows,
            record_size,
            name: String::new(),
            part: String::new(),
            fields: Vec::new(),
            mode: 0o600,
            unblock_timeout_ms: DEFAULT_UNBLOCK_TIMEOUT_MS,
            spin_us: None,
            durability: None,
            leases: None,
        }
    }

    /// Checks the geometry as [`crate::Queue::create`] does (rows and
    /// record size from 1 to their limits, a file that can be addressed)
    /// and gives the size of the file it makes, without creating anything:
    /// for a program that must know before it creates (a server validating
    /// its options at start). Errors: `CONDIT_IS_NIL`, `MQUE_CRTE_BIG`.
    ///
    /// ```
    /// assert!(tvm::Spec::new(1000, 304).checked_file_size()? > 1000 * 304);
    /// assert!(tvm::Spec::new(1, 99_999_999_999).checked_file_size().is_err());
    /// # Ok::<(), tvm::Error>(())
    /// ```
    pub fn checked_file_size(&self) -> Result<u64> {
        self.check_geometry()?;
        self.file_size().filter(|&s| s <= i64::MAX as u64).ok_or_else(|| {
            let what = format!("{} rows of {} bytes make a file too large to address", self.rows, self.record_size);
            Error::new(MQUE_CRTE_BIG, what)
        })
    }

    /// The checks [`Queue::create`](crate::Queue::create) makes of this spec
    /// for queue `id` before it touches the disk, so that a command can tell
    /// a usage error (`tvmq create` exits 2) from a failure.
    ///
    /// Errors: `CONDIT_IS_NIL` (0 rows or record size, a mode beyond 0777, a
    /// spin time, durable interval, lease time or delivery limit out of
    /// range, 0 leases), `MQUE_CRTE_BIG` (more rows, a longer record or more
    /// leases than a queue holds, a file too large to address),
    /// `NOT_SUPPT_OPT` (a queue that is its own dead-letter queue).
    pub fn check(&self, id: u32) -> Result<()> {
        self.check_geometry()?;
        self.check_settings(id)?;
        self.checked_file_size().map(|_| ())
    }

    /// Checks the geometry: rows and record size from 1 to their limits.
    pub(crate) fn check_geometry(&self) -> Result<()> {
        if self.rows == 0 || self.record_size == 0 {
            return Err(Error::new(CONDIT_IS_NIL, "rows and record size must both be at least 1"));
        }
        if self.rows > MAX_CAPACITY {
            return Err(Error::new(
                MQUE_CRTE_BIG,
                format!("{} rows are more than a queue holds: at most {MAX_CAPACITY}", self.rows),
            ));
        }
        if self.record_size > MAX_RECORD_SIZE {
            return Err(Error::new(
                MQUE_CRTE_BIG,
                format!(
                    "a record size of {} bytes is more than a queue allows: at most {MAX_RECORD_SIZE}",
                    self.record_size
                ),
            ));
        }
        Ok(())
    }

    /// Checks the settings other than the geometry, for queue `id`
    /// (`file::create` checks the geometry, then these, then the size of
    /// the file, so that a combination refused is reported as such).
    pub(crate) fn check_settings(&self, id: u32) -> Result<()> {
        if self.mode & !0o777 != 0 {
            return Err(Error::new(
                CONDIT_IS_NIL,
                format!("mode {:o} is not a permission mode: only the bits of 0777 are allowed", self.mode),
            ));
        }
        if self.spin_us.is_some_and(|us| us < -1) {
            return Err(Error::new(
                CONDIT_IS_NIL,
                "the spin time must be -1 (never sleep) or a number of microseconds >= 0",
            ));
        }
        if let Some(Durability::Interval(ms)) = self.durability {
            if !(1..=MAX_INTERVAL_MS).contains(&u64::from(ms)) {
                return Err(Error::new(
                    CONDIT_IS_NIL,
                    format!("a durable interval of {ms} ms is out of range: 1 to 3600000 ms"),
                ));
            }
        }
        if let Some(l) = &self.leases {
            l.check(id)?;
        }
        Ok(())
    }
}

/// Checks a lease time or a release delay that one call gives (`what`
/// names it): 0 to [`MAX_LEASE_MS`], else `CONDIT_IS_NIL` (beyond, a record
/// would be parked for good).
pub(crate) fn check_call_time(d: Duration, what: &str) -> Result<()> {
    if d.as_millis() > u128::from(MAX_LEASE_MS) {
        return Err(Error::new(
            CONDIT_IS_NIL,
            format!("{what} of {} ms is out of range: 0 to {MAX_LEASE_MS} ms (a year)", d.as_millis()),
        ));
    }
    Ok(())
}

impl LeaseSpec {
    /// Checks the lease settings of queue `id`.
    pub(crate) fn check(&self, id: u32) -> Result<()> {
        if !(1..=MAX_LEASE_MS).contains(&self.lease_ms) {
            return Err(Error::new(
                CONDIT_IS_NIL,
                format!("a lease time of {} ms is out of range: 1 to {MAX_LEASE_MS} ms", self.lease_ms),
            ));
        }
        if self.max_leases == 0 {
            return Err(Error::new(
                CONDIT_IS_NIL,
                "a maximum of 0 leases in flight lets no record be leased: give at least 1",
            ));
        }
        if self.max_leases > MAX_LEASES {
            return Err(Error::new(
                MQUE_CRTE_BIG,
                format!("{} leases in flight are more than a queue holds: at most {MAX_LEASES}", self.max_leases),
            ));
        }
        if self.max_deliveries > MAX_DELIVERIES {
            let most = MAX_DELIVERIES;
            return Err(Error::new(
                CONDIT_IS_NIL,
                format!("a maximum of {} deliveries is out of range: at most {most}", self.max_deliveries),
            ));
        }
        if self.dead_letter == Some(id) {
            // An option that cannot be honoured, not a missing argument.
            return Err(Error::new(NOT_SUPPT_OPT, format!("queue {id} cannot be its own dead-letter queue")));
        }
        Ok(())
    }
}

/// How a durable queue makes its changes reach stable storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Durability {
    /// A push returns only once its record is on stable storage; a pop only
    /// once its consumption is. Concurrent callers share syncs.
    Always,
    /// Changes reach stable storage at most this many milliseconds
    /// (1..=3,600,000) after they are made: a push may be lost, and a pop
    /// delivered again, if the machine stops within that time.
    Interval(u32),
}

impl Durability {
    /// Parses `always` or `interval=MS`.
    ///
    /// Errors: `CONDIT_IS_NIL` (anything else, or `MS` out of range).
    pub fn parse(s: &str) -> Result<Durability> {
        let bad = || {
            Error::new(
                CONDIT_IS_NIL,
                format!("durability {s:?} is not a policy: use always or interval=MS (MS from 1 to {})", MAX_INTERVAL),
            )
        };
        match s.trim() {
            "always" => Ok(Durability::Always),
            other => {
                let ms = other.strip_prefix("interval=").ok_or_else(bad)?;
                match ms.trim().parse::<u32>() {
                    Ok(ms) if (1..=MAX_INTERVAL).contains(&ms) => Ok(Durability::Interval(ms)),
                    _ => Err(bad()),
                }
            }
        }
    }

    /// The window within which a change can be lost by a machine crash.
    pub fn window(&self) -> Duration {
        match self {
            Durability::Always => Duration::ZERO,
            Durability::Interval(ms) => Duration::from_millis(u64::from(*ms)),
        }
    }
}

const MAX_INTERVAL: u32 = MAX_INTERVAL_MS as u32;

impl std::fmt::Display for Durability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Durability::Always => write!(f, "always"),
            Durability::Interval(ms) => write!(f, "interval={ms}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_parse_and_print() {
        assert_eq!(Durability::parse("always").unwrap(), Durability::Always);
        assert_eq!(Durability::parse("interval=1000").unwrap(), Durability::Interval(1000));
        for bad in ["", "never", "interval=", "interval=0", "interval=-5", "interval=3600001", "interval=x"] {
            assert_eq!(Durability::parse(bad).unwrap_err().code(), CONDIT_IS_NIL, "{bad:?}");
        }
        for d in [Durability::Always, Durability::Interval(7)] {
            assert_eq!(Durability::parse(&d.to_string()).unwrap(), d);
        }
    }
}
