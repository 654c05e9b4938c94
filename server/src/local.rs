//! What one worker's connections share on its thread (none of it crosses
//! threads): the key cache, the buffer pool, the stop notice, its syncs,
//! and the sizes of the buffers.

use crate::durable::{UnsyncedReplies, WorkerSyncs};
use crate::keys::WorkerKeys;
use std::cell::Cell;

/// Size of a pooled input buffer, and of one read.
pub(crate) const READ_SIZE: usize = 64 * 1024;
/// Replies are written out once they pass this many bytes.
pub(crate) const FLUSH_AT: usize = 64 * 1024;
/// A buffer larger than this is freed rather than pooled.
pub(crate) const POOL_MAX: usize = 256 * 1024;

/// Buffers a worker lends to its connections while they work: input
/// buffers (kept initialised, [`READ_SIZE`] bytes) and output buffers
/// (empty, their capacity kept).
#[derive(Default)]
pub(crate) struct Pool {
    inputs: std::cell::RefCell<Vec<Vec<u8>>>,
    outputs: std::cell::RefCell<Vec<Vec<u8>>>,
}

impl Pool {
    /// Buffers of each kind kept at most (the rest are freed).
    const KEEP: usize = 64;

    pub(crate) fn take_input(&self) -> Vec<u8> {
        self.inputs.borrow_mut().pop().unwrap_or_else(|| vec![0; READ_SIZE])
    }

    pub(crate) fn give_input(&self, buf: Vec<u8>) {
        let mut bufs = self.inputs.borrow_mut();
        if buf.len() == READ_SIZE && bufs.len() < Self::KEEP {
            bufs.push(buf);
        }
    }

    pub(crate) fn take_output(&self) -> Vec<u8> {
        self.outputs.borrow_mut().pop().unwrap_or_else(|| Vec::with_capacity(FLUSH_AT + 4096))
    }

    pub(crate) fn give_output(&self, mut buf: Vec<u8>) {
        let mut bufs = self.outputs.borrow_mut();
        if buf.capacity() > 0 && buf.capacity() <= POOL_MAX && bufs.len() < Self::KEEP {
            buf.clear();
            bufs.push(buf);
        }
    }
}

/// What a worker's connections share: the key cache and the buffer pool.
pub(crate) struct WorkerLocal {
    /// Its number (its counters in [`ServerState::worker_stats`](crate::state::ServerState::worker_stats)).
    pub(crate) index: usize,
    pub(crate) keys: WorkerKeys,
    pub(crate) pool: Pool,
    /// Connections being served.
    pub(crate) connections: Cell<usize>,
    /// The stop, told to this worker's connections by the worker (so that a
    /// connection waiting for its client polls a notification no other
    /// core touches).
    pub(crate) stop: tokio::sync::Notify,
    /// Its own syncs of `always` queues, on its io_uring (`None`: the
    /// server's sync threads run them).
    pub(crate) syncs: Option<std::rc::Rc<WorkerSyncs>>,
}

impl WorkerLocal {
    /// The replies of a new connection of this worker that will wait for
    /// syncs: on this worker's ring, else on the sync threads.
    pub(crate) fn unsynced_replies(&self) -> UnsyncedReplies {
        UnsyncedReplies::new(self.syncs.clone())
    }
}
