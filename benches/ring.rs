//! Microbenchmarks of the ring for day-to-day tuning (`cargo bench`): one
//! thread pushing and popping 304-byte records, through the ring over heap
//! memory, through a queue file, singly and in batches of 64. The full
//! matrix with its peers is `make bench`.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use std::hint::black_box;
use tvm::{LocalRing, Queue, Spec, Wait};

const SIZE: usize = 304;
const BATCH: usize = 64;

fn ring(c: &mut Criterion) {
    let mut g = c.benchmark_group("ring (heap)");
    g.throughput(Throughput::Elements(1));
    let r = LocalRing::new(1024, SIZE);
    let rec = [7u8; SIZE];
    let mut out = [0u8; SIZE];
    g.bench_function("push+pop 304 B", |b| {
        b.iter(|| {
            assert!(r.push(black_box(&rec)));
            r.pop(black_box(&mut out)).unwrap()
        })
    });
    g.finish();
}

fn queue(c: &mut Criterion) {
    let dir = std::env::temp_dir().join(format!("tvmq-criterion-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    Queue::create(&dir, 1, &Spec::new(65536, SIZE as u64)).unwrap();
    let q = Queue::open(&dir, 1).unwrap();
    let rec = [7u8; SIZE];
    let mut out = [0u8; SIZE];
    let mut g = c.benchmark_group("queue file");
    g.throughput(Throughput::Elements(1));
    g.bench_function("push+pop 304 B", |b| {
        b.iter(|| {
            q.push(black_box(&rec)).unwrap();
            q.pop(black_box(&mut out), Wait::NoWait).unwrap()
        })
    });
    let batch = vec![7u8; SIZE * BATCH];
    let mut many = Vec::with_capacity(SIZE * BATCH);
    g.throughput(Throughput::Elements(BATCH as u64));
    g.bench_function("push_many+pop_many 64 x 304 B", |b| {
        b.iter(|| {
            assert_eq!(q.push_many(black_box(&batch), SIZE).0, BATCH);
            many.clear();
            assert_eq!(q.pop_many(&mut many, SIZE, BATCH, Wait::NoWait).0, BATCH);
        })
    });
    g.finish();
    drop(q);
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group!(benches, ring, queue);
criterion_main!(benches);
