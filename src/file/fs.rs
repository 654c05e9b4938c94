//! What the files of this module share below them: errors of file system
//! calls, paths as C strings, and the kind of filesystem a file is on.

use crate::error::*;
use std::ffi::CString;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// The error `code` for a failed file system call: what was done, the path, why.
pub(super) fn io_error(code: u32, what: &str, path: &Path, e: std::io::Error) -> Error {
    Error::new(code, format!("{what} {}: {e}", path.display()))
}

/// `path` as a C string. Errors: `SHM_ERR_INVAL` (it holds a NUL byte).
pub(super) fn cpath(path: &Path) -> Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| Error::new(SHM_ERR_INVAL, format!("path contains a NUL byte: {}", path.display())))
}

/// The kind of filesystem a file is on, as far as queues care.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FsKind {
    /// tmpfs (as /dev/shm is): memory, emptied by a restart.
    Tmpfs,
    /// ramfs: memory too, emptied by a restart.
    Ramfs,
    /// Anything else (or unknown: `fstatfs` failed).
    Other,
}

/// `statfs` magic of ramfs (libc names tmpfs's but not this one).
const RAMFS_MAGIC: libc::c_long = 0x8584_58f6;

impl FsKind {
    /// The filesystem of the open file `file`.
    pub(crate) fn of(file: &File) -> FsKind {
        // SAFETY: statfs is plain data; all-zero is a valid value for the call to fill.
        let mut st: libc::statfs = unsafe { std::mem::zeroed() };
        // SAFETY: a valid fd and out pointer.
        if unsafe { libc::fstatfs(file.as_raw_fd(), &mut st) } != 0 {
            return FsKind::Other;
        }
        if st.f_type == libc::TMPFS_MAGIC {
            FsKind::Tmpfs
        } else if st.f_type as libc::c_long == RAMFS_MAGIC {
            FsKind::Ramfs
        } else {
            FsKind::Other
        }
    }

    /// Do the filesystem's contents not survive a restart (tmpfs, ramfs)?
    pub(crate) fn is_volatile(self) -> bool {
        self != FsKind::Other
    }
}
