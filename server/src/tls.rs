//! TLS (`--tls-port`): the rustls configuration made once at the start from
//! the PEM files of the options (so that a bad file fails the start, not
//! the first client), and the handshake each TLS connection goes through on
//! its worker before it is served as any other.

use crate::config::ServeArgs;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::path::Path;
use std::sync::Arc;
use tokio_rustls::TlsAcceptor;
use tvm::error::{BOOT_PARM_ERR, Error};

/// The TLS side of the server, when `--tls-port` is given.
pub(crate) type Acceptor = TlsAcceptor;

/// The certificates of a PEM file (at least one).
fn certificates(path: &Path, what: &str) -> Result<Vec<CertificateDer<'static>>, Error> {
    let bad = |e: &dyn std::fmt::Display| Error::new(BOOT_PARM_ERR, format!("{what} {}: {e}", path.display()));
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| bad(&e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(&e))?;
    if certs.is_empty() {
        return Err(bad(&"no CERTIFICATE in it"));
    }
    Ok(certs)
}

/// Makes the acceptor of the options' files, or says which file is wrong
/// and why (BOOT_PARM_ERR). None without `--tls-port`.
pub(crate) fn acceptor(args: &ServeArgs) -> Result<Option<Acceptor>, Error> {
    if args.tls_port.is_none() {
        return Ok(None);
    }
    let missing = |opt: &str| Error::new(BOOT_PARM_ERR, format!("--tls-port needs {opt}"));
    let cert_file = args.tls_cert_file.as_deref().ok_or_else(|| missing("--tls-cert-file"))?;
    let key_file = args.tls_key_file.as_deref().ok_or_else(|| missing("--tls-key-file"))?;
    let chain = certificates(cert_file, "--tls-cert-file")?;
    let key = PrivateKeyDer::from_pem_file(key_file).map_err(|e| {
        Error::new(BOOT_PARM_ERR, format!("--tls-key-file {}: no usable private key: {e}", key_file.display()))
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::new(BOOT_PARM_ERR, format!("TLS: {e}")))?;
    let builder = match &args.tls_ca_cert_file {
        Some(ca_file) => {
            let mut roots = rustls::RootCertStore::empty();
            for ca in certificates(ca_file, "--tls-ca-cert-file")? {
                roots
                    .add(ca)
                    .map_err(|e| Error::new(BOOT_PARM_ERR, format!("--tls-ca-cert-file {}: {e}", ca_file.display())))?;
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| Error::new(BOOT_PARM_ERR, format!("--tls-ca-cert-file {}: {e}", ca_file.display())))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let config = builder.with_single_cert(chain, key).map_err(|e| {
        // rustls says "keys may not be consistent: KeyMismatch".
        let why = match e {
            rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch) => {
                "the key is not the certificate's (they do not belong together)".to_string()
            }
            e => e.to_string(),
        };
        Error::new(
            BOOT_PARM_ERR,
            format!("--tls-cert-file {} and --tls-key-file {}: {why}", cert_file.display(), key_file.display()),
        )
    })?;
    Ok(Some(TlsAcceptor::from(Arc::new(config))))
}
