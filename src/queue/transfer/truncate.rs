//! Emptying a queue: [`Queue::truncate`], [`Queue::discard`].

use crate::error::*;
use crate::queue::{Queue, Wait};

impl Queue {
    /// Removes the records queued when the call starts (the depth read
    /// then), by popping them: other consumers may take some meanwhile and
    /// producers go on pushing (records pushed after the start may go too
    /// when others took some of the first ones, never more than that count).
    /// Every record goes exactly once, to a consumer or to nowhere; no
    /// attached process notices anything but the records gone, and nobody
    /// is woken. On a queue with leases, the records waiting to be
    /// delivered again go too; those leased by consumers stay theirs.
    /// Returns how many records it removed.
    ///
    /// Errors: those of [`discard`](Self::discard).
    pub fn truncate(&self) -> Result<u64> {
        let mut left = self.depth();
        if let Some(s) = self.lease_stats() {
            left += s.waiting;
        }
        self.discard(left)
    }

    /// Pops and discards up to `n` records (fewer when the queue runs
    /// empty), 64 with each claim, as consumers would take them: records
    /// waiting to be delivered again come first on a queue with leases. On
    /// a durable queue each batch of 64 makes a sync, unless the caller
    /// puts them off ([`defer_syncs`](Self::defer_syncs)). Returns how many
    /// records it removed; an error other than running empty stops it.
    ///
    /// Errors: those of [`pop`](Self::pop) but `NO_DATA_FOUND` (running
    /// empty ends it): `SHM_ERR_EIDRM`, `SHM_ERR_ACCES` (a read-only view),
    /// `MQUE_WAIT_ERR`, `SHM_ERR_INVAL`.
    pub fn discard(&self, n: u64) -> Result<u64> {
        let mut left = n;
        let each = self.record_size();
        let mut scratch = vec![0u8; each * 64];
        let mut lens = [0usize; 64];
        let mut removed = 0;
        while left > 0 {
            let chunk = left.min(64) as usize;
            let (n, err) = self.pop_into(&mut scratch[..chunk * each], each, &mut lens[..chunk], Wait::NoWait);
            removed += n as u64;
            left -= n as u64;
            match err {
                None => {}
                Some(e) if e.code() == NO_DATA_FOUND => break,
                Some(e) => return Err(e),
            }
        }
        Ok(removed)
    }
}
