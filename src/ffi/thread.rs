//! The calling thread's state in the C layer, in one thread-local that a
//! push or pop reaches once: the last call's error and effect (lGetTErrno,
//! lGetEffect), and the queue the thread works on (kept with its intent
//! word there), which the calls on a handle's queue (lPush, lPop, lPopWait,
//! lPopup, lPushs, and the lease calls) use without a look into the
//! attachment table.
//!
//! libtvm.so is a shared library, whose thread-locals cost a call
//! (`__tls_get_addr`) each time a function reaches one: the state a push,
//! pop or lease call needs lives in one, [`STATE`], which has no destructor (so that it
//! needs no check of its own state, and outlives every other). What keeps
//! the queue alive lives beside it, in `KEPT`, reached only when the kept
//! queue changes.

use super::handle::{note_attached, on_queue_id};
use super::{SATvm, TABLE};
use crate::attach::Attachments;
use crate::error::Result;
use crate::queue::{KeptIntent, Queue};
use std::cell::{Cell, RefCell};
use std::ffi::c_long;
use std::sync::Arc;

/// Calls in a row on one queue other than the kept one after which that
/// queue is kept instead (a thread that alternates between queues keeps
/// none of them moving: each change costs two atomic increments of shared
/// reference counts).
const KEEP_AFTER: u32 = 4;

/// See the module documentation.
struct ThreadState {
    /// The last call's error code (0: success) and effect.
    last: Cell<(c_long, usize)>,
    /// The kept queue (NULL: none) and this thread's intent word there,
    /// both owned by `KEPT`, which clears this before it lets them go.
    queue: Cell<*const Queue>,
    kept: Cell<*const KeptIntent>,
    /// The kept queue's id, and the attachment epoch read before it was
    /// resolved (a move of the epoch means it may have been detached).
    id: Cell<TABLE>,
    epoch: Cell<u64>,
    /// A call is using or changing the kept queue: a call that a signal
    /// handler makes meanwhile goes through the attachment table.
    busy: Cell<bool>,
    /// The last queue used other than the kept one, and how many calls in
    /// a row used it.
    elsewhere: Cell<(TABLE, u32)>,
}

/// Owns the kept queue and intent word that [`STATE`] points to.
struct Kept(Option<(Arc<Queue>, KeptIntent)>);

impl Drop for Kept {
    fn drop(&mut self) {
        // The thread ends: calls from thread-local destructors that run
        // after this one go through the attachment table.
        let _ = STATE.try_with(|s| s.queue.set(std::ptr::null()));
    }
}

thread_local! {
    static STATE: ThreadState = const {
        ThreadState {
            last: Cell::new((0, 0)),
            queue: Cell::new(std::ptr::null()),
            kept: Cell::new(std::ptr::null()),
            id: Cell::new(0),
            epoch: Cell::new(0),
            busy: Cell::new(false),
            elsewhere: Cell::new((0, 0)),
        }
    };
    static KEPT: RefCell<Kept> = const { RefCell::new(Kept(None)) };
}

/// Records the outcome of the calling thread's last call.
#[inline]
pub(super) fn set_last(code: c_long, effect: usize) {
    STATE.with(|s| s.last.set((code, effect)));
}

/// The outcome of the calling thread's last call: error code, effect.
pub(super) fn last() -> (c_long, usize) {
    STATE.with(|s| s.last.get())
}

/// Marks the kept queue in use for as long as it lives.
struct Busy<'a>(&'a ThreadState);

impl<'a> Busy<'a> {
    #[inline(always)]
    fn enter(s: &'a ThreadState) -> Busy<'a> {
        s.busy.set(true);
        Busy(s)
    }
}

impl Drop for Busy<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        self.0.busy.set(false);
    }
}

/// Runs `f` on queue `h.tblName` as [`on_queue_id`] does (attached on first
/// use, noted by the handle), with this thread's intent word there: the
/// kept queue when it is that one, still attached and not dropped (no look
/// into the attachment table), else through the table.
#[inline(always)]
pub(super) fn on_queue_kept<R>(h: &mut SATvm, f: impl FnOnce(&Queue, Option<&KeptIntent>) -> Result<R>) -> Result<R> {
    let t = h.tblName;
    STATE.with(|s| {
        let q = s.queue.get();
        if s.id.get() == t && !q.is_null() && !s.busy.get() && s.epoch.get() == Attachments::epoch() {
            // SAFETY: a non-NULL `queue` and its `kept` point into `KEPT`,
            // which this thread alone reaches, and which changes only under
            // `busy` (not set: no call of this thread is changing it) and
            // clears `queue` first; `busy` keeps them while `f` runs.
            let (q, kept) = unsafe { (&*q, &*s.kept.get()) };
            // As the attachment table does: a queue found dropped is
            // resolved again (it may have been re-created).
            if !q.is_dropped() {
                let _busy = Busy::enter(s);
                s.elsewhere.set((t, 0));
                return f(q, Some(kept));
            }
        }
        on_queue_kept_slow(h, s, f)
    })
}

/// [`on_queue_kept`] when the kept queue is not the one: keeps it instead
/// when there is none, the kept one is stale, or several calls in a row
/// used it; otherwise goes through the attachment table.
#[inline(never)]
fn on_queue_kept_slow<R>(
    h: &mut SATvm,
    s: &ThreadState,
    f: impl FnOnce(&Queue, Option<&KeptIntent>) -> Result<R>,
) -> Result<R> {
    let t = h.tblName;
    if !s.busy.get() {
        let switch = s.queue.get().is_null() || s.id.get() == t || s.epoch.get() != Attachments::epoch() || {
            let (id, n) = s.elsewhere.get();
            let n = if id == t { n + 1 } else { 1 };
            s.elsewhere.set((t, n));
            n >= KEEP_AFTER
        };
        if switch && keep(h, s, t)? {
            // SAFETY: as in `on_queue_kept`: `keep` just set both.
            let (q, kept) = unsafe { (&*s.queue.get(), &*s.kept.get()) };
            let _busy = Busy::enter(s);
            return f(q, Some(kept));
        }
    }
    on_queue_id(h, t, |q| f(q, None))
}

/// Makes queue `t` the kept one (attaching it if needed: the handle notes
/// it); false when the thread cannot keep one now (it is ending, or a call
/// that a signal handler interrupted is using its words).
#[cold]
fn keep(h: &mut SATvm, s: &ThreadState, t: TABLE) -> Result<bool> {
    let _busy = Busy::enter(s);
    KEPT.try_with(|k| {
        let Ok(mut k) = k.try_borrow_mut() else { return Ok(false) };
        s.queue.set(std::ptr::null());
        // Let the old one go first: a detached queue is unmapped once its
        // last user lets go of it.
        k.0 = None;
        let epoch = Attachments::epoch();
        let (queue, newly) = Attachments::process().resolve(t)?;
        if newly {
            note_attached(h, t);
        }
        let Some(kept) = queue.keep_intent() else { return Ok(false) };
        let (queue, kept) = k.0.insert((queue, kept));
        s.kept.set(kept);
        s.id.set(t);
        s.epoch.set(epoch);
        s.elsewhere.set((t, 0));
        s.queue.set(Arc::as_ptr(queue));
        Ok(true)
    })
    .unwrap_or(Ok(false))
}
