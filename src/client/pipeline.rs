//! One connection shared by the handles of many threads, their commands
//! pipelined together (auto-pipelining, by combining).
//!
//! A caller appends its encoded command to the staging buffer, under a
//! lock. Then, if no thread is the flusher, it becomes it: it takes the
//! whole staging buffer (its own command and every command appended by
//! other threads meanwhile), writes it in one go, reads the replies in
//! order, hands each synchronous caller its answer and wakes them all. A
//! caller that finds a flusher at work waits; when woken it either finds
//! its answer or (its command came too late for that batch) becomes the
//! next flusher. So N threads doing synchronous pushes cost about one round
//! trip per batch of N commands instead of one per command.
//!
//! Asynchronous pushes are staged the same way and written by whichever
//! thread flushes next, or by their own thread when the staging buffer is
//! large or their window is full.

use super::reply::{Kind, Outcome, Tally};
use super::router::Router;
use super::{FLUSH_BYTES, Key, WINDOW};
use crate::client::conn::ReplyWait;
use crate::error::*;
use parking_lot::{Condvar, Mutex, MutexGuard};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

/// A command waiting to be handed to the router: its bytes end at `end`
/// in the staging buffer (and start where the previous one ends).
struct Staged {
    key: Key,
    kind: Kind,
    wait: ReplyWait,
    end: usize,
}

/// What the flusher waits for besides the answers of its batch.
enum Need<'a> {
    /// Nothing: it reads only what has arrived.
    Nothing,
    /// This tally's outstanding pushes below half the window.
    Below(&'a Tally),
    /// This tally's outstanding pushes answered.
    Settled(&'a Tally),
}

struct State {
    /// The router; None while a flusher works with it.
    router: Option<Router>,
    /// A flusher panicked: the connection is gone for good.
    broken: bool,
    staged: Vec<Staged>,
    bytes: Vec<u8>,
    /// Emptied staging vectors, reused.
    spare: (Vec<Staged>, Vec<u8>),
    /// Answers of synchronous commands, by ticket.
    answers: Vec<(u64, Outcome)>,
    next: u64,
    /// Threads in `call` (staged, waiting or leading).
    callers: usize,
}

/// A connection shared by several handles, their commands pipelined together.
pub(crate) struct Pipeline {
    st: Mutex<State>,
    cv: Condvar,
}

fn broken() -> Error {
    Error::new(SVR_EXCEPTION, "the shared connection failed (internal panic, reported on stderr)")
}

impl Pipeline {
    pub(crate) fn new(router: Router) -> Pipeline {
        Pipeline {
            st: Mutex::new(State {
                router: Some(router),
                broken: false,
                staged: Vec::new(),
                bytes: Vec::new(),
                spare: (Vec::new(), Vec::new()),
                answers: Vec::new(),
                next: 0,
                callers: 0,
            }),
            cv: Condvar::new(),
        }
    }

    /// Runs one command for `key` (written by `encode`) and returns its answer.
    pub(crate) fn call(&self, key: Key, wait: ReplyWait, encode: impl FnOnce(&mut Vec<u8>)) -> Outcome {
        let mut st = self.st.lock();
        let id = st.next;
        st.next += 1;
        st.callers += 1;
        stage(&mut st, key, Kind::Sync(id), wait, encode);
        loop {
            if let Some(pos) = st.answers.iter().position(|a| a.0 == id) {
                st.callers -= 1;
                return st.answers.swap_remove(pos).1;
            }
            if st.broken {
                st.callers -= 1;
                return Err(broken());
            }
            match st.router.take() {
                Some(router) => self.lead(&mut st, router, Need::Nothing),
                None => self.cv.wait(&mut st),
            }
        }
    }

    /// Stages an asynchronous push of the handle owning `tally`. Writes
    /// the staged commands when they are many, and waits for answers while
    /// the handle has a full window of unanswered pushes.
    pub(crate) fn push_async(&self, key: Key, tally: &Arc<Tally>, encode: impl FnOnce(&mut Vec<u8>)) {
        let mut st = self.st.lock();
        tally.sent();
        stage(&mut st, key, Kind::Async(tally.clone()), ReplyWait::Normal, encode);
        loop {
            let full = tally.outstanding() >= WINDOW;
            if st.broken || (!full && st.bytes.len() < FLUSH_BYTES) {
                return;
            }
            match st.router.take() {
                Some(router) if full => self.lead(&mut st, router, Need::Below(tally)),
                Some(router) => return self.lead(&mut st, router, Need::Nothing),
                None if full => self.cv.wait(&mut st),
                None => return,
            }
        }
    }

    /// Waits until every asynchronous push of the handle owning `tally` is
    /// answered. False if the shared connection broke for good first.
    pub(crate) fn settle(&self, tally: &Tally) -> bool {
        let mut st = self.st.lock();
        loop {
            if tally.outstanding() == 0 {
                return true;
            }
            if st.broken {
                return false;
            }
            match st.router.take() {
                Some(router) => self.lead(&mut st, router, Need::Settled(tally)),
                None => self.cv.wait(&mut st),
            }
        }
    }

    /// The flusher's work: hands every staged command to the router, writes
    /// them, reads until every synchronous one of the batch has its answer
    /// (and what `need` asks), then publishes the answers and wakes everyone.
    fn lead(&self, st: &mut MutexGuard<'_, State>, mut router: Router, need: Need<'_>) {
        // Threads just handed their answers are about to stage their next
        // command: let them, once, so that the batch carries them too.
        if st.staged.len() < st.callers {
            MutexGuard::unlocked(st, std::thread::yield_now);
        }
        let (spare_staged, spare_bytes) = std::mem::take(&mut st.spare);
        let staged = std::mem::replace(&mut st.staged, spare_staged);
        let bytes = std::mem::replace(&mut st.bytes, spare_bytes);
        let work = MutexGuard::unlocked(st, || {
            catch_unwind(AssertUnwindSafe(|| {
                let (mut staged, mut bytes) = (staged, bytes);
                let mut tickets = Vec::new();
                let mut from = 0;
                for s in staged.drain(..) {
                    let cmd = &bytes[from..s.end];
                    from = s.end;
                    if let Kind::Sync(id) = s.kind {
                        tickets.push(id);
                    }
                    // A failure is told to the command's kind by the router.
                    let _ = router.enqueue(s.key.as_bytes(), s.kind, s.wait, |w| w.extend_from_slice(cmd));
                }
                router.flush();
                for id in tickets {
                    router.wait_for(id);
                }
                match need {
                    Need::Nothing => router.pump(),
                    Need::Below(t) => router.settle_until(|| t.outstanding() <= WINDOW / 2),
                    Need::Settled(t) => router.settle_until(|| t.outstanding() == 0),
                }
                bytes.clear();
                (router, staged, bytes)
            }))
        });
        match work {
            Ok((mut router, staged, bytes)) => {
                st.answers.extend(router.drain_answers());
                st.router = Some(router);
                st.spare = (staged, bytes);
            }
            Err(_) => st.broken = true,
        }
        self.cv.notify_all();
    }
}

/// Appends a command to the staging buffer.
fn stage(st: &mut State, key: Key, kind: Kind, wait: ReplyWait, encode: impl FnOnce(&mut Vec<u8>)) {
    encode(&mut st.bytes);
    let end = st.bytes.len();
    st.staged.push(Staged { key, kind, wait, end });
}
