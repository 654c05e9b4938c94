//! Queue files: where they live, their layout, atomic creation, and opening
//! that checks everything before anything is used.
//!
//! One file per queue, `queue-<id>.tvmq`, in `$TVMDBD` or, when that is unset,
//! in `/dev/shm/tvmq-<uid>` (created 0700 for the user). Layout, all offsets
//! fixed for layout version 1:
//!
//! | offset | size | content |
//! |---|---|---|
//! | 0 | 4 KiB | [`Info`]: magic, version, geometry, name, fields, checksum (immutable) |
//! | 4096 | 4 KiB | [`Control`]: ring cursors, futex and waiter count, dropped flag, counters |
//! | 8192 | 32 KiB | process table ([`crate::registry`]) |
//! | 40960 | capacity x stride | slots: 16-byte header + record, stride = 16 + record size rounded up to 8 |
//!
//! All-zero control, table and slots are the valid initial state, so a new
//! file is the header plus `fallocate`d zero pages: creating a queue writes
//! 4 KiB however large it is.

use crate::error::*;
use crate::registry::{MAX_PROCS, ProcEntry, TABLE_BYTES};
use crate::ring::{CachePadded, Cursors, MAX_CAPACITY, SlotHeader, Storage, one_lap};
use memmap2::{MmapOptions, MmapRaw};
use std::ffi::CString;
use std::fs::File;
use std::mem::{offset_of, size_of};
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64};

/// First bytes of every queue file.
pub const MAGIC: [u8; 8] = *b"TVMQUEUE";
/// Layout version this library reads and writes.
pub const VERSION: u32 = 1;
/// Bytes reserved for [`Info`].
pub const INFO_BYTES: u64 = 4096;
/// File offset of [`Control`].
pub const CONTROL_OFFSET: u64 = 4096;
/// File offset of the process table.
pub const TABLE_OFFSET: u64 = 8192;
/// File offset of slot 0.
pub const DATA_OFFSET: u64 = TABLE_OFFSET + TABLE_BYTES as u64;
/// Bytes before each record in a slot.
pub const SLOT_HEADER_BYTES: u64 = size_of::<SlotHeader>() as u64;
/// Largest record size (the slot keeps lengths in 32 bits).
pub const MAX_RECORD_SIZE: u64 = 1 << 30;
/// Most fields a record layout can describe.
pub const MAX_FIELDS: usize = 64;
/// Longest queue name and partition, in bytes.
pub const NAME_BYTES: usize = 64;
pub const PART_BYTES: usize = 32;
pub const FIELD_NAME_BYTES: usize = 32;
/// Unblock timeout written into new queues unless told otherwise.
pub const DEFAULT_UNBLOCK_TIMEOUT_MS: u64 = 10_000;

/// Field kinds, as STVM numbers them.
pub const FIELD_CHAR: u32 = 1;
pub const FIELD_LONG: u32 = 2;
pub const FIELD_DOUB: u32 = 4;

/// One field of a record layout, as stored in the file.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FieldDesc {
    /// NUL-padded name.
    pub name: [u8; FIELD_NAME_BYTES],
    pub offset: u32,
    pub len: u32,
    /// [`FIELD_CHAR`], [`FIELD_LONG`] or [`FIELD_DOUB`].
    pub kind: u32,
    pub reserved: u32,
}

/// The immutable header at offset 0. Every field is checked on open.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Info {
    pub magic: [u8; 8],
    pub version: u32,
    pub info_bytes: u32,
    pub control_offset: u64,
    pub table_offset: u64,
    pub data_offset: u64,
    /// Exact size of the file.
    pub file_size: u64,
    pub record_size: u64,
    /// Exact number of records the queue holds.
    pub capacity: u64,
    /// `(capacity + 1).next_power_of_two()`.
    pub one_lap: u64,
    /// Bytes per slot: 16 + record size rounded up to 8.
    pub slot_stride: u64,
    pub created_ns: u64,
    /// How long a waiter waits for a slot whose holder cannot be proven dead
    /// or alive before recovering it.
    pub unblock_timeout_ms: u64,
    pub id: u32,
    /// Permission bits the file was created with.
    pub mode: u32,
    /// Entries in the process table.
    pub proc_slots: u32,
    pub field_count: u32,
    pub name: [u8; NAME_BYTES],
    pub part: [u8; PART_BYTES],
    pub fields: [FieldDesc; MAX_FIELDS],
    /// FNV-1a 64 of every byte above.
    pub checksum: u64,
}

const _: () = assert!(size_of::<Info>() as u64 <= INFO_BYTES);
const _: () = assert!(size_of::<Control>() as u64 <= TABLE_OFFSET - CONTROL_OFFSET);
const _: () = assert!(DATA_OFFSET % 4096 == 0);

/// The futex word and the waiter count, on a line of their own.
#[repr(C)]
#[derive(Default)]
pub struct WakeWords {
    /// Bumped by a producer before waking sleepers; sleepers wait on it.
    pub futex: AtomicU32,
    /// Threads announced as (about to be) asleep; producers skip the wake-up
    /// system call while it is 0.
    pub waiters: AtomicU32,
}

/// Read on every call, written once: kept apart from the busy lines.
#[repr(C)]
#[derive(Default)]
pub struct StateWords {
    /// Non-zero once the queue has been dropped.
    pub dropped: AtomicU32,
    /// Processes attached without an entry in the process table (it was
    /// full): while non-zero, no stalled holder can be proven dead.
    pub unregistered: AtomicU32,
}

/// Counters of rare events (not touched by normal pushes and pops).
#[repr(C)]
#[derive(Default)]
pub struct Stats {
    /// Claims of dead producers turned into skipped (empty) records.
    pub recovered_pushes: AtomicU64,
    /// Records of dead consumers delivered again.
    pub recovered_pops: AtomicU64,
    /// Calls that failed because their own slot had been recovered.
    pub robbed: AtomicU64,
    /// Sleepers of dead processes taken off the waiter count.
    pub reconciled_waiters: AtomicU64,
    /// Time of the last recovery, nanoseconds since the Unix epoch.
    pub last_recovery_ns: AtomicU64,
}

/// The mutable shared state at [`CONTROL_OFFSET`].
#[repr(C)]
#[derive(Default)]
pub struct Control {
    pub cursors: Cursors,
    pub wake: CachePadded<WakeWords>,
    pub state: CachePadded<StateWords>,
    pub stats: CachePadded<Stats>,
}

/// A field given to [`create`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Field {
    pub name: String,
    pub offset: u32,
    pub len: u32,
    pub kind: u32,
}

/// What [`create`] makes.
#[derive(Clone, Debug)]
pub struct Spec {
    /// Exact capacity in records, >= 1.
    pub rows: u64,
    /// Largest record in bytes, >= 1.
    pub record_size: u64,
    pub name: String,
    pub part: String,
    pub fields: Vec<Field>,
    /// Permission bits of the file (0600 unless told otherwise).
    pub mode: u32,
    pub unblock_timeout_ms: u64,
}

impl Spec {
    /// A queue of `rows` records of up to `record_size` bytes, mode 0600.
    pub fn new(rows: u64, record_size: u64) -> Spec {
        Spec {
            rows,
            record_size,
            name: String::new(),
            part: String::new(),
            fields: Vec::new(),
            mode: 0o600,
            unblock_timeout_ms: DEFAULT_UNBLOCK_TIMEOUT_MS,
        }
    }
}

/// Nanoseconds since the Unix epoch.
pub fn now_ns() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

/// The queue directory: `$TVMDBD`, or `/dev/shm/tvmq-<uid>`.
pub fn queue_dir() -> PathBuf {
    match std::env::var_os("TVMDBD") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => default_dir(),
    }
}

fn default_dir() -> PathBuf {
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    PathBuf::from(format!("/dev/shm/tvmq-{uid}"))
}

/// The file of queue `id` in `dir`.
pub fn queue_path(dir: &Path, id: u32) -> PathBuf {
    dir.join(format!("queue-{id}.tvmq"))
}

/// The queue id of a file name made by [`queue_path`].
pub fn parse_file_name(name: &str) -> Option<u32> {
    name.strip_prefix("queue-")?.strip_suffix(".tvmq")?.parse().ok()
}

/// Slot stride for a record size.
pub fn slot_stride(record_size: u64) -> u64 {
    SLOT_HEADER_BYTES + record_size.div_ceil(8) * 8
}

/// Exact file size of a queue, or `None` if it overflows.
pub fn file_size(rows: u64, record_size: u64) -> Option<u64> {
    rows.checked_mul(slot_stride(record_size))?.checked_add(DATA_OFFSET)
}

fn io_error(code: u32, what: &str, path: &Path, e: std::io::Error) -> Error {
    Error::new(code, format!("{what} {}: {e}", path.display()))
}

fn cpath(path: &Path) -> Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| Error::new(SHM_ERR_INVAL, format!("path contains a NUL byte: {}", path.display())))
}

/// Checks (and, for the default directory, creates) the queue directory.
/// Returns the uid of its owner.
pub fn check_dir(dir: &Path, create: bool) -> Result<u32> {
    let is_default = dir == default_dir();
    if create && !dir.exists() {
        let mut b = std::fs::DirBuilder::new();
        std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
        b.recursive(true);
        if let Err(e) = b.create(dir) {
            if !dir.is_dir() {
                return Err(io_error(SHM_ERR_ACCES, "cannot create queue directory", dir, e));
            }
        }
    }
    let meta = if is_default { std::fs::symlink_metadata(dir) } else { std::fs::metadata(dir) };
    let meta = match meta {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Error::new(TBL_NOT_FOUND, format!("queue directory {} does not exist", dir.display())));
        }
        Err(e) => return Err(io_error(SHM_ERR_ACCES, "cannot read queue directory", dir, e)),
    };
    if meta.file_type().is_symlink() {
        // Only the default directory is looked at without following links:
        // someone else could have planted the link in /dev/shm.
        return Err(Error::new(SHM_ERR_ACCES, format!("{} is a symbolic link: refused", dir.display())));
    }
    if !meta.is_dir() {
        return Err(Error::new(SHM_ERR_INVAL, format!("{} is not a directory", dir.display())));
    }
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if is_default && meta.uid() != me {
        return Err(Error::new(
            SHM_ERR_ACCES,
            format!("{} belongs to uid {}, not to you (uid {me}): refused", dir.display(), meta.uid()),
        ));
    }
    Ok(meta.uid())
}

/// Creates queue `id` in `dir`, atomically: the file appears complete or not
/// at all.
pub fn create(dir: &Path, id: u32, spec: &Spec) -> Result<()> {
    if spec.rows == 0 || spec.record_size == 0 {
        return Err(Error::new(CONDIT_IS_NIL, "rows and record size must both be at least 1"));
    }
    if spec.rows > MAX_CAPACITY {
        return Err(Error::new(MQUE_CRTE_BIG, format!("{} rows: at most {MAX_CAPACITY}", spec.rows)));
    }
    if spec.record_size > MAX_RECORD_SIZE {
        return Err(Error::new(MQUE_CRTE_BIG, format!("record size {}: at most {MAX_RECORD_SIZE}", spec.record_size)));
    }
    let size = file_size(spec.rows, spec.record_size)
        .filter(|&s| s <= i64::MAX as u64)
        .ok_or_else(|| Error::new(MQUE_CRTE_BIG, "rows x record size overflows"))?;
    if spec.mode & !0o777 != 0 {
        return Err(Error::new(
            CONDIT_IS_NIL,
            format!("mode {:o}: only permission bits (0..=0777) are allowed", spec.mode),
        ));
    }
    let info = build_info(id, spec, size)?;

    check_dir(dir, true)?;
    let path = queue_path(dir, id);
    if std::fs::symlink_metadata(&path).is_ok() {
        return Err(Error::new(TBL_ARD_EXIST, format!("queue {id} already exists ({})", path.display())));
    }
    let available = available_bytes(dir);
    if available.is_some_and(|a| size > a) {
        return Err(Error::new(
            MQUE_CRTE_BIG,
            format!("queue needs {size} bytes, {} has {} available", dir.display(), available.unwrap_or(0)),
        ));
    }

    static SEQ: AtomicU64 = AtomicU64::new(0);
    let tmp = dir.join(format!(
        ".queue-{id}.tmp.{}.{}",
        std::process::id(),
        SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    let ctmp = cpath(&tmp)?;
    // SAFETY: open with a valid C path; the returned fd is owned by `file` below.
    let fd = unsafe {
        libc::open(
            ctmp.as_ptr(),
            libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            spec.mode as libc::c_uint,
        )
    };
    if fd < 0 {
        return Err(io_error(SHM_ERR_ACCES, "cannot create", &tmp, std::io::Error::last_os_error()));
    }
    // SAFETY: fd is a fresh descriptor that nothing else owns.
    let file = unsafe { File::from_raw_fd(fd) };
    let result = fill_new_file(&file, &tmp, &info, spec.mode).and_then(|()| publish(&tmp, &path, id));
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

fn fill_new_file(file: &File, tmp: &Path, info: &Info, mode: u32) -> Result<()> {
    // The umask must not narrow (or we widen) the requested mode.
    // SAFETY: fchmod on an fd we own.
    if unsafe { libc::fchmod(file.as_raw_fd(), mode as libc::mode_t) } != 0 {
        return Err(io_error(SHM_ERR_ACCES, "cannot chmod", tmp, std::io::Error::last_os_error()));
    }
    // Reserve every page now: a full tmpfs must fail here, not as SIGBUS later.
    // SAFETY: posix_fallocate on an fd we own.
    let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, info.file_size as libc::off_t) };
    match rc {
        0 => {}
        libc::EOPNOTSUPP | libc::EINVAL => {
            file.set_len(info.file_size).map_err(|e| io_error(MQUE_CRTE_BIG, "cannot size", tmp, e))?
        }
        libc::ENOSPC | libc::EFBIG => {
            return Err(Error::new(
                MQUE_CRTE_BIG,
                format!("no room for {} bytes in {}", info.file_size, tmp.display()),
            ));
        }
        e => return Err(io_error(SHM_ERR_NOMEM, "cannot allocate", tmp, std::io::Error::from_raw_os_error(e))),
    }
    if is_tmpfs(file) {
        zero_fill(file, info.file_size).map_err(|e| io_error(MQUE_CRTE_BIG, "cannot fill", tmp, e))?;
    }
    file.write_all_at(info_bytes(info), 0).map_err(|e| io_error(SHM_ERR_NOMEM, "cannot write header of", tmp, e))
}

/// Is the file on tmpfs (as /dev/shm is)?
fn is_tmpfs(file: &File) -> bool {
    // SAFETY: statfs is plain data; the call fills it.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: valid fd and out pointer.
    unsafe { libc::fstatfs(file.as_raw_fd(), &mut st) == 0 && st.f_type == libc::TMPFS_MAGIC }
}

/// Writes zeros over the whole file. On tmpfs, `fallocate` reserves pages but
/// leaves them to be cleared by whoever touches them first: clearing them
/// here, once, keeps that cost (about a second for 1.3 GB through page faults
/// on this machine type) out of every attaching process's first pushes.
fn zero_fill(file: &File, len: u64) -> std::io::Result<()> {
    const CHUNK: usize = 1 << 20;
    let zeros = vec![0u8; CHUNK];
    let mut at = 0;
    while at < len {
        let n = CHUNK.min((len - at) as usize);
        file.write_all_at(&zeros[..n], at)?;
        at += n as u64;
    }
    Ok(())
}

/// Maps every page of a new mapping into this process now, so that pushes
/// and pops do not page-fault. On tmpfs a read-populate maps the pages
/// writable (and costs half of a write-populate); elsewhere pages must be
/// write-populated to be writable without faults. Kernels without
/// MADV_POPULATE_* (before 5.14) get one read per page, which the kernel's
/// fault-around turns into one fault per 16 pages.
fn populate(ptr: *mut u8, len: usize, tmpfs: bool) {
    const MADV_POPULATE_READ: libc::c_int = 22;
    const MADV_POPULATE_WRITE: libc::c_int = 23;
    let advice = if tmpfs { MADV_POPULATE_READ } else { MADV_POPULATE_WRITE };
    // SAFETY: ptr..ptr+len is a live mapping of ours; populating only faults pages in.
    if unsafe { libc::madvise(ptr.cast(), len, advice) } == 0 {
        return;
    }
    for off in (0..len).step_by(4096) {
        // SAFETY: off < len, inside the mapping; a volatile read has no effect but the fault.
        unsafe { std::ptr::read_volatile(ptr.add(off)) };
    }
}

/// Moves the finished temporary file to its name, failing if the name exists.
fn publish(tmp: &Path, path: &Path, id: u32) -> Result<()> {
    let (ctmp, cfinal) = (cpath(tmp)?, cpath(path)?);
    // SAFETY: valid C paths; renameat2 does not keep them.
    let rc = unsafe {
        libc::renameat2(libc::AT_FDCWD, ctmp.as_ptr(), libc::AT_FDCWD, cfinal.as_ptr(), libc::RENAME_NOREPLACE)
    };
    let err = if rc == 0 { return Ok(()) } else { std::io::Error::last_os_error() };
    let err = match err.raw_os_error() {
        // File systems without RENAME_NOREPLACE: link() fails on an existing name too.
        Some(libc::EINVAL | libc::ENOSYS) => match std::fs::hard_link(tmp, path) {
            Ok(()) => {
                let _ = std::fs::remove_file(tmp);
                return Ok(());
            }
            Err(e) => e,
        },
        _ => err,
    };
    if err.kind() == std::io::ErrorKind::AlreadyExists {
        Err(Error::new(TBL_ARD_EXIST, format!("queue {id} already exists ({})", path.display())))
    } else {
        Err(io_error(SHM_ERR_ACCES, "cannot create", path, err))
    }
}

fn available_bytes(dir: &Path) -> Option<u64> {
    let c = cpath(dir).ok()?;
    // SAFETY: statvfs is plain data; the call fills it.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: valid C path and out pointer.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    Some((st.f_bavail as u64).saturating_mul(st.f_frsize as u64))
}

fn copy_str(dst: &mut [u8], s: &str) {
    // Keep a NUL at the end; cut on a character boundary.
    let mut n = s.len().min(dst.len() - 1);
    while !s.is_char_boundary(n) {
        n -= 1;
    }
    dst[..n].copy_from_slice(&s.as_bytes()[..n]);
}

fn build_info(id: u32, spec: &Spec, size: u64) -> Result<Info> {
    if spec.fields.len() > MAX_FIELDS {
        return Err(Error::new(FLD_DEF_SPILL, format!("{} fields: at most {MAX_FIELDS}", spec.fields.len())));
    }
    let empty = FieldDesc { name: [0; FIELD_NAME_BYTES], offset: 0, len: 0, kind: 0, reserved: 0 };
    let mut fields = [empty; MAX_FIELDS];
    for (slot, f) in fields.iter_mut().zip(&spec.fields) {
        check_field(f, spec.record_size)?;
        copy_str(&mut slot.name, &f.name);
        slot.offset = f.offset;
        slot.len = f.len;
        slot.kind = f.kind;
    }
    let mut info = Info {
        magic: MAGIC,
        version: VERSION,
        info_bytes: INFO_BYTES as u32,
        control_offset: CONTROL_OFFSET,
        table_offset: TABLE_OFFSET,
        data_offset: DATA_OFFSET,
        file_size: size,
        record_size: spec.record_size,
        capacity: spec.rows,
        one_lap: one_lap(spec.rows),
        slot_stride: slot_stride(spec.record_size),
        created_ns: now_ns(),
        unblock_timeout_ms: spec.unblock_timeout_ms,
        id,
        mode: spec.mode,
        proc_slots: MAX_PROCS as u32,
        field_count: spec.fields.len() as u32,
        name: [0; NAME_BYTES],
        part: [0; PART_BYTES],
        fields,
        checksum: 0,
    };
    copy_str(&mut info.name, &spec.name);
    copy_str(&mut info.part, &spec.part);
    info.checksum = checksum(&info);
    Ok(info)
}

/// Checks one field against a record size.
pub fn check_field(f: &Field, record_size: u64) -> Result<()> {
    if ![FIELD_CHAR, FIELD_LONG, FIELD_DOUB].contains(&f.kind) {
        return Err(Error::new(FTYPE_NOT_DEF, format!("field {:?}: kind {} (use 1, 2 or 4)", f.name, f.kind)));
    }
    if f.name.is_empty() || f.name.len() >= FIELD_NAME_BYTES || f.name.contains('\0') {
        return Err(Error::new(FLD_DEF_SPILL, format!("field name {:?}: 1 to {} bytes", f.name, FIELD_NAME_BYTES - 1)));
    }
    if f.len == 0 || u64::from(f.offset) + u64::from(f.len) > record_size {
        return Err(Error::new(
            FLD_DEF_SPILL,
            format!(
                "field {:?} (offset {}, length {}) lies outside a {record_size}-byte record",
                f.name, f.offset, f.len
            ),
        ));
    }
    Ok(())
}

fn info_bytes(info: &Info) -> &[u8] {
    // SAFETY: Info is repr(C) plain data without padding (checked by the
    // layout test), so all its bytes are initialised.
    unsafe { std::slice::from_raw_parts((info as *const Info).cast::<u8>(), size_of::<Info>()) }
}

/// FNV-1a 64 of the header bytes before the checksum.
pub fn checksum(info: &Info) -> u64 {
    info_bytes(info)[..offset_of!(Info, checksum)]
        .iter()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3))
}

fn c_str(bytes: &[u8]) -> Option<&str> {
    let end = bytes.iter().position(|&b| b == 0)?;
    std::str::from_utf8(&bytes[..end]).ok()
}

impl Info {
    /// The queue's name.
    pub fn name(&self) -> &str {
        c_str(&self.name).unwrap_or("")
    }

    /// The partition text given at creation.
    pub fn part(&self) -> &str {
        c_str(&self.part).unwrap_or("")
    }

    /// The record layout.
    pub fn fields(&self) -> Vec<Field> {
        self.fields[..(self.field_count as usize).min(MAX_FIELDS)]
            .iter()
            .map(|f| Field {
                name: c_str(&f.name).unwrap_or("").to_string(),
                offset: f.offset,
                len: f.len,
                kind: f.kind,
            })
            .collect()
    }

    /// Checks every field of a header read from a file of `file_len` bytes
    /// (expected to be queue `id`, if given).
    pub fn validate(&self, file_len: u64, id: Option<u32>) -> Result<()> {
        let bad = |what: String| Err(Error::new(SHM_ERR_INVAL, what));
        if self.magic != MAGIC {
            return bad("not a tvmq queue file (bad magic)".into());
        }
        if self.version != VERSION {
            return Err(Error::new(
                VER_NOT_MATCH,
                format!("queue file has layout version {}, this library reads version {VERSION}", self.version),
            ));
        }
        if self.checksum != checksum(self) {
            return bad("header checksum mismatch: the header was modified or corrupted".into());
        }
        if u64::from(self.info_bytes) != INFO_BYTES
            || self.control_offset != CONTROL_OFFSET
            || self.table_offset != TABLE_OFFSET
            || self.data_offset != DATA_OFFSET
            || self.proc_slots as usize != MAX_PROCS
        {
            return bad("header offsets do not match layout version 1".into());
        }
        if !(1..=MAX_RECORD_SIZE).contains(&self.record_size) {
            return bad(format!("record size {} out of range", self.record_size));
        }
        if !(1..=MAX_CAPACITY).contains(&self.capacity) {
            return bad(format!("capacity {} out of range", self.capacity));
        }
        if self.one_lap != one_lap(self.capacity) || self.slot_stride != slot_stride(self.record_size) {
            return bad("header geometry is inconsistent".into());
        }
        if file_size(self.capacity, self.record_size) != Some(self.file_size) {
            return bad(format!("header says {} bytes, its geometry needs another size", self.file_size));
        }
        if self.file_size != file_len {
            return bad(format!(
                "file is {file_len} bytes, its header says {} (truncated or extended)",
                self.file_size
            ));
        }
        if self.field_count as usize > MAX_FIELDS {
            return bad(format!("{} fields in header", self.field_count));
        }
        for f in self.fields() {
            check_field(&f, self.record_size).map_err(|e| Error::new(SHM_ERR_INVAL, e.to_string()))?;
        }
        if c_str(&self.name).is_none() || c_str(&self.part).is_none() {
            return bad("queue name is not NUL-terminated UTF-8".into());
        }
        if let Some(id) = id {
            if self.id != id {
                return bad(format!("file of queue {id} holds queue {}", self.id));
            }
        }
        Ok(())
    }
}

/// How to open a queue file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// For pushing and popping: read-write, pages populated at once.
    ReadWrite { populate: bool },
    /// For inspection only.
    ReadOnly,
}

/// An open, validated, mapped queue file.
pub struct QueueFile {
    map: MmapRaw,
    file: File,
    info: Info,
    path: PathBuf,
}

impl QueueFile {
    /// Opens queue `id` in `dir`, refusing anything that is not a regular
    /// queue file of ours with a valid header.
    pub fn open(dir: &Path, id: u32, access: Access) -> Result<QueueFile> {
        let path = queue_path(dir, id);
        let file = open_checked(dir, &path, access != Access::ReadOnly)?;
        let len = file.metadata().map_err(|e| io_error(SHM_ERR_INVAL, "cannot stat", &path, e))?.len();
        if len < INFO_BYTES {
            return Err(Error::new(SHM_ERR_INVAL, format!("{} is truncated ({len} bytes)", path.display())));
        }
        let mut raw = [0u8; size_of::<Info>()];
        file.read_exact_at(&mut raw, 0).map_err(|e| io_error(SHM_ERR_INVAL, "cannot read", &path, e))?;
        // SAFETY: Info is plain data (integers and byte arrays): any bytes are a value.
        let info: Info = unsafe { std::ptr::read_unaligned(raw.as_ptr().cast()) };
        info.validate(len, Some(id))
            .map_err(|e| Error::new(e.code(), format!("{}: {}", path.display(), e.detail())))?;
        let mut opts = MmapOptions::new();
        opts.len(len as usize);
        let map = match access {
            Access::ReadWrite { .. } => opts.map_raw(&file),
            Access::ReadOnly => opts.map_raw_read_only(&file),
        }
        .map_err(|e| io_error(SHM_ERR_NOMEM, "cannot map", &path, e))?;
        if access == (Access::ReadWrite { populate: true }) {
            populate(map.as_mut_ptr(), map.len(), is_tmpfs(&file));
        }
        Ok(QueueFile { map, file, info, path })
    }

    /// The validated header.
    pub fn info(&self) -> &Info {
        &self.info
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The open file (its descriptor carries this process's registry lock).
    pub fn file(&self) -> &File {
        &self.file
    }

    /// The shared control block.
    pub fn control(&self) -> &Control {
        // SAFETY: the map is at least DATA_OFFSET bytes (validated), page
        // aligned, and Control (atomics only) fits before TABLE_OFFSET.
        unsafe { &*self.map.as_ptr().add(CONTROL_OFFSET as usize).cast::<Control>() }
    }

    /// The process table.
    pub fn table(&self) -> *const ProcEntry {
        // SAFETY: in bounds as above; TABLE_BYTES fit before DATA_OFFSET.
        unsafe { self.map.as_ptr().add(TABLE_OFFSET as usize).cast::<ProcEntry>() }
    }

    /// The ring storage of this mapping.
    pub fn storage(&self) -> MapStorage {
        MapStorage {
            // SAFETY: DATA_OFFSET is inside the validated mapping.
            slots: unsafe { self.map.as_mut_ptr().add(DATA_OFFSET as usize) },
            control: self.control() as *const Control,
            stride: self.info.slot_stride as usize,
            capacity: self.info.capacity as usize,
            record_size: self.info.record_size as usize,
        }
    }
}

/// Opens a queue file without following links or blocking, and checks that it
/// is a regular file owned by us or by the directory's owner.
fn open_checked(dir: &Path, path: &Path, write: bool) -> Result<File> {
    let dir_owner = check_dir(dir, false)?;
    let c = cpath(path)?;
    let mode = if write { libc::O_RDWR } else { libc::O_RDONLY };
    // SAFETY: open with a valid C path; the fd is owned by the File below.
    let fd = unsafe {
        libc::open(c.as_ptr(), mode | libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK | libc::O_NOCTTY)
    };
    if fd < 0 {
        let e = std::io::Error::last_os_error();
        return Err(match e.raw_os_error() {
            Some(libc::ENOENT) => Error::new(TBL_NOT_FOUND, format!("no queue file {}", path.display())),
            Some(libc::ELOOP) => Error::new(SHM_ERR_ACCES, format!("{} is a symbolic link: refused", path.display())),
            Some(libc::EACCES | libc::EPERM) => io_error(SHM_ERR_ACCES, "cannot open", path, e),
            _ => io_error(SHM_ERR_INVAL, "cannot open", path, e),
        });
    }
    // SAFETY: fd is a fresh descriptor that nothing else owns.
    let file = unsafe { File::from_raw_fd(fd) };
    let meta = file.metadata().map_err(|e| io_error(SHM_ERR_INVAL, "cannot stat", path, e))?;
    if !meta.file_type().is_file() {
        return Err(Error::new(SHM_ERR_INVAL, format!("{} is not a regular file: refused", path.display())));
    }
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me && meta.uid() != dir_owner {
        return Err(Error::new(
            SHM_ERR_ACCES,
            format!(
                "{} belongs to uid {}, neither you (uid {me}) nor the directory's owner (uid {dir_owner}): refused",
                path.display(),
                meta.uid()
            ),
        ));
    }
    Ok(file)
}

/// Removes queue `id`: marks it dropped in the shared header (so that
/// attached processes stop and sleepers wake with `SHM_ERR_EIDRM`), then
/// unlinks the file. Needs write permission on the file.
pub fn drop_queue(dir: &Path, id: u32) -> Result<()> {
    let path = queue_path(dir, id);
    let opened = match QueueFile::open(dir, id, Access::ReadWrite { populate: false }) {
        Ok(q) => {
            let c = q.control();
            c.state.0.dropped.store(1, std::sync::atomic::Ordering::SeqCst);
            c.wake.0.futex.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            crate::wait::wake(&c.wake.0.futex, u32::MAX);
            q.file
        }
        // A corrupted or other-version file is removed without being mapped,
        // after the same type, ownership and permission checks.
        Err(e) if matches!(e.code(), SHM_ERR_INVAL | VER_NOT_MATCH) => open_checked(dir, &path, true)?,
        Err(e) => return Err(e),
    };
    let inode = opened.metadata().map(|m| (m.dev(), m.ino())).ok();
    // Unlink only the file we opened, not a queue re-created meanwhile.
    let now = std::fs::symlink_metadata(&path).map(|m| (m.dev(), m.ino())).ok();
    if now.is_some() && now != inode {
        return Err(Error::new(TBL_NOT_FOUND, format!("queue {id} was replaced while being dropped")));
    }
    std::fs::remove_file(&path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => Error::new(TBL_NOT_FOUND, format!("no queue file {}", path.display())),
        _ => io_error(SHM_ERR_ACCES, "cannot remove", &path, e),
    })
}

/// Removes temporary files that a creation of queue `id` left behind when
/// its process died (`.queue-<id>.tmp.<pid>.<n>` with `<pid>` gone). Returns
/// how many were removed.
pub fn remove_stale_temporaries(dir: &Path, id: u32) -> usize {
    let prefix = format!(".queue-{id}.tmp.");
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    let mut removed = 0;
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.strip_prefix(&prefix)).and_then(|r| r.split('.').next()) else {
            continue;
        };
        let Ok(pid) = pid.parse::<i32>() else { continue };
        // SAFETY: kill with signal 0 only checks for the process.
        let gone =
            unsafe { libc::kill(pid, 0) } != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        if gone && std::fs::remove_file(e.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// Slots in a mapped queue file.
pub struct MapStorage {
    slots: *mut u8,
    control: *const Control,
    stride: usize,
    capacity: usize,
    record_size: usize,
}

// SAFETY: raw pointers into a shared mapping that the owning Queue keeps alive;
// all shared words are atomics, and record bytes are only touched by the slot's holder.
unsafe impl Send for MapStorage {}
// SAFETY: as above.
unsafe impl Sync for MapStorage {}

// SAFETY: `slot(i)` for i < capacity is inside the mapping, which holds
// DATA_OFFSET + capacity * stride bytes (validated on open), and read/write
// copy at most record_size bytes after the 16-byte slot header.
unsafe impl Storage for MapStorage {
    #[inline]
    fn cursors(&self) -> &Cursors {
        // SAFETY: control points into the live mapping (see QueueFile::control).
        unsafe { &(*self.control).cursors }
    }

    #[inline]
    fn prefetch(&self, index: usize) {
        if index >= self.capacity {
            return;
        }
        #[cfg(target_arch = "x86_64")]
        {
            let start = self.slots.wrapping_add(index * self.stride);
            let mut line = 0;
            while line < self.stride.min(16 + self.record_size) {
                // SAFETY: a prefetch never faults; the address lies in slot `index`.
                unsafe {
                    std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                        start.wrapping_add(line).cast(),
                    )
                };
                line += 64;
            }
        }
    }

    #[inline]
    fn slot(&self, index: usize) -> &SlotHeader {
        debug_assert!(index < self.capacity);
        // SAFETY: index < capacity (the ring checks it), so the header lies in the mapping; stride is a multiple of 8.
        unsafe { &*self.slots.add(index * self.stride).cast::<SlotHeader>() }
    }

    #[inline]
    unsafe fn write(&self, index: usize, offset: usize, src: &[u8]) {
        debug_assert!(index < self.capacity && offset + src.len() <= self.record_size);
        // SAFETY: in bounds as in `slot`; offset + src.len() <= record_size
        // (the caller's contract); the caller holds the slot.
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), self.slots.add(index * self.stride + 16 + offset), src.len())
        };
    }

    #[inline]
    unsafe fn read(&self, index: usize, dst: &mut [u8]) {
        debug_assert!(index < self.capacity && dst.len() <= self.record_size);
        // SAFETY: in bounds as in `slot`; dst.len() <= record_size; the caller holds the slot.
        unsafe { std::ptr::copy_nonoverlapping(self.slots.add(index * self.stride + 16), dst.as_mut_ptr(), dst.len()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_has_no_padding() {
        // Sum of field sizes == struct size: every byte is covered by the checksum.
        let fields = 8 + 4 + 4 + 10 * 8 + 4 * 4 + NAME_BYTES + PART_BYTES + MAX_FIELDS * size_of::<FieldDesc>() + 8;
        assert_eq!(size_of::<Info>(), fields);
        assert_eq!(size_of::<FieldDesc>(), FIELD_NAME_BYTES + 16);
        assert_eq!(size_of::<SlotHeader>(), 16);
    }

    #[test]
    fn sizes() {
        assert_eq!(slot_stride(304), 320);
        assert_eq!(slot_stride(1), 24);
        assert_eq!(file_size(4_000_000, 304), Some(DATA_OFFSET + 4_000_000 * 320));
        assert_eq!(file_size(u64::MAX, 8), None);
    }

    #[test]
    fn file_names_round_trip() {
        assert_eq!(parse_file_name("queue-21.tvmq"), Some(21));
        assert_eq!(parse_file_name(".queue-21.tmp.1.2"), None);
        assert_eq!(parse_file_name("queue-x.tvmq"), None);
        assert_eq!(queue_path(Path::new("/d"), 7), Path::new("/d/queue-7.tvmq"));
    }

    #[test]
    fn long_names_are_cut_on_char_boundaries() {
        let mut b = [0u8; 8];
        copy_str(&mut b, "ééééé");
        assert_eq!(c_str(&b), Some("ééé"));
    }
}
