//! The `leases` part (`tvmq bench --only leases`): acknowledged consumption
//! beside plain pops, in one run, through the C ABI a C program calls. At
//! 1, 2, 4, 10 threads, each run fills a plain queue and a queue with
//! leases (`lPush`), then empties the plain one with `lPop` and the other
//! with `lPopLease` + `lAck` per record; the table gives both rates and
//! their ratio (target: >= 0.5).

use crate::ctx::Ctx;
use crate::harness::fresh_queue;
use crate::inproc::{Handle, attach, threads};
use tvm::ffi::{self, QUE_NORMAL, TvmLease};

const SIZE: usize = 304;
/// The plain queue and the queue with leases.
const PLAIN: u32 = 24;
const LEASED: u32 = 25;

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

/// `n` threads each taking `per` records from queue `t`: `lPop`, or
/// `lPopLease` then `lAck`.
fn take(t: u32, n: usize, per: u64, lease: bool) -> Result<f64, String> {
    threads(n, move |_| {
        let mut buf = vec![0u8; SIZE];
        let h = Handle::new(t, buf.as_mut_ptr().cast(), SIZE);
        let out = buf.as_mut_ptr().cast();
        let mut token = std::mem::MaybeUninit::<TvmLease>::zeroed();
        for _ in 0..per {
            if !lease {
                h.pop(out)?;
                continue;
            }
            // SAFETY: our handle; `out` holds lSize bytes; the token is ours.
            h.check(unsafe { ffi::lPopLease(h.0, out, QUE_NORMAL, 0, token.as_mut_ptr()) }, "lPopLease")?;
            // SAFETY: as above; lPopLease filled the token.
            h.check(unsafe { ffi::lAck(h.0, token.as_mut_ptr()) }, "lAck")?;
        }
        Ok(())
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
            ],
            &n.to_string(),
            per * n as u64,
            SIZE as u64,
            |_| {
                // Interleaved: the plain queue and the queue with leases,
                // each filled then emptied, in alternating order.
                round += 1;
                let plain = |_: ()| Ok::<_, String>((push(PLAIN, n, per)?, take(PLAIN, n, per, false)?));
                let leased = |_: ()| Ok::<_, String>((push(LEASED, n, per)?, take(LEASED, n, per, true)?));
                let (p, l) = if round % 2 == 1 {
                    let p = plain(())?;
                    (p, leased(())?)
                } else {
                    let l = leased(())?;
                    (plain(())?, l)
                };
                Ok(vec![p.0, l.0, p.1, l.1])
            },
        );
    }
    let _ = tvm::Queue::drop_queue(&ctx.dir, PLAIN);
    let _ = tvm::Queue::drop_queue(&ctx.dir, LEASED);
}
