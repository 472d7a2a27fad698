//! memfleet's route execution: a configuration from `memfleet_routing` run over pooled,
//! pipelined server connections, and the client library built on it.
//!
//! The paper (§3.1) keeps the system's intelligence in a stateless client inside each web
//! server; mcrouter is the same logic as a proxy. Here too: `memfleet_routing` says where a
//! key goes and what the pools and routes are; this crate does the sending — connections,
//! failover, the delete spool, replies combined — and both `memfleet router` and
//! applications ([`Client`]) use it, so a route behaves the same embedded or behind a proxy.
//!
//! | module | what it holds |
//! |--------|---------------|
//! | `backend` | a server's pooled, pipelined connections; timeouts; marking down (TKO) and probing |
//! | `conn_stats` | what a server connection measures: commands sent and latencies, per connection (one worker's) |
//! | `outstanding` | a server's cap on requests in flight (`max_outstanding`), shared out over its connections |
//! | `lanes` | which runtime a server connection's task runs on: its router worker's, so requests do not cross threads |
//! | `route` | running routes (configured in `memfleet_routing::routes`): one key's request down a tree of pools, prefix, operation, replicated, gutter, broadcast, warm-up nodes |
//! | `spool` | deletes that could not be delivered, on disk until they are (`queue.rs` one server's queue and replay, `files.rs` the on-disk layout) |
//! | `topology` | a configuration built: every pool and route, reusing what a reload keeps; following pools' DNS entries |
//! | `discovery` | pools' DNS entries (`dns+`, `dnssrv+`) looked up and followed: members, last good answers, counters |
//! | `client` | [`Client`]: every command, look-aside with leases, typed and compressed values |
//! | `window` | sliding-window flow control over all of a client's outstanding requests |
//! | `udp` | gets over UDP, with drops and reordering seen as misses |
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use memfleet_client::Client;
//!
//! let cache = Client::with_servers(&["127.0.0.1:11211", "127.0.0.1:11212"])?;
//! let profile = cache
//!     .get_or_fill("user:42", 300, || async {
//!         // The database read; runs once per key and lease interval, however many
//!         // callers miss at the same time.
//!         Ok::<_, anyhow::Error>(b"{\"name\":\"Ada\"}".to_vec())
//!     })
//!     .await?;
//! cache.delete("user:42").await?; // after the database write: invalidate, never update
//! # let _ = profile; Ok(()) }
//! ```

pub mod backend;
mod client;
pub mod conn_stats;
pub mod discovery;
pub mod lanes;
pub mod metrics_http;
pub mod outstanding;
pub mod remote_markers;
pub mod route;
pub mod spool;
mod topology;
pub mod udp;
pub mod window;

pub use backend::{Backend, BackendAuth, BackendError, BackendOptions};
pub use client::{
    CasOutcome, Client, ClientOptions, Error, Lease, RegionalStats, UdpGet, Value, FLAG_COMPRESSED,
};
pub use route::{
    ReplyFuture, RequestClass, RequestForm, Route, RouteContext, RouteCounters, RouteReply,
    RouteRequest,
};
pub use topology::{DnsSummary, Pool, RateLimits, Topology};
