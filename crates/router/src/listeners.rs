//! A router's listeners: bound from a configuration ([`bind`]), accepting clients (TCP,
//! TLS, Unix sockets) into `proxy`, and a reload applied to them in place.

use crate::admin;
use crate::proxy;
use crate::reloadable::{ClientAuth, RouteSlot, ServedTopology};
use crate::workers::Workers;
use anyhow::Context;
use memfleet_client::{Route, Topology};
use memfleet_protocol::reply::ReplyKind;
use memfleet_routing::{ListenOptions, ListenerWorkers, RouterConfig};
use memfleet_tls::ServerTls;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// One listener a configuration asks for: its address, the pool or route it serves, the
/// route, and how it listens (a pool's `backlog`, `reuseport`, ...; a route's: defaults
/// but its `workers`).
type Wanted = (String, String, Arc<Route>, ListenOptions);

/// Every listener `config` asks for, in configuration order.
fn listeners(config: &RouterConfig, topology: &Topology) -> anyhow::Result<Vec<Wanted>> {
    let mut out = Vec::new();
    let wanted = config
        .pools
        .iter()
        .filter_map(|p| Some((p.listen.clone()?, p.name.clone(), p.listener)))
        .chain(config.routes.iter().filter_map(|r| {
            let options = ListenOptions {
                workers: r.workers,
                ..ListenOptions::default()
            };
            Some((r.listen.clone()?, r.name.clone(), options))
        }));
    if let Some(problem) = config.worker_problems().into_iter().next() {
        anyhow::bail!("{problem}");
    }
    let mut seen = std::collections::HashSet::new();
    for (listen, name, options) in wanted {
        anyhow::ensure!(
            seen.insert(listen.clone()),
            "{name}: {listen} is already another listener's"
        );
        let route = topology
            .route(&name)
            .expect("built from this configuration");
        out.push((listen, name, route, options));
    }
    anyhow::ensure!(!out.is_empty(), "no pool or route has a listen address");
    Ok(out)
}

/// Pools and routes bound to their listeners, not yet serving.
pub struct BoundRouter {
    /// Each TCP listener's address, in configuration order (Unix sockets are where the
    /// configuration says).
    pub addrs: Vec<SocketAddr>,
    /// The admin port's address (`/metrics`), if asked for.
    pub admin_addr: Option<SocketAddr>,
    listeners: Vec<(String, RouteSlot, Listener, Arc<Admission>)>,
    admin: Option<tokio::net::TcpListener>,
    served: ServedTopology,
    tls: Option<Arc<ServerTls>>,
    auth: ClientAuth,
    workers: Arc<Workers>,
}

/// A listener: TCP (`host:port`) or a Unix socket (a path starting with `/`, as twemproxy
/// writes it).
pub enum Listener {
    /// `host:port`.
    Tcp(tokio::net::TcpListener),
    /// A socket file.
    Unix(tokio::net::UnixListener),
}

impl Listener {
    /// Binds `listen` with `options`' backlog (and `SO_REUSEPORT` on TCP when asked for); a
    /// Unix socket file left by an earlier run is replaced.
    async fn bind(listen: &str, options: &ListenOptions) -> std::io::Result<Listener> {
        let backlog = i32::try_from(options.backlog).unwrap_or(i32::MAX);
        if listen.starts_with('/') {
            let path = std::path::Path::new(listen);
            let stale = std::fs::symlink_metadata(path)
                .is_ok_and(|m| std::os::unix::fs::FileTypeExt::is_socket(&m.file_type()));
            if stale {
                std::fs::remove_file(path)?;
            }
            let socket = socket2::Socket::new(socket2::Domain::UNIX, socket2::Type::STREAM, None)?;
            socket.bind(&socket2::SockAddr::unix(path)?)?;
            socket.listen(backlog)?;
            socket.set_nonblocking(true)?;
            let std: std::os::unix::net::UnixListener = socket.into();
            Ok(Listener::Unix(tokio::net::UnixListener::from_std(std)?))
        } else {
            let mut last = None;
            for addr in tokio::net::lookup_host(listen).await? {
                match bind_tcp(addr, options.reuseport, backlog) {
                    Ok(l) => return Ok(Listener::Tcp(l)),
                    Err(e) => last = Some(e),
                }
            }
            Err(last
                .unwrap_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "no address")))
        }
    }

    /// The TCP address (none for a Unix socket).
    fn tcp_addr(&self) -> Option<SocketAddr> {
        match self {
            Listener::Tcp(l) => l.local_addr().ok(),
            Listener::Unix(_) => None,
        }
    }
}

/// A TCP listener on `addr` (`SO_REUSEADDR` as tokio's own `bind`, `SO_REUSEPORT` when
/// asked for) with `backlog`.
fn bind_tcp(
    addr: SocketAddr,
    reuseport: bool,
    backlog: i32,
) -> std::io::Result<tokio::net::TcpListener> {
    let socket = match addr {
        SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    socket.set_reuseaddr(true)?;
    if reuseport {
        socket.set_reuseport(true)?;
    }
    socket.bind(addr)?;
    socket.listen(u32::try_from(backlog).unwrap_or(1))
}

/// What a listener checks as it accepts a client: the pool's `client_connections`,
/// `tcpkeepalive` and `workers`, as configured now (a reload changes them in place), and
/// how many of its clients are connected.
#[derive(Default)]
pub(crate) struct Admission {
    /// At most this many clients at once; 0: no limit.
    limit: AtomicU32,
    /// `SO_KEEPALIVE` on accepted clients.
    keepalive: AtomicBool,
    /// The workers that serve its clients ([`ListenerWorkers::to_bits`]).
    workers: AtomicU64,
    /// Clients connected now.
    clients: AtomicU32,
}

impl Admission {
    fn new(options: &ListenOptions) -> Arc<Admission> {
        let a = Arc::new(Admission::default());
        a.set(options);
        a
    }

    /// The router-wide admission: `max_client_connections` (none: no limit).
    fn router_wide(limit: Option<u32>) -> Arc<Admission> {
        let a = Arc::new(Admission::default());
        a.limit.store(limit.unwrap_or(0), Ordering::Relaxed);
        a
    }

    fn set(&self, options: &ListenOptions) {
        self.limit
            .store(options.client_connections, Ordering::Relaxed);
        self.keepalive
            .store(options.tcp_keepalive, Ordering::Relaxed);
        self.workers
            .store(options.workers.to_bits(), Ordering::Relaxed);
    }

    /// The workers that serve its clients, as configured now.
    fn workers(&self) -> ListenerWorkers {
        ListenerWorkers::from_bits(self.workers.load(Ordering::Relaxed))
    }

    /// A client just accepted: its place (released when dropped), or `None` when the
    /// listener is full (the client is then closed).
    fn admit(self: &Arc<Self>) -> Option<ClientPlace> {
        let limit = self.limit.load(Ordering::Relaxed);
        let now = self.clients.fetch_add(1, Ordering::AcqRel);
        let place = ClientPlace(self.clone());
        if limit > 0 && now >= limit {
            tracing::debug!(limit, "client_connections reached: a client is closed");
            return None;
        }
        Some(place)
    }
}

/// A connected client's place on its listener.
pub(crate) struct ClientPlace(Arc<Admission>);

impl Drop for ClientPlace {
    fn drop(&mut self) {
        self.0.clients.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Builds `config` (looking its pools' DNS entries up first: an entry that does not
/// answer leaves its pool without those members, and holds no other pool back) and binds a
/// listener for every pool and route that has a `listen` address, and the admin port at
/// `admin` if given, with `threads` workers (see `workers.rs`; the caller's runtime is the
/// first, and must be a current-thread runtime).
pub async fn bind(
    mut config: RouterConfig,
    admin: Option<&str>,
    threads: usize,
) -> anyhow::Result<BoundRouter> {
    let workers = Arc::new(Workers::start(threads).context("starting the worker threads")?);
    config.workers = workers.count();
    let topology = Topology::build_resolving(&config, None).await?;
    let mut addrs = Vec::new();
    let mut listeners = Vec::new();
    preconnect(&topology, workers.count());
    for (listen, name, route, options) in self::listeners(&config, &topology)? {
        let listener = Listener::bind(&listen, &options)
            .await
            .with_context(|| format!("{name}: cannot listen on {listen}"))?;
        if let Some(addr) = listener.tcp_addr() {
            addrs.push(addr);
        }
        tracing::info!(%name, %listen, "routing");
        let slot: RouteSlot = Arc::new(arc_swap::ArcSwap::new(route));
        listeners.push((listen, slot, listener, Admission::new(&options)));
    }
    let admin = match admin {
        Some(a) => Some(
            tokio::net::TcpListener::bind(a)
                .await
                .with_context(|| format!("cannot listen on admin address {a}"))?,
        ),
        None => None,
    };
    let admin_addr = admin.as_ref().map(|l| l.local_addr()).transpose()?;
    Ok(BoundRouter {
        addrs,
        admin_addr,
        listeners,
        admin,
        served: Arc::new(arc_swap::ArcSwap::from_pointee(topology)),
        tls: None,
        auth: ClientAuth::default(),
        workers,
    })
}

impl BoundRouter {
    /// Serves TLS on the TCP listeners (Unix sockets stay plain), with `tls`'s certificate
    /// at each handshake: reloading it changes what new clients get.
    pub fn with_tls(mut self, tls: Arc<ServerTls>) -> BoundRouter {
        self.tls = Some(tls);
        self
    }

    /// Requires clients to authenticate against what `auth` holds (swapped on reload).
    pub fn with_auth(mut self, auth: ClientAuth) -> BoundRouter {
        self.auth = auth;
        self
    }

    /// Accepts and serves clients until `stop` resolves; each configuration `reloads` yields
    /// is applied (see [`ServingListeners::reload`]), and pools' DNS entries are looked up
    /// again when due (see [`ServingListeners::follow_dns`]).
    pub async fn run(
        self,
        stop: impl std::future::Future<Output = ()>,
        mut reloads: tokio::sync::mpsc::UnboundedReceiver<RouterConfig>,
    ) {
        let mut serving = ServingListeners {
            everyone: Admission::router_wide(self.served.load().config().max_client_connections),
            listeners: HashMap::new(),
            served: self.served,
            tls: self.tls,
            auth: self.auth,
            workers: self.workers,
        };
        for (listen, slot, listener, admission) in self.listeners {
            serving.accept(listen, slot, listener, admission);
        }
        let admin = self
            .admin
            .map(|l| tokio::spawn(admin::serve(l, serving.served.clone())));
        tokio::pin!(stop);
        loop {
            let dns_round = serving.served.load().next_dns_round();
            tokio::select! {
                () = &mut stop => break,
                Some(config) = reloads.recv() => {
                    serving.reload(config).await;
                    crate::systemd::applied();
                }
                () = tokio::time::sleep(dns_round.unwrap_or_default()), if dns_round.is_some() => {
                    serving.follow_dns().await
                }
            }
        }
        for (_, (_, _, task)) in serving.listeners.drain() {
            task.abort();
        }
        if let Some(task) = admin {
            task.abort();
        }
    }
}

/// The listeners being served, by listen address.
pub struct ServingListeners {
    /// `max_client_connections`, across every listener.
    everyone: Arc<Admission>,
    listeners: HashMap<String, (RouteSlot, Arc<Admission>, tokio::task::JoinHandle<()>)>,
    served: ServedTopology,
    tls: Option<Arc<ServerTls>>,
    auth: ClientAuth,
    workers: Arc<Workers>,
}

impl ServingListeners {
    fn accept(
        &mut self,
        listen: String,
        slot: RouteSlot,
        listener: Listener,
        admission: Arc<Admission>,
    ) {
        let accepting = slot.clone();
        let admitting = admission.clone();
        let everyone = self.everyone.clone();
        let served = self.served.clone();
        let tls = self.tls.clone();
        let auth = self.auth.clone();
        let workers = self.workers.clone();
        let task = tokio::spawn(async move {
            let mut nth = 0usize;
            loop {
                // The nth client is served by one of the listener's workers and sends on
                // a lane of that worker: a connection to each server that the same worker
                // runs (`workers.rs`, `ListenerWorkers::place`).
                nth = nth.wrapping_add(1);
                let (worker, lane) = admitting.workers().place(nth, workers.count());
                let accepted = match &listener {
                    Listener::Tcp(l) => l.accept().await.map(|(stream, _)| {
                        let Some(all) = everyone.admit() else {
                            tokio::spawn(too_many(stream, tls.is_none()));
                            return;
                        };
                        let Some(place) = admitting.admit() else {
                            return; // dropped: closed at once, as twemproxy does
                        };
                        let place = (all, place);
                        if admitting.keepalive.load(Ordering::Relaxed) {
                            let _ = socket2::SockRef::from(&stream).set_keepalive(true);
                        }
                        let (slot, served, auth) =
                            (accepting.clone(), served.clone(), auth.clone());
                        let tls = tls.clone();
                        on_worker(&workers, worker, stream, move |stream| async move {
                            match tls {
                                None => proxy::serve(slot, served, auth, stream, lane).await,
                                Some(tls) => match tls.accept(stream).await {
                                    Ok(session) => {
                                        proxy::serve_tls(slot, served, auth, session, lane).await
                                    }
                                    Err(e) => tracing::debug!(error = %e, "TLS handshake failed"),
                                },
                            }
                            drop(place);
                        });
                    }),
                    Listener::Unix(l) => l.accept().await.map(|(stream, _)| {
                        let Some(all) = everyone.admit() else {
                            tokio::spawn(too_many(stream, true));
                            return;
                        };
                        let Some(place) = admitting.admit() else {
                            return;
                        };
                        let place = (all, place);
                        let (slot, served, auth) =
                            (accepting.clone(), served.clone(), auth.clone());
                        on_worker(&workers, worker, stream, move |stream| async move {
                            proxy::serve_unix(slot, served, auth, stream, lane).await;
                            drop(place);
                        });
                    }),
                };
                if let Err(e) = accepted {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        });
        self.listeners.insert(listen, (slot, admission, task));
    }

    /// Applies a new configuration, all or nothing: listen addresses already served get
    /// the new pool or route in place (their clients stay connected, and servers that stay
    /// keep their connections); new addresses start listening; addresses gone stop
    /// accepting (their open connections finish on the old routes). Pools' DNS entries are
    /// looked up first (one that does not answer keeps the members it had). A configuration
    /// that cannot be applied (a port that cannot be bound, a written server that does not
    /// resolve) is logged and the old one keeps serving.
    pub async fn reload(&mut self, mut config: RouterConfig) {
        config.workers = self.workers.count();
        let previous = self.served.load_full();
        let built = Topology::build_resolving(&config, Some(&previous)).await;
        self.apply(built, "reload").await;
    }

    /// One round of DNS lookups for the pools' DNS entries: when a pool's members changed,
    /// the topology with the new members is applied as a reload is (all or nothing;
    /// clients stay connected; servers that stay keep their connections).
    pub async fn follow_dns(&mut self) {
        let current = self.served.load_full();
        if let Some(built) = current.follow_dns().await {
            self.apply(built, "DNS members changed").await;
        }
    }

    /// Serves `built` (a new topology, or why it could not be built) in place of the
    /// current one; see [`ServingListeners::reload`].
    async fn apply(&mut self, built: anyhow::Result<Topology>, why: &str) {
        let built = built.and_then(|t| Ok((self::listeners(t.config(), &t)?, t)));
        let (wanted, topology) = match built {
            Ok(b) => b,
            Err(e) => {
                tracing::error!(reason = why, error = %format!("{e:#}"), "reload refused");
                return;
            }
        };
        let config = topology.config().clone();
        let mut swaps = Vec::new();
        let mut binds = Vec::new();
        for (listen, name, route, options) in wanted {
            match self.listeners.get(&listen) {
                Some((slot, admission, _)) => {
                    swaps.push((slot.clone(), admission.clone(), name, route, options))
                }
                None => match Listener::bind(&listen, &options).await {
                    Ok(l) => binds.push((listen, name, route, l, options)),
                    Err(e) => {
                        tracing::error!(%name, %listen, error = %e, "reload refused: cannot listen");
                        return;
                    }
                },
            }
        }
        let kept: std::collections::HashSet<String> = config
            .pools
            .iter()
            .filter_map(|p| p.listen.clone())
            .chain(config.routes.iter().filter_map(|r| r.listen.clone()))
            .collect();
        self.served.store(Arc::new(topology));
        self.everyone.limit.store(
            config.max_client_connections.unwrap_or(0),
            Ordering::Relaxed,
        );
        for (slot, admission, name, route, options) in swaps {
            tracing::info!(%name, "reloaded");
            // backlog and reuseport belong to the bound socket: they apply when a listener
            // is bound; the admission settings apply from the next client.
            admission.set(&options);
            slot.store(route);
        }
        let gone: Vec<String> = self
            .listeners
            .keys()
            .filter(|k| !kept.contains(*k))
            .cloned()
            .collect();
        for listen in gone {
            if let Some((_, _, task)) = self.listeners.remove(&listen) {
                tracing::info!(%listen, "listener removed");
                task.abort();
            }
        }
        for (listen, name, route, listener, options) in binds {
            tracing::info!(%name, %listen, "listener added");
            let slot = Arc::new(arc_swap::ArcSwap::new(route));
            self.accept(listen, slot, listener, Admission::new(&options));
        }
    }
}

/// Opens every connection of the pools with `preconnect` (twemproxy's, at start): a
/// `version` on each of a server's connections makes it connect now, not at the first
/// client request (each of its `server_connections` per worker). Failures count as any
/// other (a dead server is found down early).
fn preconnect(topology: &Topology, workers: usize) {
    for pool in topology.pools() {
        if !pool.config().preconnect {
            continue;
        }
        for backend in pool.backends() {
            for lane in 0..pool.config().server_connections as usize * workers {
                let call = backend.call(lane, b"version\r\n".to_vec(), ReplyKind::Line);
                tokio::spawn(call);
            }
        }
    }
}

/// memcached's answer to a client over its connection limit (`-c`): `ERROR Too many open
/// connections`, then the connection closed (over TLS, closed without a word: the
/// handshake is not spent on it).
async fn too_many(mut stream: impl tokio::io::AsyncWrite + Unpin, plain: bool) {
    use tokio::io::AsyncWriteExt;
    tracing::debug!("max_client_connections reached: a client is refused");
    if plain {
        let _ = stream
            .write_all(b"ERROR Too many open connections\r\n")
            .await;
        let _ = stream.shutdown().await;
    }
}

/// A socket an accept loop's runtime registered, which another worker's runtime can take
/// over (deregistered here, registered again there).
trait Handover: Sized {
    type Std: Send + 'static;
    fn into_std(self) -> std::io::Result<Self::Std>;
    fn from_std(std: Self::Std) -> std::io::Result<Self>;
}

impl Handover for tokio::net::TcpStream {
    type Std = std::net::TcpStream;
    fn into_std(self) -> std::io::Result<Self::Std> {
        tokio::net::TcpStream::into_std(self)
    }
    fn from_std(std: Self::Std) -> std::io::Result<Self> {
        tokio::net::TcpStream::from_std(std)
    }
}

impl Handover for tokio::net::UnixStream {
    type Std = std::os::unix::net::UnixStream;
    fn into_std(self) -> std::io::Result<Self::Std> {
        tokio::net::UnixStream::into_std(self)
    }
    fn from_std(std: Self::Std) -> std::io::Result<Self> {
        tokio::net::UnixStream::from_std(std)
    }
}

/// Serves an accepted client's `stream` with `serve` on `worker`: here when that is the
/// accepting runtime (worker 0), else moved to the worker's runtime.
fn on_worker<S, F, Fut>(workers: &Workers, worker: usize, stream: S, serve: F)
where
    S: Handover + Send + 'static,
    F: FnOnce(S) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    if worker.is_multiple_of(workers.count()) {
        tokio::spawn(serve(stream));
        return;
    }
    match stream.into_std() {
        Ok(std) => drop(workers.runtime(worker).spawn(async move {
            match S::from_std(std) {
                Ok(stream) => serve(stream).await,
                Err(e) => tracing::warn!(error = %e, "cannot take over a client's socket"),
            }
        })),
        Err(e) => tracing::warn!(error = %e, "cannot hand a client's socket over"),
    }
}
