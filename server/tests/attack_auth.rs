//! An attacker who can reach the port, and a careless operator: what a
//! client may send before AUTH, wrong passwords, where the password comes
//! from, protected mode, the unix socket's mode and removal, names that
//! carry terminal escapes, oversized keys, what INFO tells, an unusable
//! queue directory. Each attack is bounded in time and count; the server
//! keeps serving a well-behaved client throughout.

mod common;

use common::*;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tvmq_server::Server;

const SECRET: &str = "correct horse battery staple";
/// The server's RSS may grow by at most this much under the pre-AUTH flood
/// (40 connections each announcing 64 MiB and sending 8 MiB of it: 320 MiB
/// would be buffered without the bound).
const FLOOD_RSS_BOUND_KIB: u64 = 32 * 1024;
/// The longest round trip of an authenticated client's PING during an
/// attack: a guard against a server that stops serving it, not a bound on
/// speed (a loaded machine decides that; what the server must not do, hold
/// its worker, is asserted by order where an attack could).
const PING_BOUND: Duration = Duration::from_secs(20);

/// An authenticated client PINGing every 5 ms until told to stop; its
/// worst round trip.
struct Pinger {
    stop: Arc<AtomicBool>,
    worst: Arc<Mutex<Duration>>,
    rounds: Arc<AtomicU64>,
    thread: std::thread::JoinHandle<()>,
}

impl Pinger {
    fn start(addr: SocketAddr, password: &str) -> Pinger {
        let stop = Arc::new(AtomicBool::new(false));
        let worst = Arc::new(Mutex::new(Duration::ZERO));
        let rounds = Arc::new(AtomicU64::new(0));
        let (s, w, r) = (stop.clone(), worst.clone(), rounds.clone());
        let mut c = Conn::connect(addr);
        assert_eq!(c.cmd(&[b"AUTH", password.as_bytes()]), V::Simple("OK".into()));
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                let t = Instant::now();
                assert_eq!(c.cmd(&[b"PING"]), V::Simple("PONG".into()));
                let took = t.elapsed();
                let mut worst = w.lock().unwrap();
                *worst = (*worst).max(took);
                drop(worst);
                r.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        Pinger { stop, worst, rounds, thread }
    }

    /// (rounds, worst round trip).
    fn finish(self) -> (u64, Duration) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().expect("the pinger was answered throughout");
        (self.rounds.load(Ordering::Relaxed), *self.worst.lock().unwrap())
    }
}

/// Sends `head`, then up to `body` bytes of filler while the server reads;
/// returns what came back and whether the server closed within `limit`.
fn send_then_read(addr: SocketAddr, head: &[u8], body: usize, limit: Duration) -> (Vec<u8>, bool) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_write_timeout(Some(Duration::from_millis(500))).unwrap();
    let _ = s.write_all(head);
    let chunk = vec![b'x'; 1 << 20];
    let mut sent = 0;
    while sent < body {
        match s.write(&chunk[..chunk.len().min(body - sent)]) {
            Ok(n) => sent += n,
            Err(_) => break,
        }
    }
    read_until_closed(&mut s, limit)
}

/// Reads until EOF (true) or `limit` (false).
fn read_until_closed(s: &mut TcpStream, limit: Duration) -> (Vec<u8>, bool) {
    s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    let deadline = Instant::now() + limit;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while Instant::now() < deadline {
        match s.read(&mut buf) {
            Ok(0) => return (got, true),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return (got, true),
            Err(_) => {}
        }
    }
    (got, false)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn info(addr: SocketAddr, section: &str) -> String {
    let mut c = Conn::connect(addr);
    assert_eq!(c.cmd(&[b"AUTH", SECRET.as_bytes()]), V::Simple("OK".into()));
    match c.cmd(&[b"INFO", section.as_bytes()]) {
        V::Bulk(b) => text(&b),
        other => panic!("INFO: {other:?}"),
    }
}

#[test]
fn unauthenticated_floods_are_refused_at_the_length_header_in_bounded_memory() {
    let dir = TempDir::new("server", "preauth");
    let server = ChildServer::start(&dir, &["--requirepass", SECRET]);
    let addr = server.addr;
    let pinger = Pinger::start(addr, SECRET);
    std::thread::sleep(Duration::from_millis(200));
    let base = server.rss_kib();
    let peak = Arc::new(AtomicU64::new(base));
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = {
        let (peak, sampling, pid) = (peak.clone(), sampling.clone(), server.pid());
        std::thread::spawn(move || {
            while sampling.load(Ordering::Relaxed) {
                peak.fetch_max(rss_kib(pid), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(10));
            }
        })
    };

    // 40 connections at once, each announcing a 64 MiB password and sending 8 MiB of it.
    let started = Instant::now();
    let floods: Vec<_> = (0..40)
        .map(|_| {
            std::thread::spawn(move || {
                send_then_read(addr, b"*2\r\n$4\r\nAUTH\r\n$67108864\r\n", 8 << 20, Duration::from_secs(10))
            })
        })
        .collect();
    for f in floods {
        let (got, closed) = f.join().unwrap();
        assert_eq!(text(&got), "-ERR Protocol error: unauthenticated bulk length\r\n");
        assert!(closed, "closed after the 64 MiB announcement");
    }
    let flood_took = started.elapsed();

    // 10,000 arguments announced: refused at the count.
    let (got, closed) = send_then_read(addr, b"*10000\r\n$4\r\nAUTH\r\n", 0, Duration::from_secs(5));
    assert_eq!(text(&got), "-ERR Protocol error: unauthenticated multibulk length\r\n");
    assert!(closed);
    // The same in an inline command.
    let (got, closed) = send_then_read(addr, b"AUTH a b c d e f g h i j k\r\n", 0, Duration::from_secs(5));
    assert_eq!(text(&got), "-ERR Protocol error: unauthenticated multibulk length\r\n");
    assert!(closed);
    // A long inline line, without its end.
    let (got, closed) = send_then_read(addr, &[b'A'; 20_000], 0, Duration::from_secs(5));
    assert!(text(&got).starts_with("-ERR Protocol error: "), "{}", text(&got));
    assert!(closed);

    sampling.store(false, Ordering::Relaxed);
    sampler.join().unwrap();
    let (rounds, worst) = pinger.finish();
    let grew = peak.load(Ordering::Relaxed).saturating_sub(base);
    eprintln!(
        "pre-AUTH flood (40 x 64 MiB announced, 8 MiB sent each): {flood_took:?}; RSS {base} KiB, peak +{grew} KiB; \
         PING {rounds} rounds, worst {worst:?}"
    );
    assert!(grew < FLOOD_RSS_BOUND_KIB, "RSS grew by {grew} KiB");
    assert!(worst < PING_BOUND, "a PING took {worst:?}");

    // The limits lift once authenticated, and the server still serves.
    let mut c = Conn::connect(addr);
    assert_eq!(c.cmd(&[b"AUTH", SECRET.as_bytes()]), V::Simple("OK".into()));
    let big = vec![b'e'; 100_000];
    assert_eq!(c.cmd(&[b"ECHO", &big]), V::Bulk(big));
    assert_eq!(info_field(&info(addr, "stats"), "unauthenticated_closed"), 43);
}

#[test]
fn wrong_passwords_are_delayed_counted_logged_and_end_the_connection() {
    let dir = TempDir::new("server", "wrongpass");
    // One worker: the password holder's PING below shares it with the guesser.
    let how = Spawn { capture_stderr: true, ..Spawn::default() };
    let server = ChildServer::spawn(&dir, &["--requirepass", SECRET, "--threads", "1"], &how);
    let addr = server.addr;
    let mut holder = Conn::connect(addr);
    assert_eq!(holder.cmd(&[b"AUTH", SECRET.as_bytes()]), V::Simple("OK".into()));
    let mut meter = Meter::new(addr, Some(SECRET));

    // One connection pipelines 20 wrong passwords: each is answered 100 ms
    // after the previous one, and the tenth ends the connection.
    let mut s = TcpStream::connect(addr).unwrap();
    let mut wire = Vec::new();
    for i in 0..20 {
        resp::command(&mut wire, &[b"AUTH", format!("guess{i}").as_bytes()]);
    }
    let t = Instant::now();
    s.write_all(&wire).unwrap();
    // The delays hold the guesser, not the worker: once the server has
    // read the guesses, the holder's PING is answered before the tenth.
    meter.wait_for_input(wire.len() as u64);
    let failures = info_field(&pong_and_stats(&mut holder), "auth_failures");
    eprintln!("{failures} of 10 wrong passwords counted when the password holder's PING was answered");
    assert!(failures < 10, "the holder's PING was answered only after the 10 delayed wrong passwords");
    let pinger = Pinger::start(addr, SECRET);
    let (got, closed) = read_until_closed(&mut s, Duration::from_secs(10));
    let took = t.elapsed();
    let got = text(&got);
    assert!(closed);
    assert_eq!(got.matches("-WRONGPASS").count(), 10, "{got}");
    assert!(got.ends_with("-ERR too many wrong passwords: closing the connection\r\n"), "{got}");
    assert!(took >= Duration::from_millis(900), "10 wrong passwords answered in {took:?}");

    // 40 connections at once, 10 wrong passwords each (HELLO's AUTH too).
    let t = Instant::now();
    let guessers: Vec<_> = (0..40)
        .map(|g| {
            std::thread::spawn(move || {
                let mut c = Conn::connect(addr);
                for i in 0..10 {
                    let guess = format!("g{g}-{i}");
                    let reply = if i % 2 == 0 {
                        c.cmd(&[b"AUTH", guess.as_bytes()])
                    } else {
                        c.cmd(&[b"HELLO", b"3", b"AUTH", b"default", guess.as_bytes()])
                    };
                    assert!(reply.err_text().starts_with("WRONGPASS"));
                }
                c.try_read();
                assert!(c.closed_within(Duration::from_secs(5)));
            })
        })
        .collect();
    for g in guessers {
        g.join().unwrap();
    }
    let storm = t.elapsed();
    let (rounds, worst) = pinger.finish();
    eprintln!("400 wrong passwords on 40 connections: {storm:?}; PING {rounds} rounds, worst {worst:?}");
    // The storm lasts a second at least (10 delays of 100 ms in a row).
    assert!(rounds > 0, "the password holder's PINGs were answered during the storm");
    assert!(worst < PING_BOUND, "a PING took {worst:?}");

    assert_eq!(info_field(&info(addr, "stats"), "auth_failures"), 410);
    // Logged, at most one line a second.
    let lines: Vec<String> =
        server.stderr.lock().unwrap().iter().filter(|l| l.contains("wrong password")).cloned().collect();
    let seconds = (took + storm).as_secs() + 2;
    assert!(
        !lines.is_empty() && lines.len() as u64 <= seconds,
        "{} lines in ~{seconds} s: {:?}",
        lines.len(),
        &lines[..lines.len().min(3)]
    );
    assert!(lines[0].contains("127.0.0.1"), "{lines:?}");
}

#[test]
fn an_empty_password_is_refused_and_the_password_comes_from_a_file_or_the_environment() {
    let dir = TempDir::new("server", "passwords");
    let e = Server::start(dir.path(), &args(&["--requirepass", ""])).err().expect("an empty --requirepass is refused");
    assert!(e.to_string().contains("empty"), "{e}");

    let file = dir.path().join("password");
    std::fs::write(&file, "\n").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let f = file.to_str().unwrap();
    assert!(Server::start(dir.path(), &args(&["--requirepass-file", f])).is_err(), "an empty first line is refused");
    assert!(Server::start(dir.path(), &args(&["--requirepass-file", "/nonexistent/pw"])).is_err());

    std::fs::write(&file, "from a file\r\nsecond line\n").unwrap();
    let server = Server::start(dir.path(), &args(&["--requirepass-file", f])).expect("starts");
    let mut c = Conn::connect(server.tcp_addr().unwrap());
    assert!(c.cmd(&[b"PING"]).err_text().starts_with("NOAUTH"));
    assert!(c.cmd(&[b"AUTH", b"from a file\r"]).err_text().starts_with("WRONGPASS"));
    assert_eq!(c.cmd(&[b"AUTH", b"from a file"]), V::Simple("OK".into()));
    server.stop();

    // $TVMQ_REQUIREPASS, in a child process (the variable is the process's).
    let server = ChildServer::spawn(&dir, &[], &Spawn { env: &[("TVMQ_REQUIREPASS", "from env")], ..Spawn::default() });
    let mut c = Conn::connect(server.addr);
    assert!(c.cmd(&[b"PING"]).err_text().starts_with("NOAUTH"));
    assert_eq!(c.cmd(&[b"AUTH", b"from env"]), V::Simple("OK".into()));
    drop(server);
    let out = server_child_command(dir.path(), &[], &Spawn { env: &[("TVMQ_REQUIREPASS", "")], ..Spawn::default() })
        .output()
        .unwrap();
    assert!(!out.status.success() && text(&out.stdout).find("listening").is_none());
    assert!(text(&out.stderr).contains("$TVMQ_REQUIREPASS: the password is empty"), "{}", text(&out.stderr));
}

#[test]
fn protected_mode_refuses_every_interface_without_a_password() {
    let dir = TempDir::new("server", "protected");
    let e = Server::start(dir.path(), &args(&["--bind", "0.0.0.0"])).err().expect("refused");
    let msg = e.to_string();
    assert!(
        msg.contains("protected mode") && msg.contains("--protected-mode no") && msg.contains("--requirepass"),
        "{msg}"
    );
    assert!(Server::start(dir.path(), &args(&["--bind", "::"])).is_err());
    for ok in
        [&["--bind", "0.0.0.0", "--protected-mode", "no"][..], &["--bind", "0.0.0.0", "--requirepass", "password"]]
    {
        let server = Server::start(dir.path(), &args(ok)).unwrap_or_else(|e| panic!("{ok:?}: {e}"));
        let port = server.tcp_addr().unwrap().port();
        let mut c = Conn::connect(SocketAddr::from(([127, 0, 0, 1], port)));
        assert!(matches!(c.cmd(&[b"PING"]), V::Simple(_) | V::Err(_)));
        server.stop();
    }
}

#[test]
fn the_unix_socket_has_its_mode_whatever_the_umask_and_only_its_own_file_is_removed() {
    use std::os::unix::fs::MetadataExt;
    let dir = TempDir::new("server", "unixperm");
    let umask0 = Spawn { umask: Some(0), ..Spawn::default() };
    for (extra, want) in [(None, 0o700), (Some("770"), 0o770)] {
        let path = dir.path().join(format!("s{want:o}.sock"));
        let mut opts = vec!["--unixsocket", path.to_str().unwrap()];
        if let Some(m) = extra {
            opts.extend(["--unixsocketperm", m]);
        }
        let mut server = ChildServer::spawn(&dir, &opts, &umask0);
        let mode = std::fs::symlink_metadata(&path).unwrap().mode() & 0o777;
        assert_eq!(mode, want, "mode {mode:o} under umask 000");
        assert_eq!(server.signal_and_wait(15, Duration::from_secs(10)), Some(0));
        assert!(!path.exists(), "its own socket is removed at the stop");
    }

    // Server A's file is deleted and server B binds the path: A's stop
    // leaves B's socket alone.
    let path = dir.path().join("shared.sock");
    let p = path.to_str().unwrap();
    let a = Server::start(dir.path(), &args(&["--unixsocket", p])).unwrap();
    std::fs::remove_file(&path).unwrap();
    let b = Server::start(dir.path(), &args(&["--unixsocket", p])).unwrap();
    a.stop();
    assert!(path.exists(), "A's stop removed B's socket");
    let mut s = std::os::unix::net::UnixStream::connect(&path).expect("B still answers there");
    s.write_all(b"PING\r\n").unwrap();
    let mut pong = [0u8; 7];
    s.read_exact(&mut pong).unwrap();
    assert_eq!(&pong, b"+PONG\r\n");
    b.stop();
    assert!(!path.exists());
}

#[test]
fn names_and_keys_are_escaped_and_cut_in_what_the_server_prints() {
    let dir = TempDir::new("server", "names");
    create(&dir, 5, "evil\x1b[2J\x1b]0;owned\x07\r\nname", 10, 16);
    let server = Server::start(dir.path(), &args(&["--auto-create", "10x16"])).unwrap();
    let mut c = Conn::connect(server.tcp_addr().unwrap());
    let V::Bulk(info) = c.cmd(&[b"INFO", b"queues"]) else { panic!("INFO") };
    let info = text(&info);
    assert!(!info.bytes().any(|b| b == 0x1b || b == 0x07), "raw control bytes in INFO: {info:?}");
    assert!(info.contains("queue_5:name=evil\\x1b[2J\\x1b]0;owned\\x07\\x0d\\x0aname,"), "{info:?}");

    // A 10 KB key: a clear error, the key cut.
    let long = vec![b'k'; 10_000];
    let want = format!("ERR invalid key '{}...' (10000 bytes): a key is 1 to 63 bytes", "k".repeat(64));
    for cmd in [&b"LLEN"[..], b"LPOP", b"RPUSH"] {
        let mut args: Vec<&[u8]> = vec![cmd, &long];
        if cmd == b"RPUSH" {
            args.push(b"v");
        }
        assert_eq!(c.cmd(&args), V::Err(want.clone()), "{}", text(cmd));
    }
    let blpop = c.cmd(&[b"BLPOP", b"ok", &long, b"0.1"]);
    assert_eq!(blpop, V::Err(want));
    // NUL, empty, not UTF-8: the same error, never "queue too big".
    for (key, why) in [
        (&b"a\0b"[..], "'a\\x00b' (3 bytes): a key holds no NUL byte"),
        (b"", "'' (0 bytes): a key is 1 to 63 bytes, this one is empty"),
        (b"\xff\xfe", "'\\xff\\xfe' (2 bytes): a key is UTF-8 text"),
    ] {
        assert_eq!(c.cmd(&[b"RPUSH", key, b"v"]), V::Err(format!("ERR invalid key {why}")));
    }
    // An unknown key with escapes, without auto-creation: escaped.
    drop(c);
    server.stop();
    let server = Server::start(dir.path(), &args(&[])).unwrap();
    let mut c = Conn::connect(server.tcp_addr().unwrap());
    assert_eq!(c.cmd(&[b"LLEN", b"x\x1b[31m"]), V::Err("ERR no such queue 'x\\x1b[31m'".into()));
    server.stop();
}

#[test]
fn info_tells_the_directory_and_pid_only_after_auth() {
    let dir = TempDir::new("server", "info");
    let server = Server::start(dir.path(), &args(&["--requirepass", SECRET])).unwrap();
    let mut c = Conn::connect(server.tcp_addr().unwrap());
    for section in [&b"server"[..], b"all", b"queues"] {
        let reply = c.cmd(&[b"INFO", section]);
        let e = reply.err_text();
        assert!(e.starts_with("NOAUTH"), "{e}");
        assert!(!e.contains(dir.path().to_str().unwrap()) && !e.contains("process_id"));
    }
    assert_eq!(c.cmd(&[b"AUTH", SECRET.as_bytes()]), V::Simple("OK".into()));
    let V::Bulk(info) = c.cmd(&[b"INFO", b"server"]) else { panic!("INFO") };
    assert!(text(&info).contains(&format!("queue_dir:{}", dir.path().display())));
    server.stop();
}

#[test]
fn serve_refuses_a_queue_directory_it_cannot_use() {
    let dir = TempDir::new("server", "baddir");
    let file = dir.path().join("not-a-dir");
    std::fs::write(&file, "x").unwrap();
    let missing = dir.path().join("missing");
    for (path, words) in [(&file, "is not a directory"), (&missing, "does not exist")] {
        let e = Server::start(path, &args(&[])).err().expect("refused");
        assert!(e.to_string().contains(words), "{e}");
        // As `tvmq serve` runs it: a message, a non-zero exit, no "listening".
        let out = server_child_command(path, &[], &Spawn::default()).output().unwrap();
        assert!(!out.status.success());
        assert!(!text(&out.stdout).contains("listening"), "{}", text(&out.stdout));
        assert!(text(&out.stderr).contains(words), "{}", text(&out.stderr));
    }
    // Usable: it starts.
    Server::start(dir.path(), &args(&[])).expect("a usable directory").stop();
}
