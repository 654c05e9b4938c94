//! The pushes of an import ([`Batched`]): on an `always` queue their syncs
//! are put off ([`Queue::defer_syncs`]) and waited for once per
//! [`IMPORT_BATCH`] records, not once per record.

use super::super::{Queue, SyncTicket};
use crate::error::*;

/// Records an import pushes into an `always` queue between two syncs.
pub(crate) const IMPORT_BATCH: u64 = 1024;

/// An import's pushes into one queue (see the module's documentation).
pub(super) struct Batched<'a> {
    q: &'a Queue,
    /// The sync that covers the pushes since the last one (`None`: none).
    ticket: Option<SyncTicket>,
    pending: u64,
}

impl<'a> Batched<'a> {
    pub(super) fn new(q: &'a Queue) -> Batched<'a> {
        Batched { q, ticket: None, pending: 0 }
    }

    /// The queue pushed into.
    pub(super) fn queue(&self) -> &'a Queue {
        self.q
    }

    /// Pushes `rec`; every [`IMPORT_BATCH`]th, waits for the sync that
    /// covers the batch. Errors: those of [`Queue::push`] and
    /// [`Queue::sync_ticket`].
    pub(super) fn push(&mut self, rec: &[u8]) -> Result<()> {
        let (r, ticket) = self.q.defer_syncs(|q| q.push(rec));
        r?;
        self.ticket = self.ticket.max(ticket);
        self.pending += 1;
        if self.pending >= IMPORT_BATCH { self.sync() } else { Ok(()) }
    }

    /// Waits for the sync that covers the pushes so far. Errors:
    /// `SYNC_FAILED`.
    pub(super) fn sync(&mut self) -> Result<()> {
        self.pending = 0;
        match self.ticket.take() {
            Some(t) => self.q.sync_ticket(t),
            None => Ok(()),
        }
    }
}
