//! Creating a queue file atomically (it appears complete or not at all),
//! removing one, and cleaning up after creations whose process died.

use super::dir::{check_dir, open_checked, queue_path};
use super::layout::{CONTROL_OFFSET, Control, INFO_BYTES, Info, OPTIONS_OFFSET, Options, SyncWords};
use super::{cpath, io_error, is_tmpfs};
use crate::error::*;
use crate::spec::Spec;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;
use std::sync::atomic::AtomicU64;

/// Creates queue `id` in `dir`, atomically: the file appears complete or not
/// at all.
pub(crate) fn create(dir: &Path, id: u32, spec: &Spec) -> Result<()> {
    spec.check_geometry()?;
    spec.check_settings(id)?;
    let size = spec.file_size().filter(|&s| s <= i64::MAX as u64).ok_or_else(|| {
        let what = format!("{} rows of {} bytes make a file too large to address", spec.rows, spec.record_size);
        Error::new(MQUE_CRTE_BIG, what)
    })?;
    let info = Info::new(id, spec, size)?;
    let options = Options::new(spec);

    if spec.durability.is_some() {
        // Before `check_dir` creates the directory: a refusal leaves nothing behind.
        refuse_volatile(dir)?;
    }
    check_dir(dir, true)?;
    let path = queue_path(dir, id);
    if std::fs::symlink_metadata(&path).is_ok() {
        return Err(Error::new(TBL_ARD_EXIST, format!("queue {id} already exists ({})", path.display())));
    }
    let available = available_bytes(dir);
    let image = super::live::in_tmpfs(&options);
    let needed = disk_ranges(&info, image).iter().map(|(a, b)| b - a).sum::<u64>();
    if available.is_some_and(|a| needed > a) {
        return Err(Error::new(
            MQUE_CRTE_BIG,
            format!("queue needs {needed} bytes, {} has {} available", dir.display(), available.unwrap_or(0)),
        ));
    }

    static SEQ: AtomicU64 = AtomicU64::new(0);
    let tmp = dir.join(format!(
        "{}{}.{}",
        temporary_prefix(id),
        std::process::id(),
        SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    let file = create_exclusive(&tmp, spec.mode)?;
    let durable = spec.durability.is_some();
    let mut live = None;
    let result = fill_new_file(&file, &tmp, &info, &options, spec.mode, durable)
        .and_then(|()| {
            // An `interval` queue's live part, in tmpfs: made before the
            // queue file is published, so that no process finds one without
            // the other (the queue file keeps its inode through the rename).
            if image {
                let ident = super::live::Identity::of(&file, &info, &tmp)?;
                live = Some(super::live::create(&info, &options, &ident)?);
            }
            Ok(())
        })
        .and_then(|()| publish(&tmp, &path, id))
        .and_then(|()| if durable { sync_dir(dir) } else { Ok(()) });
    if result.is_err() && std::fs::symlink_metadata(&tmp).is_ok() {
        // Not published: neither file is left (once published, a failed
        // sync of the directory leaves the queue, as for any durable queue).
        let _ = std::fs::remove_file(&tmp);
        if let Some(l) = &live {
            l.remove();
        }
    }
    result
}

/// The byte ranges of a new queue file that are written when it is made:
/// all but its hole ([`allocated_ranges`]); for an `interval` queue
/// (`image`) only its header page and its image, its live part being kept
/// in tmpfs (see [`super::live`]: the range between is a hole that nothing
/// writes).
fn disk_ranges(info: &Info, image: bool) -> Vec<(u64, u64)> {
    match image.then(|| super::live::live_len(info)).flatten() {
        Some(live) => [(0, INFO_BYTES.min(live)), (live, info.file_size)].into_iter().filter(|(a, b)| a < b).collect(),
        None => allocated_ranges(info),
    }
}

/// `.queue-<id>.tmp.`: the name of a queue file being created starts with
/// this, followed by `<pid>.<n>`.
fn temporary_prefix(id: u32) -> String {
    format!(".queue-{id}.tmp.")
}

/// A durable queue's directory must persist: tmpfs and ramfs are refused.
/// A directory still to be created is judged by its nearest existing
/// ancestor, on whose filesystem it would be made.
fn refuse_volatile(dir: &Path) -> Result<()> {
    let existing = dir
        .ancestors()
        .map(|a| if a.as_os_str().is_empty() { Path::new(".") } else { a })
        .find(|a| a.exists())
        .unwrap_or(dir);
    let d = File::open(existing).map_err(|e| io_error(SHM_ERR_ACCES, "cannot open queue directory", existing, e))?;
    if super::is_volatile_fs(&d) {
        return Err(Error::new(
            NOT_DURABLE,
            format!(
                "{} is on tmpfs or ramfs, which a restart empties: a durable queue needs a directory on a disk \
                 (give one with $TVMDBD or --dir)",
                dir.display()
            ),
        ));
    }
    Ok(())
}

/// Makes the directory entry of a new durable queue durable.
fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(|e| io_error(SYNC_FAILED, "cannot sync queue directory", dir, e))
}

fn fill_new_file(file: &File, tmp: &Path, info: &Info, options: &Options, mode: u32, durable: bool) -> Result<()> {
    // The umask must not narrow (or we widen) the requested mode.
    // SAFETY: fchmod on an fd we own.
    if unsafe { libc::fchmod(file.as_raw_fd(), mode as libc::mode_t) } != 0 {
        return Err(io_error(SHM_ERR_ACCES, "cannot chmod", tmp, std::io::Error::last_os_error()));
    }
    // Reserve every page now (but the intent pages, left a hole: see
    // `layout`): a full tmpfs must fail here, not as SIGBUS later.
    file.set_len(info.file_size).map_err(|e| io_error(MQUE_CRTE_BIG, "cannot size", tmp, e))?;
    let image = super::live::in_tmpfs(options);
    let ranges = disk_ranges(info, image);
    for &(from, to) in &ranges {
        // SAFETY: posix_fallocate on an fd we own.
        let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), from as libc::off_t, (to - from) as libc::off_t) };
        match rc {
            0 | libc::EOPNOTSUPP | libc::EINVAL => {} // sized above: allocated on write
            libc::ENOSPC | libc::EFBIG => {
                return Err(Error::new(
                    MQUE_CRTE_BIG,
                    format!(
                        "no room for {} bytes in {}",
                        ranges.iter().map(|(a, b)| b - a).sum::<u64>(),
                        tmp.display()
                    ),
                ));
            }
            e => return Err(io_error(SHM_ERR_NOMEM, "cannot allocate", tmp, std::io::Error::from_raw_os_error(e))),
        }
    }
    // A durable queue's blocks are written once now, so that its syncs
    // write data in place and never have to commit block allocations (a
    // journal commit per sync; syncs never write the process table).
    let tmpfs = is_tmpfs(file);
    if tmpfs || durable {
        // On a disk, one page per write: see `zero_fill`.
        let chunk = if tmpfs { 1 << 20 } else { 4096 };
        for &(from, to) in &ranges {
            zero_fill(file, from, to, chunk).map_err(|e| io_error(MQUE_CRTE_BIG, "cannot fill", tmp, e))?;
        }
    }
    file.write_all_at(info.as_bytes(), 0)
        .and_then(|()| file.write_all_at(options.as_bytes(), OPTIONS_OFFSET as u64))
        .map_err(|e| io_error(SHM_ERR_NOMEM, "cannot write header of", tmp, e))?;
    if durable && !image {
        // This boot's id: the queue's first attach needs no recovery (an
        // `interval` queue's live part, in tmpfs, holds its own).
        let control = Control::default();
        stamp_boot_id(&control);
        let words = &control.sync.0.boot_id;
        let at = CONTROL_OFFSET
            + std::mem::offset_of!(Control, sync) as u64
            + std::mem::offset_of!(SyncWords, boot_id) as u64;
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&words[0].load(std::sync::atomic::Ordering::Relaxed).to_ne_bytes());
        bytes[8..].copy_from_slice(&words[1].load(std::sync::atomic::Ordering::Relaxed).to_ne_bytes());
        file.write_all_at(&bytes, at)
            .and_then(|()| file.sync_all())
            .map_err(|e| io_error(SYNC_FAILED, "cannot write", tmp, e))?;
    } else if durable {
        file.sync_all().map_err(|e| io_error(SYNC_FAILED, "cannot write", tmp, e))?;
    }
    Ok(())
}

/// Writes this boot's id into `control` (a new queue's, before its file is
/// published), so that its first attach needs no recovery.
fn stamp_boot_id(control: &Control) {
    if let Some(id) = crate::clock::boot_id() {
        control.sync.0.boot_id[0].store(id[0], std::sync::atomic::Ordering::Relaxed);
        control.sync.0.boot_id[1].store(id[1], std::sync::atomic::Ordering::Relaxed);
    }
}

/// Writes zeros over bytes `from..to` of the file. On tmpfs, `fallocate` reserves pages but
/// leaves them to be cleared by whoever touches them first: clearing them
/// here, once, keeps that cost (about a second for 1.3 GB through page faults
/// on this machine type) out of every attaching process's first pushes.
///
/// `chunk` bytes per write. A durable queue's file on a disk is filled one
/// page per write: the page cache keeps a file's pages in folios as large
/// as the writes that created them (up to 1 MiB, with ext4 on Linux 6.18),
/// and a folio is written back whole, so after 1 MiB writes every sync of
/// one 304-byte record wrote 1 MiB and took 400 us instead of 150 (measured
/// with msync of one page, 2,000 times, on this machine's ext4 disk).
pub(crate) fn zero_fill(file: &File, from: u64, to: u64, chunk: usize) -> std::io::Result<()> {
    let zeros = vec![0u8; chunk.min((to - from) as usize)];
    let mut at = from;
    while at < to {
        let n = zeros.len().min((to - at) as usize);
        file.write_all_at(&zeros[..n], at)?;
        at += n as u64;
    }
    Ok(())
}

/// The byte ranges of a new file that are allocated (and, on tmpfs,
/// cleared) when it is made: all but its hole ([`Info::sparse_range`]).
pub(crate) fn allocated_ranges(info: &Info) -> Vec<(u64, u64)> {
    match info.sparse_range() {
        Some((start, end)) => {
            [(0, start.min(info.file_size)), (end, info.file_size)].into_iter().filter(|(a, b)| a < b).collect()
        }
        None => vec![(0, info.file_size)],
    }
}

/// Moves the finished temporary file to its name, failing if the name exists.
fn publish(tmp: &Path, path: &Path, id: u32) -> Result<()> {
    match publish_new(tmp, path) {
        Ok(true) => Ok(()),
        Ok(false) => Err(Error::new(TBL_ARD_EXIST, format!("queue {id} already exists ({})", path.display()))),
        Err(e) => Err(io_error(SHM_ERR_ACCES, "cannot create", path, e)),
    }
}

/// Creates the new file `tmp` with `mode` (the umask may narrow it): it
/// must not exist, and no link is followed.
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

fn available_bytes(dir: &Path) -> Option<u64> {
    let c = cpath(dir).ok()?;
    // SAFETY: statvfs is plain data; the call fills it.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: valid C path and out pointer.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    Some((st.f_bavail as u64).saturating_mul(st.f_frsize as u64))
}

/// Unlinks queue `id`'s file, which the caller has open as `opened`, unless
/// the name now leads to another file (a queue re-created meanwhile).
pub(crate) fn remove(dir: &Path, id: u32, opened: &File) -> Result<()> {
    let path = queue_path(dir, id);
    let inode = opened.metadata().map(|m| (m.dev(), m.ino())).ok();
    let now = std::fs::symlink_metadata(&path).map(|m| (m.dev(), m.ino())).ok();
    if now.is_some() && now != inode {
        return Err(Error::new(TBL_NOT_FOUND, format!("queue {id} was replaced while being dropped")));
    }
    std::fs::remove_file(&path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => super::dir::no_queue(&path),
        _ => io_error(SHM_ERR_ACCES, "cannot remove", &path, e),
    })
}

/// Removes queue `id`'s file without mapping it (it is corrupted or of
/// another version), after the same type, ownership and permission checks
/// as opening it.
pub(crate) fn remove_unmapped(dir: &Path, id: u32) -> Result<()> {
    let file = open_checked(dir, &queue_path(dir, id), true)?;
    remove(dir, id, &file)
}

/// Removes temporary files that a creation of queue `id` left behind when
/// its process died (`.queue-<id>.tmp.<pid>.<n>` with `<pid>` gone). Returns
/// how many were removed.
pub(crate) fn remove_stale_temporaries(dir: &Path, id: u32) -> usize {
    let prefix = temporary_prefix(id);
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    let mut removed = 0;
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.strip_prefix(&prefix)).and_then(|r| r.split('.').next()) else {
            continue;
        };
        let Ok(pid) = pid.parse::<i32>() else { continue };
        if pid <= 0 {
            continue; // kill(0 or negative) would ask about process groups
        }
        // SAFETY: kill with signal 0 only checks for the process.
        let gone =
            unsafe { libc::kill(pid, 0) } != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        if gone && std::fs::remove_file(e.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}
