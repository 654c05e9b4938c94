//! Attacks on the server's queues: auto-creation that would fill memory
//! (many keys, a blocking pop on many missing keys, a geometry that cannot
//! be), lookups of unknown keys while thousands of queues exist, and a
//! blocking pop on a thousand queues. Each is refused or bounded, and the
//! server keeps serving (times are not asserted: a loaded machine decides
//! them; what stands for them is asserted instead, as the server counts it).

mod common;

use common::*;
use std::path::Path;
use std::time::{Duration, Instant};

/// Queue files (`queue-*.tvmq`) in `dir`.
fn queue_files(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| tvm::queue_file_id(&e.file_name()).is_some())
        .count()
}

/// Bytes of `dir`'s files (all of them, temporaries included).
fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir).unwrap().filter_map(Result::ok).filter_map(|e| e.metadata().ok()).map(|m| m.len()).sum()
}

/// Entries of `dir` other than queue files (a temporary left behind, ...).
fn strays(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| tvm::queue_file_id(&e.file_name()).is_none())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

/// Entries of /dev/shm (where the test directories are) naming process `pid`
/// (a number of their name, between non-digits, is `pid`) and not this one.
/// Not a substring: the directories of other test processes, named with
/// their pids, would match a pid that is a part of theirs (1234 in
/// `tvmq-test-attack-41234-...`).
fn shm_entries_of(pid: u32) -> Vec<String> {
    let names = |n: &str, p: u32| n.split(|c: char| !c.is_ascii_digit()).any(|w| w == p.to_string());
    let me = std::process::id();
    std::fs::read_dir("/dev/shm")
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| names(n, pid) && !names(n, me))
        .collect()
}

/// The size of the file of a queue of `rows` x `size`.
fn file_size(rows: u64, size: u64) -> u64 {
    tvm::Spec::new(rows, size).checked_file_size().unwrap()
}

/// Sends every command of `cmds` at once, then reads their replies.
fn pipeline(c: &mut Conn, cmds: &[Vec<Vec<u8>>]) -> Vec<V> {
    let mut out = Vec::new();
    for cmd in cmds {
        let args: Vec<&[u8]> = cmd.iter().map(Vec::as_slice).collect();
        resp::command(&mut out, &args);
    }
    c.send_raw(&out);
    cmds.iter().map(|_| c.read()).collect()
}

/// A new client's PING is answered (within the connection's read timeout,
/// 20 s: a guard against a server that stopped serving, not a bound on
/// speed).
fn pong(addr: std::net::SocketAddr) {
    assert_eq!(Conn::connect(addr).cmd(&[b"PING"]), V::Simple("PONG".into()));
}

/// `n` queues of 10 x 16 bytes named `q<i>`, ids 1..=n.
fn many_queues(dir: &TempDir, n: u32) -> Duration {
    let t = Instant::now();
    for i in 1..=n {
        create(dir, i, &format!("q{i}"), 10, 16);
    }
    t.elapsed()
}

#[test]
fn auto_creation_stops_at_max_queues() {
    let dir = TempDir::new("attack", "max-queues");
    let server = ChildServer::start(&dir, &["--auto-create", "10x16", "--max-queues", "100"]);
    let base_rss = server.rss_kib();
    let mut c = Conn::connect(server.addr);
    let cmds: Vec<Vec<Vec<u8>>> =
        (0..2000).map(|i| vec![b"RPUSH".to_vec(), format!("key{i}").into_bytes(), b"v".to_vec()]).collect();
    let t = Instant::now();
    let replies = pipeline(&mut c, &cmds);
    let took = t.elapsed();
    let ok = replies.iter().filter(|r| **r == V::Int(1)).count();
    let refused: Vec<&V> = replies.iter().filter(|r| matches!(r, V::Err(_))).collect();
    eprintln!("2,000 keys under --max-queues 100: {ok} created, {} refused, in {took:?}", refused.len());
    assert_eq!(ok, 100, "the first 100 keys get a queue");
    assert_eq!(refused.len(), 1900);
    let e = refused[0].err_text();
    assert!(e.starts_with("MQUE_CRTE_BIG ") && e.contains("--max-queues 100") && e.contains("nothing created"), "{e}");
    assert_eq!(queue_files(dir.path()), 100);
    assert!(dir_bytes(dir.path()) <= 100 * file_size(10, 16), "{} bytes", dir_bytes(dir.path()));
    // Its resident memory: the 100 queues it maps (their pages are the files'), plus
    // at most 32 MiB of its own.
    let rss = server.rss_kib();
    eprintln!("RSS {base_rss} -> {rss} KiB");
    assert!(rss.saturating_sub(base_rss) <= 100 * file_size(10, 16) / 1024 + 32 * 1024, "RSS {base_rss} -> {rss} KiB");
    assert!(strays(dir.path()).is_empty(), "{:?}", strays(dir.path()));
    assert!(shm_entries_of(server.pid()).is_empty(), "{:?}", shm_entries_of(server.pid()));
    // Still serving: the queues it made, and others' PING.
    assert_eq!(c.cmd(&[b"RPUSH", b"key7", b"w"]), V::Int(2));
    assert_eq!(c.cmd(&[b"LPOP", b"key7"]), V::bulk(b"v"));
    pong(server.addr);
    // A queue it made, dropped, frees its place.
    let ids = tvm::queue_ids(dir.path()).unwrap();
    let id = *ids.iter().find(|&&id| tvm::queue_name(dir.path(), id).is_ok_and(|n| n == "key3")).unwrap();
    tvm::Queue::drop_queue(dir.path(), id).unwrap();
    wait_until(Duration::from_secs(5), "the dropped queue's place to be freed", || {
        c.cmd(&[b"RPUSH", b"another", b"v"]) == V::Int(1)
    });
    assert_eq!(queue_files(dir.path()), 100);
}

#[test]
fn auto_creation_stops_at_max_memory() {
    let dir = TempDir::new("attack", "max-memory");
    let each = file_size(10, 16);
    let budget = (each * 7 / 2).to_string();
    let server = start(&dir, &["--auto-create", "10x16", "--max-memory", &budget]);
    let mut c = Conn::connect(server.tcp_addr().unwrap());
    for k in ["a", "b", "c"] {
        assert_eq!(c.cmd(&[b"RPUSH", k.as_bytes(), b"v"]), V::Int(1));
    }
    let e = c.cmd(&[b"RPUSH", b"d", b"v"]);
    let e = e.err_text();
    assert!(e.starts_with("MQUE_CRTE_BIG ") && e.contains(&format!("--max-memory {budget}")), "{e}");
    assert_eq!(c.cmd(&[b"RPUSH", b"5", b"v"]).err_text(), e.replace("'d'", "'5'"), "numeric keys too");
    assert_eq!(queue_files(dir.path()), 3);
    assert!(dir_bytes(dir.path()) <= budget.parse().unwrap());
    assert_eq!(c.cmd(&[b"LPOP", b"b"]), V::bulk(b"v"), "still serving");
    server.stop();
}

#[test]
fn a_blocking_pop_on_many_missing_keys_creates_few_or_none() {
    let dir = TempDir::new("attack", "blpop-missing");
    let server = start(&dir, &["--auto-create", "10x16"]);
    let mut c = Conn::connect(server.tcp_addr().unwrap());
    let mut cmd: Vec<Vec<u8>> = vec![b"BLPOP".to_vec()];
    cmd.extend((0..1000).map(|i| format!("missing{i}").into_bytes()));
    cmd.push(b"0.1".to_vec());
    let args: Vec<&[u8]> = cmd.iter().map(Vec::as_slice).collect();
    let t = Instant::now();
    let e = c.cmd(&args);
    eprintln!("BLPOP on 1,000 missing keys: {e:?} in {:?}", t.elapsed());
    // Looked up no further than the ninth missing key.
    assert!(e.err_text().contains("at least 9 missing queues named in one command, at most 8"), "{e:?}");
    assert_eq!(queue_files(dir.path()), 0, "nothing created");
    // A few are created, all of them, and the pop then times out.
    let mut few: Vec<&[u8]> = vec![b"BLPOP", b"m1", b"m2", b"m1", b"m3"];
    few.push(b"0.05");
    assert_eq!(c.cmd(&few), V::Nil);
    assert_eq!(queue_files(dir.path()), 3);
    assert!(strays(dir.path()).is_empty());
    server.stop();
}

/// Auto-creation runs off the worker: while a slow creation (the server's
/// test aid) runs for one connection, another connection of the same (only)
/// worker is answered; two connections creating one key at once get one
/// queue; a blocking pop's missing key is made the same way, then waits.
#[test]
fn auto_creation_does_not_hold_the_worker() {
    let dir = TempDir::new("attack", "create-off-worker");
    let how = Spawn { env: &[("TVMQ_SERVE_TEST_CREATE_DELAY_MS", "600")], ..Spawn::default() };
    let server = ChildServer::spawn(&dir, &["--threads", "1", "--auto-create", "1000x64"], &how);
    let mut a = Conn::connect(server.addr);
    let mut b = Conn::connect(server.addr);
    let mut other = Conn::connect(server.addr);
    assert_eq!(other.cmd(&[b"PING"]), V::Simple("PONG".into()));
    a.send(&[b"RPUSH", b"fresh", b"x"]);
    b.send(&[b"RPUSH", b"fresh", b"y"]);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(other.cmd(&[b"PING"]), V::Simple("PONG".into()));
    assert!(a.try_read_within(Duration::ZERO).is_none(), "PING answered before the creation ended");
    let mut depths = [a.read(), b.read()];
    depths.sort_by_key(|v| format!("{v:?}"));
    assert_eq!(depths, [V::Int(1), V::Int(2)]);
    assert_eq!(other.cmd(&[b"LLEN", b"fresh"]), V::Int(2), "one queue for both");
    assert_eq!(queue_files(dir.path()), 1);

    a.send(&[b"BLPOP", b"later", b"0"]);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(other.cmd(&[b"PING"]), V::Simple("PONG".into()));
    assert!(a.try_read_within(Duration::ZERO).is_none());
    common::wait_until(Duration::from_secs(10), "the blocking pop's queue made", || queue_files(dir.path()) == 2);
    // The depth after: 0 if the blocked pop took the record first.
    let depth = other.cmd(&[b"RPUSH", b"later", b"z"]);
    assert!(depth == V::Int(1) || depth == V::Int(0), "{depth:?}");
    assert_eq!(a.read(), V::Arr(vec![V::bulk(b"later"), V::bulk(b"z")]));
}

#[test]
fn an_impossible_auto_create_geometry_is_refused_at_start() {
    let dir = TempDir::new("attack", "geometry");
    let e = tvmq_server::Server::start(dir.path(), &args(&["--auto-create", "1x99999999999"])).err().unwrap();
    assert!(e.to_string().contains("--auto-create 1x99999999999: a record size of 99999999999 bytes"), "{e}");
    let e = tvmq_server::Server::start(dir.path(), &args(&["--auto-create", "1000x304", "--max-memory", "1m"]))
        .err()
        .unwrap();
    assert!(e.to_string().contains("more than --max-memory 1048576"), "{e}");
    // The default budget, half of /dev/shm, does not hold 10^9 records of 1 KiB.
    let e = tvmq_server::Server::start(dir.path(), &args(&["--auto-create", "1000000000x1024"])).err().unwrap();
    assert!(e.to_string().contains("the default: half of the"), "{e}");
    assert_eq!(queue_files(dir.path()), 0);
}

/// `index_headers_read` of INFO stats: the queue headers the server's index
/// has read.
fn headers_read(c: &mut Conn) -> u64 {
    let V::Bulk(info) = c.cmd(&[b"INFO", b"stats"]) else { panic!("INFO stats: not text") };
    let info = String::from_utf8_lossy(&info).into_owned();
    info.lines().find_map(|l| l.strip_prefix("index_headers_read:")).and_then(|v| v.trim().parse().ok()).unwrap()
}

#[test]
fn unknown_keys_cost_no_scan_with_thousands_of_queues() {
    let dir = TempDir::new("attack", "unknown-keys");
    let n = 2000;
    let made = many_queues(&dir, n);
    eprintln!("{n} queues created in {made:?}");
    let server = start(&dir, &[]);
    let addr = server.tcp_addr().unwrap();
    let mut c = Conn::connect(addr);
    let cmds: Vec<Vec<Vec<u8>>> =
        (0..200).map(|i| vec![b"LLEN".to_vec(), format!("missing{i}").into_bytes()]).collect();
    let pinger = std::thread::spawn(move || {
        let mut worst = Duration::ZERO;
        for _ in 0..20 {
            let t = Instant::now();
            pong(addr);
            worst = worst.max(t.elapsed());
            std::thread::sleep(Duration::from_millis(5));
        }
        worst
    });
    let read_before = headers_read(&mut c);
    assert!(read_before >= u64::from(n), "the index read every header at start: {read_before}");
    let t = Instant::now();
    let replies = pipeline(&mut c, &cmds);
    let took = t.elapsed();
    let worst_ping = pinger.join().unwrap();
    eprintln!("200 LLEN of unknown keys with {n} queues: {took:?}; another client's PING at worst {worst_ping:?}");
    assert!(replies.iter().all(|r| r.err_text().starts_with("ERR no such queue 'missing")));
    // The work, not the time (4.8 s, and a PING 6.6 s, when each unknown key
    // scanned every header): no header read for an unknown key.
    assert_eq!(headers_read(&mut c), read_before, "headers read for 200 unknown keys");
    assert_eq!(c.cmd(&[b"LLEN", b"q1999"]), V::Int(0), "a known name is found");
    // INFO queues reads a bounded number of headers, from the index.
    let t = Instant::now();
    let V::Bulk(info) = c.cmd(&[b"INFO", b"queues"]) else { panic!("INFO queues: not text") };
    let took = t.elapsed();
    let info = String::from_utf8_lossy(&info);
    let listed = info.lines().filter(|l| l.starts_with("queue_")).count();
    eprintln!("INFO queues with {n} queues: {listed} listed in {took:?}");
    assert_eq!(listed, 256, "{info}");
    assert!(info.contains(&format!("queues_not_listed:{}", n - 256)), "{info}");
    server.stop();
}

#[test]
fn queues_of_other_processes_are_seen_at_once() {
    let dir = TempDir::new("attack", "others");
    many_queues(&dir, 10);
    let server = ChildServer::start(&dir, &[]);
    let mut c = Conn::connect(server.addr);
    for round in 0..50u32 {
        let name = format!("fresh{round}");
        let id = 1000 + round % 3;
        assert!(c.cmd(&[b"LLEN", name.as_bytes()]).err_text().starts_with("ERR no such queue"));
        create(&dir, id, &name, 10, 16);
        assert_eq!(c.cmd(&[b"RPUSH", name.as_bytes(), b"x"]), V::Int(1), "round {round}: created, then asked");
        tvm::Queue::drop_queue(dir.path(), id).unwrap();
        let e = c.cmd(&[b"LLEN", name.as_bytes()]);
        assert!(e.err_text().starts_with("ERR no such queue"), "round {round}: dropped, then asked: {e:?}");
    }
    // The same id re-created under another name: the old name is gone.
    create(&dir, 1000, "first", 10, 16);
    assert_eq!(c.cmd(&[b"LLEN", b"first"]), V::Int(0));
    tvm::Queue::drop_queue(dir.path(), 1000).unwrap();
    create(&dir, 1000, "second", 10, 16);
    assert!(c.cmd(&[b"LLEN", b"first"]).err_text().starts_with("ERR no such queue"));
    assert_eq!(c.cmd(&[b"LLEN", b"second"]), V::Int(0));
}

/// Blocks a client in BLPOP on `keys`; waits until the server counts it.
fn block_on(addr: std::net::SocketAddr, keys: &[String], timeout: &str) -> Conn {
    let mut c = Conn::connect(addr);
    let mut args: Vec<&[u8]> = vec![b"BLPOP"];
    args.extend(keys.iter().map(|k| k.as_bytes()));
    args.push(timeout.as_bytes());
    c.send(&args);
    blocked(addr, 1);
    c
}

/// Waits until the server counts `n` blocked clients.
fn blocked(addr: std::net::SocketAddr, n: usize) {
    wait_until(Duration::from_secs(20), "the clients to block", || {
        let V::Bulk(info) = Conn::connect(addr).cmd(&[b"INFO", b"clients"]) else { return false };
        String::from_utf8_lossy(&info).contains(&format!("blocked_clients:{n}\r"))
    });
}

/// Wake-ups the server's watchers handed to blocked clients for pushes,
/// and those of them seen late: at the end of a sleep that ran out, not
/// woken by the push (INFO stats).
fn wakeups(addr: std::net::SocketAddr) -> (u64, u64) {
    let V::Bulk(info) = Conn::connect(addr).cmd(&[b"INFO", b"stats"]) else { panic!("INFO stats") };
    let info = String::from_utf8_lossy(&info).into_owned();
    (info_field(&info, "blocked_wakeups"), info_field(&info, "blocked_wakeups_late"))
}

/// 9 times, a client blocked on `keys` woken by a push through shared
/// memory to the first (the reply checked): the wake-ups the server
/// counted meanwhile, and those seen late.
fn nine_wakeups(dir: &TempDir, addr: std::net::SocketAddr, keys: &[String]) -> (u64, u64) {
    let id: u32 = keys[0].trim_start_matches('q').parse().unwrap();
    let q = tvm::Queue::open(dir.path(), id).unwrap();
    let before = wakeups(addr);
    for _ in 0..9 {
        let mut c = block_on(addr, keys, "10");
        // Let the watchers settle asleep: the push is to wake them.
        std::thread::sleep(Duration::from_millis(20));
        q.push(b"wake up").unwrap();
        assert_eq!(c.read(), V::Arr(vec![V::bulk(format!("q{id}").as_bytes()), V::bulk(b"wake up")]));
    }
    let after = wakeups(addr);
    (after.0 - before.0, after.1 - before.1)
}

#[test]
fn a_blocking_pop_on_a_thousand_queues_takes_few_threads_and_wakes_promptly() {
    let dir = TempDir::new("attack", "thousand-watched");
    let n = 1000;
    many_queues(&dir, n);
    let server = ChildServer::start(&dir, &["--threads", "2"]);
    // Without the bounded pools' threads, which come and go with jobs
    // (opening a queue, closing one): a thousand queues make some.
    let (base, _) = threads_and_pools(server.pid());
    let one = nine_wakeups(&dir, server.addr, &["q500".to_string()]);
    // A thousand, by one client; the queue pushed to first (the client
    // looks at its keys in order: that cost is not the wake-up's).
    let keys: Vec<String> = [500].into_iter().chain((1..=n).filter(|&i| i != 500)).map(|i| format!("q{i}")).collect();
    let _held = block_on(server.addr, &keys, "10");
    let (t, _) = threads_and_pools(server.pid());
    drop(_held);
    blocked(server.addr, 0);
    let many = nine_wakeups(&dir, server.addr, &keys);
    eprintln!(
        "BLPOP on {n} queues: threads {base} -> {t}; 9 shared-memory pushes: wake-ups (all, seen late) {one:?} with \
         1 queue watched, {many:?} with {n} watched"
    );
    // At most max(2 workers, 8) watcher threads (one per queue before: +1,000).
    assert!(t <= base + 8, "threads {base} -> {t}");
    // Each push woke its client through the watcher's sleep on the queue's
    // futex, not at the end of the sleep (1 s: a missed wake-up).
    assert_eq!(one, (9, 0), "1 queue watched: (wake-ups, seen late)");
    assert_eq!(many, (9, 0), "{n} queues watched: (wake-ups, seen late)");
    pong(server.addr);
}
