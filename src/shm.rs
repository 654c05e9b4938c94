//! A shared mapping of a queue file, and typed views into it that keep it
//! mapped.
//!
//! Every view ([`SharedRef`], and the ring's map storage) holds a clone of
//! the [`SharedMap`] it was made from, so no safe code can reach memory that
//! has been unmapped: the mapping goes away with the last view. Views are
//! checked (bounds and alignment) when they are made; reading through them
//! costs nothing more than a reference.
//!
//! Only types marked [`ShmSafe`] can be viewed: types that are valid for any
//! bit pattern and that are only changed through atomics, because another
//! process can write any bytes at any time.

use memmap2::MmapRaw;
use std::fs::File;
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64};

/// Types that may live in memory shared with other processes and be viewed
/// through a shared reference.
///
/// # Safety
/// Every bit pattern is a valid value of the type, it has no padding whose
/// reading matters, and it has no interior mutability other than atomics (so
/// that concurrent changes by other threads or processes are not data races).
pub(crate) unsafe trait ShmSafe: Sync {}

// SAFETY: atomics of plain integers: any bits are a value, changes are atomic.
unsafe impl ShmSafe for AtomicU32 {}
// SAFETY: as above.
unsafe impl ShmSafe for AtomicU64 {}
// SAFETY: an array of ShmSafe values is ShmSafe (same properties, element-wise).
unsafe impl<T: ShmSafe, const N: usize> ShmSafe for [T; N] {}

/// A memory mapping of a whole file, shared by every view made from it.
#[derive(Clone)]
pub(crate) struct SharedMap(Arc<MmapRaw>);

impl SharedMap {
    /// Maps `len` bytes of `file`, read-write or read-only, shared with every
    /// other process that maps it.
    pub(crate) fn map(file: &File, len: usize, writable: bool) -> std::io::Result<SharedMap> {
        let mut opts = memmap2::MmapOptions::new();
        opts.len(len);
        let raw = if writable { opts.map_raw(file)? } else { opts.map_raw_read_only(file)? };
        Ok(SharedMap(Arc::new(raw)))
    }

    /// Length of the mapping in bytes.
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    /// The first byte of the mapping (page aligned). Valid for `len()` bytes
    /// while any clone of this `SharedMap` lives.
    pub(crate) fn base(&self) -> *mut u8 {
        self.0.as_mut_ptr()
    }

    /// Writes bytes `from..from + n` of the mapping (cut at its end) to the
    /// file and waits until the device has them (`msync(MS_SYNC)`, whose
    /// cache flush covers the file's other written pages too).
    pub(crate) fn sync_range(&self, from: usize, n: usize) -> std::io::Result<()> {
        let n = n.min(self.len().saturating_sub(from));
        if n == 0 {
            return Ok(());
        }
        self.0.flush_range(from, n)
    }

    /// Is `size` bytes at `offset`, aligned to `align`, inside the mapping?
    pub(crate) fn fits(&self, offset: usize, size: usize, align: usize) -> bool {
        offset.checked_add(size).is_some_and(|end| end <= self.len()) && offset % align == 0
    }

    /// A view of the `T` at `offset`, or `None` if it does not fit in the
    /// mapping or is misaligned (the mapping itself is page aligned).
    pub(crate) fn view<T: ShmSafe>(&self, offset: usize) -> Option<SharedRef<T>> {
        if !self.fits(offset, size_of::<T>(), align_of::<T>()) {
            return None;
        }
        // SAFETY: offset + size_of::<T>() <= len (checked), so the pointer is
        // inside the mapping and not null.
        let ptr = unsafe { NonNull::new_unchecked(self.base().add(offset)) }.cast::<T>();
        Some(SharedRef { map: self.clone(), ptr })
    }

    /// Maps the pages of bytes `from..to` (page aligned, at most the
    /// mapping's) into this process now, so that later accesses do not page-fault. On tmpfs
    /// a read-populate maps the pages writable (and costs half of a
    /// write-populate); elsewhere pages must be
    /// write-populated to be writable without faults. Kernels without
    /// `MADV_POPULATE_*` (before 5.14) get one read per page, which the
    /// kernel's fault-around turns into one fault per 16 pages.
    pub(crate) fn populate_range(&self, tmpfs: bool, from: usize, to: usize) {
        const MADV_POPULATE_READ: libc::c_int = 22;
        const MADV_POPULATE_WRITE: libc::c_int = 23;
        let advice = if tmpfs { MADV_POPULATE_READ } else { MADV_POPULATE_WRITE };
        let to = to.min(self.len());
        if from % 4096 != 0 || from >= to {
            return;
        }
        // SAFETY: from < to <= len: inside the mapping.
        let (ptr, len) = (unsafe { self.base().add(from) }, to - from);
        // SAFETY: ptr..ptr+len is this live mapping; populating only faults pages in.
        if unsafe { libc::madvise(ptr.cast(), len, advice) } == 0 {
            return;
        }
        for off in (0..len).step_by(4096) {
            // SAFETY: off < len, inside the mapping; a volatile read has no effect but the fault.
            unsafe { std::ptr::read_volatile(ptr.add(off)) };
        }
    }
}

/// A `&T` into a [`SharedMap`] that keeps the mapping alive.
pub(crate) struct SharedRef<T> {
    map: SharedMap,
    ptr: NonNull<T>,
}

impl<T: ShmSafe> std::ops::Deref for SharedRef<T> {
    type Target = T;

    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: `ptr` was checked in bounds and aligned when the view was
        // made, `self.map` keeps the mapping alive, and any bytes are a valid
        // `T` that is only changed through atomics (`ShmSafe`).
        unsafe { self.ptr.as_ref() }
    }
}

impl<T> Clone for SharedRef<T> {
    fn clone(&self) -> Self {
        SharedRef { map: self.map.clone(), ptr: self.ptr }
    }
}

// SAFETY: a SharedRef is a shared reference to a `ShmSafe` (hence `Sync`)
// value plus an `Arc` of the mapping: sending it or sharing it between
// threads is sending or sharing `&T`, which `T: Sync` allows.
unsafe impl<T: ShmSafe> Send for SharedRef<T> {}
// SAFETY: as above.
unsafe impl<T: ShmSafe> Sync for SharedRef<T> {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn mapped(len: usize) -> SharedMap {
        let path = std::env::temp_dir().join(format!("tvmq-shm-test-{}-{len}", std::process::id()));
        let mut f = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&path).unwrap();
        f.write_all(&vec![0u8; len]).unwrap();
        let m = SharedMap::map(&f, len, true).unwrap();
        std::fs::remove_file(&path).unwrap();
        m
    }

    #[test]
    fn views_are_checked_for_bounds_and_alignment() {
        let m = mapped(4096);
        assert!(m.view::<AtomicU64>(0).is_some());
        assert!(m.view::<AtomicU64>(4088).is_some());
        assert!(m.view::<AtomicU64>(4089).is_none(), "crosses the end");
        assert!(m.view::<AtomicU64>(4096).is_none(), "past the end");
        assert!(m.view::<AtomicU64>(4).is_none(), "misaligned");
        assert!(m.view::<AtomicU64>(usize::MAX - 3).is_none(), "overflowing offset");
        assert!(m.view::<[AtomicU64; 512]>(0).is_some());
        assert!(m.view::<[AtomicU64; 513]>(0).is_none());
    }

    #[test]
    fn a_sync_is_cut_at_the_end_of_the_mapping() {
        let m = mapped(8192);
        m.view::<AtomicU64>(4096).unwrap().store(7, std::sync::atomic::Ordering::Relaxed);
        m.sync_range(4096, 4096).unwrap();
        m.sync_range(4096, usize::MAX).unwrap();
        m.sync_range(8192, 1).unwrap();
        m.sync_range(usize::MAX, 1).unwrap();
        m.sync_range(100, 10).unwrap(); // within a page: the page is synced
    }

    #[test]
    fn a_view_keeps_the_mapping_alive() {
        let m = mapped(4096);
        let v = m.view::<AtomicU64>(8).unwrap();
        drop(m);
        // The map is gone from here, but the view still holds it.
        v.store(42, std::sync::atomic::Ordering::Relaxed);
        assert_eq!(v.load(std::sync::atomic::Ordering::Relaxed), 42);
        assert_eq!(Arc::strong_count(&v.map.0), 1);
    }
}
