//! Cells measured inside this process: tvmq through its C ABI (the same
//! calls a C program makes), crossbeam's `ArrayQueue`, the bare ring loop,
//! and the costs of creating, attaching and first touching a queue.

use crate::ctx::Ctx;
use crate::harness::fresh_queue;
use crossbeam_queue::ArrayQueue;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Instant;
use tvm::ffi::{self, QUE_NORMAL, RC_SUCC, SATvm};

const SIZE: usize = 304;
type Record = [u8; SIZE];

/// Runs `work(i)` on `n` threads released together; returns the milliseconds
/// from the release to the last thread's end, or the first error.
pub(crate) fn threads(
    n: usize,
    work: impl Fn(usize) -> Result<(), String> + Send + Sync + 'static,
) -> Result<f64, String> {
    let barrier = Arc::new(Barrier::new(n + 1));
    let work = Arc::new(work);
    let handles: Vec<_> = (0..n)
        .map(|i| {
            let (barrier, work) = (barrier.clone(), work.clone());
            std::thread::spawn(move || {
                barrier.wait();
                work(i)
            })
        })
        .collect();
    // The clock starts before the release, so that no work escapes it.
    let start = Instant::now();
    barrier.wait();
    let mut result = Ok(());
    for h in handles {
        let r = h.join().map_err(|_| "thread panicked".to_string()).and_then(|r| r);
        result = result.and(r);
    }
    result.map(|()| start.elapsed().as_secs_f64() * 1000.0)
}

/// A thread's own tvmq handle bound to `buf` for queue `t`, as a C program does.
pub(crate) struct Handle(pub(crate) *mut SATvm);
// SAFETY: a handle is used by the one thread that owns it.
unsafe impl Send for Handle {}

impl Handle {
    pub(crate) fn new(t: u32, buf: *mut c_void, size: usize) -> Handle {
        let h = ffi::pCloneSATvm().cast::<SATvm>();
        assert!(!h.is_null(), "out of memory");
        // SAFETY: freshly allocated handle, ours alone.
        unsafe {
            (*h).tblName = t;
            (*h).lSize = size;
            (*h).pstVoid = buf;
        }
        Handle(h)
    }

    pub(crate) fn check(&self, rc: std::ffi::c_long, what: &str) -> Result<(), String> {
        if rc == RC_SUCC {
            return Ok(());
        }
        // SAFETY: our handle.
        let code = unsafe { (*self.0).m_lErrno };
        Err(format!("{what}: {}", tvm::error::Error::code_only(code)))
    }

    pub(crate) fn push(&self) -> Result<(), String> {
        // SAFETY: our handle, bound to a live buffer of lSize bytes.
        self.check(unsafe { ffi::lPush(self.0) }, "lPush")
    }

    pub(crate) fn pop(&self, out: *mut c_void) -> Result<(), String> {
        // SAFETY: our handle; `out` holds lSize bytes.
        self.check(unsafe { ffi::lPop(self.0, out, QUE_NORMAL) }, "lPop")
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        // SAFETY: made by pCloneSATvm, freed once.
        unsafe { ffi::vCloneFree(self.0) };
    }
}

/// Attaches queue `t` (as a C program does before its clock starts).
pub(crate) fn attach(t: u32) -> Result<(), String> {
    let h = Handle::new(t, std::ptr::null_mut(), 0);
    // SAFETY: our handle.
    h.check(unsafe { ffi::lAttchTable(h.0, t) }, "lAttchTable")
}

/// `n` threads each pushing (or popping) `per` records of `size` bytes on queue `t`.
fn tvmq_run(t: u32, n: usize, per: u64, size: usize, pop: bool) -> Result<f64, String> {
    threads(n, move |i| {
        let mut buf = vec![b'x'; size];
        buf[..8.min(size)].copy_from_slice(&(i as u64).to_le_bytes()[..8.min(size)]);
        let h = Handle::new(t, buf.as_mut_ptr().cast(), size);
        for _ in 0..per {
            if pop { h.pop(buf.as_mut_ptr().cast())? } else { h.push()? }
        }
        Ok(())
    })
}

pub(crate) fn tvmq_threads(ctx: &mut Ctx, counts: &[usize]) {
    let records = ctx.records();
    if let Err(e) = fresh_queue(&ctx.dir, 21, records, SIZE as u64).and_then(|()| attach(21)) {
        eprintln!("tvmq: {e}");
        return;
    }
    for &n in counts {
        let per = records / n as u64;
        ctx.measure_group(
            "threads",
            &[("push", "tvmq"), ("pop", "tvmq")],
            &n.to_string(),
            per * n as u64,
            SIZE as u64,
            |_| Ok(vec![tvmq_run(21, n, per, SIZE, false)?, tvmq_run(21, n, per, SIZE, true)?]),
        );
    }
}

pub(crate) fn tvmq_pushpop(ctx: &mut Ctx, mixes: &[(usize, usize)]) {
    let records = ctx.records() / 20 * 20;
    if let Err(e) = fresh_queue(&ctx.dir, 21, records, SIZE as u64).and_then(|()| attach(21)) {
        eprintln!("tvmq: {e}");
        return;
    }
    for &(p, c) in mixes {
        ctx.measure_group("push+pop", &[("threads", "tvmq")], &format!("{p}+{c}"), 2 * records, SIZE as u64, |_| {
            let (per_push, per_pop) = (records / p as u64, records / c as u64);
            Ok(vec![threads(p + c, move |i| {
                let mut buf = vec![b'x'; SIZE];
                let h = Handle::new(21, buf.as_mut_ptr().cast(), SIZE);
                if i < p {
                    (0..per_push).try_for_each(|_| h.push())
                } else {
                    (0..per_pop).try_for_each(|_| h.pop(buf.as_mut_ptr().cast()))
                }
            })?])
        });
    }
}

pub(crate) fn tvmq_sizes(ctx: &mut Ctx, sizes: &[u64]) {
    ctx.size_sweep(sizes, 22, || attach(22), |records, size, pop| tvmq_run(22, 1, records, size as usize, pop));
}

pub(crate) fn tvmq_batches(ctx: &mut Ctx) {
    let records = ctx.records() / 64 * 64;
    if let Err(e) = fresh_queue(&ctx.dir, 23, records, SIZE as u64).and_then(|()| attach(23)) {
        eprintln!("batches: {e}");
        return;
    }
    let batch = |pop: bool| -> Result<f64, String> {
        threads(1, move |_| {
            let mut buf = vec![b'x'; SIZE * 64];
            let h = Handle::new(23, buf.as_mut_ptr().cast(), SIZE);
            for _ in 0..records / 64 {
                if pop {
                    let (mut n, mut out) = (0usize, std::ptr::null_mut::<c_void>());
                    // SAFETY: our handle and out-pointers; the array is freed below.
                    h.check(unsafe { ffi::lPopup(h.0, 64, 1, &mut n, &mut out) }, "lPopup")?;
                    // SAFETY: malloc'd by lPopup.
                    unsafe { libc::free(out) };
                } else {
                    let (mut n, mut p) = (64usize, buf.as_mut_ptr().cast::<c_void>());
                    // SAFETY: our handle; 64 records of lSize bytes at p.
                    h.check(unsafe { ffi::lPushs(h.0, &mut n, &mut p) }, "lPushs")?;
                }
            }
            Ok(())
        })
    };
    ctx.measure_group(
        "batch",
        &[("lPush", "tvmq"), ("lPop", "tvmq"), ("lPushs x64", "tvmq"), ("lPopup x64", "tvmq")],
        "1",
        records,
        SIZE as u64,
        |_| {
            Ok(vec![
                tvmq_run(23, 1, records, SIZE, false)?,
                tvmq_run(23, 1, records, SIZE, true)?,
                batch(false)?,
                batch(true)?,
            ])
        },
    );
    let _ = tvm::Queue::drop_queue(&ctx.dir, 23);
}

/// A crossbeam push's record: the 304 bytes read from the caller's buffer
/// (as lPush reads the one bound to its handle), not a constant the compiler
/// may build in registers.
#[inline(always)]
fn take_record(rec: &Record) -> Record {
    *std::hint::black_box(rec)
}

/// A crossbeam pop's record copied into the caller's buffer `out`, which the
/// compiler must then assume is read (as lPop's caller reads what it copied):
/// no part of the copy can be left out.
#[inline(always)]
fn give_record(rec: Record, out: &mut Record) {
    *out = rec;
    std::hint::black_box(out);
}

pub(crate) fn crossbeam_threads(ctx: &mut Ctx, counts: &[usize]) {
    let records = ctx.records();
    for &n in counts {
        let per = records / n as u64;
        ctx.measure_group(
            "threads",
            &[("push", "crossbeam"), ("pop", "crossbeam")],
            &n.to_string(),
            per * n as u64,
            SIZE as u64,
            |_| {
                let q = Arc::new(ArrayQueue::<Record>::new(records as usize));
                let qp = q.clone();
                let push = threads(n, move |i| {
                    let mut rec = [b'x'; SIZE];
                    rec[0] = i as u8;
                    (0..per).try_for_each(|_| qp.push(take_record(&rec)).map_err(|_| "crossbeam: full".to_string()))
                })?;
                let pop = threads(n, move |_| {
                    let mut out = [0u8; SIZE];
                    for _ in 0..per {
                        give_record(q.pop().ok_or("crossbeam: empty")?, &mut out);
                    }
                    Ok(())
                })?;
                Ok(vec![push, pop])
            },
        );
    }
}

pub(crate) fn crossbeam_pushpop(ctx: &mut Ctx, mixes: &[(usize, usize)]) {
    let records = ctx.records() / 20 * 20;
    for &(p, c) in mixes {
        ctx.measure_group(
            "push+pop",
            &[("threads", "crossbeam")],
            &format!("{p}+{c}"),
            2 * records,
            SIZE as u64,
            |_| {
                let q = Arc::new(ArrayQueue::<Record>::new(records as usize));
                let (per_push, per_pop) = (records / p as u64, records / c as u64);
                Ok(vec![threads(p + c, move |i| {
                    if i < p {
                        let rec = [b'x'; SIZE];
                        (0..per_push)
                            .try_for_each(|_| q.push(take_record(&rec)).map_err(|_| "crossbeam: full".to_string()))
                    } else {
                        let mut out = [0u8; SIZE];
                        for _ in 0..per_pop {
                            // ArrayQueue cannot block: spin, then yield, until a record comes.
                            let mut spins = 0u32;
                            let rec = loop {
                                if let Some(r) = q.pop() {
                                    break r;
                                }
                                spins += 1;
                                if spins > 64 {
                                    std::thread::yield_now();
                                } else {
                                    std::hint::spin_loop();
                                }
                            };
                            give_record(rec, &mut out);
                        }
                        Ok(())
                    }
                })?])
            },
        );
    }
}

/// The hardware reference: one thread, a sequence word per slot, one CAS on the
/// tail (head), a 304-byte copy and a store of the sequence, over the same
/// amount of shared memory as the queue, touched beforehand (warm).
pub(crate) fn bare_ring(ctx: &mut Ctx) {
    let records = ctx.records() as usize;
    let stride = tvm::slot_stride(SIZE as u64) as usize;
    let file = match scratch_file(&ctx.dir, records * stride) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("bare ring: {e}");
            return;
        }
    };
    // SAFETY: a private scratch file of ours, mapped whole.
    let mut map = match unsafe { memmap2::MmapOptions::new().populate().map_mut(&file) } {
        Ok(m) => m,
        Err(e) => {
            eprintln!("bare ring: {e}");
            return;
        }
    };
    map.iter_mut().step_by(4096).for_each(|b| *b = 0); // touch every page: warm
    let base = map.as_mut_ptr();
    ctx.measure_group(
        "threads",
        &[("push", "bare ring"), ("pop", "bare ring")],
        "1",
        records as u64,
        SIZE as u64,
        |_| {
            // Every sequence even (free) before the run.
            (0..records).for_each(|i| {
                // SAFETY: slot i lies in the mapping; 8-aligned.
                unsafe { (*base.add(i * stride).cast::<AtomicU64>()).store(0, Ordering::Relaxed) }
            });
            let (tail, head) = (AtomicU64::new(0), AtomicU64::new(0));
            let rec = [b'x'; SIZE];
            let mut out = [0u8; SIZE];
            let t = Instant::now();
            for _ in 0..records {
                let pos = tail.load(Ordering::Relaxed);
                // SAFETY: pos < records, so the slot lies in the mapping.
                let slot = unsafe { base.add(pos as usize * stride) };
                // SAFETY: 8-aligned (stride is a multiple of 8, the map page-aligned).
                let seq = unsafe { &*slot.cast::<AtomicU64>() };
                if seq.load(Ordering::Acquire) & 1 == 0
                    && tail.compare_exchange(pos, pos + 1, Ordering::SeqCst, Ordering::Relaxed).is_ok()
                {
                    // SAFETY: the record area after the 16-byte header is inside the slot.
                    unsafe { std::ptr::copy_nonoverlapping(std::hint::black_box(&rec).as_ptr(), slot.add(16), SIZE) };
                    seq.store(pos * 2 + 1, Ordering::Release);
                }
            }
            let push = t.elapsed().as_secs_f64() * 1000.0;
            let t = Instant::now();
            for _ in 0..records {
                let pos = head.load(Ordering::Relaxed);
                // SAFETY: as above.
                let slot = unsafe { base.add(pos as usize * stride) };
                // SAFETY: as above.
                let seq = unsafe { &*slot.cast::<AtomicU64>() };
                if seq.load(Ordering::Acquire) & 1 == 1
                    && head.compare_exchange(pos, pos + 1, Ordering::SeqCst, Ordering::Relaxed).is_ok()
                {
                    // SAFETY: as above.
                    unsafe { std::ptr::copy_nonoverlapping(slot.add(16), out.as_mut_ptr(), SIZE) };
                    seq.store(pos * 2 + 2, Ordering::Release);
                    // The caller's buffer is read: no copy may be left out.
                    std::hint::black_box(&mut out);
                }
            }
            let pop = t.elapsed().as_secs_f64() * 1000.0;
            std::hint::black_box(out);
            if tail.load(Ordering::Relaxed) != records as u64 || head.load(Ordering::Relaxed) != records as u64 {
                return Err("bare ring: not every record went through".into());
            }
            Ok(vec![push, pop])
        },
    );
}

fn scratch_file(dir: &std::path::Path, len: usize) -> Result<std::fs::File, String> {
    let path = dir.join("bare-ring.scratch");
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let _ = std::fs::remove_file(&path);
    f.set_len(len as u64).map_err(|e| e.to_string())?;
    Ok(f)
}

/// Creating a queue, attaching it (map + populate), and what first touches
/// cost when pages are not populated at attach (pushes without populate minus
/// pushes with it).
pub(crate) fn setup_costs(ctx: &mut Ctx) {
    let records = ctx.records();
    let dir = ctx.dir.clone();
    let rec = [b'x'; SIZE];
    let push_all = |q: &tvm::Queue| -> Result<f64, String> {
        let t = Instant::now();
        for _ in 0..records {
            q.push(&rec).map_err(|e| e.to_string())?;
        }
        Ok(t.elapsed().as_secs_f64() * 1000.0)
    };
    ctx.measure_group(
        "setup",
        &[("create", "tvmq"), ("attach + populate", "tvmq"), ("first-touch faults", "tvmq")],
        &format!("{records} x 304 B"),
        0,
        SIZE as u64,
        |_| {
            let t = Instant::now();
            fresh_queue(&dir, 24, records, SIZE as u64)?;
            let create = t.elapsed().as_secs_f64() * 1000.0;
            let t = Instant::now();
            let q = tvm::Queue::open_with(&dir, 24, true).map_err(|e| e.to_string())?;
            let attach = t.elapsed().as_secs_f64() * 1000.0;
            let warm = push_all(&q)?;
            drop(q);
            fresh_queue(&dir, 24, records, SIZE as u64)?;
            let q = tvm::Queue::open_with(&dir, 24, false).map_err(|e| e.to_string())?;
            let cold = push_all(&q)?;
            drop(q);
            let _ = tvm::Queue::drop_queue(&dir, 24);
            Ok(vec![create, attach, (cold - warm).max(0.0)])
        },
    );
}
