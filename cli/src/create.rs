//! `tvmq create`.

use clap::Args;
use std::path::Path;
use tvm::error::{CONDIT_IS_NIL, Error};
use tvm::{Queue, Spec};

#[derive(Args)]
pub struct CreateArgs {
    /// Queue id (the TABLE number programs use, e.g. 21)
    id: u32,
    /// Exact capacity in records
    #[arg(long)]
    rows: u64,
    /// Largest record in bytes
    #[arg(long, value_name = "BYTES")]
    size: u64,
    /// Queue name (default: the id)
    #[arg(long)]
    name: Option<String>,
    /// Partition text stored with the queue
    #[arg(long, default_value = "")]
    part: String,
    /// Permission bits of the queue file, in octal
    #[arg(long, default_value = "0600", value_parser = parse_mode)]
    mode: u32,
    /// How long a waiter waits for a stalled slot whose holder cannot be
    /// identified, before recovering it (dead holders are recovered at once)
    #[arg(long, value_name = "MS", default_value_t = tvm::DEFAULT_UNBLOCK_TIMEOUT_MS)]
    unblock_timeout_ms: u64,
}

fn parse_mode(s: &str) -> Result<u32, String> {
    u32::from_str_radix(s.trim_start_matches("0o"), 8)
        .ok()
        .filter(|m| *m <= 0o777)
        .ok_or_else(|| format!("{s:?} is not an octal permission mode such as 0600 or 0660"))
}

pub fn run(dir: &Path, a: &CreateArgs) -> Result<(), Error> {
    if a.rows == 0 || a.size == 0 {
        return Err(Error::new(CONDIT_IS_NIL, "--rows and --size must be at least 1"));
    }
    let mut spec = Spec::new(a.rows, a.size);
    spec.name = a.name.clone().unwrap_or_else(|| a.id.to_string());
    spec.part = a.part.clone();
    spec.mode = a.mode;
    spec.unblock_timeout_ms = a.unblock_timeout_ms;
    let started = std::time::Instant::now();
    Queue::create(dir, a.id, &spec)?;
    println!(
        "created queue {} ({} rows x {} bytes, mode {:04o}) in {} ms: {}",
        a.id,
        a.rows,
        a.size,
        a.mode,
        started.elapsed().as_millis(),
        tvm::queue_path(dir, a.id).display()
    );
    Ok(())
}
