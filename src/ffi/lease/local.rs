//! lPopLease, lAck, lAckPopLease, lRelease, lReject, lExtendLease: thin
//! wrappers over [`crate::Queue::pop_lease`] and its companions.

use super::token::*;
use crate::error::*;
use crate::ffi::common::{OutBuffer, wait_mode};
use crate::ffi::handle::on_queue_kept;
use crate::ffi::{CallResult, SATvm, Uenum, call};
use crate::queue::Wait;
use std::ffi::{c_long, c_void};

/// As lPop, and the record is leased for `lease_ms` milliseconds (0: the
/// queue's lease time; deadlines are kept on a clock that moves by ticks of
/// 1 to 4 ms: a lease never runs out early, and may run out up to two ticks
/// late) to the caller, who ends the lease with lAck (done),
/// lRelease (put back) or lReject (dead letter), or extends it with
/// lExtendLease. `*lease` receives the token (on failure, a token that every
/// call refuses). If the lease runs out first, or this process dies, the
/// record is delivered again (its `deliveries` raised); on a durable queue
/// (`--durable always`) the lease is on stable storage when this returns,
/// and a machine crash ends it the same way. Records waiting to
/// be delivered again come before the queue's. The queue must have been
/// created with leases (tvmq create ... --lease-ms MS). m_lEffect = 1 on
/// success. Thread-safe (one handle per thread).
/// Errors: those of lPop (CONDIT_IS_NIL also for a NULL lease or a lease_ms
/// below 0 or above 31536000000, a year); LEASE_LIMIT (the queue's maximum of leases are in flight:
/// returned at once, whatever `wait` says); NOT_SUPPT_OPT (the queue has no
/// leases).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lPopLease(
    p: *mut SATvm,
    out: *mut c_void,
    wait: Uenum,
    lease_ms: c_long,
    lease: *mut TvmLease,
) -> c_long {
    let body = |h: &mut SATvm| -> CallResult {
        if out.is_null() || lease.is_null() {
            return Err(Error::new(CONDIT_IS_NIL, "NULL output buffer or lease").into());
        }
        let got = lease_nanos(lease_ms).and_then(|lease_ns| {
            let wait = wait_mode(wait, Wait::Forever, Wait::NoWait)?;
            // SAFETY: checked non-NULL; the caller provides `out` with at
            // least min(p->lSize, the record size) writable bytes.
            let buf = unsafe { OutBuffer::new(out, h.lSize) };
            on_queue_kept(
                h,
                #[inline(always)]
                |q, kept| q.pop_lease_kept(buf.take(q.record_size()), wait, lease_ns, kept),
            )
        });
        match got {
            Ok((_, leased)) => {
                // SAFETY: checked non-NULL; the caller provides a writable TvmLease.
                unsafe { lease.write(TvmLease::from_lease(&leased)) };
                Ok(1)
            }
            Err(e) => {
                // On failure, a token that every call refuses.
                // SAFETY: as above.
                unsafe { lease.write(TvmLease::ZERO) };
                Err(e.into())
            }
        }
    };
    // SAFETY: C callers pass NULL or a handle made by pGetSATvm/pCloneSATvm.
    unsafe { call(p, body) }
}

/// Acknowledges the delivery of `*lease` on queue p->tblName: the record is
/// done and gone. On a durable queue (`--durable always`) it returns once
/// the acknowledgement is on stable storage: the record never comes back,
/// even after a machine crash. m_lEffect = 1 on success. Thread-safe (one
/// handle per thread; one call at a time per token).
/// Errors: LEASE_EXPIRED (the lease ran out, and the record may have gone
/// to another consumer; or it was already acknowledged, released or
/// rejected), LEASE_INVALID (a token of another queue, or a zeroed or
/// garbage one), CONDIT_IS_NIL (NULL handle or lease), TBL_NOT_FOUND (the
/// queue was dropped), SHM_ERR_EIDRM, SYNC_FAILED (durable queue:
/// acknowledged, but its sync failed; a machine crash may deliver it again).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lAck(p: *mut SATvm, lease: *mut TvmLease) -> c_long {
    let body = |h: &mut SATvm| -> CallResult {
        // SAFETY: NULL or a readable TvmLease, by the caller's contract.
        let t = unsafe { token(lease) }?;
        on_queue_kept(
            h,
            #[inline(always)]
            |q, _| q.ack(&t),
        )?;
        Ok(1)
    };
    // SAFETY: C callers pass NULL or a handle made by pGetSATvm/pCloneSATvm.
    unsafe { call(p, body) }
}

/// Acknowledges the delivery of `*done` and leases the next record of queue
/// p->tblName, in one call: lAck(p, done), then lPopLease(p, out, wait,
/// lease_ms, lease), for less than the two calls (a consumer that works
/// record after record). `done` and `lease` may be the same token
/// (`lAckPopLease(p, &l, &rec, QUE_NORMAL, 0, &l)`). m_lEffect = 1 on
/// success. Thread-safe like lPopLease and lAck (one handle per thread; one
/// call at a time per token).
/// Returns RC_SUCC when both are done: `*lease` holds the new token.
/// Otherwise RC_FAIL, and `done->deliveries` says which part failed:
/// - not 0: the acknowledgement failed, nothing was acknowledged or taken,
///   `*done` and `*lease` are unchanged: the errors of lAck (LEASE_EXPIRED,
///   LEASE_INVALID, TBL_NOT_FOUND, SHM_ERR_EIDRM), CONDIT_IS_NIL (a NULL
///   handle, `done`, `out` or `lease`, a lease_ms below 0 or above 31536000000, a year), NOT_SUPPT_OPT
///   (a `wait` other than QUE_NORMAL and QUE_NOWAIT, or a queue without
///   leases);
/// - 0: `*done` was acknowledged (and set to a token every call refuses),
///   then the lease failed: the errors of lPopLease (e.g. NO_DATA_FOUND,
///   LEASE_LIMIT); `*lease` holds a refused token. Also SYNC_FAILED
///   (durable queue: acknowledged, its sync failed, nothing taken).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lAckPopLease(
    p: *mut SATvm,
    done: *mut TvmLease,
    out: *mut c_void,
    wait: Uenum,
    lease_ms: c_long,
    lease: *mut TvmLease,
) -> c_long {
    let body = |h: &mut SATvm| -> CallResult {
        if out.is_null() || lease.is_null() || done.is_null() {
            return Err(Error::new(CONDIT_IS_NIL, "NULL output buffer or lease").into());
        }
        // SAFETY: checked non-NULL; a readable TvmLease by the caller's contract.
        let t = unsafe { token(done) }?;
        let lease_ns = lease_nanos(lease_ms)?;
        let wait = wait_mode(wait, Wait::Forever, Wait::NoWait)?;
        // SAFETY: checked non-NULL; the caller provides `out` with at least
        // min(p->lSize, the record size) writable bytes.
        let buf = unsafe { OutBuffer::new(out, h.lSize) };
        let acked =
            on_queue_kept(h, |q, kept| q.ack_pop_lease_kept(&t, buf.take(q.record_size()), wait, lease_ns, kept));
        let got = match acked {
            Ok(got) => got,
            Err(e) if e.code() == SYNC_FAILED => {
                // Acknowledged, not durably; nothing taken.
                // SAFETY: checked non-NULL; writable by the caller's contract.
                unsafe { done.write(TvmLease::ZERO) };
                return Err(e.into());
            }
            Err(e) => return Err(e.into()),
        };
        let token = got.as_ref().map_or(TvmLease::ZERO, |(_, leased)| TvmLease::from_lease(leased));
        // SAFETY: both checked non-NULL, writable by the caller's contract.
        unsafe { hand_over(done, lease, token) };
        got?;
        Ok(1)
    };
    // SAFETY: C callers pass NULL or a handle made by pGetSATvm/pCloneSATvm.
    unsafe { call(p, body) }
}

/// Puts the record of `*lease` back into queue p->tblName: it may be
/// delivered again `delay_ms` milliseconds from now (0: at once), to any
/// consumer. A record already delivered the queue's maximum of deliveries
/// goes to the dead-letter queue instead (as lReject). m_lEffect = 1 on
/// success. Thread-safe (one handle per thread; one call at a time per token).
/// Errors: those of lAck; CONDIT_IS_NIL (a delay_ms below 0 or above 31536000000, a year); at the delivery
/// limit, those of lReject.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lRelease(p: *mut SATvm, lease: *mut TvmLease, delay_ms: c_long) -> c_long {
    let body = |h: &mut SATvm| -> CallResult {
        // SAFETY: NULL or a readable TvmLease, by the caller's contract.
        let t = unsafe { token(lease) }?;
        let delay = millis(delay_ms, "delay")?;
        on_queue_kept(h, |q, _| q.release(&t, delay))?;
        Ok(1)
    };
    // SAFETY: C callers pass NULL or a handle made by pGetSATvm/pCloneSATvm.
    unsafe { call(p, body) }
}

/// Moves the record of `*lease` from queue p->tblName to the queue's
/// dead-letter queue (tvmq create ... --dead-letter ID), or drops it when it
/// has none; counted either way (tvmq stat). m_lEffect = 1 on success.
/// Thread-safe (one handle per thread; one call at a time per token).
/// Errors: those of lAck; those of pushing into the dead-letter queue
/// (TBL_NOT_FOUND: it does not exist, DATA_SPC_FULL, RECD_TOO_LONG), after
/// which the lease is still kept.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lReject(p: *mut SATvm, lease: *mut TvmLease) -> c_long {
    let body = |h: &mut SATvm| -> CallResult {
        // SAFETY: NULL or a readable TvmLease, by the caller's contract.
        let t = unsafe { token(lease) }?;
        on_queue_kept(h, |q, _| q.reject(&t))?;
        Ok(1)
    };
    // SAFETY: C callers pass NULL or a handle made by pGetSATvm/pCloneSATvm.
    unsafe { call(p, body) }
}

/// The lease of `*lease` on queue p->tblName now runs out `lease_ms`
/// milliseconds from now (0: the queue's lease time). Updates `*lease`:
/// copies of the old token are stale. m_lEffect = 1 on success. Thread-safe
/// (one handle per thread; one call at a time per token).
/// Errors: those of lAck (LEASE_EXPIRED if the lease already ran out);
/// CONDIT_IS_NIL (a lease_ms below 0 or above 31536000000, a year).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lExtendLease(p: *mut SATvm, lease: *mut TvmLease, lease_ms: c_long) -> c_long {
    let body = |h: &mut SATvm| -> CallResult {
        // SAFETY: NULL or a readable TvmLease, by the caller's contract.
        let mut t = unsafe { token(lease) }?;
        let lease_time = millis(lease_ms, "lease time")?;
        on_queue_kept(h, |q, _| q.extend_lease(&mut t, lease_time))?;
        // SAFETY: `token` found it non-NULL; the caller provides it writable.
        unsafe { lease.write(TvmLease::from_lease(&t)) };
        Ok(1)
    };
    // SAFETY: C callers pass NULL or a handle made by pGetSATvm/pCloneSATvm.
    unsafe { call(p, body) }
}
