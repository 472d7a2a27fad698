//! Reading a route without running it: where a get would go (for UDP), which pools it
//! reaches (`stats`, `flush_all`), which servers a key can reach (the router's admin key),
//! the largest value it takes. Each is one walk over [`RouteNode`]'s `children` or `walk`.

use super::request::{RequestClass, RouteContext};
use super::Route;
use crate::Pool;
use std::sync::atomic::Ordering;
use std::sync::Arc;

impl Route {
    /// The one server a get of `key` would be sent to, when the route sends gets to a
    /// single server unchanged (so the get can go there over UDP instead); `None` when the
    /// route rewrites the key, fills, or the server is marked down (then TCP and the route
    /// decide).
    pub fn get_target(&self, key: &[u8], ctx: RouteContext) -> Option<std::net::SocketAddr> {
        match self {
            // A datagram can neither authenticate nor be encrypted: the gets of a pool that
            // logs in or speaks TLS to its servers stay on that connection.
            Route::Pool(pool) if pool.config().auth.is_some() || pool.config().tls.is_some() => {
                None
            }
            Route::Pool(pool) => {
                let (backend, queue) = pool.server_for(key);
                let held = queue.is_some_and(|q| q.holds_reads());
                (!held && !backend.health().down.load(Ordering::Acquire)).then(|| backend.addr())
            }
            Route::Node(node) => node.0.get_target(key, ctx),
        }
    }

    /// The largest `item_size_max` of the pools the route reaches: what a client of the
    /// route may send (each pool then refuses what is over its own), or more where a
    /// `bigvalue` route takes more.
    pub fn item_size_max(&self) -> usize {
        let mut pools = Vec::new();
        self.pools(&mut pools);
        let largest = pools
            .iter()
            .map(|p| p.config().item_size_max)
            .max()
            .unwrap_or(memfleet_routing::config::DEFAULT_ITEM_SIZE_MAX);
        largest.max(self.nodes_item_size_max())
    }

    /// The largest value a node of this route itself takes (0: none says).
    fn nodes_item_size_max(&self) -> usize {
        let Route::Node(node) = self else {
            return 0;
        };
        let children = node.0.children().into_iter();
        let below = children.map(|c| c.nodes_item_size_max()).max();
        node.0.item_size_max().max(below.unwrap_or(0))
    }

    /// Every pool the route reaches (for flush_all, stats).
    pub fn pools(&self, out: &mut Vec<Arc<Pool>>) {
        match self {
            Route::Pool(p) => {
                if !out.iter().any(|q| Arc::ptr_eq(q, p)) {
                    out.push(p.clone());
                }
            }
            Route::Node(node) => node.0.children().into_iter().for_each(|c| c.pools(out)),
        }
    }

    /// Every server (`host:port`) an operation on `key` can reach through this route, once
    /// each: where a get goes first (for `ctx`'s client), then where other operations,
    /// failover (replicas, gutter) and fills can take it. A prefix route's destination sees
    /// the key as it is sent, stripped or not. Read-only: for the router's admin key.
    pub fn servers_for(&self, key: &[u8], ctx: RouteContext, out: &mut Vec<String>) {
        for class in [
            RequestClass::Get,
            RequestClass::Set,
            RequestClass::Delete,
            RequestClass::Other,
        ] {
            self.servers_of(class, key, ctx, out);
        }
    }

    /// The servers an operation of `class` on `key` reaches, added to `out` once each.
    fn servers_of(
        &self,
        class: RequestClass,
        key: &[u8],
        ctx: RouteContext,
        out: &mut Vec<String>,
    ) {
        match self {
            Route::Pool(pool) => {
                let server = pool.ring().nodes()[pool.pick(key)].addr();
                if !out.contains(&server) {
                    out.push(server);
                }
            }
            Route::Node(node) => {
                for (child, key) in node.0.walk(class, key, ctx).next {
                    child.servers_of(class, key, ctx, out);
                }
            }
        }
    }
}
