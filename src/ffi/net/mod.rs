//! The network calls of the C API (thin), over [`crate::client`]: the
//! connection of a handle ([`connect`]: lTvmConnect, lTvmConnectTls and its
//! TvmTls, lTvmAuth, lTvmShare, vTvmDisconnect; [`sentinel`]:
//! lTvmConnectSentinel, lTvmConnectSentinelTls, lTvmSentinelAuth) and the
//! calls on it ([`calls`]: lTvmPush, lTvmPop, lTvmPopup, lAsyPush, lAsyWait,
//! lTvmDropTable, lTvmResetLock, lTvmCount, lTvmTruncate,
//! lTvmRequireReplicas, lTvmSpread). The handle's connection lives behind
//! m_pPriv, looked at only by these calls.

mod calls;
mod client;
mod connect;
mod sentinel;

pub use calls::{
    lAsyPush, lAsyWait, lTvmCount, lTvmDropTable, lTvmPop, lTvmPopup, lTvmPush, lTvmResetLock, lTvmTruncate,
};
pub(super) use client::{client, popping};
pub use connect::{lTvmConnect, lTvmShare, vTvmDisconnect};
