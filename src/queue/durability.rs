//! What a queue does for durability: the syncs of `always` queues after
//! pops, [`Queue::sync`], and the durable state for `tvmq stat`.

use super::Queue;
use crate::durable::{Durable, DurableStats};
use crate::error::*;
use crate::spec::Durability;

impl Queue {
    /// After records were taken: with `always`, returns once their
    /// consumption is durable. A failed sync is not an error here: the
    /// records are the caller's now (failing would lose them); the failure
    /// is counted in the file, and a crash may deliver them again.
    #[inline]
    pub(super) fn popped_durably(&self) {
        if let Some(d) = &self.always {
            let _ = sync_popped(d);
        }
    }

    /// Makes everything pushed and popped on this queue so far durable, by
    /// every thread of this process (and what other processes did before
    /// the call): a group-committed sync for a durable queue, a plain
    /// `msync` for another queue on a disk.
    ///
    /// Errors: `NOT_DURABLE` (the file is on tmpfs or ramfs: nothing can
    /// make it durable), `SYNC_FAILED` (the system call failed),
    /// `SHM_ERR_ACCES` (a read-only view).
    pub fn sync(&self) -> Result<()> {
        if let Some(d) = &self.durable {
            return d.sync();
        }
        if self.file.is_volatile() {
            return Err(Error::new(
                NOT_DURABLE,
                format!(
                    "queue {} cannot be synced to stable storage: its file {} is in memory (tmpfs or ramfs)",
                    self.id(),
                    self.path().display()
                ),
            ));
        }
        if !self.writable {
            return Err(Error::new(SHM_ERR_ACCES, "queue opened read-only for inspection"));
        }
        let map = self.file.map();
        crate::durable::msync(map.base(), map.len())
    }

    /// How the queue's changes reach stable storage (`None`: not durable).
    pub fn durability(&self) -> Option<Durability> {
        self.info.durability
    }

    /// A durable queue's sync state and what its last recovery found
    /// (`None` for other queues). Works on read-only views too.
    pub fn durable_stats(&self) -> Option<DurableStats> {
        let policy = self.info.durability?;
        Some(crate::durable::stats(self.control(), policy, self.info.created_ns))
    }
}

/// An `always` queue's pop is done: sync. Out of line, so that the pop
/// path of other queues stays small (one test of an `Option`).
#[inline(never)]
fn sync_popped(d: &Durable) -> Result<()> {
    d.sync()
}
