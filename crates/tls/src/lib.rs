//! memfleet's TLS plumbing, shared by the server, the router and the client library: rustls
//! with the *ring* provider, certificates and keys read from PEM files, a server
//! configuration that can be replaced while the process runs (SIGHUP), and client
//! configurations for connections to servers.
//!
//! What this crate is not: the transports. The server drives a rustls session over its
//! own non-blocking socket loop (`memfleet_server::transport`); the router and the client
//! use `tokio_rustls` streams (re-exported here so that every crate uses the same
//! versions).
//!
//! # Reload
//!
//! [`ServerTls`] keeps the current `rustls::ServerConfig` in an `ArcSwap`. Every handshake
//! loads it once; [`ServerTls::reload`] builds a new one from the same files and swaps it
//! in, so new connections get the new certificate while established ones keep the session
//! they negotiated. A new configuration that does not load (a missing file, a key that does
//! not match, a truncated PEM) is refused and the old one stays in service.

pub use rustls;
pub use tokio_rustls;

use anyhow::{bail, Context};
use arc_swap::ArcSwap;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite};

/// How long a client gets to complete its handshake before the connection is closed (a
/// silent client must not hold a connection slot forever).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The files a TLS listener is configured from (memcached's `ssl_chain_cert`, `ssl_key`,
/// `ssl_ca_cert` and `ssl_verify_mode`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerTlsFiles {
    /// The certificate chain, PEM, leaf first.
    pub cert: PathBuf,
    /// The private key, PEM (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// CA certificates client certificates are checked against, PEM. With it, a client
    /// that presents a certificate must present a valid one.
    pub ca: Option<PathBuf>,
    /// Refuse clients without a valid certificate (needs `ca`).
    pub verify_client: bool,
}

impl ServerTlsFiles {
    /// The settings from optional flags, checked for consistency: TLS is on with a
    /// certificate and a key, off with neither, and a CA or client verification needs it on.
    pub fn from_options(
        cert: Option<PathBuf>,
        key: Option<PathBuf>,
        ca: Option<PathBuf>,
        verify_client: bool,
    ) -> anyhow::Result<Option<ServerTlsFiles>> {
        match (cert, key) {
            (Some(cert), Some(key)) => {
                if verify_client && ca.is_none() {
                    bail!("--tls-verify-client needs --tls-ca, the CA client certificates are checked against");
                }
                Ok(Some(ServerTlsFiles {
                    cert,
                    key,
                    ca,
                    verify_client,
                }))
            }
            (None, None) if ca.is_some() || verify_client => {
                bail!("--tls-ca and --tls-verify-client need TLS on: --tls-cert and --tls-key")
            }
            (None, None) => Ok(None),
            (Some(_), None) => bail!("--tls-cert needs --tls-key"),
            (None, Some(_)) => bail!("--tls-key needs --tls-cert"),
        }
    }
}

/// A TLS listener's state: the configuration in service and what happened to it.
pub struct ServerTls {
    files: ServerTlsFiles,
    config: ArcSwap<ServerConfig>,
    new_sessions: AtomicU64,
    handshake_errors: AtomicU64,
    reloads: AtomicU64,
    reload_errors: AtomicU64,
    refreshed: Mutex<Instant>,
}

/// A snapshot of a TLS listener's counters (memcached's names where it has them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServerTlsStats {
    /// Completed handshakes (`ssl_new_sessions`).
    pub new_sessions: u64,
    /// Handshakes that failed or timed out (`ssl_handshake_errors`).
    pub handshake_errors: u64,
    /// Certificate reloads that took effect (`tls_reloads`).
    pub reloads: u64,
    /// Certificate reloads refused, the old certificate kept (`tls_reload_errors`).
    pub reload_errors: u64,
    /// Seconds since the certificate in service was loaded (`time_since_server_cert_refresh`).
    pub since_refresh: u64,
}

impl ServerTls {
    /// Loads the files; fails if they do not make a working configuration.
    pub fn load(files: ServerTlsFiles) -> anyhow::Result<ServerTls> {
        let config = server_config(&files)?;
        Ok(ServerTls {
            files,
            config: ArcSwap::from_pointee(config),
            new_sessions: AtomicU64::new(0),
            handshake_errors: AtomicU64::new(0),
            reloads: AtomicU64::new(0),
            reload_errors: AtomicU64::new(0),
            refreshed: Mutex::new(Instant::now()),
        })
    }

    /// The files this listener reads.
    pub fn files(&self) -> &ServerTlsFiles {
        &self.files
    }

    /// Reads the files again and, if they make a working configuration, serves new
    /// handshakes with it; otherwise keeps the one in service and says why.
    pub fn reload(&self) -> anyhow::Result<()> {
        match server_config(&self.files) {
            Ok(config) => {
                self.config.store(Arc::new(config));
                self.reloads.fetch_add(1, Ordering::Relaxed);
                *self.refreshed.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
                tracing::info!(cert = %self.files.cert.display(), "TLS certificate reloaded");
                Ok(())
            }
            Err(e) => {
                self.reload_errors.fetch_add(1, Ordering::Relaxed);
                tracing::error!(
                    error = format!("{e:#}"),
                    "TLS certificate reload failed; keeping the certificate in service"
                );
                Err(e)
            }
        }
    }

    /// The configuration new handshakes use.
    pub fn current(&self) -> Arc<ServerConfig> {
        self.config.load_full()
    }

    /// Runs the server side of a handshake on `io` with the configuration in service,
    /// within [`HANDSHAKE_TIMEOUT`], and counts the outcome.
    pub async fn accept<IO>(&self, io: IO) -> std::io::Result<tokio_rustls::server::TlsStream<IO>>
    where
        IO: AsyncRead + AsyncWrite + Unpin,
    {
        let acceptor = tokio_rustls::TlsAcceptor::from(self.current());
        let outcome = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(io)).await {
            Ok(r) => r,
            Err(_) => Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "TLS handshake timed out",
            )),
        };
        match &outcome {
            Ok(_) => self.new_sessions.fetch_add(1, Ordering::Relaxed),
            Err(_) => self.handshake_errors.fetch_add(1, Ordering::Relaxed),
        };
        outcome
    }

    /// The counters now.
    pub fn stats(&self) -> ServerTlsStats {
        let refreshed = *self.refreshed.lock().unwrap_or_else(|e| e.into_inner());
        ServerTlsStats {
            new_sessions: self.new_sessions.load(Ordering::Relaxed),
            handshake_errors: self.handshake_errors.load(Ordering::Relaxed),
            reloads: self.reloads.load(Ordering::Relaxed),
            reload_errors: self.reload_errors.load(Ordering::Relaxed),
            since_refresh: refreshed.elapsed().as_secs(),
        }
    }
}

impl ServerTlsStats {
    /// `(name, value)` pairs for `stats`, memcached's names first.
    pub fn pairs(&self) -> [(&'static str, u64); 5] {
        [
            ("ssl_handshake_errors", self.handshake_errors),
            ("ssl_new_sessions", self.new_sessions),
            ("time_since_server_cert_refresh", self.since_refresh),
            ("tls_reloads", self.reloads),
            ("tls_reload_errors", self.reload_errors),
        ]
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    // Named explicitly rather than installed process-wide: another crate in the process
    // may enable a second provider, and then rustls cannot pick a default.
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Builds a server configuration from PEM files.
pub fn server_config(files: &ServerTlsFiles) -> anyhow::Result<ServerConfig> {
    let certs = read_certs(&files.cert)?;
    let key = read_key(&files.key)?;
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?;
    let builder = match (&files.ca, files.verify_client) {
        (None, true) => bail!("verifying client certificates needs a CA file (--tls-ca)"),
        (None, false) => builder.with_no_client_auth(),
        (Some(ca), required) => {
            let roots = Arc::new(read_roots(ca)?);
            let verifier = WebPkiClientVerifier::builder_with_provider(roots, provider());
            let verifier = if required {
                verifier
            } else {
                verifier.allow_unauthenticated()
            };
            builder.with_client_cert_verifier(
                verifier
                    .build()
                    .with_context(|| format!("client CA {}", ca.display()))?,
            )
        }
    };
    builder.with_single_cert(certs, key).with_context(|| {
        format!(
            "certificate {} with key {}",
            files.cert.display(),
            files.key.display()
        )
    })
}

/// The TLS settings of connections to servers: whom to trust, optionally who we are.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClientTlsFiles {
    /// CA certificates the servers' certificates are checked against, PEM.
    pub ca: PathBuf,
    /// Our certificate chain, for servers that verify clients, PEM.
    pub cert: Option<PathBuf>,
    /// Its private key, PEM.
    pub key: Option<PathBuf>,
}

/// Builds a client configuration from PEM files.
pub fn client_config(files: &ClientTlsFiles) -> anyhow::Result<ClientConfig> {
    let roots = read_roots(&files.ca)?;
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .with_root_certificates(roots);
    match (&files.cert, &files.key) {
        (None, None) => Ok(builder.with_no_client_auth()),
        (Some(cert), Some(key)) => builder
            .with_client_auth_cert(read_certs(cert)?, read_key(key)?)
            .with_context(|| {
                format!(
                    "client certificate {} with key {}",
                    cert.display(),
                    key.display()
                )
            }),
        _ => bail!("a client certificate needs both a certificate and a key file"),
    }
}

/// The name a server's certificate must carry: a DNS name or an IP address.
pub fn server_name(name: &str) -> anyhow::Result<ServerName<'static>> {
    ServerName::try_from(name.to_string()).with_context(|| format!("not a server name: {name:?}"))
}

fn read_certs(path: &Path) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_file_iter(path)
        .with_context(|| format!("reading certificates from {}", path.display()))?
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("reading certificates from {}", path.display()))?;
    if certs.is_empty() {
        bail!("no certificate in {}", path.display());
    }
    Ok(certs)
}

fn read_key(path: &Path) -> anyhow::Result<PrivateKeyDer<'static>> {
    PrivateKeyDer::from_pem_file(path)
        .with_context(|| format!("reading a private key from {}", path.display()))
}

fn read_roots(path: &Path) -> anyhow::Result<RootCertStore> {
    let mut roots = RootCertStore::empty();
    for cert in read_certs(path)? {
        roots
            .add(cert)
            .with_context(|| format!("CA certificate in {}", path.display()))?;
    }
    Ok(roots)
}
