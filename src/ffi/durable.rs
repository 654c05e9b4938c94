//! The C calls of durable queues (a tvmq addition, "Beyond STVM" in the spec).

use super::handle::on_queue_id;
use super::{SATvm, TABLE, call};
use std::ffi::c_long;

/// Makes everything pushed and popped on queue t so far (by every thread of
/// this process, and by other processes before the call) durable: when it
/// returns RC_SUCC, those changes are on stable storage and survive a
/// machine crash or power loss. Attaches t on first use. m_lEffect = 0.
///
/// A durable queue (created with `tvmq create ... --durable`) keeps one of
/// two promises on its own, and lSyncQueue is only needed for the second:
/// - `always`: lPush, lPushs (one sync per batch) return RC_SUCC only once
///   their records are on stable storage, lPop and lPopup only once the
///   records' removal is. Nothing acknowledged is lost by a machine crash,
///   and nothing popped is delivered again. Threads and processes pushing
///   at the same time share syncs, so throughput grows with them.
/// - `interval=MS`: a background thread syncs at most MS milliseconds after
///   a change. A push may be lost if the machine stops within MS
///   milliseconds after it returned; a record popped within MS milliseconds
///   before the machine stopped may be delivered again. The thread runs in
///   every attached process: if all of them are killed (kill -9), their
///   last MS milliseconds of changes reach the disk when a process next
///   attaches the queue (a normal exit syncs them).
///
/// Whatever the policy, a process crash (kill -9) loses nothing and
/// delivers nothing twice. A queue that is not durable is synced too when
/// its file is on a disk (its records are not checksummed, so after a
/// machine crash it is only as good as the pages that reached the disk).
/// Thread-safe (one handle per thread); it may block for the duration of a
/// disk flush (about a millisecond on an SSD).
/// Errors: CONDIT_IS_NIL (NULL handle), TBL_NOT_FOUND, NOT_DURABLE (the file
/// is on tmpfs or ramfs, which a restart empties), SYNC_FAILED (the system
/// call failed: the changes are in the queue but not known to be on disk).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lSyncQueue(p: *mut SATvm, t: TABLE) -> c_long {
    let body = |h: &mut SATvm| {
        on_queue_id(h, t, |q| q.sync())?;
        Ok(0)
    };
    // SAFETY: C callers pass NULL or a handle made by pGetSATvm/pCloneSATvm.
    unsafe { call(p, body) }
}
