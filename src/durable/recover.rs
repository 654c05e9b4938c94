//! Knowing that a durable queue needs recovery, and running it once.
//!
//! Every process that attaches a durable queue for writing compares the boot
//! id stored in its control block (`/proc/sys/kernel/random/boot_id`, written
//! at the first attach of each boot) with the machine's. A different one
//! means the machine restarted since processes last used the queue: what
//! the file holds is whatever reached the disk, page by page, and the first
//! process to attach rebuilds the queue from its slots (`Ring::rebuild`)
//! under an exclusive lock of one byte of the file, while the others wait:
//! head and tail from the slots themselves (the cursors in the file are only
//! hints), never a record below the consumed watermark, the process table
//! and waiter counts cleared (nobody is attached after a restart). The
//! result is synced before the new boot id is stored, so that a crash
//! during recovery leads to another recovery, which finds the same records.
//! An `interval` queue is rebuilt from its image (see [`super::image`]),
//! and the result written back into it (its lease table, which lives in
//! place, is synced before that). A queue with leases has its lease
//! table settled first (see `LeaseTable::reboot`): the leases of the
//! previous boot end as if their holders had died.

use super::image::{Image, lease_table_range};
use super::marks::{best_mark, write_watermark_copy};
use super::pages::{msync, msync_range};
use crate::clock::{boot_id, now_ns};
use crate::error::*;
use crate::file::layout::{CONTROL_OFFSET, Control};
use crate::file::map::QueueFile;
use crate::ring::{MapStorage, Rebuilt, Ring};
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;

/// The byte of the file locked while a process checks for (and runs) a
/// recovery: the last byte of the control page, which no other lock uses.
const RECOVERY_LOCK: i64 = CONTROL_OFFSET as i64 + 4095;

/// The boot id stored in the control block.
pub(crate) fn stored_boot_id(control: &Control) -> [u64; 2] {
    let b = &control.sync.0.boot_id;
    [b[0].load(Ordering::Acquire), b[1].load(Ordering::Acquire)]
}

/// An exclusive lock of [`RECOVERY_LOCK`] on the open file description of
/// `file`, released when dropped.
struct RecoveryLock<'a>(&'a std::fs::File);

impl<'a> RecoveryLock<'a> {
    fn take(file: &'a std::fs::File) -> Result<RecoveryLock<'a>> {
        let mut fl = flock(libc::F_WRLCK as libc::c_short);
        loop {
            // SAFETY: fcntl on an fd we own, with a valid flock.
            if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLKW, &mut fl) } == 0 {
                return Ok(RecoveryLock(file));
            }
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINTR) {
                return Err(Error::new(LOCK_DOWR_ERR, format!("cannot lock the queue file for recovery: {e}")));
            }
        }
    }
}

impl Drop for RecoveryLock<'_> {
    fn drop(&mut self) {
        let mut fl = flock(libc::F_UNLCK as libc::c_short);
        // SAFETY: as in `take`.
        unsafe { libc::fcntl(self.0.as_raw_fd(), libc::F_OFD_SETLK, &mut fl) };
    }
}

fn flock(kind: libc::c_short) -> libc::flock {
    // SAFETY: flock is plain data; all-zero is a valid value.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = kind;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = RECOVERY_LOCK;
    fl.l_len = 1;
    fl
}

/// At attach (for writing) of a durable queue: if the machine restarted
/// since processes last attached, rebuilds the ring in `ring` (a view of
/// the file's ring, not yet used by this process), clears the process
/// table with `reset_table`, and syncs. Returns what the rebuild found
/// (`None`: no restart, nothing done).
pub(crate) fn attach(
    file: &QueueFile,
    ring: &Ring<MapStorage>,
    key: u64,
    reset_table: impl FnOnce(),
) -> Result<Option<Rebuilt>> {
    let control = file.control();
    let Some(now) = boot_id() else { return Ok(None) };
    if stored_boot_id(control) == now {
        return Ok(None);
    }
    let _lock = RecoveryLock::take(file.file()?)?;
    if stored_boot_id(control) == now {
        return Ok(None); // another process recovered it meanwhile
    }
    let created_ns = file.header().created_ns;
    let map = file.map();
    // An `interval` queue's durable state is its image (the live pages on
    // the disk are whatever the kernel wrote back: never read).
    let image = Image::open(file)?;
    if let Some(image) = &image {
        image.restore(file, map)?;
    }
    let (generation, consumed) = best_mark(control, created_ns).map_or((0, 0), |m| (m.0, m.1));
    // A queue with leases: every lease of the previous boot ends (its
    // record waits for another delivery, its delivery count kept), and a
    // record saved in the table whose slot still holds it is dropped from
    // the ring, before the ring is rebuilt.
    let lease_range = match image {
        Some(_) => lease_table_range(file)?,
        None => None,
    };
    let floor = match file.lease_table()? {
        Some(table) => {
            let max = file.options().leases().map_or(0, |l| u32::try_from(l.max_deliveries).unwrap_or(u32::MAX));
            // SAFETY: under the recovery lock, in the first attach since
            // the restart: no queue of this file is open in this process
            // (nor in any other) before the rebuild ends.
            unsafe { table.reboot(max, |at| ring.release_held(at)) }.floor
        }
        None => 0,
    };
    let found = ring.rebuild_from(key, consumed, floor);
    // Nobody is attached after a restart: waiters, sleepers, sync lock.
    reset_table();
    let w = &control.wake.0;
    w.waiters.store(0, Ordering::SeqCst);
    w.futex.fetch_add(1, Ordering::SeqCst);
    control.state.0.unregistered.store(0, Ordering::SeqCst);
    let s = &control.sync.0;
    s.lock.store(0, Ordering::SeqCst);
    s.waiters.store(0, Ordering::SeqCst);
    s.dirty.store(0, Ordering::SeqCst);
    let at = now_ns();
    let r = &control.recovery.0;
    r.at_ns.store(at, Ordering::Relaxed);
    r.kept.store(found.kept, Ordering::Relaxed);
    r.torn.store(found.torn, Ordering::Relaxed);
    r.stale.store(found.stale, Ordering::Relaxed);
    r.moved.store(found.moved, Ordering::Relaxed);
    r.holes.store(found.holes, Ordering::Relaxed);
    r.watermark.store(consumed, Ordering::Relaxed);
    r.runs.fetch_add(1, Ordering::Relaxed);
    // Both copies of the watermark, so that neither is older than the rebuild.
    for (i, m) in control.marks.iter().enumerate() {
        write_watermark_copy(m, generation + 1 + i as u64, consumed, found.tail, at, created_ns);
    }
    s.leases_changed.store(0, Ordering::SeqCst);
    if let Some(image) = &image {
        // The settled lease table first (in place), then the rebuilt ring
        // into the image: the image never releases a slot whose record the
        // table on the disk does not hold (see `Image::write_before_table`).
        if let Some(table) = &lease_range {
            msync_range(map, table.0, table.1)?;
        }
        // The rebuilt ring is the image now; the next sync starts at its tail.
        image.write_all(map)?;
        s.sealed.store(found.tail, Ordering::SeqCst);
        s.released.store(found.head, Ordering::SeqCst);
    }
    msync(map)?;
    control.sync.0.boot_id[0].store(now[0], Ordering::SeqCst);
    control.sync.0.boot_id[1].store(now[1], Ordering::SeqCst);
    msync(map)?;
    Ok(Some(found))
}
