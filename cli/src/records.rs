//! `tvmq push` and `tvmq pop`: records in and out of a queue by hand, as
//! text lines (or hex), so that a queue can be tried from a shell.

use clap::Args;
use std::io::{BufRead, Write};
use std::path::Path;
use std::time::{Duration, Instant};
use tvm::error::{CONDIT_IS_NIL, MQUE_WAIT_TMO, NO_DATA_FOUND, SVR_EXCEPTION};
use tvm::{Error, Queue, Wait};

#[derive(Args)]
#[command(after_help = "Examples:\n  \
    tvmq push 21 hello world          # two records: \"hello\" and \"world\"\n  \
    printf 'a\\nb\\n' | tvmq push 21    # one record a line of stdin\n  \
    tvmq push 21 --hex 00ff10         # the bytes 00 ff 10\n\n\
    Each record goes in as it comes; a full queue stops the push (DATA_SPC_FULL) with the count pushed before it.")]
pub struct PushArgs {
    /// Queue id
    id: u32,
    /// Records to push, one an argument (none: one a line of stdin, its line end removed)
    records: Vec<String>,
    /// Records are written in hex (two digits a byte)
    #[arg(long)]
    hex: bool,
}

#[derive(Args)]
#[command(after_help = "Examples:\n  \
    tvmq pop 21                       # the oldest record, if any (exit 1 when the queue is empty)\n  \
    tvmq pop 21 --count 10 --wait 5   # up to 10 records, waiting up to 5 s for them\n  \
    tvmq pop 21 --lease 30000         # acknowledged once written (a queue with leases)\n\n\
    Each record is written on a line of its own, its trailing zero bytes removed (--hex: in hex).")]
pub struct PopArgs {
    /// Queue id
    id: u32,
    /// Records to take at most
    #[arg(long, default_value_t = 1, value_name = "N")]
    count: usize,
    /// Wait up to this many seconds for the records (0: take what is there now)
    #[arg(long, default_value_t = 0.0, value_name = "SECS")]
    wait: f64,
    /// Take each record with a lease of MS milliseconds and acknowledge it once it is written
    /// (a record whose write fails is released, delivered again; a queue with leases)
    #[arg(long, value_name = "MS")]
    lease: Option<u64>,
    /// Write the records in hex
    #[arg(long)]
    hex: bool,
}

fn hex_record(text: &str) -> Result<Vec<u8>, Error> {
    let t = text.trim();
    let bad = || Error::new(CONDIT_IS_NIL, format!("{t:?} is not hex (two digits a byte)"));
    if t.len() % 2 != 0 {
        return Err(bad());
    }
    (0..t.len())
        .step_by(2)
        .map(|i| t.get(i..i + 2).and_then(|b| u8::from_str_radix(b, 16).ok()).ok_or_else(bad))
        .collect()
}

pub fn push(dir: &Path, args: &PushArgs) -> Result<(), Error> {
    let q = Queue::open(dir, args.id)?;
    let mut pushed = 0u64;
    let mut one = |record: Vec<u8>| -> Result<(), Error> {
        if record.len() > q.record_size() {
            return Err(Error::new(
                tvm::error::RECD_TOO_LONG,
                format!(
                    "a record of {} bytes is longer than queue {}'s records (at most {})",
                    record.len(),
                    args.id,
                    q.record_size()
                ),
            ));
        }
        q.push(&record)?;
        pushed += 1;
        Ok(())
    };
    let outcome = if args.records.is_empty() {
        let stdin = std::io::stdin();
        let mut lines = stdin.lock();
        let mut line = Vec::new();
        loop {
            line.clear();
            match lines.read_until(b'\n', &mut line) {
                Ok(0) => break Ok(()),
                Ok(_) => {}
                Err(e) => break Err(Error::new(SVR_EXCEPTION, format!("stdin: {e}"))),
            }
            let end = line.strip_suffix(b"\n").map_or(&line[..], |l| l.strip_suffix(b"\r").unwrap_or(l));
            let record = if args.hex { hex_record(&String::from_utf8_lossy(end)) } else { Ok(end.to_vec()) };
            if let Err(e) = record.and_then(&mut one) {
                break Err(e);
            }
        }
    } else {
        args.records.iter().try_for_each(|r| one(if args.hex { hex_record(r)? } else { r.as_bytes().to_vec() }))
    };
    match outcome {
        Ok(()) => {
            println!("pushed {pushed} record(s) to queue {}", args.id);
            Ok(())
        }
        Err(e) => Err(Error::new(e.code(), format!("{} (after {pushed} record(s) pushed)", e.what()))),
    }
}

/// Writes one record: its bytes less trailing zeros, or hex; a line each.
fn write_record(out: &mut impl Write, record: &[u8], hex: bool) -> std::io::Result<()> {
    let end = record.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    if hex {
        for b in &record[..end] {
            write!(out, "{b:02x}")?;
        }
    } else {
        out.write_all(&record[..end])?;
    }
    out.write_all(b"\n")?;
    out.flush()
}

pub fn pop(dir: &Path, args: &PopArgs) -> Result<(), Error> {
    if !(0.0..=86_400.0).contains(&args.wait) {
        return Err(Error::new(CONDIT_IS_NIL, format!("--wait {}: 0 to 86400 seconds", args.wait)));
    }
    if args.count == 0 {
        return Err(Error::new(CONDIT_IS_NIL, "--count must be at least 1"));
    }
    let q = Queue::open(dir, args.id)?;
    let deadline = Instant::now() + Duration::from_secs_f64(args.wait);
    let mut buf = vec![0u8; q.record_size()];
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let written = |e: std::io::Error| Error::new(SVR_EXCEPTION, format!("stdout: {e}"));
    let mut taken = 0;
    while taken < args.count {
        let wait = if args.wait == 0.0 { Wait::NoWait } else { Wait::Until(deadline) };
        let got = match args.lease {
            None => q.pop(&mut buf, wait).map(|n| (n, None)),
            Some(ms) => q.pop_lease(&mut buf, wait, Duration::from_millis(ms.max(1))).map(|(n, l)| (n, Some(l))),
        };
        let (n, lease) = match got {
            Ok(v) => v,
            Err(e) if matches!(e.code(), NO_DATA_FOUND | MQUE_WAIT_TMO) && taken > 0 => break,
            Err(e) if matches!(e.code(), NO_DATA_FOUND | MQUE_WAIT_TMO) => {
                return Err(Error::new(
                    e.code(),
                    if args.wait == 0.0 {
                        format!("queue {} is empty", args.id)
                    } else {
                        format!("nothing came to queue {} within {} s", args.id, args.wait)
                    },
                ));
            }
            Err(e) => return Err(e),
        };
        let write = write_record(&mut out, &buf[..n], args.hex);
        match (write, lease) {
            (Ok(()), Some(l)) => q.ack(&l)?,
            (Ok(()), None) => {}
            (Err(e), Some(l)) => {
                q.release(&l, Duration::ZERO)?;
                return Err(written(e));
            }
            (Err(e), None) => return Err(written(e)),
        }
        taken += 1;
    }
    Ok(())
}
