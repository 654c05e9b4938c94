//! The network calls of the C API (thin): lTvmConnect, lTvmConnectTls (and
//! its TvmTls), lTvmAuth, lTvmPush, lTvmPop, lTvmPopup, lAsyPush, lAsyWait, lTvmShare,
//! vTvmDisconnect, over
//! [`crate::client`]. The handle's connection lives behind m_pPriv, looked
//! at only by these calls.

use super::common::{MallocArray, counted, pop_one, popup, record, text, wait_mode};
use super::handle::state_mut;
use super::{CallResult, Fail, SATvm, TABLE, Uenum, call};
use crate::client::{Addr, Auth, Client, Dial, PopWait, Sentinels, Tls, TlsOptions};
use crate::error::*;
use std::ffi::{CStr, OsStr, c_char, c_int, c_long, c_void};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// The handle's client, or SERV_NOT_CONN.
pub(super) fn client(h: &mut SATvm) -> Result<&mut Client> {
    if h.m_pPriv.is_null() {
        return Err(Error::new(SERV_NOT_CONN, "call lTvmConnect first"));
    }
    state_mut(h).net.as_mut().ok_or_else(|| Error::new(SERV_NOT_CONN, "call lTvmConnect first"))
}

/// For a pop: the handle's client, queue and record size; SERV_NOT_CONN, or
/// RECD_TOO_LONG for lSize 0 (no record fits).
pub(super) fn popping(h: &mut SATvm) -> Result<(&mut Client, TABLE, usize)> {
    let (t, each) = (h.tblName, h.lSize);
    let c = client(h)?;
    if each == 0 {
        return Err(Error::new(RECD_TOO_LONG, "lSize 0"));
    }
    Ok((c, t, each))
}

/// The body of lTvmPush and lAsyPush: hands the bound record and its queue
/// to `send` on the handle's client. m_lEffect = 1 on success.
///
/// # Safety
/// As [`record`], for the handle's `pstVoid` and `lSize`.
unsafe fn push_with(h: &mut SATvm, send: impl FnOnce(&mut Client, TABLE, &[u8]) -> Result<()>) -> CallResult {
    let t = h.tblName;
    // SAFETY: the caller bound pstVoid to lSize bytes (queueinit and friends).
    let rec = unsafe { record(h.pstVoid, h.lSize) }?;
    send(client(h)?, t, rec)?;
    Ok(1)
}

/// Connects handle p to a server speaking the Redis protocol: tvmq serve, a
/// redis-server or any node of a Redis Cluster (found out here; then every
/// command goes to the node owning its queue, following MOVED and ASK).
/// `ip`: a host name or address, or a unix socket path (starting with '/';
/// `port` is then ignored). STVM's port is 5050.
/// `timeout_secs` > 0 bounds the connection, each write and each reply
/// (more exactly: each wait for reply bytes), except the blocking pops,
/// which wait as long as they were asked to; 0 or less: no limit.
/// The handle gets its own connection (pCloneSATvm never copies it; see
/// lTvmShare to share one). A handle already connected is disconnected
/// first (as vTvmDisconnect). The queue of each call is p->tblName, its key
/// on the server its decimal id ("21"), each record one value of p->lSize
/// bytes.
/// After a network failure (SOCK_*) the handle stays connected in name:
/// its next call connects again (and fails with SOCK_CONN_ERR while the
/// server is away). A call in progress when the connection broke is never
/// sent again.
/// Errors: CONDIT_IS_NIL (NULL handle or ip, empty ip), SOCK_CONN_ERR
/// (refused, unknown host, no socket file, bad port), SOCK_CONN_TMO (no
/// answer within the timeout), SOCK_ERR_CRTE (no socket), SOCK_READ_TMO and
/// the other SOCK_* codes (the server did not answer the first command).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lTvmConnect(p: *mut SATvm, ip: *mut c_char, port: c_long, timeout_secs: c_int) -> c_long {
    // SAFETY: C callers pass NULL or a NUL-terminated string.
    let body = |h: &mut SATvm| unsafe { connect(h, ip, port, timeout_secs, None) };
    // SAFETY: C callers pass NULL or a handle made by pGetSATvm/pCloneSATvm.
    unsafe { call(p, body) }
}

/// The body of lTvmConnect and lTvmConnectTls (`tls`: made from the
/// caller's TvmTls).
///
/// # Safety
/// `ip` is NULL or a NUL-terminated string.
unsafe fn connect(
    h: &mut SATvm,
    ip: *const c_char,
    port: c_long,
    timeout_secs: c_int,
    tls: Option<Arc<Tls>>,
) -> CallResult {
    if ip.is_null() {
        return Err(Error::new(CONDIT_IS_NIL, "NULL ip").into());
    }
    // SAFETY: C callers pass a NUL-terminated string.
    let ip = unsafe { text(ip) };
    if ip.is_empty() {
        return Err(Error::new(CONDIT_IS_NIL, "empty ip").into());
    }
    let addr = if ip.starts_with('/') {
        Addr::Unix(ip.into())
    } else {
        let port = u16::try_from(port)
            .ok()
            .filter(|&p| p > 0)
            .ok_or_else(|| Error::new(SOCK_CONN_ERR, format!("port {port} is not 1 to 65535")))?;
        let host = ip.trim_start_matches('[').trim_end_matches(']').to_owned();
        Addr::Tcp { host, port }
    };
    let timeout = u64::try_from(timeout_secs).ok().filter(|&s| s > 0).map(Duration::from_secs);
    if let Some(old) = state_mut(h).net.take() {
        let _ = old.close();
    }
    let dial = Dial { tls, auth: state_mut(h).auth.clone() };
    state_mut(h).net = Some(Client::connect_with(addr, timeout, dial)?);
    Ok(0)
}

/// The options of lTvmConnectTls. Zero it, set `size`, then the fields
/// wanted:
///
/// ```c
/// TvmTls tls;
/// memset(&tls, 0, sizeof(tls));
/// tls.size = sizeof(tls);
/// tls.ca_file = "/etc/tvmq/ca.crt";
/// ```
///
/// Every string is NUL-terminated (a file path or a host name) and is read
/// during the call only. Files are PEM.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct TvmTls {
    /// sizeof(TvmTls) as the program was compiled. Later versions of the
    /// library add fields at the end only: a program built with an older
    /// tvm.h keeps working, and one built with a newer tvm.h is accepted by
    /// an older library as long as the fields that library does not know
    /// are zero (otherwise BOOT_PARM_ERR: an option would be ignored).
    pub size: usize,
    /// The CAs that sign the server's certificate. NULL: the system's
    /// bundle ($SSL_CERT_FILE, else /etc/ssl/certs/ca-certificates.crt or
    /// the other usual paths).
    pub ca_file: *const c_char,
    /// The client certificate chain (leaf first), for a server that
    /// requires one (tvmq serve --tls-ca-cert-file, Redis's
    /// tls-auth-clients); NULL: none. Goes with key_file.
    pub cert_file: *const c_char,
    /// cert_file's private key (PKCS#8, PKCS#1 or SEC1); NULL: none.
    pub key_file: *const c_char,
    /// The name the server's certificate must carry, also sent as SNI.
    /// NULL: the host given to lTvmConnectTls (a name or an IP address).
    /// Set it when connecting by an address the certificate does not name.
    pub server_name: *const c_char,
    /// Non-zero: accept any server certificate. Tests only: whoever is on
    /// the path can then read and change everything, the password included.
    pub insecure: c_int,
}

/// The fields of a TvmTls, owned (its strings as paths and names).
///
/// # Safety
/// `t` points to `t.size` readable bytes, its strings NULL or NUL-terminated.
unsafe fn tls_options(t: *const TvmTls) -> Result<TlsOptions> {
    // SAFETY: the caller's TvmTls begins with its size.
    let size = unsafe { std::ptr::addr_of!((*t).size).read() };
    let ours = size_of::<TvmTls>();
    if size < ours {
        return Err(Error::new(BOOT_PARM_ERR, format!("TvmTls.size {size}: set it to sizeof(TvmTls) ({ours})")));
    }
    // SAFETY: the caller's struct has `size` readable bytes, ours among them.
    let extra = unsafe { std::slice::from_raw_parts(t.cast::<u8>().add(ours), size - ours) };
    if extra.iter().any(|&b| b != 0) {
        return Err(Error::new(BOOT_PARM_ERR, "TvmTls: fields this library does not know are set (a newer tvm.h)"));
    }
    // SAFETY: as above; the struct is plain data.
    let t = unsafe { t.read() };
    let path = |p: *const c_char| {
        if p.is_null() {
            return None;
        }
        // SAFETY: non-NULL, and NUL-terminated by the caller's contract.
        let bytes = unsafe { CStr::from_ptr(p) }.to_bytes();
        Some(PathBuf::from(OsStr::from_bytes(bytes)))
    };
    Ok(TlsOptions {
        ca_file: path(t.ca_file),
        cert_file: path(t.cert_file),
        key_file: path(t.key_file),
        // SAFETY: as for the paths.
        server_name: (!t.server_name.is_null()).then(|| unsafe { text(t.server_name) }),
        insecure: t.insecure != 0,
    })
}

/// The TLS configuration of a caller's TvmTls (CONDIT_IS_NIL when NULL),
/// for lTvmConnectTls and lTvmConnectSentinelTls.
///
/// # Safety
/// `tls` is NULL or as [`tls_options`] requires.
unsafe fn tls_config(tls: *const TvmTls) -> Result<Arc<Tls>> {
    if tls.is_null() {
        return Err(Error::new(CONDIT_IS_NIL, "NULL tls"));
    }
    // SAFETY: non-NULL, and the caller's TvmTls by this function's contract.
    Tls::new(&unsafe { tls_options(tls) }?)
}

/// As lTvmConnect, with TLS: connects handle p to a server speaking the
/// Redis protocol over TLS (tvmq serve --tls-port, redis-server
/// --tls-port), checking its certificate as `tls` says (see TvmTls). The
/// timeout bounds the handshake as it bounds the connection. The handle
/// keeps the configuration: its reconnections, the connection of its
/// blocking pops, the handles sharing its connection (lTvmShare) and the
/// other nodes of a Redis Cluster use the same certificates (a cluster's
/// nodes are checked against server_name, else the address the cluster
/// gives for them). The files are read during this call only.
/// Threads: as lTvmConnect (one thread at a time per handle); no global
/// initialisation is needed, and threads may connect at the same time.
/// Errors: CONDIT_IS_NIL (NULL p, ip or tls; empty ip), BOOT_PARM_ERR
/// (tls->size too small or unknown fields set; cert_file without key_file
/// or the reverse; a file with no usable certificate or key; a key that is
/// not the certificate's; a server name that is not one), FIL_NOT_EXIST (a
/// file that does not exist), RMT_NOT_SUPPT (ip is a unix socket path: TLS
/// is for TCP), SOCK_COM_EXCP (the handshake failed: a server certificate
/// no trusted CA signed, not for this name, or expired; a server that does
/// not speak TLS; a server that refused the client certificate or wants
/// one: with TLS 1.3 it says so after the handshake, at the first command,
/// which this call sends), and those of lTvmConnect (SOCK_CONN_TMO: no
/// answer, or no complete handshake, within the timeout).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lTvmConnectTls(
    p: *mut SATvm,
    ip: *const c_char,
    port: c_long,
    timeout_secs: c_int,
    tls: *const TvmTls,
) -> c_long {
    let body = |h: &mut SATvm| {
        // SAFETY: C callers pass NULL or their TvmTls with its size set.
        let config = unsafe { tls_config(tls) }?;
        // SAFETY: C callers pass NULL or a NUL-terminated string.
        unsafe { connect(h, ip, port, timeout_secs, Some(config)) }
    };
    // SAFETY: C callers pass NULL or a handle made by pGetSATvm/pCloneSATvm.
    unsafe { call(p, body) }
}

/// Sets the credentials that handle p's connections give the server
/// (`AUTH password`, or `AUTH user password` when `user` is not NULL),
/// for a server started with a password (tvmq serve --requirepass, Redis's
/// requirepass or ACL users). Call it before lTvmConnect or lTvmConnectTls:
/// every connection the handle opens from then on (the first, those after a
/// network failure, a shared handle's blocking-pop connection, the other
/// nodes of a Redis Cluster) sends AUTH first, and a connection whose AUTH
/// is refused fails with SOCK_COM_EXCP (its message quotes the server's
/// answer, e.g. WRONGPASS). A connection already open is not changed:
/// connect again. `password` NULL clears the credentials. The strings are
/// copied; over plain TCP they cross the network in clear text (see
/// lTvmConnectTls). Threading: as lTvmConnect (one thread per handle).
/// Returns RC_SUCC; errors: CONDIT_IS_NIL (NULL handle, or a user without
/// a password).
///
/// # Safety
/// `p` is NULL or a live handle; `user` and `password` are NULL or
/// NUL-terminated strings.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lTvmAuth(p: *mut SATvm, user: *const c_char, password: *const c_char) -> c_long {
    let body = |h: &mut SATvm| {
        // SAFETY: C callers pass NULL or NUL-terminated strings.
        state_mut(h).auth = unsafe { credentials(user, password) }?;
        Ok(0)
    };
    // SAFETY: C callers pass NULL or a handle made by pGetSATvm/pCloneSATvm.
    unsafe { call(p, body) }
}

/// The credentials `user` (NULL: none) and `password` (NULL with no user:
/// none at all).
///
/// # Safety
/// `user` and `password` are NULL or NUL-terminated strings.
unsafe fn credentials(user: *const c_char, password: *const c_char) -> Result<Option<Arc<Auth>>> {
    let bytes = |s: *const c_char| {
        // SAFETY: the caller's contract: NULL or a NUL-terminated string.
        (!s.is_null()).then(|| unsafe { CStr::from_ptr(s) }.to_bytes().to_vec())
    };
    match (bytes(user), bytes(password)) {
        (None, None) => Ok(None),
        (Some(_), None) => Err(Error::new(CONDIT_IS_NIL, "a user without a password")),
        (user, Some(password)) => Ok(Some(Arc::new(Auth { user, password }))),
    }
}

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

/// Makes handle p use the connection of handle `src` (already connected):
/// the commands of every handle sharing a connection are pipelined
/// together (auto-pipelining), so that N threads doing synchronous calls
/// cost about one round trip per batch instead of one each. Each handle
/// still gets its own answers, errors and asynchronous window; blocking
/// pops (lTvmPop QUE_NORMAL on an empty queue, lTvmPopup with secs > 0)
/// wait on a connection of their handle's own, opened when first needed,
/// so as not to hold up the others. p's own connection, if any, is closed
/// first (as vTvmDisconnect). vTvmDisconnect(p) leaves `src` and the other
/// sharers connected; the connection closes with its last handle.
/// Threads: call it before p and src are used by other threads (it changes
/// both); afterwards each thread uses its own handle as usual.
/// Errors: CONDIT_IS_NIL (NULL p or src), SERV_NOT_CONN (src not connected).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lTvmShare(p: *mut SATvm, src: *mut SATvm) -> c_long {
    let body = |h: &mut SATvm| {
        if src.is_null() {
            return Err(Error::new(CONDIT_IS_NIL, "NULL src").into());
        }
        if std::ptr::eq(src, &*h) {
            return client(h).map(|_| 0).map_err(Fail::from);
        }
        // SAFETY: non-NULL and not p; C callers pass a handle made by
        // pGetSATvm/pCloneSATvm that no other thread uses during this call.
        let s = unsafe { &mut *src };
        let shared = client(s)?.share();
        if let Some(old) = state_mut(h).net.replace(shared) {
            let _ = old.close();
        }
        Ok(0)
    };
    // SAFETY: C callers pass NULL or a handle made by pGetSATvm/pCloneSATvm.
    unsafe { call(p, body) }
}

/// Closes handle p's connection, after waiting for the answers of its
/// asynchronous pushes (as lAsyWait: when it returns, every record pushed
/// with lAsyPush is in its queue, or m_lErrno / lGetTErrno() give the first
/// failure and m_lEffect how many went in), and after putting back the
/// values it kept (see lTvmPop). Later network calls give SERV_NOT_CONN
/// until lTvmConnect. On a handle that never connected (a handle that made
/// only local calls, NULL) it does nothing else: the handle stays usable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vTvmDisconnect(p: *mut SATvm) {
    let body = |h: &mut SATvm| {
        if h.m_pPriv.is_null() {
            return Ok(0);
        }
        let Some(c) = state_mut(h).net.take() else { return Ok(0) };
        let (n, stop) = c.close();
        counted(n, stop)
    };
    // SAFETY: C callers pass NULL or a handle made by pGetSATvm/pCloneSATvm.
    unsafe { call(p, body) };
}

/// As lPush, on the server: appends the p->lSize bytes at p->pstVoid to
/// queue p->tblName (RPUSH) and waits for the answer (up to the timeout of
/// lTvmConnect). m_lEffect = 1 on success.
/// A push whose connection broke before its answer came fails with a SOCK_*
/// code and may or may not be in the queue; it is never sent again.
/// Errors: CONDIT_IS_NIL, SERV_NOT_CONN (not connected), the SOCK_* codes
/// (SOCK_CONN_ERR: reconnecting failed; SOCK_READ_TMO: no answer within the
/// timeout; SOCK_IO_RESET: the server closed the connection; SOCK_SEND_TMO,
/// SOCK_SEND_ERR, SOCK_READ_ERR; SOCK_COM_EXCP: a reply that makes no sense),
/// and the server's: DATA_SPC_FULL, RECD_TOO_LONG, TBL_NOT_FOUND (tvmq serve),
/// SVR_EXCEPTION (any other error reply, e.g. Redis's WRONGTYPE or OOM).
/// Threads: one handle per thread (or shared connections: lTvmShare).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lTvmPush(p: *mut SATvm) -> c_long {
    let body = |h: &mut SATvm| {
        // SAFETY: the caller bound pstVoid to lSize bytes (queueinit and friends).
        unsafe { push_with(h, Client::push) }
    };
    // SAFETY: C callers pass NULL or a handle made by pGetSATvm/pCloneSATvm.
    unsafe { call(p, body) }
}

/// As lPop, on the server: removes the oldest record of queue p->tblName
/// into `out` (p->lSize bytes; a shorter record is followed by zero bytes).
/// QUE_NOWAIT: NO_DATA_FOUND at once when empty (LPOP). QUE_NORMAL: waits
/// until a record comes, however long (BLPOP with no timeout; the timeout of
/// lTvmConnect does not apply). m_lEffect = 1 on success.
/// A record longer than p->lSize is never cut and never lost: the call
/// fails with RECD_TOO_LONG and the handle keeps the record; the next
/// lTvmPop / lTvmPopup of that queue on this handle with an lSize big
/// enough returns it first. vTvmDisconnect (and vCloneFree) put such kept
/// records back: at the head of the list on Redis (LPUSH, in their order),
/// at the tail on tvmq serve (its queues are FIFO at both ends).
/// Errors: CONDIT_IS_NIL (NULL out), NOT_SUPPT_OPT (other wait flag),
/// RECD_TOO_LONG (also with lSize 0: nothing is taken), NO_DATA_FOUND,
/// SHM_ERR_EIDRM (tvmq serve: dropped while waiting), and those of lTvmPush.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lTvmPop(p: *mut SATvm, out: *mut c_void, wait: Uenum) -> c_long {
    let take = |h: &mut SATvm, buf: &mut [u8], wait| {
        let (c, t, _) = popping(h)?;
        c.pop(t, buf, wait)
    };
    let body = |h: &mut SATvm| {
        // SAFETY: the caller provides `out` with at least p->lSize writable bytes.
        unsafe { pop_one(h, out, || wait_mode(wait, PopWait::Forever, PopWait::NoWait), take) }
    };
    // SAFETY: C callers pass NULL or a handle made by pGetSATvm/pCloneSATvm.
    unsafe { call(p, body) }
}

/// As lPopup, on the server: pops up to `expect` records of queue
/// p->tblName into a new malloc'd array (`*out`, p->lSize bytes per record,
/// zero-filled after shorter ones; free it with free() or TFree).
/// secs > 0: waits up to secs seconds in total for `expect` records (BLPOP
/// with the time left when the queue is empty). secs == 0: takes what is
/// there (LPOP with a count), without waiting.
/// Returns RC_SUCC with `expect` records, or (secs == 0) with at least one.
/// RC_FAIL with MQUE_WAIT_TMO: timed out with some (`*out_n` = m_lEffect =
/// count, array valid). RC_FAIL with NO_DATA_FOUND: none (`*out` = NULL).
/// A record longer than p->lSize stops the call with RECD_TOO_LONG (the
/// records before it are returned; it and those popped after it are kept
/// by the handle, as lTvmPop says). Any other error after some records also
/// returns them in `*out`.
/// Errors also: CONDIT_IS_NIL (NULL pointers, expect 0, secs < 0),
/// RECD_TOO_LONG (lSize 0), MALLC_MEM_ERR, and those of lTvmPush.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lTvmPopup(
    p: *mut SATvm,
    expect: usize,
    secs: libc::time_t,
    out_n: *mut usize,
    out: *mut *mut c_void,
) -> c_long {
    let take = |h: &mut SATvm, array: &mut MallocArray| {
        let (c, t, each) = popping(h)?;
        // The count it returns is the array's length (the records the array took).
        let (_, stop) = c.popup(t, each, expect, secs as u64, &mut |rec| array.push(rec));
        Ok(stop)
    };
    let body = |h: &mut SATvm| {
        // SAFETY: C callers pass NULL or writable pointers as out_n and out.
        unsafe { popup(h, expect, secs, out_n, out, take) }
    };
    // SAFETY: C callers pass NULL or a handle made by pGetSATvm/pCloneSATvm.
    unsafe { call(p, body) }
}

/// Pushes the record bound to p (as lTvmPush) without waiting for the
/// answer: RC_SUCC means it is on its way (m_lEffect = 1). Records wait in
/// the handle until about 64 KB of them are there, the window is full, or
/// another call of the handle (lTvmPush, lTvmPop, lAsyWait, vTvmDisconnect)
/// sends them; their order is kept. At most 1,024 pushes of a handle are
/// unanswered at a time: the next one waits for answers. No failure is
/// dropped: lAsyWait (or vTvmDisconnect) reports the first one; until then,
/// lAsyPush fails at once with that code and sends nothing.
/// Call lAsyWait or vTvmDisconnect before the program exits, or the records
/// still in the handle are not sent.
/// Errors: CONDIT_IS_NIL, SERV_NOT_CONN, the first failure of an earlier
/// asynchronous push (any code lTvmPush gives), SOCK_CONN_ERR (reconnecting
/// failed).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lAsyPush(p: *mut SATvm) -> c_long {
    let body = |h: &mut SATvm| {
        // SAFETY: the caller bound pstVoid to lSize bytes (queueinit and friends).
        unsafe { push_with(h, Client::push_async) }
    };
    // SAFETY: C callers pass NULL or a handle made by pGetSATvm/pCloneSATvm.
    unsafe { call(p, body) }
}

/// Sends what lAsyPush left in the handle and waits for the answer of every
/// asynchronous push of handle p. RC_SUCC: every record pushed with
/// lAsyPush since the last lAsyWait is in its queue; m_lEffect = how many.
/// RC_FAIL: m_lErrno is the first failure (a server error such as
/// DATA_SPC_FULL, or a SOCK_* code), m_lEffect how many records went in
/// (pushes after a failed one may have gone in and are counted). When the
/// connection broke, the records whose answer had not come may or may not
/// be in the queue (they are not counted, and never sent again). Either way
/// the handle is ready for more asynchronous pushes.
/// Errors: CONDIT_IS_NIL, SERV_NOT_CONN, and those of lTvmPush.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lAsyWait(p: *mut SATvm) -> c_long {
    let body = |h: &mut SATvm| -> CallResult {
        let (n, stop) = client(h)?.wait_async();
        counted(n, stop)
    };
    // SAFETY: C callers pass NULL or a handle made by pGetSATvm/pCloneSATvm.
    unsafe { call(p, body) }
}

/// As lDropTable, on the server: drops queue t (DEL). On tvmq serve the
/// queue's file goes (clients blocked on it get SHM_ERR_EIDRM; with
/// --auto-create a later push makes a new one); on Redis the list goes (a
/// later push makes a new one, as Redis does for any list). A queue that
/// does not exist is no error (a Redis list that was emptied does not
/// exist either): RC_SUCC with m_lEffect = 0; 1 when it existed.
/// Errors: CONDIT_IS_NIL, SERV_NOT_CONN, and the SOCK_* codes of lTvmPush.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lTvmDropTable(p: *mut SATvm, t: TABLE) -> c_long {
    let body = |h: &mut SATvm| -> CallResult { Ok(usize::from(client(h)?.drop_queue(t)?)) };
    // SAFETY: C callers pass NULL or a handle made by pGetSATvm/pCloneSATvm.
    unsafe { call(p, body) }
}

/// As lResetLock, on tvmq serve: its repair of queue t (TVMQ.REPAIR, as
/// `tvmq repair`), m_lEffect = the records recovered. A redis-server has no
/// lock to reset: RMT_NOT_SUPPT, nothing sent.
/// Errors: CONDIT_IS_NIL, SERV_NOT_CONN, RMT_NOT_SUPPT, TBL_NOT_FOUND, and
/// the SOCK_* codes of lTvmPush.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lTvmResetLock(p: *mut SATvm, t: TABLE) -> c_long {
    let body = |h: &mut SATvm| -> CallResult { Ok(client(h)?.repair(t)? as usize) };
    // SAFETY: C callers pass NULL or a handle made by pGetSATvm/pCloneSATvm.
    unsafe { call(p, body) }
}

/// As lCount, on the server: sets `*n` (and m_lEffect) to how many records
/// queue p->tblName holds (LLEN; 0 for a Redis list that does not exist).
/// Errors: CONDIT_IS_NIL (NULL handle or n), SERV_NOT_CONN, TBL_NOT_FOUND
/// (tvmq serve), and the SOCK_* codes of lTvmPush.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lTvmCount(p: *mut SATvm, n: *mut usize) -> c_long {
    let body = |h: &mut SATvm| -> CallResult {
        if n.is_null() {
            return Err(Error::new(CONDIT_IS_NIL, "NULL count").into());
        }
        let t = h.tblName;
        let depth = client(h)?.count(t)? as usize;
        // SAFETY: checked non-NULL; the caller provides a writable size_t.
        unsafe { *n = depth };
        Ok(depth)
    };
    // SAFETY: C callers pass NULL or a handle made by pGetSATvm/pCloneSATvm.
    unsafe { call(p, body) }
}

/// As lTruncate, on the server: removes the records queue t holds (LLEN,
/// then LTRIM of that many from the head: records pushed meanwhile stay;
/// the queue itself stays). m_lEffect = the records counted.
/// Errors: CONDIT_IS_NIL, SERV_NOT_CONN, TBL_NOT_FOUND (tvmq serve), and the
/// SOCK_* codes of lTvmPush.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lTvmTruncate(p: *mut SATvm, t: TABLE) -> c_long {
    let body = |h: &mut SATvm| -> CallResult { Ok(client(h)?.truncate(t)? as usize) };
    // SAFETY: C callers pass NULL or a handle made by pGetSATvm/pCloneSATvm.
    unsafe { call(p, body) }
}

/// From now on a write of handle p returns RC_SUCC only once `replicas`
/// replicas of the Redis master have it: lTvmPush, lTvmAck, lTvmRelease,
/// lTvmReject, lTvmExtendLease and lTvmCreateQueueEx send `WAIT replicas
/// timeout_ms` with their command (in the same write on the handle's own
/// connection to a Redis: one round trip; after the answer on a shared
/// connection or a Redis Cluster), and lAsyWait sends one WAIT per queue
/// pushed to since the last lAsyWait. When fewer replicas have the write
/// within `timeout_ms`, the call fails with REPL_TIMEOUT: the write was
/// done on the master, but a failover may lose it (the record may or may
/// not be there); lAsyWait then reports REPL_TIMEOUT with m_lEffect = the
/// records that went in. A master with fewer replicas than asked: every
/// write fails so, after the timeout. lTvmPopLease and the pops are not
/// waited for (a lease lost in a failover is delivered again). `replicas`
/// 0 turns it off. Call it after lTvmConnect (which resets it): it holds
/// for the handle's connection, its reconnections, and handles that
/// lTvmShare it afterwards.
/// Threads: one handle per thread, as lTvmConnect.
/// Errors: CONDIT_IS_NIL (NULL handle, negative replicas, timeout_ms < 1
/// with replicas > 0), SERV_NOT_CONN, NOT_SUPPT_OPT (a server without
/// replicas: tvmq serve).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lTvmRequireReplicas(p: *mut SATvm, replicas: c_long, timeout_ms: c_long) -> c_long {
    let body = |h: &mut SATvm| -> CallResult {
        let count = u32::try_from(replicas)
            .map_err(|_| Error::new(CONDIT_IS_NIL, format!("replicas {replicas}: 0 or more")))?;
        let ms = u64::try_from(timeout_ms).ok().filter(|&ms| ms > 0 || count == 0).ok_or_else(|| {
            Error::new(CONDIT_IS_NIL, format!("timeout {timeout_ms} ms: 1 or more (WAIT 0 would wait forever)"))
        })?;
        client(h)?.require_replicas(count, Duration::from_millis(ms))?;
        Ok(0)
    };
    // SAFETY: C callers pass NULL or a handle made by pGetSATvm/pCloneSATvm.
    unsafe { call(p, body) }
}

/// Spreads queue t, on handle p, over `shards` keys of the Redis Cluster
/// (or Redis) p is connected to: one logical queue whose shards are spread
/// evenly over the cluster's hash slots, so that with at least as many
/// shards as masters (and the equal slot ranges `redis-cli --cluster
/// create` gives) every master holds some, and a hot queue's load is
/// shared by all of them. Shard i is the key "<t>.<i>.<n>", n the smallest
/// number from 0 whose key's slot is in the i-th of `shards` equal parts of
/// the 16384 slots (a rule any client can follow). From then on, on this
/// handle: lTvmPush and lAsyPush of queue t go to the shards in turn;
/// lTvmPop and lTvmPopLease start at the next shard in turn and take from
/// the first that has a record (FIFO within a shard, not across shards;
/// lTvmPop finding its shard empty asks every shard's length in one round
/// trip; a waiting pop waits on one shard at a time for at most 200 ms);
/// lTvmCount sums the shards; lTvmDropTable drops them all;
/// lTvmCreateQueueEx stores the lease options on every shard (a lease
/// token names its shard). Every program using the queue must spread it
/// with the same `shards`. lTvmPopup and lTvmTruncate of a spread queue
/// fail with NOT_SUPPT_OPT. `shards` 0 or 1: queue t is one key again.
/// Threads: one handle per thread, as lTvmConnect.
/// Errors: CONDIT_IS_NIL (NULL handle, shards < 0 or more than 1024),
/// SERV_NOT_CONN, NOT_SUPPT_OPT (tvmq serve: no spread queues).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lTvmSpread(p: *mut SATvm, t: TABLE, shards: c_long) -> c_long {
    let body = |h: &mut SATvm| -> CallResult {
        let n = usize::try_from(shards).map_err(|_| Error::new(CONDIT_IS_NIL, format!("{shards} shards")))?;
        client(h)?.set_spread(t, n)?;
        Ok(0)
    };
    // SAFETY: C callers pass NULL or a handle made by pGetSATvm/pCloneSATvm.
    unsafe { call(p, body) }
}
