//! What the local and the network calls of the C API share: reading C
//! strings and the bound record, the wait flag and the checks of lPop and
//! lTvmPop, the malloc'd array of records, and the argument checks and
//! outcome of lPopup and lTvmPopup.

use super::{CallResult, Fail, QUE_NORMAL, QUE_NOWAIT, SATvm, Uenum};
use crate::error::*;
use std::ffi::{CStr, c_char, c_void};
use std::marker::PhantomData;

/// Text of an optional C string (NULL: empty; invalid UTF-8 is replaced).
///
/// # Safety
/// `s` is NULL or points to a NUL-terminated string that stays valid and
/// unchanged during the call.
pub(super) unsafe fn text(s: *const c_char) -> String {
    if s.is_null() {
        return String::new();
    }
    // SAFETY: non-NULL, and NUL-terminated by the caller's contract.
    unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned()
}

/// The bound record: `len` bytes at `ptr` (a handle's `pstVoid` and `lSize`).
/// A `len` above `isize::MAX` (no object is that large, so no record is):
/// RECD_TOO_LONG, refused before any slice is formed.
///
/// # Safety
/// A non-NULL `ptr` points to at least `len` readable bytes that stay valid
/// and unchanged while the returned slice is used (the C API's contract for
/// the record bound with queueinit and friends).
pub(super) unsafe fn record<'a>(ptr: *const c_void, len: usize) -> Result<&'a [u8]> {
    if ptr.is_null() || len == 0 {
        return Err(Error::new(CONDIT_IS_NIL, "no record bound (pstVoid NULL or lSize 0)"));
    }
    if len > isize::MAX as usize {
        return Err(too_large(len));
    }
    // SAFETY: non-NULL, with len readable bytes by the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) })
}

/// A pop's output buffer as C gives it: the bytes at `out` and the length
/// the caller declares (`lSize`). No slice is formed until the pop knows
/// how many bytes it writes ([`take`](Self::take)): a local pop writes the
/// queue's record size and no more, so a declared length above the real
/// buffer's (which tvm.h allows) never becomes a slice over bytes that are
/// not the caller's.
pub(super) struct OutBuffer<'a> {
    ptr: *mut u8,
    len: usize,
    _buffer: PhantomData<&'a mut [u8]>,
}

impl<'a> OutBuffer<'a> {
    /// The buffer at `out`, declared `len` bytes long.
    ///
    /// # Safety
    /// `out` is non-NULL, and for every `n` later passed to
    /// [`take`](Self::take) points to at least `min(len, n)` writable bytes
    /// that stay valid, and are not otherwise used, for `'a` (the C API's
    /// contract: lSize bytes, or at least the record size of a local queue).
    pub(super) unsafe fn new(out: *mut c_void, len: usize) -> OutBuffer<'a> {
        OutBuffer { ptr: out.cast::<u8>(), len, _buffer: PhantomData }
    }

    /// The first `min(len, at_most)` bytes (at most `isize::MAX`: no
    /// buffer is larger), for a pop that writes at most `at_most` bytes.
    pub(super) fn take(self, at_most: usize) -> &'a mut [u8] {
        let n = self.len.min(at_most).min(isize::MAX as usize);
        // SAFETY: by `new`'s contract, `ptr` holds `min(len, at_most)`
        // writable bytes for `'a`, used by nothing else; `self` is consumed,
        // so the slice is formed once.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, n) }
    }
}

/// The error for an `lSize` that no buffer can have (above `isize::MAX`).
#[cold]
pub(super) fn too_large(len: usize) -> Error {
    Error::new(RECD_TOO_LONG, format!("lSize {len} is larger than any buffer can be"))
}

/// The wait flag of a pop: `forever` for QUE_NORMAL, `nowait` for
/// QUE_NOWAIT, NOT_SUPPT_OPT for any other value.
pub(super) fn wait_mode<W>(wait: Uenum, forever: W, nowait: W) -> Result<W> {
    match wait {
        QUE_NORMAL => Ok(forever),
        QUE_NOWAIT => Ok(nowait),
        other => Err(Error::new(NOT_SUPPT_OPT, format!("wait flag {other}: use QUE_NORMAL (0) or QUE_NOWAIT (1)"))),
    }
}

/// The body of lPop, lPopWait and lTvmPop around their ways of taking a
/// record: checks `out`, decodes the wait (`wait`: [`wait_mode`] or a
/// timeout), then has `take` fill the buffer at `out`, declared `h.lSize`
/// bytes long (see [`OutBuffer`]). m_lEffect = 1 on success.
///
/// # Safety
/// A non-NULL `out` is a buffer as [`OutBuffer::new`] requires, with
/// `len` = `h.lSize` (the C API's contract).
pub(super) unsafe fn pop_one<W, R>(
    h: &mut SATvm,
    out: *mut c_void,
    wait: impl FnOnce() -> Result<W>,
    take: impl FnOnce(&mut SATvm, OutBuffer<'_>, W) -> Result<R>,
) -> CallResult {
    if out.is_null() {
        return Err(Error::new(CONDIT_IS_NIL, "NULL output buffer").into());
    }
    let wait = wait()?;
    // SAFETY: non-NULL; the caller's contract.
    let buf = unsafe { OutBuffer::new(out, h.lSize) };
    take(h, buf, wait)?;
    Ok(1)
}

/// The outcome of a call that did `n` things and then stopped, on `stop` or
/// because it was done: the count, or the error with the count as effect.
pub(super) fn counted(n: usize, stop: Option<Error>) -> CallResult {
    match stop {
        None => Ok(n),
        Some(error) => Err(Fail { error, effect: n }),
    }
}

/// A growing malloc'd array of records, handed to C (freed with free()).
pub(super) struct MallocArray {
    ptr: *mut u8,
    /// Records the block has room for.
    cap: usize,
    /// Records in it.
    len: usize,
    /// Bytes per record.
    each: usize,
}

impl MallocArray {
    /// An empty array of records of `each` bytes (nothing allocated yet).
    fn new(each: usize) -> MallocArray {
        MallocArray { ptr: std::ptr::null_mut(), cap: 0, len: 0, each }
    }

    /// Records in the array.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Makes room for `more` records after the current ones and returns that
    /// room; [`added`](Self::added) then counts those written into it.
    pub(super) fn reserve(&mut self, more: usize) -> Result<&mut [u8]> {
        let each = self.each;
        if self.len + more > self.cap {
            let cap = (self.cap * 2).max(self.len + more).max(16);
            let bytes = cap.checked_mul(each).ok_or_else(|| Error::new(MALLC_MEM_ERR, "array size overflows"))?;
            // SAFETY: realloc of NULL or of our own malloc'd block.
            let ptr = unsafe { libc::realloc(self.ptr.cast::<c_void>(), bytes) }.cast::<u8>();
            if ptr.is_null() {
                return Err(Error::new(MALLC_MEM_ERR, format!("cannot allocate {bytes} bytes")));
            }
            self.ptr = ptr;
            self.cap = cap;
        }
        // SAFETY: len + more <= cap, and the block holds cap * each bytes.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.ptr.add(self.len * each), more * each) })
    }

    /// Counts `n` records written into the room [`reserve`](Self::reserve) made.
    pub(super) fn added(&mut self, n: usize) {
        debug_assert!(self.len + n <= self.cap);
        self.len += n;
    }

    /// Appends one record (`rec`, at most `each` bytes, zero-filled up to it).
    pub(super) fn push(&mut self, rec: &[u8]) -> Result<()> {
        let slot = self.reserve(1)?;
        let n = rec.len().min(slot.len());
        slot[..n].copy_from_slice(&rec[..n]);
        slot[n..].fill(0);
        self.added(1);
        Ok(())
    }

    fn into_raw(self) -> *mut c_void {
        let p = self.ptr.cast::<c_void>();
        std::mem::forget(self);
        p
    }
}

impl Drop for MallocArray {
    fn drop(&mut self) {
        // SAFETY: NULL or our own malloc'd block.
        unsafe { libc::free(self.ptr.cast::<c_void>()) };
    }
}

/// The body of lPopup and lTvmPopup around their ways of taking records:
/// checks the arguments (`*out` = NULL and `*out_n` = 0 once both are
/// known non-NULL), runs `take`, which fills an array of records of
/// `h.lSize` bytes and says why it stopped short of `expect` (None: it did
/// not), then hands the records to C and maps the stop to the outcome the
/// two calls document: RC_SUCC with `expect` records, or (secs == 0) with at
/// least one; NO_DATA_FOUND when none came (in time); any other stop with
/// the records taken before it. `take` failing gives its error, no records.
///
/// # Safety
/// `out_n` and `out` are NULL or writable (the C API's contract).
pub(super) unsafe fn popup(
    h: &mut SATvm,
    expect: usize,
    secs: libc::time_t,
    out_n: *mut usize,
    out: *mut *mut c_void,
    take: impl FnOnce(&mut SATvm, &mut MallocArray) -> Result<Option<Error>>,
) -> CallResult {
    if out_n.is_null() || out.is_null() {
        return Err(Error::new(CONDIT_IS_NIL, "NULL out_n or out").into());
    }
    // SAFETY: both checked non-NULL; the caller provides them writable.
    unsafe {
        *out = std::ptr::null_mut();
        *out_n = 0;
    }
    if expect == 0 || secs < 0 {
        return Err(Error::new(CONDIT_IS_NIL, "expect must be >= 1 and secs >= 0").into());
    }
    let mut array = MallocArray::new(h.lSize);
    let stop = take(h, &mut array)?;
    let n = array.len();
    if n > 0 {
        // SAFETY: checked non-NULL above.
        unsafe {
            *out_n = n;
            *out = array.into_raw();
        }
    }
    match stop {
        Some(e) if n > 0 && secs == 0 && e.code() == NO_DATA_FOUND => Ok(n),
        Some(e) if n == 0 && e.code() == MQUE_WAIT_TMO => Err(Error::code_only(NO_DATA_FOUND).into()),
        stop => counted(n, stop),
    }
}
