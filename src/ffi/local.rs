//! The local (shared-memory) calls of the C API: create, drop, push, pop.

use super::common::{MallocArray, OutBuffer, counted, pop_one, popup, record, text, too_large, wait_mode};
use super::handle::{detach, on_queue_id, on_queue_kept};
use super::{CREATE, CallResult, Fail, RC_SUCC, SATvm, TABLE, TCREATE, Uenum, call, call_no_handle};
use crate::error::*;
use crate::file::queue_dir;
use crate::queue::{Queue, Wait};
use crate::schema::{Field, MAX_FIELDS, kind_of};
use crate::spec::Spec;
use std::cell::RefCell;
use std::ffi::{c_char, c_long, c_void};
use std::time::{Duration, Instant};

/// Creates queue t holding exactly `rows` records of at most `size` bytes,
/// named `name` (may be NULL), with partition text `part` (may be NULL). The
/// file is created atomically, mode 0600, in $TVMDBD (default
/// `/dev/shm/tvmq-<uid>`).
/// Errors: CONDIT_IS_NIL (rows or size 0), TBL_ARD_EXIST (queue exists),
/// MQUE_CRTE_BIG (too big for memory or the index), SHM_ERR_ACCES.
/// Thread-safe (one handle per thread): of two creators of the same queue,
/// in any threads or processes, one succeeds and the other gets
/// TBL_ARD_EXIST.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lCircleQueue(
    p: *mut SATvm,
    t: TABLE,
    rows: usize,
    size: usize,
    name: *mut c_char,
    part: *mut c_char,
) -> c_long {
    let body = |_: &mut SATvm| {
        let mut spec = Spec::new(rows as u64, size as u64);
        // SAFETY: C callers pass NULL or NUL-terminated strings as name and part.
        (spec.name, spec.part) = unsafe { (text(name), text(part)) };
        Queue::create(&queue_dir(), t, &spec)?;
        Ok(0)
    };
    // SAFETY: C callers pass NULL or a handle made by pGetSATvm/pCloneSATvm.
    unsafe { call(p, body) }
}

/// A record layout being described by a QUEUE/FIELD function.
struct Definition {
    table: TABLE,
    declared: Option<(String, String, u64)>,
    fields: Vec<Field>,
}

thread_local! {
    static DEFINING: RefCell<Option<Definition>> = const { RefCell::new(None) };
}

/// Creates queue t with `rows` records whose layout is described by `def`
/// (a function written with QUEUE, FIELD and FINISH). The record size is the
/// struct's size; the fields are stored with the queue.
/// Errors: CONDIT_IS_NIL (NULL def, rows 0), whatever QUEUE/FIELD reported
/// (TABLE_NOT_DEF, FTYPE_NOT_DEF, FLD_DEF_SPILL), and those of lCircleQueue.
/// Thread-safe (one handle per thread): the definition being built is the
/// calling thread's own, and creation is as lCircleQueue's.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lTableQueue(p: *mut SATvm, t: TABLE, rows: usize, def: TCREATE) -> c_long {
    let body = |_: &mut SATvm| {
        let def = def.ok_or_else(|| Error::new(CONDIT_IS_NIL, "no definition function"))?;
        let (name, part, size, fields) = define_with(t, def)?;
        let mut spec = Spec::new(rows as u64, size);
        spec.name = name;
        spec.part = part;
        spec.fields = fields;
        Queue::create(&queue_dir(), t, &spec)?;
        Ok(0)
    };
    // SAFETY: C callers pass NULL or a handle made by pGetSATvm/pCloneSATvm.
    unsafe { call(p, body) }
}

/// Runs a QUEUE/FIELD/FINISH function for queue t: the name and partition
/// its QUEUE declares, its struct's size and its fields.
pub(super) fn define_with(
    t: TABLE,
    def: unsafe extern "C" fn(TABLE) -> CREATE,
) -> Result<(String, String, u64, Vec<Field>)> {
    DEFINING.with(|d| *d.borrow_mut() = Some(Definition { table: t, declared: None, fields: Vec::new() }));
    // SAFETY: `def` is a C function of type CREATE(TABLE), as TCREATE says.
    let rc = unsafe { def(t) };
    let Some(d) = DEFINING.with(|d| d.borrow_mut().take()) else {
        return Err(Error::new(SVR_EXCEPTION, "definition state lost"));
    };
    if rc != RC_SUCC {
        let code = super::lGetTErrno();
        let code = if code > 0 { code as u32 } else { TABLE_NOT_DEF };
        return Err(Error::new(code, "the definition function failed"));
    }
    let Some((name, part, size)) = d.declared else {
        return Err(Error::new(TABLE_NOT_DEF, "the definition function has no QUEUE(...)"));
    };
    Ok((name, part, size, d.fields))
}

/// Used by the QUEUE macro: declares the queue being created by
/// lTableQueue: its name (QUEUE passes its first argument as written, as
/// STVM names queues), its partition text and its record size. Not for
/// direct use: it works only inside the definition function that
/// lTableQueue or lCreateQueueEx runs, on their thread.
/// Returns RC_SUCC, or RC_FAIL (lGetTErrno()) with TABLE_NOT_DEF (outside
/// such a function, or a QUEUE of another queue than the one being
/// created) or CONDIT_IS_NIL (a struct of size 0); QUEUE then returns
/// RC_FAIL from the function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lTvmDefQueue(t: TABLE, part: *const c_char, name: *const c_char, size: usize) -> c_long {
    call_no_handle(|| {
        define(|d| {
            if d.table != t {
                return Err(Error::new(
                    TABLE_NOT_DEF,
                    format!("QUEUE({t}) inside the definition of queue {}", d.table),
                ));
            }
            if size == 0 {
                return Err(Error::new(CONDIT_IS_NIL, "record struct of size 0"));
            }
            // SAFETY: the QUEUE macro passes a string literal and the caller's part string.
            let (name, part) = unsafe { (text(name), text(part)) };
            d.declared = Some((name, part, size as u64));
            Ok(())
        })
    })
}

/// Used by the FIELD macro: adds one field to the queue being created by
/// lTableQueue. Not for direct use (as lTvmDefQueue).
/// Returns RC_SUCC, or RC_FAIL (lGetTErrno()) with TABLE_NOT_DEF (outside
/// a definition function, or before its QUEUE), FTYPE_NOT_DEF (a kind other
/// than FIELD_CHAR, FIELD_LONG, FIELD_DOUB) or FLD_DEF_SPILL (an empty,
/// too long or repeated name, bytes outside the record, too many fields);
/// FIELD then returns RC_FAIL from the function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lTvmDefField(name: *const c_char, offset: usize, len: usize, kind: c_long) -> c_long {
    call_no_handle(|| {
        define(|d| {
            let Some((_, _, size)) = &d.declared else {
                return Err(Error::new(TABLE_NOT_DEF, "FIELD before QUEUE"));
            };
            // SAFETY: the FIELD macro passes the member's name as a string literal.
            let name = unsafe { text(name) };
            let kind = kind_of(&name, u32::try_from(kind).unwrap_or(0))?;
            let field = Field {
                name,
                offset: u32::try_from(offset).unwrap_or(u32::MAX),
                len: u32::try_from(len).unwrap_or(u32::MAX),
                kind,
            };
            field.check(*size)?;
            if d.fields.len() >= MAX_FIELDS {
                return Err(Error::new(FLD_DEF_SPILL, "too many fields"));
            }
            if d.fields.iter().any(|f| f.name == field.name) {
                return Err(Error::new(FLD_DEF_SPILL, format!("field {:?} defined twice", field.name)));
            }
            d.fields.push(field);
            Ok(())
        })
    })
}

fn define(f: impl FnOnce(&mut Definition) -> Result<()>) -> CallResult {
    DEFINING.with(|d| match d.borrow_mut().as_mut() {
        Some(d) => f(d).map(|()| 0).map_err(Fail::from),
        None => Err(Error::new(TABLE_NOT_DEF, "QUEUE/FIELD used outside lTableQueue").into()),
    })
}

/// Removes queue t. Processes blocked in lPop/lPopup on it wake up with
/// SHM_ERR_EIDRM; later calls get TBL_NOT_FOUND.
/// Errors: TBL_NOT_FOUND, SHM_ERR_ACCES (no write permission on the file).
/// Thread-safe (one handle per thread); what other threads' and processes'
/// calls on the queue get is said above.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lDropTable(p: *mut SATvm, t: TABLE) -> c_long {
    let body = |_: &mut SATvm| {
        detach(t);
        Queue::drop_queue(&queue_dir(), t)?;
        Ok(0)
    };
    // SAFETY: C callers pass NULL or a handle made by pGetSATvm/pCloneSATvm.
    unsafe { call(p, body) }
}

/// Appends the p->lSize bytes at p->pstVoid to queue p->tblName, attaching it
/// on first use. Never waits: lock-free, no system call unless a consumer
/// sleeps. m_lEffect = 1 on success. Thread-safe (one handle per thread).
/// Durable queues (see lSyncQueue): with `always` it returns RC_SUCC only
/// once the record is on stable storage (a disk flush, shared with the
/// pushes of other threads and processes); with `interval=MS` it returns at
/// once, and the record may be lost if the machine stops within MS
/// milliseconds.
/// Errors: CONDIT_IS_NIL (NULL handle/buffer, size 0), DATA_SPC_FULL (full),
/// RECD_TOO_LONG (lSize above the queue's record size), TBL_NOT_FOUND,
/// SYNC_FAILED (durable queue: the record is queued but the sync failed),
/// NOT_DURABLE (attaching a durable queue whose file was moved onto tmpfs).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lPush(p: *mut SATvm) -> c_long {
    let body = |h: &mut SATvm| {
        // SAFETY: the caller bound pstVoid to lSize bytes (queueinit and friends).
        let rec = unsafe { record(h.pstVoid, h.lSize) }?;
        // Inlined: as a call of its own (the compiler's choice) it cost
        // about 20 instructions a push.
        on_queue_kept(
            h,
            #[inline(always)]
            |q, kept| q.push_kept(rec, kept),
        )?;
        Ok(1)
    };
    // SAFETY: C callers pass NULL or a handle made by pGetSATvm/pCloneSATvm.
    unsafe { call(p, body) }
}

/// Removes the oldest record of queue p->tblName into `out` (p->lSize bytes,
/// at least the queue's record size; a shorter record is followed by zero
/// bytes up to the record size, and nothing past the record size is written
/// or read, so p->lSize may be larger than the buffer if the buffer holds
/// the record size). QUE_NOWAIT: NO_DATA_FOUND at once when
/// empty. QUE_NORMAL: waits until a record arrives, as the queue's wait
/// strategy says: by default it spins at most 5 microseconds (only while
/// such spins have been catching records), then sleeps on a futex (no CPU
/// while asleep; a record arriving then costs a kernel wake-up, as a pipe's
/// reader pays: about 5 microseconds on an idle machine). `tvmq create
/// --spin-us N` makes it spin up to N microseconds first (one CPU at 100%
/// meanwhile); the environment variable TVMQ_SPIN_US=N overrides the
/// queue's setting for this process (read when the queue is attached), and
/// TVMQ_SPIN_US=-1 never sleeps (one CPU at 100% for as long as it waits).
/// Whatever the strategy, a push makes a wake-up system call only when a
/// consumer sleeps.
/// lPopup with a timeout waits the same way.
/// m_lEffect = 1 on success. Durable queues (see lSyncQueue): with `always`
/// it returns once the record's removal is on stable storage (never
/// delivered again after a machine crash); with `interval=MS` a record
/// popped within MS milliseconds before the machine stops may be delivered
/// again.
/// Errors: CONDIT_IS_NIL (NULL handle/out), RECD_TOO_LONG (lSize below the
/// record size; nothing is taken), NO_DATA_FOUND, SHM_ERR_EIDRM (dropped
/// while waiting), TBL_NOT_FOUND, NOT_SUPPT_OPT (other wait flag),
/// NOT_DURABLE (attaching a durable queue whose file was moved onto tmpfs).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lPop(p: *mut SATvm, out: *mut c_void, wait: Uenum) -> c_long {
    let take = |h: &mut SATvm, buf: OutBuffer<'_>, wait| {
        on_queue_kept(
            h,
            #[inline(always)]
            |q, kept| q.pop_kept(buf.take(q.record_size()), wait, kept),
        )
    };
    let body = |h: &mut SATvm| {
        // SAFETY: the caller provides `out` with at least min(p->lSize,
        // the record size) writable bytes.
        unsafe { pop_one(h, out, || wait_mode(wait, Wait::Forever, Wait::NoWait), take) }
    };
    // SAFETY: C callers pass NULL or a handle made by pGetSATvm/pCloneSATvm.
    unsafe { call(p, body) }
}

/// Removes the oldest record of queue p->tblName into `out`, as lPop with
/// QUE_NORMAL does, but waits at most `timeout_ms` milliseconds: 0 returns
/// NO_DATA_FOUND at once when the queue is empty (as QUE_NOWAIT), more
/// returns MQUE_WAIT_TMO when nothing came in that time. A caller that must
/// act while it waits (a binding that checks for Ctrl-C, a loop that checks
/// a stop flag) calls it in a loop of short waits; no record is taken
/// unless the call returns RC_SUCC. m_lEffect = 1 on success. Thread-safe
/// (one handle per thread).
/// Errors: those of lPop; MQUE_WAIT_TMO (nothing came within timeout_ms);
/// CONDIT_IS_NIL (NULL handle/out, negative timeout_ms).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lPopWait(p: *mut SATvm, out: *mut c_void, timeout_ms: c_long) -> c_long {
    let wait = || {
        let Ok(ms) = u64::try_from(timeout_ms) else {
            return Err(Error::new(CONDIT_IS_NIL, format!("a wait of {timeout_ms} ms: give 0 or more")));
        };
        Ok(match Instant::now().checked_add(Duration::from_millis(ms)) {
            _ if ms == 0 => Wait::NoWait,
            Some(t) => Wait::Until(t),
            None => Wait::Forever,
        })
    };
    let take = |h: &mut SATvm, buf: OutBuffer<'_>, wait| {
        on_queue_kept(
            h,
            #[inline(always)]
            |q, kept| q.pop_kept(buf.take(q.record_size()), wait, kept),
        )
    };
    let body = |h: &mut SATvm| {
        // SAFETY: the caller provides `out` with at least min(p->lSize,
        // the record size) writable bytes.
        unsafe { pop_one(h, out, wait, take) }
    };
    // SAFETY: C callers pass NULL or a handle made by pGetSATvm/pCloneSATvm.
    unsafe { call(p, body) }
}

/// Pops up to `expect` records of queue p->tblName into a new malloc'd
/// array (`*out`, p->lSize bytes per record; free it with free() or TFree).
/// secs > 0: waits up to secs seconds in total for `expect` records.
/// secs == 0: takes what is there, without waiting.
/// Returns RC_SUCC with `expect` records, or (secs == 0) with at least one.
/// RC_FAIL with MQUE_WAIT_TMO: timed out with some (`*out_n` = m_lEffect =
/// count, array valid). RC_FAIL with NO_DATA_FOUND: none (`*out` = NULL).
/// Any other error after some records also returns them in `*out`.
/// Errors also: CONDIT_IS_NIL (NULL pointers, expect 0, secs < 0),
/// RECD_TOO_LONG (lSize below the record size), MALLC_MEM_ERR.
/// Thread-safe (one handle per thread): each record goes to exactly one
/// caller, whatever other threads and processes pop meanwhile.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lPopup(
    p: *mut SATvm,
    expect: usize,
    secs: libc::time_t,
    out_n: *mut usize,
    out: *mut *mut c_void,
) -> c_long {
    let take = |h: &mut SATvm, array: &mut MallocArray| {
        let each = h.lSize;
        if each == 0 {
            return Err(Error::new(RECD_TOO_LONG, "lSize 0"));
        }
        let deadline = Instant::now().checked_add(Duration::from_secs(secs as u64));
        let wait = match (secs, deadline) {
            (0, _) => Wait::NoWait,
            (_, Some(t)) => Wait::Until(t),
            (_, None) => Wait::Forever,
        };
        // Records already taken are never dropped: every stop is reported
        // next to the array. They come in batches of up to 64 (one claim each).
        on_queue_kept(h, |q, _| {
            let mut lens = [0usize; 64];
            while array.len() < expect {
                let chunk = (expect - array.len()).min(lens.len());
                let room = match array.reserve(chunk) {
                    Ok(room) => room,
                    Err(e) => return Ok(Some(e)),
                };
                let (n, err) = q.pop_into(room, each, &mut lens[..chunk], wait);
                array.added(n);
                if err.is_some() {
                    return Ok(err);
                }
            }
            Ok(None)
        })
    };
    let body = |h: &mut SATvm| {
        // SAFETY: C callers pass NULL or writable pointers as out_n and out.
        unsafe { popup(h, expect, secs, out_n, out, take) }
    };
    // SAFETY: C callers pass NULL or a handle made by pGetSATvm/pCloneSATvm.
    unsafe { call(p, body) }
}

/// Pushes `*n` records laid out one after another (p->lSize bytes each) at
/// `*records` into queue p->tblName. Sets `*n` and m_lEffect to how many went
/// in; stops at the first failure, whose code is in m_lErrno (the records
/// before it stay pushed).
/// Errors: CONDIT_IS_NIL (NULL pointers, *n == 0, lSize 0), and those of lPush.
/// Thread-safe (one handle per thread), as lPush.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lPushs(p: *mut SATvm, n: *mut usize, records: *mut *mut c_void) -> c_long {
    let body = |h: &mut SATvm| {
        // SAFETY: checked non-NULL before each dereference; the caller provides them.
        let (count, base) = unsafe {
            if n.is_null() || records.is_null() || (*records).is_null() {
                return Err(Error::new(CONDIT_IS_NIL, "NULL count or records").into());
            }
            let count = *n;
            *n = 0;
            (count, *records)
        };
        let each = h.lSize;
        if count == 0 || each == 0 {
            return Err(Error::new(CONDIT_IS_NIL, "no records (count or lSize 0)").into());
        }
        if each > isize::MAX as usize {
            return Err(too_large(each).into());
        }
        let total = count.checked_mul(each).ok_or_else(|| Error::new(CONDIT_IS_NIL, "count x lSize overflows"))?;
        // No buffer holds more than isize::MAX bytes, and pushing reads only
        // the records it pushes (it stops when the queue is full): a longer
        // claim is cut to the whole records below that bound, so that no
        // slice longer than any object is formed.
        let total = total.min(isize::MAX as usize / each * each);
        // SAFETY: the caller provides `*n` records of lSize bytes at `*records`.
        let bytes = unsafe { std::slice::from_raw_parts(base.cast::<u8>(), total) };
        let (done, err) = on_queue_kept(h, |q, _| Ok(q.push_many(bytes, each)))?;
        // SAFETY: checked non-NULL above.
        unsafe { *n = done };
        counted(done, err)
    };
    // SAFETY: C callers pass NULL or a handle made by pGetSATvm/pCloneSATvm.
    unsafe { call(p, body) }
}

/// Describes queue t (attaching it on first use), for tools and bindings:
/// its record size, its exact capacity, and how many records it holds now
/// (a snapshot: other threads and processes push and pop meanwhile). Any of
/// the three pointers may be NULL. m_lEffect = 1 on success. Thread-safe
/// (one handle per thread). A tvmq addition, not in STVM.
/// Errors: CONDIT_IS_NIL (NULL handle), TBL_NOT_FOUND, SHM_ERR_ACCES,
/// SHM_ERR_INVAL / VER_NOT_MATCH (not a valid queue file), SHM_ERR_EIDRM,
/// NOT_DURABLE (a durable queue whose file was moved onto tmpfs).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lQueueInfo(
    p: *mut SATvm,
    t: TABLE,
    record_size: *mut usize,
    capacity: *mut usize,
    depth: *mut usize,
) -> c_long {
    let body = |h: &mut SATvm| {
        let (size, cap, now) = on_queue_id(h, t, |q| Ok((q.record_size(), q.capacity(), q.depth())))?;
        for (ptr, v) in [(record_size, size), (capacity, cap as usize), (depth, now as usize)] {
            // SAFETY: each pointer is NULL (skipped) or, by the caller's
            // contract, points to a writable size_t.
            if let Some(out) = unsafe { ptr.as_mut() } {
                *out = v;
            }
        }
        Ok(1)
    };
    // SAFETY: C callers pass NULL or a handle made by pGetSATvm/pCloneSATvm.
    unsafe { call(p, body) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ffi::lease::{TvmLease, lAckPopLease, lPopLease};
    use crate::ffi::{QUE_NOWAIT, pCloneSATvm, vCloneFree};
    use crate::spec::LeaseSpec;
    use crate::test_support::{TempDir, child_env, run_child_in};

    /// A pop writes the record size and no more, whatever lSize says (a
    /// caller may give an lSize above its buffer's size, tvm.h says so):
    /// lPop, lPopWait, lPopLease and lAckPopLease, with lSize 64 on a queue
    /// of 16-byte records, leave bytes 16 to 64 of the buffer as they were.
    #[test]
    fn pops_write_the_record_size_and_no_more_whatever_lsize_says() {
        let dir = TempDir::new("ffi-local", "lsize");
        run_child_in("ffi::local::tests::child_pops_with_a_large_lsize", dir.path());
    }

    #[test]
    #[ignore = "child process: started by pops_write_the_record_size_and_no_more_whatever_lsize_says"]
    fn child_pops_with_a_large_lsize() {
        child_env("TVMQ_TEST_CHILD");
        let mut spec = Spec::new(8, 16);
        spec.leases = Some(LeaseSpec::default());
        Queue::create(&queue_dir(), 1, &spec).unwrap();
        let p = pCloneSATvm().cast::<SATvm>();
        let mut rec = *b"hello";
        // SAFETY: a handle just made, used by this thread alone.
        let h = unsafe { &mut *p };
        (h.tblName, h.pstVoid, h.lSize) = (1, rec.as_mut_ptr().cast::<c_void>(), rec.len());
        let mut lease = TvmLease::ZERO;
        for (k, how) in ["lPop", "lPopWait", "lPopLease", "lAckPopLease"].into_iter().enumerate() {
            h.lSize = rec.len();
            // SAFETY: a valid handle bound to `rec`.
            assert_eq!(unsafe { lPush(p) }, RC_SUCC, "{how}: push");
            let mut out = [0xaau8; 64];
            h.lSize = out.len();
            let o = out.as_mut_ptr().cast::<c_void>();
            // SAFETY: a valid handle, `out` holds lSize bytes, `lease` is writable.
            let rc = unsafe {
                match k {
                    0 => lPop(p, o, QUE_NOWAIT),
                    1 => lPopWait(p, o, 0),
                    2 => lPopLease(p, o, QUE_NOWAIT, 0, &mut lease),
                    _ => lAckPopLease(p, &mut lease, o, QUE_NOWAIT, 0, &mut lease),
                }
            };
            assert_eq!(rc, RC_SUCC, "{how}: {}", Error::code_only(h.m_lErrno));
            assert_eq!(&out[..5], b"hello", "{how}");
            assert!(out[5..16].iter().all(|&b| b == 0), "{how}: zeroes up to the record size: {out:?}");
            assert!(out[16..].iter().all(|&b| b == 0xaa), "{how}: nothing written past the record size: {out:?}");
        }
        // SAFETY: a handle made by pCloneSATvm, not used after.
        unsafe { vCloneFree(p) };
        Queue::drop_queue(&queue_dir(), 1).unwrap();
    }
}
