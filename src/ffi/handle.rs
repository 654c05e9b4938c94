//! Handles (SATvm), and their use of the process-wide attachment table
//! ([`crate::attach`]).
//!
//! Attachments belong to the process: any handle can use a queue that any
//! handle attached, and lPush/lPop attach on first use. A handle remembers
//! the queues it attached, for vHoldRelease.

use super::{CallResult, SATvm, TABLE, call, quietly};
use crate::attach::Attachments;
use crate::error::*;
use crate::queue::Queue;
use parking_lot::Mutex;
use std::cell::UnsafeCell;
use std::ffi::c_void;

/// Runs `f` on queue `t`, attaching it on first use (the handle notes it,
/// for vHoldRelease); a queue found dropped is re-resolved once (it may have
/// been re-created).
#[inline]
pub(super) fn on_queue_id<R>(h: &mut SATvm, t: TABLE, f: impl FnOnce(&Queue) -> Result<R>) -> Result<R> {
    let mut attached = false;
    let r = Attachments::process().with(t, || attached = true, f);
    if attached {
        state(h).note_attached(t);
    }
    r
}

/// Notes in the handle that a call of it attached queue `t` (for vHoldRelease).
pub(super) fn note_attached(h: &mut SATvm, t: TABLE) {
    state(h).note_attached(t);
}

/// Runs `f` on queue `h.tblName`, as [`on_queue_id`].
#[inline]
pub(super) fn on_queue<R>(h: &mut SATvm, f: impl FnOnce(&Queue) -> Result<R>) -> Result<R> {
    let t = h.tblName;
    on_queue_id(h, t, f)
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
/// this only records the request; vHoldRelease ends it.)
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
/// Other threads finish their calls on them; later calls re-attach.
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
/// TBL_NOT_FOUND (no such queue), SHM_ERR_ACCES (permission, foreign owner,
/// symbolic link), SHM_ERR_INVAL / VER_NOT_MATCH (not a valid queue file).
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

/// Detaches queue t from the process (a no-op if it is not attached).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vTblDisconnect(p: *mut SATvm, t: TABLE) {
    let body = |_: &mut SATvm| {
        detach(t);
        Ok(0)
    };
    // SAFETY: C callers pass NULL or a handle made by pGetSATvm/pCloneSATvm.
    unsafe { call(p, body) };
}
