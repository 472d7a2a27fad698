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

use crate::backend::BackendError;
use crate::Pool;
use memfleet_protocol::reply::ReplyKind;
use memfleet_protocol::{Request, Store, StoreCommand};
use memfleet_routing::{BroadcastMode, RouteConfig, RouteKind};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A server's reply, or why there is none.
pub type Reply = Result<Vec<u8>, BackendError>;
/// A reply on its way.
pub type ReplyFuture = Pin<Box<dyn Future<Output = Reply> + Send>>;

/// What an operation does, for routes that treat kinds differently.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
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
pub struct Op {
    /// What it does, for routes that treat kinds differently.
    pub class: Class,
    /// The key routing uses (decoded, for a base64 meta key).
    pub key: Vec<u8>,
    /// How it is written.
    pub form: Form,
}

/// How an [`Op`] is written.
#[derive(Clone, Debug)]
pub enum Form {
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

impl Op {
    /// A request written as `head`, the key, `tail` (`tail` ends the line, and carries any
    /// data block).
    pub fn raw(class: Class, key: &[u8], head: &[u8], tail: Vec<u8>, kind: ReplyKind) -> Op {
        Op {
            class,
            key: key.to_vec(),
            form: Form::Raw {
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
            Form::Get { head } => {
                out.extend_from_slice(head);
                out.push(b' ');
                out.extend_from_slice(&self.key);
                out.extend_from_slice(b"\r\n");
            }
            Form::Store {
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
            Form::Delete { holdoff } => Request::Delete {
                key: &self.key,
                holdoff: *holdoff,
                noreply: false,
            }
            .encode(&mut out),
            Form::Raw {
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
            Form::Get { .. } => ReplyKind::Retrieval,
            Form::Store { .. } | Form::Delete { .. } => ReplyKind::Line,
            Form::Raw { kind, .. } => *kind,
        }
    }

    /// The same operation on another key (a stripped routing prefix).
    fn with_key(&self, key: &[u8]) -> Op {
        let mut op = self.clone();
        if let Form::Raw { wire_key, .. } = &mut op.form {
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

    /// The reply a quiet success looks like, for routes that answer without a server.
    fn success(&self) -> &'static [u8] {
        match (&self.form, self.class) {
            (Form::Raw { .. }, _) => b"HD\r\n",
            (_, Class::Delete) => b"DELETED\r\n",
            (_, Class::Get) => b"END\r\n",
            _ => b"STORED\r\n",
        }
    }
}

/// Where an operation comes from: the client's lane (its connection to each server) and
/// its identity for replica choice.
#[derive(Clone, Copy, Debug)]
pub struct Ctx {
    /// Which of each server's connections the caller uses (the same one keeps its order).
    pub lane: usize,
    /// The caller's identity for choosing a replica (a hash of its address).
    pub client: u64,
}

/// Counters of the routes that have something to count; kept across reloads by route name.
#[derive(Default, Debug)]
pub struct RouteCounters {
    /// gutter: requests the main route failed and the gutter took.
    pub gutter_requests: AtomicU64,
    /// gutter: gets the gutter took.
    pub gutter_gets: AtomicU64,
    /// gutter: gets the gutter answered with a value.
    pub gutter_hits: AtomicU64,
    /// warmup: gets the cold cluster answered with a value.
    pub cold_hits: AtomicU64,
    /// warmup: gets the cold cluster missed.
    pub cold_misses: AtomicU64,
    /// warmup: misses filled from the warm cluster (add accepted).
    pub warm_fills: AtomicU64,
    /// warmup: fills the cold cluster refused (a racing delete's hold-off, or a racing fill).
    pub fills_refused: AtomicU64,
    /// replicated: reads that failed over to another replica.
    pub replica_failovers: AtomicU64,
    /// The counters the route's type uses (set when it is built).
    shown: std::sync::Mutex<&'static [&'static str]>,
}

/// Every [`RouteCounters`] field: (name, what it counts), for `stats` and `/metrics`.
pub const COUNTERS: [(&str, &str); 8] = [
    (
        "gutter_requests",
        "requests the main route failed and the gutter took",
    ),
    (
        "gutter_gets",
        "gets the main route failed and the gutter took",
    ),
    ("gutter_hits", "gets the gutter answered with a value"),
    (
        "cold_hits",
        "warm-up gets the cold cluster answered with a value",
    ),
    ("cold_misses", "warm-up gets the cold cluster missed"),
    (
        "warm_fills",
        "cold-cluster misses filled from the warm cluster",
    ),
    (
        "fills_refused",
        "warm fills the cold cluster refused (hold-off or a racing fill)",
    ),
    (
        "replica_failovers",
        "replicated reads that failed over to another replica",
    ),
];

impl RouteCounters {
    /// (name, help) of the counters its route's type uses.
    pub fn shown(&self) -> Vec<(&'static str, &'static str)> {
        let shown = *self.shown.lock().unwrap_or_else(|e| e.into_inner());
        COUNTERS
            .into_iter()
            .filter(|(n, _)| shown.contains(n))
            .collect()
    }

    /// The counter called `name` (one of [`COUNTERS`]).
    pub fn get(&self, name: &str) -> u64 {
        let c = match name {
            "gutter_requests" => &self.gutter_requests,
            "gutter_gets" => &self.gutter_gets,
            "gutter_hits" => &self.gutter_hits,
            "cold_hits" => &self.cold_hits,
            "cold_misses" => &self.cold_misses,
            "warm_fills" => &self.warm_fills,
            "fills_refused" => &self.fills_refused,
            _ => &self.replica_failovers,
        };
        c.load(Ordering::Relaxed)
    }
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

/// Builds every route of `configs` over `pools`; `counters` carries the counters of the
/// routes of the previous configuration (by name) and receives this one's.
pub(crate) fn build(
    configs: &[RouteConfig],
    pools: &HashMap<String, Arc<Pool>>,
    counters: &mut HashMap<String, Arc<RouteCounters>>,
) -> HashMap<String, Arc<Route>> {
    let by_name: HashMap<&str, &RouteConfig> =
        configs.iter().map(|r| (r.name.as_str(), r)).collect();
    let mut built: HashMap<String, Arc<Route>> = HashMap::new();
    let mut kept = HashMap::new();
    for r in configs {
        resolve(&r.name, &by_name, pools, counters, &mut kept, &mut built);
    }
    *counters = kept;
    built
}

/// The route called `name` (a pool or a route), building what it needs first. The
/// configuration was checked (names exist, no loops) by `memfleet_routing`.
fn resolve(
    name: &str,
    by_name: &HashMap<&str, &RouteConfig>,
    pools: &HashMap<String, Arc<Pool>>,
    old: &HashMap<String, Arc<RouteCounters>>,
    kept: &mut HashMap<String, Arc<RouteCounters>>,
    built: &mut HashMap<String, Arc<Route>>,
) -> Arc<Route> {
    if let Some(r) = built.get(name) {
        return r.clone();
    }
    let Some(config) = by_name.get(name) else {
        let pool = pools
            .get(name)
            .expect("checked: every name is a pool or a route");
        return Arc::new(Route::Pool(pool.clone()));
    };
    let mut go = |n: &str| resolve(n, by_name, pools, old, kept, built);
    let counters = old.get(name).cloned().unwrap_or_default();
    let route = match &config.kind {
        RouteKind::Prefix {
            prefixes,
            default,
            strip,
        } => Route::Prefix {
            prefixes: prefixes
                .iter()
                .map(|(p, r)| (p.as_bytes().to_vec(), go(r)))
                .collect(),
            default: go(default),
            strip: *strip,
        },
        RouteKind::Operation {
            get,
            set,
            delete,
            default,
        } => {
            let other = go(default);
            let mut or_default = |r: &Option<String>| match r {
                Some(r) => go(r),
                None => other.clone(),
            };
            Route::Operation {
                get: or_default(get),
                set: or_default(set),
                delete: or_default(delete),
                other: other.clone(),
            }
        }
        RouteKind::Replicated {
            replicas,
            client_id,
        } => Route::Replicated {
            replicas: replicas.iter().map(|r| go(r)).collect(),
            client_id: client_id
                .as_ref()
                .map(|id| xxhash_rust::xxh3::xxh3_64(id.as_bytes())),
            counters: counters.clone(),
        },
        RouteKind::Gutter { main, gutter, ttl } => Route::Gutter {
            main: go(main),
            gutter: go(gutter),
            ttl: *ttl,
            counters: counters.clone(),
        },
        RouteKind::Broadcast { to, mode } => Route::Broadcast {
            to: to.iter().map(|r| go(r)).collect(),
            mode: *mode,
        },
        RouteKind::WarmUp {
            cold,
            warm,
            holdoff,
            enabled,
        } => Route::WarmUp {
            cold: go(cold),
            warm: go(warm),
            holdoff: *holdoff,
            enabled: *enabled,
            counters: counters.clone(),
        },
    };
    let shown: &'static [&'static str] = match route {
        Route::Replicated { .. } => &["replica_failovers"],
        Route::Gutter { .. } => &["gutter_requests", "gutter_gets", "gutter_hits"],
        Route::WarmUp { .. } => &["cold_hits", "cold_misses", "warm_fills", "fills_refused"],
        _ => &[],
    };
    if !shown.is_empty() {
        *counters.shown.lock().unwrap_or_else(|e| e.into_inner()) = shown;
        kept.insert(name.to_string(), counters);
    }
    let route = Arc::new(route);
    built.insert(name.to_string(), route.clone());
    route
}

fn ready(reply: Reply) -> ReplyFuture {
    Box::pin(std::future::ready(reply))
}

/// How bad a reply is, for answering the worst of several: a failure, then a server error,
/// then a refusal (not found, not stored, exists), then success.
fn badness(reply: &Reply) -> u8 {
    let Ok(r) = reply else {
        return 4;
    };
    let starts = |p: &[&[u8]]| p.iter().any(|p| r.starts_with(p));
    if starts(&[b"SERVER_ERROR", b"CLIENT_ERROR", b"ERROR"]) {
        3
    } else if starts(&[b"NOT_FOUND", b"NOT_STORED", b"EXISTS", b"NF", b"NS", b"EX"]) {
        2
    } else {
        1
    }
}

/// Whether a retrieval reply carries a value.
fn is_hit(reply: &[u8]) -> bool {
    reply.starts_with(b"VALUE ") || reply.starts_with(b"VA ")
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
    pub fn call(self: &Arc<Self>, op: Op, ctx: Ctx) -> ReplyFuture {
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
                    if !matches!(op.form, Form::Get { .. }) {
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
                Class::Get => get.call(op, ctx),
                Class::Set => set.call(op, ctx),
                Class::Delete => delete.call(op, ctx),
                Class::Other => other.call(op, ctx),
            },
            Route::Replicated {
                replicas,
                client_id,
                counters,
            } => {
                if op.class != Class::Get {
                    return all_sync(replicas.iter().map(|r| r.call(op.clone(), ctx)).collect());
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
                let call = main.call(op.clone(), ctx);
                let gutter = gutter.clone();
                let (ttl, counters) = (*ttl, counters.clone());
                Box::pin(async move {
                    let failure = match call.await {
                        Ok(r) => return Ok(r),
                        Err(e) => e,
                    };
                    // Only what can be made to expire goes to the gutter: gets, deletes and
                    // storage commands (with the TTL capped). A meta set or an increment
                    // could leave an entry without the cap: those fail as they would.
                    let op = match (&op.form, op.class) {
                        (Form::Store { .. }, _) => {
                            let mut op = op;
                            if let Form::Store { exptime, .. } = &mut op.form {
                                *exptime = capped_exptime(*exptime, ttl);
                            }
                            op
                        }
                        (_, Class::Get | Class::Delete) => op,
                        _ => return Err(failure),
                    };
                    counters.gutter_requests.fetch_add(1, Ordering::Relaxed);
                    if op.class == Class::Get {
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
                if op.class == Class::Get {
                    // A read needs one answer: the first destination's.
                    return to[0].call(op, ctx);
                }
                let calls: Vec<ReplyFuture> = to.iter().map(|r| r.call(op.clone(), ctx)).collect();
                match mode {
                    BroadcastMode::AllSync => all_sync(calls),
                    BroadcastMode::AllAsync => {
                        tokio::spawn(async move {
                            for c in calls {
                                let _ = c.await;
                            }
                        });
                        ready(Ok(op.success().to_vec()))
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
                match (&op.form, op.class) {
                    (Form::Delete { holdoff: h }, _) if *h == 0 => {
                        // A delete leaves the key closed to adds for a while, so that a fill
                        // racing it (read from warm before the delete reached warm) fails.
                        let mut op = op;
                        op.form = Form::Delete { holdoff: *holdoff };
                        cold.call(op, ctx)
                    }
                    (Form::Get { .. }, _) => warm_get(cold, warm, counters, op, ctx),
                    _ => cold.call(op, ctx),
                }
            }
        }
    }

    /// The one server a get of `key` would be sent to, when the route sends gets to a
    /// single server unchanged (so the get can go there over UDP instead); `None` when the
    /// route rewrites the key, fills, or the server is marked down (then TCP and the route
    /// decide).
    pub fn get_target(&self, key: &[u8], ctx: Ctx) -> Option<std::net::SocketAddr> {
        match self {
            // A datagram can neither authenticate nor be encrypted: the gets of a pool that
            // logs in or speaks TLS to its servers stay on that connection.
            Route::Pool(pool) if pool.config().auth.is_some() || pool.config().tls.is_some() => {
                None
            }
            Route::Pool(pool) => {
                let backend = pool.backend_for(key);
                (!backend.health().down.load(Ordering::Acquire)).then(|| backend.addr())
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
    pub fn servers_for(&self, key: &[u8], ctx: Ctx, out: &mut Vec<String>) {
        match self {
            Route::Pool(pool) => {
                let server = pool.ring().nodes()[pool.ring().pick(key)].addr();
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

/// A one-key retrieval reply with `key` in its `VALUE` (or `LVALUE`) line.
fn rekey(reply: Vec<u8>, key: &[u8]) -> Vec<u8> {
    let skip = if reply.starts_with(b"VALUE ") {
        6
    } else if reply.starts_with(b"LVALUE ") {
        7
    } else {
        return reply;
    };
    let Some(end) = reply[skip..].iter().position(|&b| b == b' ') else {
        return reply;
    };
    let mut out = Vec::with_capacity(reply.len() + key.len());
    out.extend_from_slice(&reply[..skip]);
    out.extend_from_slice(key);
    out.extend_from_slice(&reply[skip + end..]);
    out
}

/// Waits for every call; answers the worst reply (the first of equally bad ones).
fn all_sync(calls: Vec<ReplyFuture>) -> ReplyFuture {
    Box::pin(async move {
        let mut worst: Option<Reply> = None;
        for c in calls {
            let r = c.await;
            if worst.as_ref().is_none_or(|w| badness(&r) > badness(w)) {
                worst = Some(r);
            }
        }
        worst.expect("a route has at least one destination")
    })
}

/// A get through a warm-up route: the cold cluster's answer, or on a miss the warm
/// cluster's value `add`ed into the cold one (paper §4.3). A refused add (the key was
/// deleted with a hold-off since, or another fill won) answers a miss, so the client
/// reads the database again rather than trust what it read from warm.
fn warm_get(
    cold: &Arc<Route>,
    warm: &Arc<Route>,
    counters: &Arc<RouteCounters>,
    op: Op,
    ctx: Ctx,
) -> ReplyFuture {
    let call = cold.call(op.clone(), ctx);
    let (cold, warm, counters) = (cold.clone(), warm.clone(), counters.clone());
    Box::pin(async move {
        let reply = call.await?;
        if is_hit(&reply) || reply != b"END\r\n" {
            // A hit, an LVALUE (lease-get) or an error line: the cold cluster's answer.
            if is_hit(&reply) {
                counters.cold_hits.fetch_add(1, Ordering::Relaxed);
            }
            return Ok(reply);
        }
        counters.cold_misses.fetch_add(1, Ordering::Relaxed);
        let fetch = Op::raw(
            Class::Get,
            &op.key,
            b"mg ",
            b" v f t\r\n".to_vec(),
            ReplyKind::Meta,
        );
        let Ok(found) = warm.call(fetch, ctx).await else {
            return Ok(reply);
        };
        let Some((flags, ttl, data)) = parse_mg_value(&found) else {
            return Ok(reply);
        };
        let add = Op {
            class: Class::Set,
            key: op.key.clone(),
            form: Form::Store {
                command: StoreCommand::Add,
                flags,
                exptime: ttl,
                cas: 0,
                data: data.clone().into(),
            },
        };
        match cold.call(add, ctx).await {
            Ok(r) if r == b"STORED\r\n" => {
                counters.warm_fills.fetch_add(1, Ordering::Relaxed);
            }
            _ => {
                counters.fills_refused.fetch_add(1, Ordering::Relaxed);
                return Ok(reply);
            }
        }
        if matches!(&op.form, Form::Get { head } if head == b"get") {
            let mut out = Vec::with_capacity(data.len() + op.key.len() + 32);
            memfleet_protocol::response::value(&mut out, &op.key, flags, &data, None);
            memfleet_protocol::response::end(&mut out);
            Ok(out)
        } else {
            // gets, gat, lease-get: the cold cluster's own answer (its CAS, its touch).
            cold.call(op, ctx).await
        }
    })
}

/// `VA <len> f<flags> t<ttl>\r\n<data>\r\n` into (flags, exptime for an add, data); a
/// remaining TTL of -1 (none) is exptime 0.
fn parse_mg_value(reply: &[u8]) -> Option<(u32, i64, Vec<u8>)> {
    let nl = reply.iter().position(|&b| b == b'\n')?;
    let line = reply[..nl].strip_suffix(b"\r")?;
    let mut words = line.split(|&b| b == b' ');
    if words.next()? != b"VA" {
        return None;
    }
    let len: usize = std::str::from_utf8(words.next()?).ok()?.parse().ok()?;
    let (mut flags, mut ttl) = (0u32, 0i64);
    for w in words {
        let value = std::str::from_utf8(w.get(1..)?).ok()?;
        match w.first()? {
            b'f' => flags = value.parse().ok()?,
            b't' => ttl = value.parse::<i64>().ok()?.max(0),
            _ => {}
        }
    }
    let data = reply.get(nl + 1..nl + 1 + len)?.to_vec();
    Some((flags, ttl, data))
}

/// A pool leaf: the key's server; a delete it cannot deliver waits in the spool.
fn pool_call(pool: &Arc<Pool>, op: Op, ctx: Ctx) -> ReplyFuture {
    let (backend, queue) = pool.server_for(&op.key);
    let bytes = op.bytes();
    let Some(queue) = queue.filter(|_| op.class == Class::Delete) else {
        return Box::pin(backend.call(ctx.lane, bytes, op.reply_kind()));
    };
    let spooled_reply: &'static [u8] = match op.form {
        Form::Raw { .. } => b"NF\r\n",
        _ => b"NOT_FOUND\r\n",
    };
    if queue.depth() > 0 {
        // Deletes already waiting for this server go first: keep the order.
        return Box::pin(async move {
            queue.append(bytes).await.map_err(|e| {
                tracing::error!(error = %e, "cannot spool a delete");
                BackendError::Connection(backend.name().to_string())
            })?;
            Ok(spooled_reply.to_vec())
        });
    }
    let call = backend.call(ctx.lane, bytes.clone(), op.reply_kind());
    Box::pin(async move {
        match call.await {
            Ok(r) => Ok(r),
            Err(failure) => match queue.append(bytes).await {
                // mcrouter's asynclog answers a spooled delete with "not found" too.
                Ok(()) => Ok(spooled_reply.to_vec()),
                Err(e) => {
                    tracing::error!(error = %e, "cannot spool a delete");
                    Err(failure)
                }
            },
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ops_encode_as_memcached_requests() {
        let store = Op {
            class: Class::Set,
            key: b"k".to_vec(),
            form: Form::Store {
                command: StoreCommand::Add,
                flags: 5,
                exptime: 10,
                cas: 0,
                data: Arc::from(&b"abc"[..]),
            },
        };
        assert_eq!(store.bytes(), b"add k 5 10 3\r\nabc\r\n");
        let del = Op {
            class: Class::Delete,
            key: b"/r/c/k".to_vec(),
            form: Form::Delete { holdoff: 2 },
        };
        assert_eq!(del.with_key(b"k").bytes(), b"delete k 2\r\n");
        let mg = Op {
            class: Class::Get,
            key: b"k".to_vec(),
            form: Form::Raw {
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

    #[test]
    fn the_worst_reply_wins() {
        let ok: Reply = Ok(b"DELETED\r\n".to_vec());
        let nf: Reply = Ok(b"NOT_FOUND\r\n".to_vec());
        let se: Reply = Ok(b"SERVER_ERROR out of memory\r\n".to_vec());
        let down: Reply = Err(BackendError::Down("x".into()));
        assert!(badness(&ok) < badness(&nf));
        assert!(badness(&nf) < badness(&se));
        assert!(badness(&se) < badness(&down));
    }

    #[test]
    fn warm_values_parse() {
        assert_eq!(
            parse_mg_value(b"VA 3 f7 t-1\r\nabc\r\n"),
            Some((7, 0, b"abc".to_vec()))
        );
        assert_eq!(
            parse_mg_value(b"VA 2 t30 f0\r\nhi\r\n"),
            Some((0, 30, b"hi".to_vec()))
        );
        assert_eq!(parse_mg_value(b"EN\r\n"), None);
        assert_eq!(parse_mg_value(b"VA 9 f0 t1\r\nshort\r\n"), None);
    }
}
