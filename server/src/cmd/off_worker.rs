//! Work a command hands to the runtime's blocking pool, so that the worker
//! serves its other connections meanwhile: a command's reply made there
//! ([`Job`], the connection waiting for it), work nobody waits for
//! ([`detach`]), and the dead-letter moves that sweeps on a worker leave
//! ([`move_dead_letters`]).

use std::sync::Arc;
use tvm::Queue;

/// A command's work that may touch the disk or scan a whole ring, to run
/// off the worker ([`run`]): it appends the command's reply to the buffer
/// it is given.
pub(crate) struct Job(Box<WritesReply>);

/// What a [`Job`] runs: it appends the reply to the buffer.
type WritesReply = dyn FnOnce(&mut Vec<u8>) + Send;

impl Job {
    /// The job that runs `f`, which writes the reply.
    pub(crate) fn new(f: impl FnOnce(&mut Vec<u8>) + Send + 'static) -> Job {
        Job(Box::new(f))
    }
}

/// Runs `job` on a thread of the runtime's blocking pool while the calling
/// connection waits (other connections of the worker go on), then appends
/// its reply to `out`.
pub(crate) async fn run(job: Job, out: &mut Vec<u8>) {
    let ran = tokio::task::spawn_blocking(move || {
        let mut reply = Vec::new();
        (job.0)(&mut reply);
        reply
    })
    .await;
    match ran {
        Ok(reply) => out.extend_from_slice(&reply),
        Err(e) => crate::reply::error_fmt(out, format_args!("ERR the command failed: {e}")),
    }
}

/// Runs `f` on a thread of the runtime's blocking pool, not waited for
/// (here, outside a runtime).
pub(crate) fn detach(f: impl FnOnce() + Send + 'static) {
    match tokio::runtime::Handle::try_current() {
        Ok(rt) => drop(rt.spawn_blocking(f)),
        Err(_) => f(),
    }
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
