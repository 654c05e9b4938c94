//! The calling thread's last error's detail text ([`sGetTErrDetail`]): what
//! the [`Error`](crate::Error) said beyond its code (the server's answer,
//! the OS error, the path involved), kept for C, which gets only the code.
//!
//! Written only when a call fails (a success leaves it, and the getter
//! answers "" while the thread's last code is 0), so that the calls that
//! succeed pay nothing for it.

use std::cell::RefCell;
use std::ffi::c_char;

thread_local! {
    /// The detail of the thread's last failure, NUL-terminated (empty: "").
    static DETAIL: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Keeps `detail` as the calling thread's last error's (cut at a NUL it
/// holds: C reads up to the first). Does nothing while the thread ends, or
/// when a signal handler's call interrupted this one.
pub(super) fn set(detail: &str) {
    let _ = DETAIL.try_with(|d| {
        if let Ok(mut d) = d.try_borrow_mut() {
            let text = detail.as_bytes();
            let text = text.iter().position(|&b| b == 0).map_or(text, |at| &text[..at]);
            d.clear();
            d.extend_from_slice(text);
            d.push(0);
        }
    });
}

/// Returns the detail text of the calling thread's last error: what
/// happened beyond its code, in the library's words (for lTvmConnect after
/// a refused AUTH: "127.0.0.1:5050 refused the credentials: WRONGPASS
/// invalid username-password pair or user is disabled."; for a missing
/// queue: the path looked at); "" when the last call succeeded (or after
/// vSetTErrno), or when its error has no more to say than sGetTError(code).
/// The string is the calling thread's: valid until its next call of this
/// library, not to be modified or freed. Never fails; never NULL.
/// A tvmq addition, not in STVM.
#[unsafe(no_mangle)]
pub extern "C" fn sGetTErrDetail() -> *const c_char {
    const EMPTY: &[u8; 1] = b"\0";
    if super::thread::last().0 == 0 {
        return EMPTY.as_ptr().cast();
    }
    DETAIL
        .try_with(|d| match d.try_borrow() {
            // The buffer lives as long as the thread and moves only when a
            // later failure of this thread rewrites it.
            Ok(d) if !d.is_empty() => d.as_ptr().cast(),
            _ => EMPTY.as_ptr().cast(),
        })
        .unwrap_or(EMPTY.as_ptr().cast())
}
