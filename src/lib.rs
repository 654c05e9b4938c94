//! tvmq: the STVM queue API on a lock-free shared-memory ring.
//!
//! This crate is `libtvm` (`libtvm.so`, `libtvm.a` and the `tvm.h` its build
//! writes) for C programs, and a safe Rust API for everything else: the
//! `tvmq` command, the benchmark, the server.
//!
//! ```
//! # let dir = std::env::temp_dir().join(format!("tvmq-doc-lib-{}", std::process::id()));
//! # std::fs::create_dir_all(&dir).unwrap();
//! use tvm::{Queue, Spec, Wait};
//!
//! Queue::create(&dir, 21, &Spec::new(1000, 304))?;   // 1,000 records of up to 304 bytes
//! let q = Queue::open(&dir, 21)?;                    // share it: &Queue or Arc<Queue>
//! q.push(b"hello")?;
//! let mut out = [0u8; 304];
//! let n = q.pop(&mut out, Wait::NoWait)?;
//! assert_eq!(&out[..n], b"hello");
//! # drop(q);
//! Queue::drop_queue(&dir, 21)?;
//! # std::fs::remove_dir_all(&dir).unwrap();
//! # Ok::<(), tvm::Error>(())
//! ```
//!
//! # Layers
//! Each module uses only those above it (`scripts/check-layers.py`, part of
//! `make lint`, reads this table and checks every `crate::` path of src/
//! against it; test code is exempt), and only [`ffi`] and what is
//! re-exported here is visible outside the crate:
//!
//! | module | concern |
//! |---|---|
//! | `codes`, [`error`] | the STVM error codes and messages; the [`Error`] value; no I/O |
//! | `escape` | names made safe to print: [`escape_name`], [`escape_word`]; no I/O |
//! | `atomics`, `clock`, `shm` | loom-switchable atomics; wall time, the monotonic clock and the boot id; a shared mapping and the views that keep it mapped |
//! | `ring` | the lock-free algorithm over a `Storage` (heap or mapping); no files, no C |
//! | `wait` | futex sleep and wake on a word of shared memory |
//! | `registry` | which processes are attached; is a position's holder provably alive? |
//! | `schema` | record layouts: [`Field`], [`FieldKind`], and the one decoder of a field's value ([`Field::value`], [`FieldValue`]) |
//! | `lease` | acknowledged consumption: the lease entry's state machine (`state`) and the file's lease table (`table`) |
//! | `spec` | what a queue is asked to be: [`Spec`], [`LeaseSpec`], [`Durability`], the limits and their validation; no I/O |
//! | `file` | queue files: `layout` (bytes and validation), `dir` (directory policy), `create`, `map`, `live` (an `interval` queue's live part in tmpfs), `make` (a file made atomically), `fs` |
//! | `durable` | durable queues: the sync lock, group-committed syncs, the flusher, recovery after a machine restart |
//! | `queue` | the safe API: [`Queue`] (and `queue::lease`: [`Queue::pop_lease`], [`Lease`]) |
//! | `attach` | the process-wide table id or name -> [`Queue`]: [`Attachments`], and each thread's cache of it (the library's one cache of queues by id, with the thread's intent words and the C API's last outcome) |
//! | `client` | the network client of the `lTvm*` calls: RESP to tvmq serve, Redis, Redis Cluster |
//! | [`ffi`] | the C ABI of `tvm.h`, thin |
//!
//! Under `--cfg loom` only the ring (and what it needs) is built, for the
//! model checker.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]
#![warn(unreachable_pub)]
#![deny(clippy::undocumented_unsafe_blocks)]
// Under loom only the ring is built, without the queue that uses all of it.
#![cfg_attr(loom, allow(dead_code))]

mod atomics;
mod codes;
pub mod error;
mod lease;
mod ring;
#[allow(unreachable_pub)]
#[cfg(test)]
mod test_support;

#[cfg(not(loom))]
mod attach;
#[cfg(not(loom))]
mod client;
#[cfg(not(loom))]
mod clock;
#[cfg(not(loom))]
mod durable;
#[cfg(not(loom))]
mod escape;
#[cfg(not(loom))]
// Outside the rule that what is `pub` is re-exported: the C ABI's functions
// are reached by their symbols.
#[allow(unreachable_pub)]
pub mod ffi;
#[cfg(not(loom))]
mod file;
#[cfg(not(loom))]
mod queue;
#[cfg(not(loom))]
mod registry;
#[cfg(not(loom))]
mod schema;
#[cfg(not(loom))]
mod shm;
#[cfg(not(loom))]
mod spec;
#[cfg(not(loom))]
mod wait;

pub use error::{Error, Result};

/// The README's Rust snippets, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
pub use ring::{LocalRing, MAX_CAPACITY};

#[cfg(not(loom))]
pub use attach::Attachments;
#[cfg(not(loom))]
pub use durable::{DurableStats, RecoveryStats, SyncRing, SyncStart};
#[cfg(not(loom))]
pub use escape::{escape_name, escape_word};
#[cfg(not(loom))]
pub use file::{
    OrphansRemoved, check_queue_dir, filesystem_size, queue_dir, queue_file_id, queue_ids, queue_name,
    queue_name_and_part, queue_path, slot_stride,
};
#[cfg(not(loom))]
pub use queue::{ExportFormat, Lease, LeaseState, LeaseStats, LeasedRecord};
#[cfg(not(loom))]
pub use queue::{Process, Queue, QueueInfo, Repair, Snapshot, Stats, Strategy, SyncTicket, Wait};
#[cfg(not(loom))]
pub use ring::Peeked;
#[cfg(not(loom))]
pub use schema::{Field, FieldKind, FieldValue, MAX_FIELD_NAME, MAX_FIELDS};
#[cfg(not(loom))]
pub use spec::{
    DEFAULT_LEASE_MS, DEFAULT_MAX_LEASES, DEFAULT_UNBLOCK_TIMEOUT_MS, MAX_LEASE_MS, MAX_LEASES, MAX_NAME, MAX_PART,
    MAX_RECORD_SIZE,
};
#[cfg(not(loom))]
pub use spec::{Durability, LeaseSpec, Spec};
#[cfg(not(loom))]
pub use wait::{Bell, WAIT_ANY_MAX};
