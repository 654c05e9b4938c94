//! The calling thread's outcome of its last call in the C layer
//! (lGetTErrno, lGetEffect). It lives in the attachment table's thread
//! state ([`crate::attach`]), which every call reaches anyway: one
//! thread-local per call.

use std::ffi::c_long;

/// Records the outcome of the calling thread's last call.
#[inline]
pub(super) fn set_last(code: c_long, effect: usize) {
    crate::attach::set_outcome(code, effect);
}

/// The outcome of the calling thread's last call: error code, effect.
pub(super) fn last() -> (c_long, usize) {
    crate::attach::outcome()
}
