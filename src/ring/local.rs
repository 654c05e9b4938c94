//! [`LocalRing`]: the ring in this process's heap.

use super::{HeapStorage, NeverRecover, Ring, Silent};

/// The queue's lock-free ring in this process's heap, with no file, no
/// process registry and no sleeping: what [`crate::Queue`] does for each
/// record, without the sharing between processes. For benchmarks and
/// comparisons with in-process queues.
///
/// ```
/// let ring = tvm::LocalRing::new(2, 8);
/// assert!(ring.push(b"one") && ring.push(b"two"));
/// assert!(!ring.push(b"three"), "full: exactly 2 records");
/// let mut out = [0u8; 8];
/// assert_eq!(ring.pop(&mut out), Some(3));
/// assert_eq!(&out[..3], b"one");
/// ```
pub struct LocalRing(Ring<HeapStorage>);

impl LocalRing {
    /// A ring of exactly `capacity` records of up to `record_size` bytes.
    ///
    /// # Panics
    /// If `capacity` is 0 or above [`MAX_CAPACITY`](super::MAX_CAPACITY), or `record_size` is 0.
    pub fn new(capacity: usize, record_size: usize) -> LocalRing {
        LocalRing(Ring::new(HeapStorage::new(capacity, record_size), capacity as u64, record_size))
    }

    /// Appends `record`; false when the ring is full.
    ///
    /// # Panics
    /// If `record` is empty or longer than the record size.
    pub fn push(&self, record: &[u8]) -> bool {
        assert!(!record.is_empty() && record.len() <= self.0.record_size(), "record size out of range");
        self.0.push(record, &Silent, &mut NeverRecover).is_ok()
    }

    /// Removes the oldest record into `out` and returns its length; `None`
    /// when the ring is empty.
    ///
    /// # Panics
    /// If `out` is shorter than the record size.
    pub fn pop(&self, out: &mut [u8]) -> Option<usize> {
        assert!(out.len() >= self.0.record_size(), "buffer shorter than the record size");
        self.0.pop(out, &Silent, &mut NeverRecover).ok()
    }
}
