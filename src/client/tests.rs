//! Unit tests of the client against fake servers (threads on loopback):
//! the combining pipeline of shared connections, MOVED and ASK, the window
//! of asynchronous pushes. The C tests (c-tests/test_net.c) test the calls
//! against real servers.

use super::*;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::Mutex as StdMutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The commands complete at the start of `buf`: (name upper-cased, args);
/// returns them and how many bytes they took.
fn commands(buf: &[u8]) -> (Vec<Vec<Vec<u8>>>, usize) {
    let mut out = Vec::new();
    let mut pos = 0;
    let limits = resp::Limits::default();
    let mut req = resp::Request::new();
    while let Ok(resp::Status::Complete { consumed }) = resp::parse_request(&buf[pos..], &limits, &mut req) {
        let args: Vec<Vec<u8>> = (0..req.len()).map(|i| req.arg(&buf[pos..], i).to_vec()).collect();
        out.push(args);
        pos += consumed;
    }
    (out, pos)
}

/// A fake server: for each connection, calls `answer(conn_no, args)` for
/// every command and writes what it returns (nothing: no reply). Returns
/// its port. `reads` counts the reads that brought at least one command,
/// `seen` the commands.
fn fake(
    answer: impl Fn(usize, &[Vec<u8>]) -> Option<Vec<u8>> + Send + Sync + 'static,
    reads: Arc<AtomicUsize>,
    seen: Arc<AtomicUsize>,
) -> u16 {
    serve(TcpListener::bind("127.0.0.1:0").unwrap(), answer, reads, seen)
}

/// As [`fake`], on a listener bound beforehand.
fn serve(
    listener: TcpListener,
    answer: impl Fn(usize, &[Vec<u8>]) -> Option<Vec<u8>> + Send + Sync + 'static,
    reads: Arc<AtomicUsize>,
    seen: Arc<AtomicUsize>,
) -> u16 {
    let port = listener.local_addr().unwrap().port();
    let answer = Arc::new(answer);
    std::thread::spawn(move || {
        for (n, conn) in listener.incoming().enumerate() {
            let Ok(mut conn) = conn else { return };
            let (answer, reads, seen) = (answer.clone(), reads.clone(), seen.clone());
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 65536];
                loop {
                    let Ok(k) = conn.read(&mut chunk) else { return };
                    if k == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..k]);
                    let (cmds, used) = commands(&buf);
                    buf.drain(..used);
                    if !cmds.is_empty() {
                        reads.fetch_add(1, Ordering::SeqCst);
                    }
                    let mut out = Vec::new();
                    for c in &cmds {
                        seen.fetch_add(1, Ordering::SeqCst);
                        if let Some(r) = answer(n, c) {
                            out.extend_from_slice(&r);
                        }
                    }
                    if conn.write_all(&out).is_err() {
                        return;
                    }
                }
            });
        }
    });
    port
}

const TVMQ_PROBE: &[u8] = b"-ERR unknown command 'CLUSTER', with args beginning with: 'SLOTS' \r\n";

fn tcp(port: u16) -> Addr {
    Addr::Tcp { host: "127.0.0.1".into(), port }
}

fn counters() -> (Arc<AtomicUsize>, Arc<AtomicUsize>) {
    (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)))
}

#[test]
fn keys_are_decimal_ids() {
    for (t, k) in [(0, "0"), (7, "7"), (21, "21"), (1000, "1000"), (u32::MAX, "4294967295")] {
        assert_eq!(Key::of(t).as_bytes(), k.as_bytes());
    }
}

/// Threads sharing one connection: every push answered, and the server
/// read several commands at once (the batches of the combining pipeline).
#[test]
fn shared_connection_combines_commands() {
    let (reads, seen) = counters();
    let port = fake(
        |_, c| Some(if c[0] == b"CLUSTER" { TVMQ_PROBE.to_vec() } else { b":1\r\n".to_vec() }),
        reads.clone(),
        seen.clone(),
    );
    let mut first = Client::connect(tcp(port), Some(Duration::from_secs(5))).unwrap();
    const THREADS: usize = 8;
    const EACH: usize = 300;
    let clients: Vec<Client> = (0..THREADS).map(|_| first.share()).collect();
    let before = (reads.load(Ordering::SeqCst), seen.load(Ordering::SeqCst));
    let handles: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(i, mut c)| {
            std::thread::spawn(move || {
                for n in 0..EACH {
                    c.push(i as u32, format!("record {n}").as_bytes()).unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let reads = reads.load(Ordering::SeqCst) - before.0;
    let seen = seen.load(Ordering::SeqCst) - before.1;
    assert_eq!(seen, THREADS * EACH);
    // One read per command would mean no combining at all.
    assert!(reads < seen * 9 / 10, "{reads} reads for {seen} commands: no batches");
}

/// The answers go to the right callers: each thread pops its own values.
#[test]
fn shared_connection_answers_reach_their_callers() {
    let (reads, seen) = counters();
    let port = fake(
        |_, c| {
            Some(match c[0].as_slice() {
                b"CLUSTER" => TVMQ_PROBE.to_vec(),
                // LPOP <key>: the key itself as the value.
                _ => {
                    let mut v = Vec::new();
                    resp::bulk(&mut v, &c[1]);
                    v
                }
            })
        },
        reads,
        seen,
    );
    let mut first = Client::connect(tcp(port), Some(Duration::from_secs(5))).unwrap();
    let handles: Vec<_> = (0..6u32)
        .map(|t| {
            let mut c = first.share();
            std::thread::spawn(move || {
                let mut out = [0u8; 16];
                for _ in 0..500 {
                    c.pop(t, &mut out, PopWait::NoWait).unwrap();
                    let text = t.to_string();
                    assert_eq!(&out[..text.len()], text.as_bytes());
                    assert!(out[text.len()..].iter().all(|&b| b == 0));
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}

/// A cluster of two fake nodes: node A says it owns every slot; a push is
/// answered MOVED (to B) once, then goes straight to B; an ASK sends ASKING
/// and the command to B once, and the next command goes to A again.
#[test]
fn moved_and_ask_are_followed() {
    let log: Arc<StdMutex<Vec<String>>> = Arc::default();
    let (r, s) = counters();
    let lb = log.clone();
    let b = fake(
        move |_, c| {
            let name = String::from_utf8_lossy(&c[0]).into_owned();
            lb.lock().unwrap().push(format!("B {name}"));
            Some(if name == "ASKING" { b"+OK\r\n".to_vec() } else { b":1\r\n".to_vec() })
        },
        r.clone(),
        s.clone(),
    );
    let la = log.clone();
    let moved_once = Arc::new(AtomicUsize::new(0));
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let a = listener.local_addr().unwrap().port();
    serve(
        listener,
        move |_, c| {
            let name = String::from_utf8_lossy(&c[0]).into_owned();
            la.lock().unwrap().push(format!("A {name} {}", String::from_utf8_lossy(c.get(1).map_or(&[][..], |v| v))));
            let mut out = Vec::new();
            match name.as_str() {
                "CLUSTER" => {
                    // Every slot on this node.
                    resp::array_header(&mut out, 1);
                    resp::array_header(&mut out, 3);
                    resp::integer(&mut out, 0);
                    resp::integer(&mut out, 16383);
                    resp::array_header(&mut out, 2);
                    resp::bulk(&mut out, b"127.0.0.1");
                    resp::integer(&mut out, i64::from(a));
                }
                "RPUSH" if c[1] == b"21" && moved_once.fetch_add(1, Ordering::SeqCst) == 0 => {
                    out.extend_from_slice(format!("-MOVED {} 127.0.0.1:{b}\r\n", slot::key_slot(b"21")).as_bytes())
                }
                "RPUSH" if c[1] == b"22" => {
                    out.extend_from_slice(format!("-ASK {} 127.0.0.1:{b}\r\n", slot::key_slot(b"22")).as_bytes())
                }
                _ => out.extend_from_slice(b":1\r\n"),
            }
            Some(out)
        },
        r,
        s,
    );
    let mut c = Client::connect(tcp(a), Some(Duration::from_secs(5))).unwrap();
    assert_eq!(c.flavor, Flavor::Cluster);
    c.push(21, b"x").unwrap(); // A: MOVED -> B
    c.push(21, b"y").unwrap(); // straight to B
    c.push(22, b"z").unwrap(); // A: ASK -> ASKING + RPUSH on B
    c.push(22, b"w").unwrap(); // A again (ASK does not move the slot), ASK again
    let log = log.lock().unwrap().clone();
    let pushes: Vec<&str> = log.iter().map(String::as_str).filter(|l| !l.contains("CLUSTER")).collect();
    let want =
        ["A RPUSH 21", "B RPUSH", "B RPUSH", "A RPUSH 22", "B ASKING", "B RPUSH", "A RPUSH 22", "B ASKING", "B RPUSH"];
    assert_eq!(pushes, want, "{log:?}");
}

/// At most WINDOW asynchronous pushes go unanswered: against a server that
/// never answers, the push after the window waits for answers, times out,
/// and the failure is reported, with no record counted in.
#[test]
fn async_window_is_bounded() {
    let (reads, seen) = counters();
    let port = fake(|_, c| if c[0] == b"CLUSTER" { Some(TVMQ_PROBE.to_vec()) } else { None }, reads, seen.clone());
    let mut c = Client::connect(tcp(port), Some(Duration::from_secs(1))).unwrap();
    let t0 = Instant::now();
    for _ in 0..WINDOW - 1 {
        c.push_async(21, b"r").unwrap();
    }
    assert!(t0.elapsed() < Duration::from_millis(900), "the window filled too early");
    c.push_async(21, b"r").unwrap(); // the window is full: waits for answers
    assert!(t0.elapsed() >= Duration::from_millis(900));
    let (n, first) = c.wait_async();
    assert_eq!(n, 0);
    assert_eq!(first.map(|e| e.code()), Some(SOCK_READ_TMO));
    assert_eq!(seen.load(Ordering::SeqCst), 1 + WINDOW); // the probe and every push
}
