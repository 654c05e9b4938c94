//! tvmq: the STVM queue API on a lock-free shared-memory ring.
//!
//! Layers, each using only those listed before it:
//! [`error`] (codes and messages), [`ring`] (the lock-free algorithm),
//! [`wait`] (futex sleep and wake), [`registry`] (which processes are
//! attached; is a slot's holder alive?), [`queue_file`] (the file format),
//! [`queue`] (the safe Rust API), and `ffi` (the C ABI of `tvm.h`).
//!
//! Under `--cfg loom` only the ring (and what it needs) is built, for the
//! model checker.

pub mod codes;
pub mod error;
pub mod ring;
mod sync;

#[cfg(not(loom))]
pub mod ffi;
#[cfg(not(loom))]
pub mod queue;
#[cfg(not(loom))]
pub mod queue_file;
#[cfg(not(loom))]
pub mod registry;
#[cfg(not(loom))]
pub mod wait;

#[cfg(not(loom))]
pub use queue::{Queue, Wait};
#[cfg(not(loom))]
pub use queue_file::{Field, Spec, queue_dir};
