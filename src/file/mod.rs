//! Queue files, by concern: [`layout`] (the bytes of a file and the checks
//! of its header), [`dir`] (where files live and who may open them),
//! [`create`] (atomic creation, removal, cleanup), [`map`] (validated
//! opening and mapping) and [`live`] (the tmpfs file that holds an
//! `interval` queue's live part).

pub(crate) mod create;
pub(crate) mod dir;
pub(crate) mod layout;
pub(crate) mod live;
pub(crate) mod map;

pub use dir::{check_queue_dir, filesystem_size, queue_dir, queue_file_id, queue_ids, queue_path};
pub use layout::slot_stride;

use crate::error::*;
use std::ffi::CString;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

fn io_error(code: u32, what: &str, path: &Path, e: std::io::Error) -> Error {
    Error::new(code, format!("{what} {}: {e}", path.display()))
}

fn cpath(path: &Path) -> Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| Error::new(SHM_ERR_INVAL, format!("path contains a NUL byte: {}", path.display())))
}

/// The name in the header of queue `id` of `dir`, read without mapping the
/// file (one open and one read of its header). Errors: those of opening a
/// queue (`TBL_NOT_FOUND`, `SHM_ERR_INVAL`, ...).
pub fn queue_name(dir: &Path, id: u32) -> Result<String> {
    map::read_header(dir, id).map(|h| h.name().to_string())
}

/// The name and the partition text (`Spec::part`) in the header of queue
/// `id` of `dir`, read as [`queue_name`] reads the name (one open and one
/// read of its header). Errors: those of [`queue_name`].
pub fn queue_name_and_part(dir: &Path, id: u32) -> Result<(String, String)> {
    map::read_header(dir, id).map(|h| (h.name().to_string(), h.part().to_string()))
}

/// Is the file on tmpfs (as /dev/shm is)?
fn is_tmpfs(file: &File) -> bool {
    // SAFETY: statfs is plain data; all-zero is a valid value for the call to fill.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid fd and out pointer.
    unsafe { libc::fstatfs(file.as_raw_fd(), &mut st) == 0 && st.f_type == libc::TMPFS_MAGIC }
}

/// `statfs` magic of ramfs (libc names tmpfs's but not this one).
const RAMFS_MAGIC: libc::c_long = 0x8584_58f6;

/// Is the file on a filesystem whose contents do not survive a restart
/// (tmpfs, ramfs)?
pub(crate) fn is_volatile_fs(file: &File) -> bool {
    // SAFETY: statfs is plain data; all-zero is a valid value for the call to fill.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid fd and out pointer.
    let ok = unsafe { libc::fstatfs(file.as_raw_fd(), &mut st) == 0 };
    ok && (st.f_type == libc::TMPFS_MAGIC || st.f_type as libc::c_long == RAMFS_MAGIC)
}

#[cfg(test)]
mod tests;
