//! Durable (`always`) queues served: replies held until a sync covers them,
//! the event loop never waiting on a slow disk.
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
//! The worker that holds the replies runs the syncs too ([`WorkerSyncs`],
//! in `ring`): inline, as Redis does, when it is idle and its disk fast
//! (`adaptive` decides, sync by sync), else without waiting for the disk:
//! once per turn of its loop it
//! begins a sync for the highest ticket asked for and submits its writes
//! to an io_uring of its own ([`tvm::SyncRing`]: the library's group
//! commit, shared with other workers and processes that use the queue);
//! when its runtime sees the ring's eventfd, it reaps the sync, wakes the
//! connections it covered, and begins the next one if tickets arrived
//! meanwhile. So one sync covers everything published before it began:
//! the commands of every connection and worker, and of local programs.
//! Where io_uring is not available (a container's seccomp filter, an old
//! kernel), or with `TVMQ_SERVE_SYNC=threads`, the server's [`Syncers`]
//! (`syncers`: a few threads off the workers) run them instead, handed
//! each queue with tickets waiting.
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
//! Files: `replies` (a connection's replies waiting for a sync), `commits`
//! (the server's choice between the two: [`Commits`]), `ring` (a worker's
//! own syncs), `adaptive` (inline or on the ring), `syncers` (the sync
//! threads), `stats` (their counters, for INFO); each uses only those
//! after it.

mod adaptive;
mod commits;
mod replies;
mod ring;
mod stats;
mod syncers;

pub(crate) use commits::Commits;
pub(crate) use replies::{OnFailure, UnsyncedReplies};
pub(crate) use ring::WorkerSyncs;
