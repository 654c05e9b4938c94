//! Making a file atomically, for queue files and live parts alike: created
//! under a temporary name, filled, then published under its own name only
//! if that name is free, so that nobody ever finds it half made; and
//! unlinking a file only while its name still leads to it.

use super::fs::{FsKind, cpath, io_error};
use super::layout::BOOT_ID_OFFSET;
use crate::error::*;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// A fresh temporary name in `dir`: `<prefix><pid>.<n>`.
fn temporary_name(dir: &Path, prefix: &str) -> PathBuf {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    dir.join(format!("{prefix}{}.{}", std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed)))
}

/// The byte of a file being made that its maker holds locked while it
/// makes it (an open-file-description lock: the kernel drops it when the
/// maker's descriptor closes, however its process ends, and a process in
/// any pid namespace sees it), past every byte the queue file's own locks
/// use. A temporary file nobody holds it of was abandoned (see
/// [`remove_if_abandoned`]).
const MAKER_LOCK: libc::off_t = libc::off_t::MAX - 1;

/// Takes the maker's byte of `file` for its open file description (never
/// waits): false if another holds it.
fn take_maker_lock(file: &File) -> bool {
    // SAFETY: flock is plain data; all-zero is a valid value.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = libc::F_WRLCK as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = MAKER_LOCK;
    fl.l_len = 1;
    // SAFETY: fcntl with a valid flock pointer on a descriptor we own.
    unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &mut fl) == 0 }
}

/// Creates a new temporary file in `dir` named `<prefix>...`, with `mode`
/// (see [`create_exclusive`]), and holds its maker's lock while the
/// returned `File` is open. Errors: those of [`create_exclusive`].
pub(super) fn create_temporary(dir: &Path, prefix: &str, mode: u32) -> Result<(PathBuf, File)> {
    loop {
        let tmp = temporary_name(dir, prefix);
        let file = create_exclusive(&tmp, mode)?;
        // Ours if we hold it and its name still leads to it: a cleanup
        // that took the lock between our create and our lock removes it,
        // and lets the lock go once it has (we would get it then).
        if take_maker_lock(&file) && still_named(&tmp, &file) {
            return Ok((tmp, file));
        }
        // Another name.
    }
}

/// Does `path` lead to the open file `file`?
fn still_named(path: &Path, file: &File) -> bool {
    let Ok(mine) = file.metadata() else { return false };
    std::fs::symlink_metadata(path).is_ok_and(|m| (m.dev(), m.ino()) == (mine.dev(), mine.ino()))
}

/// Removes the temporary file `path` if its maker is gone (nobody holds
/// its maker's lock): its process died before it published or removed it.
/// The cleanup takes the lock itself first, so that a maker that has just
/// created the file and not yet locked it gives it up. True if removed.
pub(super) fn remove_if_abandoned(path: &Path) -> bool {
    let Ok(cpath) = cpath(path) else { return false };
    // SAFETY: open with a valid C path; the returned fd is owned by the File below.
    let fd = unsafe { libc::open(cpath.as_ptr(), libc::O_RDWR | libc::O_NOFOLLOW | libc::O_CLOEXEC) };
    if fd < 0 {
        return false;
    }
    // SAFETY: fd is a fresh descriptor that nothing else owns.
    let file = unsafe { File::from_raw_fd(fd) };
    take_maker_lock(&file) && unlink_if_same(path, &file).is_ok_and(|u| u == Unlinked::Done)
}

/// Creates the new file `tmp` with `mode` (the umask may narrow it; [`fill`]
/// sets it exactly): it must not exist, and no link is followed.
pub(super) fn create_exclusive(tmp: &Path, mode: u32) -> Result<File> {
    let ctmp = cpath(tmp)?;
    // SAFETY: open with a valid C path; the returned fd is owned by the File below.
    let fd = unsafe {
        libc::open(
            ctmp.as_ptr(),
            libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            mode as libc::c_uint,
        )
    };
    if fd < 0 {
        return Err(io_error(SHM_ERR_ACCES, "cannot create", tmp, std::io::Error::last_os_error()));
    }
    // SAFETY: fd is a fresh descriptor that nothing else owns.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// What a new file is made of (see [`fill`]).
pub(super) struct Contents<'a> {
    /// Its permission bits, exactly.
    pub(super) mode: u32,
    /// Its length.
    pub(super) len: u64,
    /// The byte ranges reserved now (the rest is a hole that nothing writes
    /// at creation).
    pub(super) ranges: &'a [(u64, u64)],
    /// Written at offset 0: its header page.
    pub(super) header: &'a [u8],
    /// A durable queue's file: on a disk its ranges are written once now
    /// (so that its syncs write data in place and never commit block
    /// allocations: a journal commit per sync), and it is synced.
    pub(super) durable: bool,
    /// This boot's id is written into its control block: its first attach
    /// needs no recovery.
    pub(super) stamp_boot_id: bool,
}

/// Sizes, allocates and (on tmpfs, or a durable file on a disk) clears the
/// new file `file` (at `tmp`), writes its header page and, as asked, this
/// boot's id, and syncs a durable one. Errors: `SHM_ERR_ACCES` (its mode),
/// `MQUE_CRTE_BIG` (no room), `SHM_ERR_NOMEM` (other write failures),
/// `SYNC_FAILED` (its sync).
pub(super) fn fill(file: &File, tmp: &Path, c: &Contents) -> Result<()> {
    // The umask must not narrow (or we widen) the requested mode.
    // SAFETY: fchmod on an fd we own.
    if unsafe { libc::fchmod(file.as_raw_fd(), c.mode as libc::mode_t) } != 0 {
        return Err(io_error(SHM_ERR_ACCES, "cannot chmod", tmp, std::io::Error::last_os_error()));
    }
    // Reserve every page now (but the hole): a full tmpfs must fail here,
    // not as SIGBUS later.
    file.set_len(c.len).map_err(|e| io_error(MQUE_CRTE_BIG, "cannot size", tmp, e))?;
    for &(from, to) in c.ranges {
        // SAFETY: posix_fallocate on an fd we own.
        let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), from as libc::off_t, (to - from) as libc::off_t) };
        match rc {
            0 | libc::EOPNOTSUPP | libc::EINVAL => {} // sized above: allocated on write
            libc::ENOSPC | libc::EFBIG => {
                let total = c.ranges.iter().map(|(a, b)| b - a).sum::<u64>();
                return Err(Error::new(MQUE_CRTE_BIG, format!("no room for {total} bytes in {}", tmp.display())));
            }
            e => return Err(io_error(SHM_ERR_NOMEM, "cannot allocate", tmp, std::io::Error::from_raw_os_error(e))),
        }
    }
    // On a disk, one page per write: see `zero_fill`.
    let chunk = match FsKind::of(file) {
        FsKind::Tmpfs => Some(1 << 20),
        _ if c.durable => Some(4096),
        _ => None,
    };
    if let Some(chunk) = chunk {
        for &(from, to) in c.ranges {
            zero_fill(file, from, to, chunk).map_err(|e| io_error(MQUE_CRTE_BIG, "cannot fill", tmp, e))?;
        }
    }
    file.write_all_at(c.header, 0).map_err(|e| io_error(SHM_ERR_NOMEM, "cannot write header of", tmp, e))?;
    if c.stamp_boot_id {
        if let Some(id) = crate::clock::boot_id() {
            let mut bytes = [0u8; 16];
            bytes[..8].copy_from_slice(&id[0].to_ne_bytes());
            bytes[8..].copy_from_slice(&id[1].to_ne_bytes());
            file.write_all_at(&bytes, BOOT_ID_OFFSET).map_err(|e| io_error(SHM_ERR_NOMEM, "cannot write", tmp, e))?;
        }
    }
    if c.durable {
        file.sync_all().map_err(|e| io_error(SYNC_FAILED, "cannot write", tmp, e))?;
    }
    Ok(())
}

/// Writes zeros over bytes `from..to` of the file, `chunk` bytes per write.
/// On tmpfs, `fallocate` reserves pages but leaves them to be cleared by
/// whoever touches them first: clearing them here, once, keeps that cost
/// (page faults over the whole file: docs/measurements.md) out of every
/// attaching process's first pushes.
///
/// A durable queue's file on a disk is filled one page per write: the page
/// cache keeps a file's pages in folios as large as the writes that
/// created them, and a folio is written back whole, so after 1 MiB writes
/// every sync of one record wrote 1 MiB (see docs/durability.md).
pub(super) fn zero_fill(file: &File, from: u64, to: u64, chunk: usize) -> std::io::Result<()> {
    let zeros = vec![0u8; chunk.min((to - from) as usize)];
    let mut at = from;
    while at < to {
        let n = zeros.len().min((to - at) as usize);
        file.write_all_at(&zeros[..n], at)?;
        at += n as u64;
    }
    Ok(())
}

/// Gives the filled file `tmp` the name `path` unless `path` exists:
/// `Ok(false)` then (`tmp` is left for the caller to remove).
pub(super) fn publish_new(tmp: &Path, path: &Path) -> std::io::Result<bool> {
    let (ctmp, cfinal) = (cpath(tmp).map_err(std::io::Error::other)?, cpath(path).map_err(std::io::Error::other)?);
    // SAFETY: valid C paths; renameat2 does not keep them.
    let rc = unsafe {
        libc::renameat2(libc::AT_FDCWD, ctmp.as_ptr(), libc::AT_FDCWD, cfinal.as_ptr(), libc::RENAME_NOREPLACE)
    };
    let err = if rc == 0 { return Ok(true) } else { std::io::Error::last_os_error() };
    let err = match err.raw_os_error() {
        // File systems without RENAME_NOREPLACE: link() fails on an existing name too.
        Some(libc::EINVAL | libc::ENOSYS) => match std::fs::hard_link(tmp, path) {
            Ok(()) => {
                let _ = std::fs::remove_file(tmp);
                return Ok(true);
            }
            Err(e) => e,
        },
        _ => err,
    };
    if err.kind() == std::io::ErrorKind::AlreadyExists { Ok(false) } else { Err(err) }
}

/// What [`unlink_if_same`] found at the name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Unlinked {
    /// The name led to the open file: it is gone.
    Done,
    /// Nothing was there.
    Missing,
    /// The name leads to another file now (or the open file cannot be
    /// told): left alone.
    Replaced,
}

/// Unlinks `path` if it still names the open file `opened` (not a file
/// made under that name meanwhile). Errors: those of `unlink`.
pub(super) fn unlink_if_same(path: &Path, opened: &File) -> std::io::Result<Unlinked> {
    let mine = opened.metadata().map(|m| (m.dev(), m.ino())).ok();
    match std::fs::symlink_metadata(path).map(|m| (m.dev(), m.ino())) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Unlinked::Missing),
        Ok(now) if Some(now) != mine => return Ok(Unlinked::Replaced),
        _ => {}
    }
    match std::fs::remove_file(path) {
        Ok(()) => Ok(Unlinked::Done),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Unlinked::Missing),
        Err(e) => Err(e),
    }
}
