//! The hot paths allocate nothing per command: LPUSH and RPOP, pipelined,
//! through a server in this process, counted by a global allocator.

mod common;

use common::*;
use std::alloc::{GlobalAlloc, Layout, System};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicU64, Ordering};

struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards to the system allocator, counting calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Sends `batch` `rounds` times, reading exactly `reply_len` bytes of replies
/// after each, into buffers made beforehand (the client allocates nothing).
fn drive(s: &mut TcpStream, batch: &[u8], reply_len: usize, rounds: usize, replies: &mut [u8]) {
    for _ in 0..rounds {
        s.write_all(batch).unwrap();
        s.read_exact(&mut replies[..reply_len]).unwrap();
    }
}

#[test]
fn pipelined_lpush_and_rpop_allocate_nothing_per_command() {
    let dir = TempDir::new("server", "noalloc");
    create(&dir, 9, "hot", 200_000, 304);
    let server = start(&dir, &["--threads", "1"]);
    let mut s = TcpStream::connect(server.tcp_addr().unwrap()).unwrap();
    s.set_nodelay(true).unwrap();
    let value = [b'v'; 304];
    let (mut push, mut pop) = (Vec::new(), Vec::new());
    for _ in 0..64 {
        resp::command(&mut push, &[b"LPUSH", b"hot", &value]);
        resp::command(&mut pop, &[b"RPOP", b"hot"]);
    }
    let mut replies = vec![0u8; 64 * 400];
    // 100,000 records first, so that every depth answered has 6 digits
    // (":100001\r\n", 9 bytes); a pop answers "$304\r\n" + 304 + CRLF.
    let q = tvm::Queue::open(dir.path(), 9).unwrap();
    for _ in 0..100_000 {
        q.push(&value).unwrap();
    }
    // Warm up: the queue attached, caches and buffers grown.
    drive(&mut s, &push, 64 * 9, 200, &mut replies);
    drive(&mut s, &pop, 64 * 312, 200, &mut replies);
    assert_eq!(q.depth(), 100_000);
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    drive(&mut s, &push, 64 * 9, 500, &mut replies);
    let pushes = ALLOCATIONS.load(Ordering::Relaxed) - before;
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    drive(&mut s, &pop, 64 * 312, 500, &mut replies);
    let pops = ALLOCATIONS.load(Ordering::Relaxed) - before;
    eprintln!("allocations: {pushes} for 32,000 LPUSH, {pops} for 32,000 RPOP (server and client together)");
    assert_eq!(&replies[..6], b"$304\r\n");
    // Not zero: the runtime allocates now and then (a timer, a wake-up list);
    // one allocation a command would be 32,000.
    assert!(pushes < 320 && pops < 320, "{pushes} and {pops} allocations for 32,000 commands each");
    drop(s);
    server.stop();
}
