//! [`Client`]: the application's side of memfleet — every memcached command, routed by the
//! same pools and routes as `memfleet router` (a gutter, replicas, prefixes behave the same
//! embedded), under sliding-window flow control, with the paper's look-aside pattern
//! ([`Client::get_or_fill`]) built on leases.

use crate::route::{RequestClass, RequestForm, Route, RouteContext, RouteReply, RouteRequest};
use crate::udp::{UdpGets, UdpReply};
use crate::window::{RequestOutcome, Window};
use crate::{BackendError, Topology};
use memfleet_protocol::reply::{self, ReplyKind, ServerReply, Verdict};
use memfleet_protocol::StoreCommand;
use memfleet_routing::RouterConfig;
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The client-flags bit that marks a value this client compressed (lz4). Clear in the flags
/// an application sees and sets.
pub const FLAG_COMPRESSED: u32 = 1 << 30;

/// What went wrong with a request.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No reply: the server is down, timed out or the connection failed.
    #[error(transparent)]
    Unreachable(#[from] BackendError),
    /// The server answered with an error line (`SERVER_ERROR ...`, `CLIENT_ERROR ...`).
    #[error("the server said: {0}")]
    Server(String),
    /// A reply that does not parse.
    #[error("unexpected reply: {0:?}")]
    Protocol(String),
    /// A key memcached cannot take (empty, over 250 bytes, spaces or control characters).
    #[error("invalid key")]
    InvalidKey,
    /// A compressed value that does not decompress.
    #[error("corrupt compressed value: {0}")]
    Corrupt(String),
    /// serde could not encode or decode a typed value.
    #[error("serialization: {0}")]
    Serde(#[from] serde_json::Error),
}

/// A value as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Value {
    /// The bytes (decompressed).
    pub data: Vec<u8>,
    /// Client flags (without [`FLAG_COMPRESSED`]).
    pub flags: u32,
    /// The CAS unique, when asked for (`gets`).
    pub cas: Option<u64>,
}

/// What `lease-get` answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lease {
    /// The value.
    Hit(Value),
    /// A miss, and this caller holds the key's lease: fill with [`Client::lease_set`] and
    /// this token. `stale` is the recently deleted value, if the server kept one.
    Token {
        /// The lease token.
        token: u64,
        /// The stale value, if any.
        stale: Option<Value>,
    },
    /// A miss while another caller holds the lease: wait and ask again (or use `stale`).
    HotMiss {
        /// The stale value, if any.
        stale: Option<Value>,
    },
}

/// What a get over UDP found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UdpGet {
    /// The value.
    Hit(Value),
    /// Not in the cache.
    Miss,
    /// A datagram was dropped or reordered: a miss that must not be filled.
    Lost,
}

/// How `cas` went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CasOutcome {
    /// Stored.
    Stored,
    /// Someone changed the value since it was read.
    Exists,
    /// The key is gone.
    NotFound,
}

/// Client settings.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// Compress values at least this long (lz4); `None`: never.
    pub compress_above: Option<usize>,
    /// Flow-control window: initial, minimum and maximum outstanding requests.
    pub window: (usize, usize, usize),
    /// Look-aside: first pause after a hot miss (doubles up to `lease_retry_max`).
    pub lease_retry: Duration,
    /// Look-aside: longest pause between retries.
    pub lease_retry_max: Duration,
    /// Look-aside: how long to wait for another caller's fill before loading anyway
    /// (without filling).
    pub lease_wait: Duration,
    /// Look-aside: take a stale value rather than wait.
    pub accept_stale: bool,
    /// Send gets over UDP, to the same port number as the server's TCP port (memcached's
    /// `-U` equal to `-p`), waiting at most this long for a whole reply; `None`: TCP only.
    pub udp: Option<Duration>,
    /// Remote markers (paper §5) are stored under this prefix followed by the key; route
    /// the prefix to the regional pool that every cluster of the region shares.
    pub marker_prefix: String,
}

impl Default for ClientOptions {
    fn default() -> ClientOptions {
        ClientOptions {
            compress_above: Some(16 * 1024),
            window: (64, 2, 10_000),
            lease_retry: Duration::from_millis(2),
            lease_retry_max: Duration::from_millis(100),
            lease_wait: Duration::from_secs(2),
            accept_stale: false,
            udp: None,
            marker_prefix: "remote-marker:".into(),
        }
    }
}

/// A memcache client. Cheap to clone (clones share connections and the window).
#[derive(Clone)]
pub struct Client {
    topology: Arc<Topology>,
    root: Arc<Route>,
    window: Arc<Window>,
    options: Arc<ClientOptions>,
    lane: usize,
    udp: Option<Arc<UdpGets>>,
}

/// Lanes handed to clients, so that separate clients spread over a server's connections.
static LANES: AtomicUsize = AtomicUsize::new(0);

impl Client {
    /// A client for the route (or pool) called `route` of `config` — the same configuration
    /// a `memfleet router` reads. Must be called inside a tokio runtime.
    pub fn new(
        config: &RouterConfig,
        route: &str,
        options: ClientOptions,
    ) -> anyhow::Result<Client> {
        let topology = Arc::new(Topology::build(config, None)?);
        let root = topology
            .route(route)
            .ok_or_else(|| anyhow::anyhow!("no pool or route named {route:?}"))?;
        let (initial, min, max) = options.window;
        let udp = options
            .udp
            .map(|timeout| UdpGets::new(timeout).map(Arc::new))
            .transpose()?;
        Ok(Client {
            topology,
            root,
            window: Arc::new(Window::new(initial, min, max)),
            options: Arc::new(options),
            lane: LANES.fetch_add(1, Ordering::Relaxed),
            udp,
        })
    }

    /// A client for one ketama pool (libmemcached placement) of `servers` (`host:port`).
    pub fn with_servers(servers: &[&str]) -> anyhow::Result<Client> {
        let list: Vec<String> = servers.iter().map(|s| format!("\"{s}\"")).collect();
        let config = memfleet_routing::from_toml(&format!(
            "[pools.main]\nservers = [{}]\n",
            list.join(", ")
        ))?;
        Client::new(&config, "main", ClientOptions::default())
    }

    /// The flow-control window's size now.
    pub fn window_size(&self) -> usize {
        self.window.size()
    }

    /// Requests in flight now.
    pub fn outstanding(&self) -> usize {
        self.window.outstanding()
    }

    /// The pools and routes it runs (counters, spool depths).
    pub fn topology(&self) -> &Topology {
        &self.topology
    }

    fn ctx(&self) -> RouteContext {
        RouteContext {
            lane: self.lane,
            client: self.lane as u64,
        }
    }

    /// Sends one operation through the window and the route.
    async fn call(&self, op: RouteRequest) -> RouteReply {
        let slot = self.window.acquire().await;
        let reply = self.root.call(op, self.ctx()).await;
        slot.done(match &reply {
            Ok(_) => RequestOutcome::Replied,
            Err(BackendError::Timeout(_)) => RequestOutcome::TimedOut,
            Err(_) => RequestOutcome::Failed,
        });
        reply
    }

    async fn line(&self, op: RouteRequest) -> Result<String, Error> {
        let reply = self.call(op).await?;
        let line = String::from_utf8_lossy(&reply).trim_end().to_string();
        if line.starts_with("SERVER_ERROR") || line.starts_with("CLIENT_ERROR") || line == "ERROR" {
            return Err(Error::Server(line));
        }
        Ok(line)
    }

    // ---- retrieval ----

    /// `get`: the value, or `None` on a miss. Over UDP when the client has it on (a lost
    /// datagram is a miss too; [`Client::get_udp`] tells them apart).
    pub async fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Value>, Error> {
        match self.get_udp(key).await? {
            UdpGet::Hit(v) => Ok(Some(v)),
            UdpGet::Miss | UdpGet::Lost => Ok(None),
        }
    }

    /// A get over UDP straight to the key's server (TCP when UDP is off, the route sends
    /// gets elsewhere than one server, or the reply is too large for UDP).
    pub async fn get_udp(&self, key: impl AsRef<[u8]>) -> Result<UdpGet, Error> {
        let key = key.as_ref();
        check_key(key)?;
        let target = self
            .udp
            .as_ref()
            .and_then(|u| Some((u, self.root.get_target(key, self.ctx())?)));
        if let Some((udp, server)) = target {
            let mut request = b"get ".to_vec();
            request.extend_from_slice(key);
            request.extend_from_slice(b"\r\n");
            let slot = self.window.acquire().await;
            let reply = udp.request(server, &request).await;
            slot.done(match reply {
                Ok(UdpReply::Reply(_)) => RequestOutcome::Replied,
                Ok(UdpReply::Lost) => RequestOutcome::TimedOut,
                Err(_) => RequestOutcome::Failed,
            });
            match reply {
                Ok(UdpReply::Lost) => return Ok(UdpGet::Lost),
                // An error (too large for UDP, say): TCP below.
                Ok(UdpReply::Reply(r)) if reply::verdict(&r) != Verdict::Failed => {
                    return match parse_retrieval(&r)? {
                        Retrieved::Value(v) => Ok(UdpGet::Hit(decode(v)?)),
                        Retrieved::Miss => Ok(UdpGet::Miss),
                        Retrieved::Lease { .. } => Err(Error::Protocol("LVALUE to a get".into())),
                    };
                }
                // Too large for UDP, or the socket failed: TCP below.
                _ => {}
            }
        }
        Ok(match self.retrieve(key, b"get").await? {
            Some(v) => UdpGet::Hit(v),
            None => UdpGet::Miss,
        })
    }

    /// The UDP side's counters, when UDP is on.
    pub fn udp_counters(&self) -> Option<&crate::udp::UdpCounters> {
        self.udp.as_deref().map(UdpGets::counters)
    }

    /// `gets`: the value with its CAS unique.
    pub async fn gets(&self, key: impl AsRef<[u8]>) -> Result<Option<Value>, Error> {
        self.retrieve(key.as_ref(), b"gets").await
    }

    /// `gat`: get and set a new TTL.
    pub async fn gat(&self, key: impl AsRef<[u8]>, ttl: u32) -> Result<Option<Value>, Error> {
        self.retrieve(key.as_ref(), format!("gat {ttl}").as_bytes())
            .await
    }

    async fn retrieve(&self, key: &[u8], head: &[u8]) -> Result<Option<Value>, Error> {
        check_key(key)?;
        let op = RouteRequest {
            class: RequestClass::Get,
            key: key.to_vec(),
            form: RequestForm::Get {
                head: head.to_vec(),
            },
        };
        let reply = self.call(op).await?;
        match parse_retrieval(&reply)? {
            Retrieved::Value(v) => Ok(Some(decode(v)?)),
            Retrieved::Miss => Ok(None),
            Retrieved::Lease { .. } => Err(Error::Protocol("LVALUE to a get".into())),
        }
    }

    /// Fetches many keys at once: all are sent together (each server's connection writes
    /// everything queued in one go, so a server gets its keys in one round trip, as far as
    /// the flow-control window allows).
    /// Keys whose server fails are left out, like misses.
    pub async fn get_many<K: AsRef<[u8]>>(
        &self,
        keys: &[K],
    ) -> Result<HashMap<Vec<u8>, Value>, Error> {
        for k in keys {
            check_key(k.as_ref())?;
        }
        // Polled together: every get takes its window slot and queues its request in the
        // same pass, so each server's connection writes them all at once.
        let replies =
            futures_util::future::join_all(keys.iter().map(|k| self.get(k.as_ref()))).await;
        let mut out = HashMap::new();
        for (k, r) in keys.iter().zip(replies) {
            match r {
                Ok(Some(v)) => {
                    out.insert(k.as_ref().to_vec(), v);
                }
                Ok(None) | Err(Error::Unreachable(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    // ---- storage ----

    async fn store(
        &self,
        command: StoreCommand,
        key: &[u8],
        value: &[u8],
        flags: u32,
        ttl: u32,
        cas: u64,
    ) -> Result<String, Error> {
        check_key(key)?;
        let (data, flags) = self.encode(value, flags);
        let op = RouteRequest {
            class: RequestClass::Set,
            key: key.to_vec(),
            form: RequestForm::Store {
                command,
                flags,
                exptime: i64::from(ttl),
                cas,
                data: data.into(),
            },
        };
        self.line(op).await
    }

    /// `set`.
    pub async fn set(&self, key: impl AsRef<[u8]>, value: &[u8], ttl: u32) -> Result<(), Error> {
        self.set_with_flags(key, value, 0, ttl).await
    }

    /// `set` with client flags.
    pub async fn set_with_flags(
        &self,
        key: impl AsRef<[u8]>,
        value: &[u8],
        flags: u32,
        ttl: u32,
    ) -> Result<(), Error> {
        let line = self
            .store(StoreCommand::Set, key.as_ref(), value, flags, ttl, 0)
            .await?;
        expect(&line, "STORED")
    }

    /// `add`: true if stored (the key was absent).
    pub async fn add(&self, key: impl AsRef<[u8]>, value: &[u8], ttl: u32) -> Result<bool, Error> {
        let line = self
            .store(StoreCommand::Add, key.as_ref(), value, 0, ttl, 0)
            .await?;
        stored(&line)
    }

    /// `replace`: true if stored (the key was present).
    pub async fn replace(
        &self,
        key: impl AsRef<[u8]>,
        value: &[u8],
        ttl: u32,
    ) -> Result<bool, Error> {
        let line = self
            .store(StoreCommand::Replace, key.as_ref(), value, 0, ttl, 0)
            .await?;
        stored(&line)
    }

    /// `append` (never compressed: the bytes are joined on the server).
    pub async fn append(&self, key: impl AsRef<[u8]>, value: &[u8]) -> Result<bool, Error> {
        self.concat(StoreCommand::Append, key.as_ref(), value).await
    }

    /// `prepend` (never compressed).
    pub async fn prepend(&self, key: impl AsRef<[u8]>, value: &[u8]) -> Result<bool, Error> {
        self.concat(StoreCommand::Prepend, key.as_ref(), value)
            .await
    }

    async fn concat(&self, command: StoreCommand, key: &[u8], value: &[u8]) -> Result<bool, Error> {
        check_key(key)?;
        let op = RouteRequest {
            class: RequestClass::Set,
            key: key.to_vec(),
            form: RequestForm::Store {
                command,
                flags: 0,
                exptime: 0,
                cas: 0,
                data: value.into(),
            },
        };
        stored(&self.line(op).await?)
    }

    /// `cas`: store only if the value is still the one read with `cas`.
    pub async fn cas(
        &self,
        key: impl AsRef<[u8]>,
        value: &[u8],
        ttl: u32,
        cas: u64,
    ) -> Result<CasOutcome, Error> {
        let line = self
            .store(StoreCommand::Cas, key.as_ref(), value, 0, ttl, cas)
            .await?;
        match line.as_str() {
            "STORED" => Ok(CasOutcome::Stored),
            "EXISTS" => Ok(CasOutcome::Exists),
            "NOT_FOUND" => Ok(CasOutcome::NotFound),
            _ => Err(Error::Protocol(line)),
        }
    }

    /// `delete`: true if the key was there. This is how caches are invalidated after a
    /// database write: deletes are idempotent, updates are not (paper §3.1).
    pub async fn delete(&self, key: impl AsRef<[u8]>) -> Result<bool, Error> {
        self.delete_holding_off(key, 0).await
    }

    /// `delete <key> <seconds>`: delete, and refuse `add`s for the hold-off.
    pub async fn delete_holding_off(
        &self,
        key: impl AsRef<[u8]>,
        holdoff: u32,
    ) -> Result<bool, Error> {
        let key = key.as_ref();
        check_key(key)?;
        let op = RouteRequest {
            class: RequestClass::Delete,
            key: key.to_vec(),
            form: RequestForm::Delete { holdoff },
        };
        match self.line(op).await?.as_str() {
            "DELETED" => Ok(true),
            "NOT_FOUND" => Ok(false),
            other => Err(Error::Protocol(other.into())),
        }
    }

    /// `incr`: the new value, or `None` if the key is absent.
    pub async fn incr(&self, key: impl AsRef<[u8]>, delta: u64) -> Result<Option<u64>, Error> {
        self.arith(b"incr ", key.as_ref(), delta).await
    }

    /// `decr` (stops at 0).
    pub async fn decr(&self, key: impl AsRef<[u8]>, delta: u64) -> Result<Option<u64>, Error> {
        self.arith(b"decr ", key.as_ref(), delta).await
    }

    async fn arith(&self, head: &[u8], key: &[u8], delta: u64) -> Result<Option<u64>, Error> {
        check_key(key)?;
        let line = self
            .line(RouteRequest::raw(
                RequestClass::Set,
                key,
                head,
                format!(" {delta}\r\n").into_bytes(),
                ReplyKind::Line,
            ))
            .await?;
        if line == "NOT_FOUND" {
            return Ok(None);
        }
        line.parse().map(Some).map_err(|_| Error::Protocol(line))
    }

    /// `touch`: true if the key was there.
    pub async fn touch(&self, key: impl AsRef<[u8]>, ttl: u32) -> Result<bool, Error> {
        let key = key.as_ref();
        check_key(key)?;
        let line = self
            .line(RouteRequest::raw(
                RequestClass::Set,
                key,
                b"touch ",
                format!(" {ttl}\r\n").into_bytes(),
                ReplyKind::Line,
            ))
            .await?;
        match line.as_str() {
            "TOUCHED" => Ok(true),
            "NOT_FOUND" => Ok(false),
            _ => Err(Error::Protocol(line)),
        }
    }

    /// A meta command (`mg`, `ms`, `md`, `ma`) with its flags as memcached's protocol writes
    /// them, and for `ms` the data; returns the reply (status line, and data for `VA`).
    /// Routed by `key` like every other command.
    pub async fn meta(
        &self,
        command: &str,
        key: impl AsRef<[u8]>,
        flags: &str,
        data: Option<&[u8]>,
    ) -> Result<Vec<u8>, Error> {
        let key = key.as_ref();
        check_key(key)?;
        let class = match command {
            "mg" => RequestClass::Get,
            "ms" | "ma" => RequestClass::Set,
            "md" => RequestClass::Delete,
            _ => return Err(Error::Protocol(format!("not a meta command: {command}"))),
        };
        let mut tail = Vec::new();
        if command == "ms" {
            let data = data.unwrap_or_default();
            tail.extend_from_slice(format!(" {}", data.len()).as_bytes());
        }
        if !flags.is_empty() {
            tail.push(b' ');
            tail.extend_from_slice(flags.as_bytes());
        }
        tail.extend_from_slice(b"\r\n");
        if command == "ms" {
            tail.extend_from_slice(data.unwrap_or_default());
            tail.extend_from_slice(b"\r\n");
        }
        let head = format!("{command} ");
        let op = RouteRequest::raw(class, key, head.as_bytes(), tail, ReplyKind::Meta);
        Ok(self.call(op).await?)
    }

    /// `flush_all` on every server the client's route reaches; the first failure wins.
    pub async fn flush_all(&self) -> Result<(), Error> {
        let mut pools = Vec::new();
        self.root.pools(&mut pools);
        let calls: Vec<_> = pools
            .iter()
            .flat_map(|p| p.backends().iter())
            .map(|b| b.call(self.lane, b"flush_all\r\n".to_vec(), ReplyKind::Line))
            .collect();
        for c in calls {
            let reply = c.await?;
            if reply != b"OK\r\n" {
                return Err(Error::Server(
                    String::from_utf8_lossy(&reply).trim_end().into(),
                ));
            }
        }
        Ok(())
    }

    /// `version` of every server the route reaches: (server, version).
    pub async fn versions(&self) -> Vec<(String, Result<String, Error>)> {
        let mut pools = Vec::new();
        self.root.pools(&mut pools);
        let mut out = Vec::new();
        for b in pools.iter().flat_map(|p| p.backends().iter()) {
            let reply = b
                .call(self.lane, b"version\r\n".to_vec(), ReplyKind::Line)
                .await;
            let version = match reply {
                Ok(r) => match String::from_utf8_lossy(&r)
                    .trim_end()
                    .strip_prefix("VERSION ")
                {
                    Some(v) => Ok(v.to_string()),
                    None => Err(Error::Protocol(String::from_utf8_lossy(&r).into_owned())),
                },
                Err(e) => Err(e.into()),
            };
            out.push((b.name().to_string(), version));
        }
        out
    }

    // ---- leases and look-aside ----

    /// mcrouter's `lease-get` (served by memfleet's server).
    pub async fn lease_get(&self, key: impl AsRef<[u8]>) -> Result<Lease, Error> {
        let key = key.as_ref();
        check_key(key)?;
        let op = RouteRequest {
            class: RequestClass::Get,
            key: key.to_vec(),
            form: RequestForm::Get {
                head: b"lease-get".to_vec(),
            },
        };
        let reply = self.call(op).await?;
        match parse_retrieval(&reply)? {
            Retrieved::Value(v) => Ok(Lease::Hit(decode(v)?)),
            Retrieved::Miss => Ok(Lease::HotMiss { stale: None }),
            Retrieved::Lease { token, stale } => {
                let stale = match stale {
                    Some(v) if !v.data.is_empty() => Some(decode(v)?),
                    _ => None,
                };
                Ok(if token == 1 {
                    Lease::HotMiss { stale }
                } else {
                    Lease::Token { token, stale }
                })
            }
        }
    }

    /// `lease-set`: stores only while `token` is the key's lease (no delete came since the
    /// `lease-get`); true if stored.
    pub async fn lease_set(
        &self,
        key: impl AsRef<[u8]>,
        token: u64,
        value: &[u8],
        ttl: u32,
    ) -> Result<bool, Error> {
        let line = self
            .store(StoreCommand::LeaseSet, key.as_ref(), value, 0, ttl, token)
            .await?;
        stored(&line)
    }

    /// Look-aside caching with leases (paper §3.2.1): the cached value; on a miss, the
    /// caller that gets the lease runs `loader` (the database read) and fills the cache with
    /// its token, while the others wait briefly and ask again (or take a stale value, when
    /// `accept_stale`), so one key's miss costs the database one query per lease interval,
    /// not one per caller. When the cache fails (error, timeout, down) the loader's value is
    /// returned but not stored: the paper skips the fill to spare a struggling server.
    pub async fn get_or_fill<F, Fut, E>(
        &self,
        key: impl AsRef<[u8]>,
        ttl: u32,
        mut loader: F,
    ) -> Result<Vec<u8>, E>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<Vec<u8>, E>>,
    {
        let key = key.as_ref();
        if self.udp.is_some() {
            // The cheap way first; a lost reply means a struggling server or network:
            // load, but do not add a fill to its load.
            match self.get_udp(key).await {
                Ok(UdpGet::Hit(v)) => return Ok(v.data),
                Ok(UdpGet::Lost) => return loader().await,
                Ok(UdpGet::Miss) | Err(_) => {}
            }
        }
        let mut pause = self.options.lease_retry;
        let started = tokio::time::Instant::now();
        loop {
            match self.lease_get(key).await {
                Ok(Lease::Hit(v)) => return Ok(v.data),
                Ok(Lease::Token { token, .. }) => {
                    let value = loader().await?;
                    let _ = self.lease_set(key, token, &value, ttl).await;
                    return Ok(value);
                }
                Ok(Lease::HotMiss { stale }) => {
                    if let (true, Some(v)) = (self.options.accept_stale, stale) {
                        return Ok(v.data);
                    }
                    if started.elapsed() >= self.options.lease_wait {
                        return loader().await;
                    }
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(self.options.lease_retry_max);
                }
                Err(_) => return loader().await,
            }
        }
    }

    // ---- remote markers (paper §5) ----

    /// The remote marker of `key`.
    pub fn marker_key(&self, key: &str) -> String {
        format!("{}{key}", self.options.marker_prefix)
    }

    /// Before writing data behind `key` to the master database from a replica region:
    /// sets `key`'s remote marker (for at most `ttl` seconds, so a lost invalidation cannot
    /// pin reads to the master forever) and returns the marker's key, which the write's
    /// transaction must invalidate together with `key`
    /// (`memfleet_invalidate('user:42', 'remote-marker:user:42')`): the marker goes away
    /// when the replica has the write. Then delete `key` in the local cluster.
    pub async fn mark_remote_write(&self, key: &str, ttl: u32) -> Result<String, Error> {
        let marker = self.marker_key(key);
        self.set(&marker, b"1", ttl).await?;
        Ok(marker)
    }

    /// Look-aside for a replica region: on a miss, a present remote marker means a write
    /// this region made has not reached its replica yet, so `master` is read; otherwise
    /// `replica`. Filled as [`Client::get_or_fill`] fills.
    pub async fn get_or_fill_regional<R, RF, M, MF, E>(
        &self,
        key: &str,
        ttl: u32,
        replica: R,
        master: M,
    ) -> Result<Vec<u8>, E>
    where
        R: FnOnce() -> RF,
        RF: Future<Output = Result<Vec<u8>, E>>,
        M: FnOnce() -> MF,
        MF: Future<Output = Result<Vec<u8>, E>>,
    {
        let mut replica = Some(replica);
        let mut master = Some(master);
        self.get_or_fill(key, ttl, || {
            let marked = self.get(self.marker_key(key));
            let (replica, master) = (replica.take(), master.take());
            async move {
                // A cache error counts as marked: the master is always right.
                let to_master = !matches!(marked.await, Ok(None));
                match (to_master, master, replica) {
                    (true, Some(m), _) => m().await,
                    (false, _, Some(r)) => r().await,
                    (_, Some(m), None) => m().await,
                    (_, None, Some(r)) => r().await,
                    (_, None, None) => unreachable!("the loader runs once"),
                }
            }
        })
        .await
    }

    // ---- typed values ----

    /// Stores `value` as JSON.
    pub async fn set_json<T: serde::Serialize>(
        &self,
        key: impl AsRef<[u8]>,
        value: &T,
        ttl: u32,
    ) -> Result<(), Error> {
        self.set(key, &serde_json::to_vec(value)?, ttl).await
    }

    /// Reads a JSON value stored by [`Client::set_json`].
    pub async fn get_json<T: serde::de::DeserializeOwned>(
        &self,
        key: impl AsRef<[u8]>,
    ) -> Result<Option<T>, Error> {
        match self.get(key).await? {
            Some(v) => Ok(Some(serde_json::from_slice(&v.data)?)),
            None => Ok(None),
        }
    }

    /// Compresses values over the threshold (and only when that makes them smaller).
    fn encode(&self, value: &[u8], flags: u32) -> (Vec<u8>, u32) {
        let flags = flags & !FLAG_COMPRESSED;
        match self.options.compress_above {
            Some(limit) if value.len() >= limit => {
                let packed = lz4_flex::compress_prepend_size(value);
                if packed.len() < value.len() {
                    return (packed, flags | FLAG_COMPRESSED);
                }
                (value.to_vec(), flags)
            }
            _ => (value.to_vec(), flags),
        }
    }
}

fn check_key(key: &[u8]) -> Result<(), Error> {
    if key.is_empty() || key.len() > 250 || key.iter().any(|&b| b <= b' ' || b == 0x7f) {
        return Err(Error::InvalidKey);
    }
    Ok(())
}

fn expect(line: &str, want: &str) -> Result<(), Error> {
    if line == want {
        Ok(())
    } else {
        Err(Error::Protocol(line.to_string()))
    }
}

fn stored(line: &str) -> Result<bool, Error> {
    match line {
        "STORED" => Ok(true),
        "NOT_STORED" | "EXISTS" | "NOT_FOUND" => Ok(false),
        _ => Err(Error::Protocol(line.to_string())),
    }
}

/// A value as it came off the wire (maybe compressed).
struct WireValue {
    data: Vec<u8>,
    flags: u32,
    cas: Option<u64>,
}

enum Retrieved {
    Value(WireValue),
    Miss,
    Lease {
        token: u64,
        stale: Option<WireValue>,
    },
}

/// Reads a one-key retrieval reply (`VALUE key flags bytes [cas]`, `LVALUE key token flags
/// bytes`, or `END`) with the protocol's decoder.
fn parse_retrieval(reply: &[u8]) -> Result<Retrieved, Error> {
    let bad = || Error::Protocol(String::from_utf8_lossy(reply).into_owned());
    let values = match reply::decode(reply, ReplyKind::Retrieval).map_err(|_| bad())? {
        ServerReply::Values(values) => values,
        ServerReply::Error(..) => {
            let line = reply.split(|&b| b == b'\r').next().unwrap_or(reply);
            return Err(Error::Server(String::from_utf8_lossy(line).into_owned()));
        }
        _ => return Err(bad()),
    };
    let Some(v) = values.first() else {
        return Ok(Retrieved::Miss);
    };
    let wire = WireValue {
        data: v.data.to_vec(),
        flags: v.flags,
        cas: v.cas,
    };
    Ok(match v.lease {
        None => Retrieved::Value(wire),
        Some(token) => Retrieved::Lease {
            token,
            stale: Some(wire),
        },
    })
}

fn decode(w: WireValue) -> Result<Value, Error> {
    let data = if w.flags & FLAG_COMPRESSED != 0 {
        lz4_flex::decompress_size_prepended(&w.data).map_err(|e| Error::Corrupt(e.to_string()))?
    } else {
        w.data
    };
    Ok(Value {
        data,
        flags: w.flags & !FLAG_COMPRESSED,
        cas: w.cas,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retrieval_replies_parse() {
        match parse_retrieval(b"VALUE k 5 3 77\r\nabc\r\nEND\r\n").unwrap() {
            Retrieved::Value(w) => {
                assert_eq!(
                    (w.data.as_slice(), w.flags, w.cas),
                    (&b"abc"[..], 5, Some(77))
                )
            }
            _ => panic!("not a value"),
        }
        assert!(matches!(
            parse_retrieval(b"END\r\n").unwrap(),
            Retrieved::Miss
        ));
        match parse_retrieval(b"LVALUE k 123 0 0\r\n\r\nEND\r\n").unwrap() {
            Retrieved::Lease { token, stale } => {
                assert_eq!(token, 123);
                assert!(stale.unwrap().data.is_empty());
            }
            _ => panic!("not a lease"),
        }
        assert!(matches!(
            parse_retrieval(b"SERVER_ERROR out of memory\r\n"),
            Err(Error::Server(_))
        ));
        assert!(matches!(
            parse_retrieval(b"VALUE k 0 10\r\nabc\r\n"),
            Err(Error::Protocol(_))
        ));
    }

    #[test]
    fn keys_are_checked() {
        assert!(check_key(b"ok:key").is_ok());
        for bad in [&b""[..], b"has space", b"tab\t", &[b'k'; 251]] {
            assert!(matches!(check_key(bad), Err(Error::InvalidKey)));
        }
    }
}
