//! Running routes (`memfleet_routing::routes`): one key's operation goes down the tree to
//! pools, and the tree decides what to do with their replies and failures.
//!
//! Every call starts its first server request *before* returning (the same rule as
//! [`Backend::call`](crate::backend::Backend::call)): a client's requests reach each server
//! in the order it sent them. Work that depends on a reply (failover, gutter, warm-up fills)
//! follows when the future runs.
//!
//! A route answers `Err` only when it could not get a server's reply at all (down, timeout,
//! connection); a server's own error line is a reply. The proxy turns `Err` into a miss for
//! gets and `SERVER_ERROR` otherwise.
//!
//! A route is a pool (the leaf) or a node of one route type, a `RouteNode`: how it sends
//! a request on, its children, and the step an operation on a key takes through it (the
//! one walk that `route_handles`, the servers a key reaches and UDP's get target read).
//! Each type is a file, beside its settings' file in `memfleet_routing::routes`:
//!
//! | file | what it holds |
//! |------|---------------|
//! | (this file) | [`Route`], `RouteNode` and `Step` |
//! | `build.rs` | routes built from their checked configuration: the list of route types |
//! | `pool.rs` | the leaf: a pool's server, the spool, the read hold while a queue replays |
//! | `prefix.rs`, `operation.rs`, `replicated.rs`, `gutter.rs`, `broadcast.rs`, `warmup.rs` | the paper's routes (§3.2.2–§4.3) |
//! | `answer.rs`, `ttl.rs`, `failover.rs`, `fanout.rs`, `shadow.rs`, `migrate.rs`, `bigvalue.rs` | mcrouter's (`null`/`error`, `ttl`, `failover`, `all-fastest`/`all-initial`, `shadow`, `migrate`, `bigvalue`) |
//! | `request.rs` | [`RouteRequest`]: one key's request, its class and written form; [`RouteContext`]; [`RouteReply`] |
//! | `combine.rs` | one reply from many (the delete rule, the write policy) |
//! | `inspect.rs` | reading a route without running it: UDP targets, pools, a key's servers |
//! | `handles.rs` | the nodes an operation on a key walks, as text (`route_handles`) |
//! | `counters.rs` | [`RouteCounters`] |

mod answer;
mod bigvalue;
mod broadcast;
mod build;
mod combine;
mod counters;
mod failover;
mod fanout;
mod gutter;
mod handles;
mod inspect;
mod migrate;
mod operation;
mod pool;
mod prefix;
mod replicated;
mod request;
mod shadow;
mod ttl;
mod warmup;

pub(crate) use build::build;
use build::Build;
pub use counters::{RouteCounters, COUNTERS};
pub use handles::{operation_class, pool_handle};
use pool::pool_call;
pub use request::{ReplyFuture, RequestClass, RequestForm, RouteContext, RouteReply, RouteRequest};

use crate::Pool;
use std::sync::Arc;

/// A route, ready to run.
pub enum Route {
    /// A pool: the key's server.
    Pool(Arc<Pool>),
    /// A node of one of the other route types.
    Node(Node),
}

/// A route node of any type but a pool.
pub struct Node(Box<dyn RouteNode>);

/// One route type, ready to run (a file of this module each).
pub(crate) trait RouteNode: Send + Sync {
    /// Sends `op` on (see the module doc: the first server request starts before this
    /// returns).
    fn call(&self, op: RouteRequest, ctx: RouteContext) -> ReplyFuture;

    /// Every child, as configured.
    fn children(&self) -> Vec<&Arc<Route>>;

    /// The step an operation of `class` on `key` takes here: this node's line in
    /// `route_handles`, and the children it reaches in the order it reaches them (the
    /// first a get asks first, failover targets after it), each with the key it sees.
    /// Read-only.
    fn walk<'r, 'k>(
        &'r self,
        class: RequestClass,
        key: &'k [u8],
        ctx: RouteContext,
    ) -> Step<'r, 'k>;

    /// The one server a get of `key` would go to unchanged, when this node passes gets to
    /// a single child as they are (see [`Route::get_target`]); `None` by default: the get
    /// needs TCP and the route.
    fn get_target(&self, _key: &[u8], _ctx: RouteContext) -> Option<std::net::SocketAddr> {
        None
    }

    /// The largest value this node itself takes, when it takes more than its pools do
    /// (`bigvalue`); 0 otherwise.
    fn item_size_max(&self) -> usize {
        0
    }
}

/// What [`RouteNode::walk`] answers.
pub(crate) struct Step<'r, 'k> {
    /// The node's line.
    line: String,
    /// The children reached, in order, each with the key it sees.
    next: Vec<(&'r Arc<Route>, &'k [u8])>,
}

impl<'r, 'k> Step<'r, 'k> {
    /// A step whose line is `line`, reaching nothing yet.
    fn new(line: impl Into<String>) -> Self {
        Step {
            line: line.into(),
            next: Vec::new(),
        }
    }

    /// This step, reaching `route` with `key` next.
    fn then(mut self, route: &'r Arc<Route>, key: &'k [u8]) -> Self {
        self.next.push((route, key));
        self
    }

    /// This step, reaching each of `routes` with `key` next.
    fn then_all(mut self, routes: impl IntoIterator<Item = &'r Arc<Route>>, key: &'k [u8]) -> Self {
        self.next.extend(routes.into_iter().map(|r| (r, key)));
        self
    }
}

impl Route {
    /// A route of one of the other types.
    fn node(node: impl RouteNode + 'static) -> Route {
        Route::Node(Node(Box::new(node)))
    }

    /// Sends `op` down this route.
    pub fn call(self: &Arc<Self>, op: RouteRequest, ctx: RouteContext) -> ReplyFuture {
        match &**self {
            Route::Pool(pool) => pool_call(pool, op, ctx),
            Route::Node(node) => node.0.call(op, ctx),
        }
    }
}

/// A reply that is already there.
fn ready(reply: RouteReply) -> ReplyFuture {
    Box::pin(std::future::ready(reply))
}
