//! Live parts that outlived their queues: a durable queue's live part (in
//! `/dev/shm/tvmq-<uid>`, see [`super::live`]) is freed by `tvmq drop`,
//! but a queue file removed otherwise (`rm`, alone or with its directory)
//! or replaced by another file leaves it, memory nobody frees until a
//! reboot. Each live file records its queue file's path (an extended
//! attribute, [`record_queue`]); a sweep ([`remove_orphans`]) removes the
//! live files of the user whose recorded path is gone or leads to another
//! inode than the one in the live file's name, unless a process uses it.
//!
//! Who uses a live file, and how the sweep and an attach never cross: a
//! maker holds its maker's lock (`super::make`) while its file lives; an
//! attacher takes the use byte ([`USE_LOCK`], shared) before it trusts the
//! file it opened, then checks that the name still leads to it
//! ([`hold`]); a registered process holds its registry entry's lock. The
//! sweep removes a file only while it holds the use byte exclusively and
//! sees no other lock on it, and unlinks it before it lets go: an attacher
//! that gets the use byte after that finds the name gone and makes a new
//! live file (rebuilt from the image), never two processes on two files.

use super::dir::{default_dir_of, open_nofollow};
use super::fs::cpath;
use super::make::{Unlinked, remove_if_abandoned, unlink_if_same};
use std::ffi::CStr;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// The start of a live file's temporary name (while it is made).
pub(super) const LIVE_TEMPORARY: &str = ".interval-tmp.";

/// The name of the live file of queue `id` created at `created_ns`, whose
/// queue file is inode `ino` of device `dev`.
pub(super) fn live_name(dev: u64, ino: u64, id: u32, created_ns: u64) -> String {
    format!(".interval-{dev:x}-{ino}-{id}-{created_ns}.live")
}

/// The queue file's device and inode in a live file's name (see
/// [`live_name`]).
fn named_file(name: &str) -> Option<(u64, u64)> {
    let mut words = name.strip_prefix(".interval-")?.strip_suffix(".live")?.split('-');
    let dev = u64::from_str_radix(words.next()?, 16).ok()?;
    let ino = words.next()?.parse().ok()?;
    Some((dev, ino))
}

/// The extended attribute of a live file that names its queue file (an
/// absolute path).
const QUEUE_ATTR: &CStr = c"user.tvmq.queue";

/// Records `queue` as the live file's queue file, unless it is recorded
/// already. Best effort: a file system without user attributes (tmpfs
/// before Linux 6.6) keeps none, and its live files are never taken for
/// orphans.
pub(super) fn record_queue(live: &File, queue: &Path) {
    let want = queue.as_os_str().as_bytes();
    let mut buf = vec![0u8; want.len() + 1];
    // SAFETY: fgetxattr writes at most buf.len() bytes into buf, on a
    // descriptor we own; the name is NUL-terminated.
    let n = unsafe { libc::fgetxattr(live.as_raw_fd(), QUEUE_ATTR.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if usize::try_from(n).is_ok_and(|n| buf[..n] == *want) {
        return;
    }
    // SAFETY: fsetxattr reads want.len() bytes of want, on a descriptor we own.
    unsafe { libc::fsetxattr(live.as_raw_fd(), QUEUE_ATTR.as_ptr(), want.as_ptr().cast(), want.len(), 0) };
}

/// The queue file the live file at `path` records (`None`: none recorded,
/// or unreadable).
fn recorded_queue(path: &Path) -> Option<PathBuf> {
    let c = cpath(path).ok()?;
    let mut buf = vec![0u8; libc::PATH_MAX as usize];
    // SAFETY: lgetxattr writes at most buf.len() bytes into buf; the path
    // and the name are NUL-terminated; a link is not followed.
    let n = unsafe { libc::lgetxattr(c.as_ptr(), QUEUE_ATTR.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    let n = usize::try_from(n).ok().filter(|&n| n > 0)?;
    buf.truncate(n);
    Some(PathBuf::from(std::ffi::OsString::from_vec(buf)))
}

/// Is the live file at `path`, named for the queue file `named` (device,
/// inode), an orphan: its recorded queue file gone (no such file or
/// directory), or another file now? A file that records none, or whose
/// queue file cannot be looked at (no permission), is not.
fn is_orphan(path: &Path, named: (u64, u64)) -> bool {
    let Some(queue) = recorded_queue(path) else { return false };
    match std::fs::symlink_metadata(&queue) {
        Ok(m) => (m.dev(), m.ino()) != named,
        Err(e) => e.kind() == std::io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ENOTDIR),
    }
}

/// The byte of a live file that its attachers hold shared and a sweep
/// exclusive (an open-file-description lock), past the registry's and
/// the recovery's bytes and beside the maker's (`super::make`).
const USE_LOCK: libc::off_t = libc::off_t::MAX - 2;

/// A lock request of `kind` on `len` bytes from `start` (0: to the end).
fn lock_request(kind: libc::c_int, start: libc::off_t, len: libc::off_t) -> libc::flock {
    // SAFETY: flock is plain data; all-zero is a valid value.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = kind as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    (fl.l_start, fl.l_len) = (start, len);
    fl
}

/// (An attach.) Holds the use byte of the live file `file`, opened at
/// `path`, for as long as `file` stays open (waits while a sweep holds
/// it, a few system calls), then tells whether `path` still leads to it:
/// false if a sweep removed it before (or anyone replaced it), and the
/// caller looks again. Errors: the lock cannot be taken (`fcntl`'s error).
pub(super) fn hold(file: &File, path: &Path) -> std::io::Result<bool> {
    let mut fl = lock_request(libc::F_RDLCK, USE_LOCK, 1);
    // SAFETY: fcntl with a valid flock pointer on a descriptor we own.
    while unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLKW, &mut fl) } != 0 {
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    let mine = file.metadata()?;
    Ok(std::fs::symlink_metadata(path).is_ok_and(|m| (m.dev(), m.ino()) == (mine.dev(), mine.ino())))
}

/// (A sweep.) Takes the use byte of `file` exclusively, never waiting:
/// false if an attacher holds it.
fn take_for_removal(file: &File) -> bool {
    let mut fl = lock_request(libc::F_WRLCK, USE_LOCK, 1);
    // SAFETY: fcntl with a valid flock pointer on a descriptor we own.
    unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &mut fl) == 0 }
}

/// Is any byte of `file` locked by another open file description: a
/// process attached to it (its registry entry's lock, the use byte), or
/// making it (its maker's lock)? `None` if that cannot be told.
fn anyone_holds(file: &File) -> Option<bool> {
    // From byte 0 to the end and past it: every lock.
    let mut fl = lock_request(libc::F_WRLCK, 0, 0);
    // SAFETY: fcntl with a valid flock pointer on a descriptor we own.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_GETLK, &mut fl) } != 0 {
        return None;
    }
    Some(fl.l_type != libc::F_UNLCK as libc::c_short)
}

/// What `remove_orphans` removed: live files and their bytes (of memory,
/// in tmpfs), and temporary files of makers that died.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct OrphansRemoved {
    /// Live files removed.
    pub live_parts: u64,
    /// The bytes they held.
    pub bytes: u64,
    /// Temporary files of live files whose makers died, removed.
    pub temporaries: u64,
}

/// Live files removed by this process since it started, and their bytes.
static REMOVED: [AtomicU64; 2] = [const { AtomicU64::new(0) }; 2];

/// Live files (and their bytes) that this process removed as orphans since
/// it started, at its creates and attaches and in [`remove_orphans`].
pub(crate) fn removed_so_far() -> (u64, u64) {
    (REMOVED[0].load(Ordering::Relaxed), REMOVED[1].load(Ordering::Relaxed))
}

/// Removes the live files of this user (in `/dev/shm/tvmq-<euid>`) whose
/// queue file is gone, or is another file now (its name leads to another
/// inode: the queue was removed otherwise than by `tvmq drop`, with `rm`
/// or with its directory), and that no process uses (none holds a lock on
/// it: attached, attaching, or making it); and the temporary files of live
/// files whose makers died. A live file that records no queue file (made
/// by an earlier version, or on a tmpfs without user attributes) is kept.
/// Cost: a listing of the directory, and two system calls per live file
/// (its attribute, a `stat` of its queue file), more only for an orphan.
/// Run at every create and attach of a queue with a live file, by `tvmq
/// repair` and by `tvmq serve`'s index.
pub(crate) fn remove_orphans() -> OrphansRemoved {
    // SAFETY: geteuid has no preconditions.
    let dir = default_dir_of(unsafe { libc::geteuid() });
    let mut removed = OrphansRemoved::default();
    let Ok(entries) = std::fs::read_dir(&dir) else { return removed };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        let path = e.path();
        if name.starts_with(LIVE_TEMPORARY) {
            removed.temporaries += u64::from(remove_if_abandoned(&path));
            continue;
        }
        let Some(named) = named_file(name) else { continue };
        if !is_orphan(&path, named) {
            continue;
        }
        let Ok(Some(file)) = open_nofollow(&path, true) else { continue };
        // Held exclusively, no other lock, and still an orphan (it may have
        // been attached at the queue file's new place, then let go): then
        // nobody uses it, and nobody can start to before it is unlinked.
        if !take_for_removal(&file) || anyone_holds(&file) != Some(false) || !is_orphan(&path, named) {
            continue;
        }
        let bytes = file.metadata().map_or(0, |m| m.blocks() * 512);
        if unlink_if_same(&path, &file).is_ok_and(|u| u == Unlinked::Done) {
            removed.live_parts += 1;
            removed.bytes += bytes;
        }
    }
    REMOVED[0].fetch_add(removed.live_parts, Ordering::Relaxed);
    REMOVED[1].fetch_add(removed.bytes, Ordering::Relaxed);
    removed
}
