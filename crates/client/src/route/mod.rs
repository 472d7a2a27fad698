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

mod build;
mod combine;
mod counters;
mod pool;
mod warmup;

pub(crate) use build::build;
use combine::{all_deleted, all_sync, by_policy};
pub use counters::{RouteCounters, COUNTERS};
use pool::pool_call;
use warmup::warm_call;

use crate::backend::BackendError;
use crate::Pool;
use memfleet_protocol::reply::{self, is_hit, ReplyKind, ServerReply};
use memfleet_protocol::response;
use memfleet_protocol::{Request, Store, StoreCommand};
use memfleet_routing::{BroadcastMode, WritePolicy};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// A server's reply, or why there is none.
pub type RouteReply = Result<Vec<u8>, BackendError>;
/// A reply on its way.
pub type ReplyFuture = Pin<Box<dyn Future<Output = RouteReply> + Send>>;

/// What an operation does, for routes that treat kinds differently.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestClass {
    /// get, gets, gat, gats, lease-get, mg.
    Get,
    /// Storage, arithmetic, touch, ms, ma.
    Set,
    /// delete, md.
    Delete,
    /// Anything else with a key (me).
    Other,
}

/// One key's request as routes see it: enough structure to change its key (prefix
/// stripping), its TTL (gutter) or its hold-off (warm-up), and to encode it.
#[derive(Clone, Debug)]
pub struct RouteRequest {
    /// What it does, for routes that treat kinds differently.
    pub class: RequestClass,
    /// The key routing uses (decoded, for a base64 meta key).
    pub key: Vec<u8>,
    /// How it is written.
    pub form: RequestForm,
}

/// How a [`RouteRequest`] is written.
#[derive(Clone, Debug)]
pub enum RequestForm {
    /// `<head> <key>\r\n`.
    Get {
        /// `get`, `gets`, `gat <exptime>`, `gats <exptime>` or `lease-get`.
        head: Vec<u8>,
    },
    /// A storage command (never `noreply`: the caller applies it).
    Store {
        /// set, add, replace, append, prepend, cas, lease-set.
        command: StoreCommand,
        /// Client flags.
        flags: u32,
        /// memcached's exptime.
        exptime: i64,
        /// CAS unique (cas) or lease token (lease-set); 0 otherwise.
        cas: u64,
        /// The value.
        data: Arc<[u8]>,
    },
    /// `delete <key> [holdoff]`.
    Delete {
        /// Hold-off seconds (0: a plain delete).
        holdoff: u32,
    },
    /// Any other request, written as `head`, the key, `tail`.
    Raw {
        /// Up to the key (`"mg "`).
        head: Vec<u8>,
        /// The key as written (base64 for a meta `b` key).
        wire_key: Vec<u8>,
        /// The rest of the line and any data block.
        tail: Vec<u8>,
        /// The shape of its reply.
        kind: ReplyKind,
    },
}

impl RouteRequest {
    /// A request written as `head`, the key, `tail` (`tail` ends the line, and carries any
    /// data block).
    pub fn raw(
        class: RequestClass,
        key: &[u8],
        head: &[u8],
        tail: Vec<u8>,
        kind: ReplyKind,
    ) -> RouteRequest {
        RouteRequest {
            class,
            key: key.to_vec(),
            form: RequestForm::Raw {
                head: head.to_vec(),
                wire_key: key.to_vec(),
                tail,
                kind,
            },
        }
    }

    /// The request's bytes.
    pub fn bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.key.len() + 32);
        match &self.form {
            RequestForm::Get { head } => {
                out.extend_from_slice(head);
                out.push(b' ');
                out.extend_from_slice(&self.key);
                out.extend_from_slice(b"\r\n");
            }
            RequestForm::Store {
                command,
                flags,
                exptime,
                cas,
                data,
            } => Request::Store(Store {
                command: *command,
                key: &self.key,
                flags: *flags,
                exptime: *exptime,
                cas: *cas,
                noreply: false,
                data,
            })
            .encode(&mut out),
            RequestForm::Delete { holdoff } => Request::Delete {
                key: &self.key,
                holdoff: *holdoff,
                noreply: false,
            }
            .encode(&mut out),
            RequestForm::Raw {
                head,
                wire_key,
                tail,
                ..
            } => {
                out.extend_from_slice(head);
                out.extend_from_slice(wire_key);
                out.extend_from_slice(tail);
            }
        }
        if !out.ends_with(b"\r\n") {
            out.extend_from_slice(b"\r\n");
        }
        out
    }

    /// The shape of its reply.
    pub fn reply_kind(&self) -> ReplyKind {
        match &self.form {
            RequestForm::Get { .. } => ReplyKind::Retrieval,
            RequestForm::Store { .. } | RequestForm::Delete { .. } => ReplyKind::Line,
            RequestForm::Raw { kind, .. } => *kind,
        }
    }

    /// The same operation on another key (a stripped routing prefix).
    fn with_key(&self, key: &[u8]) -> RouteRequest {
        let mut op = self.clone();
        if let RequestForm::Raw { wire_key, .. } = &mut op.form {
            *wire_key = if *wire_key == self.key {
                key.to_vec()
            } else {
                // A base64 meta key: the new key is written the same way.
                let mut w = Vec::new();
                memfleet_protocol::base64::encode_into(&mut w, key);
                w
            };
        }
        op.key = key.to_vec();
        op
    }

    /// What a route answers when it does not wait for servers (`all-async`): nothing that
    /// claims a delete happened.
    fn unconfirmed(&self) -> &'static [u8] {
        match (&self.form, self.class) {
            (RequestForm::Raw { .. }, RequestClass::Delete) => b"NF\r\n",
            (RequestForm::Raw { .. }, _) => b"HD\r\n",
            (_, RequestClass::Delete) => b"NOT_FOUND\r\n",
            (_, RequestClass::Get) => b"END\r\n",
            _ => b"STORED\r\n",
        }
    }
}

/// Where an operation comes from: the client's lane (its connection to each server) and
/// its identity for replica choice.
#[derive(Clone, Copy, Debug)]
pub struct RouteContext {
    /// Which of each server's connections the caller uses (the same one keeps its order).
    pub lane: usize,
    /// The caller's identity for choosing a replica (a hash of its address).
    pub client: u64,
}

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
                // Reads: one replica per client, the others in order after it on failure.
                let n = replicas.len();
                let first = (client_id.unwrap_or(ctx.client) % n as u64) as usize;
                let call = replicas[first].call(op.clone(), ctx);
                let replicas = replicas.clone();
                let counters = counters.clone();
                Box::pin(async move {
                    let mut reply = call.await;
                    for i in 1..n {
                        if reply.is_ok() {
                            break;
                        }
                        counters.replica_failovers.fetch_add(1, Ordering::Relaxed);
                        reply = replicas[(first + i) % n].call(op.clone(), ctx).await;
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
        }
    }

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
                ..
            } => {
                let first = (client_id.unwrap_or(ctx.client) % replicas.len() as u64) as usize;
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
                ..
            } => {
                let n = replicas.len();
                let first = (client_id.unwrap_or(ctx.client) % n as u64) as usize;
                for i in 0..n {
                    replicas[(first + i) % n].servers_for(key, ctx, out);
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
    fn ops_encode_as_memcached_requests() {
        let store = RouteRequest {
            class: RequestClass::Set,
            key: b"k".to_vec(),
            form: RequestForm::Store {
                command: StoreCommand::Add,
                flags: 5,
                exptime: 10,
                cas: 0,
                data: Arc::from(&b"abc"[..]),
            },
        };
        assert_eq!(store.bytes(), b"add k 5 10 3\r\nabc\r\n");
        let del = RouteRequest {
            class: RequestClass::Delete,
            key: b"/r/c/k".to_vec(),
            form: RequestForm::Delete { holdoff: 2 },
        };
        assert_eq!(del.with_key(b"k").bytes(), b"delete k 2\r\n");
        let mg = RouteRequest {
            class: RequestClass::Get,
            key: b"k".to_vec(),
            form: RequestForm::Raw {
                head: b"mg ".to_vec(),
                wire_key: b"k".to_vec(),
                tail: b" v\r\n".to_vec(),
                kind: ReplyKind::Meta,
            },
        };
        assert_eq!(mg.with_key(b"x").bytes(), b"mg x v\r\n");
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
