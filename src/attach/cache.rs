//! Each thread's cache of the queues it reached through the attachment
//! tables ([`super::Attachments::with`]): the entry used last in one
//! thread-local without a destructor, the others in a hash map by table and
//! id, with the thread's intent word in each queue; and the outcome of the
//! thread's last call through the C API, kept in the same thread-local.

#[cfg(test)]
use super::tests;
use super::{Attachments, EPOCH};
use crate::error::*;
use crate::queue::{IdHasher, KeptIntent, Queue};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::ffi::c_long;
use std::hash::BuildHasherDefault;
use std::sync::Arc;
use std::sync::atomic::{Ordering, compiler_fence};

/// A queue this thread reached through a table, and its intent word there.
struct Entry {
    queue: Arc<Queue>,
    kept: KeptIntent,
}

/// The entries of a thread's cache, owned: found in constant time however
/// many there are. Boxed, and only ever replaced in place or all cleared,
/// so that [`ThreadState`]'s pointers into them stay valid until then.
struct Owned {
    /// [`EPOCH`] when the entries were last cleared.
    epoch: u64,
    // Boxed: the pointers into an entry must outlive the vector's growth.
    #[allow(clippy::vec_box)]
    entries: Vec<Box<Entry>>,
    /// Where the entry of each [`key`] is.
    index: HashMap<u64, usize, BuildHasherDefault<IdHasher>>,
}

impl Drop for Owned {
    fn drop(&mut self) {
        // The thread ends: calls from thread-local destructors that run
        // after this one go through the table.
        let _ = STATE.try_with(|s| s.queue.set(std::ptr::null()));
    }
}

/// What every call of a thread reaches first, in one thread-local without
/// a destructor (so that reaching it costs no check of its state): the
/// entry of the thread's cache it used last, as pointers into [`OWNED`];
/// whether a call is running; and the outcome of its last call through the
/// C API. That outcome (the C layer's) is kept here because libtvm.so pays
/// a call of `__tls_get_addr` for each thread-local a call reaches: in a
/// thread-local of its own it cost lPush and lPop 15 instructions each
/// (callgrind).
struct ThreadState {
    /// The entry's key, queue (NULL: none) and intent word (valid when the
    /// queue is not NULL).
    key: Cell<u64>,
    queue: Cell<*const Queue>,
    kept: Cell<*const KeptIntent>,
    /// [`EPOCH`] when the entry was found.
    epoch: Cell<u64>,
    /// A call of this thread is using the cache or a queue it found there
    /// ([`Busy`]): a call that a signal handler makes meanwhile leaves the
    /// cache alone.
    busy: Cell<bool>,
    /// The C API's last call on this thread: its error code (0: success)
    /// and effect (lGetTErrno, lGetEffect).
    outcome: Cell<(c_long, usize)>,
}

thread_local! {
    static STATE: ThreadState = const {
        ThreadState {
            key: Cell::new(0),
            queue: Cell::new(std::ptr::null()),
            kept: Cell::new(std::ptr::null()),
            epoch: Cell::new(0),
            busy: Cell::new(false),
            outcome: Cell::new((0, 0)),
        }
    };
    static OWNED: RefCell<Owned> = const {
        RefCell::new(Owned { epoch: 0, entries: Vec::new(), index: HashMap::with_hasher(BuildHasherDefault::new()) })
    };
}

/// Records the outcome of the calling thread's last call through the C API
/// (see [`ThreadState`]).
#[inline]
pub(crate) fn set_outcome(code: c_long, effect: usize) {
    STATE.with(|s| s.outcome.set((code, effect)));
}

/// The outcome of the calling thread's last call through the C API: error
/// code, effect.
pub(crate) fn outcome() -> (c_long, usize) {
    STATE.with(|s| s.outcome.get())
}

/// The key of queue `id` of table number `instance` in thread caches.
#[inline(always)]
fn key(instance: u64, id: u32) -> u64 {
    instance << 32 | u64::from(id)
}

/// Marks the thread's cache in use until dropped (at the end of the call
/// that set `busy`, on unwinding too).
struct Busy<'a>(&'a ThreadState);

impl<'a> Busy<'a> {
    /// Sets `busy`, before the caller reads the cache: a signal handler
    /// that calls in after this sees it and leaves the cache alone; one that
    /// called in before has finished (and may have changed it). The fence
    /// keeps the compiler from moving the caller's reads of the cache above
    /// the store (a signal handler runs on this thread: only the compiler's
    /// order matters).
    #[inline(always)]
    fn enter(s: &'a ThreadState) -> Busy<'a> {
        s.busy.set(true);
        compiler_fence(Ordering::SeqCst);
        Busy(s)
    }
}

impl Drop for Busy<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        // Every use of the cache before the store.
        compiler_fence(Ordering::SeqCst);
        self.0.busy.set(false);
    }
}

/// Runs `f` on queue `id` of table number `instance` (`table` gives the
/// table, when the thread's cache does not have the queue): see
/// [`Attachments::with`]. A call that a signal handler makes while another
/// call of this thread runs leaves the thread's cache to the interrupted
/// call: it takes the queue from the cache if it is there and current (a
/// reference of its own), else resolves it through the table, and gives
/// `f` no intent word.
#[inline(always)]
pub(super) fn with_kept_in<'t, R>(
    instance: u64,
    table: impl FnOnce() -> &'t Attachments,
    id: u32,
    newly: impl FnOnce(),
    f: impl FnOnce(&Queue, Option<&KeptIntent>) -> Result<R>,
) -> Result<R> {
    STATE.with(|s| {
        if s.busy.get() {
            return with_nested(table(), id, newly, |q| f(q, None));
        }
        // `busy` first, then the cache: a signal handler that ran between
        // the two could let go of a queue already read (its last reference,
        // if another thread detached it).
        let busy = Busy::enter(s);
        #[cfg(test)]
        tests::signal_point();
        let q = s.queue.get();
        if s.key.get() == key(instance, id) && !q.is_null() && s.epoch.get() == EPOCH.load(Ordering::Acquire) {
            // SAFETY: a non-NULL `queue` and its `kept` point into an entry
            // of `OWNED`, which this thread alone reaches, and which changes
            // only in a call that set `busy` (this one) after clearing
            // `queue`.
            let (q, kept) = unsafe { (&*q, &*s.kept.get()) };
            // As the table does: a queue found dropped is resolved again
            // (it may have been re-created).
            if !q.is_dropped() {
                return f(q, Some(kept));
            }
        }
        with_found(s, &busy, table(), id, newly, f)
    })
}

/// [`with_kept_in`] when the entry used last is not the one: finds it in
/// the thread's cache (emptied first if the epoch moved), or resolves it
/// through the table and adds it, and makes it the one used last. The
/// caller has set `busy`.
#[inline(never)]
fn with_found<R>(
    s: &ThreadState,
    _busy: &Busy<'_>,
    table: &Attachments,
    id: u32,
    newly: impl FnOnce(),
    f: impl FnOnce(&Queue, Option<&KeptIntent>) -> Result<R>,
) -> Result<R> {
    let key = key(table.instance, id);
    let mut newly = Some(newly);
    let mut attached = |now: bool| {
        if let Some(newly) = newly.take().filter(|_| now) {
            newly();
        }
    };
    let found = OWNED.try_with(|owned| -> Result<Option<(*const Queue, *const KeptIntent)>> {
        // Borrowed: by a call that a signal handler interrupted (outside
        // this cache: the Rust API's).
        let Ok(mut owned) = owned.try_borrow_mut() else { return Ok(None) };
        s.queue.set(std::ptr::null());
        let epoch = EPOCH.load(Ordering::Acquire);
        if owned.epoch != epoch {
            owned.entries.clear();
            owned.index.clear();
            owned.epoch = epoch;
        }
        let at = owned.index.get(&key).copied();
        let i = match at {
            Some(i) if !owned.entries[i].queue.is_dropped() => i,
            _ => {
                // Not in the cache yet, or found dropped: ask the table.
                let (queue, now) = table.resolve(id)?;
                attached(now);
                // None: the thread's table of words is in use (by a call
                // that a signal handler interrupted): not cached.
                let Some(kept) = queue.keep_intent() else { return Ok(None) };
                let entry = Entry { queue, kept };
                match at {
                    Some(i) => {
                        *owned.entries[i] = entry;
                        i
                    }
                    None => {
                        owned.entries.push(Box::new(entry));
                        let i = owned.entries.len() - 1;
                        owned.index.insert(key, i);
                        i
                    }
                }
            }
        };
        let e = &owned.entries[i];
        let (q, kept) = (Arc::as_ptr(&e.queue), std::ptr::from_ref(&e.kept));
        s.key.set(key);
        s.epoch.set(epoch);
        s.kept.set(kept);
        s.queue.set(q);
        Ok(Some((q, kept)))
    });
    match found {
        Ok(Ok(Some((q, kept)))) => {
            // SAFETY: pointers into an entry of `OWNED`, which only a call
            // that set `busy` (this one) changes.
            let (q, kept) = unsafe { (&*q, &*kept) };
            f(q, Some(kept))
        }
        Ok(Err(e)) => Err(e),
        // The thread is ending (its cache is gone), or see above.
        Ok(Ok(None)) | Err(_) => {
            let (q, now) = table.resolve(id)?;
            attached(now);
            f(&q, None)
        }
    }
}

/// [`with_kept_in`] for a call that a signal handler makes while another
/// call of this thread uses the cache: see there.
#[cold]
fn with_nested<R>(
    table: &Attachments,
    id: u32,
    newly: impl FnOnce(),
    f: impl FnOnce(&Queue) -> Result<R>,
) -> Result<R> {
    let cached = OWNED
        .try_with(|owned| {
            let owned = owned.try_borrow().ok()?;
            let e = &owned.entries[*owned.index.get(&key(table.instance, id))?];
            let current = owned.epoch == EPOCH.load(Ordering::Acquire) && !e.queue.is_dropped();
            current.then(|| e.queue.clone())
        })
        .ok()
        .flatten();
    let q = match cached {
        Some(q) => q,
        None => {
            let (q, attached) = table.resolve(id)?;
            if attached {
                newly();
            }
            q
        }
    };
    f(&q)
}
