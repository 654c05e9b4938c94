//! Opening a queue file: every check before anything is mapped, then the
//! mapping and the typed views the queue works through.

use super::dir::{open_checked, queue_path};
use super::fs::{FsKind, io_error};
use super::layout::{
    CONTROL_OFFSET, Control, DATA_OFFSET, HEADER_BYTES, Header, Options, TABLE_OFFSET, lease_table_offset,
};
use super::make::unlink_if_same;
use crate::error::*;
use crate::lease::table::LeaseTable;
use crate::registry::{LockFile, Registry};
use crate::ring::MapStorage;
use crate::shm::{SharedMap, SharedRef};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// How to open a queue file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// For pushing and popping: read-write, pages populated at once or not.
    ReadWrite { populate: bool },
    /// For inspection only.
    ReadOnly,
    /// For inspection only, holding no descriptor: read-only, the files
    /// closed once mapped ([`crate::Queue::inspect_detached`]).
    Detached,
    /// For dropping: read-write, nothing populated, and an `interval`
    /// queue's live part used if it exists, never made.
    Drop,
}

/// An open, validated, mapped queue file.
pub(crate) struct QueueFile {
    header: Header,
    options: Options,
    path: PathBuf,
    /// The queue file, held open, or closed once mapped (a detached view).
    file: Held,
    /// The file that is mapped: the queue file, or an `interval` queue's
    /// live part in tmpfs (see [`super::live`]). Shared with the registry,
    /// whose locks belong to this open file description; a detached view's
    /// is closed, and opened again to look at the locks.
    mapped: LockFile,
    /// The live part, if it is mapped, and whether this open made it.
    live: Option<PathBuf>,
    live_made: bool,
    map: SharedMap,
    control: SharedRef<Control>,
}

/// The queue file of a [`QueueFile`].
enum Held {
    Open(Arc<File>),
    /// Closed once mapped; whether it is on tmpfs or ramfs.
    Closed {
        volatile: bool,
    },
}

/// Opens queue `id`'s file in `dir` and reads and validates its header,
/// without mapping anything.
fn open_validated(dir: &Path, id: u32, write: bool) -> Result<(File, Header, Options, u64, PathBuf)> {
    let path = queue_path(dir, id);
    let file = open_checked(dir, &path, write)?;
    let len = file.metadata().map_err(|e| io_error(SHM_ERR_INVAL, "cannot stat", &path, e))?.len();
    if len < HEADER_BYTES {
        return Err(Error::new(SHM_ERR_INVAL, format!("{} is truncated ({len} bytes)", path.display())));
    }
    let mut raw = [0u8; HEADER_BYTES as usize];
    file.read_exact_at(&mut raw, 0).map_err(|e| io_error(SHM_ERR_INVAL, "cannot read", &path, e))?;
    let short = || Error::new(SHM_ERR_INVAL, format!("{}: its header is too short", path.display()));
    let info = Header::from_bytes(&raw).ok_or_else(short)?;
    let options = Options::from_header(&raw).ok_or_else(short)?;
    // The durable flag changes the slot stride and the lease settings the
    // file's end; a corrupted flag fails one of the checks.
    options
        .validate()
        .and_then(|()| {
            info.validate(len, Some(id), options.durability().is_some(), options.image(), options.lease_entries())
        })
        .map_err(|e| Error::new(e.code(), format!("{}: {}", path.display(), e.what())))?;
    Ok((file, info, options, len, path))
}

/// The validated header of queue `id` in `dir`, read without mapping the file.
pub(crate) fn read_header(dir: &Path, id: u32) -> Result<Header> {
    open_validated(dir, id, false).map(|(_, info, ..)| info)
}

/// The name in the header of queue `id` of `dir`, read without mapping the
/// file (one open and one read of its header). Errors: those of opening a
/// queue (`TBL_NOT_FOUND`, `SHM_ERR_INVAL`, ...).
pub fn queue_name(dir: &Path, id: u32) -> Result<String> {
    read_header(dir, id).map(|h| h.name().to_string())
}

/// The name and the partition text (`Spec::part`) in the header of queue
/// `id` of `dir`, read as [`queue_name`] reads the name (one open and one
/// read of its header). Errors: those of [`queue_name`].
pub fn queue_name_and_part(dir: &Path, id: u32) -> Result<(String, String)> {
    read_header(dir, id).map(|h| (h.name().to_string(), h.part().to_string()))
}

impl QueueFile {
    /// Opens queue `id` in `dir`, refusing anything that is not a regular
    /// queue file of ours with a valid header.
    pub(crate) fn open(dir: &Path, id: u32, access: Access) -> Result<QueueFile> {
        let write = !matches!(access, Access::ReadOnly | Access::Detached);
        let (file, info, options, len, path) = open_validated(dir, id, write)?;
        // An `interval` queue's live part is a file in tmpfs: found from the
        // queue file, made (to be rebuilt from the image) when it is missing.
        let live = if super::live::in_tmpfs(&options) {
            let ident = super::live::Identity::of(&file, &info, &path, &path)?;
            let live = match access {
                Access::ReadWrite { .. } => Some(super::live::attach(&info, &options, &ident)?),
                Access::ReadOnly | Access::Detached | Access::Drop => {
                    super::live::find(&info, &options, &ident, write)?
                }
            };
            if let Some(l) = live.as_ref().filter(|l| l.made && !ident.still_at(&path)) {
                // The queue was dropped (or replaced) while this made its live part.
                l.remove();
                return Err(super::dir::no_queue(&path));
            }
            live
        } else {
            None
        };
        let live_made = live.as_ref().is_some_and(|l| l.made);
        // The queue file itself is mapped unless there is a live part: one
        // descriptor then serves both (a process may attach many thousands
        // of queues, each holding its descriptors open).
        let file = Arc::new(file);
        let (mapped, live, len) = match live {
            Some(l) => (Arc::new(l.file), Some(l.path), super::live::live_len(&info).unwrap_or(0)),
            None => (file.clone(), None, len),
        };
        let len = usize::try_from(len)
            .map_err(|_| Error::new(MQUE_CRTE_BIG, format!("{} is too large to map", path.display())))?;
        let map = SharedMap::map(&mapped, len, write).map_err(|e| io_error(SHM_ERR_NOMEM, "cannot map", &path, e))?;
        if access == (Access::ReadWrite { populate: true }) {
            // Not an `interval` queue's image (when the queue file itself
            // is mapped): nobody touches it through the mapping, and
            // write-populating it would dirty every page of it (its first
            // direct write would write them all back).
            let live = if options.image() {
                super::layout::image_offset(info.capacity, info.record_size, options.lease_entries())
                    .map_or(len, |o| (o as usize).min(len))
            } else {
                len
            };
            // Nor the process table's intent pages (a hole in a version 2
            // file): populating would allocate every one of them. A process
            // touches its own page only.
            let tmpfs = FsKind::of(&mapped) == FsKind::Tmpfs;
            match info.sparse_range() {
                Some((start, end)) => {
                    map.populate_range(tmpfs, 0, start as usize);
                    map.populate_range(tmpfs, end as usize, live);
                }
                None => map.populate_range(tmpfs, 0, live),
            }
        }
        // The header was validated against the file's length, so the control
        // block fits; the check stays, as the only proof the view needs.
        let control = map
            .view::<Control>(CONTROL_OFFSET as usize)
            .ok_or_else(|| Error::new(SHM_ERR_INVAL, format!("{}: no room for the control block", path.display())))?;
        let (file, mapped) = if access == Access::Detached {
            // The mapping stays when its descriptors close: what the view
            // needs of the files again (the locks), it opens again.
            let at = live.as_deref().unwrap_or(&path);
            let mapped = LockFile::closed(at, &mapped).map_err(|e| io_error(SHM_ERR_INVAL, "cannot stat", at, e))?;
            (Held::Closed { volatile: FsKind::of(&file).is_volatile() }, mapped)
        } else {
            (Held::Open(file), LockFile::Open(mapped))
        };
        Ok(QueueFile { header: info, options, path, file, mapped, live, live_made, map, control })
    }

    /// The live part in tmpfs of an `interval` queue, when it is mapped
    /// (see [`super::live`]).
    #[cfg(test)]
    pub(crate) fn live_path(&self) -> Option<&Path> {
        self.live.as_deref()
    }

    /// How many descriptors this open holds: 1 when the queue file itself
    /// is mapped, 2 with a live part, none for a detached view.
    #[cfg(test)]
    pub(crate) fn descriptors(&self) -> usize {
        match (&self.file, self.mapped.held()) {
            (Held::Open(f), Some(m)) if std::ptr::eq(&**f, m) => 1,
            (f, m) => usize::from(matches!(f, Held::Open(_))) + usize::from(m.is_some()),
        }
    }

    /// Did this open make the live part (it was missing)?
    pub(crate) fn live_made(&self) -> bool {
        self.live_made
    }

    /// Unlinks the live part (dropping the queue), unless its name now
    /// leads to another file.
    pub(crate) fn remove_live(&self) {
        if let (Some(path), Some(mapped)) = (&self.live, self.mapped.held()) {
            let _ = unlink_if_same(path, mapped);
        }
    }

    /// The validated header.
    pub(crate) fn header(&self) -> &Header {
        &self.header
    }

    /// The validated options of the header.
    pub(crate) fn options(&self) -> &Options {
        &self.options
    }

    /// The file's path.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The open queue file (on the disk for a durable queue). Errors:
    /// `SHM_ERR_ACCES` for a detached view, which holds none.
    pub(crate) fn file(&self) -> Result<&File> {
        match &self.file {
            Held::Open(f) => Ok(f),
            Held::Closed { .. } => Err(Error::new(
                SHM_ERR_ACCES,
                format!("{}: a detached view holds no descriptor of the file", self.path.display()),
            )),
        }
    }

    /// The mapping of the queue file, or of an `interval` queue's live
    /// part (everything before its image).
    pub(crate) fn map(&self) -> &SharedMap {
        &self.map
    }

    /// Is the file on tmpfs or ramfs (never durable)?
    pub(crate) fn is_volatile(&self) -> bool {
        match &self.file {
            Held::Open(f) => FsKind::of(f).is_volatile(),
            Held::Closed { volatile } => *volatile,
        }
    }

    /// The shared control block (a view that keeps the mapping alive).
    pub(crate) fn control(&self) -> &SharedRef<Control> {
        &self.control
    }

    /// The ring's storage in this mapping.
    pub(crate) fn storage(&self) -> Result<MapStorage> {
        let i = &self.header;
        MapStorage::new(
            &self.map,
            CONTROL_OFFSET as usize + std::mem::offset_of!(Control, cursors),
            DATA_OFFSET as usize,
            i.slot_stride as usize,
            i.capacity as usize,
            i.record_size as usize,
        )
        .ok_or_else(|| Error::new(SHM_ERR_INVAL, format!("{}: slots do not fit the file", self.path.display())))
    }

    /// The lease table, if the queue has leases.
    pub(crate) fn lease_table(&self) -> Result<Option<LeaseTable>> {
        let i = &self.header;
        let entries = self.options.lease_entries();
        if entries == 0 {
            return Ok(None);
        }
        let durable = self.options.durability().is_some();
        let offset = lease_table_offset(i.capacity, i.record_size, durable).and_then(|o| usize::try_from(o).ok());
        let count = usize::try_from(entries).ok();
        offset
            .zip(count)
            .and_then(|(o, n)| LeaseTable::new(&self.map, o, n, i.record_size as usize))
            .map(|t| if durable { t.sealed(crate::ring::seal::queue_key(i.id, i.created_ns)) } else { t })
            .map(Some)
            .ok_or_else(|| {
                Error::new(SHM_ERR_INVAL, format!("{}: the lease table does not fit the file", self.path.display()))
            })
    }

    /// This process's view of the file's process table (not registered yet).
    pub(crate) fn registry(&self) -> Result<Registry> {
        Registry::new(&self.map, TABLE_OFFSET as usize, self.mapped.clone(), self.header.table_layout())
            .ok_or_else(|| Error::new(SHM_ERR_INVAL, format!("{}: no room for the process table", self.path.display())))
    }
}
