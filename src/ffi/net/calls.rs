//! The calls on a connected handle: lTvmPush, lTvmPop, lTvmPopup, lAsyPush,
//! lAsyWait, lTvmDropTable, lTvmResetLock, lTvmCount, lTvmTruncate,
//! lTvmRequireReplicas, lTvmSpread.

use super::client::{client, popping};
use crate::client::{Client, PopWait};
use crate::error::*;
use crate::ffi::common::{MallocArray, OutBuffer, counted, pop_one, popup, record, wait_mode};
use crate::ffi::{CallResult, SATvm, TABLE, Uenum, call};
use std::ffi::{c_long, c_void};
use std::time::Duration;

/// The body of lTvmPush and lAsyPush: hands the bound record and its queue
/// to `send` on the handle's client. m_lEffect = 1 on success.
///
/// # Safety
/// As [`record`], for the handle's `pstVoid` and `lSize`.
unsafe fn push_with(h: &mut SATvm, send: impl FnOnce(&mut Client, TABLE, &[u8]) -> Result<()>) -> CallResult {
    let t = h.tblName;
    // SAFETY: the caller bound pstVoid to lSize bytes (queueinit and friends).
    let rec = unsafe { record(h.pstVoid, h.lSize) }?;
    send(client(h)?, t, rec)?;
    Ok(1)
}

/// As lPush, on the server: appends the p->lSize bytes at p->pstVoid to
/// queue p->tblName (RPUSH) and waits for the answer (up to the timeout of
/// lTvmConnect). m_lEffect = 1 on success.
/// A push whose connection broke before its answer came fails with a SOCK_*
/// code and may or may not be in the queue; it is never sent again.
/// Errors: CONDIT_IS_NIL, SERV_NOT_CONN (not connected), the SOCK_* codes
/// (SOCK_CONN_ERR: reconnecting failed; SOCK_READ_TMO: no answer within the
/// timeout; SOCK_IO_RESET: the server closed the connection; SOCK_SEND_TMO,
/// SOCK_SEND_ERR, SOCK_READ_ERR; SOCK_COM_EXCP: a reply that makes no sense),
/// and the server's: DATA_SPC_FULL, RECD_TOO_LONG, TBL_NOT_FOUND (tvmq serve),
/// SVR_EXCEPTION (any other error reply, e.g. Redis's WRONGTYPE or OOM).
/// Threads: one handle per thread (or shared connections: lTvmShare).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lTvmPush(p: *mut SATvm) -> c_long {
    let body = |h: &mut SATvm| {
        // SAFETY: the caller bound pstVoid to lSize bytes (queueinit and friends).
        unsafe { push_with(h, Client::push) }
    };
    // SAFETY: C callers pass NULL or a handle made by pGetSATvm/pCloneSATvm.
    unsafe { call(p, body) }
}

/// As lPop, on the server: removes the oldest record of queue p->tblName
/// into `out` (p->lSize bytes; a shorter record is followed by zero bytes).
/// QUE_NOWAIT: NO_DATA_FOUND at once when empty (LPOP). QUE_NORMAL: waits
/// until a record comes, however long (BLPOP with no timeout; the timeout of
/// lTvmConnect does not apply). m_lEffect = 1 on success.
/// A record longer than p->lSize is never cut and never lost: the call
/// fails with RECD_TOO_LONG and the handle keeps the record; the next
/// lTvmPop / lTvmPopup of that queue on this handle with an lSize big
/// enough returns it first. vTvmDisconnect (and vCloneFree) put such kept
/// records back: at the head of the list on Redis (LPUSH, in their order),
/// at the tail on tvmq serve (its queues are FIFO at both ends).
/// Errors: CONDIT_IS_NIL (NULL out), NOT_SUPPT_OPT (other wait flag),
/// RECD_TOO_LONG (also with lSize 0: nothing is taken), NO_DATA_FOUND,
/// SHM_ERR_EIDRM (tvmq serve: dropped while waiting), and those of lTvmPush.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lTvmPop(p: *mut SATvm, out: *mut c_void, wait: Uenum) -> c_long {
    let take = |h: &mut SATvm, buf: OutBuffer<'_>, wait| {
        let (c, t, len) = popping(h)?;
        // The whole of lSize: a shorter record is followed by zero bytes.
        c.pop(t, buf.take(len), wait)
    };
    let body = |h: &mut SATvm| {
        // SAFETY: the caller provides `out` with at least p->lSize writable bytes.
        unsafe { pop_one(h, out, || wait_mode(wait, PopWait::Forever, PopWait::NoWait), take) }
    };
    // SAFETY: C callers pass NULL or a handle made by pGetSATvm/pCloneSATvm.
    unsafe { call(p, body) }
}

/// As lPopup, on the server: pops up to `expect` records of queue
/// p->tblName into a new malloc'd array (`*out`, p->lSize bytes per record,
/// zero-filled after shorter ones; free it with free() or TFree).
/// secs > 0: waits up to secs seconds in total for `expect` records (BLPOP
/// with the time left when the queue is empty). secs == 0: takes what is
/// there (LPOP with a count), without waiting.
/// Returns RC_SUCC with `expect` records, or (secs == 0) with at least one.
/// RC_FAIL with MQUE_WAIT_TMO: timed out with some (`*out_n` = m_lEffect =
/// count, array valid). RC_FAIL with NO_DATA_FOUND: none (`*out` = NULL).
/// A record longer than p->lSize stops the call with RECD_TOO_LONG (the
/// records before it are returned; it and those popped after it are kept
/// by the handle, as lTvmPop says). Any other error after some records also
/// returns them in `*out`.
/// Errors also: CONDIT_IS_NIL (NULL pointers, expect 0, secs < 0),
/// RECD_TOO_LONG (lSize 0), MALLC_MEM_ERR, and those of lTvmPush.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lTvmPopup(
    p: *mut SATvm,
    expect: usize,
    secs: libc::time_t,
    out_n: *mut usize,
    out: *mut *mut c_void,
) -> c_long {
    let take = |h: &mut SATvm, array: &mut MallocArray| {
        let (c, t, each) = popping(h)?;
        // The count it returns is the array's length (the records the array took).
        let (_, stop) = c.popup(t, each, expect, secs as u64, &mut |rec| array.push(rec));
        Ok(stop)
    };
    let body = |h: &mut SATvm| {
        // SAFETY: C callers pass NULL or writable pointers as out_n and out.
        unsafe { popup(h, expect, secs, out_n, out, take) }
    };
    // SAFETY: C callers pass NULL or a handle made by pGetSATvm/pCloneSATvm.
    unsafe { call(p, body) }
}

/// Pushes the record bound to p (as lTvmPush) without waiting for the
/// answer: RC_SUCC means it is on its way (m_lEffect = 1). Records wait in
/// the handle until about 64 KB of them are there, the window is full, or
/// another call of the handle (lTvmPush, lTvmPop, lAsyWait, vTvmDisconnect)
/// sends them; their order is kept. At most 1,024 pushes of a handle are
/// unanswered at a time: the next one waits for answers. No failure is
/// dropped: lAsyWait (or vTvmDisconnect) reports the first one; until then,
/// lAsyPush fails at once with that code and sends nothing.
/// Call lAsyWait or vTvmDisconnect before the program exits, or the records
/// still in the handle are not sent.
/// Errors: CONDIT_IS_NIL, SERV_NOT_CONN, the first failure of an earlier
/// asynchronous push (any code lTvmPush gives), SOCK_CONN_ERR (reconnecting
/// failed).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lAsyPush(p: *mut SATvm) -> c_long {
    let body = |h: &mut SATvm| {
        // SAFETY: the caller bound pstVoid to lSize bytes (queueinit and friends).
        unsafe { push_with(h, Client::push_async) }
    };
    // SAFETY: C callers pass NULL or a handle made by pGetSATvm/pCloneSATvm.
    unsafe { call(p, body) }
}

/// Sends what lAsyPush left in the handle and waits for the answer of every
/// asynchronous push of handle p. RC_SUCC: every record pushed with
/// lAsyPush since the last lAsyWait is in its queue; m_lEffect = how many.
/// RC_FAIL: m_lErrno is the first failure (a server error such as
/// DATA_SPC_FULL, or a SOCK_* code), m_lEffect how many records went in
/// (pushes after a failed one may have gone in and are counted). When the
/// connection broke, the records whose answer had not come may or may not
/// be in the queue (they are not counted, and never sent again). Either way
/// the handle is ready for more asynchronous pushes.
/// Errors: CONDIT_IS_NIL, SERV_NOT_CONN, and those of lTvmPush.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lAsyWait(p: *mut SATvm) -> c_long {
    let body = |h: &mut SATvm| -> CallResult {
        let (n, stop) = client(h)?.wait_async();
        counted(n, stop)
    };
    // SAFETY: C callers pass NULL or a handle made by pGetSATvm/pCloneSATvm.
    unsafe { call(p, body) }
}

/// As lDropTable, on the server: drops queue t (DEL). On tvmq serve the
/// queue's file goes (clients blocked on it get SHM_ERR_EIDRM; with
/// --auto-create a later push makes a new one); on Redis the list goes (a
/// later push makes a new one, as Redis does for any list). A queue that
/// does not exist is no error (a Redis list that was emptied does not
/// exist either): RC_SUCC with m_lEffect = 0; 1 when it existed.
/// Errors: CONDIT_IS_NIL, SERV_NOT_CONN, and the SOCK_* codes of lTvmPush.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lTvmDropTable(p: *mut SATvm, t: TABLE) -> c_long {
    let body = |h: &mut SATvm| -> CallResult { Ok(usize::from(client(h)?.drop_queue(t)?)) };
    // SAFETY: C callers pass NULL or a handle made by pGetSATvm/pCloneSATvm.
    unsafe { call(p, body) }
}

/// As lResetLock, on tvmq serve: its repair of queue t (TVMQ.REPAIR, as
/// `tvmq repair`), m_lEffect = the records recovered. A redis-server has no
/// lock to reset: RMT_NOT_SUPPT, nothing sent.
/// Errors: CONDIT_IS_NIL, SERV_NOT_CONN, RMT_NOT_SUPPT, TBL_NOT_FOUND, and
/// the SOCK_* codes of lTvmPush.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lTvmResetLock(p: *mut SATvm, t: TABLE) -> c_long {
    let body = |h: &mut SATvm| -> CallResult { Ok(client(h)?.repair(t)? as usize) };
    // SAFETY: C callers pass NULL or a handle made by pGetSATvm/pCloneSATvm.
    unsafe { call(p, body) }
}

/// As lCount, on the server: sets `*n` (and m_lEffect) to how many records
/// queue p->tblName holds (LLEN; 0 for a Redis list that does not exist).
/// Errors: CONDIT_IS_NIL (NULL handle or n), SERV_NOT_CONN, TBL_NOT_FOUND
/// (tvmq serve), and the SOCK_* codes of lTvmPush.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lTvmCount(p: *mut SATvm, n: *mut usize) -> c_long {
    let body = |h: &mut SATvm| -> CallResult {
        if n.is_null() {
            return Err(Error::new(CONDIT_IS_NIL, "NULL count").into());
        }
        let t = h.tblName;
        let depth = client(h)?.count(t)? as usize;
        // SAFETY: checked non-NULL; the caller provides a writable size_t.
        unsafe { *n = depth };
        Ok(depth)
    };
    // SAFETY: C callers pass NULL or a handle made by pGetSATvm/pCloneSATvm.
    unsafe { call(p, body) }
}

/// As lTruncate, on the server: removes the records queue t holds (LLEN,
/// then LTRIM of that many from the head: records pushed meanwhile stay;
/// the queue itself stays). m_lEffect = the records counted.
/// Errors: CONDIT_IS_NIL, SERV_NOT_CONN, TBL_NOT_FOUND (tvmq serve), and the
/// SOCK_* codes of lTvmPush.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lTvmTruncate(p: *mut SATvm, t: TABLE) -> c_long {
    let body = |h: &mut SATvm| -> CallResult { Ok(client(h)?.truncate(t)? as usize) };
    // SAFETY: C callers pass NULL or a handle made by pGetSATvm/pCloneSATvm.
    unsafe { call(p, body) }
}

/// From now on a write of handle p returns RC_SUCC only once `replicas`
/// replicas of the Redis master have it: lTvmPush, lTvmAck, lTvmRelease,
/// lTvmReject, lTvmExtendLease and lTvmCreateQueueEx send `WAIT replicas
/// timeout_ms` with their command (in the same write on the handle's own
/// connection to a Redis: one round trip; after the answer on a shared
/// connection or a Redis Cluster), and lAsyWait sends one WAIT per queue
/// pushed to since the last lAsyWait. When fewer replicas have the write
/// within `timeout_ms`, the call fails with REPL_TIMEOUT: the write was
/// done on the master, but a failover may lose it (the record may or may
/// not be there); lAsyWait then reports REPL_TIMEOUT with m_lEffect = the
/// records that went in. A master with fewer replicas than asked: every
/// write fails so, after the timeout. lTvmPopLease and the pops are not
/// waited for (a lease lost in a failover is delivered again). `replicas`
/// 0 turns it off. Call it after lTvmConnect (which resets it): it holds
/// for the handle's connection, its reconnections, and handles that
/// lTvmShare it afterwards.
/// Threads: one handle per thread, as lTvmConnect.
/// Errors: CONDIT_IS_NIL (NULL handle, negative replicas, timeout_ms < 1
/// with replicas > 0), SERV_NOT_CONN, NOT_SUPPT_OPT (a server without
/// replicas: tvmq serve).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lTvmRequireReplicas(p: *mut SATvm, replicas: c_long, timeout_ms: c_long) -> c_long {
    let body = |h: &mut SATvm| -> CallResult {
        let count = u32::try_from(replicas)
            .map_err(|_| Error::new(CONDIT_IS_NIL, format!("replicas {replicas}: 0 or more")))?;
        let ms = u64::try_from(timeout_ms).ok().filter(|&ms| ms > 0 || count == 0).ok_or_else(|| {
            Error::new(CONDIT_IS_NIL, format!("timeout {timeout_ms} ms: 1 or more (WAIT 0 would wait forever)"))
        })?;
        client(h)?.require_replicas(count, Duration::from_millis(ms))?;
        Ok(0)
    };
    // SAFETY: C callers pass NULL or a handle made by pGetSATvm/pCloneSATvm.
    unsafe { call(p, body) }
}

/// Spreads queue t, on handle p, over `shards` keys of the Redis Cluster
/// (or Redis) p is connected to: one logical queue whose shards are spread
/// evenly over the cluster's hash slots, so that with at least as many
/// shards as masters (and the equal slot ranges `redis-cli --cluster
/// create` gives) every master holds some, and a hot queue's load is
/// shared by all of them. Shard i is the key "<t>.<i>.<n>", n the smallest
/// number from 0 whose key's slot is in the i-th of `shards` equal parts of
/// the 16384 slots (a rule any client can follow). From then on, on this
/// handle: lTvmPush and lAsyPush of queue t go to the shards in turn;
/// lTvmPop and lTvmPopLease start at the next shard in turn and take from
/// the first that has a record (FIFO within a shard, not across shards;
/// lTvmPop finding its shard empty asks every shard's length in one round
/// trip; a waiting pop waits on one shard at a time for at most 200 ms);
/// lTvmCount sums the shards; lTvmDropTable drops them all;
/// lTvmCreateQueueEx stores the lease options on every shard (a lease
/// token names its shard). Every program using the queue must spread it
/// with the same `shards`. lTvmPopup and lTvmTruncate of a spread queue
/// fail with NOT_SUPPT_OPT. `shards` 0 or 1: queue t is one key again.
/// Threads: one handle per thread, as lTvmConnect.
/// Errors: CONDIT_IS_NIL (NULL handle, shards < 0 or more than 1024),
/// SERV_NOT_CONN, NOT_SUPPT_OPT (tvmq serve: no spread queues).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lTvmSpread(p: *mut SATvm, t: TABLE, shards: c_long) -> c_long {
    let body = |h: &mut SATvm| -> CallResult {
        let n = usize::try_from(shards).map_err(|_| Error::new(CONDIT_IS_NIL, format!("{shards} shards")))?;
        client(h)?.set_spread(t, n)?;
        Ok(0)
    };
    // SAFETY: C callers pass NULL or a handle made by pGetSATvm/pCloneSATvm.
    unsafe { call(p, body) }
}
