//! A handle connected through Redis Sentinel: lTvmConnectSentinel,
//! lTvmConnectSentinelTls, lTvmSentinelAuth.

use super::connect::{TvmTls, credentials, tls_config};
use crate::client::{Addr, Client, Dial, Sentinels, Tls};
use crate::error::*;
use crate::ffi::common::text;
use crate::ffi::handle::state_mut;
use crate::ffi::{CallResult, SATvm, call};
use std::ffi::{c_char, c_int, c_long};
use std::sync::Arc;
use std::time::Duration;

/// "host:port,host:port,..." as addresses.
fn sentinel_list(list: &str) -> Result<Vec<Addr>> {
    let mut out = Vec::new();
    for item in list.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let bad = || Error::new(BOOT_PARM_ERR, format!("sentinel {item:?}: write host:port"));
        let (host, port) = item.rsplit_once(':').ok_or_else(bad)?;
        let port = port.parse::<u16>().ok().filter(|&p| p > 0).ok_or_else(bad)?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() {
            return Err(bad());
        }
        out.push(Addr::Tcp { host: host.to_owned(), port });
    }
    if out.is_empty() {
        return Err(Error::new(CONDIT_IS_NIL, "no sentinel given: write \"host:port,host:port,...\""));
    }
    Ok(out)
}

/// The body of lTvmConnectSentinel and lTvmConnectSentinelTls.
///
/// # Safety
/// `sentinels` and `master` are NULL or NUL-terminated strings.
unsafe fn connect_sentinel(
    h: &mut SATvm,
    sentinels: *const c_char,
    master: *const c_char,
    timeout_secs: c_int,
    tls: Option<Arc<Tls>>,
) -> CallResult {
    if sentinels.is_null() || master.is_null() {
        return Err(Error::new(CONDIT_IS_NIL, "NULL sentinels or master name").into());
    }
    // SAFETY: C callers pass NUL-terminated strings.
    let (list, name) = unsafe { (text(sentinels), text(master)) };
    if name.is_empty() {
        return Err(Error::new(CONDIT_IS_NIL, "empty master name").into());
    }
    let addrs = sentinel_list(&list)?;
    let timeout = u64::try_from(timeout_secs).ok().filter(|&s| s > 0).map(Duration::from_secs);
    if let Some(old) = state_mut(h).net.take() {
        let _ = old.close();
    }
    let st = state_mut(h);
    let watchers = Sentinels::new(addrs, name, Dial { tls: tls.clone(), auth: st.sentinel_auth.clone() });
    let dial = Dial { tls, auth: st.auth.clone() };
    st.net = Some(Client::connect_sentinel(watchers, timeout, dial)?);
    Ok(0)
}

/// Connects handle p to the Redis master that the sentinels call `master`
/// (`sentinel monitor <master> ...`), and follows it through failovers.
/// `sentinels` is "host:port,host:port,..." (IPv6: "[::1]:26379"); they
/// are asked in turn (`SENTINEL get-master-addr-by-name`), the one that
/// answered first next time, and the server they name must answer ROLE
/// with "master". Afterwards, when a call finds the master gone (its
/// connection refused, lost or timed out), demoted (`-READONLY`) or cut
/// off (`-MASTERDOWN`), the sentinels are asked again and the handle
/// reconnects to the master they name, retrying within `timeout_secs`
/// (0 or less: within 30 s). A call the server certainly did not execute
/// (a connection that could not be made, READONLY, MASTERDOWN) is then
/// sent again to the new master and succeeds; a call whose connection
/// broke before its answer fails with its SOCK_* code (it may or may not
/// have been executed: a push may then be there twice if retried) and
/// the next call goes to the new master. lTvmPopLease waits through a
/// failover (a lease taken and unanswered runs out and is delivered
/// again). Asynchronous pushes cut by a failover are reported by lAsyWait,
/// and those after it go to the new master. With lTvmRequireReplicas a
/// push that returned RC_SUCC is on the master and on that many replicas,
/// one of which the sentinels promote. Handles that share this handle's
/// connection (lTvmShare) do not follow the master: give each its own.
/// Credentials: lTvmAuth for the master and replicas, lTvmSentinelAuth for
/// the sentinels (which may have their own password), both before this
/// call. Otherwise as lTvmConnect (timeouts, keys, calls).
/// Threads: as lTvmConnect.
/// Errors: CONDIT_IS_NIL (NULL handle, sentinels or master; empty list or
/// name), BOOT_PARM_ERR (an item that is not host:port), SOCK_CONN_ERR,
/// SOCK_CONN_TMO and the other SOCK_* codes (no sentinel answered, or the
/// master could not be reached in time: the message says which),
/// SVR_EXCEPTION (no sentinel knows `master`, or the server named is not a
/// master in time).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lTvmConnectSentinel(
    p: *mut SATvm,
    sentinels: *const c_char,
    master: *const c_char,
    timeout_secs: c_int,
) -> c_long {
    // SAFETY: C callers pass NULL or NUL-terminated strings.
    let body = |h: &mut SATvm| unsafe { connect_sentinel(h, sentinels, master, timeout_secs, None) };
    // SAFETY: C callers pass NULL or a handle made by pGetSATvm/pCloneSATvm.
    unsafe { call(p, body) }
}

/// As lTvmConnectSentinel, over TLS: the sentinels and the master (and its
/// successors) are reached with TLS as `tls` says (see TvmTls and
/// lTvmConnectTls: one configuration for both; a server_name, if set, must
/// be on every certificate). Errors: those of lTvmConnectSentinel and the
/// TLS ones of lTvmConnectTls.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lTvmConnectSentinelTls(
    p: *mut SATvm,
    sentinels: *const c_char,
    master: *const c_char,
    timeout_secs: c_int,
    tls: *const TvmTls,
) -> c_long {
    let body = |h: &mut SATvm| {
        // SAFETY: C callers pass NULL or their TvmTls with its size set.
        let config = unsafe { tls_config(tls) }?;
        // SAFETY: C callers pass NULL or NUL-terminated strings.
        unsafe { connect_sentinel(h, sentinels, master, timeout_secs, Some(config)) }
    };
    // SAFETY: C callers pass NULL or a handle made by pGetSATvm/pCloneSATvm.
    unsafe { call(p, body) }
}

/// Sets the credentials handle p gives the sentinels of lTvmConnectSentinel
/// (`AUTH password`, or `AUTH user password`): a sentinel started with its
/// own password (`requirepass` in its configuration, which is not the
/// master's: the master's is given with lTvmAuth). Call it before
/// lTvmConnectSentinel. `password` NULL clears them. The strings are
/// copied. Threading: as lTvmConnect.
/// Returns RC_SUCC; errors: CONDIT_IS_NIL (NULL handle, or a user without
/// a password). A sentinel that refuses them is skipped as one that does
/// not answer (the message of the failed connect quotes its answer).
///
/// # Safety
/// `p` is NULL or a live handle; `user` and `password` are NULL or
/// NUL-terminated strings.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lTvmSentinelAuth(p: *mut SATvm, user: *const c_char, password: *const c_char) -> c_long {
    let body = |h: &mut SATvm| {
        // SAFETY: C callers pass NULL or NUL-terminated strings.
        state_mut(h).sentinel_auth = unsafe { credentials(user, password) }?;
        Ok(0)
    };
    // SAFETY: C callers pass NULL or a handle made by pGetSATvm/pCloneSATvm.
    unsafe { call(p, body) }
}
