//! Graceful stop: SIGTERM or SIGINT under load; the server stops accepting,
//! answers what it has read, exits 0; every push answered OK is in the
//! queue afterwards (pushes go straight into shared memory).

mod common;

use common::*;
use std::collections::HashSet;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// Pushes pipelined batches of unique values until the server goes away;
/// returns (values answered OK, values sent).
fn pusher(addr: std::net::SocketAddr, t: u32) -> (Vec<String>, Vec<String>) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let (mut acked, mut sent) = (Vec::new(), Vec::new());
    let mut buf = Vec::new();
    let mut seq = 0u64;
    'outer: loop {
        let mut batch = Vec::new();
        let mut values = Vec::new();
        for _ in 0..16 {
            let v = format!("t{t}-{seq}");
            seq += 1;
            resp::command(&mut batch, &[b"RPUSH", b"7", v.as_bytes()]);
            values.push(v);
        }
        if s.write_all(&batch).is_err() {
            break;
        }
        sent.extend(values.iter().cloned());
        for v in values {
            loop {
                match resp::parse_reply(&buf, &resp::Limits::default()) {
                    Ok(Some((reply, used))) => {
                        if let resp::Reply::Integer(_) = reply {
                            acked.push(v);
                        }
                        buf.drain(..used);
                        break;
                    }
                    Ok(None) => {}
                    Err(_) => break 'outer,
                }
                let mut chunk = [0u8; 4096];
                match s.read(&mut chunk) {
                    Ok(0) | Err(_) => break 'outer,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
        }
    }
    (acked, sent)
}

#[test]
fn sigterm_under_load_loses_no_acknowledged_push() {
    let dir = TempDir::new("server", "stop");
    create(&dir, 7, "", 2_000_000, 32);
    let mut server = ChildServer::start(&dir, &[]);
    let addr = server.addr;
    let pushers: Vec<_> = (0..4).map(|t| std::thread::spawn(move || pusher(addr, t))).collect();
    // Let the load build up, then stop the server in the middle of it.
    let q = tvm::Queue::open(dir.path(), 7).unwrap();
    wait_until(Duration::from_secs(10), "pushes to arrive", || q.depth() > 20_000);
    let t = Instant::now();
    assert_eq!(server.signal_and_wait(15, Duration::from_secs(20)), Some(0), "exit status 0");
    eprintln!("stopped {:?} after SIGTERM", t.elapsed());
    let mut acked = Vec::new();
    let mut sent = HashSet::new();
    for p in pushers {
        let (a, s) = p.join().unwrap();
        acked.extend(a);
        sent.extend(s);
    }
    // Everything in the queue, once each.
    let mut found = HashSet::new();
    let mut out = [0u8; 32];
    while let Ok(n) = q.pop(&mut out, tvm::Wait::NoWait) {
        let v = String::from_utf8(out[..n].to_vec()).unwrap();
        assert!(sent.contains(&v), "{v} was never sent");
        assert!(found.insert(v), "popped twice");
    }
    let missing = acked.iter().filter(|v| !found.contains(*v)).count();
    eprintln!("{} pushes answered OK, {} in the queue, {} sent", acked.len(), found.len(), sent.len());
    assert_eq!(missing, 0, "acknowledged pushes missing from the queue");
    assert!(acked.len() > 20_000);
    // The port is free again: nothing listens any more.
    assert!(TcpStream::connect(addr).is_err(), "the server stopped listening");
}

#[test]
fn sigint_stops_an_idle_server_and_removes_its_socket() {
    let dir = TempDir::new("server", "sigint");
    let sock = dir.path().join("tvmq.sock");
    let mut server = ChildServer::start(&dir, &["--unixsocket", sock.to_str().unwrap()]);
    let mut c = Conn::connect(server.addr);
    assert_eq!(c.cmd(&[b"PING"]), V::Simple("PONG".into()));
    let mut u = std::os::unix::net::UnixStream::connect(&sock).unwrap();
    u.write_all(b"PING\r\n").unwrap();
    let mut b = [0u8; 7];
    u.read_exact(&mut b).unwrap();
    assert_eq!(&b, b"+PONG\r\n");
    assert_eq!(server.signal_and_wait(2, Duration::from_secs(10)), Some(0));
    assert!(c.closed_within(Duration::from_secs(5)), "connections are closed");
    assert!(!sock.exists(), "the socket file is removed");
}

#[test]
fn a_port_in_use_fails_the_start() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let dir = TempDir::new("server", "inuse");
    let e = tvmq_server::Server::start(dir.path(), &args(&["--port", &port])).err().expect("refused");
    assert_eq!(e.code(), tvm::error::SOCK_BIND_ERR);
    assert!(e.detail().contains("in use"), "{e}");
}
