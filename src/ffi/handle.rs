//! Handles (SATvm) and the process-wide table of attached queues.
//!
//! Attachments belong to the process: any handle can use a queue that any
//! handle attached, and lPush/lPop attach on first use. Each thread keeps a
//! small cache of the queues it used, validated by a global epoch that moves
//! only when a queue is detached; so a call costs a thread-local lookup and
//! one read of a rarely written word, not a lock or a system call. A detached
//! queue stays mapped until the last thread that cached it lets go of it.

use super::{CallResult, SATvm, TABLE, call, quietly};
use crate::error::*;
use crate::queue::Queue;
use crate::queue_file::queue_dir;
use parking_lot::Mutex;
use std::cell::{RefCell, UnsafeCell};
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Attached queues of this process.
static ATTACHED: Mutex<Option<HashMap<TABLE, Arc<Queue>>>> = Mutex::new(None);
/// Moves whenever an attachment is removed (or the process forks): thread
/// caches older than it are dropped.
static EPOCH: AtomicU64 = AtomicU64::new(0);

struct Cache {
    epoch: u64,
    queues: Vec<(TABLE, Arc<Queue>)>,
}

thread_local! {
    static CACHE: RefCell<Cache> = const { RefCell::new(Cache { epoch: 0, queues: Vec::new() }) };
}

/// A child of fork must not act under its parent's registration: forget
/// every attachment (the parent's are untouched) so it re-attaches as itself.
extern "C" fn after_fork_in_child() {
    EPOCH.fetch_add(1, Ordering::SeqCst);
    FORKED.store(true, Ordering::SeqCst);
}
static FORKED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
static ATFORK: std::sync::Once = std::sync::Once::new();

/// Runs `f` on attached queue `t`, attaching it first if needed. `newly`
/// is called when this call attached it.
#[inline]
pub(crate) fn with_queue<R>(t: TABLE, newly: impl FnOnce(), f: impl FnOnce(&Queue) -> Result<R>) -> Result<R> {
    CACHE.with(|cache| {
        let Ok(mut cache) = cache.try_borrow_mut() else {
            return Err(Error::new(SVR_EXCEPTION, "re-entrant call from a signal handler"));
        };
        let epoch = EPOCH.load(Ordering::Acquire);
        if cache.epoch != epoch {
            cache.queues.clear();
            cache.epoch = epoch;
        }
        let index = match cache.queues.iter().position(|(id, q)| *id == t && !q.is_dropped()) {
            Some(i) => i,
            None => {
                cache.queues.retain(|(id, _)| *id != t);
                let (q, attached) = resolve(t)?;
                if attached {
                    newly();
                }
                cache.queues.push((t, q));
                cache.queues.len() - 1
            }
        };
        f(&cache.queues[index].1)
    })
}

/// The process-wide attachment of `t`, opening the queue if there is none
/// (or the one there was dropped). Returns whether it attached now.
fn resolve(t: TABLE) -> Result<(Arc<Queue>, bool)> {
    ATFORK.call_once(|| {
        // SAFETY: registers a handler that only touches atomics.
        unsafe { libc::pthread_atfork(None, None, Some(after_fork_in_child)) };
    });
    let mut guard = ATTACHED.lock();
    let map = guard.get_or_insert_with(HashMap::new);
    if FORKED.swap(false, Ordering::SeqCst) {
        map.clear();
    }
    if let Some(q) = map.get(&t) {
        if !q.is_dropped() {
            return Ok((q.clone(), false));
        }
        map.remove(&t);
        EPOCH.fetch_add(1, Ordering::Release);
    }
    let q = Arc::new(Queue::open(&queue_dir(), t)?);
    map.insert(t, q.clone());
    Ok((q, true))
}

/// Removes `t` from the process's attachments (a no-op if it is not there).
pub(crate) fn detach(t: TABLE) {
    let mut guard = ATTACHED.lock();
    if let Some(map) = guard.as_mut() {
        if map.remove(&t).is_some() {
            EPOCH.fetch_add(1, Ordering::Release);
        }
    }
}

/// Library-side state of one handle.
#[derive(Default)]
pub(crate) struct HandleState {
    /// Queues this handle attached (detached by vHoldRelease).
    attached: Mutex<Vec<TABLE>>,
}

impl HandleState {
    pub(crate) fn note_attached(&self, t: TABLE) {
        let mut v = self.attached.lock();
        if !v.contains(&t) {
            v.push(t);
        }
    }
}

/// The handle's state, created on first use.
pub(crate) fn state(h: &mut SATvm) -> &HandleState {
    if h.m_pPriv.is_null() {
        h.m_pPriv = Box::into_raw(Box::<HandleState>::default()).cast::<c_void>();
    }
    // SAFETY: m_pPriv is NULL or a Box<HandleState> made just above (or by an
    // earlier call), freed only by vCloneFree together with the handle.
    unsafe { &*h.m_pPriv.cast::<HandleState>() }
}

struct GlobalHandle(UnsafeCell<SATvm>);
// SAFETY: the C API hands out this one pointer; as in STVM, callers share it
// between threads only with their own synchronisation (or clone it per thread).
unsafe impl Sync for GlobalHandle {}

static GLOBAL: GlobalHandle = GlobalHandle(UnsafeCell::new(SATvm {
    lSize: 0,
    tblName: 0,
    m_lErrno: 0,
    m_lEffect: 0,
    pstVoid: std::ptr::null_mut(),
    m_bHold: false,
    m_pPriv: std::ptr::null_mut(),
}));

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
    let mut attached = false;
    with_queue(t, || attached = true, |_| Ok(()))?;
    if attached {
        state(h).note_attached(t);
    }
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
