//! A handle's connection: lTvmConnect, lTvmConnectTls (and its TvmTls),
//! lTvmAuth, lTvmShare, vTvmDisconnect.

use super::client::client;
use crate::client::{Addr, Auth, Client, Dial, Tls, TlsOptions};
use crate::error::*;
use crate::ffi::common::{counted, text};
use crate::ffi::handle::state_mut;
use crate::ffi::{CallResult, Fail, SATvm, call};
use std::ffi::{CStr, OsStr, c_char, c_int, c_long};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

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
pub(super) unsafe fn tls_config(tls: *const TvmTls) -> Result<Arc<Tls>> {
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
pub(super) unsafe fn credentials(user: *const c_char, password: *const c_char) -> Result<Option<Arc<Auth>>> {
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
