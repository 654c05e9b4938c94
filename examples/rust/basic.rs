//! The safe Rust API: create a queue, push from threads, pop, drop.
//!
//! `cargo run --release --example basic` (uses a temporary queue directory).

use std::sync::Arc;
use tvm::{Queue, Spec, Wait};

fn main() -> Result<(), tvm::error::Error> {
    let dir = std::env::temp_dir().join(format!("tvmq-example-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temporary directory");
    Queue::create(&dir, 7, &Spec::new(1000, 64))?;
    let q = Arc::new(Queue::open(&dir, 7)?);

    let producers: Vec<_> = (0..2u64)
        .map(|p| {
            let q = q.clone();
            std::thread::spawn(move || {
                for i in 0..100u64 {
                    let rec = format!("producer {p} record {i}");
                    q.push(rec.as_bytes()).expect("push");
                }
            })
        })
        .collect();
    let mut out = vec![0u8; q.record_size()];
    let mut got = 0;
    while got < 200 {
        let n = q.pop(&mut out, Wait::Forever)?;
        if got % 50 == 0 {
            println!("{}", String::from_utf8_lossy(&out[..n]));
        }
        got += 1;
    }
    producers.into_iter().for_each(|t| t.join().expect("producer"));
    println!("popped {got} records; depth now {}", q.depth());
    drop(q);
    Queue::drop_queue(&dir, 7)?;
    std::fs::remove_dir_all(&dir).expect("cleanup");
    Ok(())
}
