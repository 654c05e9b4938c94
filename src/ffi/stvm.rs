//! STVM's other calls that apply to queues: handle set-up (pInitSATvm,
//! vInitSATvm, vCloneQueue, vForceDisconnect), questions about a queue
//! (lGetTblRow, lGetTblValid, lGetRowSize, bTableIsExist, lCount), repair
//! (lResetLock), emptying (lTruncate), and files (lExportFile,
//! lImportFile, lDumpTable).

use super::common::text;
use super::handle::{EMPTY_HANDLE, detach, on_queue, on_queue_id};
use super::{CallResult, SATvm, TABLE, call, call_no_handle, pGetSATvm, quietly};
use crate::attach::Attachments;
use crate::error::*;
use crate::file::queue_dir;
use crate::queue::{ExportFormat, Queue};
use std::ffi::{c_char, c_long, c_void};
use std::io::{BufReader, BufWriter};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Runs `f` on queue t of the process's attachments (attached on first
/// use), for a call without a handle.
fn on_queue_no_handle<R>(t: TABLE, f: impl FnOnce(&Queue) -> Result<R>) -> Result<R> {
    Attachments::process().with(t, || {}, f)
}

/// Runs a question about queue t without a handle: its answer, or `failed`
/// with the thread's last error (lGetTErrno) set.
fn ask<R: Copy>(t: TABLE, failed: R, f: impl FnOnce(&Queue) -> R) -> R {
    let mut answer = failed;
    call_no_handle(|| {
        answer = on_queue_no_handle(t, |q| Ok(f(q)))?;
        Ok(0)
    });
    answer
}

/// Attaches queue t for handle p (as lAttchTable), for a handle made with
/// pCloneSATvm: in tvmq attachments belong to the process, so a clone
/// already reaches every attached queue and this only makes sure t is
/// attached. Errors (in m_lErrno / lGetTErrno, no return value): those of
/// lAttchTable. NULL p: nothing, lGetTErrno() = CONDIT_IS_NIL.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vCloneQueue(p: *mut SATvm, t: TABLE) {
    let body = |h: &mut SATvm| -> CallResult {
        on_queue_id(h, t, |_| Ok(()))?;
        Ok(0)
    };
    // SAFETY: C callers pass NULL or a handle made by pGetSATvm/pCloneSATvm.
    unsafe { call(p, body) };
}

/// Returns the process-wide handle (pGetSATvm()) with queue t attached and
/// bound to it (tblName = t); NULL when t cannot be attached (lGetTErrno()
/// says why: TBL_NOT_FOUND and the other codes of lAttchTable). As in STVM,
/// the handle is the process's: give each thread its own with pCloneSATvm().
#[unsafe(no_mangle)]
pub extern "C" fn pInitSATvm(t: TABLE) -> *mut c_void {
    let p = pGetSATvm().cast::<SATvm>();
    let body = |h: &mut SATvm| -> CallResult {
        on_queue_id(h, t, |_| Ok(()))?;
        h.tblName = t;
        Ok(0)
    };
    // SAFETY: the process-wide handle, valid for the process's life.
    let rc = unsafe { call(p, body) };
    if rc == super::RC_SUCC { p.cast::<c_void>() } else { std::ptr::null_mut() }
}

/// Initialises a handle the caller allocated (say, `SATvm h;` on the
/// stack): every member, the private ones included, set to zero. Call it
/// before any other call on such a handle, and never on a handle in use: a
/// connection it holds would be forgotten (vTvmDisconnect it first), and a
/// handle of pCloneSATvm() must still be freed with vCloneFree(). NULL: nothing.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vInitSATvm(p: *mut SATvm) {
    if p.is_null() {
        return;
    }
    quietly(|| {
        // SAFETY: non-NULL; the caller passes memory of the size of an
        // SATvm that no other thread uses. Written whole, never read.
        unsafe { p.write(EMPTY_HANDLE) };
    });
}

/// tvmq's repair of queue t (STVM resets the table's lock; a tvmq queue has
/// no lock): recovers what dead processes left that nobody waits on, as
/// `tvmq repair` does: sleepers of dead processes taken off the waiter
/// count, records taken by a dead consumer and not released delivered again,
/// claims of a dead producer skipped. Safe while other processes work: only
/// holders proven dead (or of unknown identity when no other process is
/// attached) are recovered. m_lEffect = the records recovered (pushes and
/// pops). Thread-safe (one handle per thread).
/// Errors: CONDIT_IS_NIL (NULL handle), and those of lAttchTable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lResetLock(p: *mut SATvm, t: TABLE) -> c_long {
    let body = |h: &mut SATvm| -> CallResult {
        let r = on_queue_id(h, t, |q| Ok(q.repair()))?;
        Ok((r.recovered_pushes + r.recovered_pops) as usize)
    };
    // SAFETY: C callers pass NULL or a handle made by pGetSATvm/pCloneSATvm.
    unsafe { call(p, body) }
}

/// Returns queue t's capacity in records (exactly the `rows` it was created
/// with), attaching it on first use; 0 when it cannot be attached
/// (lGetTErrno() says why: TBL_NOT_FOUND and the codes of lAttchTable).
/// Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn lGetTblRow(t: TABLE) -> usize {
    ask(t, 0, |q| q.capacity() as usize)
}

/// Returns how many records queue t holds now (a snapshot: others push and
/// pop meanwhile), attaching it on first use; 0 when it cannot be attached
/// (lGetTErrno() then says why; it is 0 after a success). Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn lGetTblValid(t: TABLE) -> usize {
    ask(t, 0, |q| q.depth() as usize)
}

/// Returns queue t's record size in bytes, attaching it on first use;
/// RC_FAIL when it cannot be attached (lGetTErrno() says why). Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn lGetRowSize(t: TABLE) -> c_long {
    ask(t, super::RC_FAIL, |q| q.record_size() as c_long)
}

/// Returns true when queue t exists and can be attached (it is then
/// attached to the process); false otherwise, with lGetTErrno() saying why
/// (TBL_NOT_FOUND: no such queue; SHM_ERR_ACCES, SHM_ERR_INVAL,
/// VER_NOT_MATCH: a file that cannot be used). Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn bTableIsExist(t: TABLE) -> bool {
    ask(t, false, |_| true)
}

/// Detaches queue t from the process at once, as vTblDisconnect: in tvmq a
/// detach is always safe (threads in the middle of a call on t finish it on
/// their own reference; the next call attaches t again), so the force of
/// STVM's call changes nothing. NULL p: nothing, lGetTErrno() = CONDIT_IS_NIL.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vForceDisconnect(p: *mut SATvm, t: TABLE) {
    let body = |_: &mut SATvm| -> CallResult {
        detach(t);
        Ok(0)
    };
    // SAFETY: C callers pass NULL or a handle made by pGetSATvm/pCloneSATvm.
    unsafe { call(p, body) };
}

/// Sets `*n` (and m_lEffect) to how many records queue p->tblName holds
/// now (a snapshot), attaching it on first use. Thread-safe (one handle per
/// thread).
/// Errors: CONDIT_IS_NIL (NULL handle or n), and those of lAttchTable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lCount(p: *mut SATvm, n: *mut usize) -> c_long {
    let body = |h: &mut SATvm| -> CallResult {
        if n.is_null() {
            return Err(Error::new(CONDIT_IS_NIL, "NULL count").into());
        }
        let depth = on_queue(h, |q| Ok(q.depth() as usize))?;
        // SAFETY: checked non-NULL; the caller provides a writable size_t.
        unsafe { *n = depth };
        Ok(depth)
    };
    // SAFETY: C callers pass NULL or a handle made by pGetSATvm/pCloneSATvm.
    unsafe { call(p, body) }
}

/// Empties queue t: removes the records it holds when the call starts, by
/// taking them as a consumer would (each record goes exactly once: to a
/// consumer running meanwhile, or to nowhere). Processes attached to t are
/// not disturbed: their pushes and pops go on, nobody is woken, nobody gets
/// an error (STVM's lTruncate locks the table instead). On a queue with
/// leases, records waiting to be delivered again go too; records leased by
/// consumers stay theirs (ack, release, reject work as before). On a
/// durable queue the removals are as durable as pops. m_lEffect = how many
/// records it removed. Thread-safe (one handle per thread).
/// Errors: CONDIT_IS_NIL (NULL handle), those of lAttchTable, and those of
/// lPop other than NO_DATA_FOUND (SHM_ERR_EIDRM: dropped meanwhile).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lTruncate(p: *mut SATvm, t: TABLE) -> c_long {
    let body = |h: &mut SATvm| -> CallResult { Ok(on_queue_id(h, t, |q| q.truncate())? as usize) };
    // SAFETY: C callers pass NULL or a handle made by pGetSATvm/pCloneSATvm.
    unsafe { call(p, body) }
}

/// Opens `path` for an export: created or emptied, mode 0600, never
/// through a symbolic link.
fn create_file(path: &Path) -> Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| file_error(path, &e))
}

fn file_error(path: &Path, e: &std::io::Error) -> Error {
    let code = match e.kind() {
        std::io::ErrorKind::NotFound => FILE_NOTFOUND,
        std::io::ErrorKind::PermissionDenied => SHM_ERR_ACCES,
        _ => SVR_EXCEPTION,
    };
    Error::new(code, format!("{}: {e}", path.display()))
}

/// Writes queue t's export into `path` (see lExportFile); the count.
fn export_to(t: TABLE, path: &Path, format: &ExportFormat) -> Result<u64> {
    on_queue_no_handle(t, |q| {
        let mut w = BufWriter::with_capacity(1 << 16, create_file(path)?);
        q.export(&mut w, format)
    })
}

/// The file name argument of lExportFile / lImportFile.
///
/// # Safety
/// `file` is NULL or a NUL-terminated string.
unsafe fn file_arg(file: *const c_char) -> Result<String> {
    // SAFETY: the caller's contract.
    let path = unsafe { text(file) };
    if path.is_empty() {
        return Err(Error::new(CONDIT_IS_NIL, "no file name"));
    }
    Ok(path)
}

/// Writes a copy of the records queue t holds at one instant into `file`
/// (created, or emptied, mode 0600; a symbolic link is refused), oldest
/// first, taking none: producers and consumers may go on meanwhile.
/// With a queue that has a field list (lTableQueue) and a non-empty `sep`,
/// STVM's form: one text line per record, its fields separated by `sep`
/// (FIELD_CHAR as text up to its first NUL, a backslash, control byte or
/// byte of `sep` in it written \xHH; FIELD_LONG and FIELD_DOUB as decimal
/// numbers). Otherwise (no field list, or `sep` NULL or ""), the binary
/// form: a header naming the queue's geometry, then each record byte for
/// byte (README, "Export and import", gives both formats). Memory: a 64 KB
/// buffer, whatever the queue's size. The copy is that of one instant even
/// while consumers take records, unless producers write a whole lap of the
/// ring over records not yet copied (consumers ahead of the export on a
/// nearly full queue): then MQUE_WAIT_ERR, and the file is incomplete.
/// Records of a queue with leases that are leased, or waiting to be
/// delivered again, are not exported. lGetEffect() = the records written.
/// Thread-safe. Returns RC_SUCC or RC_FAIL (lGetTErrno() says why).
/// Errors: CONDIT_IS_NIL (NULL or empty file; for the text form, a `sep`
/// with a letter, digit, '+', '-', '.', backslash or line end, which a
/// field's text can hold: the binary form ignores `sep`),
/// the codes of lAttchTable, FILE_NOTFOUND / SHM_ERR_ACCES (the file cannot be created), MQUE_WAIT_ERR,
/// IDX_DATA_MISM (a field text cannot show: a FIELD_LONG not of 1, 2, 4 or
/// 8 bytes, a FIELD_DOUB not of 4 or 8), SVR_EXCEPTION (writing failed).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lExportFile(t: TABLE, file: *mut c_char, sep: *mut c_char) -> c_long {
    call_no_handle(|| {
        // SAFETY: C callers pass NULL or NUL-terminated strings.
        let (path, sep) = unsafe { (file_arg(file)?, text(sep)) };
        let has_fields = on_queue_no_handle(t, |q| Ok(!q.info().fields.is_empty()))?;
        let format = if has_fields && !sep.is_empty() { ExportFormat::Text(sep) } else { ExportFormat::Binary };
        Ok(export_to(t, Path::new(&path), &format)? as usize)
    })
}

/// Pushes the records of an export (lExportFile, lDumpTable, `tvmq
/// export`) from `file` into queue t, after those it holds: a binary export
/// (recognised by its header) whatever `sep`, otherwise text lines whose
/// fields are separated by `sep` (t must have a field list). Records are
/// pushed as lPush does, so consumers may take them at once. It stops at the
/// first record that does not go in: when t fills, RC_FAIL with
/// DATA_SPC_FULL and lGetEffect() = the records pushed before (they stay).
/// lGetEffect() = the records pushed. Thread-safe. Returns RC_SUCC or
/// RC_FAIL (lGetTErrno() says why).
/// Errors: CONDIT_IS_NIL (NULL or empty file; text with no `sep`, or a
/// `sep` lExportFile refuses),
/// FILE_NOTFOUND, SHM_ERR_ACCES, DATA_SPC_FULL, RECD_TOO_LONG (the export's
/// records are longer than t's: nothing pushed), FIELD_NOT_DEF (text into a
/// queue without field list), FLD_NOT_EXIST (a line with another number of
/// fields), IDX_DATA_MISM (a field's text does not fit it), VER_NOT_MATCH /
/// SHM_ERR_INVAL (not an export this version reads, or cut short: the
/// records before the damage are pushed; VER_NOT_MATCH too for a binary
/// export made on a machine of the other byte order without a field list
/// to turn its numbers around by), and those of lPush.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lImportFile(t: TABLE, file: *mut c_char, sep: *mut c_char) -> c_long {
    call_no_handle(|| {
        // SAFETY: C callers pass NULL or NUL-terminated strings.
        let (path, sep) = unsafe { (file_arg(file)?, text(sep)) };
        let path = Path::new(&path);
        let f = std::fs::File::open(path).map_err(|e| file_error(path, &e))?;
        let mut r = BufReader::with_capacity(1 << 16, f);
        let (n, stop) = on_queue_no_handle(t, |q| Ok(q.import(&mut r, &sep)))?;
        super::common::counted(n as usize, stop)
    })
}

/// Writes the binary export of queue t (see lExportFile) into the file
/// `<queue directory>/<t>.sdb` ($TVMDBD/21.sdb for queue 21), a copy of its
/// records at one instant, taking none; `tvmq import 21 $TVMDBD/21.sdb` or
/// lImportFile loads it back. m_lEffect = the records written. Thread-safe
/// (one handle per thread).
/// Errors: CONDIT_IS_NIL (NULL handle), and those of lExportFile.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lDumpTable(p: *mut SATvm, t: TABLE) -> c_long {
    let body = |h: &mut SATvm| -> CallResult {
        on_queue_id(h, t, |_| Ok(()))?;
        let path = queue_dir().join(format!("{t}.sdb"));
        Ok(export_to(t, &path, &ExportFormat::Binary)? as usize)
    };
    // SAFETY: C callers pass NULL or a handle made by pGetSATvm/pCloneSATvm.
    unsafe { call(p, body) }
}
