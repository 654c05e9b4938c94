//! Seeing the queues from C: a queue's counters ([`lQueueStats`] into a
//! [`TvmQueueStats`] that can grow without breaking programs built against
//! an older tvm.h) and the ids of the queue directory ([`lListQueues`]).

use super::handle::on_queue_id;
use super::{CallResult, SATvm, TABLE, call, call_no_handle};
use crate::attach::Attachments;
use crate::error::*;
use crate::file::queue_ids;
use std::ffi::c_long;

/// A queue's counters and gauges at one instant, for lQueueStats. Zero it,
/// set `size = sizeof(TvmQueueStats)`, then call lQueueStats. Later
/// versions of tvmq only add members at the end: a program built against
/// this tvm.h keeps working with them (the library writes only the members
/// this one has), and a program built against a later tvm.h with this
/// library finds the members this one lacks left as it set them (zero).
/// Counters only grow while the queue exists; gauges say what is now.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TvmQueueStats {
    /// sizeof(TvmQueueStats) as the program was compiled: how many bytes of
    /// the struct the library may write.
    pub size: usize,
    /// Largest record, in bytes.
    pub record_size: u64,
    /// Exact capacity, in records.
    pub capacity: u64,
    /// Records queued now (gauge; leased records are not counted).
    pub depth: u64,
    /// Records pushed since the queue was created (counter).
    pub pushed: u64,
    /// Records popped or leased since the queue was created (counter).
    pub popped: u64,
    /// Threads of every process asleep in a blocking pop now (gauge).
    pub waiters: u64,
    /// Processes attached now (gauge), the calling one included (the call
    /// attaches the queue).
    pub processes: u64,
    /// Leases held by consumers now (gauge; 0 for a plain queue).
    pub leases_in_flight: u64,
    /// Records delivered again after a lease ran out, its holder died or it
    /// was released (counter).
    pub redelivered: u64,
    /// Leases that ran out (counter).
    pub expired: u64,
    /// Records moved to the dead-letter queue (counter).
    pub dead_lettered: u64,
    /// Syncs to stable storage completed (counter; 0 unless the queue is durable).
    pub syncs: u64,
}

impl TvmQueueStats {
    fn from_snapshot(s: &crate::queue::Snapshot, size: usize) -> TvmQueueStats {
        TvmQueueStats {
            size,
            record_size: s.record_size,
            capacity: s.capacity,
            depth: s.depth,
            pushed: s.pushed,
            popped: s.popped,
            waiters: s.waiters,
            processes: s.processes,
            leases_in_flight: s.leases_in_flight,
            redelivered: s.redelivered,
            expired: s.expired,
            dead_lettered: s.dead_lettered,
            syncs: s.syncs,
        }
    }
}

/// Fills `*s` with the counters of queue t (attaching it on first use, as
/// lQueueInfo does), read at one instant while other threads and processes
/// go on. `s->size` must be set to sizeof(TvmQueueStats) first; the library
/// writes the members it knows and leaves `size` and any later member as
/// they are. m_lEffect = 1 on success. Thread-safe (one handle per
/// thread). A tvmq addition, not in STVM.
/// Errors: CONDIT_IS_NIL (NULL handle, NULL s, or s->size below the size
/// of the first version of the struct: nothing written), TBL_NOT_FOUND,
/// SHM_ERR_ACCES, SHM_ERR_INVAL / VER_NOT_MATCH (not a valid queue file),
/// SHM_ERR_EIDRM, NOT_DURABLE (a durable queue's file moved onto tmpfs).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lQueueStats(p: *mut SATvm, t: TABLE, s: *mut TvmQueueStats) -> c_long {
    let body = |h: &mut SATvm| -> CallResult {
        if s.is_null() {
            return Err(Error::new(CONDIT_IS_NIL, "NULL stats").into());
        }
        // SAFETY: non-NULL and, by the caller's contract, a TvmQueueStats of
        // some version, whose first member is its size in every version
        // (read alone: the rest is not known to be there yet).
        let size = unsafe { s.cast::<usize>().read() };
        if size < std::mem::size_of::<TvmQueueStats>() {
            return Err(Error::new(
                CONDIT_IS_NIL,
                format!(
                    "stats size {size} is below sizeof(TvmQueueStats) ({}): set it first",
                    size_of::<TvmQueueStats>()
                ),
            )
            .into());
        }
        let snap = on_queue_id(h, t, |q| Ok(q.snapshot()))?;
        // SAFETY: checked non-NULL, and at least sizeof(TvmQueueStats)
        // bytes by its size member (the caller's contract); members past
        // ours are not touched.
        unsafe { s.write(TvmQueueStats::from_snapshot(&snap, size)) };
        Ok(1)
    };
    // SAFETY: C callers pass NULL or a handle made by pGetSATvm/pCloneSATvm.
    unsafe { call(p, body) }
}

/// Lists the queues of the queue directory ($TVMDBD, or `/dev/shm/tvmq-<uid>`):
/// sets `*n` to how many there are and writes the first `max` of their
/// ids, in ascending order, to `ids` (which may be NULL when `max` is 0:
/// call once to learn the count, then with an array that large; queues
/// made meanwhile are not in it). A directory that does not exist holds no
/// queue (`*n` = 0). lGetEffect() = ids written. Thread-safe; needs no
/// handle. A tvmq addition, not in STVM.
/// Errors (RC_FAIL, lGetTErrno(), sGetTErrDetail()): CONDIT_IS_NIL (NULL
/// `n`, or NULL `ids` with `max` above 0), SHM_ERR_INVAL (the path is not a
/// directory), SHM_ERR_ACCES (the directory cannot be read).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lListQueues(ids: *mut TABLE, max: usize, n: *mut usize) -> c_long {
    call_no_handle(|| {
        if n.is_null() || (ids.is_null() && max > 0) {
            return Err(Error::new(CONDIT_IS_NIL, "NULL n, or NULL ids with max above 0").into());
        }
        let all = queue_ids(&Attachments::process().dir())?;
        let written = all.len().min(max);
        // SAFETY: checked non-NULL; the caller provides `*n` writable and,
        // when max > 0, `max` writable TABLEs at `ids`.
        unsafe {
            *n = all.len();
            if written > 0 {
                std::ptr::copy_nonoverlapping(all.as_ptr(), ids, written);
            }
        }
        Ok(written)
    })
}
