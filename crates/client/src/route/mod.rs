//! Running routes (`memfleet_routing::route_config`): one key's operation goes down the tree to
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
//! | file | what it holds |
//! |------|---------------|
//! | (this file) | [`Route`], the tree, and [`Route::call`]: each node's rule (prefix, operation, replicated, gutter, broadcast, warm-up) |
//! | `request.rs` | [`RouteRequest`]: one key's request, its class and written form; [`RouteContext`]; [`RouteReply`] |
//! | `build.rs` | routes built from their checked configuration |
//! | `pool.rs` | the leaf: a pool's server, the spool, the read hold while a queue replays |
//! | `combine.rs` | one reply from many (the delete rule, the write policy) |
//! | `warmup.rs` | cold-cluster fills and hold-offs |
//! | `inspect.rs` | reading a route without running it: UDP targets, pools, a key's servers |
//! | `answer.rs` | `null` and `error` answers, `ttl`'s exptime rewrite |
//! | `failover.rs` | `failover` (order, errors, miss, limit), `all-fastest`, `all-initial` |
//! | `shadow.rs` | `shadow`: main answers, chosen keys copied to the shadow, gets compared |
//! | `migrate.rs` | `migrate`: from one route to another at a given time |
//! | `bigvalue.rs` | `bigvalue`: large values as chunks and an index, reassembled and checked on reads |
//! | `handles.rs` | the nodes an operation on a key walks, as text (`route_handles`) |
//! | `counters.rs` | [`RouteCounters`] |

mod answer;
mod bigvalue;
mod build;
mod combine;
mod counters;
mod failover;
mod handles;
mod inspect;
mod migrate;
mod pool;
mod request;
mod shadow;
mod warmup;

pub use bigvalue::BigValueRoute;
pub(crate) use build::build;
use combine::{all_deleted, all_sync, by_policy};
pub use counters::{RouteCounters, COUNTERS};
pub use failover::{FailoverBucket, FailoverRoute};
pub use handles::{operation_class, pool_handle};
pub use migrate::{MigrateRoute, Phase};
use pool::pool_call;
pub use request::{ReplyFuture, RequestClass, RequestForm, RouteContext, RouteReply, RouteRequest};
pub use shadow::ShadowRoute;
use warmup::warm_call;

use crate::Pool;
use memfleet_protocol::reply::{self, is_hit, ReplyKind, ServerReply};
use memfleet_protocol::response;
use memfleet_routing::{BroadcastMode, WritePolicy};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// A route, ready to run.
pub enum Route {
    /// A pool: the key's server.
    Pool(Arc<Pool>),
    /// Longest prefix first.
    Prefix {
        /// (prefix, route), longest first.
        prefixes: Vec<(Vec<u8>, Arc<Route>)>,
        /// Keys no prefix matches.
        default: Arc<Route>,
        /// Remove the prefix from the key.
        strip: bool,
    },
    /// By operation.
    Operation {
        /// Retrievals.
        get: Arc<Route>,
        /// Storage, arithmetic, touch.
        set: Arc<Route>,
        /// Deletes.
        delete: Arc<Route>,
        /// The rest.
        other: Arc<Route>,
    },
    /// Replicas.
    Replicated {
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
    },
    /// Gutter failover.
    Gutter {
        /// While it answers.
        main: Arc<Route>,
        /// When it does not.
        gutter: Arc<Route>,
        /// Longest TTL in the gutter, seconds.
        ttl: u32,
        /// Gutter requests and hits.
        counters: Arc<RouteCounters>,
    },
    /// To every destination.
    Broadcast {
        /// The destinations.
        to: Vec<Arc<Route>>,
        /// How to answer.
        mode: BroadcastMode,
    },
    /// Cold-cluster warm-up.
    WarmUp {
        /// Asked first.
        cold: Arc<Route>,
        /// Fills cold's misses.
        warm: Arc<Route>,
        /// Hold-off of deletes sent to cold, seconds.
        holdoff: u32,
        /// Off: plain cold.
        enabled: bool,
        /// Cold hits and misses, fills.
        counters: Arc<RouteCounters>,
    },
    /// Answers at once (mcrouter's `NullRoute`).
    Null,
    /// Answers this `SERVER_ERROR` line (mcrouter's `ErrorRoute`).
    Error(Vec<u8>),
    /// Rewrites the exptime of writes (mcrouter's `ModifyExptimeRoute`).
    Ttl {
        /// Where requests go.
        child: Arc<Route>,
        /// Writes live at most this long, seconds.
        max_ttl: Option<u32>,
        /// Writes live this long, seconds (then capped).
        set_ttl: Option<u32>,
    },
    /// Ordered failover (mcrouter's `FailoverRoute`).
    Failover(FailoverRoute),
    /// The first success of every child (mcrouter's `AllFastestRoute`).
    AllFastest(Vec<Arc<Route>>),
    /// The first child's reply; every child gets the request (mcrouter's `AllInitialRoute`).
    AllInitial(Vec<Arc<Route>>),
    /// Main answers; chosen keys are copied to a shadow (mcrouter's `ShadowRoute`).
    Shadow(ShadowRoute),
    /// From one route to another at a given time (mcrouter's `MigrateRoute`).
    Migrate(MigrateRoute),
    /// Large values as chunks (mcrouter's `BigValueRoute`).
    BigValue(BigValueRoute),
}

/// The order a replicated route reads `n` replicas in for `client`: one chosen by the
/// client among the `local` first ones (the router's zone; all `n` when 0), the other
/// local ones after it, then the rest in order.
pub(super) fn replica_order(n: usize, local: usize, client: u64) -> impl Iterator<Item = usize> {
    let pick = if local > 0 { local } else { n };
    let first = (client % pick as u64) as usize;
    (0..pick).map(move |i| (first + i) % pick).chain(pick..n)
}

/// A reply that is already there.
fn ready(reply: RouteReply) -> ReplyFuture {
    Box::pin(std::future::ready(reply))
}

/// A TTL no longer than `cap` seconds, in memcached's exptime convention (0 = never,
/// above 30 days = an absolute Unix time, negative = already expired).
fn capped_exptime(exptime: i64, cap: u32) -> i64 {
    const MONTH: i64 = 30 * 24 * 3600;
    let cap = i64::from(cap);
    match exptime {
        e if e < 0 => e,
        0 => cap,
        e if e > MONTH => {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() as i64);
            if e <= now {
                -1
            } else {
                (e - now).min(cap)
            }
        }
        e => e.min(cap),
    }
}

impl Route {
    /// Sends `op` down this route.
    pub fn call(self: &Arc<Self>, op: RouteRequest, ctx: RouteContext) -> ReplyFuture {
        match &**self {
            Route::Pool(pool) => pool_call(pool, op, ctx),
            Route::Prefix {
                prefixes,
                default,
                strip,
            } => {
                for (p, route) in prefixes {
                    if !op.key.starts_with(p) {
                        continue;
                    }
                    if !*strip {
                        return route.call(op, ctx);
                    }
                    let call = route.call(op.with_key(&op.key[p.len()..]), ctx);
                    if !matches!(op.form, RequestForm::Get { .. }) {
                        return call;
                    }
                    // The client asked for its key, prefix and all: that is the key its
                    // VALUE line names.
                    return Box::pin(async move { call.await.map(|r| rekey(r, &op.key)) });
                }
                default.call(op, ctx)
            }
            Route::Operation {
                get,
                set,
                delete,
                other,
            } => match op.class {
                RequestClass::Get => get.call(op, ctx),
                RequestClass::Set => set.call(op, ctx),
                RequestClass::Delete => delete.call(op, ctx),
                RequestClass::Other => other.call(op, ctx),
            },
            Route::Replicated {
                replicas,
                client_id,
                write,
                counters,
                local,
            } => {
                if op.class != RequestClass::Get {
                    let calls = replicas.iter().map(|r| r.call(op.clone(), ctx)).collect();
                    return match op.class {
                        // Each replica spools the delete it cannot take now.
                        RequestClass::Delete => all_deleted(calls),
                        RequestClass::Set => by_policy(calls, *write),
                        _ => all_sync(calls),
                    };
                }
                // Reads: one replica per client (of its zone's, when it has some), the
                // others in order after it on failure.
                let n = replicas.len();
                let client = client_id.unwrap_or(ctx.client);
                let first = replica_order(n, *local, client).next().unwrap_or(0);
                let call = replicas[first].call(op.clone(), ctx);
                let replicas = replicas.clone();
                let (counters, local) = (counters.clone(), *local);
                Box::pin(async move {
                    let mut reply = call.await;
                    for next in replica_order(n, local, client).skip(1) {
                        if reply.is_ok() {
                            break;
                        }
                        counters.replica_failovers.fetch_add(1, Ordering::Relaxed);
                        reply = replicas[next].call(op.clone(), ctx).await;
                    }
                    reply
                })
            }
            Route::Gutter {
                main,
                gutter,
                ttl,
                counters,
            } => {
                if op.class == RequestClass::Delete {
                    // Deletes go to both: a value set into the gutter while main failed must
                    // not outlive its invalidation. The answer is main's (spooled there, or
                    // an error: the gutter taking it does not make it delivered).
                    let main_call = main.call(op.clone(), ctx);
                    let gutter_call = gutter.call(op, ctx);
                    return Box::pin(async move {
                        let (reply, _) = futures_util::future::join(main_call, gutter_call).await;
                        reply
                    });
                }
                let call = main.call(op.clone(), ctx);
                let gutter = gutter.clone();
                let (ttl, counters) = (*ttl, counters.clone());
                Box::pin(async move {
                    let failure = match call.await {
                        Ok(r) => return Ok(r),
                        Err(e) => e,
                    };
                    // Only what can be made to expire goes to the gutter: gets and storage
                    // commands (with the TTL capped). A meta set or an increment could
                    // leave an entry without the cap: those fail as they would.
                    let op = match (&op.form, op.class) {
                        (RequestForm::Store { .. }, _) => {
                            let mut op = op;
                            if let RequestForm::Store { exptime, .. } = &mut op.form {
                                *exptime = capped_exptime(*exptime, ttl);
                            }
                            op
                        }
                        (_, RequestClass::Get) => op,
                        _ => return Err(failure),
                    };
                    counters.gutter_requests.fetch_add(1, Ordering::Relaxed);
                    if op.class == RequestClass::Get {
                        counters.gutter_gets.fetch_add(1, Ordering::Relaxed);
                    }
                    let reply = gutter.call(op, ctx).await;
                    if matches!(&reply, Ok(r) if is_hit(r)) {
                        counters.gutter_hits.fetch_add(1, Ordering::Relaxed);
                    }
                    reply
                })
            }
            Route::Broadcast { to, mode } => {
                if op.class == RequestClass::Get {
                    // A read needs one answer: the first destination's.
                    return to[0].call(op, ctx);
                }
                let calls: Vec<ReplyFuture> = to.iter().map(|r| r.call(op.clone(), ctx)).collect();
                match mode {
                    BroadcastMode::AllSync if op.class == RequestClass::Delete => {
                        all_deleted(calls)
                    }
                    BroadcastMode::AllSync => all_sync(calls),
                    BroadcastMode::AllAsync => {
                        tokio::spawn(futures_util::future::join_all(calls));
                        ready(Ok(op.unconfirmed().to_vec()))
                    }
                }
            }
            Route::WarmUp {
                cold,
                warm,
                holdoff,
                enabled,
                counters,
            } => {
                if !enabled {
                    return cold.call(op, ctx);
                }
                warm_call(cold, warm, *holdoff, counters, op, ctx)
            }
            Route::Null => ready(Ok(answer::null_reply(&op).to_vec())),
            Route::Error(line) => ready(Ok(line.clone())),
            Route::Ttl {
                child,
                max_ttl,
                set_ttl,
            } => child.call(answer::rewrite_ttl(op, *max_ttl, *set_ttl), ctx),
            Route::Failover(f) => f.call(op, ctx),
            Route::AllFastest(children) => failover::all_fastest(children, op, ctx),
            Route::AllInitial(children) => failover::all_initial(children, op, ctx),
            Route::Shadow(s) => s.call(op, ctx),
            Route::Migrate(m) => m.call(op, ctx),
            Route::BigValue(b) => b.call(op, ctx),
        }
    }
}

/// A one-key retrieval reply with `key` in its `VALUE` (or `LVALUE`) line (anything else
/// as it came).
fn rekey(reply: Vec<u8>, key: &[u8]) -> Vec<u8> {
    let Ok(ServerReply::Values(values)) = reply::decode(&reply, ReplyKind::Retrieval) else {
        return reply;
    };
    let [v] = values.as_slice() else {
        return reply;
    };
    let mut out = Vec::with_capacity(reply.len() + key.len());
    match v.lease {
        Some(token) => response::lease_value(&mut out, key, token, v.flags, v.data),
        None => response::value(&mut out, key, v.flags, v.data, v.cas),
    }
    response::end(&mut out);
    out
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

    #[test]
    fn ttls_are_capped_in_every_exptime_form() {
        assert_eq!(capped_exptime(0, 10), 10);
        assert_eq!(capped_exptime(5, 10), 5);
        assert_eq!(capped_exptime(3600, 10), 10);
        assert_eq!(capped_exptime(-1, 10), -1);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        assert_eq!(capped_exptime(now + 3600, 10), 10);
        assert_eq!(capped_exptime(now - 5, 10), -1);
    }

    #[test]
    fn stripped_keys_are_put_back_in_value_lines() {
        assert_eq!(
            rekey(b"VALUE k 0 1\r\nv\r\nEND\r\n".to_vec(), b"/r/c/k"),
            b"VALUE /r/c/k 0 1\r\nv\r\nEND\r\n"
        );
        assert_eq!(
            rekey(b"LVALUE k 1 0 0\r\n\r\nEND\r\n".to_vec(), b"/r/c/k"),
            b"LVALUE /r/c/k 1 0 0\r\n\r\nEND\r\n"
        );
        assert_eq!(rekey(b"END\r\n".to_vec(), b"x"), b"END\r\n");
    }
}
