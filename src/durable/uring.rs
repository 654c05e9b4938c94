//! Syncs that do not wait for the disk ([`SyncRing`]): a thread with an
//! event loop (tvmq serve's workers) begins a sync of an `always` queue as
//! any syncer does (it takes the group commit's lock, numbers the sync,
//! seals and marks what it writes), submits the sync's writes to an
//! io_uring and goes on with its other work; when the ring's eventfd says
//! they completed, [`SyncRing::reap`] records the sync's completion (or
//! failure) and releases the lock.
//!
//! The writes are those of a blocking sync (see `pages`), in the same
//! order, each linked to the previous one (it starts once that one
//! completed; a failure cancels the rest): with an image, the pages of the
//! slots and then the watermark's page (`O_DIRECT | O_DSYNC` writes); in
//! place, the control page's `sync_file_range` and then `fdatasync` of the
//! slots' range (what `msync(MS_SYNC)` of a shared mapping is). While they
//! are in flight the ring holds the queue (so the mapping they read from
//! stays mapped) and its sync lock: other threads and processes wait for
//! this sync, or queue for the next, as they do for any syncer. One sync
//! covers every change published before it began, whoever made it.

use super::Durable;
#[cfg(test)]
use super::hooks::FAIL_NEXT_SYNC;
use super::hooks::test_sync_delay;
use super::sync::Begun;
use crate::error::*;
use crate::file::layout::{CONTROL_OFFSET, DATA_OFFSET, TABLE_OFFSET};
use io_uring::{IoUring, opcode, squeue, types};
use std::any::Any;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;

/// Submission entries of a ring (its completion queue has twice as many,
/// more than the operations ever in flight: none is lost to an overflow).
const ENTRIES: u32 = 64;
/// Operations of one sync in the ring at a time, at most; the rest are
/// submitted as these complete (a sync after one that failed rewrites the
/// whole ring, in chunks of [`MAX_WRITE`]).
const SEGMENT: usize = 8;
/// Bytes of one write at most (an operation's length is 32 bits).
const MAX_WRITE: u64 = 1 << 30;

/// One operation of a sync.
#[derive(Clone, Copy)]
enum Op {
    /// `len` bytes of the queue's mapping from file offset `at` into the
    /// image (descriptor `fd`, opened `O_DIRECT | O_DSYNC`) at `to`.
    Write { fd: RawFd, at: u64, len: u32, to: u64 },
    /// `sync_file_range` (wait, write, wait) of `len` bytes of file `fd`
    /// from `from`.
    SyncRange { fd: RawFd, from: u64, len: u32 },
    /// `fdatasync` of `len` bytes of file `fd` from `from` (0 and 0: the
    /// whole file).
    DataSync { fd: RawFd, from: u64, len: u32 },
    /// Nothing (a test's sync, whose system calls its hook replaced).
    Nop,
    /// The test aid `TVMQ_TEST_SYNC_DELAY_MS`: a sync made this much slower.
    Delay,
}

/// A sync whose operations are in the ring.
struct InFlight {
    durable: Arc<Durable>,
    /// What keeps the queue (and so its mapping) alive meanwhile.
    _keep: Arc<dyn Any + Send + Sync>,
    /// The caller's name for the sync, given back by [`SyncRing::reap`].
    token: u64,
    begun: Begun,
    ops: Vec<Op>,
    /// The first operation not yet submitted.
    next: usize,
    /// Operations submitted and not yet completed.
    in_ring: usize,
    /// The first failure.
    error: Option<Error>,
    /// The delay's duration (read by the kernel when the operation is
    /// submitted; kept until it completes).
    delay: Box<types::Timespec>,
}

/// What [`Queue::start_sync`](crate::Queue::start_sync) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncStart {
    /// A completed sync covers the ticket already: nothing to wait for.
    Covered,
    /// A sync that covers the ticket is in the ring: [`SyncRing::reap`]
    /// reports it with the token given.
    Started,
    /// Another syncer (a thread or process, or another ring) holds the
    /// queue's sync lock: its sync may not cover the ticket. Ask again
    /// once it has ended.
    Busy,
    /// The ring has no room for another sync now: ask again after
    /// [`SyncRing::reap`] reported one.
    Full,
}

/// An io_uring on which one thread runs syncs of `always` queues without
/// waiting for them (see [`Queue::start_sync`](crate::Queue::start_sync)).
/// Its descriptor ([`AsRawFd`]) is an eventfd that becomes readable when
/// operations complete: an event loop watches it, then calls
/// [`take_signal`](Self::take_signal) and [`reap`](Self::reap).
///
/// Threading: it belongs to one thread at a time (`&mut self`); syncs
/// started on it hold their queue's sync lock until reaped, so the thread
/// that owns it must not wait for a sync of such a queue by other means
/// (a push outside [`Queue::defer_syncs`](crate::Queue::defer_syncs),
/// [`Queue::sync_ticket`](crate::Queue::sync_ticket)) before it reaped it:
/// it would wait for itself. Dropping it waits for the syncs in flight
/// and finishes them. The kernel tells the owning thread of completions
/// (and of the ring's end) by interrupting what it waits in: a blocking
/// system call of that thread may return `EINTR` (a socket read with a
/// timeout does), which an event loop's poll retries.
pub struct SyncRing {
    ring: IoUring,
    signal: std::fs::File,
    syncs: Vec<Option<InFlight>>,
    /// Operations submitted and not yet completed, all syncs together.
    in_ring: usize,
    /// A test aid: each sync made this much slower (see
    /// [`set_test_delay`](Self::set_test_delay)).
    test_delay: std::time::Duration,
}

impl SyncRing {
    /// A ring, its eventfd registered. Errors: `NOT_SUPPT_OPT` (io_uring
    /// is not available: an older kernel, `kernel.io_uring_disabled`, a
    /// seccomp filter such as a container's default one),
    /// `SHM_ERR_NOMEM` (no eventfd could be made).
    pub fn new() -> Result<SyncRing> {
        let ring = IoUring::builder()
            .setup_cqsize(ENTRIES * 2)
            .build(ENTRIES)
            .map_err(|e| Error::new(NOT_SUPPT_OPT, format!("io_uring is not available here: {e}")))?;
        // SAFETY: a plain system call; the descriptor it returns is ours.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            let e = std::io::Error::last_os_error();
            return Err(Error::new(SHM_ERR_NOMEM, format!("cannot make an eventfd: {e}")));
        }
        // SAFETY: `fd` was just returned open by eventfd and nothing else owns it.
        let signal = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        ring.submitter()
            .register_eventfd(fd)
            .map_err(|e| Error::new(NOT_SUPPT_OPT, format!("io_uring cannot signal an eventfd here: {e}")))?;
        Ok(SyncRing { ring, signal, syncs: Vec::new(), in_ring: 0, test_delay: std::time::Duration::ZERO })
    }

    /// A test aid: each sync started on this ring from now on takes `d`
    /// longer (a timeout in the ring before its writes), so that a test
    /// sees what its thread does while a sync is in flight. (The library's
    /// `TVMQ_TEST_SYNC_DELAY_MS` slows these syncs the same way.)
    pub fn set_test_delay(&mut self, d: std::time::Duration) {
        self.test_delay = d;
    }

    /// Syncs in the ring (started, not yet reaped).
    pub fn in_flight(&self) -> usize {
        self.syncs.iter().filter(|s| s.is_some()).count()
    }

    /// Clears the eventfd's signal: `Ok` with the completions signalled
    /// since the last call, `Err` of kind `WouldBlock` when there were none.
    /// Call it before [`reap`](Self::reap): a completion after it signals
    /// again.
    pub fn take_signal(&self) -> std::io::Result<u64> {
        let mut b = [0u8; 8];
        (&self.signal).read_exact(&mut b)?;
        Ok(u64::from_ne_bytes(b))
    }

    /// Finishes the syncs whose operations all completed: records each
    /// one's completion (or failure: `SYNC_FAILED`) in its queue, releases
    /// its sync lock, and calls `done` with its token and outcome. Submits
    /// the next operations of syncs that have more. Never waits. Returns
    /// how many syncs it finished.
    pub fn reap(&mut self, mut done: impl FnMut(u64, Result<()>)) -> usize {
        let mut touched: Vec<usize> = Vec::new();
        for cqe in self.ring.completion() {
            let (at, op) = ((cqe.user_data() >> 16) as usize, (cqe.user_data() & 0xffff) as usize);
            let Some(Some(s)) = self.syncs.get_mut(at) else { continue };
            s.in_ring -= 1;
            self.in_ring -= 1;
            if s.error.is_none() {
                s.error = check(s.ops[op], cqe.result()).err();
            }
            if s.in_ring == 0 {
                touched.push(at);
            }
        }
        let mut finished = 0;
        for at in touched {
            let Some(s) = self.syncs[at].as_ref() else { continue };
            if s.error.is_none() && s.next < s.ops.len() {
                if let Err(e) = self.submit_segment(at) {
                    if let Some(s) = self.syncs[at].as_mut() {
                        s.error = Some(e);
                    }
                }
                if self.syncs[at].as_ref().is_some_and(|s| s.in_ring > 0) {
                    continue;
                }
            }
            if let Some(s) = self.syncs[at].take() {
                let r = s.durable.end_sync(&s.begun, s.error.map_or(Ok(()), Err));
                s.durable.unlock();
                finished += 1;
                done(s.token, r);
            }
        }
        finished
    }

    /// Begins a sync of the `always` queue `d` (kept alive by `keep`) that
    /// covers sync number `target`, and submits its first operations: see
    /// [`Queue::start_sync`](crate::Queue::start_sync).
    pub(crate) fn start(
        &mut self,
        d: &Arc<Durable>,
        keep: Arc<dyn Any + Send + Sync>,
        target: u64,
        token: u64,
    ) -> Result<SyncStart> {
        if d.covered(target) {
            return Ok(SyncStart::Covered);
        }
        if d.image.is_some() && d.lease_table.is_some() {
            // `interval` queues with leases (their slots' snapshot, then
            // their table): no ticket names their syncs.
            return Err(Error::new(NOT_SUPPT_OPT, "an interval queue with leases is not synced on a ring"));
        }
        if self.in_ring + SEGMENT > ENTRIES as usize {
            return Ok(SyncStart::Full);
        }
        if !d.try_lock() {
            return Ok(SyncStart::Busy);
        }
        if d.covered(target) {
            d.unlock();
            return Ok(SyncStart::Covered);
        }
        let w = d.words();
        w.batch_start.store(w.arrivals.load(std::sync::atomic::Ordering::SeqCst), std::sync::atomic::Ordering::Relaxed);
        let begun = d.begin_sync();
        let (mut ops, mut error) = (Vec::new(), None);
        let delay = test_sync_delay().unwrap_or_default().max(self.test_delay);
        if !delay.is_zero() {
            ops.push(Op::Delay);
        }
        #[cfg(test)]
        let hooked = d.hook.is_some() || FAIL_NEXT_SYNC.with(|f| f.get());
        #[cfg(not(test))]
        let hooked = false;
        if hooked {
            // The hook stands for the system calls, and says what reached
            // the disk, here and now; the ring only reports it.
            error = d.write_pages(begun.control, begun.changed).err();
            ops.push(Op::Nop);
        } else if let Err(e) = d.ops(&begun, &mut ops) {
            error = Some(e);
        }
        if ops.is_empty() {
            // Nothing to write (and no delay): reaped at once.
            ops.push(Op::Nop);
        }
        let at = match self.syncs.iter().position(Option::is_none) {
            Some(at) => at,
            None => {
                self.syncs.push(None);
                self.syncs.len() - 1
            }
        };
        self.syncs[at] = Some(InFlight {
            durable: d.clone(),
            _keep: keep,
            token,
            begun,
            ops,
            next: 0,
            in_ring: 0,
            error,
            delay: Box::new(types::Timespec::new().sec(delay.as_secs()).nsec(delay.subsec_nanos())),
        });
        if let Err(e) = self.submit_segment(at) {
            if let Some(s) = self.syncs[at].take() {
                if s.in_ring > 0 {
                    // Some were submitted: they finish it when reaped.
                    self.syncs[at] = Some(InFlight { error: Some(e), ..s });
                    return Ok(SyncStart::Started);
                }
                let r = s.durable.end_sync(&s.begun, Err(e));
                s.durable.unlock();
                return r.map(|()| SyncStart::Started);
            }
        }
        Ok(SyncStart::Started)
    }

    /// Submits the next operations of sync `at` (up to [`SEGMENT`]), each
    /// linked to the one before.
    fn submit_segment(&mut self, at: usize) -> Result<()> {
        let Some(s) = self.syncs[at].as_mut() else { return Ok(()) };
        let end = s.ops.len().min(s.next + SEGMENT);
        let mut pushed = 0;
        {
            let mut sq = self.ring.submission();
            for i in s.next..end {
                let mut e = entry(s, i).user_data(((at as u64) << 16) | i as u64);
                if i + 1 < end {
                    e = e.flags(squeue::Flags::IO_LINK);
                }
                // SAFETY: what the entry points at stays valid until its
                // completion is reaped: the mapping's bytes (the queue, kept
                // by `s._keep`, keeps its mapping), the timespec (boxed in
                // `s`), the descriptors (the queue's, kept the same way).
                // `s` stays in `self.syncs` until then (dropping the ring
                // waits for its operations first).
                if unsafe { sq.push(&e) }.is_err() {
                    break;
                }
                pushed += 1;
            }
        }
        s.next += pushed;
        s.in_ring += pushed;
        self.in_ring += pushed;
        if pushed == 0 {
            return Err(Error::new(SYNC_FAILED, "the sync's io_uring had no room for its writes"));
        }
        loop {
            match self.ring.submit() {
                Ok(_) => return Ok(()),
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) || e.raw_os_error() == Some(libc::EAGAIN) => {
                    // The kernel takes the entries later (at the next submit,
                    // or when completions are reaped).
                    return Ok(());
                }
                Err(e) => {
                    return Err(Error::new(SYNC_FAILED, format!("cannot submit the sync's writes to io_uring: {e}")));
                }
            }
        }
    }
}

impl AsRawFd for SyncRing {
    /// The eventfd signalled when operations complete.
    fn as_raw_fd(&self) -> RawFd {
        self.signal.as_raw_fd()
    }
}

impl Drop for SyncRing {
    fn drop(&mut self) {
        while self.in_ring > 0 {
            match self.ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                Err(_) => {
                    // Operations still in the kernel's hands may read the
                    // mappings: keep them mapped (leaked) rather than unmap
                    // them under the kernel. Their locks are released.
                    for s in self.syncs.iter().flatten() {
                        s.durable.unlock();
                    }
                    std::mem::forget(std::mem::take(&mut self.syncs));
                    return;
                }
            }
            self.reap(|_, _| {});
        }
        // Syncs with nothing in the ring (their submission failed) end here.
        self.reap(|_, _| {});
    }
}

/// The submission entry of operation `i` of sync `s`.
fn entry(s: &InFlight, i: usize) -> squeue::Entry {
    let map = &s.durable.map;
    match s.ops[i] {
        Op::Write { fd, at, len, to } => {
            // `at + len` lies inside the mapping (see `Durable::ops`).
            let src = map.base().wrapping_add(at as usize);
            opcode::Write::new(types::Fd(fd), src.cast_const(), len).offset(to).build()
        }
        Op::SyncRange { fd, from, len } => {
            let flags =
                libc::SYNC_FILE_RANGE_WAIT_BEFORE | libc::SYNC_FILE_RANGE_WRITE | libc::SYNC_FILE_RANGE_WAIT_AFTER;
            opcode::SyncFileRange::new(types::Fd(fd), len).offset(from).flags(flags).build()
        }
        Op::DataSync { fd, from, len } => {
            opcode::Fsync::new(types::Fd(fd)).offset(from).len(len).flags(types::FsyncFlags::DATASYNC).build()
        }
        Op::Nop => opcode::Nop::new().build(),
        Op::Delay => opcode::Timeout::new(&*s.delay).flags(types::TimeoutFlags::ETIME_SUCCESS).build(),
    }
}

/// Did operation `op` succeed, given its completion's result `res`?
fn check(op: Op, res: i32) -> Result<()> {
    let failed = |what: &str| {
        let e = std::io::Error::from_raw_os_error(-res);
        Err(Error::new(SYNC_FAILED, format!("{what} failed: {e}")))
    };
    match op {
        Op::Delay if res == -libc::ETIME || res >= 0 => Ok(()),
        _ if res == -libc::ECANCELED => Err(Error::new(SYNC_FAILED, "a write of the sync was cancelled")),
        Op::Write { len, .. } if res >= 0 && res as u32 != len => {
            Err(Error::new(SYNC_FAILED, format!("cannot write the queue's image: {res} bytes of {len} written")))
        }
        Op::Write { .. } if res < 0 => failed("writing the queue's image"),
        Op::SyncRange { .. } if res < 0 => failed("sync_file_range"),
        Op::DataSync { .. } if res < 0 => failed("fdatasync"),
        _ if res < 0 => failed("an operation of the sync"),
        _ => Ok(()),
    }
}

impl Durable {
    /// The operations of the begun sync `b`, in order: those of
    /// `write_pages`, as ring operations. Errors: `SHM_ERR_INVAL` (a
    /// write would read beyond the mapping).
    fn ops(&self, b: &Begun, ops: &mut Vec<Op>) -> Result<()> {
        let file = self.file.as_raw_fd();
        match &self.image {
            Some(image) => {
                // (`interval` queues with leases snapshot their slots first:
                // they hold no tickets, and never come here.) The slots'
                // pages are durable before the watermark's page is written,
                // as in `Image::write`: a watermark that reached the disk
                // before the slots it passes would drop records whose pops
                // were never answered.
                let (fd, then_sync) = image.ring_fd();
                let plan = image.plan(&b.changed, b.control);
                let marks = b.control && plan.last().is_some_and(|w| w.0 == image.marks_page());
                for (i, &(at, len, to)) in plan.iter().enumerate() {
                    if at.checked_add(len).is_none_or(|end| end > self.map.len() as u64) {
                        return Err(Error::new(SHM_ERR_INVAL, "image write beyond the mapping"));
                    }
                    let last_slots = i + 1 == plan.len() - usize::from(marks);
                    let mut done = 0;
                    while done < len {
                        let n = (len - done).min(MAX_WRITE);
                        ops.push(Op::Write { fd, at: at + done, len: n as u32, to: to + done });
                        done += n;
                    }
                    if then_sync && (last_slots || i + 1 == plan.len()) {
                        ops.push(Op::DataSync { fd, from: 0, len: 0 });
                    }
                }
            }
            None => {
                if b.control {
                    let len = (TABLE_OFFSET - CONTROL_OFFSET) as u32;
                    ops.push(Op::SyncRange { fd: file, from: CONTROL_OFFSET, len });
                }
                let len = (self.map.len() as u64).saturating_sub(DATA_OFFSET);
                ops.push(match u32::try_from(len) {
                    Ok(len) if len > 0 => Op::DataSync { fd: file, from: DATA_OFFSET, len },
                    _ => Op::DataSync { fd: file, from: 0, len: 0 },
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::file::layout::BOOT_ID_OFFSET;
    use crate::file::queue_path;
    use crate::queue::{Queue, SyncTicket};
    use crate::spec::{Durability, LeaseSpec, Spec};
    use crate::test_support::DiskDir;
    use std::time::{Duration, Instant};

    /// An `always` queue `id` in `dir` (with leases: synced in place).
    fn always(dir: &DiskDir, id: u32, leases: bool) -> Arc<Queue> {
        let mut spec = Spec::new(1024, 64);
        spec.durability = Some(Durability::Always);
        if leases {
            spec.leases = Some(LeaseSpec { max_leases: 64, ..Default::default() });
        }
        Queue::create(&dir.0, id, &spec).unwrap();
        Arc::new(Queue::open(&dir.0, id).unwrap())
    }

    /// Pushes `from..to` (as little-endian words) with their syncs put off.
    fn push_deferred(q: &Queue, from: u32, to: u32) -> SyncTicket {
        let ((), ticket) = q.defer_syncs(|q| (from..to).for_each(|i| q.push(&i.to_le_bytes()).unwrap()));
        ticket.expect("an always queue's pushes need a sync")
    }

    /// Reaps `ring` until no sync is in flight: the tokens and outcomes.
    fn reap_all(ring: &mut SyncRing) -> Vec<(u64, Result<()>)> {
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        while ring.in_flight() > 0 {
            assert!(Instant::now() < deadline, "the ring's syncs never completed");
            if ring.take_signal().is_err() {
                std::thread::sleep(Duration::from_millis(1));
            }
            ring.reap(|t, r| got.push((t, r)));
        }
        got
    }

    /// The records of queue `id` after a machine restart: its file copied
    /// (the live part is in tmpfs: the copy holds the image) with the boot
    /// id cleared, opened, drained.
    fn after_a_restart(dir: &DiskDir, id: u32) -> Vec<u32> {
        let restarted = dir.0.join("restarted");
        std::fs::create_dir_all(&restarted).unwrap();
        let copy = queue_path(&restarted, id);
        std::fs::copy(queue_path(&dir.0, id), &copy).unwrap();
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().write(true).open(&copy).unwrap();
        f.write_all_at(&[0u8; 16], BOOT_ID_OFFSET).unwrap();
        drop(f);
        let r = Queue::open(&restarted, id).unwrap();
        let mut out = [0u8; 64];
        let mut got = Vec::new();
        while r.pop(&mut out, crate::Wait::NoWait).is_ok() {
            got.push(u32::from_le_bytes(out[..4].try_into().unwrap()));
        }
        drop(r);
        Queue::drop_queue(&restarted, id).unwrap();
        got
    }

    /// A sync started on a ring completes without anyone waiting for it:
    /// reaped, it reports its token, covers the ticket, and what it wrote
    /// is what a restart finds (the pushes before it, in its image).
    #[test]
    fn a_sync_started_on_a_ring_reaches_the_image() {
        let dir = DiskDir::new("ring");
        let q = always(&dir, 1, false);
        let mut ring = SyncRing::new().expect("io_uring on this kernel");
        let ticket = push_deferred(&q, 0, 100);
        assert!(!q.is_synced(ticket));
        assert_eq!(q.start_sync(ticket, &mut ring, 7).unwrap(), SyncStart::Started);
        let got = reap_all(&mut ring);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].0, 7);
        assert!(got[0].1.is_ok(), "{:?}", got[0].1);
        assert!(q.is_synced(ticket));
        assert_eq!(q.start_sync(ticket, &mut ring, 8).unwrap(), SyncStart::Covered);
        // Pops too: their release reaches the image.
        let mut out = [0u8; 64];
        let ((), popped) = q.defer_syncs(|q| {
            for _ in 0..30 {
                q.pop(&mut out, crate::Wait::NoWait).unwrap();
            }
        });
        let t2 = push_deferred(&q, 100, 120).max(popped.unwrap());
        assert_eq!(q.start_sync(t2, &mut ring, 9).unwrap(), SyncStart::Started);
        assert!(reap_all(&mut ring).iter().all(|(t, r)| *t == 9 && r.is_ok()));
        assert_eq!(after_a_restart(&dir, 1), (30..120).collect::<Vec<u32>>());
        assert_eq!(q.durable_stats().unwrap().failures, 0);
        drop(q);
        Queue::drop_queue(&dir.0, 1).unwrap();
    }

    /// An `always` queue (in a directory named after `tag`) whose sync of
    /// its pushes 0..10 is in flight on the ring returned (made 300 ms
    /// slower), and the tickets of that sync and of pushes 10..20 after it.
    fn a_ring_holding_the_lock(tag: &str) -> (DiskDir, Arc<Queue>, SyncRing, SyncTicket, SyncTicket) {
        let dir = DiskDir::new(tag);
        let q = always(&dir, 1, false);
        let mut ring = SyncRing::new().unwrap();
        ring.set_test_delay(Duration::from_millis(300));
        let ticket = push_deferred(&q, 0, 10);
        assert_eq!(q.start_sync(ticket, &mut ring, 1).unwrap(), SyncStart::Started);
        let later = push_deferred(&q, 10, 20);
        (dir, q, ring, ticket, later)
    }

    /// While a ring's sync is in flight it holds the queue's sync lock:
    /// another ring finds the queue busy, and a thread waiting for a later
    /// sync waits until the ring's is reaped, then runs its own.
    #[test]
    fn a_sync_in_flight_holds_the_lock_until_reaped() {
        let (dir, q, mut ring, ticket, later) = a_ring_holding_the_lock("ring-busy");
        let mut other = SyncRing::new().unwrap();
        assert_eq!(q.start_sync(later, &mut other, 2).unwrap(), SyncStart::Busy);
        let waiter = {
            let q = q.clone();
            std::thread::spawn(move || q.sync_ticket(later))
        };
        std::thread::sleep(Duration::from_millis(100));
        assert!(!waiter.is_finished(), "a blocking sync ran while the ring held the lock");
        assert!(!q.is_synced(ticket), "covered before its writes completed");
        assert!(reap_all(&mut ring).iter().all(|(_, r)| r.is_ok()));
        assert!(q.is_synced(ticket));
        waiter.join().unwrap().unwrap();
        assert!(q.is_synced(later));
        drop(q);
        Queue::drop_queue(&dir.0, 1).unwrap();
    }

    /// `try_sync_ticket` runs a sync on the calling thread when nobody
    /// holds the lock (the ticket covered when it returns, and a restart
    /// finds the records), and does nothing, without waiting, while a
    /// ring's sync holds it.
    #[test]
    fn try_sync_ticket_syncs_here_or_leaves_a_busy_queue_alone() {
        let (dir, q, mut ring, _, later) = a_ring_holding_the_lock("ring-try");
        let syncs = q.durable_stats().unwrap().syncs;
        assert!(!q.try_sync_ticket(later).unwrap(), "synced while the ring held the lock");
        assert!(!q.is_synced(later));
        assert_eq!(q.durable_stats().unwrap().syncs, syncs);
        assert!(reap_all(&mut ring).iter().all(|(_, r)| r.is_ok()));
        assert!(!q.is_synced(later));
        assert!(q.try_sync_ticket(later).unwrap());
        assert!(q.is_synced(later));
        assert!(q.try_sync_ticket(later).unwrap(), "a covered ticket");
        assert_eq!(after_a_restart(&dir, 1), (0..20).collect::<Vec<u32>>());
        drop(q);
        Queue::drop_queue(&dir.0, 1).unwrap();
    }

    /// A sync whose writes fail is reported failed (`SYNC_FAILED`), covers
    /// nothing, releases the lock, and the next one writes what it was to
    /// write (a restart finds every record).
    #[test]
    fn a_failed_sync_on_a_ring_is_reported_and_the_next_covers_it() {
        let dir = DiskDir::new("ring-fail");
        let q = always(&dir, 1, false);
        let mut ring = SyncRing::new().unwrap();
        let ticket = push_deferred(&q, 0, 50);
        FAIL_NEXT_SYNC.with(|f| f.set(true));
        assert_eq!(q.start_sync(ticket, &mut ring, 3).unwrap(), SyncStart::Started);
        let got = reap_all(&mut ring);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].1.as_ref().unwrap_err().code(), SYNC_FAILED);
        assert!(!q.is_synced(ticket));
        assert_eq!(q.start_sync(ticket, &mut ring, 4).unwrap(), SyncStart::Started);
        assert!(reap_all(&mut ring).iter().all(|(_, r)| r.is_ok()));
        assert!(q.is_synced(ticket));
        assert_eq!(after_a_restart(&dir, 1), (0..50).collect::<Vec<u32>>());
        drop(q);
        Queue::drop_queue(&dir.0, 1).unwrap();
    }

    /// An `always` queue with leases syncs in place: on a ring, its
    /// `sync_file_range` and `fdatasync`; dropping the ring with the sync
    /// in flight waits for it and finishes it.
    #[test]
    fn an_in_place_sync_runs_on_a_ring_and_a_dropped_ring_finishes_it() {
        let dir = DiskDir::new("ring-in-place");
        let q = always(&dir, 1, true);
        let before = q.durable_stats().unwrap().syncs;
        let mut ring = SyncRing::new().unwrap();
        ring.set_test_delay(Duration::from_millis(50));
        let ticket = push_deferred(&q, 0, 10);
        assert_eq!(q.start_sync(ticket, &mut ring, 5).unwrap(), SyncStart::Started);
        drop(ring);
        assert!(q.is_synced(ticket));
        assert_eq!(q.durable_stats().unwrap().syncs, before + 1);
        // The lock was released: a blocking sync runs.
        let later = push_deferred(&q, 10, 11);
        q.sync_ticket(later).unwrap();
        drop(q);
        Queue::drop_queue(&dir.0, 1).unwrap();
    }
}
