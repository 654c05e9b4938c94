//! The byte locks of the entries (open-file-description locks: the kernel
//! drops one when its holder dies, however it dies), and the file they are
//! on: held open, or closed and opened again for a look ([`LockFile`]).

use std::fs::File;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

fn flock_at(kind: libc::c_int, offset: i64) -> libc::flock {
    // SAFETY: flock is plain data; all-zero is a valid value.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = kind as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = offset as libc::off_t;
    fl.l_len = 1;
    fl
}

/// Takes the write lock on one byte for our open file description.
pub(super) fn lock(fd: RawFd, offset: i64) -> bool {
    let mut fl = flock_at(libc::F_WRLCK, offset);
    // SAFETY: fcntl with a valid flock pointer; the kernel validates the fd.
    unsafe { libc::fcntl(fd, libc::F_OFD_SETLK, &mut fl) == 0 }
}

/// Releases our lock on one byte.
pub(super) fn unlock(fd: RawFd, offset: i64) {
    let mut fl = flock_at(libc::F_UNLCK, offset);
    // SAFETY: fcntl with a valid flock pointer; the kernel validates the fd.
    unsafe { libc::fcntl(fd, libc::F_OFD_SETLK, &mut fl) };
}

/// Does another open file description hold the byte? `None` if unknown.
fn held(fd: RawFd, offset: i64) -> Option<bool> {
    let mut fl = flock_at(libc::F_WRLCK, offset);
    // SAFETY: fcntl with a valid flock pointer; the kernel validates the fd.
    if unsafe { libc::fcntl(fd, libc::F_OFD_GETLK, &mut fl) } != 0 {
        return None;
    }
    Some(fl.l_type != libc::F_UNLCK as libc::c_short)
}

/// The file whose byte locks are the entries' (the file that is mapped).
#[derive(Clone)]
pub(crate) enum LockFile {
    /// Held open: a registered process holds its entry's lock through it.
    Open(Arc<File>),
    /// Closed once mapped (a detached view, [`crate::Queue::inspect_detached`]):
    /// where it is and which file it was (device, inode), to be opened again
    /// for each look at the locks.
    Closed { path: PathBuf, dev: u64, ino: u64 },
}

impl LockFile {
    /// `file`, about to be closed, found again later at `path`.
    pub(crate) fn closed(path: &Path, file: &File) -> std::io::Result<LockFile> {
        let m = file.metadata()?;
        Ok(LockFile::Closed { path: path.to_path_buf(), dev: m.dev(), ino: m.ino() })
    }

    /// The open file, if it is held open.
    pub(crate) fn held(&self) -> Option<&File> {
        match self {
            LockFile::Open(f) => Some(f),
            LockFile::Closed { .. } => None,
        }
    }

    /// The closed file opened again (read-only), if its path still leads to
    /// it; None when it is gone or replaced, or held open.
    fn reopen(&self) -> Option<File> {
        let LockFile::Closed { path, dev, ino } = self else { return None };
        let f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
            .open(path)
            .ok()?;
        let m = f.metadata().ok()?;
        (m.dev() == *dev && m.ino() == *ino).then_some(f)
    }
}

/// Looks at entries' locks through a [`LockFile`]: a closed one is opened
/// again at the first look and closed when this is dropped, so that a look
/// at a table none of whose entries names a process opens nothing.
pub(super) struct Locks<'a> {
    file: &'a LockFile,
    /// The closed file opened again (None inside: gone or replaced).
    again: Option<Option<File>>,
}

impl<'a> Locks<'a> {
    pub(super) fn new(file: &'a LockFile) -> Locks<'a> {
        Locks { file, again: None }
    }

    /// Does another open file description hold the byte at `offset`? `None`
    /// if unknown (a closed file that is gone or replaced: its entries' are
    /// not this file's).
    pub(super) fn held(&mut self, offset: i64) -> Option<bool> {
        let fd = match self.file {
            LockFile::Open(f) => f.as_raw_fd(),
            closed => self.again.get_or_insert_with(|| closed.reopen()).as_ref()?.as_raw_fd(),
        };
        held(fd, offset)
    }
}
