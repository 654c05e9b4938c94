//! How a queue takes part in the ring: where its threads announce the
//! positions they claim ([`Intent`], one intent word per thread in the
//! process's entry, given out by [`ThreadIntents`]; the announcements of
//! pops on queues with leases, [`LeaseIntent`] and [`IntentOnLeaseQueue`]),
//! and its [`Stall`] policy ([`Patience`]).

use super::Queue;
use super::lease::LeaseSlot;
use crate::clock::now_ns;
use crate::error::*;
use crate::registry::{HolderIs, IntentSlots, NUMBERED_THREADS};
use crate::ring::{Announce, Holder, IDLE, Stall, Verdict, intent_word};
use parking_lot::Mutex;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A thread's intent word in its process's entry, where the ring announces
/// the positions it claims (see [`crate::ring::Announce`]). `None`: the
/// thread announces nothing (no entry, or more threads than words).
pub(super) struct Intent<'a>(pub(super) Option<&'a AtomicU64>);

impl Announce for Intent<'_> {
    #[inline]
    fn claiming(&self, role: Holder, first: u64) {
        if let Some(word) = self.0 {
            // Release: visible to whoever sees the claim that follows.
            word.store(intent_word(role, first), Ordering::Release);
        }
    }

    #[inline]
    fn idle(&self) {
        if let Some(word) = self.0 {
            word.store(IDLE, Ordering::Release);
        }
    }

    /// A thread with an intent word is proven alive by it while it holds a
    /// slot (`Registry::holder` answers `Alive` whenever an entry announces
    /// the position, even one whose lock cannot be read), so `Patience`
    /// and `repair` never recover its slots.
    #[inline]
    fn robbable(&self) -> bool {
        self.0.is_none()
    }
}

/// The announcement of a lease consumer: its intent word, and the position
/// it claims in its lease entry, so that a recovery that finds its slot kept
/// judges it by the entry (see [`Queue::lease_slot_verdict`]).
pub(super) struct LeaseIntent<'a> {
    pub(super) intent: Intent<'a>,
    pub(super) pos: &'a AtomicU64,
}

impl Announce for LeaseIntent<'_> {
    #[inline]
    fn claiming(&self, role: Holder, first: u64) {
        self.intent.claiming(role, first);
        // Release: visible to whoever sees the claim that follows.
        self.pos.store(first, Ordering::Release);
    }

    #[inline]
    fn idle(&self) {
        self.intent.idle();
    }

    #[inline]
    fn robbable(&self) -> bool {
        self.intent.robbable()
    }
}

/// A thread's intent, announced as [`Intent`] announces it, under a type
/// of its own: pops of queues with leases then call an instance of
/// `Ring::pop` of their own, and the plain pop's instance keeps its single
/// caller, which the compiler inlines as it did before leases (a second
/// caller made it stop, and plain pops slowed: docs/measurements.md).
pub(super) struct IntentOnLeaseQueue<'a>(pub(super) Intent<'a>);

impl Announce for IntentOnLeaseQueue<'_> {
    #[inline]
    fn claiming(&self, role: Holder, first: u64) {
        self.0.claiming(role, first);
    }

    #[inline]
    fn idle(&self) {
        self.0.idle();
    }

    #[inline]
    fn robbable(&self) -> bool {
        self.0.robbable()
    }
}

/// Which intent word this thread holds in a queue (by its process-local
/// slot allocator); given back when the thread ends (and no [`KeptIntent`]
/// holds it any more).
struct ThreadIntent {
    slots: Arc<IntentSlots>,
    slot: usize,
    /// The thread's number, under which the allocator notes the word.
    number: Option<Rc<ThreadNumber>>,
}

impl Drop for ThreadIntent {
    fn drop(&mut self) {
        if let Some(n) = &self.number {
            self.slots.forget(n.0);
        }
        if self.slot != NO_WORD {
            self.slots.release(self.slot);
        }
    }
}

/// A thread that uses the queue without an intent word (more than
/// `registry::INTENTS` threads of this process use it).
pub(super) const NO_WORD: usize = usize::MAX;

/// A number below [`NUMBERED_THREADS`] that one thread of the process holds
/// at a time, under which queues note its intent words
/// ([`IntentSlots::noted`]): a thread finds its word in a queue with one
/// load, without a map or a cache. Given back once the thread and every
/// word noted under it are gone ([`ThreadIntent`]s hold it).
struct ThreadNumber(usize);

/// Numbers given back, and the next never given.
static NUMBERS: Mutex<(Vec<usize>, usize)> = Mutex::new((Vec::new(), 0));

impl ThreadNumber {
    /// A free number, if any is left.
    fn take() -> Option<ThreadNumber> {
        let mut numbers = NUMBERS.lock();
        let (free, next) = &mut *numbers;
        let n = free.pop().or_else(|| (*next < NUMBERED_THREADS).then(|| std::mem::replace(next, *next + 1)))?;
        Some(ThreadNumber(n))
    }
}

impl Drop for ThreadNumber {
    fn drop(&mut self) {
        NUMBERS.lock().0.push(self.0);
    }
}

/// This thread's intent words, in every queue it used: what the thread
/// holds, not a cache (a word stays the thread's while it lives, or while a
/// [`KeptIntent`] keeps it). A call finds its word through the queue's
/// allocator, under the thread's number ([`ThreadNumber`]); through this map
/// only the first time, or when the thread has no number.
struct ThreadIntents {
    /// By the address of the queue's allocator (kept alive by the entry):
    /// found in constant time however many queues the thread uses. Shared
    /// with the thread's [`KeptIntent`]s.
    all: RefCell<HashMap<usize, Rc<ThreadIntent>, BuildHasherDefault<IdHasher>>>,
    /// Entries in `all` after its last sweep of dropped queues: the next
    /// sweep waits until it has doubled, so that sweeps cost O(1) a queue.
    swept: Cell<usize>,
    /// This thread's number plus one (0: none yet; usize::MAX: none left),
    /// and the number itself (shared with the thread's words).
    number: Cell<usize>,
    numbered: RefCell<Option<Rc<ThreadNumber>>>,
}

impl ThreadIntents {
    /// This thread's word number in `q` ([`NO_WORD`]: none), taken on first
    /// use, and the entry that holds it (`None` while the table is in use,
    /// by a call that a signal handler interrupted).
    #[cold]
    fn find_or_take(&self, q: &Queue) -> (usize, Option<Rc<ThreadIntent>>) {
        let Ok(mut all) = self.all.try_borrow_mut() else { return (NO_WORD, None) };
        let key = Arc::as_ptr(&q.slots) as usize;
        let entry = match all.get(&key) {
            Some(t) => t.clone(),
            None => {
                // First use by this thread: now and then forget the words of
                // queues since dropped, then take one (or note that we
                // announce nothing).
                if all.len() >= 2 * self.swept.get().max(16) {
                    all.retain(|_, t| Arc::strong_count(&t.slots) > 1);
                    self.swept.set(all.len());
                }
                let slot = q.slots.acquire().unwrap_or(NO_WORD);
                if slot == NO_WORD {
                    q.registry.add_anonymous();
                }
                let number = self.number();
                if let Some(n) = &number {
                    q.slots.note(n.0, slot);
                }
                let entry = Rc::new(ThreadIntent { slots: q.slots.clone(), slot, number });
                all.insert(key, entry.clone());
                entry
            }
        };
        (entry.slot, Some(entry))
    }

    /// This thread's number, taken on first use (`None`: none left).
    fn number(&self) -> Option<Rc<ThreadNumber>> {
        let mut numbered = self.numbered.try_borrow_mut().ok()?;
        if numbered.is_none() && self.number.get() == 0 {
            let taken = ThreadNumber::take();
            self.number.set(taken.as_ref().map_or(usize::MAX, |n| n.0 + 1));
            *numbered = taken.map(Rc::new);
        }
        numbered.clone()
    }

    /// This thread's word number in `q` ([`NO_WORD`]: none), taken on
    /// first use.
    #[inline(always)]
    fn slot_in(&self, q: &Queue) -> usize {
        let n = self.number.get().wrapping_sub(1);
        match q.slots.noted(n) {
            Some(slot) => slot,
            None => self.find_or_take(q).0,
        }
    }
}

thread_local! {
    static THREAD_INTENTS: ThreadIntents = const {
        ThreadIntents {
            all: RefCell::new(HashMap::with_hasher(BuildHasherDefault::new())),
            swept: Cell::new(0),
            number: Cell::new(0),
            numbered: RefCell::new(None),
        }
    };
}

/// This thread's intent word in one queue, kept by a caller between calls
/// (the attachment table's thread cache keeps one with each queue, so that
/// the C layer's pushes and pops need not look it up): while it lives, the
/// word stays this thread's. Not `Send`: a word belongs to its thread.
pub(crate) struct KeptIntent {
    /// The queue's allocator (kept alive by `_slots`): tells which queue
    /// the word belongs to.
    key: *const IntentSlots,
    /// The word; NULL: the thread announces nothing in that queue.
    word: *const AtomicU64,
    /// The word's number in the process's entry ([`NO_WORD`]: none).
    slot: usize,
    _slots: Arc<IntentSlots>,
    _entry: Option<Rc<ThreadIntent>>,
}

/// The [`Stall`] policy of a queue: a position whose holder is proven dead
/// (no live process announces it) is recovered at once; one whose holder
/// cannot be told is recovered after the unblock timeout; a live holder is
/// never robbed.
pub(super) struct Patience<'a> {
    queue: &'a Queue,
    /// What we wait for (a slot's seq) and since when.
    pub(super) stalled: Option<(u64, Instant)>,
}

impl<'a> Patience<'a> {
    #[inline]
    pub(super) fn new(queue: &'a Queue) -> Self {
        Patience { queue, stalled: None }
    }
}

impl Stall for Patience<'_> {
    fn decide(&mut self, stalled: u64, holder: Holder, at: u64) -> Verdict {
        if self.queue.is_dropped() {
            return Verdict::Abort(SHM_ERR_EIDRM);
        }
        let now = Instant::now();
        let since = match self.stalled {
            Some((s, t)) if s == stalled => t,
            _ => {
                self.stalled = Some((stalled, now));
                now
            }
        };
        let waited = now - since;
        let recover = match self.queue.registry.holder(holder, at, self.queue.unregistered()) {
            HolderIs::Dead => true,
            HolderIs::Unknown => waited >= self.queue.unblock_timeout,
            HolderIs::Alive => false,
        };
        if recover {
            // A lease consumer's slot is judged by its lease entry: waited
            // for while it fills it, released once the record is saved there.
            let lease = if holder == Holder::Consumer { self.queue.lease_slot_verdict(at) } else { None };
            match lease {
                None => return Verdict::Recover,
                Some(LeaseSlot::Released) => return Verdict::Wait, // free now: the next look takes it
                Some(LeaseSlot::Wait) => {}
            }
        }
        // The holder is alive (or cannot be told): let it run.
        if waited < Duration::from_millis(1) {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(200));
        }
        Verdict::Wait
    }

    fn recovered(&mut self, holder: Holder) {
        let s = &self.queue.control().counters.0;
        match holder {
            Holder::Producer => s.recovered_pushes.fetch_add(1, Ordering::Relaxed),
            Holder::Consumer => s.recovered_pops.fetch_add(1, Ordering::Relaxed),
        };
        s.last_recovery_ns.store(now_ns(), Ordering::Relaxed);
    }
}

impl Queue {
    /// This thread's intent word (see [`Intent`]), given out on first use.
    #[inline]
    pub(super) fn intent(&self) -> Intent<'_> {
        if !self.registered {
            return Intent(None);
        }
        self.intent_at(self.thread_slot())
    }

    /// This thread's intent word, to keep (see [`KeptIntent`]); taken now
    /// if the thread has none yet. `None` while the thread's table of words
    /// is in use (by a call that a signal handler interrupted).
    pub(crate) fn keep_intent(&self) -> Option<KeptIntent> {
        let (word, slot, entry) = if self.registered {
            let (slot, entry) = THREAD_INTENTS.with(|t| t.find_or_take(self));
            (self.intent_at(slot).0.map_or(std::ptr::null(), std::ptr::from_ref), slot, Some(entry?))
        } else {
            (std::ptr::null(), NO_WORD, None)
        };
        Some(KeptIntent { key: Arc::as_ptr(&self.slots), word, slot, _slots: self.slots.clone(), _entry: entry })
    }

    /// The intent word `kept` keeps and its number, when `kept` is this
    /// queue's.
    #[inline(always)]
    fn kept_here(&self, kept: Option<&KeptIntent>) -> Option<(Intent<'_>, usize)> {
        match kept {
            Some(h) if std::ptr::eq(h.key, Arc::as_ptr(&self.slots)) => {
                // SAFETY: NULL or the word of this thread's slot (kept by
                // `h._entry`) in the registry of the queue whose allocator
                // is `h.key`: this queue (an allocator belongs to one
                // queue, and `h._slots` keeps it alive, so that its address
                // is not reused), whose registry lives as long as `self`.
                Some((Intent(unsafe { h.word.as_ref() }), h.slot))
            }
            _ => None,
        }
    }

    /// The intent word `kept` keeps when it is this queue's, else the
    /// thread's word looked up as [`intent`](Self::intent) does.
    #[inline(always)]
    pub(super) fn intent_kept(&self, kept: Option<&KeptIntent>) -> Intent<'_> {
        match self.kept_here(kept) {
            Some((intent, _)) => intent,
            None => self.intent(),
        }
    }

    /// [`intent_slot`](Self::intent_slot), from `kept` when it is this
    /// queue's (no look into the thread's table of words).
    #[inline(always)]
    pub(super) fn intent_slot_kept(&self, kept: Option<&KeptIntent>) -> (Intent<'_>, usize) {
        match self.kept_here(kept) {
            Some(got) => got,
            None => self.intent_slot(),
        }
    }

    /// This thread's intent word and its number in the process's entry
    /// ([`NO_WORD`] without one): [`intent`](Self::intent) and the number
    /// (for lease pops; kept apart so that plain pushes and pops carry the
    /// word only).
    #[inline]
    pub(super) fn intent_slot(&self) -> (Intent<'_>, usize) {
        if !self.registered {
            return (Intent(None), NO_WORD);
        }
        let slot = self.thread_slot();
        (self.intent_at(slot), slot)
    }

    /// The number of this thread's intent word in the entry of a registered
    /// queue ([`NO_WORD`]: none), given out on first use.
    #[inline(always)]
    pub(super) fn thread_slot(&self) -> usize {
        THREAD_INTENTS.with(|t| t.slot_in(self))
    }

    /// Intent word number `slot` of this process's entry ([`NO_WORD`]: none).
    #[inline(always)]
    fn intent_at(&self, slot: usize) -> Intent<'_> {
        Intent(if slot == NO_WORD { None } else { self.registry.intent_word(slot) })
    }
}

/// Hashes the keys of thread-local maps (this file's queue allocators, the
/// `(table, id)` keys of `crate::attach`'s thread cache): the words are
/// mixed (a splitmix64 finalizer), so that ids in any pattern (multiples of
/// a power of two, say) spread over the buckets. Not for keys an attacker
/// picks to collide: ids are the program's own queues.
#[derive(Default)]
pub(crate) struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn write(&mut self, bytes: &[u8]) {
        bytes.iter().for_each(|&b| self.write_u64(u64::from(b)));
    }

    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(32) ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}
