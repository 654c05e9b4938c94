//! Watching the queues (`--only metrics`): what a scrape of 10,000 small
//! queues costs (the first, which opens a view of each, and the next ones:
//! time and bytes, in this process and through the HTTP server as
//! Prometheus gets it), and what a metrics reader does to a running
//! push/pop loop: the loop's rate with a reader scraping back to back
//! beside it and without, in rounds that alternate, so that both meet the
//! same machine (the figure is the ratio of the medians).

use crate::ctx::Ctx;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};
use tvm::{Queue, Wait};
use tvmq_watch::{Collector, Http, HttpOptions, Watch, expose};

/// The first queue id of the part (clear of the other parts' ids).
const BASE: u32 = 300_000;

/// What the reader beside the loop does.
const IDLE: u8 = 0;
const EVERY_SECOND: u8 = 1;
const BACK_TO_BACK: u8 = 2;
const READY: u8 = 3;
const STOP: u8 = 4;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// One scrape in this process: a sample of every queue and its exposition.
fn scrape(c: &mut Collector) -> Result<(Duration, usize), String> {
    let start = Instant::now();
    let s = c.sample().map_err(|e| e.to_string())?;
    let mut text = String::with_capacity(1 << 20);
    expose::write_queues(&mut text, &s, usize::MAX);
    Ok((start.elapsed(), text.len()))
}

/// `GET /metrics` from `addr`: the time to the last byte, and the bytes.
fn http_scrape(addr: std::net::SocketAddr) -> Result<(Duration, usize), String> {
    let start = Instant::now();
    let mut s = std::net::TcpStream::connect(addr).map_err(|e| e.to_string())?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").map_err(|e| e.to_string())?;
    let mut body = Vec::new();
    s.read_to_end(&mut body).map_err(|e| e.to_string())?;
    Ok((start.elapsed(), body.len()))
}

/// Pushes and pops one record after the other on `q` for `span`: pairs per second.
fn loop_rate(q: &Queue, span: Duration) -> f64 {
    let rec = [7u8; 64];
    let mut out = [0u8; 64];
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < span {
        for _ in 0..1000 {
            let _ = q.push(&rec);
            let _ = q.pop(&mut out, Wait::NoWait);
        }
        n += 1000;
    }
    n as f64 / start.elapsed().as_secs_f64()
}

fn measure(ctx: &mut Ctx, dir: &Path, n: u32) -> Result<String, String> {
    let ids: Vec<u32> = (BASE..BASE + n).collect();
    ctx.progress(&format!("metrics: making {n} queues"));
    for &id in &ids {
        Queue::create(dir, id, &tvm::Spec::new(100, 64)).map_err(|e| e.to_string())?;
    }
    let mut out = String::new();
    let mut c = Collector::new(dir);
    ctx.progress("metrics: scrapes");
    let (first, _) = scrape(&mut c)?;
    let mut times = Vec::new();
    let mut bytes = 0;
    for _ in 0..5 {
        let (t, b) = scrape(&mut c)?;
        times.push(t.as_secs_f64() * 1e3);
        bytes = b;
    }
    let queues = c.sample().map_err(|e| e.to_string())?.queues.len();
    // Its views' mappings go before the next reader maps its own.
    drop(c);
    // Through the HTTP server (a sample is kept for a quarter of a second: wait it out).
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    let http = Http::start(listener, Arc::new(Watch::new(dir, usize::MAX, None)), HttpOptions::default())
        .map_err(|e| e.to_string())?;
    http_scrape(http.local_addr())?;
    let mut http_times = Vec::new();
    let mut http_bytes = 0;
    for _ in 0..5 {
        std::thread::sleep(Duration::from_millis(300));
        let (t, b) = http_scrape(http.local_addr())?;
        http_times.push(t.as_secs_f64() * 1e3);
        http_bytes = b;
    }
    http.stop();
    let _ = writeln!(out, "\nmetrics: a scrape of {queues} queues of 100 records x 64 bytes (all listed one by one)");
    let _ = writeln!(out, "  first scrape (opens a view of each queue)   {:>9.1} ms", first.as_secs_f64() * 1e3);
    let _ = writeln!(
        out,
        "  next scrapes, in process, median of 5        {:>9.1} ms  {:>9} bytes  ({:.2} us, {:.0} bytes a queue)",
        median(times.clone()),
        bytes,
        median(times) * 1e3 / queues as f64,
        bytes as f64 / queues as f64
    );
    let _ = writeln!(
        out,
        "  GET /metrics over HTTP, median of 5          {:>9.1} ms  {:>9} bytes (head included)",
        median(http_times),
        http_bytes
    );

    // A push/pop loop with no reader, with a reader scraping once a second
    // (as Prometheus at its shortest usual interval), and with one scraping
    // back to back, in rounds that take turns.
    ctx.progress("metrics: a reader beside a push/pop loop");
    let q = Queue::open(dir, ids[0]).map_err(|e| e.to_string())?;
    let span = if ctx.args.smoke { Duration::from_millis(200) } else { Duration::from_millis(1000) };
    let rounds = if ctx.args.smoke { 1 } else { 5 };
    let mode = Arc::new(AtomicU8::new(IDLE));
    let reader = {
        let (mode, dir) = (mode.clone(), dir.to_path_buf());
        std::thread::spawn(move || {
            let mut c = Collector::new(&dir);
            let _ = scrape(&mut c);
            mode.store(READY, Ordering::SeqCst);
            let (mut n, mut last) = (0u64, Instant::now());
            loop {
                match mode.load(Ordering::SeqCst) {
                    STOP => return n,
                    BACK_TO_BACK => {
                        let _ = scrape(&mut c);
                        n += 1;
                    }
                    EVERY_SECOND if last.elapsed() >= Duration::from_secs(1) => {
                        let _ = scrape(&mut c);
                        last = Instant::now();
                        n += 1;
                    }
                    _ => std::thread::sleep(Duration::from_millis(1)),
                }
            }
        })
    };
    while mode.load(Ordering::SeqCst) != READY {
        std::thread::sleep(Duration::from_millis(10));
    }
    loop_rate(&q, span / 5);
    let mut runs: [Vec<f64>; 3] = Default::default();
    for _ in 0..rounds {
        for (i, m) in [IDLE, EVERY_SECOND, BACK_TO_BACK].into_iter().enumerate() {
            mode.store(m, Ordering::SeqCst);
            runs[i].push(loop_rate(&q, span));
        }
    }
    mode.store(STOP, Ordering::SeqCst);
    let scrapes = reader.join().unwrap_or(0);
    let none = median(runs[0].clone());
    let _ = writeln!(
        out,
        "  push+pop pairs/s of one thread on one queue, {rounds} rounds of {} ms each, taking turns:",
        span.as_millis()
    );
    for (i, what) in
        ["no reader", "a reader scraping once a second", "a reader scraping back to back"].iter().enumerate()
    {
        let m = median(runs[i].clone());
        let _ =
            writeln!(out, "    {what:<38} {:>7.2} M/s  {:>5.2}x  (runs: {})", m / 1e6, m / none, fmt_runs(&runs[i]));
    }
    let _ = writeln!(out, "    ({scrapes} scrapes of {queues} queues by the reader in all)");
    drop(q);
    for &id in &ids {
        let _ = Queue::drop_queue(dir, id);
    }
    Ok(out)
}

fn fmt_runs(v: &[f64]) -> String {
    v.iter().map(|r| format!("{:.2}", r / 1e6)).collect::<Vec<_>>().join(" ")
}

/// The part's text block for the report.
pub(crate) fn run(ctx: &mut Ctx) -> String {
    let n = if ctx.args.smoke { 1000 } else { 10_000 };
    let dir = ctx.dir.join("metrics");
    if let Err(e) = std::fs::create_dir_all(&dir) {
        return format!("\nmetrics: cannot create {}: {e}\n", dir.display());
    }
    let out = measure(ctx, &dir, n).unwrap_or_else(|e| format!("\nmetrics: failed: {e}\n"));
    let _ = std::fs::remove_dir_all(&dir);
    out
}
