//! The `leases` part (`tvmq bench --only leases`): acknowledged consumption
//! beside plain pops, in one run, through the C ABI a C program calls. At
//! 1, 2, 4, 10 threads, each run fills a plain queue and a queue with
//! leases (`lPush`), then empties the plain one with `lPop` and the other
//! with `lPopLease` + `lAck` per record; the table gives both rates and
//! their ratio (target: >= 0.5). Then, one thread, the rate of
//! `lPopLease` + `lAck` while 100 and 100,000 other leases are in flight
//! (a table of 101,024 entries): a lease call's cost must not grow with the
//! leases outstanding.

use crate::ctx::Ctx;
use crate::harness::fresh_queue;
use crate::inproc::{Handle, attach, threads};
use tvm::ffi::{self, QUE_NORMAL, TvmLease};

const SIZE: usize = 304;
/// The plain queue and the queue with leases.
const PLAIN: u32 = 24;
const LEASED: u32 = 25;
/// The queue of the outstanding-leases cells.
const BIG: u32 = 26;
/// Leases in flight in the outstanding-leases cells.
const OUTSTANDING: [usize; 2] = [100, 100_000];
/// Lease + acknowledgement pairs each outstanding-leases cell measures.
const WINDOW_OPS: u64 = 200_000;

/// A fresh queue with leases: default lease 30 s (never runs out here), room
/// for 1,024 leases in flight (a thread holds one at a time).
fn fresh_lease_queue(dir: &std::path::Path, id: u32, rows: u64) -> Result<(), String> {
    let _ = tvm::Queue::drop_queue(dir, id);
    let mut spec = tvm::Spec::new(rows, SIZE as u64);
    spec.leases = Some(tvm::LeaseSpec::default());
    tvm::Queue::create(dir, id, &spec).map_err(|e| e.to_string())
}

/// `n` threads each pushing `per` records into queue `t`.
fn push(t: u32, n: usize, per: u64) -> Result<f64, String> {
    threads(n, move |i| {
        let mut buf = vec![b'x'; SIZE];
        buf[..8].copy_from_slice(&(i as u64).to_le_bytes());
        let h = Handle::new(t, buf.as_mut_ptr().cast(), SIZE);
        (0..per).try_for_each(|_| h.push())
    })
}

/// How the records are taken.
#[derive(Clone, Copy, PartialEq)]
enum Take {
    /// `lPop`.
    Pop,
    /// `lPopLease`, then `lAck`, per record.
    LeaseAck,
    /// `lAckPopLease` per record (acknowledging the one before), a
    /// `lPopLease` first and a `lAck` last.
    Combined,
}

/// `n` threads each taking `per` records from queue `t`.
fn take(t: u32, n: usize, per: u64, how: Take) -> Result<f64, String> {
    threads(n, move |_| {
        let mut buf = vec![0u8; SIZE];
        let h = Handle::new(t, buf.as_mut_ptr().cast(), SIZE);
        let out = buf.as_mut_ptr().cast();
        let mut token = std::mem::MaybeUninit::<TvmLease>::zeroed();
        let tok = token.as_mut_ptr();
        match how {
            Take::Pop => (0..per).try_for_each(|_| h.pop(out)),
            Take::LeaseAck => (0..per).try_for_each(|_| {
                // SAFETY: our handle; `out` holds lSize bytes; the token is ours.
                h.check(unsafe { ffi::lPopLease(h.0, out, QUE_NORMAL, 0, tok) }, "lPopLease")?;
                // SAFETY: as above; lPopLease filled the token.
                h.check(unsafe { ffi::lAck(h.0, tok) }, "lAck")
            }),
            Take::Combined if per == 0 => Ok(()),
            Take::Combined => {
                // SAFETY: our handle; `out` holds lSize bytes; the token is ours.
                h.check(unsafe { ffi::lPopLease(h.0, out, QUE_NORMAL, 0, tok) }, "lPopLease")?;
                for _ in 1..per {
                    // SAFETY: as above; the token holds the last lease.
                    h.check(unsafe { ffi::lAckPopLease(h.0, tok, out, QUE_NORMAL, 0, tok) }, "lAckPopLease")?;
                }
                // SAFETY: as above.
                h.check(unsafe { ffi::lAck(h.0, tok) }, "lAck")
            }
        }
    })
}

pub(crate) fn run(ctx: &mut Ctx, counts: &[usize]) {
    let records = ctx.records();
    let ready = fresh_queue(&ctx.dir, PLAIN, records, SIZE as u64)
        .and_then(|()| fresh_lease_queue(&ctx.dir, LEASED, records))
        .and_then(|()| attach(PLAIN))
        .and_then(|()| attach(LEASED));
    if let Err(e) = ready {
        eprintln!("leases: {e}");
        return;
    }
    // Which queue goes first alternates from run to run (the first of a
    // pair may meet a cache or page state the second does not).
    let mut round = 0usize;
    for &n in counts {
        let per = records / n as u64;
        ctx.measure_group(
            "leases",
            &[
                ("lPush", "plain queue"),
                ("lPush", "lease queue"),
                ("lPop|lPopLease+lAck", "plain queue"),
                ("lPop|lPopLease+lAck", "lease queue"),
                ("lPop|lPopLease+lAck", "lease queue, lAckPopLease"),
            ],
            &n.to_string(),
            per * n as u64,
            SIZE as u64,
            |_| {
                // Interleaved: the plain queue and the queue with leases,
                // each filled then emptied (the queue with leases twice: by
                // lPopLease + lAck, by lAckPopLease), in an order that
                // turns from run to run.
                round += 1;
                let run = |k: usize| match k {
                    0 => Ok::<_, String>((push(PLAIN, n, per)?, take(PLAIN, n, per, Take::Pop)?)),
                    1 => Ok((push(LEASED, n, per)?, take(LEASED, n, per, Take::LeaseAck)?)),
                    _ => Ok((push(LEASED, n, per)?, take(LEASED, n, per, Take::Combined)?)),
                };
                let mut got = [(0.0, 0.0); 3];
                for k in 0..3 {
                    let which = (k + round) % 3;
                    got[which] = run(which)?;
                }
                Ok(vec![got[0].0, got[1].0, got[0].1, got[1].1, got[2].1])
            },
        );
    }
    let _ = tvm::Queue::drop_queue(&ctx.dir, PLAIN);
    let _ = tvm::Queue::drop_queue(&ctx.dir, LEASED);
    outstanding(ctx);
}

/// One thread, `WINDOW_OPS` times: `lPopLease` a record and `lAck` the
/// oldest lease held, `window` leases in flight throughout (taken before the
/// clock starts, acknowledged after it stops). Milliseconds of the loop.
fn window_run(window: usize) -> Result<f64, String> {
    let mut buf = vec![0u8; SIZE];
    let h = Handle::new(BIG, buf.as_mut_ptr().cast(), SIZE);
    let out = buf.as_mut_ptr().cast();
    for _ in 0..window as u64 + WINDOW_OPS {
        h.push()?;
    }
    let mut held = std::collections::VecDeque::with_capacity(window + 1);
    let lease = |held: &mut std::collections::VecDeque<TvmLease>| {
        let mut token = std::mem::MaybeUninit::<TvmLease>::zeroed();
        // SAFETY: our handle; `out` holds lSize bytes; the token is ours.
        h.check(unsafe { ffi::lPopLease(h.0, out, QUE_NORMAL, 0, token.as_mut_ptr()) }, "lPopLease")?;
        // SAFETY: lPopLease filled it.
        held.push_back(unsafe { token.assume_init() });
        Ok::<_, String>(())
    };
    let ack = |held: &mut std::collections::VecDeque<TvmLease>| match held.pop_front() {
        // SAFETY: our handle and a token lPopLease filled.
        Some(mut t) => h.check(unsafe { ffi::lAck(h.0, &mut t) }, "lAck"),
        None => Err("no lease held".to_string()),
    };
    for _ in 0..window {
        lease(&mut held)?;
    }
    let t0 = std::time::Instant::now();
    for _ in 0..WINDOW_OPS {
        lease(&mut held)?;
        ack(&mut held)?;
    }
    let ms = t0.elapsed().as_secs_f64() * 1e3;
    while !held.is_empty() {
        ack(&mut held)?;
    }
    Ok(ms)
}

/// The outstanding-leases cells (see the module doc).
fn outstanding(ctx: &mut Ctx) {
    let max = *OUTSTANDING.iter().max().unwrap_or(&0) as u64 + 1024;
    let ready = (|| {
        let _ = tvm::Queue::drop_queue(&ctx.dir, BIG);
        let mut spec = tvm::Spec::new(max + WINDOW_OPS, SIZE as u64);
        // Leases of an hour: none runs out, however slow the run.
        spec.leases = Some(tvm::LeaseSpec { max_leases: max, lease_ms: 3_600_000, ..Default::default() });
        tvm::Queue::create(&ctx.dir, BIG, &spec).map_err(|e| e.to_string())?;
        attach(BIG)
    })();
    if let Err(e) = ready {
        eprintln!("leases: {e}");
        return;
    }
    for window in OUTSTANDING {
        ctx.measure_group(
            "leases",
            &[("lPopLease+lAck, leases in flight", "lease queue (101,024 entries)")],
            &window.to_string(),
            WINDOW_OPS,
            SIZE as u64,
            |_| Ok(vec![window_run(window)?]),
        );
    }
    let _ = tvm::Queue::drop_queue(&ctx.dir, BIG);
}
