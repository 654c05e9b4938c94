//! The lease calls of the C API (acknowledged consumption, "Beyond STVM"):
//! the TvmLease token ([`token`]); lPopLease, lAck, lAckPopLease, lRelease,
//! lReject, lExtendLease over [`crate::Queue::pop_lease`] and its
//! companions ([`local`]); and their network twins lTvmPopLease, lTvmAck,
//! lTvmAckPopLease, lTvmRelease, lTvmReject, lTvmExtendLease over
//! [`crate::client`] (tvmq serve's TVMQ.LEASE, ..., or the Lua script on a
//! Redis) ([`net`]), with the same token: a network token carries a mark in
//! its sixth word, so that either kind of call refuses the other's
//! (LEASE_INVALID).

mod local;
mod net;
mod token;

pub use local::{lAck, lAckPopLease, lExtendLease, lPopLease, lReject, lRelease};
pub use token::TvmLease;
