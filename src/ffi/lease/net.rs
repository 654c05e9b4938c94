//! lTvmPopLease, lTvmAck, lTvmAckPopLease, lTvmRelease, lTvmReject,
//! lTvmExtendLease: the lease calls on the server a handle is connected to,
//! over [`crate::client`].

use super::token::*;
use crate::client::PopWait;
use crate::error::*;
use crate::ffi::common::{OutBuffer, wait_mode};
use crate::ffi::net::{client, popping};
use crate::ffi::{CallResult, SATvm, Uenum, call};
use std::ffi::{c_long, c_void};

/// As lPopLease, on the server handle p is connected to (lTvmConnect):
/// leases the oldest record of queue p->tblName (its key: the decimal id)
/// into the p->lSize bytes at `out` (zero bytes after a shorter record), for
/// `lease_ms` milliseconds (0: the queue's lease time), with tvmq serve's
/// TVMQ.LEASE, or on a Redis or Redis Cluster with tvmq's lease script
/// (docs/client.md, "Leases on Redis": the queue's lease options must have
/// been stored with lTvmCreateQueueEx). QUE_NORMAL waits for a record,
/// QUE_NOWAIT does not (NO_DATA_FOUND). `*lease` receives the token, as lPopLease's (on failure,
/// one every call refuses); end it with lTvmAck, lTvmRelease or lTvmReject,
/// extend it with lTvmExtendLease, through the same handle.
/// tvmq serve, owner mode: the lease belongs to the handle's connection. If
/// that connection closes or breaks (the program dies, is killed, or
/// vTvmDisconnect is called), the server delivers the record again at once
/// (its `deliveries` raised); then the token's calls fail with
/// LEASE_EXPIRED. A lease also runs out by time, as locally. On a Redis a
/// lease ends by time only (a consumer that dies holding one has its record
/// delivered again when it runs out), and its token works on any handle
/// connected there; records released or run out are delivered again before
/// the list's, and a record at the queue's delivery limit goes to its
/// dead-letter list instead; a blocked call looks again at most every
/// 200 ms for records released by others. A record
/// longer than p->lSize is released (delivered again) and RECD_TOO_LONG
/// returned. A handle sharing a connection (lTvmShare) takes and ends its
/// leases on its own private connection. m_lEffect = 1 on success.
/// Threads: one handle per thread, as lTvmPop; a token is used with the
/// handle that took it, one call at a time.
/// Errors: those of lTvmPop (SERV_NOT_CONN, SOCK_*, TBL_NOT_FOUND,
/// NO_DATA_FOUND, RECD_TOO_LONG; CONDIT_IS_NIL also for a NULL lease or a
/// lease_ms below 0 or above 31536000000, a year); LEASE_LIMIT (the queue's maximum of leases are in
/// flight, at once whatever `wait`); NOT_SUPPT_OPT (the queue has no
/// leases: on a Redis, no `{t}:opts`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lTvmPopLease(
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
        let got = millis(lease_ms, "lease time").and_then(|time| {
            let wait = wait_mode(wait, PopWait::Forever, PopWait::NoWait)?;
            let (c, t, len) = popping(h)?;
            // SAFETY: checked non-NULL; the caller provides `out` with at
            // least p->lSize writable bytes (a shorter record is followed
            // by zero bytes up to lSize).
            let buf = unsafe { OutBuffer::new(out, len) }.take(len);
            c.pop_lease(t, buf, wait, time.as_millis() as u64)
        });
        let token = got.as_ref().map_or(TvmLease::ZERO, TvmLease::from_net);
        // SAFETY: checked non-NULL; the caller provides a writable TvmLease.
        unsafe { lease.write(token) };
        got?;
        Ok(1)
    };
    // SAFETY: C callers pass NULL or a handle made by pGetSATvm/pCloneSATvm.
    unsafe { call(p, body) }
}

/// As lAck, on the server: acknowledges the lease `*lease` of queue
/// p->tblName taken by lTvmPopLease through this handle (TVMQ.ACK; on a
/// Redis, the lease script, through any handle). Fenced: once a lease ran
/// out, neither its token nor a copy acknowledges the record's next
/// delivery. m_lEffect = 1 on success. With lTvmRequireReplicas, RC_SUCC
/// comes once the replicas have the acknowledgement. Threads: as
/// lTvmPopLease.
/// Errors: LEASE_EXPIRED (the lease ran out, was already ended, or the
/// handle's connection broke since it was taken: the server released it),
/// LEASE_INVALID (a local token, a token of another queue, a zeroed or
/// garbage one), CONDIT_IS_NIL, SERV_NOT_CONN, SOCK_*, TBL_NOT_FOUND,
/// NOT_SUPPT_OPT (a Redis queue without lease options), REPL_TIMEOUT (with
/// lTvmRequireReplicas: acknowledged on the master only).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lTvmAck(p: *mut SATvm, lease: *mut TvmLease) -> c_long {
    let body = |h: &mut SATvm| -> CallResult {
        // SAFETY: NULL or a readable TvmLease, by the caller's contract.
        let l = unsafe { net_token(lease, h.tblName) }?;
        client(h)?.ack(&l)?;
        Ok(1)
    };
    // SAFETY: C callers pass NULL or a handle made by pGetSATvm/pCloneSATvm.
    unsafe { call(p, body) }
}

/// As lAckPopLease, on the server: acknowledges `*done` (as lTvmAck) and
/// leases the next record of queue p->tblName (as lTvmPopLease) in one
/// call: on a Redis (a queue not spread) one run of the lease script, one
/// round trip instead of two; on tvmq serve the two calls. `done` and
/// `lease` may be the same token. m_lEffect = 1 on success. With
/// lTvmRequireReplicas the acknowledgement is replicated before RC_SUCC.
/// Returns RC_SUCC when both are done: `*lease` holds the new token.
/// Otherwise RC_FAIL, and `done->deliveries` says which part failed:
/// not 0: the acknowledgement failed (the errors of lTvmAck), nothing was
/// acknowledged or taken, both tokens unchanged; 0: `*done` was
/// acknowledged (and set to a token every call refuses), then the lease
/// failed (the errors of lTvmPopLease: NO_DATA_FOUND, LEASE_LIMIT, ...),
/// `*lease` refused by every call. Threads: as lTvmPopLease.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lTvmAckPopLease(
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
        let d = unsafe { net_token(done, h.tblName) }?;
        let time = millis(lease_ms, "lease time")?;
        let wait = wait_mode(wait, PopWait::Forever, PopWait::NoWait)?;
        let (c, t, len) = popping(h)?;
        // SAFETY: checked non-NULL; the caller provides `out` with at least
        // p->lSize writable bytes (a shorter record is followed by zero
        // bytes up to lSize).
        let buf = unsafe { OutBuffer::new(out, len) }.take(len);
        let got = c.ack_pop_lease(&d, t, buf, wait, time.as_millis() as u64)?;
        let token = got.as_ref().map_or(TvmLease::ZERO, TvmLease::from_net);
        // SAFETY: both checked non-NULL, writable by the caller's contract.
        unsafe { hand_over(done, lease, token) };
        got?;
        Ok(1)
    };
    // SAFETY: C callers pass NULL or a handle made by pGetSATvm/pCloneSATvm.
    unsafe { call(p, body) }
}

/// As lRelease, on the server (TVMQ.RELEASE ... DELAY): the record of
/// `*lease` is delivered again `delay_ms` milliseconds from now (0: at
/// once); at the queue's delivery limit it goes to the dead-letter queue.
/// m_lEffect = 1 on success. Threads: as lTvmPopLease.
/// Errors: those of lTvmAck; CONDIT_IS_NIL (a delay_ms below 0 or above 31536000000, a year); at the
/// delivery limit, those of lTvmReject.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lTvmRelease(p: *mut SATvm, lease: *mut TvmLease, delay_ms: c_long) -> c_long {
    let body = |h: &mut SATvm| -> CallResult {
        // SAFETY: NULL or a readable TvmLease, by the caller's contract.
        let l = unsafe { net_token(lease, h.tblName) }?;
        let delay = millis(delay_ms, "delay")?;
        client(h)?.release(&l, delay.as_millis() as u64)?;
        Ok(1)
    };
    // SAFETY: C callers pass NULL or a handle made by pGetSATvm/pCloneSATvm.
    unsafe { call(p, body) }
}

/// As lReject, on the server (TVMQ.REJECT): the record of `*lease` goes to
/// the queue's dead-letter queue, or is dropped without one. m_lEffect = 1
/// on success. Threads: as lTvmPopLease.
/// Errors: those of lTvmAck; those of the push into the dead-letter queue
/// (TBL_NOT_FOUND, DATA_SPC_FULL, RECD_TOO_LONG), after which the lease is
/// still kept.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lTvmReject(p: *mut SATvm, lease: *mut TvmLease) -> c_long {
    let body = |h: &mut SATvm| -> CallResult {
        // SAFETY: NULL or a readable TvmLease, by the caller's contract.
        let l = unsafe { net_token(lease, h.tblName) }?;
        client(h)?.reject(&l)?;
        Ok(1)
    };
    // SAFETY: C callers pass NULL or a handle made by pGetSATvm/pCloneSATvm.
    unsafe { call(p, body) }
}

/// As lExtendLease, on the server (TVMQ.EXTEND): the lease of `*lease` now
/// runs out `lease_ms` milliseconds from now (0: the queue's lease time).
/// Updates `*lease`: copies of the old token are stale. m_lEffect = 1 on
/// success. Threads: as lTvmPopLease.
/// Errors: those of lTvmAck (LEASE_EXPIRED if it already ran out);
/// CONDIT_IS_NIL (a lease_ms below 0 or above 31536000000, a year).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lTvmExtendLease(p: *mut SATvm, lease: *mut TvmLease, lease_ms: c_long) -> c_long {
    let body = |h: &mut SATvm| -> CallResult {
        // SAFETY: NULL or a readable TvmLease, by the caller's contract.
        let mut l = unsafe { net_token(lease, h.tblName) }?;
        let time = millis(lease_ms, "lease time")?;
        client(h)?.extend_lease(&mut l, time)?;
        // SAFETY: `net_token` found it non-NULL; the caller provides it writable.
        unsafe { lease.write(TvmLease::from_net(&l)) };
        Ok(1)
    };
    // SAFETY: C callers pass NULL or a handle made by pGetSATvm/pCloneSATvm.
    unsafe { call(p, body) }
}
