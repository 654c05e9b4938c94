//! The hot paths allocate nothing once their buffers have grown: counted with a global
//! allocator that counts the allocations of the current thread.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use resp::{Limits, Proto, Request, Status, parse_request};

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

fn count() {
    // `try_with`: the thread-local may already be destroyed when a thread exits.
    let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count();
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

#[test]
fn pipeline_of_lpush_allocates_nothing_after_the_first_round() {
    let limits = Limits::default();
    let value = [b'v'; 304];
    let mut buf = Vec::new();
    for _ in 0..64 {
        resp::command(&mut buf, &[b"LPUSH", b"mylist", &value]);
    }
    let mut req = Request::new();
    let mut out = Vec::with_capacity(64 * 16);
    let mut rounds = Vec::new();
    for _ in 0..5 {
        let before = allocations();
        let mut pos = 0;
        out.clear();
        while let Status::Complete { consumed } = parse_request(&buf[pos..], &limits, &mut req).unwrap() {
            assert_eq!(req.arg(&buf[pos..], 2).len(), 304);
            resp::integer(&mut out, pos as i64);
            pos += consumed;
        }
        assert_eq!(pos, buf.len());
        rounds.push(allocations() - before);
    }
    assert!(rounds[0] >= 1, "the first round grows the request: {rounds:?}");
    assert_eq!(rounds[1..], [0, 0, 0, 0], "{rounds:?}");
}

#[test]
fn reply_encoding_allocates_nothing_with_capacity() {
    let mut out = Vec::with_capacity(4096);
    let before = allocations();
    for proto in [Proto::Resp2, Proto::Resp3] {
        resp::simple(&mut out, b"OK");
        resp::error(&mut out, b"ERR no");
        resp::integer(&mut out, i64::MIN);
        resp::bulk(&mut out, b"value");
        resp::bulk_header(&mut out, 3);
        out.extend_from_slice(b"abc");
        resp::crlf(&mut out);
        resp::null_bulk(&mut out);
        resp::null_array(&mut out);
        resp::array_header(&mut out, 12345);
        resp::null(&mut out, proto);
        resp::map_header(&mut out, proto, 2);
        resp::set_header(&mut out, proto, 2);
        resp::push_header(&mut out, proto, 2);
        resp::double(&mut out, proto, -1.2345678901234567e-300);
        resp::double(&mut out, proto, 0.1);
        resp::boolean(&mut out, proto, true);
        resp::verbatim(&mut out, proto, b"txt", b"text");
        resp::command(&mut out, &[b"GET", b"key"]);
    }
    assert_eq!(allocations() - before, 0);
    assert!(out.capacity() == 4096);
}

#[test]
fn measuring_a_reply_allocates_nothing() {
    let limits = Limits::default();
    let mut buf = Vec::new();
    resp::array_header(&mut buf, 3);
    resp::bulk(&mut buf, b"a");
    resp::array_header(&mut buf, 1);
    resp::integer(&mut buf, 1);
    resp::map_header(&mut buf, Proto::Resp3, 1);
    resp::simple(&mut buf, b"k");
    resp::null(&mut buf, Proto::Resp3);
    let before = allocations();
    assert_eq!(resp::reply_len(&buf, &limits), Ok(Some(buf.len())));
    assert_eq!(allocations() - before, 0);
}
