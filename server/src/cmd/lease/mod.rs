//! Leases over RESP, in owner mode: TVMQ.LEASE (with a count, blocking with
//! a timeout), TVMQ.ACK, TVMQ.RELEASE (with a delay), TVMQ.REJECT,
//! TVMQ.EXTEND and TVMQ.LEASES (the queue's lease statistics). Why these
//! verbs and not Redis Streams' is in docs/protocol.md.
//!
//! A lease belongs to the connection that took it ([`OwnedLeases`](owned::OwnedLeases), in
//! its `Client`): only that connection can end or extend it, and when the
//! connection ends, however it ends (QUIT, EOF, a killed client, a client
//! that stopped reading and was dropped after `--write-timeout`, the
//! server stopping), every lease it still holds is released at once
//! (delivered again, its delivery count raised). A lease also runs out by
//! time, as locally. If the server process itself dies, the library's own
//! owner rule applies: the leases of a dead process are delivered again.
//!
//! On a durable queue with the `always` policy, each call's sync is run
//! off the worker, as pushes and pops are (see [`crate::durable`]): an
//! ack's reply (and a release's or a reject's that moved a record to the
//! dead-letter queue) waits until a sync covers it, and becomes a
//! `SYNC_FAILED` error if that sync fails (the client must not believe an
//! acknowledgement durable that is not); a lease is taken in the server's
//! pool ([`take_durable`]), because the library
//! syncs the record saved in the lease table before it lets go of the
//! record's ring slot, and that sync cannot be put off; the reply waits
//! for the syncs it could put off (a record delivered again: its raised
//! delivery count) and is written even if they fail, as a pop's is (the
//! records are the client's now; a machine crash may deliver them again).
//!
//! A lease id is `<position>-<tag>` (two decimal words, the shape of a
//! stream entry id): the record's position in its queue and the lease
//! entry and generation of the delivery (`Lease::delivery_id`), so an id
//! never names another delivery, even after a reconnection.
//!
//! Files, each using only those before it: `owned` (the leases a
//! connection owns, given back when it ends), `args` (the commands'
//! arguments), `take` (TVMQ.LEASE), `end` (TVMQ.ACK, TVMQ.RELEASE,
//! TVMQ.REJECT, TVMQ.EXTEND), `stats` (TVMQ.LEASES).

mod args;
mod end;
pub(crate) mod owned;
mod stats;
mod take;

pub(crate) use args::LeaseArgs;
pub(crate) use end::{DeadLetter, ack, dead_letter_off_worker, extend, reject, release};
pub(crate) use stats::{LeaseScan, run as stats_off_worker, stats};
pub(crate) use take::{DurableLease, LeaseFlow, empty, is_always, lease, take, take_durable};
