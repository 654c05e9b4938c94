//! A sync's system calls: the slots and the control page written into the
//! image (queues with one), or synced in place (`sync_file_range` of the
//! control page, then `msync(MS_SYNC)` of the slots, whose device cache
//! flush covers both); and the `msync`s of a mapping's ranges.

use super::Durable;
#[cfg(test)]
use super::hooks::{FAIL_NEXT_SYNC, SyncEvent};
use crate::error::*;
use crate::file::layout::{CONTROL_OFFSET, DATA_OFFSET, TABLE_OFFSET};
use crate::shm::SharedMap;
use std::os::fd::AsRawFd;

impl Durable {
    /// The system calls: the control page written (when `control`), then
    /// `msync(MS_SYNC)` of the slots, whose device cache flush covers both.
    /// (`changed`: the positions whose records the sync sealed, and those
    /// released since the last sync, for the image.)
    pub(super) fn write_pages(&self, control: bool, changed: [(u64, u64); 2]) -> Result<()> {
        #[cfg(test)]
        let (base, len) = (self.map.base(), self.map.len());
        #[cfg(test)]
        if FAIL_NEXT_SYNC.with(|f| f.replace(false)) {
            return Err(Error::new(SYNC_FAILED, "a sync failed on purpose (test)"));
        }
        #[cfg(test)]
        if let Some(hook) = &self.hook {
            let writes = self.image.as_ref().map(|i| i.plan(&changed, control)).unwrap_or_default();
            // The copy the hook takes here is what the image receives (with
            // leases: the snapshot); then the lease table is persisted.
            hook(&SyncEvent::Synced { base, len, control, writes: &writes });
            if self.image.is_some() && self.lease_table.is_some() {
                hook(&SyncEvent::LeaseTable { base, len });
            }
            return Ok(());
        }
        if let Some(image) = &self.image {
            return match self.lease_table {
                None => image.write(&self.map, &changed, control),
                Some((from, n)) => {
                    image.write_before_table(&self.map, &changed, control, || msync_range(&self.map, from, n))
                }
            };
        }
        if control {
            let flags =
                libc::SYNC_FILE_RANGE_WAIT_BEFORE | libc::SYNC_FILE_RANGE_WRITE | libc::SYNC_FILE_RANGE_WAIT_AFTER;
            let (from, n) = (CONTROL_OFFSET as libc::off64_t, (TABLE_OFFSET - CONTROL_OFFSET) as libc::off64_t);
            // SAFETY: a plain system call on a descriptor we own.
            if unsafe { libc::sync_file_range(self.file.as_raw_fd(), from, n, flags) } != 0 {
                let e = std::io::Error::last_os_error();
                return Err(Error::new(SYNC_FAILED, format!("sync_file_range failed: {e}")));
            }
        }
        msync_range(&self.map, DATA_OFFSET as usize, usize::MAX)
    }
}

/// `msync(MS_SYNC)` of a queue file's mapping from [`CONTROL_OFFSET`] on.
pub(crate) fn msync(map: &SharedMap) -> Result<()> {
    msync_range(map, CONTROL_OFFSET as usize, usize::MAX)
}

/// `msync(MS_SYNC)` of `n` bytes of a queue file's mapping from byte
/// `from` (cut at its end).
pub(crate) fn msync_range(map: &SharedMap, from: usize, n: usize) -> Result<()> {
    map.sync_range(from, n).map_err(|e| Error::new(SYNC_FAILED, format!("msync failed: {e}")))
}
