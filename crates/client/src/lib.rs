//! memfleet's client library and routing core.
//!
//! The paper (§3.1) keeps the system's intelligence in a stateless client inside each web
//! server; mcrouter is the same logic as a proxy. Here too: this crate runs pools and routes
//! (from `memfleet_routing`'s configuration) over pooled, pipelined server connections, and
//! both `memfleet router` and applications use it, so a route behaves the same embedded or
//! behind a proxy.
//!
//! | module | what it holds |
//! |--------|---------------|
//! | `backend` | a server's pooled, pipelined connections; timeouts; marking down (TKO) and probing |
//! | `route` | routes over pools: prefix, operation, replicated, gutter, broadcast, warm-up |
//! | `spool` | deletes that could not be delivered, on disk until they are |
//! | `topology` | a configuration built: every pool and route, reusing what a reload keeps |

pub mod backend;
pub mod route;
pub mod spool;
mod topology;

pub use backend::{Backend, BackendError, BackendOptions};
pub use route::{Class, Ctx, Form, Op, Reply, ReplyFuture, Route, RouteCounters};
pub use topology::{Pool, Topology};
