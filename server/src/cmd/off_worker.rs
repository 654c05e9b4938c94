//! Work a command hands to the server's pool ([`crate::pool`]), so that the
//! worker serves its other connections meanwhile: a command's reply made
//! there ([`Job`], the connection waiting for it), work nobody waits for
//! ([`detach`]), and the dead-letter moves that sweeps on a worker leave
//! ([`move_dead_letters`]).

use crate::pool::{self, Kind, Pool};
use std::sync::Arc;
use tvm::Queue;

/// A command's work that may touch the disk or scan a whole ring, to run
/// off the worker ([`run`]): it appends the command's reply to the buffer
/// it is given.
pub(crate) struct Job(Kind, Box<WritesReply>);

/// What a [`Job`] runs: it appends the reply to the buffer.
type WritesReply = dyn FnOnce(&mut Vec<u8>) + Send;

impl Job {
    /// The job that runs `f`, which writes the reply; `kind` tells the
    /// pool whether its cost grows with a queue ([`Kind::Heavy`]).
    pub(crate) fn new(kind: Kind, f: impl FnOnce(&mut Vec<u8>) + Send + 'static) -> Job {
        Job(kind, Box::new(f))
    }
}

/// Runs `job` in `pool` while the calling connection waits (other
/// connections of the worker go on), then appends its reply to `out`.
pub(crate) async fn run(pool: &Pool, job: Job, out: &mut Vec<u8>) {
    let Job(kind, f) = job;
    let ran = pool
        .run(kind, move || {
            let mut reply = Vec::new();
            f(&mut reply);
            reply
        })
        .await;
    match ran {
        Ok(reply) => out.extend_from_slice(&reply),
        Err(_) => failed(out),
    }
}

/// The reply of a command whose work in the pool did not complete (the
/// server stops, or it panicked).
pub(crate) fn failed(out: &mut Vec<u8>) {
    resp::error(out, b"ERR the command's work did not complete (the server is stopping, or it failed)");
}

/// Hands `f` to the pool of this worker, not waited for (on another thread:
/// runs it there).
pub(crate) fn detach(f: impl FnOnce() + Send + 'static) {
    pool::detach_here(Kind::Light, f);
}

/// Has moved off the worker the records that a sweep run here found bound
/// for the dead-letter queue of `q` (workers leave them: see
/// `Queue::sweeps_move_dead_letters`). A load when there are none.
#[inline]
pub(crate) fn move_dead_letters(q: &Arc<Queue>) {
    if q.dead_letters_due() {
        move_dead_letters_detached(q.clone());
    }
}

#[cold]
fn move_dead_letters_detached(q: Arc<Queue>) {
    detach(move || q.move_dead_letters());
}
