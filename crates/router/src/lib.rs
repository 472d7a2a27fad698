//! `memfleet router`: a memcached-protocol proxy (mcrouter's and twemproxy's job).
//!
//! Clients connect to a listener and speak the text and meta protocols as to one
//! memcached; the router sends each key where its pool's distribution or its route says
//! (`memfleet_client`: the same pools, routes, connections and spool an application
//! embedding the client library uses), and answers in order (`proxy`).
//!
//! | module | what it holds |
//! |--------|---------------|
//! | `proxy` | a client connection: parse, route, split multi-gets, reassemble, reply in order |
//! | `admin` | `/metrics` on the admin address |
//! | (this file) | listeners, reloads, the `memfleet router` command |

mod admin;
mod proxy;

use anyhow::Context;
use memfleet_client::{Route, Topology};
use memfleet_protocol::auth::Credentials;
use memfleet_routing::RouterConfig;
use memfleet_tls::ServerTls;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// `memfleet router` flags.
#[derive(clap::Args, Clone, Debug)]
pub struct RouterArgs {
    /// memfleet's TOML pool file (see `memfleet_routing::config`).
    #[arg(long, conflicts_with = "twemproxy")]
    pub config: Option<PathBuf>,
    /// A twemproxy (nutcracker) YAML file, read as twemproxy reads it: same listeners,
    /// same key placement.
    #[arg(long)]
    pub twemproxy: Option<PathBuf>,
    /// Worker threads [default: one per core].
    #[arg(short = 't', long)]
    pub threads: Option<usize>,
    /// Serve Prometheus metrics at http://ADDR/metrics (e.g. 127.0.0.1:9151); off unless
    /// given.
    #[arg(long = "admin-listen", value_name = "ADDR")]
    pub admin_listen: Option<String>,
    /// Serve TLS on every TCP listener with this certificate chain (PEM, leaf first); needs
    /// --tls-key. SIGHUP, or a change to the files, reloads them without a restart. Unix
    /// socket listeners stay plain [default: off].
    #[arg(long = "tls-cert", value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,
    /// The TLS certificate's private key, PEM.
    #[arg(long = "tls-key", value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
    /// CA certificates (PEM) client certificates are checked against: a client presenting
    /// a certificate must present a valid one.
    #[arg(long = "tls-ca", value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,
    /// Refuse TLS clients without a valid certificate signed by --tls-ca.
    #[arg(long = "tls-verify-client")]
    pub tls_verify_client: bool,
    /// Require memcached's ASCII authentication from clients, as `memfleet server -Y` and
    /// memcached's `-Y` do: a file of `user:password` lines; until a connection sends `set
    /// <any key> 0 0 <len>` whose data is `<user> <password>`, every command gets
    /// `CLIENT_ERROR unauthenticated`. Reloaded on SIGHUP and when it changes. Servers'
    /// own authentication is a pool setting (`auth_user`) [default: off].
    #[arg(short = 'Y', long = "auth-file", value_name = "FILE")]
    pub auth_file: Option<PathBuf>,
}

impl RouterArgs {
    /// The listeners' TLS settings, when TLS is on.
    pub fn tls_files(&self) -> anyhow::Result<Option<memfleet_tls::ServerTlsFiles>> {
        memfleet_tls::ServerTlsFiles::from_options(
            self.tls_cert.clone(),
            self.tls_key.clone(),
            self.tls_ca.clone(),
            self.tls_verify_client,
        )
    }
}

/// Reads the configuration a router is started with.
pub fn load_config(args: &RouterArgs) -> anyhow::Result<RouterConfig> {
    let (path, twemproxy) = match (&args.config, &args.twemproxy) {
        (Some(p), None) => (p, false),
        (None, Some(p)) => (p, true),
        _ => anyhow::bail!("give --config FILE.toml or --twemproxy FILE.yml"),
    };
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let config = if twemproxy {
        memfleet_routing::from_twemproxy_yaml(&text).map(RouterConfig::from)
    } else {
        memfleet_routing::from_toml(&text)
    };
    config.with_context(|| format!("in {}", path.display()))
}

/// The route a listener serves now (a pool is a route too): a reload swaps it, and every
/// client connection reads it per request, so new routing applies to open connections.
pub(crate) type RouteSlot = Arc<arc_swap::ArcSwap<Route>>;

/// What a router serves now: read by `stats`, `/metrics` and the next reload.
pub type ServedTopology = Arc<arc_swap::ArcSwap<Topology>>;

/// Who may use the listeners (`--auth-file`), as loaded now: a reload swaps it; `None`:
/// no authentication.
pub type ClientAuth = Arc<arc_swap::ArcSwapOption<Credentials>>;

/// Reads an auth file (`user:password` lines, memcached's `-Y` format).
pub fn load_auth(path: &Path) -> anyhow::Result<Credentials> {
    let text = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    Credentials::parse(&text).with_context(|| format!("in {}", path.display()))
}

/// (listen address, pool or route name, what it serves) of every listener `config` asks
/// for, in configuration order.
fn listeners(
    config: &RouterConfig,
    topology: &Topology,
) -> anyhow::Result<Vec<(String, String, Arc<Route>)>> {
    let mut out = Vec::new();
    let wanted = config
        .pools
        .iter()
        .filter_map(|p| Some((p.listen.clone()?, p.name.clone())))
        .chain(
            config
                .routes
                .iter()
                .filter_map(|r| Some((r.listen.clone()?, r.name.clone()))),
        );
    let mut seen = std::collections::HashSet::new();
    for (listen, name) in wanted {
        anyhow::ensure!(
            seen.insert(listen.clone()),
            "{name}: {listen} is already another listener's"
        );
        let route = topology
            .route(&name)
            .expect("built from this configuration");
        out.push((listen, name, route));
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
    listeners: Vec<(String, RouteSlot, Listener)>,
    admin: Option<tokio::net::TcpListener>,
    served: ServedTopology,
    tls: Option<Arc<ServerTls>>,
    auth: ClientAuth,
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
    /// Binds `listen`; a Unix socket file left by an earlier run is replaced.
    async fn bind(listen: &str) -> std::io::Result<Listener> {
        if listen.starts_with('/') {
            let path = std::path::Path::new(listen);
            let stale = std::fs::symlink_metadata(path)
                .is_ok_and(|m| std::os::unix::fs::FileTypeExt::is_socket(&m.file_type()));
            if stale {
                std::fs::remove_file(path)?;
            }
            Ok(Listener::Unix(tokio::net::UnixListener::bind(path)?))
        } else {
            Ok(Listener::Tcp(tokio::net::TcpListener::bind(listen).await?))
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

/// Builds `config` and binds a listener for every pool and route that has a `listen`
/// address, and the admin port at `admin` if given.
pub async fn bind(config: RouterConfig, admin: Option<&str>) -> anyhow::Result<BoundRouter> {
    let topology = Topology::build(&config, None)?;
    let mut addrs = Vec::new();
    let mut listeners = Vec::new();
    for (listen, name, route) in self::listeners(&config, &topology)? {
        let listener = Listener::bind(&listen)
            .await
            .with_context(|| format!("{name}: cannot listen on {listen}"))?;
        if let Some(addr) = listener.tcp_addr() {
            addrs.push(addr);
        }
        tracing::info!(%name, %listen, "routing");
        let slot: RouteSlot = Arc::new(arc_swap::ArcSwap::new(route));
        listeners.push((listen, slot, listener));
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
    /// is applied (see [`ServingListeners::reload`]).
    pub async fn run(
        self,
        stop: impl std::future::Future<Output = ()>,
        mut reloads: tokio::sync::mpsc::UnboundedReceiver<RouterConfig>,
    ) {
        let mut serving = ServingListeners {
            listeners: HashMap::new(),
            served: self.served,
            tls: self.tls,
            auth: self.auth,
        };
        for (listen, slot, listener) in self.listeners {
            serving.accept(listen, slot, listener);
        }
        let admin = self
            .admin
            .map(|l| tokio::spawn(admin::serve(l, serving.served.clone())));
        tokio::pin!(stop);
        loop {
            tokio::select! {
                () = &mut stop => break,
                Some(config) = reloads.recv() => serving.reload(config).await,
            }
        }
        for (_, (_, task)) in serving.listeners.drain() {
            task.abort();
        }
        if let Some(task) = admin {
            task.abort();
        }
    }
}

/// The listeners being served, by listen address.
pub struct ServingListeners {
    listeners: HashMap<String, (RouteSlot, tokio::task::JoinHandle<()>)>,
    served: ServedTopology,
    tls: Option<Arc<ServerTls>>,
    auth: ClientAuth,
}

impl ServingListeners {
    fn accept(&mut self, listen: String, slot: RouteSlot, listener: Listener) {
        let accepting = slot.clone();
        let served = self.served.clone();
        let tls = self.tls.clone();
        let auth = self.auth.clone();
        let task = tokio::spawn(async move {
            let mut lane = 0usize;
            loop {
                lane = lane.wrapping_add(1);
                let accepted = match &listener {
                    Listener::Tcp(l) => l.accept().await.map(|(stream, _)| {
                        let (slot, served, auth) =
                            (accepting.clone(), served.clone(), auth.clone());
                        match tls.clone() {
                            None => tokio::spawn(proxy::serve(slot, served, auth, stream, lane)),
                            Some(tls) => tokio::spawn(async move {
                                match tls.accept(stream).await {
                                    Ok(session) => {
                                        proxy::serve_tls(slot, served, auth, session, lane).await
                                    }
                                    Err(e) => tracing::debug!(error = %e, "TLS handshake failed"),
                                }
                            }),
                        };
                    }),
                    Listener::Unix(l) => l.accept().await.map(|(stream, _)| {
                        let (slot, served, auth) =
                            (accepting.clone(), served.clone(), auth.clone());
                        tokio::spawn(proxy::serve_unix(slot, served, auth, stream, lane));
                    }),
                };
                if let Err(e) = accepted {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        });
        self.listeners.insert(listen, (slot, task));
    }

    /// Applies a new configuration, all or nothing: listen addresses already served get
    /// the new pool or route in place (their clients stay connected, and servers that stay
    /// keep their connections); new addresses start listening; addresses gone stop
    /// accepting (their open connections finish on the old routes). A configuration that
    /// cannot be applied (a port that cannot be bound, a server that does not resolve) is
    /// logged and the old one keeps serving.
    pub async fn reload(&mut self, config: RouterConfig) {
        let built = Topology::build(&config, Some(&self.served.load()))
            .and_then(|t| Ok((self::listeners(&config, &t)?, t)));
        let (wanted, topology) = match built {
            Ok(b) => b,
            Err(e) => {
                tracing::error!(error = %format!("{e:#}"), "reload refused");
                return;
            }
        };
        let mut swaps = Vec::new();
        let mut binds = Vec::new();
        for (listen, name, route) in wanted {
            match self.listeners.get(&listen) {
                Some((slot, _)) => swaps.push((slot.clone(), name, route)),
                None => match Listener::bind(&listen).await {
                    Ok(l) => binds.push((listen, name, route, l)),
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
        for (slot, name, route) in swaps {
            tracing::info!(%name, "reloaded");
            slot.store(route);
        }
        let gone: Vec<String> = self
            .listeners
            .keys()
            .filter(|k| !kept.contains(*k))
            .cloned()
            .collect();
        for listen in gone {
            if let Some((_, task)) = self.listeners.remove(&listen) {
                tracing::info!(%listen, "listener removed");
                task.abort();
            }
        }
        for (listen, name, route, listener) in binds {
            tracing::info!(%name, %listen, "listener added");
            self.accept(listen, Arc::new(arc_swap::ArcSwap::new(route)), listener);
        }
    }
}

/// A router running on its own runtime (tests, embedding); stops when dropped.
pub struct RunningRouter {
    /// Each TCP listener's address, in configuration order (Unix sockets are where the
    /// configuration says).
    pub addrs: Vec<SocketAddr>,
    /// The admin port's address, if any.
    pub admin_addr: Option<SocketAddr>,
    reloads: tokio::sync::mpsc::UnboundedSender<RouterConfig>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl RunningRouter {
    /// Starts `pools` on a new runtime of `threads` workers (and an admin port at `admin`);
    /// returns once they listen.
    pub fn start(
        config: impl Into<RouterConfig>,
        threads: usize,
        admin: Option<String>,
    ) -> anyhow::Result<RunningRouter> {
        let config = config.into();
        let rt = runtime(threads)?;
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let (reload_tx, reload_rx) = tokio::sync::mpsc::unbounded_channel();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("memfleet-router".into())
            .spawn(move || {
                rt.block_on(async move {
                    match bind(config, admin.as_deref()).await {
                        Ok(bound) => {
                            let _ = ready_tx.send(Ok((bound.addrs.clone(), bound.admin_addr)));
                            bound
                                .run(
                                    async move {
                                        let _ = stop_rx.await;
                                    },
                                    reload_rx,
                                )
                                .await;
                        }
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                        }
                    }
                });
                // Connection tasks still parked are dropped with the runtime.
                rt.shutdown_timeout(Duration::from_secs(1));
            })?;
        match ready_rx.recv() {
            Ok(Ok((addrs, admin_addr))) => Ok(RunningRouter {
                addrs,
                admin_addr,
                reloads: reload_tx,
                stop: Some(stop_tx),
                thread: Some(thread),
            }),
            Ok(Err(e)) => Err(e),
            Err(_) => anyhow::bail!("the router thread ended at start"),
        }
    }
}

impl RunningRouter {
    /// Applies a new configuration (asynchronously, as a SIGHUP would).
    pub fn reload(&self, config: impl Into<RouterConfig>) {
        let _ = self.reloads.send(config.into());
    }
}

impl Drop for RunningRouter {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Reloads on SIGHUP and when the configuration file changes (checked every second: its
/// size and modification time, which an editor's rename-over also changes). A file that
/// does not parse is logged and ignored; the next change is tried again. The TLS
/// certificate, key and CA files are reloaded the same way (on SIGHUP, or when one of them
/// changes); one that does not load leaves the certificate in service. The auth file
/// (`--auth-file`) too: one that does not load leaves the users in service.
async fn watch_config(
    args: RouterArgs,
    mut hup: tokio::signal::unix::Signal,
    reloads: tokio::sync::mpsc::UnboundedSender<RouterConfig>,
    tls: Option<Arc<ServerTls>>,
    auth: ClientAuth,
) {
    let path = args.config.clone().or_else(|| args.twemproxy.clone());
    let stamp = |p: &Option<PathBuf>| {
        p.as_ref()
            .and_then(|p| std::fs::metadata(p).ok())
            .map(|m| (m.len(), m.modified().ok()))
    };
    let tls_paths: Vec<Option<PathBuf>> = tls.as_ref().map_or(Vec::new(), |t| {
        let f = t.files();
        vec![Some(f.cert.clone()), Some(f.key.clone()), f.ca.clone()]
    });
    let tls_stamps = || tls_paths.iter().map(stamp).collect::<Vec<_>>();
    let mut seen = stamp(&path);
    let mut tls_seen = tls_stamps();
    let mut auth_seen = stamp(&args.auth_file);
    let reload_auth = || {
        let Some(file) = &args.auth_file else {
            return;
        };
        match load_auth(file) {
            Ok(credentials) => {
                tracing::info!(file = %file.display(), "auth file reloaded");
                auth.store(Some(Arc::new(credentials)));
            }
            Err(e) => tracing::error!(
                error = %format!("{e:#}"),
                "auth file refused; the users loaded before keep their access"
            ),
        }
    };
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        let why = tokio::select! {
            _ = hup.recv() => {
                auth_seen = stamp(&args.auth_file);
                reload_auth();
                if let Some(tls) = &tls {
                    tls_seen = tls_stamps();
                    // A failure is logged and counted; the certificate in service stays.
                    let _ = tls.reload();
                }
                "SIGHUP"
            }
            _ = tick.tick() => {
                let now = stamp(&args.auth_file);
                if now != auth_seen {
                    auth_seen = now;
                    reload_auth();
                }
                if let Some(tls) = &tls {
                    let now = tls_stamps();
                    if now != tls_seen {
                        tls_seen = now;
                        let _ = tls.reload();
                    }
                }
                let now = stamp(&path);
                if now == seen {
                    continue;
                }
                seen = now;
                "the file changed"
            }
        };
        match load_config(&args) {
            Ok(config) => {
                tracing::info!(reason = why, "reloading the configuration");
                if reloads.send(config).is_err() {
                    return;
                }
            }
            Err(e) => {
                tracing::error!(reason = why, error = %format!("{e:#}"), "new configuration refused; the old one keeps serving")
            }
        }
    }
}

/// One thread: a current-thread runtime (no work-stealing queues or cross-thread wakeups
/// between a client's task and its servers' connection tasks); more: tokio's scheduler.
fn runtime(threads: usize) -> std::io::Result<tokio::runtime::Runtime> {
    if threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .enable_all()
            .build()
    }
}

/// `memfleet router`: serves until SIGINT or SIGTERM.
pub fn run(args: &RouterArgs) -> anyhow::Result<()> {
    let config = load_config(args)?;
    let tls = args
        .tls_files()?
        .map(ServerTls::load)
        .transpose()
        .context("TLS")?
        .map(Arc::new);
    let auth = ClientAuth::default();
    if let Some(file) = &args.auth_file {
        auth.store(Some(Arc::new(load_auth(file).context("--auth-file")?)));
    }
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let rt = runtime(threads)?;
    rt.block_on(async {
        // Every handler is in place before the ports open: a signal sent as soon as the
        // router answers must not meet the default action (which ends the process).
        use tokio::signal::unix::{signal, SignalKind};
        let mut int = signal(SignalKind::interrupt())?;
        let mut term = signal(SignalKind::terminate())?;
        let hup = signal(SignalKind::hangup())?;
        let stop = async move {
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
        };
        let (reload_tx, reload_rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(watch_config(
            args.clone(),
            hup,
            reload_tx,
            tls.clone(),
            auth.clone(),
        ));
        let bound = bind(config, args.admin_listen.as_deref())
            .await?
            .with_auth(auth);
        let bound = match tls {
            Some(tls) => bound.with_tls(tls),
            None => bound,
        };
        bound.run(stop, reload_rx).await;
        anyhow::Ok(())
    })
}
