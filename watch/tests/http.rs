//! The metrics HTTP server's bound on connections: beyond `max_connections`
//! a `503`, and every connection's descriptor given back at its close, so
//! that many scrapes one after the other are all served.

#[path = "../../tests/common/mod.rs"]
mod common;
use common::TempDir;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use tvmq_watch::{Http, HttpOptions, Watch};

/// A connection whose reads give up after 20 s (a place never given back
/// fails the test instead of hanging it).
fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(20))).unwrap();
    s
}

/// Sends one request for `/metrics` on `s` (kept alive unless `close`).
fn ask(s: &mut TcpStream, close: bool) {
    let connection = if close { "Connection: close\r\n" } else { "" };
    write!(s, "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n{connection}\r\n").unwrap();
}

/// The status line of the answer read from `s`.
fn status(s: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n") && s.read(&mut b).unwrap() == 1 {
        head.push(b[0]);
    }
    String::from_utf8_lossy(&head).trim_end().to_string()
}

fn scrape(addr: SocketAddr) -> String {
    let mut s = connect(addr);
    ask(&mut s, true);
    let mut all = String::new();
    s.read_to_string(&mut all).unwrap();
    all.lines().next().unwrap_or("").to_string()
}

#[test]
fn beyond_max_connections_a_503_and_every_descriptor_comes_back() {
    let dir = TempDir::new("watch", "http-bound");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let watch = Arc::new(Watch::new(dir.path(), 10, None));
    let http = Http::start(listener, watch, HttpOptions { password: None, max_connections: 2 }).unwrap();
    let addr = http.local_addr();
    // Two connections kept alive hold the two places.
    let mut held: Vec<TcpStream> = (0..2).map(|_| connect(addr)).collect();
    for s in &mut held {
        ask(s, false);
        assert_eq!(status(s), "HTTP/1.1 200 OK");
    }
    // More are told 503 (several at once: more than the four refused at a time).
    let mut refused: Vec<TcpStream> = (0..10).map(|_| connect(addr)).collect();
    for s in &mut refused {
        assert_eq!(status(s), "HTTP/1.1 503 Service Unavailable");
    }
    drop(refused);
    drop(held);
    // Every place and descriptor given back: 200 scrapes one after the
    // other, far more than the connections served at once, are all served
    // (a place that did not come back would leave one waiting for good).
    for i in 0..200 {
        let mut line = scrape(addr);
        if line.starts_with("HTTP/1.1 503") {
            // A closed connection's place comes back a moment after the close.
            std::thread::sleep(std::time::Duration::from_millis(20));
            line = scrape(addr);
        }
        assert_eq!(line, "HTTP/1.1 200 OK", "scrape {i}");
    }
    http.stop();
}
