//! TLS for the network client (lTvmConnectTls): the rustls configuration,
//! made once from the caller's files and kept by the handle for every
//! connection it opens (reconnections, a blocking pop's own connection,
//! the nodes of a cluster), and the record layer driven over the same
//! blocking socket calls as plain connections (so that timeouts,
//! `MSG_NOSIGNAL` and non-blocking peeks behave the same).

use crate::error::*;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, ClientConnection, DigitallySignedStruct, SignatureScheme};
use std::os::fd::RawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What the caller asks for (lTvmConnectTls's TvmTls, owned).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct TlsOptions {
    /// PEM file of the CAs to trust; None: the system's bundle.
    pub(crate) ca_file: Option<PathBuf>,
    /// Client certificate chain and its key (PEM), shown when the server asks.
    pub(crate) cert_file: Option<PathBuf>,
    pub(crate) key_file: Option<PathBuf>,
    /// The name to verify the certificate against (and to send as SNI);
    /// None: the host connected to.
    pub(crate) server_name: Option<String>,
    /// Verify no certificate (tests only).
    pub(crate) insecure: bool,
}

/// The configuration every TLS connection of a handle is made with.
pub(crate) struct Tls {
    config: Arc<ClientConfig>,
    server_name: Option<ServerName<'static>>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls").field("server_name", &self.server_name).finish_non_exhaustive()
    }
}

/// Where the usual systems keep their CA bundle (the first that exists is
/// read when the caller names none and SSL_CERT_FILE is not set).
const SYSTEM_BUNDLES: [&str; 4] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/ssl/cert.pem",
];

fn file_error(path: &Path, what: &str, e: &dyn std::fmt::Display) -> Error {
    let missing = !path.exists();
    Error::new(if missing { FIL_NOT_EXIST } else { BOOT_PARM_ERR }, format!("TLS {what} {}: {e}", path.display()))
}

fn certificates(path: &Path, what: &str) -> Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| file_error(path, what, &e))?
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| file_error(path, what, &e))?;
    if certs.is_empty() {
        return Err(file_error(path, what, &"no CERTIFICATE in it"));
    }
    Ok(certs)
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl Tls {
    /// Reads the files of `o` and makes the configuration.
    /// Errors: FIL_NOT_EXIST (a file that does not exist), BOOT_PARM_ERR (a
    /// file with no usable certificate or key, a key that is not the
    /// certificate's, a certificate without its key, a bad server name).
    pub(crate) fn new(o: &TlsOptions) -> Result<Arc<Tls>> {
        let provider = provider();
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::new(BOOT_PARM_ERR, format!("TLS: {e}")))?;
        let builder = if o.insecure {
            let algs = provider.signature_verification_algorithms;
            builder.dangerous().with_custom_certificate_verifier(Arc::new(NoVerification(algs)))
        } else {
            builder.with_root_certificates(roots(o.ca_file.as_deref())?)
        };
        let config = match (&o.cert_file, &o.key_file) {
            (Some(cert_file), Some(key_file)) => {
                let chain = certificates(cert_file, "cert_file")?;
                let key = PrivateKeyDer::from_pem_file(key_file)
                    .map_err(|e| file_error(key_file, "key_file", &format!("no usable private key: {e}")))?;
                builder.with_client_auth_cert(chain, key).map_err(|e| {
                    // rustls says "keys may not be consistent: KeyMismatch".
                    let why = match e {
                        rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch) => {
                            "the key is not the certificate's (they do not belong together)".to_string()
                        }
                        e => e.to_string(),
                    };
                    Error::new(
                        BOOT_PARM_ERR,
                        format!("TLS cert_file {} and key_file {}: {why}", cert_file.display(), key_file.display()),
                    )
                })?
            }
            (None, None) => builder.with_no_client_auth(),
            _ => return Err(Error::new(BOOT_PARM_ERR, "TLS: cert_file and key_file go together")),
        };
        let server_name = match &o.server_name {
            Some(name) => Some(
                ServerName::try_from(name.clone())
                    .map_err(|e| Error::new(BOOT_PARM_ERR, format!("TLS server_name {name:?}: {e}")))?,
            ),
            None => None,
        };
        Ok(Arc::new(Tls { config: Arc::new(config), server_name }))
    }

    /// A client session for a connection to `host`.
    /// Errors: BOOT_PARM_ERR (a host that is no valid name to verify).
    pub(crate) fn session(&self, host: &str) -> Result<ClientConnection> {
        let name = match &self.server_name {
            Some(n) => n.clone(),
            None => ServerName::try_from(host.to_owned())
                .map_err(|e| Error::new(BOOT_PARM_ERR, format!("TLS: {host:?} is no name to verify: {e}")))?,
        };
        ClientConnection::new(self.config.clone(), name)
            .map_err(|e| Error::new(SOCK_COM_EXCP, format!("TLS: cannot start a session: {e}")))
    }
}

/// The CAs of `ca_file`, or of the system's bundle.
fn roots(ca_file: Option<&Path>) -> Result<rustls::RootCertStore> {
    let mut roots = rustls::RootCertStore::empty();
    match ca_file {
        Some(path) => {
            for ca in certificates(path, "ca_file")? {
                roots.add(ca).map_err(|e| file_error(path, "ca_file", &e))?;
            }
        }
        None => {
            let env = std::env::var_os("SSL_CERT_FILE").map(PathBuf::from);
            let path = env
                .or_else(|| SYSTEM_BUNDLES.iter().map(PathBuf::from).find(|p| p.exists()))
                .ok_or_else(|| Error::new(FIL_NOT_EXIST, "TLS: no ca_file given and no system CA bundle found"))?;
            // A system bundle may hold certificates webpki cannot parse: skip them.
            let (added, _) = roots.add_parsable_certificates(certificates(&path, "system CA bundle")?);
            if added == 0 {
                return Err(file_error(&path, "system CA bundle", &"no usable CA in it"));
            }
        }
    }
    Ok(roots)
}

/// "insecure": every certificate is accepted (the handshake's signatures
/// are still checked, with the certificate's own key, so that the session
/// is at least with whoever holds that key).
#[derive(Debug)]
struct NoVerification(WebPkiSupportedAlgorithms);

impl ServerCertVerifier for NoVerification {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_schemes()
    }
}

/// The socket as rustls reads and writes it: `recv` and `send` with
/// `flags` (MSG_DONTWAIT: not waiting), `send` with MSG_NOSIGNAL too. Errors keep their
/// errno, for the caller's codes.
pub(crate) struct FdIo {
    pub(crate) fd: RawFd,
    pub(crate) flags: libc::c_int,
}

impl std::io::Read for FdIo {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            // SAFETY: `buf` is a live, writable slice of `buf.len()` bytes;
            // fd is the socket of the connection that made this FdIo, open
            // while it is used.
            let n = unsafe { libc::recv(self.fd, buf.as_mut_ptr().cast(), buf.len(), self.flags) };
            if n >= 0 {
                return Ok(n as usize);
            }
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINTR) {
                return Err(e);
            }
        }
    }
}

impl std::io::Write for FdIo {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        loop {
            // SAFETY: `buf` is a live slice of `buf.len()` readable bytes; fd
            // as in `read`.
            let n = unsafe { libc::send(self.fd, buf.as_ptr().cast(), buf.len(), self.flags | libc::MSG_NOSIGNAL) };
            if n >= 0 {
                return Ok(n as usize);
            }
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINTR) {
                return Err(e);
            }
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
