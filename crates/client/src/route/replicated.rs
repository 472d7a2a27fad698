//! `replicated` (§3.2.3): reads from one replica per client (its zone's first), failing
//! over to the others in order; writes to every replica, answered by the write policy;
//! deletes by the delete rule.

use super::combine::{all_deleted, all_sync, by_policy};
use super::request::{ReplyFuture, RequestClass, RouteContext, RouteRequest};
use super::{Build, Route, RouteCounters, RouteNode, Step};
use memfleet_routing::{Replicated, WritePolicy};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// A `replicated` route, ready to run.
pub(super) struct ReplicatedRoute {
    /// In failover order.
    replicas: Vec<Arc<Route>>,
    /// A fixed identity for replica choice, instead of the caller's.
    client_id: Option<u64>,
    /// What a write needs to answer success.
    write: WritePolicy,
    /// Failovers.
    counters: Arc<RouteCounters>,
    /// How many of `replicas` (the first ones) are in the router's zone: reads choose
    /// among them first (0: no zones, every replica alike).
    local: usize,
}

impl ReplicatedRoute {
    pub(super) fn build(s: &Replicated, b: &mut Build<'_, '_>) -> ReplicatedRoute {
        // The replicas that are pools of the router's zone first (reads start there).
        let (mut ordered, remote): (Vec<&String>, Vec<&String>) =
            s.replicas.iter().partition(|r| b.in_zone(r));
        let local = ordered.len();
        ordered.extend(remote);
        ReplicatedRoute {
            write: s.write,
            replicas: ordered.into_iter().map(|r| b.route(r)).collect(),
            client_id: s
                .client_id
                .as_ref()
                .map(|id| xxhash_rust::xxh3::xxh3_64(id.as_bytes())),
            counters: b.counters(&["replica_failovers"]),
            local,
        }
    }

    /// The order this route reads its replicas in for `ctx`'s client.
    fn read_order(&self, ctx: RouteContext) -> impl Iterator<Item = usize> {
        let client = self.client_id.unwrap_or(ctx.client);
        replica_order(self.replicas.len(), self.local, client)
    }
}

/// The order a replicated route reads `n` replicas in for `client`: one chosen by the
/// client among the `local` first ones (the router's zone; all `n` when 0), the other
/// local ones after it, then the rest in order.
fn replica_order(n: usize, local: usize, client: u64) -> impl Iterator<Item = usize> {
    let pick = if local > 0 { local } else { n };
    let first = (client % pick as u64) as usize;
    (0..pick).map(move |i| (first + i) % pick).chain(pick..n)
}

impl RouteNode for ReplicatedRoute {
    fn call(&self, op: RouteRequest, ctx: RouteContext) -> ReplyFuture {
        if op.class != RequestClass::Get {
            let calls = self
                .replicas
                .iter()
                .map(|r| r.call(op.clone(), ctx))
                .collect();
            return match op.class {
                // Each replica spools the delete it cannot take now.
                RequestClass::Delete => all_deleted(calls),
                RequestClass::Set => by_policy(calls, self.write),
                _ => all_sync(calls),
            };
        }
        // Reads: one replica per client (of its zone's, when it has some), the others in
        // order after it on failure.
        let mut order = self.read_order(ctx);
        let call = self.replicas[order.next().unwrap_or(0)].call(op.clone(), ctx);
        let order: Vec<usize> = order.collect();
        let (replicas, counters) = (self.replicas.clone(), self.counters.clone());
        Box::pin(async move {
            let mut reply = call.await;
            for next in order {
                if reply.is_ok() {
                    break;
                }
                counters.replica_failovers.fetch_add(1, Ordering::Relaxed);
                reply = replicas[next].call(op.clone(), ctx).await;
            }
            reply
        })
    }

    fn children(&self) -> Vec<&Arc<Route>> {
        self.replicas.iter().collect()
    }

    fn walk<'r, 'k>(
        &'r self,
        class: RequestClass,
        key: &'k [u8],
        ctx: RouteContext,
    ) -> Step<'r, 'k> {
        if class == RequestClass::Get {
            let order = self.read_order(ctx).map(|i| &self.replicas[i]);
            return Step::new("replicated|read (failover in order)").then_all(order, key);
        }
        let line = format!("replicated|write={} (all replicas)", self.write.name());
        Step::new(line).then_all(&self.replicas, key)
    }

    fn get_target(&self, key: &[u8], ctx: RouteContext) -> Option<std::net::SocketAddr> {
        let first = self.read_order(ctx).next()?;
        self.replicas[first].get_target(key, ctx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zone_local_replicas_are_read_first() {
        let order = |local, client| replica_order(4, local, client).collect::<Vec<_>>();
        assert_eq!(order(0, 5), [1, 2, 3, 0]);
        assert_eq!(order(2, 5), [1, 0, 2, 3]);
        assert_eq!(order(2, 4), [0, 1, 2, 3]);
        assert_eq!(order(1, 7), [0, 1, 2, 3]);
    }
}
