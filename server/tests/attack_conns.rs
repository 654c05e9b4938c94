//! One client against the others, at the connection level (issue 34): a
//! client touching more queues than the server has descriptors, more
//! clients than descriptors, accept(2) out of descriptors (on the plain
//! port and the TLS one), connections that never authenticate (partial
//! commands, idle ones, against the password holder), oversized client
//! names, and a flood of TLS handshakes with an RSA-4096 key. Each test
//! asserts the bound (descriptors, memory, replies, another client's PING)
//! beside the work done. The full-size figures are `make attack`'s
//! (scripts/attack.py).

mod common;

use common::*;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const SECRET: &str = "correct horse battery staple";

/// Another client PINGing every 2 ms until told to stop; its round trips.
struct Pinger {
    stop: Arc<AtomicBool>,
    times: Arc<Mutex<Vec<Duration>>>,
    thread: std::thread::JoinHandle<()>,
}

impl Pinger {
    fn start(addr: SocketAddr, password: Option<&str>) -> Pinger {
        let stop = Arc::new(AtomicBool::new(false));
        let times = Arc::new(Mutex::new(Vec::new()));
        let (s, t) = (stop.clone(), times.clone());
        let mut c = Conn::connect(addr);
        if let Some(p) = password {
            assert_eq!(c.cmd(&[b"AUTH", p.as_bytes()]), V::Simple("OK".into()));
        }
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                let at = Instant::now();
                assert_eq!(c.cmd(&[b"PING"]), V::Simple("PONG".into()));
                t.lock().unwrap().push(at.elapsed());
                std::thread::sleep(Duration::from_millis(2));
            }
        });
        Pinger { stop, times, thread }
    }

    /// (PINGs answered, their p99).
    fn finish(self) -> (usize, Duration) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().expect("the PINGing client was answered throughout");
        let mut t = self.times.lock().unwrap().clone();
        t.sort();
        let p99 = t.get(t.len() * 99 / 100).copied().unwrap_or_default();
        (t.len(), p99)
    }
}

fn info(addr: SocketAddr, password: Option<&str>, section: &str) -> String {
    let mut c = Conn::connect(addr);
    if let Some(p) = password {
        assert_eq!(c.cmd(&[b"AUTH", p.as_bytes()]), V::Simple("OK".into()));
    }
    match c.cmd(&[b"INFO", section.as_bytes()]) {
        V::Bulk(b) => String::from_utf8_lossy(&b).into_owned(),
        other => panic!("INFO: {other:?}"),
    }
}

/// What a new connection gets for a PING within `limit`: its reply, or
/// None (silence, or closed without one).
fn ping_once(addr: SocketAddr, limit: Duration) -> Option<String> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(limit)).unwrap();
    let _ = s.write_all(b"PING\r\n");
    let mut buf = [0u8; 128];
    let n = s.read(&mut buf).ok()?;
    (n > 0).then(|| String::from_utf8_lossy(&buf[..n]).into_owned())
}

#[test]
fn a_client_touching_more_queues_than_descriptors_leaves_the_server_serving() {
    let dir = TempDir::new("server", "fd-queues");
    let how = Spawn { nofile: Some(1024), capture_stderr: true, ..Spawn::default() };
    // One worker: the other client's PING below shares it with the attacker.
    let server = ChildServer::spawn(&dir, &["--auto-create", "4x16", "--max-queues", "2000", "--threads", "1"], &how);
    let addr = server.addr;
    let mut other = Conn::connect(addr);
    let mut meter = Meter::new(addr, None);

    // 1,100 queues made and pushed to, pipelined by one client.
    let n = 1100;
    let mut attacker = Conn::connect(addr);
    let mut wire = Vec::new();
    for i in 0..n {
        resp::command(&mut wire, &[b"RPUSH", format!("k{i}").as_bytes(), format!("v{i}").as_bytes()]);
    }
    attacker.send_raw(&wire);
    // Once the server has read them all, another client's PING is
    // answered while they are still being made (off the worker).
    meter.wait_for_input(wire.len() as u64);
    let created = info_field(&pong_and_stats(&mut other), "queues_created");
    eprintln!("{created} of {n} queues made when another client's PING was answered");
    assert!(created < n, "another client's PING was answered only after the {n} creations");
    for i in 0..n {
        assert_eq!(attacker.read(), V::Int(1), "RPUSH k{i}");
    }
    // New clients are answered (not left in the backlog), while the
    // attacker is still connected. (The 30 s: a guard against a hang.)
    for _ in 0..5 {
        assert_eq!(ping_once(addr, Duration::from_secs(30)).as_deref(), Some("+PONG\r\n"));
    }
    let fds = open_fds(server.pid());
    let stats = info(addr, None, "stats");
    let (open, max_open, closed) =
        (info_field(&stats, "open_queues"), info_field(&stats, "max_open_queues"), info_field(&stats, "queues_closed"));
    eprintln!("{n} queues at 1,024 descriptors: {fds} open, {open} queues open of {max_open}, {closed} closed");
    assert!(open <= max_open && max_open < 1024 / 4, "{open} / {max_open}");
    assert!(closed >= n - max_open, "the least recently used were closed: {closed}");
    assert_eq!(info_field(&stats, "queues_closing"), 0, "plain queues are closed at once, on the worker");
    assert!(fds < 1024 / 2, "{fds} descriptors");

    // Every queue holds its record, exactly once: LLEN and LPOP of each
    // (which opens each again, closing others).
    wire.clear();
    for i in 0..n {
        resp::command(&mut wire, &[b"LLEN", format!("k{i}").as_bytes()]);
        resp::command(&mut wire, &[b"LPOP", format!("k{i}").as_bytes()]);
        resp::command(&mut wire, &[b"LPOP", format!("k{i}").as_bytes()]);
    }
    attacker.send_raw(&wire);
    for i in 0..n {
        assert_eq!(attacker.read(), V::Int(1), "LLEN k{i}");
        assert_eq!(attacker.read(), V::bulk(format!("v{i}").as_bytes()), "LPOP k{i}");
        assert_eq!(attacker.read(), V::Nil, "k{i} again");
    }
    drop(attacker);
    assert_eq!(other.cmd(&[b"PING"]), V::Simple("PONG".into()));
    assert!(!server.stderr.lock().unwrap().iter().any(|l| l.contains("accept")), "no accept error");
}

#[test]
fn more_clients_than_descriptors_are_each_answered() {
    raise_nofile();
    let dir = TempDir::new("server", "fd-clients");
    let how = Spawn { nofile: Some(1024), capture_stderr: true, ..Spawn::default() };
    let server = ChildServer::spawn(&dir, &[], &how);
    let addr = server.addr;
    // The default --maxclients (10,000) cannot be had: lowered, and said so.
    wait_until(Duration::from_secs(10), "the warning", || {
        server.stderr.lock().unwrap().iter().any(|l| l.contains("--maxclients 10000 lowered to"))
    });
    let maxclients = info_field(&info(addr, None, "clients"), "maxclients") as usize;
    assert!(maxclients < 1024, "{maxclients}");

    let n = 1100;
    let mut socks = Vec::with_capacity(n);
    for _ in 0..n {
        let mut s = TcpStream::connect(addr).expect("connect");
        s.write_all(b"PING\r\n").unwrap();
        socks.push(s);
    }
    let (mut pong, mut refused) = (0, 0);
    for s in &mut socks {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut buf = [0u8; 64];
        let got = s.read(&mut buf).map(|k| String::from_utf8_lossy(&buf[..k]).into_owned()).unwrap_or_default();
        match got.as_str() {
            "+PONG\r\n" => pong += 1,
            "-ERR max number of clients reached\r\n" => refused += 1,
            other => panic!("a connection got {other:?}: every one is answered"),
        }
    }
    eprintln!("{n} clients at 1,024 descriptors, maxclients {maxclients}: {pong} PONG, {refused} refused");
    assert_eq!(pong + refused, n);
    // Every slot served (INFO's connection may not have given its back yet).
    assert!(pong >= maxclients - 1 && pong <= maxclients, "{pong} PONG, maxclients {maxclients}");
}

#[test]
fn out_of_descriptors_accept_refuses_with_a_reply_and_logs_once_a_second() {
    let dir = TempDir::new("server", "fd-accept");
    let how = Spawn { capture_stderr: true, ..Spawn::default() };
    let server = ChildServer::spawn(&dir, &[], &how);
    let addr = server.addr;
    let mut held = held_connections(addr);
    lower_nofile_to_open(server.pid());
    // (The time from here bounds the log lines; the accept errors are
    // counted from here too.)
    let from = Instant::now();
    let (errors_before, rejected_before) = accept_stats(&mut held[0]);
    take_free_descriptors(addr, &mut held);
    let mut refused = 1;
    // Refusals for at least 2.5 s (and 20 of them, however slow the
    // machine): long enough for the log to show its limit.
    let t = Instant::now();
    let cpu = cpu_seconds(server.pid());
    while t.elapsed() < Duration::from_millis(2500) || refused < 20 {
        let mut s = TcpStream::connect(addr).unwrap();
        assert_eq!(ping(&mut s), REFUSAL, "told, not left without a reply");
        refused += 1;
        std::thread::sleep(Duration::from_millis(5));
    }
    let (cpu, window) = (cpu_seconds(server.pid()) - cpu, from.elapsed());
    let (errors, rejected) = accept_stats(&mut held[0]);
    let (errors, rejected) = (errors - errors_before, rejected - rejected_before);
    let lines: Vec<String> = server.stderr.lock().unwrap().iter().filter(|l| l.contains("accept:")).cloned().collect();
    eprintln!(
        "{refused} connections refused out of descriptors in {window:?} ({errors} accept errors), server CPU {cpu:.2} s \
         in {:?}; {} log lines: {:?}",
        t.elapsed(),
        lines.len(),
        lines.first()
    );
    // Each refusal was counted, and cost at most one accept(2) error: the
    // error that finds a connection waiting, which the acceptor then
    // refuses with every other one waiting, until the listener has none
    // (that clears its readiness). One error more may find none: the
    // accept(2) right after the one that took the last descriptor (Linux
    // fails it with EMFILE before it looks for a connection). An acceptor
    // that left the readiness set failed again at once (two errors a
    // refusal); one spinning on the error counts one per turn. (The
    // server's own counts, not its CPU time in a window, which a loaded
    // machine decides.)
    assert_eq!(rejected, refused, "refusals counted");
    assert!(errors >= 1 && errors <= refused + 1, "{errors} accept errors for {refused} refusals");
    // At most a line a second: no more than the whole seconds the errors
    // could span, plus the first (load only lengthens the window).
    let most = window.as_secs() as usize + 1;
    assert!(!lines.is_empty() && lines.len() <= most, "at most a line a second in {window:?}: {lines:?}");
    // The held connections are still served.
    for s in &mut held {
        assert_eq!(ping(s), "+PONG\r\n");
    }
}

/// The same on the TLS port: the refusal is the close alone, as beyond
/// `--maxclients` (a client in its handshake would read `-ERR ...` as a
/// broken TLS record), counted as on the plain port, which still says why.
#[test]
fn out_of_descriptors_the_tls_port_refuses_with_the_close_alone() {
    let tls = TlsCerts::new("fd-accept", "p256");
    let dir = TempDir::new("server", "fd-accept-tls");
    let server = ChildServer::start(&dir, &tls.args());
    let (addr, tls_addr) = (server.addr, server.tls_addr.expect("the TLS port"));
    let config = tls.client.clone();
    assert!(tls_ping(tls_addr, &config), "a TLS client is served");
    let mut held = held_connections(addr);
    lower_nofile_to_open(server.pid());
    take_free_descriptors(addr, &mut held);
    let (errors_before, rejected_before) = accept_stats(&mut held[0]);
    const TRIES: u64 = 5;
    let mut ends = Vec::new();
    for i in 0..TRIES {
        // A client's first flight, its ClientHello, then what comes back
        // until the end (10 s: a hang guard; a connection left open ends
        // the read there).
        let mut tcp = TcpStream::connect(tls_addr).unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        let mut hello = Vec::new();
        rustls::ClientConnection::new(config.clone(), name).unwrap().write_tls(&mut hello).unwrap();
        // (The server may have closed already: what it sent is read below.)
        let _ = tcp.write_all(&hello);
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        let end = loop {
            match tcp.read(&mut buf) {
                Ok(0) => break "end of file".to_string(),
                Ok(k) => got.extend_from_slice(&buf[..k]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => break e.to_string(),
            }
        };
        assert!(
            !end.contains("timed out") && !end.contains("temporarily unavailable"),
            "TLS connection {i}: not closed: {end}"
        );
        // Nothing at all: a refused connection had no handshake, so any
        // byte is one a client in its handshake cannot read.
        assert!(got.is_empty(), "TLS connection {i} refused with {:?} ({end})", String::from_utf8_lossy(&got));
        ends.push(end);
    }
    // Counted as on the plain port: each refusal, at most one accept error
    // each (one more may find none waiting).
    let (errors, rejected) = accept_stats(&mut held[0]);
    let (errors, rejected) = (errors - errors_before, rejected - rejected_before);
    eprintln!(
        "{TRIES} TLS connections refused out of descriptors ({ends:?}): {rejected} counted, {errors} accept errors"
    );
    assert_eq!(rejected, TRIES, "refusals counted");
    assert!((1..=TRIES + 1).contains(&errors), "{errors} accept errors for {TRIES} refusals");
    // The plain port still says why.
    let mut s = TcpStream::connect(addr).unwrap();
    assert_eq!(ping(&mut s), REFUSAL, "the plain port's refusal");
    for s in &mut held {
        assert_eq!(ping(s), "+PONG\r\n");
    }
}

/// The server's reply to a connection it refuses, on the plain port.
const REFUSAL: &str = "-ERR max number of clients reached\r\n";

/// What `s` gets for a PING (10 s at most: a hang guard): a reply, or
/// nothing if it was closed.
fn ping(s: &mut TcpStream) -> String {
    s.write_all(b"PING\r\n").unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut buf = [0u8; 64];
    let k = s.read(&mut buf).unwrap_or(0);
    String::from_utf8_lossy(&buf[..k]).into_owned()
}

/// Four connections to `addr`, each answered.
fn held_connections(addr: SocketAddr) -> Vec<TcpStream> {
    (0..4)
        .map(|_| {
            let mut s = TcpStream::connect(addr).unwrap();
            assert_eq!(ping(&mut s), "+PONG\r\n");
            s
        })
        .collect()
}

/// Lowers the open-file limit of the running server `pid` to what it has
/// open now. It planned with its own limit: under this one, accept(2)
/// finds no descriptor (as when something outside the plan took them),
/// once the ones closed below the highest are taken (see
/// [`take_free_descriptors`]).
fn lower_nofile_to_open(pid: u32) {
    let limit = open_fds(pid);
    let lowered = std::process::Command::new("prlimit")
        .args(["--pid", &pid.to_string(), &format!("--nofile={limit}:{limit}")])
        .status()
        .expect("prlimit runs");
    assert!(lowered.success());
}

/// Connects to `addr` until a connection is refused (it is: once the
/// descriptors free under the limit are taken), keeping those served in
/// `held`.
fn take_free_descriptors(addr: SocketAddr, held: &mut Vec<TcpStream>) {
    for taken in 0.. {
        let mut s = TcpStream::connect(addr).unwrap();
        match ping(&mut s) {
            p if p == "+PONG\r\n" => held.push(s),
            p if p == REFUSAL => return,
            other => panic!("{other:?}: every connection is answered"),
        }
        assert!(taken < 20, "no descriptor ran out");
    }
}

/// The server's (`accept_errors`, `rejected_connections`), by INFO stats on `s`.
fn accept_stats(s: &mut TcpStream) -> (u64, u64) {
    s.write_all(b"INFO stats\r\n").unwrap();
    let mut text = Vec::new();
    let mut buf = [0u8; 4096];
    while !text.ends_with(b"\r\n\r\n") {
        let k = s.read(&mut buf).expect("INFO's reply");
        assert!(k > 0, "INFO's reply ended early");
        text.extend_from_slice(&buf[..k]);
    }
    let text = String::from_utf8_lossy(&text).into_owned();
    (info_field(&text, "accept_errors"), info_field(&text, "rejected_connections"))
}

/// RSS of `pid` once it has stopped growing for 300 ms (at most `limit`).
fn settled_rss(pid: u32, limit: Duration) -> u64 {
    let deadline = Instant::now() + limit;
    let mut last = rss_kib(pid);
    loop {
        std::thread::sleep(Duration::from_millis(300));
        let now = rss_kib(pid);
        if now <= last || Instant::now() > deadline {
            return now;
        }
        last = now;
    }
}

/// A command of `args` arguments (`first`, then 16 KiB each), one byte short.
fn partial(first: &[u8], args: usize) -> Vec<u8> {
    let mut wire = Vec::new();
    let big = vec![b'a'; 16 * 1024];
    let mut all: Vec<&[u8]> = vec![first];
    all.resize(args, &big);
    resp::command(&mut wire, &all);
    wire.truncate(wire.len() - 3);
    wire
}

#[test]
fn partial_commands_before_auth_are_held_in_bounded_memory_given_back_at_the_close() {
    raise_nofile();
    let dir = TempDir::new("server", "preauth-partial");
    let server = ChildServer::start(&dir, &["--requirepass", SECRET, "--auth-timeout", "60"]);
    let addr = server.addr;
    let mut holder = Conn::connect(addr);
    assert_eq!(holder.cmd(&[b"AUTH", SECRET.as_bytes()]), V::Simple("OK".into()));
    let mut meter = Meter::new(addr, Some(SECRET));
    std::thread::sleep(Duration::from_millis(300));
    let base = server.rss_kib();

    // The largest a server holds before AUTH: AUTH with a 16 KiB user name
    // and a 16 KiB password, a byte short, on 2,000 connections.
    let n = 2000;
    let most = partial(b"AUTH", 3);
    let mut socks: Vec<TcpStream> = (0..n)
        .map(|_| {
            let mut s = TcpStream::connect(addr).unwrap();
            s.write_all(&most).unwrap();
            s
        })
        .collect();
    // Once the server has read them all, the password holder's PING is
    // answered while they are held.
    meter.wait_for_input((n * most.len()) as u64);
    let mut both = Vec::new();
    resp::command(&mut both, &[b"PING"]);
    resp::command(&mut both, &[b"INFO", b"clients"]);
    holder.send_raw(&both);
    assert_eq!(holder.read(), V::Simple("PONG".into()));
    let V::Bulk(clients) = holder.read() else { panic!("INFO clients") };
    let clients = String::from_utf8_lossy(&clients).into_owned();
    assert_eq!(info_field(&clients, "unauthenticated_clients"), n as u64, "all still open, waiting");
    let held = settled_rss(server.pid(), Duration::from_secs(10));
    let grew = held.saturating_sub(base);
    eprintln!("{n} partial AUTH commands of 32 KiB: RSS {base} -> {held} KiB (+{} KiB each)", grew / n as u64);
    // 33 KiB of command each, in a mapping of its own (before: 330 KiB).
    assert!(grew < 100 * 1024, "RSS grew by {grew} KiB");

    // The shape, 10 arguments of 16 KiB: too big before AUTH.
    let mut s = TcpStream::connect(addr).unwrap();
    let _ = s.write_all(&partial(b"AUTH", 10));
    let mut got = String::new();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = s.read_to_string(&mut got);
    assert_eq!(got, "-ERR Protocol error: unauthenticated request too big\r\n");

    // They close: the memory goes back.
    socks.clear();
    wait_until(Duration::from_secs(10), "the connections to close", || {
        info_field(&info(addr, Some(SECRET), "clients"), "unauthenticated_clients") == 0
    });
    std::thread::sleep(Duration::from_secs(2));
    let after = server.rss_kib();
    eprintln!("RSS {after} KiB 2 s after they closed (+{} KiB)", after - base);
    assert!(after < base + 32 * 1024, "RSS {base} -> {after} KiB after the close");
    assert_eq!(holder.cmd(&[b"PING"]), V::Simple("PONG".into()));
    drop(s);
}

#[test]
fn unauthenticated_connections_cannot_keep_the_password_holder_out_and_time_out() {
    let dir = TempDir::new("server", "preauth-idle");
    let server = start(&dir, &["--requirepass", SECRET, "--maxclients", "100", "--max-unauthenticated", "10"]);
    let addr = server.tcp_addr().unwrap();
    // 40 idle connections: the 10 newest stay, the others are told why and
    // closed. (The close follows the reply at once: the 30 s of each wait
    // for it are a guard against a connection left open, not a bound on
    // how soon.)
    let closed = Duration::from_secs(30);
    let mut idle: Vec<Conn> = (0..40).map(|_| Conn::connect(addr)).collect();
    let mut evicted = 0;
    for c in &mut idle[..30] {
        assert_eq!(
            c.try_read(),
            Some(V::Err("ERR too many unauthenticated connections: closing the oldest (this one) to make room".into()))
        );
        assert!(c.closed_within(closed));
        evicted += 1;
    }
    // The password holder comes in all the same (pushing out the oldest idle one).
    let mut holder = Conn::connect(addr);
    assert_eq!(holder.cmd(&[b"AUTH", SECRET.as_bytes()]), V::Simple("OK".into()));
    assert_eq!(holder.cmd(&[b"PING"]), V::Simple("PONG".into()));
    assert!(idle[30].closed_within(closed), "the oldest went");
    let V::Bulk(clients) = holder.cmd(&[b"INFO", b"clients"]) else { panic!("INFO") };
    assert_eq!(info_field(&String::from_utf8_lossy(&clients), "unauthenticated_clients"), 9);
    let V::Bulk(stats) = holder.cmd(&[b"INFO", b"stats"]) else { panic!("INFO") };
    assert_eq!(info_field(&String::from_utf8_lossy(&stats), "unauthenticated_evicted"), evicted + 1);
    for c in &mut idle[31..] {
        assert_eq!(c.try_read_within(Duration::ZERO), None, "the newest wait on");
    }
    server.stop();

    // --auth-timeout: closed at its end, told why; the authenticated one stays.
    // The reply comes no sooner than the timeout after the connect (a
    // lower bound: the server's clock starts at its accept, after it); how
    // late is the machine's (the read's 20 s are a guard against a hang).
    let server = start(&dir, &["--requirepass", SECRET, "--auth-timeout", "1"]);
    let addr = server.tcp_addr().unwrap();
    let t = Instant::now();
    let mut slow = Conn::connect(addr);
    let mut quick = Conn::connect(addr);
    assert_eq!(quick.cmd(&[b"AUTH", SECRET.as_bytes()]), V::Simple("OK".into()));
    assert_eq!(slow.try_read(), Some(V::Err("ERR authentication timeout: closing the connection".into())));
    assert!(t.elapsed() >= Duration::from_secs(1), "closed {:?} after the connect, before its timeout", t.elapsed());
    assert!(slow.closed_within(closed), "closed after the reply");
    std::thread::sleep(Duration::from_millis(1200));
    assert_eq!(quick.cmd(&[b"PING"]), V::Simple("PONG".into()));
    assert_eq!(info_field(&info(addr, Some(SECRET), "stats"), "auth_timeouts"), 1);
    server.stop();
}

#[test]
fn client_names_and_library_infos_are_bounded() {
    let dir = TempDir::new("server", "names-bounded");
    // glibc's malloc with a fixed mmap threshold (1 MiB): a command's big
    // buffer, freed, goes back to the kernel. By default the threshold
    // rises to the size of a freed mapping, and the next 16 MB buffers come
    // from a worker's arena, which may keep them after they are freed: the
    // RSS below then depended on which worker each connection went to and
    // how its buffer grew (+35 MiB in most runs, +52 MiB in 1 of 6).
    let how = Spawn { env: &[("GLIBC_TUNABLES", "glibc.malloc.mmap_threshold=1048576")], ..Spawn::default() };
    let server = ChildServer::spawn(&dir, &[], &how);
    let addr = server.addr;
    let mut c = Conn::connect(addr);
    let ok = "n".repeat(512);
    let long = vec![b'n'; 513];
    assert_eq!(c.cmd(&[b"CLIENT", b"SETNAME", ok.as_bytes()]), V::Simple("OK".into()));
    assert_eq!(c.cmd(&[b"CLIENT", b"GETNAME"]), V::bulk(ok.as_bytes()));
    let e = "ERR a client name is 513 bytes, at most 512 are allowed";
    assert_eq!(c.cmd(&[b"CLIENT", b"SETNAME", &long]), V::Err(e.into()));
    assert_eq!(c.cmd(&[b"HELLO", b"3", b"SETNAME", &long]), V::Err(e.into()));
    assert_eq!(c.cmd(&[b"CLIENT", b"GETNAME"]), V::bulk(ok.as_bytes()), "unchanged");
    assert_eq!(c.cmd(&[b"CLIENT", b"SETINFO", b"LIB-NAME", ok.as_bytes()]), V::Simple("OK".into()));
    assert_eq!(
        c.cmd(&[b"CLIENT", b"SETINFO", b"LIB-VER", &long]),
        V::Err("ERR lib-ver is 513 bytes, at most 512 are allowed".into())
    );

    // 10 connections naming themselves with 16 MB each keep nothing of it.
    let base = server.rss_kib();
    let huge = vec![b'n'; 16 << 20];
    let mut conns: Vec<Conn> = (0..10).map(|_| Conn::connect(addr)).collect();
    for c in &mut conns {
        assert!(c.cmd(&[b"CLIENT", b"SETNAME", &huge]).err_text().contains("at most 512"));
        assert!(c.cmd(&[b"CLIENT", b"SETINFO", b"LIB-NAME", &huge]).err_text().contains("at most 512"));
    }
    let held = server.rss_kib();
    eprintln!("10 connections named with 16 MB values: RSS {base} -> {held} KiB while connected");
    assert!(held < base + 48 * 1024, "RSS {base} -> {held} KiB");
}

/// A TLS client configuration trusting the test CA of `certs`.
fn tls_client(ca: &Path) -> Arc<rustls::ClientConfig> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    // Every handshake a full one (an attacker's choice: the server signs each).
    config.resumption = rustls::client::Resumption::disabled();
    Arc::new(config)
}

/// One TLS connection: handshake, PING, PONG. False if refused or failed.
fn tls_ping(addr: SocketAddr, config: &Arc<rustls::ClientConfig>) -> bool {
    let Ok(tcp) = TcpStream::connect(addr) else { return false };
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let conn = rustls::ClientConnection::new(config.clone(), name).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    if tls.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut buf = [0u8; 16];
    matches!(tls.read(&mut buf), Ok(7) if &buf[..7] == b"+PONG\r\n")
}

/// scripts/tls-certs.sh's certificates, made fresh, and a client trusting
/// their CA.
struct TlsCerts {
    _dir: TempDir,
    /// The server's certificate and key files.
    files: [String; 2],
    client: Arc<rustls::ClientConfig>,
}

impl TlsCerts {
    /// The server's key `server_key`: `p256` or `rsa4096`.
    fn new(tag: &str, server_key: &str) -> TlsCerts {
        let dir = TempDir::new("tls-certs", tag);
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/tls-certs.sh");
        let out = std::process::Command::new("bash")
            .arg(&script)
            .arg(dir.path())
            .env("TLS_SERVER_KEY", server_key)
            .output()
            .expect("bash runs");
        assert!(out.status.success(), "tls-certs.sh: {}", String::from_utf8_lossy(&out.stderr));
        let client = tls_client(&dir.path().join("ca.crt"));
        let files = ["server.crt", "server.key"].map(|f| dir.path().join(f).display().to_string());
        TlsCerts { _dir: dir, files, client }
    }

    /// The server options of a TLS port with them.
    fn args(&self) -> Vec<&str> {
        vec!["--tls-port", "0", "--tls-cert-file", &self.files[0], "--tls-key-file", &self.files[1]]
    }
}

/// `flooders` threads making TLS handshakes for `seconds`: (done, failed).
fn flood(addr: SocketAddr, config: &Arc<rustls::ClientConfig>, flooders: usize, seconds: f64) -> (usize, usize) {
    let until = Instant::now() + Duration::from_secs_f64(seconds);
    let threads: Vec<_> = (0..flooders)
        .map(|_| {
            let config = config.clone();
            std::thread::spawn(move || {
                let (mut done, mut failed) = (0, 0);
                while Instant::now() < until {
                    if tls_ping(addr, &config) {
                        done += 1
                    } else {
                        failed += 1;
                        // Refused at once: not tens of thousands of ports
                        // in TIME_WAIT for the machine's other tests.
                        std::thread::sleep(Duration::from_millis(2));
                    }
                }
                (done, failed)
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
}

#[test]
fn a_flood_of_rsa_4096_handshakes_leaves_the_plain_port_fast() {
    let certs = TlsCerts::new("rsa4096", "rsa4096");
    let (tls, config) = (certs.args(), certs.client.clone());
    let dir = TempDir::new("server", "tls-flood");
    let server = ChildServer::start(&dir, &tls);
    let tls_addr = server.tls_addr.expect("the TLS port");
    assert!(tls_ping(tls_addr, &config), "a TLS client is served");

    let pinger = Pinger::start(server.addr, None);
    let cpu = cpu_seconds(server.pid());
    let (workers, handshakers) = (threads_cpu(server.pid(), "tvmq-worker"), threads_cpu(server.pid(), "tvmq-tls"));
    let (done, failed) = flood(tls_addr, &config, 4, 3.0);
    let cpu = cpu_seconds(server.pid()) - cpu;
    let workers = threads_cpu(server.pid(), "tvmq-worker") - workers;
    let handshakers = threads_cpu(server.pid(), "tvmq-tls") - handshakers;
    let (pings, p99) = pinger.finish();
    eprintln!(
        "RSA-4096 handshakes for 3 s: {done} served, {failed} failed, server CPU {cpu:.2} s ({workers:.2} s on the \
         workers, {handshakers:.2} s on the handshakes' threads); plain PING: {pings}, p99 {p99:?}"
    );
    assert!(done >= 20, "the handshakes were made: {done}");
    assert_eq!(failed, 0);
    // Before: made on the workers, the PINGs waited behind them (p99 85-112
    // ms measured, 70-100 a second). The PINGs' times are not asserted: on a
    // busy machine (make test's other tests) the processor is what they
    // wait for (p99 44 ms seen with the handshakes off the workers); the
    // CPU time of the handshakes is, on the threads of their own, and
    // almost none of it on the workers (CPU time counts only while a thread
    // runs, whoever else runs).
    // An RSA-4096 handshake costs about 4.5 ms of CPU (here): each took at
    // least 1 ms of the handshakes' threads, and the workers took a fifth
    // of that at most (plus 50 ms: the PINGs' own, ticks of 10 ms).
    assert!(handshakers >= done as f64 * 0.001, "the handshakes took {handshakers:.2} s of their threads' CPU");
    assert!(
        workers < handshakers / 5.0 + 0.05,
        "the workers took {workers:.2} s of CPU, the handshakes' threads {handshakers:.2} s"
    );
    drop(server);

    // The budget: at most 2 handshakes begun a second, the others closed
    // unshaken. (At 20 a second, a loaded machine's four flooders made
    // fewer than 20 a second: none refused, 3 runs of 3 under `yes` x2.)
    let budget = 2;
    let server = ChildServer::start(&dir, &[&tls[..], &["--tls-handshakes-per-second", &budget.to_string()]].concat());
    let tls_addr = server.tls_addr.expect("the TLS port");
    let (done, failed) = flood(tls_addr, &config, 4, 2.0);
    let refused = info_field(&info(server.addr, None, "stats"), "tls_handshakes_refused");
    eprintln!("with a budget of {budget} a second, 2 s: {done} served, {failed} refused ({refused} counted)");
    assert!((budget..=budget + 2 * budget + 5).contains(&done), "{done}");
    assert!(refused >= 1 && failed as u64 >= refused / 2, "{failed} {refused}");
}

/// User + system CPU seconds of the threads of process `pid` whose names
/// begin with `prefix`.
fn threads_cpu(pid: u32, prefix: &str) -> f64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return 0.0 };
    tasks
        .flatten()
        .filter(|t| std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.starts_with(prefix)))
        .map(|t| stat_cpu(&std::fs::read_to_string(t.path().join("stat")).unwrap_or_default()))
        .sum()
}

/// User + system CPU seconds in a `/proc/.../stat` line.
fn stat_cpu(stat: &str) -> f64 {
    let fields: Vec<&str> = stat.rsplit(')').next().unwrap_or("").split_whitespace().collect();
    let ticks: f64 = fields.get(11).and_then(|v| v.parse().ok()).unwrap_or(0.0)
        + fields.get(12).and_then(|v| v.parse().ok()).unwrap_or(0.0);
    ticks / 100.0
}

/// User + system CPU seconds of process `pid`.
fn cpu_seconds(pid: u32) -> f64 {
    stat_cpu(&std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default())
}
