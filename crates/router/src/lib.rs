//! `memfleet router`: a memcached-protocol proxy (mcrouter's and twemproxy's job).
//!
//! Clients connect to a pool's listener and speak the text and meta protocols as to one
//! memcached; the router sends each key to the server the pool's distribution picks
//! (`memfleet_routing`, compatible with libmemcached, twemproxy, spymemcached and pymemcache
//! placement), over a few shared, pipelined connections per server (`backend`), and answers
//! in order (`proxy`).
//!
//! | module | what it holds |
//! |--------|---------------|
//! | `backend` | a server's pooled, pipelined connections; timeouts; marking down (TKO) and probing |
//! | `proxy` | a client connection: parse, route, split multi-gets, reassemble, reply in order |
//! | `admin` | `/metrics` on the admin address |
//!
//! Not yet (issue 5 continues): hot reload, the admin `/metrics` endpoint and key lookups,
//! the benchmark against nutcracker.

mod admin;
mod backend;
mod proxy;

pub use backend::{BackendError, BackendOptions};

use anyhow::Context;
use backend::Backend;
use memfleet_routing::{PoolConfig, Ring};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// A pool being served: its ring and its servers' connections.
pub struct Pool {
    config: PoolConfig,
    ring: Ring,
    backends: Vec<Arc<Backend>>,
}

impl Pool {
    /// Resolves the servers and prepares their connections (made on first use), reusing
    /// those of `previous` for servers that stay with the same settings (a reload keeps
    /// their connections, counters and health).
    pub fn new(config: PoolConfig, previous: Option<&Pool>) -> anyhow::Result<Pool> {
        let ring = config.ring()?;
        let options = BackendOptions {
            connections: config.server_connections as usize,
            timeout: Duration::from_millis(config.timeout_ms.max(1)),
            failure_limit: if config.auto_eject_hosts {
                config.server_failure_limit
            } else {
                u32::MAX
            },
            retry: Duration::from_millis(config.server_retry_timeout_ms.max(10)),
        };
        let backends = ring
            .nodes()
            .iter()
            .map(|n| {
                let addr = std::net::ToSocketAddrs::to_socket_addrs(&(n.host.as_str(), n.port))
                    .ok()
                    .and_then(|mut a| a.next())
                    .with_context(|| {
                        format!("pool {}: cannot resolve {}", config.name, n.addr())
                    })?;
                let kept = previous.and_then(|p| {
                    p.backends
                        .iter()
                        .find(|b| b.addr() == addr && b.options() == &options)
                });
                Ok(match kept {
                    Some(b) => b.clone(),
                    None => Backend::new(addr, n.addr(), options.clone()),
                })
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok(Pool {
            config,
            ring,
            backends,
        })
    }

    /// The pool's name.
    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// Its servers, in ring order.
    pub(crate) fn backends(&self) -> &[Arc<Backend>] {
        &self.backends
    }

    /// `stats`: the router's counters for this pool, one line per server.
    fn stats(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let mut stat = |name: &str, value: String| {
            out.extend_from_slice(format!("STAT {name} {value}\r\n").as_bytes());
        };
        stat("pool", self.config.name.clone());
        stat("servers", self.backends.len().to_string());
        for b in &self.backends {
            let h = b.health();
            stat(
                &format!("server:{}", b.name()),
                format!(
                    "requests={} errors={} down={} knockouts={}",
                    h.requests.load(Ordering::Relaxed),
                    h.errors.load(Ordering::Relaxed),
                    u8::from(h.down.load(Ordering::Relaxed)),
                    h.knockouts.load(Ordering::Relaxed)
                ),
            );
        }
        out.extend_from_slice(b"END\r\n");
        out
    }
}

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
}

/// Reads the pools a router is started with.
pub fn load_pools(args: &RouterArgs) -> anyhow::Result<Vec<PoolConfig>> {
    let (path, twemproxy) = match (&args.config, &args.twemproxy) {
        (Some(p), None) => (p, false),
        (None, Some(p)) => (p, true),
        _ => anyhow::bail!("give --config FILE.toml or --twemproxy FILE.yml"),
    };
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let pools = if twemproxy {
        memfleet_routing::from_twemproxy_yaml(&text)
    } else {
        memfleet_routing::from_toml(&text)
    };
    pools.with_context(|| format!("in {}", path.display()))
}

/// The pool a listener serves now: a reload swaps it, and every client connection reads
/// it per request, so new routing applies to open connections too.
pub type PoolSlot = Arc<arc_swap::ArcSwap<Pool>>;

/// Pools bound to their listeners, not yet serving.
pub struct Bound {
    /// Each TCP listener's address, in configuration order (Unix sockets are where the
    /// configuration says).
    pub addrs: Vec<SocketAddr>,
    /// The admin port's address (`/metrics`), if asked for.
    pub admin_addr: Option<SocketAddr>,
    listeners: Vec<(String, PoolSlot, Listener)>,
    admin: Option<tokio::net::TcpListener>,
}

/// A pool's listener: TCP (`host:port`) or a Unix socket (a path starting with `/`, as
/// twemproxy writes it).
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

/// Binds one listener per pool that has a `listen` address, and the admin port at
/// `admin` if given.
pub async fn bind(pools: Vec<PoolConfig>, admin: Option<&str>) -> anyhow::Result<Bound> {
    let mut addrs = Vec::new();
    let mut listeners = Vec::new();
    for config in pools {
        let Some(listen) = config.listen.clone() else {
            continue;
        };
        let listener = Listener::bind(&listen)
            .await
            .with_context(|| format!("pool {}: cannot listen on {listen}", config.name))?;
        if let Some(addr) = listener.tcp_addr() {
            addrs.push(addr);
        }
        let pool = Pool::new(config, None)?;
        tracing::info!(pool = pool.name(), %listen, "routing");
        let slot: PoolSlot = Arc::new(arc_swap::ArcSwap::from_pointee(pool));
        listeners.push((listen, slot, listener));
    }
    anyhow::ensure!(!listeners.is_empty(), "no pool has a listen address");
    let admin = match admin {
        Some(a) => Some(
            tokio::net::TcpListener::bind(a)
                .await
                .with_context(|| format!("cannot listen on admin address {a}"))?,
        ),
        None => None,
    };
    let admin_addr = admin.as_ref().map(|l| l.local_addr()).transpose()?;
    Ok(Bound {
        addrs,
        admin_addr,
        listeners,
        admin,
    })
}

impl Bound {
    /// Accepts and serves clients until `stop` resolves; each configuration `reloads` yields
    /// is applied (see [`Serving::reload`]).
    pub async fn run(
        self,
        stop: impl std::future::Future<Output = ()>,
        mut reloads: tokio::sync::mpsc::UnboundedReceiver<Vec<PoolConfig>>,
    ) {
        let mut serving = Serving::default();
        for (listen, slot, listener) in self.listeners {
            serving.accept(listen, slot, listener);
        }
        let admin = self
            .admin
            .map(|l| tokio::spawn(admin::serve(l, serving.pools.clone())));
        tokio::pin!(stop);
        loop {
            tokio::select! {
                () = &mut stop => break,
                Some(pools) = reloads.recv() => serving.reload(pools).await,
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
#[derive(Default)]
pub struct Serving {
    listeners: std::collections::HashMap<String, (PoolSlot, tokio::task::JoinHandle<()>)>,
    /// The pools being served, for the admin port (kept in step with `listeners`).
    pools: Served,
}

/// The pools a router serves, readable by its admin port.
pub type Served = Arc<std::sync::Mutex<Vec<PoolSlot>>>;

impl Serving {
    fn publish(&self) {
        let slots = self.listeners.values().map(|(s, _)| s.clone()).collect();
        *self.pools.lock().unwrap_or_else(|e| e.into_inner()) = slots;
    }

    fn accept(&mut self, listen: String, slot: PoolSlot, listener: Listener) {
        let accepting = slot.clone();
        let task = tokio::spawn(async move {
            let mut lane = 0usize;
            loop {
                lane = lane.wrapping_add(1);
                let accepted = match &listener {
                    Listener::Tcp(l) => l.accept().await.map(|(stream, _)| {
                        tokio::spawn(proxy::serve(accepting.clone(), stream, lane));
                    }),
                    Listener::Unix(l) => l.accept().await.map(|(stream, _)| {
                        tokio::spawn(proxy::serve_unix(accepting.clone(), stream, lane));
                    }),
                };
                if let Err(e) = accepted {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        });
        self.listeners.insert(listen, (slot, task));
        self.publish();
    }

    /// Applies a new configuration, all or nothing: pools on a listen address already
    /// served get the new ring and settings in place (their clients stay connected, and
    /// servers that stay keep their connections); new addresses start listening; addresses
    /// gone stop accepting (their open connections finish on the old pool). A configuration
    /// that cannot be applied (a port that cannot be bound, a server that does not resolve)
    /// is logged and the old one keeps serving.
    pub async fn reload(&mut self, pools: Vec<PoolConfig>) {
        let mut swaps = Vec::new();
        let mut binds = Vec::new();
        for config in pools {
            let Some(listen) = config.listen.clone() else {
                continue;
            };
            let previous = self
                .listeners
                .get(&listen)
                .map(|(slot, _)| slot.load_full());
            let name = config.name.clone();
            match Pool::new(config, previous.as_deref()) {
                Ok(pool) => match self.listeners.get(&listen) {
                    Some((slot, _)) => swaps.push((listen, slot.clone(), pool)),
                    None => match Listener::bind(&listen).await {
                        Ok(l) => binds.push((listen, pool, l)),
                        Err(e) => {
                            tracing::error!(pool = %name, %listen, error = %e, "reload refused: cannot listen");
                            return;
                        }
                    },
                },
                Err(e) => {
                    tracing::error!(error = %format!("{e:#}"), "reload refused");
                    return;
                }
            }
        }
        let kept: std::collections::HashSet<String> = swaps
            .iter()
            .map(|(l, _, _)| l.clone())
            .chain(binds.iter().map(|(l, _, _)| l.clone()))
            .collect();
        for (_, slot, pool) in swaps {
            tracing::info!(
                pool = pool.name(),
                servers = pool.backends.len(),
                "pool reloaded"
            );
            slot.store(Arc::new(pool));
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
            self.publish();
        }
        for (listen, pool, listener) in binds {
            tracing::info!(pool = pool.name(), %listen, "pool added");
            self.accept(
                listen,
                Arc::new(arc_swap::ArcSwap::from_pointee(pool)),
                listener,
            );
        }
    }
}

/// A router running on its own runtime (tests, embedding); stops when dropped.
pub struct Running {
    /// Each TCP listener's address, in configuration order (Unix sockets are where the
    /// configuration says).
    pub addrs: Vec<SocketAddr>,
    /// The admin port's address, if any.
    pub admin_addr: Option<SocketAddr>,
    reloads: tokio::sync::mpsc::UnboundedSender<Vec<PoolConfig>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Running {
    /// Starts `pools` on a new runtime of `threads` workers (and an admin port at `admin`);
    /// returns once they listen.
    pub fn start(
        pools: Vec<PoolConfig>,
        threads: usize,
        admin: Option<String>,
    ) -> anyhow::Result<Running> {
        let rt = runtime(threads)?;
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let (reload_tx, reload_rx) = tokio::sync::mpsc::unbounded_channel();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("memfleet-router".into())
            .spawn(move || {
                rt.block_on(async move {
                    match bind(pools, admin.as_deref()).await {
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
            Ok(Ok((addrs, admin_addr))) => Ok(Running {
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

impl Running {
    /// Applies a new configuration (asynchronously, as a SIGHUP would).
    pub fn reload(&self, pools: Vec<PoolConfig>) {
        let _ = self.reloads.send(pools);
    }
}

impl Drop for Running {
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
/// does not parse is logged and ignored; the next change is tried again.
async fn watch_config(
    args: RouterArgs,
    reloads: tokio::sync::mpsc::UnboundedSender<Vec<PoolConfig>>,
) {
    let path = args.config.clone().or_else(|| args.twemproxy.clone());
    let stamp = |p: &Option<PathBuf>| {
        p.as_ref()
            .and_then(|p| std::fs::metadata(p).ok())
            .map(|m| (m.len(), m.modified().ok()))
    };
    let mut seen = stamp(&path);
    let Ok(mut hup) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) else {
        return;
    };
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        let why = tokio::select! {
            _ = hup.recv() => "SIGHUP",
            _ = tick.tick() => {
                let now = stamp(&path);
                if now == seen {
                    continue;
                }
                seen = now;
                "the file changed"
            }
        };
        match load_pools(&args) {
            Ok(pools) => {
                tracing::info!(reason = why, "reloading the configuration");
                if reloads.send(pools).is_err() {
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
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("MEMFLEET_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .try_init();
    let pools = load_pools(args)?;
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let rt = runtime(threads)?;
    rt.block_on(async {
        let stop = async {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                    .expect("SIGTERM handler");
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        };
        let (reload_tx, reload_rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(watch_config(args.clone(), reload_tx));
        bind(pools, args.admin_listen.as_deref())
            .await?
            .run(stop, reload_rx)
            .await;
        anyhow::Ok(())
    })
}
