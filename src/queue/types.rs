//! The values the queue API takes and gives: how a pop waits ([`Wait`],
//! [`Strategy`]), what a queue is ([`QueueInfo`]) and what a repair did
//! ([`Repair`]).

use crate::file;
use crate::schema::Field;
use crate::spec::{Durability, LeaseSpec};
use std::time::{Duration, Instant};

/// How a blocking pop ([`Wait::Forever`], [`Wait::Until`]) waits while the
/// queue is empty. Whatever it is, a push makes the wake-up system call only
/// when a consumer is asleep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// Spin for at most 5 microseconds, and only while such spins have
    /// been catching records, then sleep on the futex (no CPU while asleep;
    /// a record that arrives then costs a kernel wake-up, as a pipe's
    /// reader pays: about 5 microseconds on an idle machine).
    Default,
    /// Spin (a busy loop of `pause`s, one CPU at 100 %) for up to this long
    /// since the queue was found empty, then as `Default` (at most 5
    /// microseconds more), then sleep.
    Spin(Duration),
    /// Spin for as long as the wait lasts: the lowest latency, and one CPU
    /// at 100 % for as long as the consumer waits.
    NeverSleep,
}

impl Strategy {
    /// `$TVMQ_SPIN_US` when it is set and valid (`-1`: never sleep), else the
    /// queue's setting, else the default.
    pub(super) fn choose(env: Option<&str>, queue: Option<i64>) -> Strategy {
        let from = |us: i64| match us {
            -1 => Some(Strategy::NeverSleep),
            us if us >= 0 => Some(Strategy::Spin(Duration::from_micros(us as u64))),
            _ => None,
        };
        env.and_then(|v| v.trim().parse::<i64>().ok())
            .and_then(from)
            .or_else(|| queue.and_then(from))
            .unwrap_or(Strategy::Default)
    }
}

/// How long a pop may wait for a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Return `NO_DATA_FOUND` at once when the queue is empty.
    NoWait,
    /// Sleep until a record arrives (or the queue is dropped).
    Forever,
    /// Sleep until a record arrives or this instant passes (`MQUE_WAIT_TMO`).
    Until(Instant),
}

/// What a [`Queue::repair`](super::Queue::repair) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repair {
    /// Unpublished claims of dead producers turned into skipped records.
    pub recovered_pushes: u64,
    /// Records held by dead consumers published again.
    pub recovered_pops: u64,
    /// Sleepers of dead processes taken off the waiter count.
    pub reconciled_waiters: u32,
    /// No other process was attached (holders of unknown identity were recovered too).
    pub alone: bool,
}

/// What a queue is: its header, as validated when it was opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueInfo {
    /// The queue id (the `TABLE` number of the C API).
    pub id: u32,
    /// The name given at creation (the C API's `lCreateQueue` uses the id as written).
    pub name: String,
    /// The partition text given at creation.
    pub part: String,
    /// Layout version of the file.
    pub version: u32,
    /// Permission bits the file was created with.
    pub mode: u32,
    /// Creation time, nanoseconds since the Unix epoch.
    pub created_ns: u64,
    /// Largest record, in bytes.
    pub record_size: u64,
    /// Bytes per slot in the file (header and record, rounded up to 8).
    pub slot_stride: u64,
    /// Exact capacity, in records.
    pub capacity: u64,
    /// Size of the file, in bytes.
    pub file_size: u64,
    /// How long a stalled slot whose holder cannot be told dead or alive is
    /// waited for before it is recovered (as created; see [`Queue::unblock_timeout`](super::Queue::unblock_timeout)).
    pub unblock_timeout_ms: u64,
    /// How long blocking pops spin before they sleep, as created (`None`:
    /// the default; -1: never sleep). See [`Queue::wait_strategy`](super::Queue::wait_strategy) for what
    /// this process uses.
    pub spin_us: Option<i64>,
    /// The record layout, if the queue was created with one.
    pub fields: Vec<Field>,
    /// How the queue's changes reach stable storage (`None`: not durable;
    /// it survives process crashes, not a machine crash).
    pub durability: Option<Durability>,
    /// The lease settings of a queue with acknowledged consumption (`None`:
    /// a plain queue).
    pub leases: Option<LeaseSpec>,
}

impl QueueInfo {
    pub(super) fn from_header(i: &file::layout::Header, options: &file::layout::Options) -> QueueInfo {
        QueueInfo {
            id: i.id,
            name: i.name().to_string(),
            part: i.part().to_string(),
            version: i.version,
            mode: i.mode,
            created_ns: i.created_ns,
            record_size: i.record_size,
            slot_stride: i.slot_stride,
            capacity: i.capacity,
            file_size: i.file_size,
            unblock_timeout_ms: i.unblock_timeout_ms,
            spin_us: options.spin_us(),
            fields: i.fields(),
            durability: options.durability(),
            leases: options.leases().map(|l| LeaseSpec {
                lease_ms: l.lease_ms,
                max_deliveries: l.max_deliveries as u32,
                dead_letter: (l.has_dead_letter != 0).then_some(l.dead_letter),
                max_leases: l.max_leases,
            }),
        }
    }
}
