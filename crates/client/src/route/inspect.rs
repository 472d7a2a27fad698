//! Reading a route without running it: where a get would go (for UDP), which pools it
//! reaches (`stats`, `flush_all`), which servers a key can reach (the router's admin key).

use super::request::RouteContext;
use super::{replica_order, Phase, Route};
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
            Route::Prefix {
                prefixes,
                default,
                strip,
            } => match prefixes.iter().find(|(p, _)| key.starts_with(p)) {
                Some(_) if *strip => None,
                Some((_, route)) => route.get_target(key, ctx),
                None => default.get_target(key, ctx),
            },
            Route::Operation { get, .. } => get.get_target(key, ctx),
            Route::Replicated {
                replicas,
                client_id,
                local,
                ..
            } => {
                let client = client_id.unwrap_or(ctx.client);
                let first = replica_order(replicas.len(), *local, client).next()?;
                replicas[first].get_target(key, ctx)
            }
            Route::Gutter { main, .. } => main.get_target(key, ctx),
            Route::Broadcast { to, .. } => to[0].get_target(key, ctx),
            Route::WarmUp { cold, enabled, .. } => {
                if *enabled {
                    None
                } else {
                    cold.get_target(key, ctx)
                }
            }
            // A get's plain key and server, unchanged: the TTL rewrite touches no get.
            Route::Ttl { child, .. } => child.get_target(key, ctx),
            // A shadowed get must go through the route to be copied and compared.
            Route::Shadow(s) if s.shadows(key) => None,
            Route::Shadow(s) => s.main.get_target(key, ctx),
            Route::Migrate(m) => match m.phase() {
                Phase::Before => m.from.get_target(key, ctx),
                Phase::After => m.to.get_target(key, ctx),
                Phase::During => None, // a miss falls back: TCP decides
            },
            Route::BigValue(_) => None, // an index needs its chunks
            // Failover and fan-out need TCP replies to decide; null and error no server.
            Route::Null
            | Route::Error(_)
            | Route::Failover(_)
            | Route::AllFastest(_)
            | Route::AllInitial(_) => None,
        }
    }

    /// The largest `item_size_max` of the pools the route reaches: what a client of the
    /// route may send (each pool then refuses what is over its own).
    pub fn item_size_max(&self) -> usize {
        let mut pools = Vec::new();
        self.pools(&mut pools);
        let largest = pools
            .iter()
            .map(|p| p.config().item_size_max)
            .max()
            .unwrap_or(memfleet_routing::config::DEFAULT_ITEM_SIZE_MAX);
        largest.max(self.bigvalue_limit())
    }

    /// The largest `item_size_max` of the bigvalue routes this route reaches (0: none).
    fn bigvalue_limit(&self) -> usize {
        match self {
            Route::BigValue(b) => b.item_size_max.max(b.child.bigvalue_limit()),
            Route::Pool(_) | Route::Null | Route::Error(_) => 0,
            Route::Prefix {
                prefixes, default, ..
            } => prefixes
                .iter()
                .map(|(_, r)| r.bigvalue_limit())
                .chain([default.bigvalue_limit()])
                .max()
                .unwrap_or(0),
            Route::Operation {
                get,
                set,
                delete,
                other,
            } => [get, set, delete, other]
                .iter()
                .map(|r| r.bigvalue_limit())
                .max()
                .unwrap_or(0),
            Route::Replicated { replicas: list, .. }
            | Route::Broadcast { to: list, .. }
            | Route::AllFastest(list)
            | Route::AllInitial(list) => list.iter().map(|r| r.bigvalue_limit()).max().unwrap_or(0),
            Route::Failover(f) => f
                .children
                .iter()
                .map(|r| r.bigvalue_limit())
                .max()
                .unwrap_or(0),
            Route::Gutter {
                main: a, gutter: b, ..
            }
            | Route::WarmUp {
                cold: a, warm: b, ..
            } => a.bigvalue_limit().max(b.bigvalue_limit()),
            Route::Shadow(s) => s.main.bigvalue_limit().max(s.shadow.bigvalue_limit()),
            Route::Migrate(m) => m.from.bigvalue_limit().max(m.to.bigvalue_limit()),
            Route::Ttl { child, .. } => child.bigvalue_limit(),
        }
    }

    /// Every pool the route reaches (for flush_all, stats).
    pub fn pools(&self, out: &mut Vec<Arc<Pool>>) {
        let mut add = |r: &Arc<Route>| r.pools(out);
        match self {
            Route::Pool(p) => {
                if !out.iter().any(|q| Arc::ptr_eq(q, p)) {
                    out.push(p.clone());
                }
            }
            Route::Prefix {
                prefixes, default, ..
            } => {
                prefixes.iter().for_each(|(_, r)| add(r));
                add(default);
            }
            Route::Operation {
                get,
                set,
                delete,
                other,
            } => [get, set, delete, other].into_iter().for_each(add),
            Route::Replicated { replicas, .. } => replicas.iter().for_each(add),
            Route::Gutter { main, gutter, .. } => [main, gutter].into_iter().for_each(add),
            Route::Broadcast { to, .. } => to.iter().for_each(add),
            Route::WarmUp { cold, warm, .. } => [cold, warm].into_iter().for_each(add),
            Route::Null | Route::Error(_) => {}
            Route::Ttl { child, .. } => add(child),
            Route::Failover(f) => f.children.iter().for_each(add),
            Route::AllFastest(children) | Route::AllInitial(children) => {
                children.iter().for_each(add)
            }
            Route::Shadow(s) => [&s.main, &s.shadow].into_iter().for_each(add),
            Route::Migrate(m) => [&m.from, &m.to].into_iter().for_each(add),
            Route::BigValue(b) => add(&b.child),
        }
    }

    /// Every server (`host:port`) an operation on `key` can reach through this route, once
    /// each: where a get goes first (for `ctx`'s client), then where other operations,
    /// failover (replicas, gutter) and fills can take it. A prefix route's destination sees
    /// the key as it is sent, stripped or not. Read-only: for the router's admin key.
    pub fn servers_for(&self, key: &[u8], ctx: RouteContext, out: &mut Vec<String>) {
        match self {
            Route::Pool(pool) => {
                let server = pool.ring().nodes()[pool.pick(key)].addr();
                if !out.contains(&server) {
                    out.push(server);
                }
            }
            Route::Prefix {
                prefixes,
                default,
                strip,
            } => match prefixes.iter().find(|(p, _)| key.starts_with(p)) {
                Some((p, route)) if *strip => route.servers_for(&key[p.len()..], ctx, out),
                Some((_, route)) => route.servers_for(key, ctx, out),
                None => default.servers_for(key, ctx, out),
            },
            Route::Operation {
                get,
                set,
                delete,
                other,
            } => {
                for r in [get, set, delete, other] {
                    r.servers_for(key, ctx, out);
                }
            }
            Route::Replicated {
                replicas,
                client_id,
                local,
                ..
            } => {
                let client = client_id.unwrap_or(ctx.client);
                for i in replica_order(replicas.len(), *local, client) {
                    replicas[i].servers_for(key, ctx, out);
                }
            }
            Route::Gutter { main, gutter, .. } => {
                main.servers_for(key, ctx, out);
                gutter.servers_for(key, ctx, out);
            }
            Route::Broadcast { to, .. } => to.iter().for_each(|r| r.servers_for(key, ctx, out)),
            Route::WarmUp { cold, warm, .. } => {
                cold.servers_for(key, ctx, out);
                warm.servers_for(key, ctx, out);
            }
            Route::Null | Route::Error(_) => {}
            Route::Ttl { child, .. } => child.servers_for(key, ctx, out),
            Route::Failover(f) => {
                for i in f.order_for(key) {
                    f.children[i].servers_for(key, ctx, out);
                }
            }
            Route::AllFastest(children) | Route::AllInitial(children) => {
                children.iter().for_each(|r| r.servers_for(key, ctx, out))
            }
            Route::Shadow(s) => {
                s.main.servers_for(key, ctx, out);
                if s.shadows(key) {
                    s.shadow.servers_for(key, ctx, out);
                }
            }
            Route::Migrate(m) => match m.phase() {
                Phase::Before => m.from.servers_for(key, ctx, out),
                Phase::After => m.to.servers_for(key, ctx, out),
                Phase::During => {
                    m.to.servers_for(key, ctx, out);
                    m.from.servers_for(key, ctx, out);
                }
            },
            // The index's server (chunks have keys of their own, on any server).
            Route::BigValue(b) => b.child.servers_for(key, ctx, out),
        }
    }
}
