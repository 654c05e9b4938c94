//! The per-queue settings after the header ([`Options`], at
//! [`OPTIONS_OFFSET`]): spin time, durability policy, lease settings, and
//! whether the file ends with an image; and so the size of the file a
//! [`Spec`] needs.

use super::fnv::fnv1a;
use super::geometry::file_size_for;
use super::header::Header;
use super::offsets::HEADER_BYTES;
use crate::error::*;
use crate::spec::{Durability, MAX_INTERVAL_MS, MAX_LEASE_MS, MAX_LEASES, Spec};
use std::mem::offset_of;

const _: () = assert!(size_of::<Header>() as u64 + size_of::<Options>() as u64 <= HEADER_BYTES);

/// File offset of [`Options`], right after [`Header`].
pub(crate) const OPTIONS_OFFSET: usize = size_of::<Header>();
const _: () = assert!(OPTIONS_OFFSET % 8 == 0);

/// [`Options::flags`] bit: `spin_us` is set.
pub(crate) const OPT_SPIN: u64 = 1;
/// [`Options::flags`] bit: the queue is durable ([`Options::durable`] holds its policy).
pub(crate) const OPT_DURABLE: u64 = 2;

/// [`DurableOptions::policy`]: every push and pop returns once it is on stable storage.
pub(crate) const POLICY_ALWAYS: u64 = 1;
/// [`DurableOptions::policy`]: a flusher syncs at most `interval_ms` after a change.
pub(crate) const POLICY_INTERVAL: u64 = 2;

/// The durability policy of a queue, in [`Options::durable`] (64 bytes,
/// fixed by the layout of [`Options`]). All zero: not durable.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct DurableOptions {
    /// [`POLICY_ALWAYS`] or [`POLICY_INTERVAL`] (0 when not durable).
    pub(crate) policy: u64,
    /// For [`POLICY_INTERVAL`]: the longest time, in milliseconds, between a
    /// change and the sync that makes it durable (1..=[`MAX_INTERVAL_MS`]);
    /// 0 otherwise.
    pub(crate) interval_ms: u64,
    /// Zero; room for later durability settings.
    pub(crate) reserved: [u64; 6],
}
const _: () = assert!(size_of::<DurableOptions>() == 64);

/// [`Options::flags`] bit: the queue has leases ([`LeaseOptions`] is set,
/// and the file ends with a lease table). Bit 2 is left to durable queues.
pub(crate) const OPT_LEASES: u64 = 4;

/// [`Options::flags`] bit: the file ends with an image of the slots (the
/// durable copy of an `interval` queue, or of an `always` queue without
/// leases made by this version, written by its syncs with direct I/O: see
/// [`image_offset`] and `crate::durable`).
pub(crate) const OPT_IMAGE: u64 = 8;

/// The settings of acknowledged consumption, in [`Options::leases`] (all
/// zero without [`OPT_LEASES`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct LeaseOptions {
    /// Lease time of `lPopLease(..., 0, ...)`, in milliseconds, >= 1.
    pub(crate) lease_ms: u64,
    /// Deliveries after which a record that is not acknowledged goes to the
    /// dead-letter queue (0: no limit), at most [`crate::lease::state::MAX_DELIVERIES`].
    pub(crate) max_deliveries: u64,
    /// Entries of the lease table: leases in flight at most, 1..=[`MAX_LEASES`].
    pub(crate) max_leases: u64,
    /// The dead-letter queue's id, when `has_dead_letter` is 1.
    pub(crate) dead_letter: u32,
    /// 1: rejected records (and those past the delivery limit) go to queue
    /// `dead_letter`; 0: they are dropped (counted).
    pub(crate) has_dead_letter: u32,
    /// Zero; reserved.
    pub(crate) reserved: [u64; 4],
}
const _: () = assert!(size_of::<LeaseOptions>() == 64);

/// Per-queue settings added after layout version 1, in the header's unused
/// bytes after [`Header`]. A file made before them holds zeros there, which
/// mean "as before" (and an all-zero block needs no checksum), so such files
/// open unchanged; a block that is not all zero must match its checksum.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Options {
    /// Which of the settings below are set ([`OPT_SPIN`]).
    pub(crate) flags: u64,
    /// Blocking pops spin this many microseconds before they sleep; -1: they
    /// never sleep.
    pub(crate) spin_us: i64,
    /// The durability policy, set with [`OPT_DURABLE`] (all zero without it).
    pub(crate) durable: DurableOptions,
    /// The settings of acknowledged consumption ([`OPT_LEASES`]).
    pub(crate) leases: LeaseOptions,
    /// Zero; room for later settings.
    pub(crate) reserved: [u64; 13],
    /// FNV-1a 64 of the bytes above, or 0 when they are all zero.
    pub(crate) checksum: u64,
}

#[cfg(test)]
thread_local! {
    /// Tests: an `always` queue created by this thread has no image, as
    /// the files of earlier versions (synced with `msync` in place).
    pub(crate) static LEGACY_ALWAYS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Does this thread make `always` queues without an image (tests only)?
#[cfg(test)]
fn legacy_always() -> bool {
    LEGACY_ALWAYS.with(std::cell::Cell::get)
}

#[cfg(not(test))]
fn legacy_always() -> bool {
    false
}

impl Options {
    /// The options of a new queue.
    pub(crate) fn new(spec: &Spec) -> Options {
        let mut o = Options::default();
        if let Some(us) = spec.spin_us {
            o.flags |= OPT_SPIN;
            o.spin_us = us;
        }
        if let Some(d) = spec.durability {
            o.flags |= OPT_DURABLE;
            o.durable = match d {
                Durability::Always => {
                    // Not with leases: such a queue's live part stays in its
                    // file (its lease table is persisted in place), and each
                    // sync would then be two device flushes, the table's and
                    // the image's, where syncing the file in place is one
                    // (the figures: docs/measurements.md).
                    if spec.leases.is_none() && !legacy_always() {
                        o.flags |= OPT_IMAGE;
                    }
                    DurableOptions { policy: POLICY_ALWAYS, ..Default::default() }
                }
                Durability::Interval(ms) => {
                    o.flags |= OPT_IMAGE;
                    DurableOptions { policy: POLICY_INTERVAL, interval_ms: u64::from(ms), ..Default::default() }
                }
            };
        }
        if let Some(l) = &spec.leases {
            o.flags |= OPT_LEASES;
            o.leases = LeaseOptions {
                lease_ms: l.lease_ms,
                max_deliveries: u64::from(l.max_deliveries),
                max_leases: l.max_leases,
                dead_letter: l.dead_letter.unwrap_or(0),
                has_dead_letter: u32::from(l.dead_letter.is_some()),
                reserved: [0; 4],
            };
        }
        o.checksum = o.compute_checksum();
        o
    }

    /// The options in the header bytes `raw` (from offset 0 of the file).
    pub(crate) fn from_header(raw: &[u8]) -> Option<Options> {
        let bytes = raw.get(OPTIONS_OFFSET..OPTIONS_OFFSET + size_of::<Options>())?;
        // SAFETY: Options is plain integers: any bytes are a value, and
        // `bytes` holds size_of::<Options>() of them.
        Some(unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<Options>()) })
    }

    /// The block's bytes, as written to the file at [`OPTIONS_OFFSET`].
    pub(crate) fn as_bytes(&self) -> &[u8] {
        // SAFETY: Options is repr(C) u64s and i64s, without padding.
        unsafe { std::slice::from_raw_parts((self as *const Options).cast::<u8>(), size_of::<Options>()) }
    }

    fn compute_checksum(&self) -> u64 {
        let body = &self.as_bytes()[..offset_of!(Options, checksum)];
        if body.iter().all(|&b| b == 0) {
            return 0;
        }
        fnv1a(body)
    }

    /// Checks the block: its checksum, no unknown flag, values in range.
    pub(crate) fn validate(&self) -> Result<()> {
        let bad = |what: String| Err(Error::new(SHM_ERR_INVAL, what));
        if self.checksum != self.compute_checksum() {
            return bad("header options checksum mismatch: the header was modified or corrupted".into());
        }
        let unknown = self.durable.reserved.iter().chain(&self.reserved).any(|&r| r != 0)
            || (self.flags & OPT_LEASES == 0 && self.leases != LeaseOptions::default());
        if self.flags & !(OPT_SPIN | OPT_DURABLE | OPT_LEASES | OPT_IMAGE) != 0 || unknown {
            return Err(Error::new(VER_NOT_MATCH, "queue file has options this library does not know"));
        }
        if self.flags & OPT_SPIN != 0 && self.spin_us < -1 {
            return bad(format!("spin time {} us out of range", self.spin_us));
        }
        if self.flags & OPT_LEASES != 0 {
            let l = &self.leases;
            if !(1..=MAX_LEASE_MS).contains(&l.lease_ms)
                || !(1..=MAX_LEASES).contains(&l.max_leases)
                || l.max_deliveries > u64::from(crate::lease::state::MAX_DELIVERIES)
                || l.has_dead_letter > 1
                || l.reserved != [0; 4]
            {
                return bad(format!("lease settings out of range: {l:?}"));
            }
        }
        if self.flags & OPT_IMAGE != 0 && self.flags & OPT_DURABLE == 0 {
            return bad("a slot image without the interval policy".into());
        }
        let d = &self.durable;
        match (self.flags & OPT_DURABLE != 0, d.policy) {
            (false, _) if d.policy != 0 || d.interval_ms != 0 => {
                bad("durability settings without the durable flag".into())
            }
            (false, _) => Ok(()),
            (true, POLICY_ALWAYS) if d.interval_ms == 0 => Ok(()),
            (true, POLICY_INTERVAL) if (1..=MAX_INTERVAL_MS).contains(&d.interval_ms) => Ok(()),
            (true, POLICY_ALWAYS | POLICY_INTERVAL) => {
                bad(format!("durable interval {} ms out of range", d.interval_ms))
            }
            (true, p) => Err(Error::new(VER_NOT_MATCH, format!("durability policy {p} unknown to this library"))),
        }
    }

    /// The durability policy of the queue, if it is durable (of a validated block).
    pub(crate) fn durability(&self) -> Option<Durability> {
        if self.flags & OPT_DURABLE == 0 {
            return None;
        }
        match self.durable.policy {
            POLICY_ALWAYS => Some(Durability::Always),
            _ => Some(Durability::Interval(u32::try_from(self.durable.interval_ms).unwrap_or(u32::MAX))),
        }
    }

    /// Does the file end with an image of the slots ([`OPT_IMAGE`])?
    pub(crate) fn image(&self) -> bool {
        self.flags & OPT_IMAGE != 0
    }

    /// The lease settings, if the queue has leases.
    pub(crate) fn leases(&self) -> Option<&LeaseOptions> {
        (self.flags & OPT_LEASES != 0).then_some(&self.leases)
    }

    /// Entries of the queue's lease table (0: no leases).
    pub(crate) fn lease_entries(&self) -> u64 {
        self.leases().map_or(0, |l| l.max_leases)
    }

    /// The spin time set for the queue, if any (-1: never sleep).
    pub(crate) fn spin_us(&self) -> Option<i64> {
        (self.flags & OPT_SPIN != 0).then_some(self.spin_us)
    }
}

impl Spec {
    /// The size of the file this queue needs, or `None` if it overflows.
    pub fn file_size(&self) -> Option<u64> {
        file_size_for(
            self.rows,
            self.record_size,
            self.durability.is_some(),
            // An `interval` or `always` queue has an image (in tests an
            // `always` queue may be made without, as earlier versions made them).
            Options::new(self).image(),
            self.leases.as_ref().map_or(0, |l| l.max_leases),
        )
    }
}

/// The header page of a new queue file: its header, then its options, the
/// rest zero.
pub(crate) fn header_page(info: &Header, options: &Options) -> Vec<u8> {
    let mut page = vec![0u8; HEADER_BYTES as usize];
    page[..size_of::<Header>()].copy_from_slice(info.as_bytes());
    page[OPTIONS_OFFSET..OPTIONS_OFFSET + size_of::<Options>()].copy_from_slice(options.as_bytes());
    page
}
