//! Handles (SATvm), and their use of the process-wide attachment table
//! ([`crate::attach`]).
//!
//! Attachments belong to the process: any handle can use a queue that any
//! handle attached, and lPush/lPop attach on first use. A handle remembers
//! the queues it attached, for vHoldRelease.

use super::{CallResult, SATvm, TABLE, call, quietly};
use crate::attach::Attachments;
use crate::error::*;
use crate::queue::{KeptIntent, Queue};
use parking_lot::Mutex;
use std::cell::UnsafeCell;
use std::ffi::c_void;

/// Runs `f` on queue `t` of the process-wide table with this thread's
/// intent word there (when the thread's cache keeps one), attaching the
/// queue on first use (the handle notes it, for vHoldRelease); a queue
/// found dropped is resolved again (it may have been re-created). See
/// [`Attachments::with`]: once attached, no lock.
#[inline(always)]
fn on_queue_id_kept<R>(h: &mut SATvm, t: TABLE, f: impl FnOnce(&Queue, Option<&KeptIntent>) -> Result<R>) -> Result<R> {
    Attachments::with_process_kept(t, || state(h).note_attached(t), f)
}

/// Runs `f` on queue `t`, as [`on_queue_id_kept`] without the intent word.
#[inline]
pub(super) fn on_queue_id<R>(h: &mut SATvm, t: TABLE, f: impl FnOnce(&Queue) -> Result<R>) -> Result<R> {
    on_queue_id_kept(h, t, |q, _| f(q))
}

/// Runs `f` on queue `h.tblName`, as [`on_queue_id`].
#[inline]
pub(super) fn on_queue<R>(h: &mut SATvm, f: impl FnOnce(&Queue) -> Result<R>) -> Result<R> {
    let t = h.tblName;
    on_queue_id(h, t, f)
}

/// Runs `f` on queue `h.tblName` with this thread's intent word there, as
/// [`on_queue_id_kept`]: the calls on a handle's queue (lPush, lPop,
/// lPopWait, lPopup, lPushs, and the lease calls).
#[inline(always)]
pub(super) fn on_queue_kept<R>(h: &mut SATvm, f: impl FnOnce(&Queue, Option<&KeptIntent>) -> Result<R>) -> Result<R> {
    let t = h.tblName;
    on_queue_id_kept(h, t, f)
}

/// Removes `t` from the process's attachments (a no-op if it is not there).
pub(super) fn detach(t: TABLE) {
    Attachments::process().detach(t);
}

/// Library-side state of one handle.
#[derive(Default)]
pub(super) struct HandleState {
    /// Queues this handle attached (detached by vHoldRelease).
    attached: Mutex<Vec<TABLE>>,
    /// The network client (lTvmConnect to vTvmDisconnect); dropped, after
    /// its asynchronous pushes are answered, by vCloneFree.
    pub(super) net: Option<crate::client::Client>,
    /// The credentials of lTvmAuth, given by every connection that
    /// lTvmConnect or lTvmConnectTls opens afterwards.
    pub(super) auth: Option<std::sync::Arc<crate::client::Auth>>,
    /// The credentials of lTvmSentinelAuth, given to the sentinels of
    /// lTvmConnectSentinel.
    pub(super) sentinel_auth: Option<std::sync::Arc<crate::client::Auth>>,
}

impl HandleState {
    fn note_attached(&self, t: TABLE) {
        let mut v = self.attached.lock();
        if !v.contains(&t) {
            v.push(t);
        }
    }
}

/// The handle's state, created on first use.
fn state(h: &mut SATvm) -> &HandleState {
    if h.m_pPriv.is_null() {
        h.m_pPriv = Box::into_raw(Box::<HandleState>::default()).cast::<c_void>();
    }
    // SAFETY: m_pPriv is NULL or a Box<HandleState> made just above (or by an
    // earlier call), freed only by vCloneFree together with the handle.
    unsafe { &*h.m_pPriv.cast::<HandleState>() }
}

/// The handle's state for a call that changes it (the network calls).
pub(super) fn state_mut(h: &mut SATvm) -> &mut HandleState {
    if h.m_pPriv.is_null() {
        h.m_pPriv = Box::into_raw(Box::<HandleState>::default()).cast::<c_void>();
    }
    // SAFETY: as in `state`; the `&mut SATvm` makes this access exclusive.
    unsafe { &mut *h.m_pPriv.cast::<HandleState>() }
}

struct GlobalHandle(UnsafeCell<SATvm>);
// SAFETY: the C API hands out this one pointer; as in STVM, callers share it
// between threads only with their own synchronisation (or clone it per thread).
unsafe impl Sync for GlobalHandle {}

/// A handle bound to nothing, with no error and no private state: the
/// process-wide handle at start, and what vInitSATvm writes.
pub(super) const EMPTY_HANDLE: SATvm = SATvm {
    lSize: 0,
    tblName: 0,
    m_lErrno: 0,
    m_lEffect: 0,
    pstVoid: std::ptr::null_mut(),
    m_bHold: false,
    m_pPriv: std::ptr::null_mut(),
};

static GLOBAL: GlobalHandle = GlobalHandle(UnsafeCell::new(EMPTY_HANDLE));

/// Returns the process-wide handle. Never NULL. Give each thread its own
/// handle with pCloneSATvm() rather than sharing this one.
#[unsafe(no_mangle)]
pub extern "C" fn pGetSATvm() -> *mut c_void {
    GLOBAL.0.get().cast::<c_void>()
}

/// A cloned handle on cache lines of its own: every call writes its handle's
/// m_lErrno and m_lEffect, and handles that shared a line (as consecutive
/// small allocations do) would slow their threads down (false sharing).
#[repr(C, align(128))]
struct OwnLines(SATvm);

/// Returns a new handle for one thread, with the public members of the
/// process-wide handle; attached queues stay usable (attachments are
/// process-wide). Free it with vCloneFree(). NULL only if memory is exhausted.
#[unsafe(no_mangle)]
pub extern "C" fn pCloneSATvm() -> *mut c_void {
    let global = GLOBAL.0.get();
    std::panic::catch_unwind(|| {
        // SAFETY: reads the public members of the static handle.
        let g = unsafe { &*global };
        Box::into_raw(Box::new(OwnLines(SATvm {
            lSize: g.lSize,
            tblName: g.tblName,
            m_lErrno: 0,
            m_lEffect: 0,
            pstVoid: g.pstVoid,
            m_bHold: g.m_bHold,
            m_pPriv: std::ptr::null_mut(),
        })))
        .cast::<c_void>()
    })
    .unwrap_or(std::ptr::null_mut())
}

/// Frees a handle made by pCloneSATvm() (the queues stay attached to the
/// process). NULL and the process-wide handle are ignored.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vCloneFree(p: *mut SATvm) {
    if p.is_null() || p == GLOBAL.0.get() {
        return;
    }
    quietly(|| {
        // SAFETY: a non-global handle passed here was made by pCloneSATvm as
        // a Box<OwnLines> (the SATvm at offset 0); its m_pPriv is NULL or a
        // Box<HandleState>.
        let h = unsafe { Box::from_raw(p.cast::<OwnLines>()) };
        if !h.0.m_pPriv.is_null() {
            // SAFETY: see above.
            drop(unsafe { Box::from_raw(h.0.m_pPriv.cast::<HandleState>()) });
        }
    });
}

/// Keeps queues attached between calls. (tvmq always keeps them attached, so
/// this only records the request; vHoldRelease ends it.) NULL p: nothing,
/// lGetTErrno() = CONDIT_IS_NIL.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vHoldConnect(p: *mut SATvm) {
    let body = |h: &mut SATvm| {
        h.m_bHold = true;
        Ok(0)
    };
    // SAFETY: C callers pass NULL or a handle made by pGetSATvm/pCloneSATvm.
    unsafe { call(p, body) };
}

/// Detaches every queue this handle attached (explicitly or by first use).
/// Other threads finish their calls on them; later calls re-attach. NULL p:
/// nothing, lGetTErrno() = CONDIT_IS_NIL.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vHoldRelease(p: *mut SATvm) {
    let body = |h: &mut SATvm| {
        h.m_bHold = false;
        let ids = std::mem::take(&mut *state(h).attached.lock());
        for t in ids {
            detach(t);
        }
        Ok(0)
    };
    // SAFETY: C callers pass NULL or a handle made by pGetSATvm/pCloneSATvm.
    unsafe { call(p, body) };
}

fn attach(h: &mut SATvm, t: TABLE) -> CallResult {
    on_queue_id(h, t, |_| Ok(()))?;
    Ok(0)
}

/// Attaches queue t (maps it). Returns RC_SUCC, or RC_FAIL with
/// CONDIT_IS_NIL (NULL handle), TBL_NOT_FOUND (no such queue), SHM_ERR_ACCES
/// (permission, foreign owner, symbolic link), SHM_ERR_INVAL / VER_NOT_MATCH
/// (not a valid queue file), SHM_ERR_NOMEM / MQUE_CRTE_BIG (it cannot be
/// mapped), NOT_DURABLE (a durable queue's file moved onto tmpfs); a durable
/// queue attached first after a machine restart recovers first:
/// LOCK_DOWR_ERR, SYNC_FAILED. Thread-safe (one handle per thread).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lAttchTable(p: *mut SATvm, t: TABLE) -> std::ffi::c_long {
    let body = |h: &mut SATvm| attach(h, t);
    // SAFETY: C callers pass NULL or a handle made by pGetSATvm/pCloneSATvm.
    unsafe { call(p, body) }
}

/// Same as lAttchTable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lInitSATvm(p: *mut SATvm, t: TABLE) -> std::ffi::c_long {
    let body = |h: &mut SATvm| attach(h, t);
    // SAFETY: C callers pass NULL or a handle made by pGetSATvm/pCloneSATvm.
    unsafe { call(p, body) }
}

/// Detaches queue t from the process (a no-op if it is not attached):
/// threads in the middle of a call on t finish it; the next call attaches t
/// again. NULL p: nothing, lGetTErrno() = CONDIT_IS_NIL.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vTblDisconnect(p: *mut SATvm, t: TABLE) {
    let body = |_: &mut SATvm| {
        detach(t);
        Ok(0)
    };
    // SAFETY: C callers pass NULL or a handle made by pGetSATvm/pCloneSATvm.
    unsafe { call(p, body) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use crate::ffi::thread::last;
    use crate::ffi::{RC_SUCC, lCircleQueue, lPush};
    use crate::queue::Wait;
    use crate::test_support::{TempDir, child_env, run_child_in};
    use std::ffi::c_void;

    /// A handle of its own bound to queue `t` and the 8 bytes at `rec`.
    fn bound(t: TABLE, rec: *mut u64) -> *mut SATvm {
        let p = pCloneSATvm().cast::<SATvm>();
        // SAFETY: a handle just made, used by this thread alone.
        let h = unsafe { &mut *p };
        (h.tblName, h.pstVoid, h.lSize) = (t, rec.cast::<c_void>(), 8);
        p
    }

    /// The scenario in a process of its own (the C layer's table reads
    /// $TVMDBD): a thread pushes on queue 1; in the middle of its next push
    /// there, another thread detaches queue 1 (the thread's cache is now its
    /// last holder) and a signal handler pushes on queue 2. The interrupted
    /// push must still reach queue 1 (when the cache was read before `busy`
    /// was set, the handler's call changed it, letting go of queue 1, and the
    /// interrupted one used the freed queue: SIGSEGV).
    #[test]
    fn a_signal_handler_that_changes_the_kept_queue_leaves_the_interrupted_call_its_queue() {
        let dir = TempDir::new("ffi-handle", "signal");
        run_child_in("ffi::handle::tests::child_signal_during_a_call_on_the_kept_queue", dir.path());
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
        crate::attach::tests::on_signal(Box::new(handler));
        // SAFETY: as above.
        unsafe { *rec1 = 2 };
        // SAFETY: as above.
        let rc = unsafe { lPush(p1) };
        assert!(crate::attach::tests::signal_handled(), "the handler ran");
        assert_eq!(rc, RC_SUCC, "{}", Error::code_only(last().0 as u32));
        // SAFETY: handles made by pCloneSATvm, not used after.
        unsafe { (vCloneFree(p1), vCloneFree(p2)) };
    }
}
