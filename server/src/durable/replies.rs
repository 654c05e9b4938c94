//! A connection's replies that wait for a sync of an `always` queue before
//! they may be written ([`UnsyncedReplies`]), and what they become when
//! that sync fails.

use super::commits::Commits;
use super::ring::WorkerSyncs;
use std::ops::Range;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use tvm::{Queue, SyncTicket};

/// What an unsynced reply becomes when its sync fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OnFailure {
    /// An error reply in its place (pushes, acks: the client must not
    /// believe them durable).
    Error,
    /// Written as it is (pops: the records are the client's now).
    Deliver,
}

/// One reply that waits for a sync.
struct UnsyncedReply {
    /// Index into `UnsyncedReplies::queues`.
    queue: usize,
    /// The bytes of the reply in the output buffer.
    reply: Range<usize>,
    on_failure: OnFailure,
}

/// A queue that replies wait for.
struct Awaited {
    queue: Arc<Queue>,
    /// The highest ticket its replies need.
    ticket: SyncTicket,
    /// The records they changed (pushed, popped, leased, acknowledged).
    records: u64,
}

/// The replies in a connection's output buffer that wait for syncs, and
/// the highest ticket of each queue they need.
#[derive(Default)]
pub(crate) struct UnsyncedReplies {
    queues: Vec<Awaited>,
    replies: Vec<UnsyncedReply>,
    /// The syncs of the connection's worker on its own ring (`None`: the
    /// sync threads').
    ring: Option<Rc<WorkerSyncs>>,
}

impl UnsyncedReplies {
    /// The replies of a connection of a worker whose syncs are `ring` (`None`:
    /// the server's sync threads).
    pub(crate) fn new(ring: Option<Rc<WorkerSyncs>>) -> UnsyncedReplies {
        UnsyncedReplies { ring, ..UnsyncedReplies::default() }
    }

    /// Runs `f` on `q` with its syncs put off ([`Queue::defer_syncs`]):
    /// `f` appends its reply to `out` and returns the records it changed.
    /// On an `always` queue that reply waits until a sync covers the
    /// change (`on_failure`: what it becomes if that sync fails); on
    /// others nothing waits. Returns what `f` returned.
    #[inline]
    pub(crate) fn run(
        &mut self,
        q: &Arc<Queue>,
        out: &mut Vec<u8>,
        on_failure: OnFailure,
        f: impl FnOnce(&Queue, &mut Vec<u8>) -> u64,
    ) -> u64 {
        let at = out.len();
        let (records, ticket) = q.defer_syncs(|q| f(q, out));
        self.add(q, ticket, at..out.len(), records, on_failure);
        records
    }

    /// Keeps the reply `reply` (bytes of the output buffer) of a command
    /// whose calls on `q` ran with their syncs put off, and gave `ticket`,
    /// until a sync covers that ticket; it changed `records` records.
    /// Nothing to keep without a ticket.
    #[inline]
    pub(crate) fn add(
        &mut self,
        q: &Arc<Queue>,
        ticket: Option<SyncTicket>,
        reply: Range<usize>,
        records: u64,
        on_failure: OnFailure,
    ) {
        let Some(ticket) = ticket else { return };
        let queue = match self.queues.iter().position(|a| Arc::ptr_eq(&a.queue, q)) {
            Some(i) => {
                let a = &mut self.queues[i];
                a.ticket = a.ticket.max(ticket);
                a.records += records;
                i
            }
            None => {
                self.queues.push(Awaited { queue: q.clone(), ticket, records });
                self.queues.len() - 1
            }
        };
        self.replies.push(UnsyncedReply { queue, reply, on_failure });
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.queues.is_empty()
    }

    /// Waits until every reply's sync has completed (or failed), then
    /// turns the replies whose sync failed into errors, and forgets them.
    pub(crate) async fn settle(&mut self, commits: &Commits, out: &mut Vec<u8>) {
        if self.queues.is_empty() {
            return;
        }
        let records = self.queues.iter().map(|a| a.records).sum();
        commits.stats().records.fetch_add(records, Ordering::Relaxed);
        let mut failed: Vec<Option<(u32, Arc<str>)>> = Vec::with_capacity(self.queues.len());
        for a in &self.queues {
            let r = match &self.ring {
                Some(ring) => ring.wait(&a.queue, a.ticket, a.records).await,
                None => commits.syncers.wait(&a.queue, a.ticket, a.records).await,
            };
            failed.push(r.err().map(|why| (a.queue.id(), why)));
        }
        if failed.iter().any(Option::is_some) {
            rewrite_failed(out, &self.replies, &failed);
        }
        self.queues.clear();
        self.replies.clear();
    }
}

/// Replaces the replies of `replies` whose queue's sync failed (`failed`,
/// by queue: its id and why) and that become errors with `SYNC_FAILED`
/// errors, last first so that the ranges of earlier ones stay valid.
#[cold]
fn rewrite_failed(out: &mut Vec<u8>, replies: &[UnsyncedReply], failed: &[Option<(u32, Arc<str>)>]) {
    for e in replies.iter().rev() {
        let Some((id, why)) = &failed[e.queue] else { continue };
        if e.on_failure == OnFailure::Deliver || e.reply.end > out.len() {
            continue;
        }
        let text =
            format!("SYNC_FAILED queue {id}: the change is in the queue but not known to be on stable storage: {why}");
        let mut reply = Vec::with_capacity(text.len() + 3);
        resp::error(&mut reply, text.replace(['\r', '\n'], " ").as_bytes());
        out.splice(e.reply.clone(), reply);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A failed sync turns the unsynced replies of pushes into `SYNC_FAILED`
    /// errors, in place, and leaves those of pops and of other queues.
    #[test]
    fn a_failed_sync_turns_unsynced_push_replies_into_errors() {
        let mut out = b":1\r\n$1\r\nx\r\n:2\r\n:7\r\n".to_vec();
        let replies = vec![
            UnsyncedReply { queue: 0, reply: 0..4, on_failure: OnFailure::Error },
            UnsyncedReply { queue: 0, reply: 4..11, on_failure: OnFailure::Deliver },
            UnsyncedReply { queue: 0, reply: 11..15, on_failure: OnFailure::Error },
            UnsyncedReply { queue: 1, reply: 15..19, on_failure: OnFailure::Error },
        ];
        rewrite_failed(&mut out, &replies, &[Some((3, Arc::from("msync failed: EIO"))), None]);
        let text = String::from_utf8(out).unwrap();
        let err = "-SYNC_FAILED queue 3: the change is in the queue but not known to be on stable storage: \
                   msync failed: EIO\r\n";
        assert_eq!(text, format!("{err}$1\r\nx\r\n{err}:7\r\n"));
    }
}
