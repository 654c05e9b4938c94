//! Where a ring's cursors and slots live: the [`Storage`] trait and its two
//! storages, [`HeapStorage`] (this process's heap: tests, model checking,
//! benchmarks) and [`MapStorage`] (a region of a shared mapping: queue files).
//!
//! The ring knows nothing else about memory: a storage hands out the
//! cursors, each slot's header, and copies record bytes in and out of a slot.

use crate::atomics::{AtomicU32, AtomicU64};

/// Pads and aligns a value to 128 bytes (two cache lines, which the adjacent
/// line prefetcher pairs) so that producers and consumers do not share a line.
#[repr(C, align(128))]
#[derive(Default)]
pub(crate) struct CachePadded<T>(pub T);

/// The two positions. Invariant: `head <= tail <= head + capacity`, counted in
/// records (positions are `lap + index` and compare through [`Ring::count`](super::Ring::count)).
#[repr(C)]
#[derive(Default)]
pub(crate) struct Cursors {
    /// The producers' line: `tail`, and beside it the rarely written
    /// `stranded`.
    pub(crate) tail: CachePadded<TailWords>,
    /// Next position a consumer will claim. Moves only by CAS, past a slot
    /// whose record is published.
    pub(crate) head: CachePadded<AtomicU64>,
}

/// The words of the producers' cache line.
#[repr(C)]
#[derive(Default)]
pub(crate) struct TailWords {
    /// Next position a producer will claim. Moves only by CAS, by the
    /// producer that owns the position it moves past (or by a consumer
    /// passing positions on the way to a stranded record, see below).
    pub(crate) pos: AtomicU64,
    /// One more than the count (see `Ring::count`) of the furthest record a
    /// recovery published again one lap later (0: none yet). Such a record
    /// may lie beyond `pos`, where no consumer looks: a consumer that finds
    /// the ring empty while this is above the tail moves the tail to it
    /// (`Ring::reach_stranded`). Only grows (`fetch_max`), except that the
    /// rebuild of a durable ring clears it; a value more than a lap past the
    /// head cannot be one and is ignored (a corrupted file). Beside `pos` because the
    /// consumers that read it, finding the ring empty, have just read `pos`.
    pub(crate) stranded: AtomicU64,
}

/// The fixed 16-byte header of each slot; `record_size` data bytes follow.
#[repr(C)]
#[derive(Default)]
pub(crate) struct SlotHeader {
    /// `lap` (free for that lap's producer) or `lap | PUBLISHED` (holds that
    /// lap's record), plus [`SKIP`](super::SKIP) on an empty record. Only ever moves
    /// forward, and only by CAS after the slot has been claimed.
    pub(crate) seq: AtomicU64,
    /// Durable queues: the record's checksum (see `ring::seal`), written
    /// by the producer before publishing. Zero and unused elsewhere.
    pub(crate) check: AtomicU32,
    /// Length of the published record, 1..=record_size. Written by the
    /// producer before publishing; validated by the consumer before use.
    pub(crate) len: AtomicU32,
}

/// Where the cursors and slots live.
///
/// # Safety
/// `slot(i)` must be valid for every `i < capacity`, and `write`/`read` must
/// stay inside slot `i`'s `record_size` data bytes. Nothing else is required:
/// the ring never trusts values read from the storage without checking them.
pub(crate) unsafe trait Storage {
    fn cursors(&self) -> &Cursors;
    fn slot(&self, index: usize) -> &SlotHeader;
    /// Copies `src` into slot `index`'s data, `offset` bytes from its start.
    ///
    /// # Safety
    /// The caller holds slot `index` (has claimed it and not yet published),
    /// and `offset + src.len() <= record_size`.
    unsafe fn write(&self, index: usize, offset: usize, src: &[u8]);
    /// [`write`](Self::write) of the start of slot `index`'s data that
    /// shares a cache line with its header: a copy of constant length,
    /// which a storage may make with a few moves.
    ///
    /// # Safety
    /// As `write`, with `offset` 0.
    #[inline]
    unsafe fn write_first_line(&self, index: usize, src: &[u8; FIRST_LINE_DATA]) {
        // SAFETY: the caller's contract.
        unsafe { self.write(index, 0, src) }
    }
    /// Copies the start of slot `index`'s data into `dst`.
    ///
    /// # Safety
    /// The caller holds slot `index` (has claimed it and not yet released).
    unsafe fn read(&self, index: usize, dst: &mut [u8]);
    /// Hints that slot `index` will soon be written or read (a cache
    /// prefetch; no effect on what anyone sees).
    #[inline]
    fn prefetch(&self, _index: usize) {}
}

// SAFETY: integers and atomics only; any bits are a value (see each type).
#[cfg(not(loom))]
unsafe impl<T: crate::shm::ShmSafe> crate::shm::ShmSafe for CachePadded<T> {}
// SAFETY: padded atomics.
#[cfg(not(loom))]
unsafe impl crate::shm::ShmSafe for Cursors {}
// SAFETY: atomics.
#[cfg(not(loom))]
unsafe impl crate::shm::ShmSafe for TailWords {}
// The file layout: the stranded word lives in the tail line's padding (zero
// in files written before it existed: "none").
#[cfg(not(loom))]
const _: () = assert!(size_of::<Cursors>() == 256 && std::mem::offset_of!(Cursors, head) == 128);
// SAFETY: atomics and a plain u32; any bits are a value (the ring validates them).
#[cfg(not(loom))]
unsafe impl crate::shm::ShmSafe for SlotHeader {}

/// Bytes of the header before each slot's record.
pub(crate) const SLOT_HEADER_BYTES: usize = size_of::<SlotHeader>();
#[cfg(not(loom))]
const _: () = assert!(SLOT_HEADER_BYTES == 16);

/// Record bytes that share a cache line with the slot header.
pub(crate) const FIRST_LINE_DATA: usize = 64 - SLOT_HEADER_BYTES;

/// A ring in this process's heap: for tests, model checking and benchmarks.
pub(crate) struct HeapStorage {
    cursors: Cursors,
    slots: Box<[SlotHeader]>,
    data: Box<[Cell]>,
    record_size: usize,
}

#[cfg(not(loom))]
struct Cell(std::cell::UnsafeCell<Box<[u8]>>);
#[cfg(loom)]
struct Cell(loom::cell::UnsafeCell<Box<[u8]>>);

impl HeapStorage {
    /// Zeroed cursors and slots for `capacity` records of `record_size` bytes.
    pub(crate) fn new(capacity: usize, record_size: usize) -> HeapStorage {
        HeapStorage {
            cursors: Cursors::default(),
            slots: (0..capacity).map(|_| SlotHeader::default()).collect(),
            data: (0..capacity).map(|_| Cell(vec![0u8; record_size].into_boxed_slice().into())).collect(),
            record_size,
        }
    }
}

// SAFETY: the slot data is only touched by the thread that holds the slot,
// which the ring's protocol makes exclusive; everything else is atomic.
unsafe impl Sync for HeapStorage {}
// SAFETY: as above; nothing in it is tied to a thread.
unsafe impl Send for HeapStorage {}

// SAFETY: `slot` indexes a boxed slice (panics out of range, never reads
// outside), and `write`/`read` copy at most `record_size` bytes of that slot.
unsafe impl Storage for HeapStorage {
    fn cursors(&self) -> &Cursors {
        &self.cursors
    }

    fn slot(&self, index: usize) -> &SlotHeader {
        &self.slots[index]
    }

    unsafe fn write(&self, index: usize, offset: usize, src: &[u8]) {
        let range = offset..offset + src.len();
        #[cfg(not(loom))]
        // SAFETY: the caller holds the slot, so no other reference to its data
        // exists; slicing panics rather than going out of bounds.
        unsafe {
            (&mut (*self.data[index].0.get()))[range].copy_from_slice(src)
        };
        #[cfg(loom)]
        // SAFETY: as above; loom checks the claim.
        self.data[index].0.with_mut(|d| unsafe { (&mut (*d))[range].copy_from_slice(src) });
    }

    unsafe fn read(&self, index: usize, dst: &mut [u8]) {
        let n = dst.len().min(self.record_size);
        #[cfg(not(loom))]
        // SAFETY: the caller holds the slot, so nobody writes its data meanwhile.
        unsafe {
            dst[..n].copy_from_slice(&(&(*self.data[index].0.get()))[..n])
        };
        #[cfg(loom)]
        // SAFETY: as above; loom checks the claim.
        self.data[index].0.with(|d| unsafe { dst[..n].copy_from_slice(&(&(*d))[..n]) });
    }
}

/// The slots of a ring in a region of a shared mapping (a queue file),
/// which it keeps mapped.
#[cfg(not(loom))]
pub(crate) struct MapStorage {
    cursors: crate::shm::SharedRef<Cursors>,
    /// Slot 0; `capacity * stride` bytes from here lie in the mapping that
    /// `cursors` keeps alive (checked by `new`).
    slots: *mut u8,
    stride: usize,
    capacity: usize,
    record_size: usize,
}

#[cfg(not(loom))]
impl MapStorage {
    /// The cursors at `cursors` and `capacity` slots of `stride` bytes from
    /// `slots` (offsets in `map`), each a [`SlotHeader`] and `record_size`
    /// data bytes. `None` if any of it lies outside the mapping or is
    /// misaligned, or a slot cannot hold its header and record.
    pub(crate) fn new(
        map: &crate::shm::SharedMap,
        cursors: usize,
        slots: usize,
        stride: usize,
        capacity: usize,
        record_size: usize,
    ) -> Option<MapStorage> {
        let cursors = map.view::<Cursors>(cursors)?;
        let slot_bytes = SLOT_HEADER_BYTES.checked_add(record_size)?;
        if stride < slot_bytes || stride % align_of::<SlotHeader>() != 0 || capacity == 0 {
            return None;
        }
        if !map.fits(slots, capacity.checked_mul(stride)?, align_of::<SlotHeader>()) {
            return None;
        }
        // SAFETY: `slots` is inside the mapping (checked just above).
        let slots = unsafe { map.base().add(slots) };
        Some(MapStorage { cursors, slots, stride, capacity, record_size })
    }
}

#[cfg(not(loom))]
impl MapStorage {
    /// Copies the start of slot `index`'s data into `dst` without holding the
    /// slot, for inspection: the bytes may be changing while they are copied
    /// (by their producer, or a producer of a later lap), so the copy is made
    /// with volatile reads and the caller must validate it (by the slot's
    /// `seq` before and after) and accept a torn copy as a possibility.
    ///
    /// # Panics
    /// If `index >= capacity` or `dst` is longer than the record size.
    pub(crate) fn snapshot(&self, index: usize, dst: &mut [u8]) {
        assert!(index < self.capacity && dst.len() <= self.record_size, "snapshot out of range");
        // SAFETY: in bounds as in `slot` (checked just above).
        let src = unsafe { self.slots.add(index * self.stride + SLOT_HEADER_BYTES) };
        // Eight bytes at a time where the data is 8-byte aligned (it is: the
        // stride and the header are multiples of 8), then byte by byte.
        let words = if src.align_offset(8) == 0 { dst.len() / 8 } else { 0 };
        let (whole, rest) = dst.split_at_mut(words * 8);
        for (i, d) in whole.chunks_exact_mut(8).enumerate() {
            // SAFETY: i * 8 + 8 <= dst.len() <= record_size, inside slot
            // `index`, and 8-byte aligned; any value is valid, and a volatile
            // read of shared memory that another process may be writing is
            // how a snapshot is taken.
            let w = unsafe { std::ptr::read_volatile(src.add(i * 8).cast::<u64>()) };
            d.copy_from_slice(&w.to_ne_bytes());
        }
        for (i, d) in rest.iter_mut().enumerate() {
            // SAFETY: as above, byte by byte: words * 8 + i < dst.len().
            *d = unsafe { std::ptr::read_volatile(src.add(words * 8 + i)) };
        }
    }
}

// SAFETY: the pointers lead into a shared mapping that `cursors` keeps
// alive; every shared word is an atomic, and record bytes are only touched
// by the holder of their slot (the ring's protocol).
#[cfg(not(loom))]
unsafe impl Send for MapStorage {}
// SAFETY: as above.
#[cfg(not(loom))]
unsafe impl Sync for MapStorage {}

// SAFETY: `slot(i)` for i < capacity lies inside the mapping (`new` checked
// capacity * stride bytes from `slots`), and `write`/`read` copy at most
// `record_size` bytes after the slot header, which `stride` has room for.
#[cfg(not(loom))]
unsafe impl Storage for MapStorage {
    #[inline]
    fn cursors(&self) -> &Cursors {
        &self.cursors
    }

    #[inline]
    fn prefetch(&self, index: usize) {
        if index >= self.capacity {
            return;
        }
        #[cfg(target_arch = "x86_64")]
        {
            let mut line = self.slots.wrapping_add(index * self.stride);
            let end = line.wrapping_add(self.stride.min(SLOT_HEADER_BYTES + self.record_size));
            loop {
                // SAFETY: a prefetch never faults; the address lies in slot `index`.
                unsafe { std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(line.cast()) };
                line = line.wrapping_add(64);
                if line >= end {
                    break;
                }
            }
        }
    }

    #[inline]
    fn slot(&self, index: usize) -> &SlotHeader {
        assert!(index < self.capacity, "slot index out of range");
        // SAFETY: index < capacity, so the header lies in the mapping; the
        // stride is a multiple of the header's alignment (checked by `new`).
        unsafe { &*self.slots.add(index * self.stride).cast::<SlotHeader>() }
    }

    #[inline]
    unsafe fn write(&self, index: usize, offset: usize, src: &[u8]) {
        debug_assert!(index < self.capacity && offset + src.len() <= self.record_size);
        // SAFETY: in bounds as in `slot`, given the caller's contract
        // (index < capacity, offset + src.len() <= record_size); the caller
        // holds the slot, so nobody else writes these bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(
                src.as_ptr(),
                self.slots.add(index * self.stride + SLOT_HEADER_BYTES + offset),
                src.len(),
            )
        };
    }

    /// Three 16-byte moves (with a call of memcpy, which the compiler
    /// otherwise shares with the other copies, it cost 10 instructions more).
    #[cfg(target_arch = "x86_64")]
    #[inline]
    unsafe fn write_first_line(&self, index: usize, src: &[u8; FIRST_LINE_DATA]) {
        const _: () = assert!(FIRST_LINE_DATA == 48, "three moves of 16 bytes");
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_storeu_si128};
        debug_assert!(index < self.capacity && src.len() <= self.record_size);
        // SAFETY: in bounds as in `slot`, given the caller's contract (48
        // bytes from the start of the data of slot `index`, which the
        // caller holds); unaligned loads and stores of 16 bytes (SSE2, part
        // of x86_64) inside `src` and inside the slot.
        unsafe {
            let dst = self.slots.add(index * self.stride + SLOT_HEADER_BYTES).cast::<__m128i>();
            let src = src.as_ptr().cast::<__m128i>();
            _mm_storeu_si128(dst, _mm_loadu_si128(src));
            _mm_storeu_si128(dst.add(1), _mm_loadu_si128(src.add(1)));
            _mm_storeu_si128(dst.add(2), _mm_loadu_si128(src.add(2)));
        }
    }

    /// A record of 48 bytes or more: its first 48 bytes by three 16-byte
    /// moves, the rest by memcpy (one memcpy of 304 bytes took 64
    /// instructions, of 256 about 30: the 48 cost the larger size's path).
    #[inline]
    unsafe fn read(&self, index: usize, dst: &mut [u8]) {
        debug_assert!(index < self.capacity && dst.len() <= self.record_size);
        // SAFETY: in bounds as in `slot`, given the caller's contract
        // (dst.len() <= record_size); the caller holds the slot.
        let src = unsafe { self.slots.add(index * self.stride + SLOT_HEADER_BYTES) };
        #[cfg(target_arch = "x86_64")]
        if dst.len() >= 48 {
            use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_storeu_si128};
            // SAFETY: as above: 48 bytes and the rest of `dst.len()`, inside
            // the slot's data and inside `dst`; unaligned 16-byte loads and
            // stores (SSE2, part of x86_64).
            unsafe {
                let (s, d) = (src.cast::<__m128i>(), dst.as_mut_ptr().cast::<__m128i>());
                _mm_storeu_si128(d, _mm_loadu_si128(s));
                _mm_storeu_si128(d.add(1), _mm_loadu_si128(s.add(1)));
                _mm_storeu_si128(d.add(2), _mm_loadu_si128(s.add(2)));
                std::ptr::copy_nonoverlapping(src.add(48), dst.as_mut_ptr().add(48), dst.len() - 48);
            }
            return;
        }
        // SAFETY: as above.
        unsafe { std::ptr::copy_nonoverlapping(src, dst.as_mut_ptr(), dst.len()) };
    }
}
