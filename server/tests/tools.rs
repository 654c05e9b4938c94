//! The Redis tools against tvmq serve: redis-benchmark (every test it runs
//! on lists, then the depth it must have left), redis-py (records a local
//! producer pushed through shared memory popped byte for byte, and the
//! reverse).

mod common;

use common::*;
use std::path::Path;
use std::process::Command;

fn benchmark(port: u16, args: &[&str]) {
    let out = Command::new("redis-benchmark")
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-q", "-d", "304"])
        .args(args)
        .output()
        .expect("redis-benchmark runs (apt-get install redis-tools)");
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "redis-benchmark {args:?}: {text}\n{err}");
    assert!(!text.contains("rror") && !err.contains("rror"), "redis-benchmark {args:?} saw an error: {text}\n{err}");
    eprintln!(
        "redis-benchmark {}: {}",
        args.join(" "),
        text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").trim()
    );
}

#[test]
fn redis_benchmark_completes_and_leaves_what_it_pushed_minus_what_it_popped() {
    let dir = TempDir::new("server", "benchmark");
    let server = start(&dir, &["--auto-create", "20000x304"]);
    let port = server.tcp_addr().unwrap().port();
    // One command a request: exact counts.
    benchmark(port, &["-t", "ping", "-n", "2000", "-c", "4"]);
    benchmark(port, &["-t", "lpush", "-n", "3000", "-c", "4"]);
    benchmark(port, &["-t", "rpush", "-n", "2000", "-c", "4"]);
    benchmark(port, &["-t", "lpop", "-n", "1500", "-c", "4"]);
    benchmark(port, &["-t", "rpop", "-n", "1000", "-c", "4"]);
    let q = tvm::Queue::open(dir.path(), tvmq_server::auto_id("mylist")).unwrap();
    assert_eq!(q.name(), "mylist");
    assert_eq!(q.depth(), 3000 + 2000 - 1500 - 1000);
    // Pipelined (counts that are multiples of -P x -c are exact too).
    benchmark(port, &["-t", "lpush,rpush", "-n", "2048", "-c", "4", "-P", "16"]);
    benchmark(port, &["-t", "lpop", "-n", "1024", "-c", "4", "-P", "16"]);
    assert_eq!(q.depth(), 2500 + 2 * 2048 - 1024);
    assert_eq!(cli(server.tcp_addr().unwrap(), &["LLEN", "mylist"]), (2500 + 2 * 2048 - 1024).to_string());
    let s = q.stats();
    assert_eq!((s.pushed, s.popped), (3000 + 2000 + 2 * 2048, 1500 + 1000 + 1024));
    // The records are redis-benchmark's values of 304 bytes.
    let mut out = [0u8; 304];
    assert_eq!(q.pop(&mut out, tvm::Wait::NoWait).unwrap(), 304);
    server.stop();
}

#[test]
fn redis_py_pops_what_a_local_producer_pushed_and_the_reverse() {
    let python = redis_py();
    let dir = TempDir::new("server", "redis-py");
    create(&dir, 31, "orders", 1000, 512);
    let q = tvm::Queue::open(dir.path(), 31).unwrap();
    // Records of every length and byte, CR LF and protocol look-alikes included.
    let mut records: Vec<Vec<u8>> = (0..200u64)
        .map(|i| {
            let len = 1 + (splitmix64(i) % 512) as usize;
            (0..len).map(|j| splitmix64(i * 1000 + j as u64) as u8).collect()
        })
        .collect();
    records[0] = b"*1\r\n$4\r\nPING\r\n".to_vec();
    records[1] = vec![0u8; 512];
    records[2] = b"-ERR not an error\r\n".to_vec();
    for r in &records {
        q.push(r).unwrap();
    }
    let expected = dir.path().join("expected.hex");
    let pushed = dir.path().join("pushed.hex");
    let hex = |r: &[u8]| r.iter().map(|b| format!("{b:02x}")).collect::<String>();
    std::fs::write(&expected, records.iter().map(|r| hex(r) + "\n").collect::<String>()).unwrap();

    let server = start(&dir, &[]);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/redis_py_check.py");
    let out = Command::new(&python)
        .arg(&script)
        .arg(server.tcp_addr().unwrap().port().to_string())
        .arg("orders")
        .arg(&expected)
        .arg(&pushed)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "redis_py_check.py failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprint!("{}", String::from_utf8_lossy(&out.stdout));
    // A local consumer gets what redis-py pushed, in order, byte for byte.
    let theirs: Vec<String> = std::fs::read_to_string(&pushed).unwrap().lines().map(str::to_string).collect();
    assert_eq!(theirs.len(), 100);
    let mut buf = [0u8; 512];
    for (i, want) in theirs.iter().enumerate() {
        let n = q.pop(&mut buf, tvm::Wait::NoWait).unwrap();
        assert_eq!(&hex(&buf[..n]), want, "record {i} pushed by redis-py");
    }
    assert_eq!(q.depth(), 0);
    server.stop();
}
