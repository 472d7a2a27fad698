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
//!
//! Not yet (issue 5 continues): hot reload, the admin `/metrics` endpoint and key lookups,
//! the benchmark against nutcracker.

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
    /// Resolves the servers and prepares their connections (made on first use).
    pub fn new(config: PoolConfig) -> anyhow::Result<Pool> {
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
                Ok(Backend::new(addr, n.addr(), options.clone()))
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

/// Pools bound to their listeners, not yet serving.
pub struct Bound {
    /// Each listening pool's address, in configuration order.
    pub addrs: Vec<SocketAddr>,
    listeners: Vec<(Arc<Pool>, tokio::net::TcpListener)>,
}

/// Binds one listener per pool that has a `listen` address.
pub async fn bind(pools: Vec<PoolConfig>) -> anyhow::Result<Bound> {
    let mut addrs = Vec::new();
    let mut listeners = Vec::new();
    for config in pools {
        let Some(listen) = config.listen.clone() else {
            continue;
        };
        anyhow::ensure!(
            !listen.starts_with('/'),
            "pool {}: Unix-socket listeners are not supported yet",
            config.name
        );
        let listener = tokio::net::TcpListener::bind(&listen)
            .await
            .with_context(|| format!("pool {}: cannot listen on {listen}", config.name))?;
        addrs.push(listener.local_addr()?);
        let pool = Arc::new(Pool::new(config)?);
        tracing::info!(pool = pool.name(), listen = %listener.local_addr()?, "routing");
        listeners.push((pool, listener));
    }
    anyhow::ensure!(!listeners.is_empty(), "no pool has a listen address");
    Ok(Bound { addrs, listeners })
}

impl Bound {
    /// Accepts and serves clients until `stop` resolves.
    pub async fn run(self, stop: impl std::future::Future<Output = ()>) {
        let mut tasks = Vec::new();
        for (pool, listener) in self.listeners {
            tasks.push(tokio::spawn(async move {
                let mut lane = 0usize;
                loop {
                    match listener.accept().await {
                        Ok((stream, _)) => {
                            lane = lane.wrapping_add(1);
                            tokio::spawn(proxy::serve(pool.clone(), stream, lane));
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "accept failed");
                            tokio::time::sleep(Duration::from_millis(10)).await;
                        }
                    }
                }
            }));
        }
        stop.await;
        for t in tasks {
            t.abort();
        }
    }
}

/// A router running on its own runtime (tests, embedding); stops when dropped.
pub struct Running {
    /// Each listening pool's address, in configuration order.
    pub addrs: Vec<SocketAddr>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Running {
    /// Starts `pools` on a new runtime of `threads` workers; returns once they listen.
    pub fn start(pools: Vec<PoolConfig>, threads: usize) -> anyhow::Result<Running> {
        let rt = runtime(threads)?;
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("memfleet-router".into())
            .spawn(move || {
                rt.block_on(async move {
                    match bind(pools).await {
                        Ok(bound) => {
                            let _ = ready_tx.send(Ok(bound.addrs.clone()));
                            bound
                                .run(async move {
                                    let _ = stop_rx.await;
                                })
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
            Ok(Ok(addrs)) => Ok(Running {
                addrs,
                stop: Some(stop_tx),
                thread: Some(thread),
            }),
            Ok(Err(e)) => Err(e),
            Err(_) => anyhow::bail!("the router thread ended at start"),
        }
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
        bind(pools).await?.run(stop).await;
        anyhow::Ok(())
    })
}
