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

use super::handle::{note_attached, on_table};
use super::{SATvm, TABLE};
use crate::attach::Attachments;
use crate::error::Result;
use crate::queue::{HeldIntent, Queue};
use std::cell::{Cell, RefCell};
use std::ffi::c_long;
use std::sync::Arc;
use std::sync::atomic::{Ordering, compiler_fence};

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
    held: Cell<*const HeldIntent>,
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
struct Kept(Option<(Arc<Queue>, HeldIntent)>);

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
            held: Cell::new(std::ptr::null()),
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

/// Marks the kept queue in use until dropped (the end of the call that
/// set `busy`, on unwinding too).
struct Busy<'a>(&'a ThreadState);

impl<'a> Busy<'a> {
    /// Sets `busy`, before the caller reads the kept queue: a signal handler
    /// that calls in after this sees it and leaves the kept queue alone,
    /// one that called in before has finished (and may have changed it).
    /// The fence keeps the compiler from moving the caller's reads of the
    /// kept queue above the store (a signal handler runs on this thread, so
    /// only the compiler's order matters).
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
        // Every use of the kept queue before the store.
        compiler_fence(Ordering::SeqCst);
        self.0.busy.set(false);
    }
}

/// Runs `f` on queue `h.tblName` as [`on_table`] does (attached on first
/// use, noted by the handle), with this thread's intent word there: the
/// kept queue when it is that one, still attached and not dropped (no look
/// into the attachment table), else through the table. A call that a
/// signal handler makes while another call of this thread runs (`busy`)
/// goes through the table, leaving the kept queue to the interrupted call.
#[inline(always)]
pub(super) fn on_queue_held<R>(h: &mut SATvm, f: impl FnOnce(&Queue, Option<&HeldIntent>) -> Result<R>) -> Result<R> {
    let t = h.tblName;
    STATE.with(|s| {
        if s.busy.get() {
            return on_table(h, t, |q| f(q, None));
        }
        // `busy` first, then the kept queue: a signal handler that runs
        // between the two would otherwise be free to let go of the queue
        // already read (its last reference, if another thread detached it).
        let busy = Busy::enter(s);
        #[cfg(test)]
        tests::signal_point();
        let q = s.queue.get();
        if s.id.get() == t && !q.is_null() && s.epoch.get() == Attachments::epoch() {
            // SAFETY: a non-NULL `queue` and its `held` point into `KEPT`,
            // which this thread alone reaches, and which changes only in a
            // call that set `busy` (this one: a signal handler's call sees
            // `busy` and goes through the table) and clears `queue` first.
            let (q, held) = unsafe { (&*q, &*s.held.get()) };
            // As the attachment table does: a queue found dropped is
            // resolved again (it may have been re-created).
            if !q.is_dropped() {
                s.elsewhere.set((t, 0));
                return f(q, Some(held));
            }
        }
        on_queue_other(h, s, &busy, f)
    })
}

/// [`on_queue_held`] when the kept queue is not the one: keeps it instead
/// when there is none, the kept one is stale, or several calls in a row
/// used it; otherwise goes through the attachment table. The caller has
/// set `busy`.
#[inline(never)]
fn on_queue_other<R>(
    h: &mut SATvm,
    s: &ThreadState,
    _busy: &Busy<'_>,
    f: impl FnOnce(&Queue, Option<&HeldIntent>) -> Result<R>,
) -> Result<R> {
    let t = h.tblName;
    let switch = s.queue.get().is_null() || s.id.get() == t || s.epoch.get() != Attachments::epoch() || {
        let (id, n) = s.elsewhere.get();
        let n = if id == t { n + 1 } else { 1 };
        s.elsewhere.set((t, n));
        n >= KEEP_AFTER
    };
    if switch && keep(h, s, t)? {
        // SAFETY: as in `on_queue_held`: `keep` just set both, under `busy`.
        let (q, held) = unsafe { (&*s.queue.get(), &*s.held.get()) };
        return f(q, Some(held));
    }
    on_table(h, t, |q| f(q, None))
}

/// Makes queue `t` the kept one (attaching it if needed: the handle notes
/// it); false when the thread cannot keep one now (it is ending, or a call
/// that a signal handler interrupted is using its words). The caller has
/// set `busy`.
#[cold]
fn keep(h: &mut SATvm, s: &ThreadState, t: TABLE) -> Result<bool> {
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
        let Some(held) = queue.hold_intent() else { return Ok(false) };
        let (queue, held) = k.0.insert((queue, held));
        s.held.set(held);
        s.id.set(t);
        s.epoch.set(epoch);
        s.elsewhere.set((t, 0));
        s.queue.set(Arc::as_ptr(queue));
        Ok(true)
    })
    .unwrap_or(Ok(false))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use crate::ffi::{RC_SUCC, lCircleQueue, lPush, pCloneSATvm, vCloneFree};
    use crate::queue::Wait;
    use crate::test_support::{TempDir, child_env, child_test};
    use std::ffi::c_void;

    thread_local! {
        /// Run once at the first instant of a call on the kept queue at
        /// which a signal may interrupt it (see `signal_point`).
        static SIGNAL: RefCell<Option<Box<dyn FnOnce()>>> = const { RefCell::new(None) };
    }

    /// A signal arrives here: the handler set in `SIGNAL` runs (once).
    pub(super) fn signal_point() {
        if let Some(handler) = SIGNAL.with(|s| s.borrow_mut().take()) {
            handler();
        }
    }

    /// A handle of its own bound to queue `t` and the 8 bytes at `rec`.
    fn bound(t: TABLE, rec: *mut u64) -> *mut SATvm {
        let p = pCloneSATvm().cast::<SATvm>();
        // SAFETY: a handle just made, used by this thread alone.
        let h = unsafe { &mut *p };
        (h.tblName, h.pstVoid, h.lSize) = (t, rec.cast::<c_void>(), 8);
        p
    }

    /// The scenario in a process of its own (the C layer's table reads
    /// $TVMDBD): a thread keeps queue 1; in the middle of its next push on
    /// it, another thread detaches queue 1 (the kept one is now its last
    /// holder) and a signal handler pushes on queue 2, which makes the
    /// thread keep that one. The interrupted push must still reach queue 1
    /// (before the fix it used the queue the handler let go of: unmapped).
    #[test]
    fn a_signal_handler_that_changes_the_kept_queue_leaves_the_interrupted_call_its_queue() {
        let dir = TempDir::new("ffi-thread", "signal");
        let out = child_test("ffi::thread::tests::child_signal_during_a_call_on_the_kept_queue")
            .env("TVMDBD", dir.path())
            .env("TVMQ_TEST_CHILD", "1")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "the child failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let mut rec = [0u8; 8];
        let q1 = Queue::open(dir.path(), 1).unwrap();
        for want in [1u64, 2] {
            assert_eq!(q1.pop(&mut rec, Wait::NoWait).unwrap(), 8);
            assert_eq!(u64::from_le_bytes(rec), want);
        }
        assert_eq!(q1.depth(), 0);
        let q2 = Queue::open(dir.path(), 2).unwrap();
        assert_eq!(q2.pop(&mut rec, Wait::NoWait).unwrap(), 8);
        assert_eq!(u64::from_le_bytes(rec), 99, "the handler's record");
    }

    #[test]
    #[ignore = "child process: started by a_signal_handler_that_changes_the_kept_queue_leaves_the_interrupted_call_its_queue"]
    fn child_signal_during_a_call_on_the_kept_queue() {
        child_env("TVMQ_TEST_CHILD");
        let (rec1, rec2) = (Box::leak(Box::new(1u64)) as *mut u64, Box::leak(Box::new(99u64)) as *mut u64);
        let (p1, p2) = (bound(1, rec1), bound(2, rec2));
        for t in [1, 2] {
            // SAFETY: a valid handle; NULL name and part are allowed.
            let rc = unsafe { lCircleQueue(p1, t, 8, 8, std::ptr::null_mut(), std::ptr::null_mut()) };
            assert_eq!(rc, RC_SUCC);
        }
        // SAFETY: a valid handle bound to 8 readable bytes.
        assert_eq!(unsafe { lPush(p1) }, RC_SUCC, "the first push keeps queue 1");
        let handler = move || {
            // Another thread detaches queue 1 meanwhile (the kept reference
            // is its last holder now), then the handler pushes on queue 2.
            std::thread::spawn(|| Attachments::process().detach(1)).join().unwrap();
            // SAFETY: as above.
            assert_eq!(unsafe { lPush(p2) }, RC_SUCC, "{}", Error::code_only(last().0 as u32));
        };
        SIGNAL.with(|s| *s.borrow_mut() = Some(Box::new(handler)));
        // SAFETY: as above.
        unsafe { *rec1 = 2 };
        // SAFETY: as above.
        let rc = unsafe { lPush(p1) };
        assert!(SIGNAL.with(|s| s.borrow().is_none()), "the handler ran");
        assert_eq!(rc, RC_SUCC, "{}", Error::code_only(last().0 as u32));
        // SAFETY: handles made by pCloneSATvm, not used after.
        unsafe { (vCloneFree(p1), vCloneFree(p2)) };
    }
}
