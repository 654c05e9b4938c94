//! The lean durable servers of `tvmq bench --net --only durable`: the
//! design ceilings of its durable cells.
//!
//! Each is the least a single-threaded server can do to answer LPUSH only
//! once the value is on stable storage, with tvmq's commit (one
//! `O_DIRECT | O_DSYNC` write of the new pages of a log, the log's pages
//! overwritten in place, as tvmq's image is) and nothing else: no queue,
//! no checksum, no record count, no lease, no statistics, one `epoll` loop
//! over plain sockets. A design that tvmq serve follows cannot beat its
//! lean server by much, so when the lean server of every design tried is
//! below a target in the same run, the target is out of reach of those
//! designs on this machine (not proven out of reach of every design).
//!
//! Three designs ([`Design`]):
//! - `inline`: Redis's loop. Each turn serves every ready connection, then
//!   writes the turn's records (the worker waits for the disk), then sends
//!   the turn's replies. tvmq serve's inline syncs (the hybrid's default on
//!   a fast disk) are this design.
//! - `ring`: the write on an io_uring, one in flight; the loop serves
//!   meanwhile, and sends the replies a write covered when it completes;
//!   the next write carries everything that arrived during the last.
//!   tvmq serve's ring syncs (`TVMQ_SERVE_SYNC=ring`) are this design. The
//!   log's pages are dropped from the page cache first, so that the kernel
//!   takes the writes without a thread of its own (a direct write over a
//!   cached page is handed to an io-wq thread).
//! - `gather`: `inline`, but before writing, the loop goes on polling
//!   (without waiting) until every connection has a reply waiting, or for
//!   the last write's time at most: one group of clients a write instead
//!   of two taking turns. It knows the benchmark's clients are all busy; a
//!   real server cannot, so tvmq serve does not do it (docs/server.md, "Tried
//!   for `-c 10` and not kept").
//!
//! It runs as a child process of the bench (`tvmq bench --lean-server
//! PORT:DESIGN:FILE`), on loopback, until it is killed. Besides LPUSH it
//! answers PING, DEL (0) and CONFIG (an empty list), which the bench and
//! redis-benchmark send; anything else gets an error. Its input is the
//! bench's own, but a malformed request still only closes its connection.

use memmap2::MmapMut;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::time::{Duration, Instant};

/// Bytes of the log: written from the start again when less than
/// [`SLACK`] is left (once everything written is on the disk).
const LOG_BYTES: usize = 64 << 20;
const SLACK: usize = 1 << 20;
/// Direct I/O moves whole pages.
const PAGE: usize = 4096;
/// A request's arguments, at most (redis-benchmark's LPUSH has 3).
const MAX_ARGS: usize = 16;
/// Bytes of one connection's unparsed input, at most.
const MAX_INPUT: usize = 1 << 20;

/// How a lean server commits (see the module's documentation).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Design {
    Inline,
    Ring,
    Gather,
}

impl Design {
    /// Every design, in the order of the table's rows.
    pub(crate) const ALL: [Design; 3] = [Design::Inline, Design::Ring, Design::Gather];

    /// Its subject in the bench's cells and results.csv.
    pub(crate) fn subject(self) -> &'static str {
        match self {
            Design::Inline => "lean server inline",
            Design::Ring => "lean server ring",
            Design::Gather => "lean server gather",
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Design::Inline => "inline",
            Design::Ring => "ring",
            Design::Gather => "gather",
        }
    }

    fn parse(s: &str) -> Option<Design> {
        Design::ALL.into_iter().find(|d| d.name() == s)
    }
}

/// `tvmq bench --lean-server PORT:DESIGN:FILE`: serves until killed.
pub(crate) fn run(spec: &str) -> Result<(), String> {
    let bad = || format!("--lean-server wants PORT:DESIGN:FILE (DESIGN inline, ring or gather), not {spec:?}");
    let mut parts = spec.splitn(3, ':');
    let port: u16 = parts.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
    let design = parts.next().and_then(Design::parse).ok_or_else(bad)?;
    let path = parts.next().filter(|p| !p.is_empty()).ok_or_else(bad)?;
    let log = Log::create(path.as_ref())?;
    let listener = TcpListener::bind(("127.0.0.1", port)).map_err(|e| format!("cannot listen on {port}: {e}"))?;
    Server::new(listener, log, design)?.serve()
}

/// The log: its file (opened `O_DIRECT | O_DSYNC`) and the page-aligned
/// memory its writes read from.
struct Log {
    out: std::fs::File,
    mem: MmapMut,
    /// Bytes appended, and bytes on stable storage.
    at: usize,
    synced: usize,
}

impl Log {
    /// Writes the file's blocks once (so that the writes overwrite allocated
    /// blocks, as tvmq's image writes do), syncs it, drops its pages from
    /// the page cache.
    fn create(path: &std::path::Path) -> Result<Log, String> {
        let io = |what: &str, e: std::io::Error| format!("lean server: cannot {what} {}: {e}", path.display());
        let f = std::fs::File::create(path).map_err(|e| io("create", e))?;
        let zeros = vec![0u8; SLACK];
        let mut w = std::io::BufWriter::new(&f);
        for _ in 0..LOG_BYTES / SLACK {
            w.write_all(&zeros).map_err(|e| io("write", e))?;
        }
        w.flush().map_err(|e| io("write", e))?;
        drop(w);
        f.sync_all().map_err(|e| io("sync", e))?;
        // SAFETY: a plain system call on a descriptor we own.
        unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        let out = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_DIRECT | libc::O_DSYNC)
            .open(path)
            .map_err(|e| io("open (O_DIRECT | O_DSYNC)", e))?;
        let mem = MmapMut::map_anon(LOG_BYTES).map_err(|e| format!("lean server: no memory for the log: {e}"))?;
        Ok(Log { out, mem, at: 0, synced: 0 })
    }

    fn append(&mut self, v: &[u8]) {
        if self.at + v.len() > LOG_BYTES - SLACK && self.at == self.synced {
            self.at = 0;
            self.synced = 0;
        }
        let end = (self.at + v.len()).min(LOG_BYTES);
        self.mem[self.at..end].copy_from_slice(&v[..end - self.at]);
        self.at = end;
    }

    /// The pages holding the bytes appended since the last write: (offset, length).
    fn pending(&self) -> Option<(usize, usize)> {
        (self.at > self.synced).then(|| {
            let from = self.synced / PAGE * PAGE;
            (from, self.at.div_ceil(PAGE) * PAGE - from)
        })
    }

    /// Writes the pending pages, waiting for the disk.
    fn write(&mut self) -> Result<(), String> {
        use std::os::unix::fs::FileExt;
        let Some((from, len)) = self.pending() else { return Ok(()) };
        self.out
            .write_all_at(&self.mem[from..from + len], from as u64)
            .map_err(|e| format!("lean server: cannot write the log: {e}"))?;
        self.synced = self.at;
        Ok(())
    }
}

/// A client connection.
struct Conn {
    stream: TcpStream,
    input: Vec<u8>,
    out: Vec<u8>,
    /// The log's length its waiting replies need on the disk (`None`: none wait).
    needs: Option<usize>,
}

struct Server {
    listener: TcpListener,
    epoll: libc::c_int,
    conns: HashMap<u64, Conn>,
    next_token: u64,
    log: Log,
    design: Design,
    /// (`ring`) the write in flight: the log's length it makes durable.
    ring: Option<(io_uring::IoUring, std::fs::File)>,
    in_flight: Option<usize>,
    /// (`gather`) how long the last write took.
    last_write: Duration,
    records: u64,
}

/// The listener's epoll token, and the ring's eventfd's.
const LISTENER: u64 = u64::MAX;
const RING: u64 = u64::MAX - 1;

impl Server {
    fn new(listener: TcpListener, log: Log, design: Design) -> Result<Server, String> {
        listener.set_nonblocking(true).map_err(|e| e.to_string())?;
        // SAFETY: a plain system call; the descriptor it returns is ours (closed at exit).
        let epoll = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if epoll < 0 {
            return Err(format!("lean server: epoll_create1: {}", std::io::Error::last_os_error()));
        }
        let mut s = Server {
            listener,
            epoll,
            conns: HashMap::new(),
            next_token: 0,
            log,
            design,
            ring: None,
            in_flight: None,
            last_write: Duration::from_micros(100),
            records: 0,
        };
        s.watch(s.listener.as_raw_fd(), LISTENER)?;
        if design == Design::Ring {
            let ring = io_uring::IoUring::new(8).map_err(|e| format!("lean server: io_uring: {e}"))?;
            // SAFETY: a plain system call; the descriptor it returns is owned by the File below.
            let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
            if fd < 0 {
                return Err(format!("lean server: eventfd: {}", std::io::Error::last_os_error()));
            }
            // SAFETY: `fd` was just returned open by eventfd and nothing else owns it.
            let signal = unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
            ring.submitter().register_eventfd(fd).map_err(|e| format!("lean server: io_uring eventfd: {e}"))?;
            s.watch(fd, RING)?;
            s.ring = Some((ring, signal));
        }
        Ok(s)
    }

    fn watch(&self, fd: libc::c_int, token: u64) -> Result<(), String> {
        let mut ev = libc::epoll_event { events: libc::EPOLLIN as u32, u64: token };
        // SAFETY: `ev` is a valid epoll_event for the call's duration.
        if unsafe { libc::epoll_ctl(self.epoll, libc::EPOLL_CTL_ADD, fd, &mut ev) } < 0 {
            return Err(format!("lean server: epoll_ctl: {}", std::io::Error::last_os_error()));
        }
        Ok(())
    }

    /// Ready tokens, waiting at most `timeout_ms` (-1: until one is).
    fn poll(&self, events: &mut [libc::epoll_event], timeout_ms: i32) -> Vec<u64> {
        // SAFETY: `events` is valid for `events.len()` entries.
        let n = unsafe { libc::epoll_wait(self.epoll, events.as_mut_ptr(), events.len() as i32, timeout_ms) };
        events[..n.max(0) as usize].iter().map(|e| e.u64).collect()
    }

    fn serve(mut self) -> Result<(), String> {
        let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; 1024];
        loop {
            let ready = self.poll(&mut events, -1);
            let turn = Instant::now();
            let mut waiting: Vec<u64> = Vec::new();
            self.serve_ready(&ready, &mut waiting)?;
            if self.design == Design::Gather {
                while waiting.len() < self.conns.len() && turn.elapsed() < self.last_write {
                    let more: Vec<u64> =
                        self.poll(&mut events, 0).into_iter().filter(|t| !waiting.contains(t)).collect();
                    self.serve_ready(&more, &mut waiting)?;
                }
            }
            match self.design {
                Design::Inline | Design::Gather => {
                    let t = Instant::now();
                    self.log.write()?;
                    self.last_write = t.elapsed();
                    self.release();
                }
                Design::Ring => self.ring_turn()?,
            }
        }
    }

    /// Serves the connections of `ready`: every complete request in their
    /// input. Those whose replies wait for the disk join `waiting`.
    fn serve_ready(&mut self, ready: &[u64], waiting: &mut Vec<u64>) -> Result<(), String> {
        let mut buf = [0u8; 65536];
        for &token in ready {
            match token {
                LISTENER => self.accept()?,
                RING => {}
                _ => {
                    let Some(c) = self.conns.get_mut(&token) else { continue };
                    let open = match c.stream.read(&mut buf) {
                        Ok(0) => false,
                        Ok(n) => {
                            c.input.extend_from_slice(&buf[..n]);
                            serve_input(c, &mut self.log, &mut self.records)
                        }
                        Err(e) => matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted),
                    };
                    if !open {
                        self.conns.remove(&token);
                        continue;
                    }
                    if c.needs.is_some() {
                        if !waiting.contains(&token) {
                            waiting.push(token);
                        }
                    } else if !c.out.is_empty() {
                        let _ = c.stream.write_all(&c.out);
                        c.out.clear();
                    }
                }
            }
        }
        Ok(())
    }

    fn accept(&mut self) -> Result<(), String> {
        while let Ok((stream, _)) = self.listener.accept() {
            if stream.set_nonblocking(true).is_err() || stream.set_nodelay(true).is_err() {
                continue;
            }
            let token = self.next_token;
            self.next_token += 1;
            self.watch(stream.as_raw_fd(), token)?;
            self.conns.insert(token, Conn { stream, input: Vec::new(), out: Vec::new(), needs: None });
        }
        Ok(())
    }

    /// Sends the replies whose records are on the disk.
    fn release(&mut self) {
        let synced = self.log.synced;
        for c in self.conns.values_mut() {
            if c.needs.is_some_and(|n| n <= synced) {
                c.needs = None;
                let _ = c.stream.write_all(&c.out);
                c.out.clear();
            }
        }
    }

    /// (`ring`) Reaps the write in flight if it completed (then sends the
    /// replies it covered), and starts the next one if records wait.
    fn ring_turn(&mut self) -> Result<(), String> {
        let Some((ring, signal)) = self.ring.as_mut() else { return Ok(()) };
        let mut b = [0u8; 8];
        let _ = (&*signal).read(&mut b);
        let mut completed = false;
        for cqe in ring.completion() {
            if cqe.result() < 0 {
                let e = std::io::Error::from_raw_os_error(-cqe.result());
                return Err(format!("lean server: the log's write failed: {e}"));
            }
            completed = true;
        }
        if completed {
            if let Some(to) = self.in_flight.take() {
                self.log.synced = to;
            }
        }
        if self.in_flight.is_none() {
            if let Some((from, len)) = self.log.pending() {
                let src = self.log.mem[from..].as_ptr();
                let e = io_uring::opcode::Write::new(io_uring::types::Fd(self.log.out.as_raw_fd()), src, len as u32)
                    .offset(from as u64)
                    .build();
                // SAFETY: the bytes it reads (the log's memory) and the log's
                // descriptor live as long as the server, which serves until
                // the process is killed.
                unsafe { ring.submission().push(&e) }.map_err(|_| "lean server: the ring is full".to_string())?;
                ring.submit().map_err(|e| format!("lean server: io_uring submit: {e}"))?;
                self.in_flight = Some(self.log.at);
            }
        }
        if completed {
            self.release();
        }
        Ok(())
    }
}

/// Serves every complete request in `c`'s input; `false` when the
/// connection is to be closed (a malformed request, too much input).
fn serve_input(c: &mut Conn, log: &mut Log, records: &mut u64) -> bool {
    let mut used = 0;
    while let Some(parsed) = parse(&c.input[used..]) {
        let Some((len, args)) = parsed else { return false };
        let input = &c.input[used..used + len];
        let arg = |i: usize| args.get(i).map(|&(a, b)| &input[a..b]);
        let name = arg(0).unwrap_or_default();
        if name.eq_ignore_ascii_case(b"LPUSH") && args.len() >= 3 {
            for &(a, b) in &args[2..] {
                log.append(&input[a..b]);
                *records += 1;
            }
            c.out.extend_from_slice(format!(":{records}\r\n").as_bytes());
            c.needs = Some(log.at);
        } else if name.eq_ignore_ascii_case(b"PING") {
            c.out.extend_from_slice(b"+PONG\r\n");
        } else if name.eq_ignore_ascii_case(b"DEL") {
            c.out.extend_from_slice(b":0\r\n");
        } else if name.eq_ignore_ascii_case(b"CONFIG") {
            c.out.extend_from_slice(b"*0\r\n");
        } else {
            c.out.extend_from_slice(b"-ERR the lean server knows LPUSH, PING, DEL and CONFIG only\r\n");
        }
        used += len;
    }
    c.input.drain(..used);
    c.input.len() <= MAX_INPUT
}

/// One request at the start of `b`: `None` when incomplete, `Some(None)`
/// when malformed, else its length and its arguments' ranges.
type Parsed = Option<(usize, Vec<(usize, usize)>)>;

fn parse(b: &[u8]) -> Option<Parsed> {
    let line_end = |from: usize| b.get(from..)?.windows(2).position(|w| w == b"\r\n").map(|p| from + p);
    let number = |from: usize, to: usize| std::str::from_utf8(&b[from..to]).ok()?.parse::<usize>().ok();
    if b.first() != Some(&b'*') {
        // An inline command: words up to the line's end.
        let end = line_end(0)?;
        let mut args = Vec::new();
        let mut at = 0;
        for w in b[..end].split(|&x| x == b' ') {
            if !w.is_empty() {
                args.push((at, at + w.len()));
            }
            at += w.len() + 1;
        }
        return Some(if args.is_empty() || args.len() > MAX_ARGS { None } else { Some((end + 2, args)) });
    }
    let end = line_end(1)?;
    let Some(n) = number(1, end).filter(|&n| (1..=MAX_ARGS).contains(&n)) else { return Some(None) };
    let mut at = end + 2;
    let mut args = Vec::with_capacity(n);
    for _ in 0..n {
        if at >= b.len() {
            return None;
        }
        if b[at] != b'$' {
            return Some(None);
        }
        let end = line_end(at + 1)?;
        let Some(len) = number(at + 1, end).filter(|&l| l <= MAX_INPUT) else { return Some(None) };
        let (from, to) = (end + 2, end + 2 + len);
        if to + 2 > b.len() {
            return None;
        }
        if &b[to..to + 2] != b"\r\n" {
            return Some(None);
        }
        args.push((from, to));
        at = to + 2;
    }
    Some(Some((at, args)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Requests in pieces, inline or not, and malformed ones.
    #[test]
    fn parses_requests_whole_or_in_pieces() {
        let req = b"*3\r\n$5\r\nLPUSH\r\n$6\r\nmylist\r\n$3\r\nabc\r\n";
        let (len, args) = parse(req).unwrap().unwrap();
        assert_eq!(len, req.len());
        let words: Vec<&[u8]> = args.iter().map(|&(a, b)| &req[a..b]).collect();
        assert_eq!(words, [&b"LPUSH"[..], b"mylist", b"abc"]);
        for cut in 0..req.len() {
            assert!(parse(&req[..cut]).is_none(), "complete at {cut} bytes");
        }
        let inline = b"DEL  mylist\r\n";
        let (len, args) = parse(inline).unwrap().unwrap();
        assert_eq!(len, inline.len());
        assert_eq!(args.iter().map(|&(a, b)| &inline[a..b]).collect::<Vec<_>>(), [&b"DEL"[..], b"mylist"]);
        for bad in [&b"*0\r\n"[..], b"*x\r\n", b"*1\r\n+PING\r\n", b"*1\r\n$4\r\nPINGxx", b"*99\r\n"] {
            assert!(matches!(parse(bad), Some(None)), "{:?} accepted", String::from_utf8_lossy(bad));
        }
    }
}
