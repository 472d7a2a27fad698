//! [`Client`]: the application's side of memfleet — every memcached command, routed by the
//! same pools and routes as `memfleet router` (a gutter, replicas, prefixes behave the same
//! embedded), under sliding-window flow control, with the paper's look-aside pattern
//! ([`Client::get_or_fill`]) built on leases.
//!
//! | file | what it holds |
//! |------|---------------|
//! | (this file) | [`Client`]: building one, the window and the route every command goes through, compression |
//! | `values.rs` | what commands answer: [`Value`], [`Lease`], [`UdpGet`], [`CasOutcome`], [`Error`] |
//! | `options.rs` | [`ClientOptions`] |
//! | `commands.rs` | memcached's commands: retrieval, storage, delete, arithmetic, touch, meta, flush, version |
//! | `lookaside.rs` | leases and look-aside (`get_or_fill`), remote markers, typed (JSON) values |
//! | `replies.rs` | reading a server's replies: retrieval lines, stored/not stored, key checks |

mod commands;
mod lookaside;
mod options;
mod regional;
mod replies;
mod values;

pub use self::options::ClientOptions;
pub use self::regional::RegionalStats;
pub use self::values::{CasOutcome, Error, Lease, UdpGet, Value, FLAG_COMPRESSED};

use crate::route::{Route, RouteContext, RouteReply, RouteRequest};
use crate::udp::UdpGets;
use crate::window::{RequestOutcome, Window};
use crate::{BackendError, Topology};
use arc_swap::ArcSwap;
use memfleet_routing::RouterConfig;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A memcache client. Cheap to clone (clones share connections and the window).
#[derive(Clone)]
pub struct Client {
    /// What it runs now: swapped when its pools' DNS members change.
    current: Arc<ArcSwap<Current>>,
    window: Arc<Window>,
    options: Arc<ClientOptions>,
    lane: usize,
    udp: Option<Arc<UdpGets>>,
    regional: Arc<regional::RegionalCounters>,
}

/// A client's topology and the route of it the client runs.
struct Current {
    topology: Arc<Topology>,
    root: Arc<Route>,
}

impl Current {
    fn of(topology: Topology, route: &str) -> anyhow::Result<Current> {
        let root = topology
            .route(route)
            .ok_or_else(|| anyhow::anyhow!("no pool or route named {route:?}"))?;
        Ok(Current {
            topology: Arc::new(topology),
            root,
        })
    }
}

/// Lanes handed to clients, so that separate clients spread over a server's connections.
static LANES: AtomicUsize = AtomicUsize::new(0);

impl Client {
    /// A client for the route (or pool) called `route` of `config` — the same configuration
    /// a `memfleet router` reads. Must be called inside a tokio runtime. Pools' DNS entries
    /// (`dns+`, `dnssrv+`) are looked up in the background, the first time at once (until
    /// they answer, requests to a pool with no other server fail): [`Client::connect`]
    /// waits for that first answer.
    pub fn new(
        config: &RouterConfig,
        route: &str,
        options: ClientOptions,
    ) -> anyhow::Result<Client> {
        let current = Current::of(Topology::build(config, None)?, route)?;
        let client = Client::with(current, options)?;
        client.follow_dns(route, Duration::ZERO);
        Ok(client)
    }

    /// A client as [`Client::new`] makes one, its pools' DNS entries looked up before it is
    /// returned (an entry that does not answer leaves its pool without those members, and
    /// is looked up again every `resolve_interval`).
    pub async fn connect(
        config: &RouterConfig,
        route: &str,
        options: ClientOptions,
    ) -> anyhow::Result<Client> {
        let current = Current::of(Topology::build_resolving(config, None).await?, route)?;
        let first_round = current.topology.next_dns_round().unwrap_or_default();
        let client = Client::with(current, options)?;
        client.follow_dns(route, first_round);
        Ok(client)
    }

    fn with(current: Current, options: ClientOptions) -> anyhow::Result<Client> {
        let (initial, min, max) = options.window;
        let udp = options
            .udp
            .map(|timeout| UdpGets::new(timeout).map(Arc::new))
            .transpose()?;
        Ok(Client {
            current: Arc::new(ArcSwap::from_pointee(current)),
            window: Arc::new(Window::new(initial, min, max)),
            options: Arc::new(options),
            lane: LANES.fetch_add(1, Ordering::Relaxed),
            udp,
            regional: Arc::default(),
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

    /// Follows its pools' DNS entries while any clone of it lives: each round (the first
    /// after `first`) may swap in a topology with the new members, as a router's reload
    /// does (connections to servers that stay are kept).
    fn follow_dns(&self, route: &str, first: Duration) {
        if self.topology().next_dns_round().is_none() {
            return;
        }
        let current = Arc::downgrade(&self.current);
        let route = route.to_string();
        tokio::spawn(async move {
            let mut wait = first;
            loop {
                tokio::time::sleep(wait).await;
                let Some(shared) = current.upgrade() else {
                    return; // every clone is gone
                };
                let topology = shared.load().topology.clone();
                drop(shared);
                if let Some(built) = topology.follow_dns().await {
                    match built.and_then(|t| Current::of(t, &route)) {
                        Ok(next) => match current.upgrade() {
                            Some(shared) => shared.store(Arc::new(next)),
                            None => return,
                        },
                        Err(e) => tracing::error!(
                            error = %format!("{e:#}"),
                            "new DNS members refused; the old ones keep serving"
                        ),
                    }
                }
                wait = topology.next_dns_round().unwrap_or_default();
            }
        });
    }

    /// The pools and routes it runs now (counters, spool depths).
    pub fn topology(&self) -> Arc<Topology> {
        self.current.load().topology.clone()
    }

    /// The route it runs now.
    fn root(&self) -> Arc<Route> {
        self.current.load().root.clone()
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
        let reply = self.current.load().root.call(op, self.ctx()).await;
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
