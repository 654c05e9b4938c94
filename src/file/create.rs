//! Creating a queue file atomically (it appears complete or not at all),
//! removing one, and cleaning up after creations whose process died.

use super::dir::{check_dir, open_checked, queue_path};
use super::fs::{FsKind, cpath, io_error};
use super::layout::{HEADER_BYTES, Header, Options, header_page};
use super::live;
use super::make::{Contents, Unlinked, create_temporary, fill, publish_new, remove_if_abandoned, unlink_if_same};
use crate::error::*;
use crate::spec::Spec;
use std::fs::File;
use std::path::Path;

/// Creates queue `id` in `dir`, atomically: the file appears complete or not
/// at all.
pub(crate) fn create(dir: &Path, id: u32, spec: &Spec) -> Result<()> {
    spec.check_geometry()?;
    spec.check_settings(id)?;
    let size = spec.file_size().filter(|&s| s <= i64::MAX as u64).ok_or_else(|| {
        let what = format!("{} rows of {} bytes make a file too large to address", spec.rows, spec.record_size);
        Error::new(MQUE_CRTE_BIG, what)
    })?;
    let info = Header::new(id, spec, size)?;
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
    let image = live::in_tmpfs(&options);
    let needed = disk_ranges(&info, image).iter().map(|(a, b)| b - a).sum::<u64>();
    if available.is_some_and(|a| needed > a) {
        return Err(Error::new(
            MQUE_CRTE_BIG,
            format!("queue needs {needed} bytes, {} has {} available", dir.display(), available.unwrap_or(0)),
        ));
    }

    let (tmp, file) = create_temporary(dir, &temporary_prefix(id), spec.mode)?;
    let durable = spec.durability.is_some();
    let header = header_page(&info, &options);
    let contents = Contents {
        mode: spec.mode,
        len: info.file_size,
        ranges: &disk_ranges(&info, image),
        header: &header,
        durable,
        // This boot's id: the queue's first attach needs no recovery (an
        // `interval` queue's live part, in tmpfs, holds its own).
        stamp_boot_id: durable && !image,
    };
    let mut live = None;
    let result = fill(&file, &tmp, &contents)
        .and_then(|()| {
            // An `interval` queue's live part, in tmpfs: made before the
            // queue file is published, so that no process finds one without
            // the other (the queue file keeps its inode through the rename).
            if image {
                let ident = live::Identity::of(&file, &info, &tmp, &path)?;
                live = Some(live::create(&info, &options, &ident)?);
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
/// all but its hole ([`Header::allocated_ranges`]); for an `interval` queue
/// (`image`) only its header page and its image, its live part being kept
/// in tmpfs (see [`super::live`]: the range between is a hole that nothing
/// writes).
fn disk_ranges(info: &Header, image: bool) -> Vec<(u64, u64)> {
    match image.then(|| live::live_len(info)).flatten() {
        Some(live) => {
            [(0, HEADER_BYTES.min(live)), (live, info.file_size)].into_iter().filter(|(a, b)| a < b).collect()
        }
        None => info.allocated_ranges(),
    }
}

/// `.queue-<id>.tmp.`: the name of a queue file being created starts with
/// this.
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
    if FsKind::of(&d).is_volatile() {
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

/// Moves the finished temporary file to its name, failing if the name exists.
fn publish(tmp: &Path, path: &Path, id: u32) -> Result<()> {
    match publish_new(tmp, path) {
        Ok(true) => Ok(()),
        Ok(false) => Err(Error::new(TBL_ARD_EXIST, format!("queue {id} already exists ({})", path.display()))),
        Err(e) => Err(io_error(SHM_ERR_ACCES, "cannot create", path, e)),
    }
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
    match unlink_if_same(&path, opened) {
        Ok(Unlinked::Done) => Ok(()),
        Ok(Unlinked::Missing) => Err(super::dir::no_queue(&path)),
        Ok(Unlinked::Replaced) => {
            Err(Error::new(TBL_NOT_FOUND, format!("queue {id} was replaced while being dropped")))
        }
        Err(e) => Err(io_error(SHM_ERR_ACCES, "cannot remove", &path, e)),
    }
}

/// Removes queue `id`'s file without mapping it (it is corrupted or of
/// another version), after the same type, ownership and permission checks
/// as opening it.
pub(crate) fn remove_unmapped(dir: &Path, id: u32) -> Result<()> {
    let file = open_checked(dir, &queue_path(dir, id), true)?;
    remove(dir, id, &file)
}

/// Removes temporary files that a creation of queue `id` left behind when
/// its process died (`.queue-<id>.tmp.*` whose maker's lock nobody holds:
/// see `make::remove_if_abandoned`). Returns how many were removed.
pub(crate) fn remove_stale_temporaries(dir: &Path, id: u32) -> usize {
    let prefix = temporary_prefix(id);
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .flatten()
        .filter(|e| e.file_name().to_str().is_some_and(|n| n.starts_with(&prefix)))
        .filter(|e| remove_if_abandoned(&e.path()))
        .count()
}
