//! The C ABI of `tvm.h`: thin wrappers over [`crate::Queue`] and
//! [`crate::Attachments`]. These are the functions a C program calls; Rust code
//! may call them too (the benchmark does, to measure what C programs get),
//! but the safe API ([`crate::Queue`]) is the one to use from Rust.
//!
//! Every `extern "C"` function catches panics (none may unwind into C),
//! treats NULL pointers as `CONDIT_IS_NIL`, and records its outcome both in
//! the handle (`m_lErrno`, `m_lEffect`) and in the calling thread's last
//! error (`lGetTErrno`, `lGetEffect`, and on failure `sGetTErrDetail`).
#![allow(non_snake_case, non_camel_case_types, clippy::missing_safety_doc)]

mod common;
mod create;
mod detail;
mod durable;
mod handle;
mod lease;
mod local;
mod net;
mod stvm;
mod thread;
mod watch;

pub use create::{
    TVM_DURABLE_ALWAYS, TVM_DURABLE_INTERVAL, TVM_DURABLE_NONE, TvmQueueOptions, lCreateQueueEx, lInitQueueOptions,
};
pub use detail::sGetTErrDetail;
pub use durable::lSyncQueue;
pub use handle::{
    lAttchTable, lInitSATvm, pCloneSATvm, pGetSATvm, vCloneFree, vHoldConnect, vHoldRelease, vTblDisconnect,
};
pub use lease::{TvmLease, lAck, lAckPopLease, lExtendLease, lPopLease, lReject, lRelease};
pub use local::{
    lCircleQueue, lDropTable, lPop, lPopWait, lPopup, lPush, lPushs, lQueueInfo, lTableQueue, lTvmDefField,
    lTvmDefQueue,
};
pub use net::{
    lAsyPush, lAsyWait, lTvmConnect, lTvmCount, lTvmDropTable, lTvmPop, lTvmPopup, lTvmPush, lTvmResetLock, lTvmShare,
    lTvmTruncate, vTvmDisconnect,
};
pub use stvm::{
    bTableIsExist, lCount, lDumpTable, lExportFile, lGetRowSize, lGetTblRow, lGetTblValid, lImportFile, lResetLock,
    lTruncate, pInitSATvm, vCloneQueue, vForceDisconnect, vInitSATvm,
};
pub use watch::{TvmQueueStats, lListQueues, lQueueStats};

use crate::error::{CONDIT_IS_NIL, Error, SVR_EXCEPTION};
use std::ffi::{CStr, c_char, c_long, c_uint, c_ulonglong, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};

/// Queue identifier (STVM programs use small numbers such as 21).
pub type TABLE = c_uint;
/// Unsigned enumeration value (error codes, wait flags).
pub type Uenum = c_uint;
/// Return type of a record-layout function passed to lTableQueue.
pub type CREATE = c_long;
/// A record-layout function: `CREATE f(TABLE t)`, written with QUEUE/FIELD/FINISH.
pub type TCREATE = Option<unsafe extern "C" fn(TABLE) -> CREATE>;

/// Success.
pub const RC_SUCC: c_long = 0;
/// Failure: see m_lErrno / lGetTErrno().
pub const RC_FAIL: c_long = -1;
/// STVM's "not found" return value (= NO_DATA_FOUND).
pub const RC_NOTFOUND: c_long = 24;
/// STVM's "matches" return value (of its table calls; no queue call returns it).
pub const RC_MATCH: c_long = 2;
/// STVM's "does not match" return value (of its table calls; no queue call returns it).
pub const RC_MISMA: c_long = 1;
/// STVM's "go on" return value (of its table calls; no queue call returns it).
pub const RC_CONTU: c_long = -5;
/// STVM's "connection closed" return value (of its server; no call of
/// tvmq returns it: a closed connection gives RC_FAIL with SOCK_IO_RESET).
pub const RC_CLOSE: c_long = -9;
/// lPop/lTvmPop: block until a record arrives.
pub const QUE_NORMAL: Uenum = 0;
/// lPop/lTvmPop: return NO_DATA_FOUND at once when the queue is empty.
pub const QUE_NOWAIT: Uenum = 1;
/// FIELD kind: characters.
pub const FIELD_CHAR: c_long = 1;
/// FIELD kind: a long integer.
pub const FIELD_LONG: c_long = 2;
/// FIELD kind: a double.
pub const FIELD_DOUB: c_long = 4;

// One fact, two spellings: the C constants are the schema's kind numbers.
const _: () = assert!(
    FIELD_CHAR == crate::schema::FieldKind::Char as c_long
        && FIELD_LONG == crate::schema::FieldKind::Long as c_long
        && FIELD_DOUB == crate::schema::FieldKind::Double as c_long
);

/// The handle every call takes. Programs and macros use the members up to
/// pstVoid; the rest is private to the library.
#[repr(C)]
pub struct SATvm {
    /// Size in bytes of the bound record (set by queueinit and friends).
    pub lSize: usize,
    /// Queue the calls of this handle work on.
    pub tblName: TABLE,
    /// Error code of the last failed call on this handle (0 after a success).
    pub m_lErrno: Uenum,
    /// Records affected by the last call on this handle.
    pub m_lEffect: usize,
    /// The bound record buffer (lPush reads lSize bytes from it).
    pub pstVoid: *mut c_void,
    /// Private: set by vHoldConnect, cleared by vHoldRelease.
    pub m_bHold: bool,
    /// Private: the library's state for this handle.
    pub m_pPriv: *mut c_void,
}

/// Why a call failed, and how many records it still affected.
struct Fail {
    error: Error,
    effect: usize,
}

impl From<Error> for Fail {
    fn from(error: Error) -> Fail {
        Fail { error, effect: 0 }
    }
}

impl From<u32> for Fail {
    fn from(code: u32) -> Fail {
        Fail { error: Error::code_only(code), effect: 0 }
    }
}

type CallResult = Result<usize, Fail>;

use thread::set_last;

/// Runs `body` on the handle with panics caught, and records its outcome:
/// RC_SUCC with `m_lEffect` = the returned count, or RC_FAIL with the code.
///
/// # Safety
/// `p` is NULL or points to a valid SATvm that no other thread uses meanwhile.
#[inline]
unsafe fn call(p: *mut SATvm, body: impl FnOnce(&mut SATvm) -> CallResult) -> c_long {
    // SAFETY: a non-NULL handle comes from pGetSATvm/pCloneSATvm (or is a
    // caller-owned SATvm), which C code passes to one thread at a time.
    let Some(h) = (unsafe { p.as_mut() }) else {
        set_last(CONDIT_IS_NIL as c_long, 0);
        detail::set("NULL handle");
        return RC_FAIL;
    };
    let outcome = catch_unwind(AssertUnwindSafe(|| body(&mut *h)))
        .unwrap_or_else(|_| Err(Error::new(SVR_EXCEPTION, "internal panic (reported on stderr)").into()));
    match outcome {
        Ok(effect) => {
            h.m_lErrno = 0;
            h.m_lEffect = effect;
            set_last(0, effect);
            RC_SUCC
        }
        Err(f) => {
            h.m_lErrno = f.error.code();
            h.m_lEffect = f.effect;
            set_last(c_long::from(f.error.code()), f.effect);
            detail::set(f.error.detail());
            RC_FAIL
        }
    }
}

/// Like [`call`] for functions without a handle: records the thread's last error.
fn call_no_handle(body: impl FnOnce() -> CallResult) -> c_long {
    let outcome = catch_unwind(AssertUnwindSafe(body))
        .unwrap_or_else(|_| Err(Error::new(SVR_EXCEPTION, "internal panic (reported on stderr)").into()));
    match outcome {
        Ok(effect) => {
            set_last(0, effect);
            RC_SUCC
        }
        Err(f) => {
            set_last(c_long::from(f.error.code()), f.effect);
            detail::set(f.error.detail());
            RC_FAIL
        }
    }
}

/// Runs a function without result, swallowing any panic (nothing to report to).
fn quietly(body: impl FnOnce()) {
    let _ = catch_unwind(AssertUnwindSafe(body));
}

/// Returns the message of an error code: a constant, NUL-terminated string
/// that the caller must not modify or free. Any value (negative or unknown
/// too) gives a message; never fails.
#[unsafe(no_mangle)]
pub extern "C" fn sGetTError(code: c_long) -> *mut c_char {
    #[allow(clippy::useless_conversion)] // c_long is 32 bits on some targets
    let code = i64::from(code);
    crate::error::c_message(code).as_ptr() as *mut c_char
}

/// Returns the name of an error code, as its #define spells it
/// ("TBL_NOT_FOUND" for 44): a constant, NUL-terminated string that the
/// caller must not modify or free; NULL for a value that is no code
/// (negative, or above the last). Never fails; thread-safe. Bindings in
/// other languages name the codes with it rather than keep a copy of the list.
#[unsafe(no_mangle)]
pub extern "C" fn sGetTErrName(code: c_long) -> *const c_char {
    #[allow(clippy::useless_conversion)] // c_long is 32 bits on some targets
    let code = i64::from(code);
    crate::error::c_name(code).map_or(std::ptr::null(), CStr::as_ptr)
}

/// Returns the calling thread's last error code (0 after a success).
#[unsafe(no_mangle)]
pub extern "C" fn lGetTErrno() -> c_long {
    thread::last().0
}

/// Sets the calling thread's last error code (its detail text,
/// sGetTErrDetail(), becomes "").
#[unsafe(no_mangle)]
pub extern "C" fn vSetTErrno(code: c_long) {
    set_last(code, thread::last().1);
    detail::set("");
}

/// Returns the number of records affected by the calling thread's last call.
#[unsafe(no_mangle)]
pub extern "C" fn lGetEffect() -> usize {
    thread::last().1
}

/// Returns the current time in milliseconds since the Unix epoch.
#[unsafe(no_mangle)]
pub extern "C" fn get_tick_time() -> c_ulonglong {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as c_ulonglong)
}
