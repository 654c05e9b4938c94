//! Durable (`always`) queues served without waiting on the event loop.
//!
//! A push to an `always` queue (and a pop from one) runs with its sync put
//! off ([`Queue::defer_syncs`](tvm::Queue::defer_syncs)): the record is
//! published at once, the reply is written into the connection's output
//! buffer, and the command leaves a [`SyncTicket`](tvm::SyncTicket) in the
//! connection's [`UnsyncedReplies`]. Before the connection writes its
//! output (once per batch of pipelined commands), it waits, as a task,
//! until every ticket of that output is covered by a completed sync: other
//! connections of the worker go on meanwhile.
//!
//! The syncs run on the server's [`Syncers`]: a few threads off the
//! workers. A queue with tickets waiting is handed to one of them, which
//! runs the library's sync for the highest ticket asked for
//! ([`Queue::sync_ticket`](tvm::Queue::sync_ticket): the group commit,
//! shared with other processes that push to the queue), tells the waiting
//! tasks (a `watch` channel per queue), and runs again at once if more
//! tickets arrived meanwhile. So one sync covers everything published
//! before it began: the commands of every connection and worker, and of
//! local programs.
//!
//! A failed sync turns the unsynced replies of pushes into errors (the
//! records are in the queue but not known to be on stable storage, as the
//! library's `SYNC_FAILED` says); those of pops are delivered anyway (the
//! records were taken: an error would lose them; a crash may deliver them
//! again), as a local pop does.
//!
//! Any command that changes a durable queue does the same, through
//! [`UnsyncedReplies::run`] (its calls inside `defer_syncs`, the reply it
//! wrote and the records it changed kept with the ticket), or, when the
//! calls ran elsewhere, [`UnsyncedReplies::add`] with the ticket they gave.
//!
//! Files: `replies` (a connection's replies waiting for a sync), `syncers`
//! (the sync threads); `replies` uses `syncers`.

mod replies;
mod syncers;

pub(crate) use replies::{OnFailure, UnsyncedReplies};
pub(crate) use syncers::Syncers;
