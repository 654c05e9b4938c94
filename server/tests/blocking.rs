//! BLPOP and BRPOP: woken by a push from another connection or from another
//! process through shared memory, oldest waiter first, one watcher thread
//! per queue, errors when the queue is dropped or the server stops, nothing
//! lost when a waiting client goes away.

mod common;

use common::*;
use std::time::{Duration, Instant};

/// Waits until the server counts `n` blocked clients.
#[track_caller]
fn blocked(server: &tvmq_server::Server, n: usize) {
    wait_until(Duration::from_secs(10), "the clients to block", || server.blocked_clients() == n);
}

/// Wake-ups the server's watchers handed to blocked clients for pushes,
/// and those of them seen late: at the end of a sleep that ran out, not
/// woken by the push (INFO stats).
fn wakeups(addr: std::net::SocketAddr) -> (u64, u64) {
    let V::Bulk(info) = Conn::connect(addr).cmd(&[b"INFO", b"stats"]) else { panic!("INFO stats") };
    let info = String::from_utf8_lossy(&info).into_owned();
    (info_field(&info, "blocked_wakeups"), info_field(&info, "blocked_wakeups_late"))
}

/// Woken by the push, as the server counts it (one wake-up since
/// `before`, none late), not by how soon (a loaded machine decides that;
/// a watcher's sleep of a second would miss a wake-up well within any
/// bound on time that load cannot break).
#[track_caller]
fn woken_by_the_push(addr: std::net::SocketAddr, before: (u64, u64)) {
    let (all, late) = wakeups(addr);
    assert_eq!((all - before.0, late - before.1), (1, 0), "wake-ups for the push, and of them late");
}

#[test]
fn a_push_from_another_connection_wakes_blpop() {
    let dir = TempDir::new("server", "blpop-conn");
    create(&dir, 3, "jobs", 100, 64);
    let server = start(&dir, &[]);
    let addr = server.tcp_addr().unwrap();
    let waiter = std::thread::spawn(move || {
        let out = redis_cli(addr, &["BLPOP", "jobs", "0"]);
        (String::from_utf8_lossy(&out.stdout).into_owned(), Instant::now())
    });
    blocked(&server, 1);
    let before = wakeups(addr);
    let pushed_at = Instant::now();
    let depth = Conn::connect(addr).cmd(&[b"RPUSH", b"3", b"job 1"]);
    assert!(depth == V::Int(1) || depth == V::Int(0), "the waiter may have taken it already: {depth:?}");
    let (out, woke_at) = waiter.join().unwrap();
    assert_eq!(out, "jobs\njob 1\n");
    let latency = woke_at.duration_since(pushed_at);
    eprintln!("BLPOP woken {latency:?} after the push (through redis-cli)");
    woken_by_the_push(addr, before);
    assert_eq!(tvm::Queue::open(dir.path(), 3).unwrap().depth(), 0);
    server.stop();
}

#[test]
fn a_push_from_another_process_through_shared_memory_wakes_blpop() {
    let dir = TempDir::new("server", "blpop-proc");
    create(&dir, 4, "", 100, 64);
    let server = start(&dir, &[]);
    let addr = server.tcp_addr().unwrap();
    let mut c = Conn::connect(addr);
    c.send(&[b"BRPOP", b"nothing-here-but", b"4", b"0"]);
    assert_eq!(c.read().err_text(), "ERR no such queue 'nothing-here-but'");
    c.send(&[b"BRPOP", b"4", b"0"]);
    blocked(&server, 1);
    let before = wakeups(addr);
    let t = Instant::now();
    let status = child_test("local_producer_child")
        .env("TVMQ_TEST_DIR", dir.path())
        .env("TVMQ_TEST_RECORD", "from C-like local code")
        .status()
        .unwrap();
    assert!(status.success());
    assert_eq!(c.read(), V::Arr(vec![V::bulk(b"4"), V::bulk(b"from C-like local code")]));
    let answered = now_ns();
    let took = t.elapsed();
    let pushed: u64 = std::fs::read_to_string(dir.path().join("pushed-at")).unwrap().trim().parse().unwrap();
    let latency = Duration::from_nanos(answered.saturating_sub(pushed));
    eprintln!("BRPOP answered {latency:?} after the other process's push ({took:?} after starting it)");
    woken_by_the_push(addr, before);
    server.stop();
}

/// The other process: pushes one record through shared memory, with the
/// library as a C program does (no network).
#[test]
#[ignore = "a child process of a_push_from_another_process_through_shared_memory_wakes_blpop"]
fn local_producer_child() {
    let dir = child_env("TVMQ_TEST_DIR");
    let record = child_env("TVMQ_TEST_RECORD");
    let q = tvm::Queue::open(std::path::Path::new(&dir), 4).unwrap();
    let at = now_ns();
    q.push(record.as_bytes()).unwrap();
    std::fs::write(std::path::Path::new(&dir).join("pushed-at"), at.to_string()).unwrap();
}

/// Wall-clock nanoseconds (comparable between processes).
fn now_ns() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

#[test]
fn oldest_waiter_first_and_one_watcher_per_queue() {
    let dir = TempDir::new("server", "fair");
    create(&dir, 5, "fair", 100, 16);
    let server = start(&dir, &[]);
    let addr = server.tcp_addr().unwrap();
    let mut waiters: Vec<Conn> = Vec::new();
    for i in 0..5 {
        let mut c = Conn::connect(addr);
        c.send(&[b"BLPOP", b"fair", b"0"]);
        blocked(&server, i + 1);
        waiters.push(c);
    }
    let mut info = Conn::connect(addr);
    let V::Bulk(text) = info.cmd(&[b"INFO", b"stats"]) else { panic!("INFO is a bulk string") };
    assert!(String::from_utf8_lossy(&text).contains("queue_watchers_started:1\r"), "one watcher for five clients");
    let q = tvm::Queue::open(dir.path(), 5).unwrap();
    for (i, c) in waiters.iter_mut().enumerate() {
        let record = format!("record {i}");
        q.push(record.as_bytes()).unwrap();
        assert_eq!(c.read(), V::Arr(vec![V::bulk(b"fair"), V::bulk(record.as_bytes())]), "waiter {i} is served {i}th");
    }
    server.stop();
}

#[test]
fn several_keys_timeouts_and_a_client_that_leaves() {
    let dir = TempDir::new("server", "keys");
    create(&dir, 6, "a", 100, 16);
    create(&dir, 7, "b", 100, 16);
    let server = start(&dir, &[]);
    let addr = server.tcp_addr().unwrap();
    let mut c = Conn::connect(addr);
    // Timeout: a null array after about the time asked.
    let t = Instant::now();
    assert_eq!(c.cmd(&[b"BLPOP", b"a", b"b", b"0.2"]), V::Nil);
    // Not before the time asked (a lower bound: load only makes it more
    // true); that it ends at all is shown by the reply (a Conn waits 20 s).
    assert!(t.elapsed() >= Duration::from_millis(190), "{:?}", t.elapsed());
    // A record in the second queue.
    c.send(&[b"BLPOP", b"a", b"b", b"10"]);
    blocked(&server, 1);
    // The depth after the push: the waiter may have taken the record already.
    let depth = Conn::connect(addr).cmd(&[b"LPUSH", b"b", b"in b"]);
    assert!(depth == V::Int(1) || depth == V::Int(0), "{depth:?}");
    assert_eq!(c.read(), V::Arr(vec![V::bulk(b"b"), V::bulk(b"in b")]));
    // Already there: no blocking; the first non-empty key wins.
    let q6 = tvm::Queue::open(dir.path(), 6).unwrap();
    let q7 = tvm::Queue::open(dir.path(), 7).unwrap();
    q6.push(b"in a").unwrap();
    q7.push(b"also b").unwrap();
    assert_eq!(c.cmd(&[b"BLPOP", b"b", b"a", b"1"]), V::Arr(vec![V::bulk(b"b"), V::bulk(b"also b")]));
    // Commands pipelined after a BLPOP are answered after it.
    c.send_raw(b"*3\r\n$5\r\nBLPOP\r\n$1\r\na\r\n$1\r\n0\r\n*1\r\n$4\r\nPING\r\n");
    assert_eq!(c.read(), V::Arr(vec![V::bulk(b"a"), V::bulk(b"in a")]));
    assert_eq!(c.read(), V::Simple("PONG".into()));
    // A waiting client that disconnects takes nothing with it.
    let mut gone = Conn::connect(addr);
    gone.send(&[b"BLPOP", b"a", b"0"]);
    blocked(&server, 1);
    drop(gone);
    blocked(&server, 0);
    q6.push(b"kept").unwrap();
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(q6.depth(), 1, "nobody took the record for the client that left");
    assert_eq!(c.cmd(&[b"BLPOP", b"a", b"0"]), V::Arr(vec![V::bulk(b"a"), V::bulk(b"kept")]));
    server.stop();
}

#[test]
fn dropping_the_queue_or_stopping_the_server_answers_waiters_with_an_error() {
    let dir = TempDir::new("server", "drop");
    create(&dir, 8, "", 100, 16);
    create(&dir, 9, "", 100, 16);
    let server = start(&dir, &[]);
    let addr = server.tcp_addr().unwrap();
    let mut on_dropped = Conn::connect(addr);
    on_dropped.send(&[b"BLPOP", b"8", b"0"]);
    let mut on_stop = Conn::connect(addr);
    on_stop.send(&[b"BLPOP", b"9", b"0"]);
    blocked(&server, 2);
    tvm::Queue::drop_queue(dir.path(), 8).unwrap();
    assert_eq!(on_dropped.read().err_text(), "SHM_ERR_EIDRM queue 8 was dropped");
    assert_eq!(on_dropped.cmd(&[b"PING"]), V::Simple("PONG".into()), "the connection goes on");
    let stopper = std::thread::spawn(move || server.stop());
    assert_eq!(on_stop.read().err_text(), "ERR server is shutting down");
    // (30 s each: hang guards, not how soon it stops.)
    assert!(on_stop.closed_within(Duration::from_secs(30)));
    wait_until(Duration::from_secs(30), "the server to stop", || stopper.is_finished());
    stopper.join().unwrap();
}
