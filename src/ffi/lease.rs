//! The lease calls of the C API (acknowledged consumption, "Beyond STVM"):
//! lPopLease, lAck, lRelease, lReject, lExtendLease, and the TvmLease token.
//! Thin wrappers over [`crate::Queue::pop_lease`] and its companions; and
//! their network twins lTvmPopLease, lTvmAck, lTvmRelease, lTvmReject,
//! lTvmExtendLease over [`crate::client`] (tvmq serve's TVMQ.LEASE, ...),
//! with the same token: a network token carries [`NET_MARK`] in its sixth
//! word, so that either kind of call refuses the other's (LEASE_INVALID).

use super::common::{out_buffer, wait_mode};
use super::net::{client, popping};
use super::thread::on_queue_kept;
use super::{CallResult, SATvm, Uenum, call};
use crate::client::{NetLease, PopWait};
use crate::error::*;
use crate::queue::{Lease, Wait};
use crate::spec::MAX_LEASE_MS;
use std::ffi::{c_long, c_uint, c_ulonglong, c_void};
use std::time::Duration;

/// A leased delivery: allocated by the caller, filled by lPopLease, passed
/// to lAck, lRelease, lReject or lExtendLease (which updates it). Plain
/// data: it may be copied, and used by any thread or process, one call at a
/// time. Only `deliveries` is public.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct TvmLease {
    /// How many times the record has been delivered, this delivery included
    /// (1 on its first delivery).
    pub deliveries: c_uint,
    /// Private: a check of m_llPriv (a zeroed or garbage token fails it).
    pub m_uCheck: c_uint,
    /// Private: the queue, the lease entry, the delivery.
    pub m_llPriv: [c_ulonglong; 7],
}

const _: () = assert!(size_of::<TvmLease>() == 64);

/// Seed of the token's check: a zeroed token fails it.
const CHECK_SEED: u32 = 0x7e45_e1a5;

/// A 32-bit check of the first five private words (the last two hold fixed
/// values, which each kind of token compares exactly): each word multiplied
/// by its own odd constant (independent multiplies, done in parallel),
/// summed, and the sum mixed (a bijection) before it is cut to 32 bits: any
/// change of the words changes the result but with odds of about 2^-32. A
/// few cycles: it is on every call (a byte-wise FNV and a chained word mix
/// were slower: docs/measurements.md).
#[inline]
fn check(words: &[c_ulonglong; 7]) -> c_uint {
    const K: [u64; 5] = [
        0x9e37_79b9_7f4a_7c15,
        0xbf58_476d_1ce4_e5b9,
        0x94d0_49bb_1331_11eb,
        0xd6e8_feb8_6659_fd93,
        0xa076_1d64_78bd_642f,
    ];
    let mut h = u64::from(CHECK_SEED);
    for (w, k) in words.iter().zip(K) {
        h = h.wrapping_add(w.wrapping_mul(k));
    }
    h ^= h >> 32;
    h = h.wrapping_mul(0xd6e8_feb8_6659_fd93);
    (h ^ (h >> 29)) as c_uint
}

impl TvmLease {
    fn from_lease(l: &Lease) -> TvmLease {
        let w = l.to_words();
        let mut words = [0; 7];
        words[..5].copy_from_slice(&w);
        TvmLease { deliveries: l.deliveries(), m_uCheck: check(&words), m_llPriv: words }
    }

    fn to_lease(self) -> Result<Lease> {
        if self.m_uCheck != check(&self.m_llPriv) || self.m_llPriv[5..] != [0, 0] {
            return Err(Error::new(LEASE_INVALID, "not a lease token (zeroed, garbage or altered)"));
        }
        let mut w = [0; 5];
        w.copy_from_slice(&self.m_llPriv[..5]);
        Ok(Lease::from_words(w))
    }

    const ZERO: TvmLease = TvmLease { deliveries: 0, m_uCheck: 0, m_llPriv: [0; 7] };

    fn from_net(l: &NetLease) -> TvmLease {
        let words = [u64::from(l.queue), l.pos, l.tag, u64::from(l.deliveries), u64::from(l.shard), NET_MARK, 0];
        TvmLease { deliveries: l.deliveries, m_uCheck: check(&words), m_llPriv: words }
    }

    fn to_net(self) -> Result<NetLease> {
        let w = self.m_llPriv;
        if self.m_uCheck != check(&w) || w[5] != NET_MARK || w[6] != 0 || w[4] > u64::from(u32::MAX) {
            return Err(Error::new(
                LEASE_INVALID,
                "not a network lease token (a local one, zeroed, garbage or altered)",
            ));
        }
        let queue = u32::try_from(w[0]).map_err(|_| Error::new(LEASE_INVALID, "not a network lease token"))?;
        Ok(NetLease { queue, shard: w[4] as u32, pos: w[1], tag: w[2], deliveries: w[3] as u32 })
    }
}

/// The sixth private word of a network token (local tokens have 0 there).
const NET_MARK: u64 = 0x6e65_746c_6561_7365;

/// The network token at `lease`, checked, for queue `t`.
///
/// # Safety
/// `lease` is NULL or points to a readable TvmLease.
unsafe fn net_token(lease: *const TvmLease, t: u32) -> Result<NetLease> {
    // SAFETY: NULL or a readable TvmLease, by the caller's contract.
    let l = match unsafe { lease.as_ref() } {
        None => return Err(Error::new(CONDIT_IS_NIL, "NULL lease")),
        Some(tok) => tok.to_net()?,
    };
    if l.queue != t {
        return Err(Error::new(LEASE_INVALID, format!("a lease of queue {}, not of queue {t}", l.queue)));
    }
    Ok(l)
}

/// The token at `lease`, checked.
///
/// # Safety
/// `lease` is NULL or points to a readable TvmLease.
unsafe fn token(lease: *const TvmLease) -> Result<Lease> {
    // SAFETY: NULL or a readable TvmLease, by the caller's contract.
    match unsafe { lease.as_ref() } {
        None => Err(Error::new(CONDIT_IS_NIL, "NULL lease")),
        Some(t) => t.to_lease(),
    }
}

/// After an acknowledgement that succeeded: `*done` refused by every call
/// from now on, `*lease` the new token (`token`; ZERO when the lease
/// failed). They may be the same token: then only the new one is written.
///
/// # Safety
/// `done` and `lease` point to writable TvmLease values.
unsafe fn hand_over(done: *mut TvmLease, lease: *mut TvmLease, token: TvmLease) {
    // SAFETY: the caller's contract.
    unsafe {
        if !std::ptr::eq(done, lease) {
            done.write(TvmLease::ZERO);
        }
        lease.write(token);
    }
}

/// A lease time in milliseconds from C, in nanoseconds (saturating; 0 stays
/// 0: the queue's lease time): 0 to [`MAX_LEASE_MS`] (a year), else refused.
#[inline]
fn lease_nanos(ms: c_long) -> Result<u64> {
    match u64::try_from(ms) {
        Ok(ms) if ms <= MAX_LEASE_MS => Ok(ms * 1_000_000),
        _ => Err(out_of_range_ms(ms, "lease time")),
    }
}

#[cold]
fn out_of_range_ms(ms: c_long, what: &str) -> Error {
    Error::new(CONDIT_IS_NIL, format!("{what} {ms} ms: 0 to {MAX_LEASE_MS} (a year)"))
}

/// Milliseconds from C: 0 to [`MAX_LEASE_MS`] (a year), else refused.
fn millis(ms: c_long, what: &str) -> Result<Duration> {
    match u64::try_from(ms) {
        Ok(ms) if ms <= MAX_LEASE_MS => Ok(Duration::from_millis(ms)),
        _ => Err(out_of_range_ms(ms, what)),
    }
}

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
            // SAFETY: checked non-NULL; the caller provides `out` with at least p->lSize writable bytes.
            let buf = unsafe { out_buffer(out, h.lSize) };
            on_queue_kept(
                h,
                #[inline(always)]
                |q, kept| q.pop_lease_kept(buf, wait, lease_ns, kept),
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
        // SAFETY: checked non-NULL; the caller provides `out` with at least p->lSize writable bytes.
        let buf = unsafe { out_buffer(out, h.lSize) };
        let acked = on_queue_kept(h, |q, kept| q.ack_pop_lease_kept(&t, buf, wait, lease_ns, kept));
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

// ---------------------------------------------------------------- network

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
            // SAFETY: checked non-NULL; the caller provides `out` with at least p->lSize writable bytes.
            let buf = unsafe { out_buffer(out, len) };
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
        // SAFETY: checked non-NULL; the caller provides `out` with at least p->lSize writable bytes.
        let buf = unsafe { out_buffer(out, len) };
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip_and_garbage_is_refused() {
        let l = Lease::from_words([7 | 3 << 32, 99, 1234, 5 | 2 << 32, 77]);
        let t = TvmLease::from_lease(&l);
        assert_eq!(t.deliveries, 2);
        assert_eq!(t.to_lease().unwrap(), l);
        assert_eq!(TvmLease::ZERO.to_lease().unwrap_err().code(), LEASE_INVALID);
        for k in 0..7 {
            let mut bad = t;
            bad.m_llPriv[k] ^= 1;
            assert_eq!(bad.to_lease().unwrap_err().code(), LEASE_INVALID, "word {k} altered");
        }
        let mut d = t;
        d.deliveries = 100; // public: the caller may scribble on it
        assert!(d.to_lease().is_ok());
        // Network tokens: refused by the local calls, and the other way round.
        let n = NetLease { queue: 21, shard: 2, pos: 5, tag: 7 << 32 | 3, deliveries: 2 };
        let nt = TvmLease::from_net(&n);
        assert_eq!(nt.deliveries, 2);
        assert_eq!(nt.to_net().unwrap(), n);
        assert_eq!(nt.to_lease().unwrap_err().code(), LEASE_INVALID);
        assert_eq!(t.to_net().unwrap_err().code(), LEASE_INVALID);
        assert_eq!(TvmLease::ZERO.to_net().unwrap_err().code(), LEASE_INVALID);
        for k in 0..7 {
            let mut bad = nt;
            bad.m_llPriv[k] ^= 1;
            assert_eq!(bad.to_net().unwrap_err().code(), LEASE_INVALID, "word {k} altered");
        }
    }
}
