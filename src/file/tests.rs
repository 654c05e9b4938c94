//! Queue files: hostile or damaged files are refused with a clear code (never
//! a panic, crash or hang), creation is atomic and exclusive, modes, drop, and
//! the record-size rules of the file-backed queue.

use crate::error::*;
use crate::file::layout::{CONTROL_OFFSET, Control, DATA_OFFSET, HEADER_BYTES, Header, TABLE_OFFSET};
use crate::file::layout::{OPTIONS_OFFSET, Options};
use crate::file::layout::{file_size, slot_stride};
use crate::file::queue_path;
use crate::ring::{Cursors, MAX_CAPACITY, PUBLISHED, SKIP, one_lap};
use crate::spec::MAX_RECORD_SIZE;
use crate::test_support::{TempDir, child_env, child_test};
use crate::{Field, FieldKind, Queue, Spec, Wait};
use std::fs;
use std::mem::{offset_of, size_of};
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::path::Path;
use std::sync::{Arc, Barrier, mpsc};
use std::time::{Duration, Instant};

// ---------------------------------------------------------------- helpers

/// The error code of a result that must be an error.
fn code<T>(r: Result<T>) -> u32 {
    match r {
        Ok(_) => panic!("expected an error, got Ok"),
        Err(e) => e.code(),
    }
}

fn cname(c: u32) -> &'static str {
    name(i64::from(c)).unwrap_or("?")
}

/// Opening queue `id` (read-write and for inspection) fails with `want`.
#[track_caller]
fn assert_refused(dir: &Path, id: u32, want: u32, what: &str) {
    for (how, r) in [("open", Queue::open(dir, id).map(|_| ())), ("inspect", Queue::inspect(dir, id).map(|_| ()))] {
        match r {
            Ok(()) => panic!("{what}: {how} succeeded, expected {}", cname(want)),
            Err(e) => assert_eq!(e.code(), want, "{what}: {how} gave {e}, expected {}", cname(want)),
        }
    }
}

fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> =
        fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    v.sort();
    v
}

fn read_info(path: &Path) -> Header {
    Header::from_bytes(&fs::read(path).unwrap()).expect("a whole header")
}

fn info_bytes(info: &Header) -> Vec<u8> {
    info.as_bytes().to_vec()
}

/// Runs `f` on another thread and gives up after 10 s (the call must not hang).
fn within_10s<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(Duration::from_secs(10)) {
        Ok(v) => v,
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("{what}: did not return within 10 s (hangs)"),
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("{what}: panicked"),
    }
}

// ---------------------------------------------------------------- hostile files

#[test]
fn truncated_or_extended_files_are_refused() {
    let tmp = TempDir::new("files", "trunc");
    let dir = tmp.path();
    Queue::create(dir, 1, &Spec::new(10, 100)).unwrap();
    let path = queue_path(dir, 1);
    let original = fs::read(&path).unwrap();
    let full = original.len() as u64;
    let stride = slot_stride(100);
    assert_eq!(full, DATA_OFFSET + 10 * stride);
    let info = size_of::<Header>() as u64;
    let lengths = [
        0,
        1,
        8,
        12,
        100,
        info - 1,
        info,
        4095,
        HEADER_BYTES,
        HEADER_BYTES + 1,
        CONTROL_OFFSET + 100,
        TABLE_OFFSET - 1,
        TABLE_OFFSET,
        DATA_OFFSET - 1,
        DATA_OFFSET,
        DATA_OFFSET + 1,
        full - stride,
        full - 1,
        full + 1,
        full + stride,
        full + 4096,
    ];
    for len in lengths {
        fs::write(&path, &original).unwrap();
        let f = fs::OpenOptions::new().write(true).open(&path).unwrap();
        f.set_len(len).unwrap();
        drop(f);
        assert_refused(dir, 1, SHM_ERR_INVAL, &format!("file of {len} bytes (valid: {full})"));
    }
    // The intact file still opens: the refusals were about the lengths.
    fs::write(&path, &original).unwrap();
    let q = Queue::open(dir, 1).expect("intact file");
    q.push(b"ok").unwrap();
    drop(q);
    // A damaged file can still be dropped (removed without being mapped).
    fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(100).unwrap();
    Queue::drop_queue(dir, 1).expect("drop of a truncated queue file");
    assert!(!path.exists());
}

#[test]
fn every_header_byte_altered_is_refused() {
    let tmp = TempDir::new("files", "flip");
    let dir = tmp.path();
    let mut spec = Spec::new(7, 33);
    spec.name = "flip".into();
    spec.fields = vec![Field { name: "a".into(), offset: 0, len: 8, kind: FieldKind::Long }];
    spec.spin_us = Some(250);
    Queue::create(dir, 1, &spec).unwrap();
    let path = queue_path(dir, 1);
    let f = fs::OpenOptions::new().read(true).write(true).open(&path).unwrap();
    let version = offset_of!(Header, version)..offset_of!(Header, version) + 4;
    let mut wrong = Vec::new();
    let header = OPTIONS_OFFSET + size_of::<Options>();
    for off in 0..header {
        let mut b = [0u8; 1];
        f.read_exact_at(&mut b, off as u64).unwrap();
        f.write_all_at(&[b[0] ^ 0xFF], off as u64).unwrap();
        let want = if version.contains(&off) { VER_NOT_MATCH } else { SHM_ERR_INVAL };
        for (how, r) in [("open", Queue::open(dir, 1).map(|_| ())), ("inspect", Queue::inspect(dir, 1).map(|_| ()))] {
            match r {
                Err(e) if e.code() == want => {}
                Err(e) => wrong.push(format!("byte {off}: {how} gave {e}, expected {}", cname(want))),
                Ok(()) => wrong.push(format!("byte {off}: {how} succeeded")),
            }
        }
        f.write_all_at(&b, off as u64).unwrap();
    }
    assert!(
        wrong.is_empty(),
        "{} of {} header bytes not refused as expected:\n{}",
        wrong.len(),
        header,
        wrong[..wrong.len().min(20)].join("\n")
    );
    Queue::open(dir, 1).expect("restored header opens");
}

#[test]
fn header_options_zeroed_as_older_files_have_them_open_and_unknown_ones_are_refused() {
    let tmp = TempDir::new("files", "options");
    let dir = tmp.path();
    let mut spec = Spec::new(4, 8);
    spec.spin_us = Some(1000);
    Queue::create(dir, 1, &spec).unwrap();
    assert_eq!(Queue::inspect(dir, 1).unwrap().info().spin_us, Some(1000));
    let f = fs::OpenOptions::new().read(true).write(true).open(queue_path(dir, 1)).unwrap();
    // A file written before the options existed: zeros there.
    f.write_all_at(&[0u8; size_of::<Options>()], OPTIONS_OFFSET as u64).unwrap();
    assert_eq!(Queue::open(dir, 1).unwrap().info().spin_us, None);
    // Options of a later library (an unknown flag), correctly signed.
    let mut o = Options { flags: 1 << 40, ..Options::default() };
    o.checksum = {
        let mut c = o;
        c.checksum = 0;
        let bytes = &c.as_bytes()[..size_of::<Options>() - 8];
        bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3))
    };
    f.write_all_at(o.as_bytes(), OPTIONS_OFFSET as u64).unwrap();
    assert_refused(dir, 1, VER_NOT_MATCH, "unknown option flag");
}

#[test]
fn resigned_headers_with_lying_geometry_are_refused() {
    let tmp = TempDir::new("files", "resign");
    let dir = tmp.path();
    let mut spec = Spec::new(10, 100);
    spec.name = "geo".into();
    spec.fields = vec![
        Field { name: "acct_id".into(), offset: 0, len: 8, kind: FieldKind::Long },
        Field { name: "user_no".into(), offset: 8, len: 92, kind: FieldKind::Char },
    ];
    Queue::create(dir, 1, &spec).unwrap();
    let path = queue_path(dir, 1);
    let original = fs::read(&path).unwrap();
    let full = original.len() as u64;
    let good = read_info(&path);
    let (cap, rs, stride, lap) = (good.capacity, good.record_size, good.slot_stride, good.one_lap);
    assert_eq!((cap, rs, stride, lap, good.file_size), (10, 100, 120, 16, full));

    // Rewrites the header with `edit` applied and the checksum recomputed,
    // and sets the file's length to `len`.
    let install = |edit: &dyn Fn(&mut Header), len: u64| {
        fs::write(&path, &original).unwrap();
        let mut info = good;
        edit(&mut info);
        info.checksum = Header::compute_checksum(&info);
        let f = fs::OpenOptions::new().write(true).open(&path).unwrap();
        f.write_all_at(&info_bytes(&info), 0).unwrap();
        f.set_len(len).unwrap();
    };

    // Controls: harmless re-signed changes open, so the refusals below are
    // about the geometry, not about the re-signing.
    install(&|i| i.created_ns += 1, full);
    Queue::open(dir, 1).expect("re-signed header with another creation time");
    install(&|i| i.name[..7].copy_from_slice(b"renamed"), full);
    assert_eq!(Queue::inspect(dir, 1).unwrap().info().name, "renamed");

    type Edit = Box<dyn Fn(&mut Header)>;
    let g = |rows, size| file_size(rows, size, 0);
    let cases: Vec<(&str, Edit, u64)> = vec![
        ("capacity + 1", Box::new(|i| i.capacity += 1), full),
        ("capacity - 1", Box::new(|i| i.capacity -= 1), full),
        ("capacity 0", Box::new(|i| i.capacity = 0), full),
        ("capacity above MAX_CAPACITY", Box::new(|i| i.capacity = MAX_CAPACITY + 1), full),
        ("capacity u64::MAX", Box::new(|i| i.capacity = u64::MAX), full),
        (
            "capacity 2^40 x record 2^30 (size overflows)",
            Box::new(|i| {
                i.capacity = MAX_CAPACITY;
                i.record_size = MAX_RECORD_SIZE;
                i.one_lap = one_lap(MAX_CAPACITY);
                i.slot_stride = slot_stride(MAX_RECORD_SIZE);
            }),
            full,
        ),
        (
            "capacity + 1 with one_lap and file size to match, file not grown",
            Box::new(move |i| {
                i.capacity = cap + 1;
                i.file_size = g(cap + 1, rs).unwrap();
            }),
            full,
        ),
        (
            "capacity 20 with file size to match, one_lap stale",
            Box::new(move |i| {
                i.capacity = 20;
                i.file_size = g(20, rs).unwrap();
            }),
            g(20, rs).unwrap(),
        ),
        (
            "capacity 11, file size says 11 slots, file holds 10",
            Box::new(move |i| {
                i.capacity = 11;
                i.file_size = g(11, rs).unwrap();
            }),
            full,
        ),
        ("record size 0", Box::new(|i| i.record_size = 0), full),
        ("record size + 8 (stride stale)", Box::new(move |i| i.record_size = rs + 8), full),
        ("record size = stride (does not fit its slot)", Box::new(move |i| i.record_size = stride), full),
        ("record size above MAX_RECORD_SIZE", Box::new(|i| i.record_size = MAX_RECORD_SIZE + 1), full),
        ("record size u64::MAX", Box::new(|i| i.record_size = u64::MAX), full),
        (
            "record size 200 with stride and file size to match, file not grown",
            Box::new(move |i| {
                i.record_size = 200;
                i.slot_stride = slot_stride(200);
                i.file_size = g(cap, 200).unwrap();
            }),
            full,
        ),
        ("file size + 1", Box::new(|i| i.file_size += 1), full),
        ("file size - 1", Box::new(|i| i.file_size -= 1), full),
        ("file size 0", Box::new(|i| i.file_size = 0), full),
        ("file size u64::MAX", Box::new(|i| i.file_size = u64::MAX), full),
        ("file size + 4096, file grown to match", Box::new(|i| i.file_size += 4096), full + 4096),
        ("file size - one slot, file shrunk to match", Box::new(move |i| i.file_size -= stride), full - stride),
        ("one_lap 0", Box::new(|i| i.one_lap = 0), full),
        ("one_lap - 1", Box::new(move |i| i.one_lap = lap - 1), full),
        ("one_lap + 1", Box::new(move |i| i.one_lap = lap + 1), full),
        ("one_lap x 2", Box::new(move |i| i.one_lap = lap * 2), full),
        ("one_lap = capacity", Box::new(move |i| i.one_lap = cap), full),
        ("stride 0", Box::new(|i| i.slot_stride = 0), full),
        ("stride 16 (no room for data)", Box::new(|i| i.slot_stride = 16), full),
        ("stride - 8", Box::new(move |i| i.slot_stride = stride - 8), full),
        ("stride + 8", Box::new(move |i| i.slot_stride = stride + 8), full),
        (
            "stride - 8 with file size to match",
            Box::new(move |i| {
                i.slot_stride = stride - 8;
                i.file_size = DATA_OFFSET + cap * (stride - 8);
            }),
            DATA_OFFSET + cap * (stride - 8),
        ),
        ("stride u64::MAX", Box::new(|i| i.slot_stride = u64::MAX), full),
        ("info_bytes 0", Box::new(|i| i.info_bytes = 0), full),
        ("info_bytes 8192", Box::new(|i| i.info_bytes = 8192), full),
        ("control offset 0", Box::new(|i| i.control_offset = 0), full),
        ("control offset 8192", Box::new(|i| i.control_offset = 8192), full),
        ("table offset 4096", Box::new(|i| i.table_offset = 4096), full),
        ("data offset 0", Box::new(|i| i.data_offset = 0), full),
        ("data offset + 4096", Box::new(|i| i.data_offset += 4096), full),
        ("data offset u64::MAX", Box::new(|i| i.data_offset = u64::MAX), full),
        ("proc slots 0", Box::new(|i| i.proc_slots = 0), full),
        ("proc slots + 1", Box::new(|i| i.proc_slots += 1), full),
        ("proc slots u32::MAX", Box::new(|i| i.proc_slots = u32::MAX), full),
        ("field count 65", Box::new(|i| i.field_count = 65), full),
        ("field count u32::MAX", Box::new(|i| i.field_count = u32::MAX), full),
        ("field count 3 (third field all zero)", Box::new(|i| i.field_count = 3), full),
        ("field beyond the record (offset = record size)", Box::new(move |i| i.fields[0].offset = rs as u32), full),
        ("field overlapping the record's end", Box::new(move |i| i.fields[1].len = 93), full),
        ("field length u32::MAX", Box::new(|i| i.fields[1].len = u32::MAX), full),
        ("field offset u32::MAX", Box::new(|i| i.fields[0].offset = u32::MAX), full),
        ("field length 0", Box::new(|i| i.fields[0].len = 0), full),
        ("field kind 3", Box::new(|i| i.fields[0].kind = 3), full),
        ("field kind 0", Box::new(|i| i.fields[1].kind = 0), full),
        ("field name empty", Box::new(|i| i.fields[0].name = [0; 32]), full),
        ("field name not NUL-terminated", Box::new(|i| i.fields[0].name = [b'x'; 32]), full),
        ("field name not UTF-8", Box::new(|i| i.fields[0].name[0] = 0xFF), full),
        ("queue name not NUL-terminated", Box::new(|i| i.name = [b'n'; 64]), full),
        ("queue name not UTF-8", Box::new(|i| i.name[0] = 0xC3), full),
        ("partition not NUL-terminated", Box::new(|i| i.part = [b'p'; 32]), full),
        ("id of another queue", Box::new(|i| i.id = 2), full),
        ("magic", Box::new(|i| i.magic = *b"TVMQUEUF"), full),
    ];
    let mut wrong = Vec::new();
    for (what, edit, len) in &cases {
        install(edit.as_ref(), *len);
        for (how, r) in [("open", Queue::open(dir, 1).map(|_| ())), ("inspect", Queue::inspect(dir, 1).map(|_| ()))] {
            match r {
                Err(e) if e.code() == SHM_ERR_INVAL => {}
                Err(e) => wrong.push(format!("{what}: {how} gave {e}, expected SHM_ERR_INVAL")),
                Ok(()) => wrong.push(format!("{what}: {how} succeeded")),
            }
        }
    }
    for (what, v) in [("version 3", 3u32), ("version 0", 0), ("version u32::MAX", u32::MAX)] {
        install(&move |i| i.version = v, full);
        match Queue::open(dir, 1) {
            Err(e) if e.code() == VER_NOT_MATCH => {}
            Err(e) => wrong.push(format!("{what}: open gave {e}, expected VER_NOT_MATCH")),
            Ok(_) => wrong.push(format!("{what}: open succeeded")),
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} lying headers not refused as expected:\n{}",
        wrong.len(),
        cases.len() + 3,
        wrong.join("\n")
    );
}

#[test]
fn symbolic_links_are_refused_and_never_followed() {
    let tmp = TempDir::new("files", "symlink");
    let dir = tmp.path();
    Queue::create(dir, 1, &Spec::new(4, 8)).unwrap();
    let path = queue_path(dir, 1);
    let real = dir.join("real.tvmq");
    fs::rename(&path, &real).unwrap();
    std::os::unix::fs::symlink("real.tvmq", &path).unwrap();
    assert_refused(dir, 1, SHM_ERR_ACCES, "queue file replaced by a symbolic link to a valid queue file");
    assert_eq!(code(Queue::drop_queue(dir, 1)), SHM_ERR_ACCES, "drop through a symbolic link");
    assert!(fs::symlink_metadata(&path).unwrap().file_type().is_symlink() && real.exists(), "drop removed something");

    // An absolute link, to a file outside the directory.
    let outside = TempDir::new("files", "symlink-target");
    Queue::create(outside.path(), 2, &Spec::new(4, 8)).unwrap();
    std::os::unix::fs::symlink(queue_path(outside.path(), 2), queue_path(dir, 2)).unwrap();
    assert_refused(dir, 2, SHM_ERR_ACCES, "absolute symbolic link to another directory's queue");

    // A dangling link: refused, and create must not create its target.
    let target = dir.join("target-of-dangling-link");
    std::os::unix::fs::symlink(&target, queue_path(dir, 3)).unwrap();
    assert_refused(dir, 3, SHM_ERR_ACCES, "dangling symbolic link");
    assert_eq!(code(Queue::create(dir, 3, &Spec::new(4, 8))), TBL_ARD_EXIST, "create over a dangling link");
    assert!(fs::symlink_metadata(&target).is_err(), "create followed the dangling link");
}

#[test]
fn directory_or_fifo_in_place_of_the_queue_file_is_refused_without_hanging() {
    let tmp = TempDir::new("files", "fifo");
    let dir = tmp.path().to_path_buf();
    fs::create_dir(queue_path(&dir, 1)).unwrap();
    assert_refused(&dir, 1, SHM_ERR_INVAL, "directory in place of the queue file");
    assert_eq!(code(Queue::create(&dir, 1, &Spec::new(4, 8))), TBL_ARD_EXIST);

    let fifo = queue_path(&dir, 2);
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: valid C path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
    // No writer and no reader on the FIFO: a blocking open would hang forever.
    let d = dir.clone();
    let (open, inspect) = within_10s("opening a FIFO", move || {
        (Queue::open(&d, 2).map(|_| ()).map_err(|e| e.code()), Queue::inspect(&d, 2).map(|_| ()).map_err(|e| e.code()))
    });
    assert_eq!(open, Err(SHM_ERR_INVAL), "open of a FIFO");
    assert_eq!(inspect, Err(SHM_ERR_INVAL), "inspect of a FIFO");
    let d = dir.clone();
    let dropped = within_10s("dropping a FIFO", move || Queue::drop_queue(&d, 2).map_err(|e| e.code()));
    assert_eq!(dropped, Err(SHM_ERR_INVAL), "drop of a FIFO");
    assert!(
        std::os::unix::fs::FileTypeExt::is_fifo(&fs::symlink_metadata(&fifo).unwrap().file_type()),
        "the FIFO was removed"
    );
}

#[test]
fn missing_queues_and_directories_are_not_found() {
    let tmp = TempDir::new("files", "missing");
    let dir = tmp.path();
    assert_refused(dir, 99, TBL_NOT_FOUND, "missing queue");
    assert_eq!(code(Queue::drop_queue(dir, 99)), TBL_NOT_FOUND);
    let nowhere = dir.join("no-such-dir");
    assert_refused(&nowhere, 1, TBL_NOT_FOUND, "missing directory");
    assert!(!nowhere.exists(), "open created the directory");
}

// ---------------------------------------------------------------- creation

#[test]
fn creating_an_existing_queue_fails_and_keeps_it() {
    let tmp = TempDir::new("files", "exists");
    let dir = tmp.path();
    Queue::create(dir, 21, &Spec::new(5, 16)).unwrap();
    let before = fs::read(queue_path(dir, 21)).unwrap();
    let q = Queue::open(dir, 21).unwrap();
    q.push(b"kept").unwrap();
    assert_eq!(code(Queue::create(dir, 21, &Spec::new(5, 16))), TBL_ARD_EXIST);
    assert_eq!(code(Queue::create(dir, 21, &Spec::new(99, 99))), TBL_ARD_EXIST);
    assert_eq!(
        before[..HEADER_BYTES as usize],
        fs::read(queue_path(dir, 21)).unwrap()[..HEADER_BYTES as usize],
        "header changed"
    );
    assert_eq!(q.depth(), 1);
    let mut out = [0u8; 16];
    assert_eq!(q.pop(&mut out, Wait::NoWait).unwrap(), 4);
    assert_eq!(&out[..4], b"kept");
    assert_eq!(entries(dir), ["queue-21.tvmq"]);
}

#[test]
fn zero_and_oversized_geometries_are_rejected_without_leaving_files() {
    let tmp = TempDir::new("files", "geometry");
    let dir = tmp.path();
    for (rows, size) in [(0, 8), (8, 0), (0, 0)] {
        assert_eq!(code(Queue::create(dir, 1, &Spec::new(rows, size))), CONDIT_IS_NIL, "rows {rows} size {size}");
    }
    for (rows, size) in [
        (u64::MAX, 8),
        (1, u64::MAX),
        (u64::MAX, u64::MAX),
        (MAX_CAPACITY + 1, 1),
        (1, MAX_RECORD_SIZE + 1),
        (MAX_CAPACITY, MAX_RECORD_SIZE), // rows x stride overflows u64
        (1 << 33, 1 << 30),              // fits u64, not i64 (file offsets)
        (MAX_CAPACITY, 64),              // 80 TiB: more than /dev/shm has
    ] {
        let r = Queue::create(dir, 1, &Spec::new(rows, size));
        assert_eq!(code(r), MQUE_CRTE_BIG, "rows {rows} size {size}");
    }
    assert!(entries(dir).is_empty(), "files left behind: {:?}", entries(dir));
    assert_refused(dir, 1, TBL_NOT_FOUND, "queue whose creation failed");
}

#[test]
fn eight_threads_creating_the_same_queue_exactly_one_wins() {
    let tmp = TempDir::new("files", "race");
    let dir = Arc::new(tmp.path().to_path_buf());
    const THREADS: usize = 8;
    const ROUNDS: u32 = 25;
    for id in 0..ROUNDS {
        let barrier = Arc::new(Barrier::new(THREADS));
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let (dir, barrier) = (dir.clone(), barrier.clone());
                std::thread::spawn(move || {
                    // Each thread asks for another capacity: the file must
                    // hold the winner's, whole.
                    let spec = Spec::new(10 + t as u64, 24);
                    barrier.wait();
                    Queue::create(&dir, id, &spec).map_err(|e| e.code())
                })
            })
            .collect();
        let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        let winners: Vec<usize> = (0..THREADS).filter(|&t| results[t].is_ok()).collect();
        assert_eq!(winners.len(), 1, "round {id}: {results:?}");
        for (t, r) in results.iter().enumerate() {
            assert!(r.is_ok() || *r == Err(TBL_ARD_EXIST), "round {id} thread {t}: {r:?}");
        }
        let q = Queue::open(&dir, id).expect("the winner's queue opens");
        assert_eq!(q.capacity(), 10 + winners[0] as u64, "round {id}: the file is not the winner's");
    }
    let want: Vec<String> = {
        let mut v: Vec<String> = (0..ROUNDS).map(|id| format!("queue-{id}.tvmq")).collect();
        v.sort();
        v
    };
    assert_eq!(entries(&dir), want, "temporary files left behind");
}

#[test]
fn default_mode_is_0600() {
    let tmp = TempDir::new("files", "mode");
    let dir = tmp.path();
    Queue::create(dir, 1, &Spec::new(4, 8)).unwrap();
    let meta = fs::metadata(queue_path(dir, 1)).unwrap();
    assert_eq!(meta.permissions().mode() & 0o7777, 0o600);
    assert_eq!(Queue::inspect(dir, 1).unwrap().info().mode, 0o600);
}

#[test]
fn an_open_queue_holds_one_descriptor_unless_it_has_a_live_part() {
    // A process may attach ten thousand queues: a second descriptor for
    // each (a duplicate to map) ran a 10,000-queue process out of them.
    let tmp = TempDir::new("files", "descriptors");
    let dir = tmp.path();
    Queue::create(dir, 1, &Spec::new(4, 8)).unwrap();
    let f = crate::file::map::QueueFile::open(dir, 1, crate::file::map::Access::ReadWrite { populate: false }).unwrap();
    assert_eq!(f.descriptors(), 1, "the queue file is mapped through the descriptor it was opened with");
}

#[test]
fn a_detached_view_holds_no_descriptor_and_still_sees_who_is_attached() {
    // A reader of ten thousand queues (the metrics, top) would otherwise
    // need ten thousand descriptors.
    let tmp = TempDir::new("files", "detached");
    let dir = tmp.path();
    Queue::create(dir, 1, &Spec::new(4, 8)).unwrap();
    let f = crate::file::map::QueueFile::open(dir, 1, crate::file::map::Access::Detached).unwrap();
    assert_eq!(f.descriptors(), 0);
    assert_eq!(code(f.file()), SHM_ERR_ACCES);
    drop(f);
    let view = Queue::inspect_detached(dir, 1).unwrap();
    assert_eq!(view.snapshot().processes, 0);
    let q = Queue::open(dir, 1).unwrap();
    q.push(b"a").unwrap();
    // The same shared pages; the attached process's lock seen through the
    // file opened again for the look.
    let s = view.snapshot();
    assert_eq!((s.depth, s.pushed, s.processes), (1, 1, 1));
    assert_eq!(view.processes().len(), 1);
    assert_eq!(code(view.push(b"b")), SHM_ERR_ACCES);
    assert_eq!(code(view.pop(&mut [0u8; 8], Wait::NoWait)), SHM_ERR_ACCES);
    drop(q);
    assert_eq!(view.snapshot().processes, 0, "left");
    // Dropped and made again under the same name, with a process attached
    // to the new file: its locks are not this queue's.
    let old = Queue::open(dir, 1).unwrap();
    Queue::drop_queue(dir, 1).unwrap();
    assert!(view.is_dropped() && view.snapshot().dropped);
    Queue::create(dir, 1, &Spec::new(4, 8)).unwrap();
    let new = Queue::open(dir, 1).unwrap();
    assert_eq!(view.snapshot().processes, 0, "the file at its name is another one");
    assert_eq!(Queue::inspect_detached(dir, 1).unwrap().snapshot().processes, 1);
    drop((old, new));
}

/// Child process for the umask tests: creates a queue with the mode in
/// `TVMQ_FILES_CHILD_MODE` (or the default).
#[test]
#[ignore = "child process of requested_mode_is_kept_whatever_the_umask"]
fn child_create() {
    let dir = child_env("TVMQ_FILES_CHILD_DIR");
    let mut spec = Spec::new(4, 8);
    if let Ok(m) = std::env::var("TVMQ_FILES_CHILD_MODE") {
        spec.mode = u32::from_str_radix(&m, 8).unwrap();
    }
    Queue::create(Path::new(&dir), 1, &spec).expect("child create");
}

#[test]
fn requested_mode_is_kept_whatever_the_umask() {
    for (umask, mode, want) in [
        (0o077, Some(0o660), 0o660),
        (0o027, Some(0o660), 0o660),
        (0o777, Some(0o664), 0o664),
        (0o000, None, 0o600),
        (0o000, Some(0o640), 0o640),
        (0o777, None, 0o600),
    ] {
        let tmp = TempDir::new("files", "umask");
        let mut cmd = child_test("file::tests::child_create");
        cmd.env("TVMQ_FILES_CHILD_DIR", tmp.path());
        if let Some(m) = mode {
            cmd.env("TVMQ_FILES_CHILD_MODE", format!("{m:o}"));
        }
        // SAFETY: umask is async-signal-safe and touches nothing else.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
                libc::umask(umask);
                Ok(())
            });
        }
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "child: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let got = fs::metadata(queue_path(tmp.path(), 1)).unwrap().permissions().mode() & 0o7777;
        assert_eq!(got, want, "umask {umask:03o}, Spec.mode {mode:?}: file mode {got:04o}");
        assert_eq!(Queue::inspect(tmp.path(), 1).unwrap().info().mode, want);
    }
}

// ---------------------------------------------------------------- drop

#[test]
fn drop_wakes_blocked_pops_with_eidrm_and_later_opens_find_nothing() {
    let tmp = TempDir::new("files", "drop");
    let dir = tmp.path().to_path_buf();
    Queue::create(&dir, 7, &Spec::new(16, 32)).unwrap();
    let q = Arc::new(Queue::open(&dir, 7).unwrap());
    let (tx, rx) = mpsc::channel();
    let waits = [Wait::Forever, Wait::Forever, Wait::Until(Instant::now() + Duration::from_secs(600))];
    for (t, wait) in waits.into_iter().enumerate() {
        let (q, tx) = (q.clone(), tx.clone());
        std::thread::spawn(move || {
            let mut out = [0u8; 32];
            let _ = tx.send((t, q.pop(&mut out, wait).map_err(|e| e.code())));
        });
    }
    // A thread blocked through its own handle.
    {
        let (dir, tx) = (dir.clone(), tx.clone());
        std::thread::spawn(move || {
            let own = Queue::open(&dir, 7).unwrap();
            let mut out = [0u8; 32];
            let _ = tx.send((3, own.pop(&mut out, Wait::Forever).map_err(|e| e.code())));
        });
    }
    let start = Instant::now();
    while q.stats().waiters < 4 {
        assert!(start.elapsed() < Duration::from_secs(10), "the poppers never blocked: {:?}", q.stats());
        assert!(rx.try_recv().is_err(), "a pop returned on an empty queue");
        std::thread::sleep(Duration::from_millis(1));
    }
    Queue::drop_queue(&dir, 7).expect("drop");
    let mut woken = Vec::new();
    for _ in 0..4 {
        let (t, r) = rx.recv_timeout(Duration::from_secs(10)).expect("a blocked pop was not woken by drop");
        woken.push(t);
        assert_eq!(r, Err(SHM_ERR_EIDRM), "thread {t}");
    }
    woken.sort();
    assert_eq!(woken, [0, 1, 2, 3]);

    assert!(!queue_path(&dir, 7).exists());
    assert_refused(&dir, 7, TBL_NOT_FOUND, "dropped queue");
    assert_eq!(code(Queue::drop_queue(&dir, 7)), TBL_NOT_FOUND, "second drop");
    // The handle still open says the queue is gone.
    assert!(q.is_dropped());
    assert_eq!(code(q.push(b"x")), SHM_ERR_EIDRM);
    let mut out = [0u8; 32];
    assert_eq!(code(q.pop(&mut out, Wait::NoWait)), SHM_ERR_EIDRM);
    assert_eq!(code(q.pop(&mut out, Wait::Forever)), SHM_ERR_EIDRM);

    // A new queue with the same id is a new queue; the old handle stays dead.
    Queue::create(&dir, 7, &Spec::new(16, 32)).unwrap();
    let fresh = Queue::open(&dir, 7).unwrap();
    fresh.push(b"new").unwrap();
    assert_eq!(code(q.push(b"x")), SHM_ERR_EIDRM);
    assert_eq!(fresh.pop(&mut out, Wait::NoWait).unwrap(), 3);
    assert_eq!(fresh.stats().pushed, 1);
}

// ---------------------------------------------------------------- records

fn pattern(i: u64, size: usize) -> Vec<u8> {
    let len = 1 + (i as usize * 7) % size;
    (0..len).map(|j| (i as usize * 31 + j * 7) as u8).collect()
}

#[test]
fn capacity_is_exact_for_odd_sizes() {
    let tmp = TempDir::new("files", "capacity");
    let dir = tmp.path();
    let mut id = 0;
    for rows in [1u64, 2, 3, 5, 7, 15, 16, 17, 31, 33, 100, 1000] {
        for size in [1usize, 3, 7, 9, 100, 304] {
            id += 1;
            Queue::create(dir, id, &Spec::new(rows, size as u64)).unwrap();
            let q = Queue::open(dir, id).unwrap();
            let other = Queue::open(dir, id).unwrap();
            assert_eq!((q.capacity(), q.record_size()), (rows, size));
            let mut next_in = 0u64;
            let mut next_out = 0u64;
            let mut out = vec![0u8; size];
            // Three rounds: fill exactly, refuse one more, then drain, each
            // round starting at another place of the ring.
            for round in 0..3 {
                for _ in 0..rows {
                    q.push(&pattern(next_in, size))
                        .unwrap_or_else(|e| panic!("rows {rows} size {size}: push {next_in}: {e}"));
                    next_in += 1;
                }
                assert_eq!(
                    code(q.push(&pattern(next_in, size))),
                    DATA_SPC_FULL,
                    "rows {rows} size {size} round {round}"
                );
                assert_eq!(code(other.push(b"z")), DATA_SPC_FULL, "rows {rows} size {size}: second handle");
                assert_eq!(other.depth(), rows);
                // One out, one in, full again.
                let n = other.pop(&mut out, Wait::NoWait).unwrap();
                assert_eq!(&out[..n], &pattern(next_out, size)[..]);
                next_out += 1;
                q.push(&pattern(next_in, size)).unwrap();
                next_in += 1;
                assert_eq!(code(q.push(b"z")), DATA_SPC_FULL);
                // Drain, in order.
                while next_out < next_in {
                    let n = q.pop(&mut out, Wait::NoWait).unwrap();
                    assert_eq!(&out[..n], &pattern(next_out, size)[..], "rows {rows} size {size}: record {next_out}");
                    next_out += 1;
                }
                assert_eq!(code(q.pop(&mut out, Wait::NoWait)), NO_DATA_FOUND);
                // Leave `round + 1` records' worth of offset for the next round.
                for _ in 0..=(round as u64).min(rows - 1) {
                    q.push(b"x").unwrap();
                    q.pop(&mut out, Wait::NoWait).unwrap();
                }
            }
            let s = q.stats();
            assert_eq!((s.pushed, s.popped, s.depth), (s.pushed, s.pushed, 0));
            assert_eq!(fs::metadata(q.path()).unwrap().len(), file_size(rows, size as u64, 0).unwrap());
        }
    }
}

#[test]
fn short_records_come_out_with_their_length_and_a_zeroed_tail() {
    let tmp = TempDir::new("files", "short");
    let dir = tmp.path();
    let size = 100;
    Queue::create(dir, 1, &Spec::new(size as u64 + 5, size as u64)).unwrap();
    let q = Queue::open(dir, 1).unwrap();
    let rec = |len: usize| -> Vec<u8> { (0..len).map(|j| 0x80 | (len + j) as u8).collect() };
    for len in 1..=size {
        q.push(&rec(len)).unwrap();
    }
    assert_eq!(code(q.push(&vec![1u8; size + 1])), RECD_TOO_LONG);
    assert_eq!(code(q.push(&[])), CONDIT_IS_NIL);
    assert_eq!(q.depth(), size as u64);
    for len in 1..=size {
        // A dirty buffer, longer than the record size.
        let mut out = vec![0xAAu8; size + 30];
        let n = q.pop(&mut out, Wait::NoWait).unwrap();
        assert_eq!(n, len);
        assert_eq!(&out[..n], &rec(len)[..]);
        assert!(out[n..size].iter().all(|&b| b == 0), "len {len}: tail not zeroed: {:?}", &out[n..size]);
        assert!(out[size..].iter().all(|&b| b == 0xAA), "len {len}: bytes beyond the record size were written");
    }
    // pop_many zero-fills each slot too.
    for len in [1, 50, 99, 100] {
        q.push(&rec(len)).unwrap();
    }
    let mut many = vec![0xAAu8; 3];
    let (k, err) = q.pop_many(&mut many, size, 10, Wait::NoWait);
    assert_eq!((k, err.map(|e| e.code())), (4, Some(NO_DATA_FOUND)));
    assert_eq!(many.len(), 3 + 4 * size);
    for (i, len) in [1, 50, 99, 100].into_iter().enumerate() {
        let slot = &many[3 + i * size..3 + (i + 1) * size];
        assert_eq!(&slot[..len], &rec(len)[..]);
        assert!(slot[len..].iter().all(|&b| b == 0));
    }
}

#[test]
fn pop_buffer_shorter_than_the_record_size_is_refused_and_takes_nothing() {
    let tmp = TempDir::new("files", "shortbuf");
    let dir = tmp.path();
    Queue::create(dir, 1, &Spec::new(4, 100)).unwrap();
    let q = Queue::open(dir, 1).unwrap();
    // Even on an empty queue a short buffer is refused at once (no blocking).
    let mut short = [0u8; 99];
    assert_eq!(
        within_10s("pop(Forever) with a short buffer", {
            let dir = dir.to_path_buf();
            move || Queue::open(&dir, 1).unwrap().pop(&mut [0u8; 99], Wait::Forever).map_err(|e| e.code())
        }),
        Err(RECD_TOO_LONG)
    );
    q.push(b"short").unwrap();
    for wait in [Wait::NoWait, Wait::Forever, Wait::Until(Instant::now() + Duration::from_secs(5))] {
        assert_eq!(code(q.pop(&mut short, wait)), RECD_TOO_LONG, "{wait:?}");
        assert_eq!(code(q.pop(&mut [0u8; 1], wait)), RECD_TOO_LONG, "{wait:?}");
        assert_eq!(code(q.pop(&mut [], wait)), RECD_TOO_LONG, "{wait:?}");
        assert_eq!(q.depth(), 1, "the record must stay queued");
    }
    let mut many = Vec::new();
    let (k, err) = q.pop_many(&mut many, 99, 4, Wait::NoWait);
    assert_eq!((k, err.map(|e| e.code())), (0, Some(RECD_TOO_LONG)));
    assert!(many.is_empty());
    assert_eq!(q.depth(), 1);
    let mut out = [0u8; 100];
    assert_eq!(q.pop(&mut out, Wait::NoWait).unwrap(), 5);
    assert_eq!(&out[..5], b"short");
    assert_eq!(q.stats().popped, 1);
}

#[test]
fn inspection_handles_cannot_push_or_pop() {
    let tmp = TempDir::new("files", "inspect");
    let dir = tmp.path();
    Queue::create(dir, 1, &Spec::new(4, 8)).unwrap();
    Queue::open(dir, 1).unwrap().push(b"a").unwrap();
    let ro = Queue::inspect(dir, 1).unwrap();
    assert_eq!(code(ro.push(b"b")), SHM_ERR_ACCES);
    assert_eq!(code(ro.pop(&mut [0u8; 8], Wait::NoWait)), SHM_ERR_ACCES);
    assert_eq!(ro.depth(), 1);
    assert_eq!(ro.stats().pushed, 1);
}

// ---------------------------------------------------------------- shared state

/// Corrupted cursors or slot headers (the mutable part of the file, which the
/// header checksum does not cover) give SHM_ERR_INVAL: never a panic, an
/// out-of-bounds access or a hang.
#[test]
fn corrupted_cursors_and_slots_are_reported_not_followed() {
    let tail_at = CONTROL_OFFSET + (offset_of!(Control, cursors) + offset_of!(Cursors, tail)) as u64;
    let head_at = CONTROL_OFFSET + (offset_of!(Control, cursors) + offset_of!(Cursors, head)) as u64;
    let seq_at = DATA_OFFSET; // slot 0: seq (8), owner (4), len (4)
    let len_at = DATA_OFFSET + 12;
    let (cap, size) = (5u64, 24usize); // one_lap 8
    // (what, records pushed first, (offset, bytes) to write, which call)
    type Case = (&'static str, usize, Vec<(u64, Vec<u8>)>, &'static str);
    let cases: Vec<Case> = vec![
        ("tail index = capacity", 0, vec![(tail_at, cap.to_le_bytes().to_vec())], "push"),
        ("tail index = one_lap - 1", 0, vec![(tail_at, 7u64.to_le_bytes().to_vec())], "push"),
        ("tail with the SKIP bit", 0, vec![(tail_at, SKIP.to_le_bytes().to_vec())], "push"),
        ("head index = capacity", 1, vec![(head_at, cap.to_le_bytes().to_vec())], "pop"),
        ("head with the SKIP bit", 1, vec![(head_at, SKIP.to_le_bytes().to_vec())], "pop"),
        ("slot seq not a lap", 0, vec![(seq_at, 2u64.to_le_bytes().to_vec())], "push"),
        ("slot seq not a lap (pop)", 1, vec![(seq_at, (4u64 | PUBLISHED).to_le_bytes().to_vec())], "pop"),
        ("slot seq SKIP without PUBLISHED", 1, vec![(seq_at, SKIP.to_le_bytes().to_vec())], "pop"),
        ("record length 0", 1, vec![(len_at, 0u32.to_le_bytes().to_vec())], "pop"),
        ("record length = record size + 1", 1, vec![(len_at, (size as u32 + 1).to_le_bytes().to_vec())], "pop"),
        ("record length u32::MAX", 1, vec![(len_at, u32::MAX.to_le_bytes().to_vec())], "pop"),
    ];
    let mut wrong = Vec::new();
    for (n, (what, pushed, writes, call)) in cases.into_iter().enumerate() {
        let tmp = TempDir::new("files", "corrupt");
        let dir = tmp.path().to_path_buf();
        let mut spec = Spec::new(cap, size as u64);
        spec.unblock_timeout_ms = 100;
        Queue::create(&dir, 1, &spec).unwrap();
        {
            let q = Queue::open(&dir, 1).unwrap();
            for i in 0..pushed {
                q.push(&[i as u8 + 1; 10]).unwrap();
            }
        }
        let f = fs::OpenOptions::new().write(true).open(queue_path(&dir, 1)).unwrap();
        for (at, bytes) in &writes {
            f.write_all_at(bytes, *at).unwrap();
        }
        let call = call.to_string();
        let r = within_10s(&format!("case {n} ({what})"), move || {
            let q = Queue::open(&dir, 1).map_err(|e| format!("open: {e}"))?;
            let mut out = vec![0u8; size];
            let r = if call == "push" { q.push(b"probe").map(|()| 0) } else { q.pop(&mut out, Wait::NoWait) };
            Ok::<_, String>(r.map_err(|e| e.code()))
        });
        match r {
            Ok(Err(SHM_ERR_INVAL)) => {}
            other => wrong.push(format!("{what}: {other:?}, expected Ok(Err({SHM_ERR_INVAL})) (SHM_ERR_INVAL)")),
        }
    }
    assert!(wrong.is_empty(), "corruptions not reported as SHM_ERR_INVAL:\n{}", wrong.join("\n"));
}

// ---------------------------------------------------------------- sparse layout, and the old one

/// Bytes the file system holds for the file (what `du` counts).
fn allocated(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    fs::metadata(path).unwrap().blocks() * 512
}

/// The resident bytes of this process's mappings of `path` (from
/// /proc/self/smaps), one figure per mapping.
fn resident(path: &Path) -> Vec<u64> {
    let smaps = fs::read_to_string("/proc/self/smaps").unwrap();
    let name = path.to_str().unwrap();
    let mut out = Vec::new();
    let mut ours = false;
    for line in smaps.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if first.contains('-') && !first.ends_with(':') {
            ours = line.ends_with(name);
        } else if ours && first == "Rss:" {
            let kb: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
            out.push(kb * 1024);
        }
    }
    out
}

/// A test-only writer of layout version 1, as the library made it before
/// version 2: the same offsets, the process table's pages all written (the
/// whole file was zero-filled), version 1 in the header.
fn create_v1(dir: &Path, id: u32, spec: &Spec) {
    Queue::create(dir, id, spec).unwrap();
    let path = queue_path(dir, id);
    let f = fs::OpenOptions::new().read(true).write(true).open(&path).unwrap();
    f.write_all_at(&vec![0u8; (DATA_OFFSET - TABLE_OFFSET) as usize], TABLE_OFFSET).unwrap();
    let mut info = read_info(&path);
    info.version = 1;
    info.checksum = info.compute_checksum();
    f.write_all_at(&info_bytes(&info), 0).unwrap();
}

/// Offset of process-table entry `i`'s pid, in a file of layout `version`.
fn pid_at(version: u32, i: u64) -> u64 {
    TABLE_OFFSET + i * if version == 1 { 4224 } else { 64 }
}

fn pid_in_file(path: &Path, version: u32, i: u64) -> u32 {
    let mut b = [0u8; 4];
    fs::File::open(path).unwrap().read_exact_at(&mut b, pid_at(version, i)).unwrap();
    u32::from_ne_bytes(b)
}

#[test]
fn a_small_queue_costs_its_slots_and_a_few_pages_on_tmpfs_and_in_memory() {
    let tmp = TempDir::new("files", "sparse");
    let dir = tmp.path();
    Queue::create(dir, 1, &Spec::new(100, 64)).unwrap();
    let path = queue_path(dir, 1);
    let slots = (100 * slot_stride(64)).div_ceil(4096) * 4096;
    let fresh = allocated(&path);
    assert!(fresh <= slots + 24 * 1024, "a new queue: {fresh} bytes allocated, slots {slots}");
    assert!(fs::metadata(&path).unwrap().len() > 1 << 20, "the table's hole still counts in the length");

    // Three processes' worth of attachments (each open is a registration).
    let qs: Vec<Queue> = (0..3).map(|_| Queue::open(dir, 1).unwrap()).collect();
    let mut out = [0u8; 64];
    for q in &qs {
        q.push(b"record").unwrap();
        assert_eq!(q.pop(&mut out, Wait::NoWait).unwrap(), 6);
    }
    assert_eq!(qs[0].processes().len(), 3);
    let used = allocated(&path);
    assert!(used <= slots + 24 * 1024 + 3 * 4096, "3 attached: {used} bytes allocated, slots {slots}");
    assert!(used <= slots + 64 * 1024);
    let rss = resident(&path);
    assert_eq!(rss.len(), 3, "one mapping per open");
    for r in rss {
        // The header, control block and heads (24 KiB), the slots, the
        // intent pages (ours, and the others' that the kernel's fault-around
        // maps beside it: they exist already), never the whole table.
        assert!(r <= slots + 24 * 1024 + 3 * 4096, "{r} bytes of the mapping resident, slots {slots}");
    }
    for i in 0..qs.len() {
        assert_eq!(pid_in_file(&path, 2, i as u64), std::process::id(), "entry {i}: heads 64 bytes apart");
    }
}

#[ignore = "a child process of a test"]
#[test]
fn child_sleep_on_queue() {
    let dir = child_env("TVMQ_FILES_CHILD_DIR");
    let q = Queue::open(Path::new(&dir), 1).unwrap();
    let mut out = [0u8; 64];
    let _ = q.pop(&mut out, Wait::Forever);
}

/// A process asleep in a pop is killed: the next attach takes its sleeper
/// off the waiter count (the kill's proof is its entry's lock, found at the
/// entry's place in the file's layout).
fn killed_sleeper_is_uncounted(dir: &Path, version: u32) {
    let q = Queue::open(dir, 1).unwrap();
    let mut child = child_test("file::tests::child_sleep_on_queue").env("TVMQ_FILES_CHILD_DIR", dir).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while q.stats().waiters == 0 {
        assert!(Instant::now() < deadline, "the child never slept");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(pid_in_file(&queue_path(dir, 1), version, 1), child.id(), "the child's entry, version {version}");
    assert_eq!(q.processes().iter().map(|p| p.sleepers).sum::<u32>(), 1);
    child.kill().unwrap();
    child.wait().unwrap();
    let again = Queue::open(dir, 1).unwrap();
    assert_eq!(again.stats().waiters, 0, "version {version}");
    assert_eq!(again.stats().reconciled_waiters, 1);
    assert_eq!(again.processes().len(), 2, "this process's two registrations");
}

#[test]
fn an_old_layout_file_opens_and_works() {
    let tmp = TempDir::new("files", "v1");
    let dir = tmp.path();
    create_v1(dir, 1, &Spec::new(100, 64));
    let path = queue_path(dir, 1);
    assert_eq!(read_info(&path).version, 1);
    let table = (DATA_OFFSET - TABLE_OFFSET) as usize;
    {
        let (a, b) = (Queue::open(dir, 1).unwrap(), Queue::open(dir, 1).unwrap());
        a.push(b"old layout").unwrap();
        let mut out = [0u8; 64];
        assert_eq!(b.pop(&mut out, Wait::NoWait).unwrap(), 10);
        assert_eq!(&out[..10], b"old layout");
        assert_eq!(pid_in_file(&path, 1, 1), std::process::id(), "entries 4,224 bytes apart");
        assert_eq!(a.processes().len(), 2);
    }
    killed_sleeper_is_uncounted(dir, 1);
    assert_eq!(read_info(&path).version, 1, "opening does not rewrite the header");
    assert!(allocated(&path) >= table as u64, "an old file stays as it was made");
}

#[test]
fn a_killed_process_is_found_in_a_sparse_table() {
    let tmp = TempDir::new("files", "v2kill");
    Queue::create(tmp.path(), 1, &Spec::new(100, 64)).unwrap();
    assert_eq!(read_info(&queue_path(tmp.path(), 1)).version, 2);
    killed_sleeper_is_uncounted(tmp.path(), 2);
}

// ---------------------------------------------------------------- temporaries

/// A temporary file a creation left is judged by its maker's file lock,
/// not by the pid in its name: one whose maker is gone is removed even if
/// that pid is a live process now (pid 1 here), and one whose maker still
/// makes it stays even if the pid in its name is no process here (a maker
/// in another pid namespace, or the name's pid reused).
#[test]
fn abandoned_temporaries_are_told_by_their_makers_lock_not_by_a_pid() {
    let tmp = TempDir::new("file", "temporaries");
    let dir = tmp.path();
    // Abandoned, its name naming a live process.
    let (made, file) = super::make::create_temporary(dir, ".queue-5.tmp.", 0o600).unwrap();
    drop(file);
    let abandoned = dir.join(".queue-5.tmp.1.0");
    fs::rename(&made, &abandoned).unwrap();
    // Being made, its name naming no process.
    let (made, maker) = super::make::create_temporary(dir, ".queue-5.tmp.", 0o600).unwrap();
    let dead_pid = (2000..30000u32).rev().find(|p| !Path::new(&format!("/proc/{p}")).exists()).unwrap();
    let in_the_making = dir.join(format!(".queue-5.tmp.{dead_pid}.0"));
    fs::rename(&made, &in_the_making).unwrap();
    // Another queue's, abandoned: not this cleanup's.
    let (other, file) = super::make::create_temporary(dir, ".queue-6.tmp.", 0o600).unwrap();
    drop(file);

    assert_eq!(Queue::remove_stale_temporaries(dir, 5), 1);
    assert!(!abandoned.exists(), "its maker is gone");
    assert!(in_the_making.exists(), "its maker still makes it");
    assert!(other.exists(), "queue 6's");
    drop(maker);
    assert_eq!(Queue::remove_stale_temporaries(dir, 5), 1, "its maker gone now");
    assert!(!in_the_making.exists());
    assert_eq!(Queue::remove_stale_temporaries(dir, 6), 1);
}
