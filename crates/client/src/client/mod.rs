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
mod replies;
mod values;

pub use self::options::ClientOptions;
pub use self::values::{CasOutcome, Error, Lease, UdpGet, Value, FLAG_COMPRESSED};

use crate::route::{Route, RouteContext, RouteReply, RouteRequest};
use crate::udp::UdpGets;
use crate::window::{RequestOutcome, Window};
use crate::{BackendError, Topology};
use memfleet_routing::RouterConfig;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

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
