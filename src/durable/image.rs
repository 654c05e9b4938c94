//! The slot image of an `interval` queue (and of an `always` queue without
//! leases, made by this version): its durable copy, at the end of its file
//! (see `file::layout::image_offset`).
//!
//! Why a copy: making the live slots durable with `msync` has the page
//! cache write back every page the ring dirtied since the last sync, and
//! cleaning a page of a shared mapping write-protects it in every process
//! that maps it (one TLB shootdown, an interrupt of the other cores, per
//! page) and makes the next store to it fault again. With a ring that
//! producers and consumers cycle through every second, that cost every
//! page every second, where a copy written with direct I/O costs almost
//! nothing (`bench/experiments/mmap_writeback.c`; the figures:
//! docs/measurements.md). So each sync of an `interval`
//! queue writes the pages of the slots published since the last one, and
//! the page of the control block that holds the consumed watermark, from
//! the mapping into the image with `O_DIRECT | O_DSYNC` writes: reading the
//! live pages for the device leaves them writable and dirty, and no page
//! of the image is ever cached or mapped. The kernel still writes the live
//! pages back on its own schedule (30 s by default), which costs nothing
//! measurable; they are never read after a machine crash.
//!
//! Recovery after a machine restart copies the image into the live slots
//! and the watermark into the control block, rebuilds from there as for
//! any durable queue, and writes the whole result back into the image.

use crate::error::*;
use crate::file::layout::{CONTROL_OFFSET, Control, DATA_OFFSET, IMAGE_MARKS_BYTES, image_offset, stride_for};
use crate::file::map::QueueFile;
use crate::shm::SharedMap;
use std::fs::File;
use std::os::unix::fs::{FileExt, OpenOptionsExt};

/// Direct I/O moves whole pages (a multiple of any device's logical block).
const PAGE: u64 = 4096;

/// File offset of the page of the control block that holds the watermark.
fn marks_page() -> u64 {
    (CONTROL_OFFSET + std::mem::offset_of!(Control, marks) as u64) / PAGE * PAGE
}

/// Where an `interval` queue's image lies, and the descriptor that writes it.
pub(crate) struct Image {
    /// The queue file again, opened with `O_DIRECT | O_DSYNC` (`O_DSYNC`
    /// alone where the filesystem has no direct I/O): every write is on
    /// stable storage when it returns, and writes only its own range.
    out: File,
    /// The same file opened with `O_DIRECT` alone, for writes made durable
    /// by an `fdatasync` after them (a sync on a ring, see `uring`: its
    /// `O_DSYNC` writes complete through the kernel's direct I/O
    /// workqueue, measured slower than a write and an `fdatasync`); `None`
    /// where the filesystem has no direct I/O.
    direct: Option<File>,
    /// File offset of the image (its marks page; the slots follow).
    offset: u64,
    /// Bytes of the slots, rounded up to a page.
    slots_len: u64,
    stride: u64,
    capacity: u64,
}

impl Image {
    /// The image of the `interval` queue in `file` (`None` if the file has none).
    pub(crate) fn open(file: &QueueFile) -> Result<Option<Image>> {
        if !file.options().image() {
            return Ok(None);
        }
        let info = file.header();
        let bad = || Error::new(SHM_ERR_INVAL, "the queue's geometry overflows its image");
        let offset = image_offset(info.capacity, info.record_size, file.options().lease_entries()).ok_or_else(bad)?;
        let stride = stride_for(info.record_size, true);
        let slots_len = (info.capacity * stride).div_ceil(PAGE) * PAGE;
        // The same file (not the same name: it may have been replaced).
        use std::os::fd::AsRawFd;
        let again = format!("/proc/self/fd/{}", file.file()?.as_raw_fd());
        let open = |flags| std::fs::OpenOptions::new().write(true).custom_flags(flags).open(&again);
        let out = open(libc::O_DIRECT | libc::O_DSYNC | libc::O_CLOEXEC)
            .or_else(|_| open(libc::O_DSYNC | libc::O_CLOEXEC))
            .map_err(|e| {
                Error::new(SHM_ERR_ACCES, format!("cannot open {} for its image: {e}", file.path().display()))
            })?;
        let direct = open(libc::O_DIRECT | libc::O_CLOEXEC).ok();
        Ok(Some(Image { out, direct, offset, slots_len, stride, capacity: info.capacity }))
    }

    /// The descriptor that writes the image for a sync on a ring, and
    /// whether its writes need an `fdatasync` after them (`O_DIRECT`
    /// alone) or are durable when they complete (`O_DSYNC`).
    pub(crate) fn ring_fd(&self) -> (std::os::fd::RawFd, bool) {
        use std::os::fd::AsRawFd;
        match &self.direct {
            Some(f) => (f.as_raw_fd(), true),
            None => (self.out.as_raw_fd(), false),
        }
    }

    /// The file offset of the watermark's page in the mapping (the last
    /// write of [`plan`](Self::plan) when it writes that page).
    pub(crate) fn marks_page(&self) -> u64 {
        marks_page()
    }

    /// Writes into the image the pages of the slots of the positions
    /// (counts) in each range `from..to` of `changed`, and the watermark's
    /// page when `marks`, from the mapping `map`. Returns once they are on
    /// stable storage.
    pub(crate) fn write(&self, map: &SharedMap, changed: &[(u64, u64)], marks: bool) -> Result<()> {
        for (at, len, to) in self.plan(changed, marks) {
            self.copy(map, at, len, to)?;
        }
        Ok(())
    }

    /// The writes of [`write`](Self::write): (file offset in the mapping,
    /// bytes, file offset in the image), whole pages, overlaps merged.
    pub(crate) fn plan(&self, changed: &[(u64, u64)], marks: bool) -> Vec<(u64, u64, u64)> {
        let (cap, stride) = (self.capacity, self.stride);
        // Byte ranges of the slots, from DATA_OFFSET.
        let mut ranges: Vec<(u64, u64)> = Vec::with_capacity(4);
        for &(from, to) in changed {
            let n = to.saturating_sub(from);
            if n >= cap {
                ranges.push((0, self.slots_len));
            } else if n > 0 {
                let (i, j) = (from % cap, to % cap);
                if i < j {
                    ranges.push((i * stride, j * stride));
                } else {
                    ranges.push((i * stride, self.slots_len));
                    if j > 0 {
                        ranges.push((0, j * stride));
                    }
                }
            }
        }
        let mut pages: Vec<(u64, u64)> = ranges
            .into_iter()
            .map(|(a, b)| (a / PAGE * PAGE, b.div_ceil(PAGE).min(self.slots_len / PAGE) * PAGE))
            .collect();
        pages.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(pages.len());
        for (a, b) in pages {
            match merged.last_mut() {
                Some(last) if a <= last.1 => last.1 = last.1.max(b),
                _ => merged.push((a, b)),
            }
        }
        let mut out: Vec<(u64, u64, u64)> =
            merged.into_iter().map(|(a, b)| (DATA_OFFSET + a, b - a, self.offset + IMAGE_MARKS_BYTES + a)).collect();
        if marks {
            out.push((marks_page(), PAGE, self.offset));
        }
        out
    }

    /// [`write`](Self::write) for a queue with leases, whose lease table
    /// `persist_table` makes durable: the pages of the slots are copied out
    /// of the mapping first (a snapshot), then the table is persisted, then
    /// the copies are written, then the watermark's page. So the slots the
    /// image receives are never newer than the table on the disk: a record
    /// whose slot a lease consumer released (after saving the record in the
    /// table) shows released in the image only if the table that holds it
    /// reached the disk first. Without the snapshot, a slot released after
    /// the table was written, or a crash between the slots' writes and the
    /// table's, would leave the record in neither.
    pub(crate) fn write_before_table(
        &self,
        map: &SharedMap,
        changed: &[(u64, u64)],
        marks: bool,
        persist_table: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        let plan = self.plan(changed, marks);
        let (slots, marks_write) = match plan.last() {
            Some(&(at, _, _)) if marks && at == marks_page() => (&plan[..plan.len() - 1], plan.last()),
            _ => (&plan[..], None),
        };
        let snapshot: Vec<Pages> =
            slots.iter().map(|&(at, len, _)| Pages::copy(map, at, len)).collect::<Result<_>>()?;
        persist_table()?;
        for (pages, &(_, _, to)) in snapshot.iter().zip(slots) {
            self.write_at(pages.bytes(), to)?;
        }
        if let Some(&(at, len, to)) = marks_write {
            self.copy(map, at, len, to)?;
        }
        Ok(())
    }

    /// Writes every slot and the watermark's page (after a rebuild).
    pub(crate) fn write_all(&self, map: &SharedMap) -> Result<()> {
        self.write(map, &[(0, self.capacity)], true)
    }

    /// `len` bytes of the mapping at file offset `at` into the file at `to`.
    fn copy(&self, map: &SharedMap, at: u64, len: u64, to: u64) -> Result<()> {
        if at.checked_add(len).is_none_or(|end| end > map.len() as u64) {
            return Err(Error::new(SHM_ERR_INVAL, "image write beyond the mapping"));
        }
        // SAFETY: at..at+len lies inside the live mapping (checked above),
        // which `map` keeps mapped for the call. Other threads and
        // processes may store into these bytes while the device reads them:
        // the pointer goes to the kernel only (no Rust reference is made to
        // bytes others write), and what reaches the disk is judged by each
        // slot's checksum at recovery.
        unsafe { self.pwrite_all(map.base().add(at as usize), len, to) }
    }

    /// `bytes` (whole pages, page aligned) into the file at `to`.
    fn write_at(&self, bytes: &[u8], to: u64) -> Result<()> {
        // SAFETY: `bytes` is ours, alive and unchanged for the call.
        unsafe { self.pwrite_all(bytes.as_ptr(), bytes.len() as u64, to) }
    }

    /// Writes `len` bytes from `src` into the file at `to`.
    ///
    /// # Safety
    /// `src..src+len` must stay readable (mapped) for the call.
    unsafe fn pwrite_all(&self, src: *const u8, len: u64, to: u64) -> Result<()> {
        use std::os::fd::AsRawFd;
        let mut done = 0u64;
        while done < len {
            // SAFETY: src+done..src+len is readable (the caller's promise);
            // the kernel only reads it.
            let n = unsafe {
                libc::pwrite(
                    self.out.as_raw_fd(),
                    src.add(done as usize).cast(),
                    (len - done) as usize,
                    (to + done) as libc::off_t,
                )
            };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(Error::new(SYNC_FAILED, format!("cannot write the queue's image: {e}")));
            }
            if n == 0 {
                return Err(Error::new(SYNC_FAILED, "cannot write the queue's image: the write made no progress"));
            }
            done += n as u64;
        }
        Ok(())
    }

    /// (Recovery, alone: nobody else uses the queue.) Copies the image of
    /// the queue in `file` into its live slots and its watermark into the
    /// control block, through the mapping `map`.
    pub(crate) fn restore(&self, file: &QueueFile, map: &SharedMap) -> Result<()> {
        let slots = self.capacity * self.stride;
        let read = |at: u64, len: u64| -> Result<Vec<u8>> {
            let mut v = vec![0u8; len as usize];
            file.file()?
                .read_exact_at(&mut v, at)
                .map_err(|e| Error::new(SHM_ERR_INVAL, format!("cannot read the queue's image: {e}")))?;
            Ok(v)
        };
        let marks_at = CONTROL_OFFSET + std::mem::offset_of!(Control, marks) as u64;
        let marks_len = std::mem::size_of::<[crate::file::layout::Mark; 2]>();
        let page = read(self.offset, IMAGE_MARKS_BYTES)?;
        let in_page = (marks_at - marks_page()) as usize;
        let marks = &page[in_page..in_page + marks_len];
        // The last recovery's findings, in the same page (a live part made
        // again after a reboot starts from zeros: `runs` keeps counting).
        let recovery_at = CONTROL_OFFSET + std::mem::offset_of!(Control, recovery) as u64;
        let recovery_len = std::mem::size_of::<crate::ring::CachePadded<crate::file::layout::RecoveryWords>>();
        let in_page_r = (recovery_at - marks_page()) as usize;
        let recovery = page.get(in_page_r..in_page_r + recovery_len).unwrap_or(&[]);
        let slots_image = read(self.offset + IMAGE_MARKS_BYTES, slots)?;
        if DATA_OFFSET + slots > map.len() as u64 {
            return Err(Error::new(SHM_ERR_INVAL, "image beyond the mapping"));
        }
        // SAFETY: both ranges lie inside the live mapping (DATA_OFFSET + slots
        // checked above; the marks inside the control block), and recovery
        // runs alone, under the recovery lock, before anyone uses the queue.
        unsafe {
            std::ptr::copy_nonoverlapping(slots_image.as_ptr(), map.base().add(DATA_OFFSET as usize), slots as usize);
            std::ptr::copy_nonoverlapping(marks.as_ptr(), map.base().add(marks_at as usize), marks.len());
            std::ptr::copy_nonoverlapping(recovery.as_ptr(), map.base().add(recovery_at as usize), recovery.len());
        }
        Ok(())
    }
}

/// (`interval` queues with leases.) The lease table's bytes in the
/// mapping: (offset, length).
pub(crate) fn lease_table_range(file: &QueueFile) -> Result<Option<(usize, usize)>> {
    let info = file.header();
    let entries = file.options().lease_entries();
    if entries == 0 {
        return Ok(None);
    }
    let at = crate::file::layout::lease_table_offset(info.capacity, info.record_size, true);
    let n = crate::lease::table::table_bytes(entries, info.record_size);
    match at.zip(n).and_then(|(a, n)| Some((usize::try_from(a).ok()?, usize::try_from(n).ok()?))) {
        Some((a, n)) if a.checked_add(n).is_some_and(|end| end <= file.map().len()) => Ok(Some((a, n))),
        _ => {
            Err(Error::new(SHM_ERR_INVAL, format!("{}: the lease table does not fit the file", file.path().display())))
        }
    }
}

/// A page of a snapshot: aligned as direct I/O needs its buffers.
#[repr(C, align(4096))]
#[derive(Clone, Copy)]
struct Page([u8; PAGE as usize]);

/// Whole pages copied out of the mapping (see [`Image::write_before_table`]).
struct Pages(Vec<Page>);

impl Pages {
    /// Copies `len` bytes (whole pages) of the mapping from file offset `at`,
    /// with volatile reads: other threads and processes store into them
    /// meanwhile, as they do while the device reads the live pages (what
    /// the copy holds is judged by each slot's checksum at recovery).
    fn copy(map: &SharedMap, at: u64, len: u64) -> Result<Pages> {
        if at.checked_add(len).is_none_or(|end| end > map.len() as u64) || at % 8 != 0 || len % PAGE != 0 {
            return Err(Error::new(SHM_ERR_INVAL, "image snapshot beyond the mapping"));
        }
        let mut pages = vec![Page([0; PAGE as usize]); (len / PAGE) as usize];
        // SAFETY: at..at+len lies inside the mapping (checked above), which
        // `map` keeps mapped, and `at` is 8-byte aligned (the mapping is
        // page aligned).
        let src = unsafe { map.base().add(at as usize) };
        for (k, page) in pages.iter_mut().enumerate() {
            for (i, d) in page.0.chunks_exact_mut(8).enumerate() {
                // SAFETY: k * PAGE + i * 8 + 8 <= len, inside the mapping,
                // 8-byte aligned; any value is valid, and a volatile read of
                // memory others may be writing is how a snapshot is taken.
                let w = unsafe { std::ptr::read_volatile(src.add(k * PAGE as usize + i * 8).cast::<u64>()) };
                d.copy_from_slice(&w.to_ne_bytes());
            }
        }
        Ok(Pages(pages))
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: `Page` is `repr(C)` around a byte array with no padding
        // (its size is its alignment), so the vector's pages are contiguous bytes.
        unsafe { std::slice::from_raw_parts(self.0.as_ptr().cast::<u8>(), self.0.len() * PAGE as usize) }
    }
}
