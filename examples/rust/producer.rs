//! A producer process on the safe Rust API: pushes `count` records into
//! queue 44 (creating it if the consumer has not), then an end marker.
//! `examples/rust/consumer.rs` pops them in another process:
//!
//! ```text
//! cargo run --release --example consumer &
//! cargo run --release --example producer -- 10000
//! ```
//!
//! Both use `$TVMDBD` (default `/dev/shm/tvmq-<uid>`), as C programs do.

use tvm::error::{DATA_SPC_FULL, TBL_ARD_EXIST};
use tvm::{Queue, Spec};

/// Queue 44: records of up to 64 bytes.
const QUEUE: u32 = 44;

fn main() -> Result<(), tvm::Error> {
    let count: u64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let dir = tvm::queue_dir();
    match Queue::create(&dir, QUEUE, &Spec::new(1024, 64)) {
        Err(e) if e.code() != TBL_ARD_EXIST => return Err(e),
        _ => {}
    }
    let q = Queue::open(&dir, QUEUE)?;
    for i in 0..=count {
        let rec = if i < count { format!("order {i}") } else { "end".to_string() };
        // A full queue is not an error here: the consumer catches up.
        while let Err(e) = q.push(rec.as_bytes()) {
            if e.code() != DATA_SPC_FULL {
                return Err(e);
            }
            std::thread::sleep(std::time::Duration::from_micros(100));
        }
    }
    println!("producer: pushed {count} records and the end marker");
    Ok(())
}
