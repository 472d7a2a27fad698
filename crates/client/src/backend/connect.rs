//! How a backend's connection is made and judged: its settings ([`BackendOptions`]), the
//! TLS handshake and the memcached ASCII login every connection and probe runs before its
//! first request (`connect`, `login`), and why a connection could not be made
//! (`ConnectError`).

use super::BackendError;
use crate::outstanding::OutstandingLimit;
use memfleet_tls::rustls::pki_types::ServerName;
use memfleet_tls::tokio_rustls::TlsConnector;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

/// How a backend is reached and judged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackendOptions {
    /// Connections to open (requests are spread over them).
    pub connections: usize,
    /// Per-request timeout.
    pub timeout: Duration,
    /// Consecutive failures that mark the server down.
    pub failure_limit: u32,
    /// First pause before probing a down server.
    pub retry: Duration,
    /// The pool rehashes the server's keys while it is down (`auto_eject_hosts`): probe it
    /// every `retry` instead of backing off.
    pub eject: bool,
    /// TLS to the server; `None`: plain TCP.
    pub tls: Option<BackendTls>,
    /// memcached's ASCII authentication after connecting; `None`: none.
    pub auth: Option<BackendAuth>,
    /// The pool's cap on requests in flight to the server (`max_outstanding`); `None`: none.
    pub outstanding: Option<OutstandingLimit>,
}

/// How connections to one server authenticate: the login request, built once.
#[derive(Clone, PartialEq, Eq)]
pub struct BackendAuth {
    user: String,
    login: Arc<[u8]>,
    /// Binary SASL PLAIN (`login` is its packet), and every request carried in the binary
    /// protocol after it.
    sasl: bool,
}

impl BackendAuth {
    /// Authenticates as `user` with `password` (memcached's ASCII auth).
    pub fn new(
        user: &str,
        password: &[u8],
    ) -> Result<BackendAuth, memfleet_protocol::auth::LoginError> {
        let login = memfleet_protocol::auth::login_request(user.as_bytes(), password)?;
        Ok(BackendAuth {
            user: user.to_string(),
            login: login.into(),
            sasl: false,
        })
    }

    /// Authenticates as `user` with `password` by binary SASL PLAIN (memcached's `-S`); the
    /// connection then carries every request in the binary protocol.
    pub fn sasl(user: &str, password: &[u8]) -> BackendAuth {
        let mut login = Vec::new();
        memfleet_protocol::binary::sasl::plain_auth(&mut login, user.as_bytes(), password);
        BackendAuth {
            user: user.to_string(),
            login: login.into(),
            sasl: true,
        }
    }

    /// The user name.
    pub fn user(&self) -> &str {
        &self.user
    }
}

/// The password stays out of logs.
impl std::fmt::Debug for BackendAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackendAuth")
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

/// How connections to one server run TLS.
#[derive(Clone)]
pub struct BackendTls {
    /// The files the configuration was read from (what a reload compares).
    pub files: memfleet_tls::ClientTlsFiles,
    /// The name the server's certificate must carry.
    pub server_name: ServerName<'static>,
    connector: TlsConnector,
}

impl BackendTls {
    /// TLS with `config` (read from `files`), expecting `server_name` in the certificate.
    pub fn new(
        files: memfleet_tls::ClientTlsFiles,
        config: Arc<memfleet_tls::rustls::ClientConfig>,
        server_name: ServerName<'static>,
    ) -> BackendTls {
        BackendTls {
            files,
            server_name,
            connector: TlsConnector::from(config),
        }
    }
}

impl PartialEq for BackendTls {
    fn eq(&self, other: &Self) -> bool {
        self.files == other.files && self.server_name == other.server_name
    }
}

impl Eq for BackendTls {}

impl std::fmt::Debug for BackendTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackendTls")
            .field("files", &self.files)
            .field("server_name", &self.server_name)
            .finish_non_exhaustive()
    }
}

/// A connection's halves, over TCP or TLS.
type Halves = (
    Box<dyn AsyncRead + Unpin + Send>,
    Box<dyn AsyncWrite + Unpin + Send>,
);

/// Why a connection could not be made ready for requests.
pub(super) enum ConnectError {
    /// Connecting, the TLS handshake or the login did not complete (logged where it was
    /// noticed, when it says something a refused connection does not).
    Unreachable,
    /// The server refused the login: what it said.
    Refused(String),
}

impl ConnectError {
    /// What the requests waiting for the connection get.
    pub(super) fn to_backend(&self, addr: SocketAddr) -> BackendError {
        match self {
            ConnectError::Unreachable => BackendError::Connection(addr.to_string()),
            ConnectError::Refused(reply) => BackendError::Auth {
                server: addr.to_string(),
                reply: reply.clone(),
            },
        }
    }
}

/// Connects to `addr`, runs the TLS handshake when `tls` says so and logs in when `auth`
/// says so, all within `timeout`.
pub(super) async fn connect(
    addr: SocketAddr,
    tls: Option<&BackendTls>,
    auth: Option<&BackendAuth>,
    timeout: Duration,
) -> Result<Halves, ConnectError> {
    let ready = tokio::time::timeout(timeout, async {
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|_| ConnectError::Unreachable)?;
        let _ = stream.set_nodelay(true);
        let (mut rd, mut wr) = match tls {
            None => {
                let (rd, wr) = stream.into_split();
                (
                    Box::new(rd) as Box<dyn AsyncRead + Unpin + Send>,
                    Box::new(wr) as Box<dyn AsyncWrite + Unpin + Send>,
                )
            }
            Some(tls) => {
                let session = tls
                    .connector
                    .connect(tls.server_name.clone(), stream)
                    .await
                    .map_err(|e| {
                        tracing::warn!(server = %addr, error = %e, "TLS handshake failed");
                        ConnectError::Unreachable
                    })?;
                let (rd, wr) = tokio::io::split(session);
                (
                    Box::new(rd) as Box<dyn AsyncRead + Unpin + Send>,
                    Box::new(wr) as _,
                )
            }
        };
        if let Some(auth) = auth {
            let logged_in = if auth.sasl {
                sasl_login(&mut rd, &mut wr, auth).await
            } else {
                login(&mut rd, &mut wr, auth).await
            };
            logged_in.inspect_err(|e| {
                if let ConnectError::Refused(reply) = e {
                    tracing::warn!(server = %addr, user = %auth.user, %reply, "authentication failed");
                }
            })?;
            if auth.sasl {
                return Ok(super::binary_carrier::carried(rd, wr));
            }
        }
        Ok((rd, wr))
    })
    .await;
    ready.unwrap_or(Err(ConnectError::Unreachable))
}

/// memcached's ASCII login on a fresh connection: the `set`, then its one-line reply,
/// which must be `STORED`. Nothing else was sent, so the line is the whole reply.
pub(super) async fn login(
    rd: &mut (dyn AsyncRead + Unpin + Send),
    wr: &mut (dyn AsyncWrite + Unpin + Send),
    auth: &BackendAuth,
) -> Result<(), ConnectError> {
    send_login(wr, auth).await?;
    let mut line = Vec::with_capacity(64);
    let mut byte = [0u8; 1];
    // Byte by byte: the reply is one short line, read once per connection, and nothing
    // after it may be consumed here.
    while !line.ends_with(b"\r\n") {
        if line.len() > 1024 || !matches!(rd.read(&mut byte).await, Ok(1)) {
            return Err(ConnectError::Unreachable);
        }
        line.push(byte[0]);
    }
    if line == memfleet_protocol::auth::ACCEPTED {
        Ok(())
    } else {
        let reply = String::from_utf8_lossy(&line[..line.len() - 2]).into_owned();
        Err(ConnectError::Refused(reply))
    }
}

/// Binary SASL PLAIN on a fresh connection: the Auth packet, then its one response, which
/// must be a success ("Authenticated").
async fn sasl_login(
    rd: &mut (dyn AsyncRead + Unpin + Send),
    wr: &mut (dyn AsyncWrite + Unpin + Send),
    auth: &BackendAuth,
) -> Result<(), ConnectError> {
    send_login(wr, auth).await?;
    let mut head = [0u8; memfleet_protocol::binary::HEADER_LEN];
    rd.read_exact(&mut head)
        .await
        .map_err(|_| ConnectError::Unreachable)?;
    let h = memfleet_protocol::binary::Header::read(&head).ok_or(ConnectError::Unreachable)?;
    // "Authenticated" or "Auth failure.": a short body (a long one is not a SASL reply).
    if h.magic != memfleet_protocol::binary::RESPONSE_MAGIC || h.body_len > 1024 {
        return Err(ConnectError::Unreachable);
    }
    let mut body = vec![0u8; h.body_len as usize];
    rd.read_exact(&mut body)
        .await
        .map_err(|_| ConnectError::Unreachable)?;
    if h.vbucket_or_status == 0 {
        Ok(())
    } else {
        Err(ConnectError::Refused(
            String::from_utf8_lossy(&body).into_owned(),
        ))
    }
}

/// Writes the login request, whichever it is.
async fn send_login(
    wr: &mut (dyn AsyncWrite + Unpin + Send),
    auth: &BackendAuth,
) -> Result<(), ConnectError> {
    wr.write_all(&auth.login)
        .await
        .map_err(|_| ConnectError::Unreachable)?;
    wr.flush().await.map_err(|_| ConnectError::Unreachable)
}
