//! Where queue files live, and who may use them: the queue directory, file
//! names, and opening a queue file without following links or trusting a
//! file of another owner.

use super::fs::{cpath, io_error};
use crate::error::*;
use std::fs::File;
use std::os::fd::FromRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The queue directory: `$TVMDBD`, or `/dev/shm/tvmq-<uid>` when it is unset
/// or empty.
pub fn queue_dir() -> PathBuf {
    match std::env::var_os("TVMDBD") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => default_dir(),
    }
}

fn default_dir() -> PathBuf {
    // SAFETY: geteuid has no preconditions.
    default_dir_of(unsafe { libc::geteuid() })
}

/// The default queue directory of user `uid`, `/dev/shm/tvmq-<uid>`; also
/// where the live parts of that user's `interval` queues are kept (see
/// [`super::live`]).
pub(crate) fn default_dir_of(uid: u32) -> PathBuf {
    PathBuf::from(format!("/dev/shm/tvmq-{uid}"))
}

/// The file of queue `id` in `dir`: `queue-<id>.tvmq`.
pub fn queue_path(dir: &Path, id: u32) -> PathBuf {
    dir.join(format!("queue-{id}.tvmq"))
}

/// The queue id of a file name made by [`queue_path`].
pub(crate) fn parse_file_name(name: &str) -> Option<u32> {
    let digits = name.strip_prefix("queue-")?.strip_suffix(".tvmq")?;
    // Only the canonical spelling ("queue-021.tvmq" is not queue 21's file).
    digits.parse().ok().filter(|id: &u32| id.to_string() == digits)
}

/// The ids of the queue files in `dir`, sorted. A missing directory holds
/// no queues.
///
/// Errors: `SHM_ERR_INVAL` (`dir` is not a directory), `SHM_ERR_ACCES` (it
/// cannot be read).
pub fn queue_ids(dir: &Path) -> Result<Vec<u32>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => return Err(not_a_directory(dir)),
        Err(e) => return Err(io_error(SHM_ERR_ACCES, "cannot read queue directory", dir, e)),
    };
    let mut ids: Vec<u32> =
        entries.filter_map(|e| e.ok()).filter_map(|e| e.file_name().to_str().and_then(parse_file_name)).collect();
    ids.sort_unstable();
    Ok(ids)
}

/// The queue id of a directory entry's name, if it is a queue file's
/// (`queue-21.tvmq` is queue 21's; temporaries and other files are not):
/// for a watcher of the directory that sees names, not ids.
pub fn queue_file_id(name: &std::ffi::OsStr) -> Option<u32> {
    name.to_str().and_then(parse_file_name)
}

/// The size in bytes of the filesystem that holds `dir` (its total, not
/// what is free), or `None` if it cannot be read: what a budget for queue
/// files (say, half a tmpfs) is reckoned from.
pub fn filesystem_size(dir: &Path) -> Option<u64> {
    let c = cpath(dir).ok()?;
    // SAFETY: statvfs is plain data; all-zero is a valid value for the call to fill.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid C path and out pointer.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    Some((st.f_blocks as u64).saturating_mul(st.f_frsize as u64))
}

/// `TBL_NOT_FOUND` for the queue file `path`, which does not exist.
pub(crate) fn no_queue(path: &Path) -> Error {
    let id = path.file_name().and_then(|n| n.to_str()).and_then(parse_file_name);
    match id {
        Some(id) => Error::new(TBL_NOT_FOUND, format!("queue {id} does not exist (no file {})", path.display())),
        None => Error::new(TBL_NOT_FOUND, format!("no queue file {}", path.display())),
    }
}

/// `SHM_ERR_INVAL`: the queue directory's path names something else.
fn not_a_directory(dir: &Path) -> Error {
    Error::new(SHM_ERR_INVAL, format!("queue directory {} is not a directory", dir.display()))
}

/// Checks (and, for the default directory, creates) the queue directory.
/// Returns the uid of its owner.
pub(crate) fn check_dir(dir: &Path, create: bool) -> Result<u32> {
    let is_default = dir == default_dir();
    if create && !dir.exists() {
        let mut b = std::fs::DirBuilder::new();
        std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
        b.recursive(true);
        if let Err(e) = b.create(dir) {
            if !dir.is_dir() {
                return Err(io_error(SHM_ERR_ACCES, "cannot create queue directory", dir, e));
            }
        }
    }
    let meta = if is_default { std::fs::symlink_metadata(dir) } else { std::fs::metadata(dir) };
    let meta = match meta {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Error::new(TBL_NOT_FOUND, format!("queue directory {} does not exist", dir.display())));
        }
        Err(e) => return Err(io_error(SHM_ERR_ACCES, "cannot read queue directory", dir, e)),
    };
    if meta.file_type().is_symlink() {
        // Only the default directory is looked at without following links:
        // someone else could have planted the link in /dev/shm.
        return Err(Error::new(SHM_ERR_ACCES, format!("{} is a symbolic link: refused", dir.display())));
    }
    if !meta.is_dir() {
        return Err(not_a_directory(dir));
    }
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if is_default && meta.uid() != me {
        return Err(Error::new(
            SHM_ERR_ACCES,
            format!("{} belongs to uid {}, not to you (uid {me}): refused", dir.display(), meta.uid()),
        ));
    }
    Ok(meta.uid())
}

/// Checks that `dir` can serve as a queue directory before a long-running
/// program (`tvmq serve`) relies on it: the checks of every create (a
/// directory, not a link planted in place of the default one, which must be
/// ours; the default one is created, mode 0700, if missing), then that this
/// process may list it and, when `writable`, create files in it. Errors:
/// `TBL_NOT_FOUND` (missing), `SHM_ERR_INVAL` (not a directory),
/// `SHM_ERR_ACCES` (link, another owner, no permission).
pub fn check_queue_dir(dir: &Path, writable: bool) -> Result<()> {
    check_dir(dir, dir == default_dir())?;
    let c = cpath(dir)?;
    let mode = libc::R_OK | libc::X_OK | if writable { libc::W_OK } else { 0 };
    // SAFETY: `c` is a NUL-terminated path that outlives the call.
    if unsafe { libc::faccessat(libc::AT_FDCWD, c.as_ptr(), mode, libc::AT_EACCESS) } != 0 {
        let need = if writable { "list and create files in" } else { "list" };
        return Err(io_error(
            SHM_ERR_ACCES,
            &format!("cannot {need} queue directory"),
            dir,
            std::io::Error::last_os_error(),
        ));
    }
    Ok(())
}

/// Opens `path` without following a link, blocking (a FIFO) or making it
/// the controlling terminal; `None` when nothing is there. Errors: a
/// symbolic link or no permission (`SHM_ERR_ACCES`), others
/// (`SHM_ERR_INVAL`).
pub(crate) fn open_nofollow(path: &Path, write: bool) -> Result<Option<File>> {
    let c = cpath(path)?;
    let mode = if write { libc::O_RDWR } else { libc::O_RDONLY };
    // SAFETY: open with a valid C path; the fd is owned by the File below.
    let fd = unsafe {
        libc::open(c.as_ptr(), mode | libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK | libc::O_NOCTTY)
    };
    if fd < 0 {
        let e = std::io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::ENOENT) => Ok(None),
            Some(libc::ELOOP) => {
                Err(Error::new(SHM_ERR_ACCES, format!("{} is a symbolic link: refused", path.display())))
            }
            Some(libc::EACCES | libc::EPERM) => Err(io_error(SHM_ERR_ACCES, "cannot open", path, e)),
            _ => Err(io_error(SHM_ERR_INVAL, "cannot open", path, e)),
        };
    }
    // SAFETY: fd is a fresh descriptor that nothing else owns.
    Ok(Some(unsafe { File::from_raw_fd(fd) }))
}

/// Opens a queue file without following links or blocking, and checks that
/// it is a regular file owned by us or by the directory's owner.
pub(crate) fn open_checked(dir: &Path, path: &Path, write: bool) -> Result<File> {
    let dir_owner = check_dir(dir, false)?;
    let file = open_nofollow(path, write)?.ok_or_else(|| no_queue(path))?;
    let meta = file.metadata().map_err(|e| io_error(SHM_ERR_INVAL, "cannot stat", path, e))?;
    if !meta.file_type().is_file() {
        return Err(Error::new(SHM_ERR_INVAL, format!("{} is not a regular file: refused", path.display())));
    }
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me && meta.uid() != dir_owner {
        return Err(Error::new(
            SHM_ERR_ACCES,
            format!(
                "{} belongs to uid {}, neither you (uid {me}) nor the directory's owner (uid {dir_owner}): refused",
                path.display(),
                meta.uid()
            ),
        ));
    }
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_round_trip() {
        assert_eq!(parse_file_name("queue-21.tvmq"), Some(21));
        assert_eq!(
            parse_file_name(&queue_path(Path::new("/d"), 4_000_000_000).file_name().unwrap().to_string_lossy()),
            Some(4_000_000_000)
        );
        assert_eq!(parse_file_name(".queue-21.tmp.1.2"), None);
        assert_eq!(parse_file_name("queue-x.tvmq"), None);
        assert_eq!(parse_file_name("queue-021.tvmq"), None);
        assert_eq!(parse_file_name("queue-+21.tvmq"), None);
        assert_eq!(queue_path(Path::new("/d"), 7), Path::new("/d/queue-7.tvmq"));
    }

    #[test]
    fn queue_file_ids_and_filesystem_size() {
        use std::ffi::OsStr;
        assert_eq!(queue_file_id(OsStr::new("queue-21.tvmq")), Some(21));
        assert_eq!(queue_file_id(OsStr::new(".queue-21.tmp.1.2")), None);
        assert!(filesystem_size(Path::new("/dev/shm")).is_some_and(|s| s > 0));
        assert_eq!(filesystem_size(Path::new("/nonexistent/tvmq-dir")), None);
    }

    #[test]
    fn a_missing_directory_holds_no_queues() {
        assert_eq!(queue_ids(Path::new("/nonexistent/tvmq-dir")).unwrap(), Vec::<u32>::new());
    }

    #[test]
    fn a_file_is_not_a_queue_directory() {
        let file = std::env::temp_dir().join(format!("tvmq-not-a-dir-{}", std::process::id()));
        std::fs::write(&file, b"").unwrap();
        for e in [queue_ids(&file).unwrap_err(), check_dir(&file, true).unwrap_err()] {
            assert_eq!(e.code(), SHM_ERR_INVAL);
            assert!(e.to_string().starts_with("queue directory "), "{e}");
            assert!(e.to_string().ends_with(" is not a directory (SHM_ERR_INVAL)"), "{e}");
        }
        std::fs::remove_file(&file).unwrap();
    }
}
