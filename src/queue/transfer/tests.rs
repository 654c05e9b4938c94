//! Exports and imports through a queue.

use super::binary::{read_u32, read_u64};
use super::*;
use crate::queue::Wait;
use crate::schema::{Field, FieldKind, FieldValue};
use crate::spec::Spec;
use crate::test_support::TempDir;
use std::io::Read;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

#[test]
fn binary_round_trip_truncate_and_a_full_import() {
    let dir = TempDir::new("transfer", "binary");
    Queue::create(dir.path(), 1, &Spec::new(100, 16)).unwrap();
    Queue::create(dir.path(), 2, &Spec::new(3, 16)).unwrap();
    let q = Queue::open(dir.path(), 1).unwrap();
    for i in 0..10u8 {
        q.push(&vec![i; usize::from(i) + 1]).unwrap();
    }
    let mut file = Vec::new();
    assert_eq!(q.export(&mut file, &ExportFormat::Binary).unwrap(), 10);
    assert_eq!(q.depth(), 10, "nothing consumed");
    assert_eq!(q.export(&mut Vec::new(), &ExportFormat::Text("|".into())).unwrap_err().code(), FIELD_NOT_DEF);
    assert_eq!(q.truncate().unwrap(), 10);
    assert_eq!(q.depth(), 0);
    assert_eq!(q.import(&mut &file[..], ""), (10, None));
    let mut out = [0u8; 16];
    for i in 0..10u8 {
        let n = q.pop(&mut out, Wait::NoWait).unwrap();
        assert_eq!(&out[..n], &vec![i; usize::from(i) + 1][..]);
    }
    let small = Queue::open(dir.path(), 2).unwrap();
    let (n, stop) = small.import(&mut &file[..], "");
    assert_eq!((n, stop.map(|e| e.code())), (3, Some(DATA_SPC_FULL)));
    let cut = &file[..file.len() - 3];
    let (_, stop) = q.import(&mut &cut[..], "");
    assert_eq!(stop.map(|e| e.code()), Some(SHM_ERR_INVAL));
}

/// With a consumer and a producer working throughout (paced, so that
/// they cannot lap the export), each export is a run of consecutive
/// records (one instant), never one with a gap.
#[test]
fn an_export_is_one_instant_while_a_consumer_runs() {
    let dir = TempDir::new("transfer", "instant");
    Queue::create(dir.path(), 1, &Spec::new(40_000, 8)).unwrap();
    let q = Arc::new(Queue::open(dir.path(), 1).unwrap());
    for i in 0..20_000u64 {
        q.push(&i.to_le_bytes()).unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let next = Arc::new(AtomicU64::new(20_000));
    let consumer = {
        let (q, stop) = (q.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut out = [0u8; 8];
            let mut want = 0u64;
            while !stop.load(Ordering::Relaxed) {
                for _ in 0..10 {
                    if q.pop(&mut out, Wait::NoWait).is_ok() {
                        assert_eq!(u64::from_le_bytes(out), want);
                        want += 1;
                    }
                }
                std::thread::sleep(std::time::Duration::from_micros(100));
            }
        })
    };
    let producer = {
        let (q, stop, next) = (q.clone(), stop.clone(), next.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                for _ in 0..10 {
                    let i = next.load(Ordering::Relaxed);
                    if q.push(&i.to_le_bytes()).is_ok() {
                        next.store(i + 1, Ordering::Relaxed);
                    }
                }
                std::thread::sleep(std::time::Duration::from_micros(100));
            }
        })
    };
    for _ in 0..20 {
        let mut file = Vec::new();
        let n = q.export(&mut file, &ExportFormat::Binary).unwrap();
        let mut copy = Vec::new();
        let mut r = &file[..];
        let mut magic = [0u8; 8];
        r.read_exact(&mut magic).unwrap();
        // Version, byte order, record size, capacity, field count.
        let (_, _, _, _, _) =
            (read_u32(&mut r), read_u32(&mut r), read_u64(&mut r), read_u64(&mut r), read_u32(&mut r));
        for _ in 0..n {
            let len = read_u32(&mut r).unwrap() as usize;
            let mut rec = [0u8; 8];
            r.read_exact(&mut rec[..len]).unwrap();
            copy.push(u64::from_le_bytes(rec));
        }
        assert!(copy.windows(2).all(|w| w[1] == w[0] + 1), "a gap in an export");
    }
    stop.store(true, Ordering::Relaxed);
    consumer.join().unwrap();
    producer.join().unwrap();
}

/// The fields of [`the_other_byte_order`]'s queue: every kind and length
/// a number can have, and text.
fn numbers() -> Vec<Field> {
    let f = |name: &str, offset, len, kind| Field { name: name.into(), offset, len, kind };
    vec![
        f("name", 0, 6, FieldKind::Char),
        f("small", 6, 2, FieldKind::Long),
        f("int", 8, 4, FieldKind::Long),
        f("float", 12, 4, FieldKind::Double),
        f("long", 16, 8, FieldKind::Long),
        f("double", 24, 8, FieldKind::Double),
        f("byte", 32, 1, FieldKind::Long),
    ]
}

/// A binary export by hand: `version` (1 has no byte order), the byte
/// order field `order`, `fields`, and `records` as they lie in the file.
fn export_by_hand(version: u32, order: u32, size: u64, fields: &[Field], records: &[Vec<u8>]) -> Vec<u8> {
    let mut e = b"TVMQDUMP".to_vec();
    e.extend_from_slice(&version.to_le_bytes());
    if version >= 2 {
        e.extend_from_slice(&order.to_le_bytes());
    }
    e.extend_from_slice(&size.to_le_bytes());
    e.extend_from_slice(&100u64.to_le_bytes());
    e.extend_from_slice(&(fields.len() as u32).to_le_bytes());
    for f in fields {
        e.push(f.name.len() as u8);
        e.extend_from_slice(f.name.as_bytes());
        for v in [f.offset, f.len, f.kind.code()] {
            e.extend_from_slice(&v.to_le_bytes());
        }
    }
    for r in records {
        e.extend_from_slice(&(r.len() as u32).to_le_bytes());
        e.extend_from_slice(r);
    }
    e.extend_from_slice(&0u32.to_le_bytes());
    e.extend_from_slice(&(records.len() as u64).to_le_bytes());
    e
}

/// An export says in which byte order its records' numbers are (the
/// exporting machine's): one made on a machine of the other order (built
/// here by hand, big-endian on a little-endian machine and the reverse) is
/// imported with every number turned around by its field list, so that
/// the values read back are those exported; text is left as it is. One of
/// the other order without a field list cannot be converted and is
/// refused; a version-1 export (no byte order) is imported byte for byte.
#[test]
fn an_export_of_the_other_byte_order_is_imported_with_its_numbers_turned() {
    let dir = TempDir::new("transfer", "order");
    let mut spec = Spec::new(10, 40);
    spec.fields = numbers();
    Queue::create(dir.path(), 1, &spec).unwrap();
    let q = Queue::open(dir.path(), 1).unwrap();
    // Each number written in the other byte order, as that machine's C
    // program laid out its struct.
    let mut rec = vec![0u8; 40];
    rec[..5].copy_from_slice(b"a\x01b\x02c");
    rec[6..8].copy_from_slice(&(-300i16).to_ne_bytes().iter().rev().copied().collect::<Vec<u8>>());
    rec[8..12].copy_from_slice(&123_456_789i32.swap_bytes().to_ne_bytes());
    rec[12..16].copy_from_slice(&1.5f32.to_bits().swap_bytes().to_ne_bytes());
    rec[16..24].copy_from_slice(&(-1_234_567_890_123i64).swap_bytes().to_ne_bytes());
    rec[24..32].copy_from_slice(&0.1f64.to_bits().swap_bytes().to_ne_bytes());
    rec[32] = 0xfe;
    let native: u32 = if cfg!(target_endian = "big") { 2 } else { 1 };
    let other = 3 - native;
    let file = export_by_hand(2, other, 40, &numbers(), &[rec.clone(), rec[..20].to_vec()]);
    assert_eq!(q.import(&mut &file[..], ""), (2, None));
    let mut out = [0u8; 40];
    let n = q.pop(&mut out, Wait::NoWait).unwrap();
    assert_eq!(n, 40);
    let got: Vec<FieldValue> = numbers().iter().map(|f| f.value(&out)).collect();
    assert_eq!(
        got,
        vec![
            FieldValue::Text(b"a\x01b\x02c"),
            FieldValue::Long(-300),
            FieldValue::Long(123_456_789),
            FieldValue::Float(1.5),
            FieldValue::Long(-1_234_567_890_123),
            FieldValue::Double(0.1),
            FieldValue::Long(-2),
        ]
    );
    // A record shorter than the layout: the fields it holds are turned,
    // the one it cuts (`long`, 4 of its 8 bytes) is left as it is.
    let n = q.pop(&mut out, Wait::NoWait).unwrap();
    assert_eq!(n, 20);
    assert_eq!(numbers()[2].value(&out[..n]), FieldValue::Long(123_456_789));
    assert_eq!(numbers()[3].value(&out[..n]), FieldValue::Float(1.5));
    assert_eq!(&out[16..20], &rec[16..20]);
    // The text export shows the values, whatever the order they came in.
    assert_eq!(q.import(&mut &file[..], ""), (2, None));
    let mut text = Vec::new();
    q.export(&mut text, &ExportFormat::Text("|".into())).unwrap();
    assert_eq!(
        String::from_utf8(text).unwrap().lines().next(),
        Some("a\\x01b\\x02c|-300|123456789|1.5|-1234567890123|0.1|-2")
    );
    // This machine's order, and version 1: byte for byte.
    q.truncate().unwrap();
    for file in
        [export_by_hand(2, native, 40, &numbers(), &[rec.clone()]), export_by_hand(1, 0, 40, &[], &[rec.clone()])]
    {
        assert_eq!(q.import(&mut &file[..], ""), (1, None));
        q.pop(&mut out, Wait::NoWait).unwrap();
        assert_eq!(out.to_vec(), rec);
    }
    // The other order without a field list: nothing to convert by.
    let (n, e) = q.import(&mut &export_by_hand(2, other, 40, &[], &[rec.clone()])[..], "");
    assert_eq!((n, e.map(|e| e.code())), (0, Some(VER_NOT_MATCH)));
    let (n, e) = q.import(&mut &export_by_hand(2, 7, 40, &[], &[rec])[..], "");
    assert_eq!((n, e.map(|e| e.code())), (0, Some(SHM_ERR_INVAL)));
}

/// An import into an `always` queue syncs once per batch of
/// `IMPORT_BATCH` records (and once at the end), not once per record:
/// 3,000 records take 3 syncs; every record is in, in order.
#[test]
fn an_import_into_an_always_queue_syncs_per_batch() {
    let dir = crate::test_support::DiskDir::new("import-batch");
    let mut spec = Spec::new(4000, 16);
    spec.durability = Some(crate::spec::Durability::Always);
    Queue::create(dir.path(), 1, &Spec::new(4000, 16)).unwrap();
    Queue::create(dir.path(), 2, &spec).unwrap();
    let source = Queue::open(dir.path(), 1).unwrap();
    for i in 0..3000u32 {
        source.push(&i.to_le_bytes()).unwrap();
    }
    let mut file = Vec::new();
    assert_eq!(source.export(&mut file, &ExportFormat::Binary).unwrap(), 3000);
    let q = Queue::open(dir.path(), 2).unwrap();
    let before = q.durable_stats().unwrap().syncs;
    assert_eq!(q.import(&mut &file[..], ""), (3000, None));
    let syncs = q.durable_stats().unwrap().syncs - before;
    assert_eq!(syncs, 3000u64.div_ceil(super::batch::IMPORT_BATCH), "{syncs} syncs for 3,000 records");
    let mut out = [0u8; 16];
    let ((), popped) = q.defer_syncs(|q| {
        for i in 0..3000u32 {
            let n = q.pop(&mut out, Wait::NoWait).unwrap();
            assert_eq!(&out[..n], &i.to_le_bytes());
        }
    });
    q.sync_ticket(popped.unwrap()).unwrap();
    drop((q, source));
    Queue::drop_queue(dir.path(), 1).unwrap();
    Queue::drop_queue(dir.path(), 2).unwrap();
}
