//! The consumer of `examples/rust/producer.rs`, in another process: pops
//! records from queue 44, waiting at most 5 s for each, checks that they come
//! in order, stops at the end marker, and drops the queue.

use std::time::{Duration, Instant};
use tvm::error::TBL_ARD_EXIST;
use tvm::{Queue, Spec, Wait};

const QUEUE: u32 = 44;

fn main() -> Result<(), tvm::Error> {
    let dir = tvm::queue_dir();
    match Queue::create(&dir, QUEUE, &Spec::new(1024, 64)) {
        Err(e) if e.code() != TBL_ARD_EXIST => return Err(e),
        _ => {}
    }
    let q = Queue::open(&dir, QUEUE)?;
    let mut out = vec![0u8; q.record_size()];
    let mut expected = 0u64;
    loop {
        // MQUE_WAIT_TMO if the producer stays silent for 5 s: then the queue
        // goes too if it is empty (nothing is left behind), and main returns
        // the error, which Rust prints with its Debug form (code, name, message).
        let n = match q.pop(&mut out, Wait::Until(Instant::now() + Duration::from_secs(5))) {
            Ok(n) => n,
            Err(e) => {
                eprintln!("consumer: {e} after {expected} records");
                if q.depth() == 0 {
                    drop(q);
                    let _ = Queue::drop_queue(&dir, QUEUE);
                }
                return Err(e);
            }
        };
        let rec = std::str::from_utf8(&out[..n]).unwrap_or("(not UTF-8)");
        if rec == "end" {
            break;
        }
        if rec != format!("order {expected}") {
            eprintln!("consumer: {rec:?} where order {expected} was due");
            std::process::exit(1);
        }
        expected += 1;
    }
    println!("consumer: {expected} records in order");
    drop(q);
    Queue::drop_queue(&dir, QUEUE)
}
