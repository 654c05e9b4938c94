//! An index of the lease table's entries in the queue file: a set of entry
//! numbers (the free entries, or the entries waiting for another delivery)
//! as a bitmap of three levels, so that a lease call finds one without
//! scanning the table (a few loads, whatever the table's size).
//!
//! | level | a bit per | where |
//! |---|---|---|
//! | leaves | entry | word `j` in the head of entry `count - 1 - j` (`Entry::bits`) |
//! | summary | 2 leaf words: one of them may be non-zero | [`IndexWords::sum`], in the control block |
//! | top | summary word: it may be non-zero | [`IndexWords::top`], in the control block |
//!
//! Leaves live in the entries at the table's end (consumers start their
//! search for a free entry at its start), one word per 64 entries.
//!
//! The index is a *hint*; an entry's state word is the truth. Every bit is
//! changed by an atomic read-modify-write, all of them `SeqCst` together
//! with the entries' state changes, following two rules:
//! - whoever puts an entry into the set (frees it, makes it wait) sets its
//!   bit *after* the entry's state change: [`insert`](Index::insert);
//! - whoever takes an entry out of the set clears its bit *before* the
//!   entry's state change, then acts on the state it reads afterwards: a
//!   bit cleared while its entry is (again) in the set is set again, so that
//!   a clear never hides an insertion made concurrently.
//!
//! So a bit may be set for an entry that is not in the set (stale: harmless,
//! the next reader clears it) but, while every participant runs, never clear
//! for an entry that is in it. A summary bit is cleared only after its leaf
//! words were seen empty, then set again if one was filled meanwhile; a top
//! bit likewise. A process killed between an entry's state change and the
//! matching bit change (or inside a summary's update) can leave an entry
//! hidden: the sweep, which reads every entry anyway, puts such entries back
//! and repairs the summaries ([`Index::repair_summaries`]), and a recovery
//! after a machine restart rebuilds the index ([`Index::clear_all`] and
//! `insert`). Until then a hidden free entry is one lease fewer in flight,
//! and a hidden waiting record waits until that sweep.
//!
//! The free set is stored inverted (a physical 0 bit means "free"), so that
//! the zeroed table of a new file (or of a file made before the index
//! existed) reads as "every entry free": stale bits at worst.

use super::state::Entry;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};

/// Leaf words per summary bit.
const GROUP: usize = 2;
/// Summary words of an index (enough for the largest table: 2^20 entries).
pub(crate) const SUM_WORDS: usize = 128;
/// Top words of an index.
pub(crate) const TOP_WORDS: usize = 2;
const _: () = assert!(SUM_WORDS * 64 * GROUP * 64 >= super::MAX_ENTRIES as usize);
const _: () = assert!(TOP_WORDS * 64 >= SUM_WORDS);

/// The summary levels of one index, in the table's control block.
#[repr(C)]
pub(crate) struct IndexWords {
    pub(crate) sum: [AtomicU64; SUM_WORDS],
    pub(crate) top: [AtomicU64; TOP_WORDS],
}

impl Default for IndexWords {
    fn default() -> Self {
        IndexWords { sum: std::array::from_fn(|_| AtomicU64::new(0)), top: std::array::from_fn(|_| AtomicU64::new(0)) }
    }
}

/// One index over a table's entries (see the module doc).
pub(crate) struct Index {
    /// Bytes from one entry's head to the next's.
    stride: usize,
    count: usize,
    /// Leaf words (`count / 64`, rounded up), and the first of them: word
    /// `Entry::bits[field]` of the last entry's head (leaf `j` lies `j`
    /// strides before it), in the mapping that the table's control
    /// reference keeps alive. Worked out once: every lease call reaches a
    /// leaf.
    leaves: usize,
    leaf0: *const AtomicU64,
    words: *const IndexWords,
    /// `!0` for an index stored inverted (the free set), else 0.
    inv: u64,
}

// SAFETY: the pointers lead into a shared mapping kept alive by the table
// that owns the index; everything reached through them is atomics.
unsafe impl Send for Index {}
// SAFETY: as above.
unsafe impl Sync for Index {}

/// Bits at and above `b` of a word.
fn from_bit(b: usize) -> u64 {
    !0u64 << b
}

impl Index {
    /// The index of `count` entries at `entries` (each `stride` bytes, a
    /// head first), leaves in `Entry::bits[field]`, summaries at `words`.
    ///
    /// # Safety
    /// `entries .. entries + count * stride` and `words` lie in a mapping
    /// that outlives the index; the stride is a multiple of 64.
    pub(crate) unsafe fn new(
        entries: *mut u8,
        stride: usize,
        count: usize,
        field: usize,
        words: *const IndexWords,
        inverted: bool,
    ) -> Index {
        debug_assert!(count <= super::MAX_ENTRIES as usize && field < 2);
        let leaf0 = if count == 0 {
            std::ptr::null()
        } else {
            // SAFETY: count - 1 < count: the head lies in the mapping (see
            // above), aligned (the stride is a multiple of 64).
            let head = unsafe { &*entries.add((count - 1) * stride).cast::<Entry>() };
            &head.bits[field] as *const AtomicU64
        };
        let inv = if inverted { !0 } else { 0 };
        Index { stride, count, leaves: count.div_ceil(64), leaf0, words, inv }
    }

    #[inline]
    fn leaves(&self) -> usize {
        self.leaves
    }

    fn groups(&self) -> usize {
        self.leaves().div_ceil(GROUP)
    }

    fn sum_words(&self) -> usize {
        self.groups().div_ceil(64)
    }

    /// Leaf word `j` (< `leaves`): in the head of entry `count - 1 - j`.
    #[inline]
    fn leaf(&self, j: usize) -> &AtomicU64 {
        assert!(j < self.leaves, "lease index leaf out of range");
        // SAFETY: j < leaves <= count, so entry count - 1 - j exists: its
        // head lies in the mapping (see `new`), `j` strides before the last
        // entry's, and its `bits[field]` as many bytes before `leaf0`.
        unsafe { &*self.leaf0.byte_sub(j * self.stride) }
    }

    fn words(&self) -> &IndexWords {
        // SAFETY: see `new`.
        unsafe { &*self.words }
    }

    /// The logical value of a word.
    fn get(&self, w: &AtomicU64) -> u64 {
        w.load(SeqCst) ^ self.inv
    }

    /// Sets bits `m` of a word (logically); the logical value before.
    fn or(&self, w: &AtomicU64, m: u64) -> u64 {
        (if self.inv == 0 { w.fetch_or(m, SeqCst) } else { w.fetch_and(!m, SeqCst) }) ^ self.inv
    }

    /// Clears bits `m` of a word (logically); the logical value before.
    fn and_not(&self, w: &AtomicU64, m: u64) -> u64 {
        (if self.inv == 0 { w.fetch_and(!m, SeqCst) } else { w.fetch_or(m, SeqCst) }) ^ self.inv
    }

    /// The valid bits of leaf word `j` (the last one covers fewer entries).
    fn leaf_mask(&self, j: usize) -> u64 {
        let left = self.count - j * 64;
        if left >= 64 { !0 } else { (1u64 << left) - 1 }
    }

    fn leaf_value(&self, j: usize) -> u64 {
        self.get(self.leaf(j)) & self.leaf_mask(j)
    }

    fn group_empty(&self, g: usize) -> bool {
        (g * GROUP..((g + 1) * GROUP).min(self.leaves())).all(|j| self.leaf_value(j) == 0)
    }

    /// Is entry `i` in the set (its bit set)?
    #[inline]
    pub(crate) fn contains(&self, i: usize) -> bool {
        self.get(self.leaf(i / 64)) & (1 << (i % 64)) != 0
    }

    /// Puts entry `i` in the set: after the state change that put it there.
    /// A load when its bit is set already.
    #[inline]
    pub(crate) fn insert(&self, i: usize) {
        if !self.contains(i) {
            self.insert_slow(i);
        }
    }

    #[cold]
    fn insert_slow(&self, i: usize) {
        self.or(self.leaf(i / 64), 1 << (i % 64));
        self.mark_group(i / 64 / GROUP);
    }

    /// Sets group `g`'s summary bit, and its summary word's top bit.
    fn mark_group(&self, g: usize) {
        let s = &self.words().sum[g / 64];
        if self.get(s) & (1 << (g % 64)) == 0 {
            self.or(s, 1 << (g % 64));
        }
        let w = g / 64;
        let t = &self.words().top[w / 64];
        if self.get(t) & (1 << (w % 64)) == 0 {
            self.or(t, 1 << (w % 64));
        }
    }

    /// Takes entry `i` out of the set: before the state change that takes
    /// it out. True if its bit was set (this caller cleared it).
    pub(crate) fn remove(&self, i: usize) -> bool {
        let (j, bit) = (i / 64, 1u64 << (i % 64));
        let before = self.and_not(self.leaf(j), bit);
        if before & bit == 0 {
            return false;
        }
        if before & self.leaf_mask(j) == bit {
            self.leaf_emptied(j);
        }
        true
    }

    /// Leaf word `j` was seen empty: clears its group's summary bit if the
    /// whole group is, then sets it again if one was filled meanwhile.
    fn leaf_emptied(&self, j: usize) {
        let g = j / GROUP;
        if !self.group_empty(g) {
            return;
        }
        let (s, sb) = (&self.words().sum[g / 64], 1u64 << (g % 64));
        let before = self.and_not(s, sb);
        if !self.group_empty(g) {
            self.mark_group(g);
            return;
        }
        if before & !sb == 0 {
            // The summary word emptied: its top bit likewise.
            let w = g / 64;
            let (t, tb) = (&self.words().top[w / 64], 1u64 << (w % 64));
            self.and_not(t, tb);
            if self.get(s) != 0 {
                self.or(t, tb);
            }
        }
    }

    /// The first entry at or after `from` whose bit is set, if any.
    pub(crate) fn next(&self, from: usize) -> Option<usize> {
        let mut i = from;
        while i < self.count {
            let j = i / 64;
            let w = self.leaf_value(j) & from_bit(i % 64);
            if w != 0 {
                return Some(j * 64 + w.trailing_zeros() as usize);
            }
            i = if (j + 1) % GROUP != 0 { (j + 1) * 64 } else { self.next_group((j + 1) / GROUP)? * GROUP * 64 };
        }
        None
    }

    /// The first group at or after `g` whose summary bit is set.
    fn next_group(&self, mut g: usize) -> Option<usize> {
        while g < self.groups() {
            let w = g / 64;
            let bits = self.get(&self.words().sum[w]) & from_bit(g % 64);
            if bits != 0 {
                return Some(w * 64 + bits.trailing_zeros() as usize);
            }
            g = self.next_sum_word(w + 1)? * 64;
        }
        None
    }

    /// The first summary word at or after `w` whose top bit is set.
    fn next_sum_word(&self, w: usize) -> Option<usize> {
        let mut t = w / 64;
        let mut mask = from_bit(w % 64);
        while t < TOP_WORDS && t * 64 < self.sum_words() {
            let bits = self.get(&self.words().top[t]) & mask;
            if bits != 0 {
                let found = t * 64 + bits.trailing_zeros() as usize;
                return (found < self.sum_words()).then_some(found);
            }
            (t, mask) = (t + 1, !0);
        }
        None
    }

    /// The first entry in the set from `start` on, wrapping at the end.
    pub(crate) fn next_wrapping(&self, start: usize) -> Option<usize> {
        self.next(start).or_else(|| if start > 0 { self.next(0).filter(|&i| i < start) } else { None })
    }

    /// (After an entry-by-entry repair.) Sets every summary and top bit
    /// whose leaf words hold bits: undoes what a process killed between a
    /// leaf's change and its summary's left. Reads every leaf word.
    pub(crate) fn repair_summaries(&self) {
        for g in 0..self.groups() {
            if !self.group_empty(g) {
                self.mark_group(g);
            }
        }
    }

    /// (Recovery, alone.) Empties the index: every word cleared.
    pub(crate) fn clear_all(&self) {
        for j in 0..self.leaves() {
            self.leaf(j).store(self.inv, SeqCst);
        }
        let words = self.words();
        for w in words.sum.iter().chain(words.top.iter()) {
            w.store(self.inv, SeqCst);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A table of `n` bare heads (stride 64) and its summary words.
    fn table(n: usize) -> (Vec<Entry>, Box<IndexWords>) {
        ((0..n).map(|_| Entry::default()).collect(), Box::default())
    }

    fn index(heads: &mut [Entry], words: &IndexWords, inverted: bool) -> Index {
        // SAFETY: the vector and the box outlive the index in each test.
        unsafe { Index::new(heads.as_mut_ptr().cast(), 64, heads.len(), 0, words, inverted) }
    }

    #[test]
    fn finds_every_member_in_order_at_every_size() {
        for n in [1, 2, 63, 64, 65, 128, 129, 4096, 8192, 8193, 100_000] {
            let (mut heads, words) = table(n);
            let ix = index(&mut heads, &words, false);
            assert_eq!(ix.next(0), None);
            let members: Vec<usize> = (0..n).filter(|i| i % 997 == 3 || *i == n - 1).collect();
            members.iter().for_each(|&i| ix.insert(i));
            let mut found = Vec::new();
            let mut at = 0;
            while let Some(i) = ix.next(at) {
                found.push(i);
                at = i + 1;
            }
            assert_eq!(found, members, "n = {n}");
            for &i in &members {
                assert!(ix.remove(i));
                assert!(!ix.remove(i), "removed twice");
            }
            assert_eq!(ix.next(0), None, "n = {n}: empty again");
            assert!(words.sum.iter().chain(words.top.iter()).all(|w| w.load(SeqCst) == 0), "summaries cleared");
        }
    }

    #[test]
    fn inverted_index_of_zeroed_words_holds_every_entry() {
        let n = 5000;
        let (mut heads, words) = table(n);
        let ix = index(&mut heads, &words, true);
        assert_eq!(ix.next(0), Some(0));
        assert_eq!(ix.next(4999), Some(4999));
        for i in 0..n {
            assert!(ix.remove(i));
        }
        assert_eq!(ix.next(0), None);
        ix.insert(4242);
        assert_eq!((ix.next(0), ix.next_wrapping(4243)), (Some(4242), Some(4242)));
        ix.clear_all();
        assert_eq!(ix.next(0), None);
    }

    #[test]
    fn repair_finds_leaves_whose_summary_was_lost() {
        let n = 100_000;
        let (mut heads, words) = table(n);
        let ix = index(&mut heads, &words, false);
        ix.insert(77_777);
        // A process killed between the leaf and the summary.
        words.sum.iter().chain(words.top.iter()).for_each(|w| w.store(0, SeqCst));
        assert_eq!(ix.next(0), None);
        ix.repair_summaries();
        assert_eq!(ix.next(0), Some(77_777));
    }
}
