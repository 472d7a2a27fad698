//! Routes: how a request finds its pool when a deployment has more than one (Facebook's
//! §3.2.2–§4.3, mcrouter's route handles). A route is a small tree whose leaves are pools;
//! each inner node is one of the mechanisms of the paper:
//!
//! | type | what it does |
//! |------|--------------|
//! | `prefix` | the longest matching key prefix picks the route; `default` takes the rest (§3.2.2). With `strip = true` the prefix is removed from the key (mcrouter-style routing prefixes such as `/region/cluster/`, §4.2) |
//! | `operation` | gets, sets and deletes can go different ways (`get`, `set`, `delete`, `default`) |
//! | `replicated` | reads go to one replica, chosen stably per client (among the pools of the router's `zone` first, when `[router] zone` and the pools' `zone` say), failing over to the others; writes go to every replica (§3.2.3) and are answered by the `write` policy: `any` (default), `majority` or `all` replicas must store; a delete is answered `DELETED` only when every replica took it (or spooled it for later) |
//! | `gutter` | when `main` fails (server down, timeout), the request goes to `gutter`; sets there get at most `gutter_ttl` seconds (§3.3) |
//! | `broadcast` | every request goes to every destination; `all-sync` waits: a delete is `DELETED` if any destination deleted the key (an error if any could neither take nor spool it), other writes get the worst reply; `all-async` answers at once without claiming success (`NOT_FOUND` for a delete), each destination spooling what it cannot take (§4.1) |
//! | `warmup` | a miss in `cold` is filled from `warm` (`add`ed into cold, so a racing delete's hold-off wins); deletes reach cold with a `holdoff`-second hold-off (§4.3) |
//! | `null`, `error`, `ttl`, `failover`, `all-fastest`, `all-initial`, `shadow`, `migrate`, `bigvalue` | see [`crate::route_types`] |
//!
//! In TOML, routes are named tables beside the pools, and a name refers to a pool or a route:
//!
//! ```toml
//! [routes.web]
//! listen = "127.0.0.1:5000"
//! type = "operation"
//! delete = "everywhere"
//! default = "cache"
//!
//! [routes.cache]
//! type = "gutter"
//! main = "cluster_a"
//! gutter = "gutter"
//! gutter_ttl = 10
//!
//! [routes.everywhere]
//! type = "broadcast"
//! to = ["cluster_a", "cluster_b"]
//! mode = "all-sync"
//! ```
//!
//! This module only reads and checks the tree (names exist, no cycles); running it is
//! `memfleet_client::route`'s job (for the router and applications alike).

use crate::listener_workers::{listener_workers, ListenerWorkers};
use crate::route_types::{
    big_value, error_message, failover_errors, failover_limit, failover_order, shadow_keys,
    BigValue, Failover, Migrate, OneOrMany, Shadow, ShadowKeys, TtlRewrite,
};
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap};

/// A named route.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouteConfig {
    /// Its name (unique among routes and pools).
    pub name: String,
    /// Where the router listens for clients of this route, if it has a listener.
    pub listen: Option<String>,
    /// The router workers that serve its listener's clients (`workers = [...]`).
    pub workers: ListenerWorkers,
    /// What it does.
    pub kind: RouteKind,
}

/// What a replicated write needs before it answers success.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WritePolicy {
    /// One replica stored it (the default: a replica that missed a set only misses, and
    /// its deletes are spooled, so nothing it serves is staler than without the set).
    #[default]
    Any,
    /// More than half the replicas stored it.
    Majority,
    /// Every replica stored it.
    All,
}

/// How `broadcast` answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BroadcastMode {
    /// Wait for every destination; answer the worst reply.
    AllSync,
    /// Answer at once without waiting: `NOT_FOUND` for a delete (nothing is known yet),
    /// `STORED` for other writes; failures are the destinations' business (a spooling pool
    /// keeps its deletes).
    AllAsync,
}

/// The route types (see the module table). Every `String` names a pool or a route.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RouteKind {
    /// Longest prefix first.
    Prefix {
        /// (prefix, route), longest prefix first.
        prefixes: Vec<(String, String)>,
        /// Keys no prefix matches.
        default: String,
        /// Remove the matched prefix from the key.
        strip: bool,
    },
    /// By operation.
    Operation {
        /// get, gets, gat, gats, lease-get, mg.
        get: Option<String>,
        /// set, add, replace, append, prepend, cas, lease-set, ms, incr, decr, ma, touch.
        set: Option<String>,
        /// delete, md.
        delete: Option<String>,
        /// Whatever is not named.
        default: String,
    },
    /// Replicas.
    Replicated {
        /// The replicas, in failover order from the chosen one.
        replicas: Vec<String>,
        /// Choose the read replica by this id instead of the client's address (a router
        /// running beside one application host).
        client_id: Option<String>,
        /// What a write needs to answer success.
        write: WritePolicy,
    },
    /// Failover to a gutter.
    Gutter {
        /// Where requests go while it answers.
        main: String,
        /// Where they go when it does not.
        gutter: String,
        /// Longest TTL a set into the gutter gets, seconds.
        ttl: u32,
    },
    /// To every destination.
    Broadcast {
        /// The destinations.
        to: Vec<String>,
        /// How to answer.
        mode: BroadcastMode,
    },
    /// Cold-cluster warm-up.
    WarmUp {
        /// The cluster being warmed (every request goes here first).
        cold: String,
        /// Where misses are filled from.
        warm: String,
        /// Hold-off of deletes sent to the cold cluster, seconds.
        holdoff: u32,
        /// Off: plain `cold` (switched by a reload once cold's hit rate has recovered).
        enabled: bool,
    },
    /// Answers at once, reaching nothing (mcrouter's `NullRoute`).
    Null,
    /// Answers `SERVER_ERROR <message>` (mcrouter's `ErrorRoute`).
    Error {
        /// The error's text.
        message: String,
    },
    /// Rewrites writes' exptime (mcrouter's `ModifyExptimeRoute`).
    Ttl(TtlRewrite),
    /// Ordered failover (mcrouter's `FailoverRoute`).
    Failover(Failover),
    /// To every child; the first success answers (mcrouter's `AllFastestRoute`).
    AllFastest {
        /// The children.
        children: Vec<String>,
    },
    /// To every child; the first child answers (mcrouter's `AllInitialRoute`).
    AllInitial {
        /// The children.
        children: Vec<String>,
    },
    /// Main answers; chosen keys are shadowed (mcrouter's `ShadowRoute`).
    Shadow(Shadow),
    /// Moves keys from one route to another at a given time (mcrouter's `MigrateRoute`).
    Migrate(Migrate),
    /// Large values as chunks (mcrouter's `BigValueRoute`).
    BigValue(BigValue),
}

impl RouteKind {
    /// The names it refers to.
    pub fn children(&self) -> Vec<&str> {
        match self {
            RouteKind::Prefix {
                prefixes, default, ..
            } => prefixes
                .iter()
                .map(|(_, r)| r.as_str())
                .chain([default.as_str()])
                .collect(),
            RouteKind::Operation {
                get,
                set,
                delete,
                default,
            } => [get, set, delete]
                .into_iter()
                .flatten()
                .map(String::as_str)
                .chain([default.as_str()])
                .collect(),
            RouteKind::Replicated { replicas, .. } => replicas.iter().map(String::as_str).collect(),
            RouteKind::Gutter { main, gutter, .. } => vec![main, gutter],
            RouteKind::Broadcast { to, .. } => to.iter().map(String::as_str).collect(),
            RouteKind::WarmUp { cold, warm, .. } => vec![cold, warm],
            RouteKind::Null | RouteKind::Error { .. } => Vec::new(),
            RouteKind::Ttl(t) => vec![&t.child],
            RouteKind::Failover(f) => f.children.iter().map(String::as_str).collect(),
            RouteKind::AllFastest { children } | RouteKind::AllInitial { children } => {
                children.iter().map(String::as_str).collect()
            }
            RouteKind::Shadow(s) => vec![&s.main, &s.shadow],
            RouteKind::Migrate(m) => vec![&m.from, &m.to],
            RouteKind::BigValue(b) => vec![&b.child],
        }
    }
}

/// memfleet's TOML route table: every field any type takes; [`parse`] checks that a route
/// uses only its own.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct TomlRoute {
    #[serde(rename = "type")]
    kind: String,
    listen: Option<String>,
    workers: Option<Vec<u64>>,
    prefixes: Option<BTreeMap<String, String>>,
    default: Option<String>,
    strip: Option<bool>,
    get: Option<String>,
    set: Option<String>,
    delete: Option<String>,
    replicas: Option<Vec<String>>,
    client_id: Option<String>,
    write: Option<String>,
    main: Option<String>,
    gutter: Option<String>,
    gutter_ttl: Option<u32>,
    to: Option<OneOrMany>,
    mode: Option<String>,
    cold: Option<String>,
    warm: Option<String>,
    holdoff: Option<u32>,
    enabled: Option<bool>,
    message: Option<String>,
    child: Option<String>,
    max_ttl: Option<u32>,
    set_ttl: Option<u32>,
    children: Option<Vec<String>>,
    failover_errors: Option<Vec<String>>,
    miss: Option<bool>,
    order: Option<String>,
    failover_limit: Option<BTreeMap<String, f64>>,
    shadow: Option<String>,
    key_fraction: Option<Vec<f64>>,
    index_range: Option<Vec<i64>>,
    max_pending: Option<u32>,
    from: Option<String>,
    start_time: Option<u64>,
    interval: Option<u64>,
    threshold: Option<u64>,
    item_size_max: Option<u64>,
}

/// Turns a TOML route table into a [`RouteConfig`]; the error says what is wrong.
pub(crate) fn parse(name: &str, t: TomlRoute) -> Result<RouteConfig, String> {
    let given: Vec<&str> = [
        ("prefixes", t.prefixes.is_some()),
        ("default", t.default.is_some()),
        ("strip", t.strip.is_some()),
        ("get", t.get.is_some()),
        ("set", t.set.is_some()),
        ("delete", t.delete.is_some()),
        ("replicas", t.replicas.is_some()),
        ("client_id", t.client_id.is_some()),
        ("write", t.write.is_some()),
        ("main", t.main.is_some()),
        ("gutter", t.gutter.is_some()),
        ("gutter_ttl", t.gutter_ttl.is_some()),
        ("to", t.to.is_some()),
        ("mode", t.mode.is_some()),
        ("cold", t.cold.is_some()),
        ("warm", t.warm.is_some()),
        ("holdoff", t.holdoff.is_some()),
        ("enabled", t.enabled.is_some()),
        ("message", t.message.is_some()),
        ("child", t.child.is_some()),
        ("max_ttl", t.max_ttl.is_some()),
        ("set_ttl", t.set_ttl.is_some()),
        ("children", t.children.is_some()),
        ("failover_errors", t.failover_errors.is_some()),
        ("miss", t.miss.is_some()),
        ("order", t.order.is_some()),
        ("failover_limit", t.failover_limit.is_some()),
        ("shadow", t.shadow.is_some()),
        ("key_fraction", t.key_fraction.is_some()),
        ("index_range", t.index_range.is_some()),
        ("max_pending", t.max_pending.is_some()),
        ("from", t.from.is_some()),
        ("start_time", t.start_time.is_some()),
        ("interval", t.interval.is_some()),
        ("threshold", t.threshold.is_some()),
        ("item_size_max", t.item_size_max.is_some()),
    ]
    .into_iter()
    .filter_map(|(f, set)| set.then_some(f))
    .collect();
    let allowed: &[&str] = match t.kind.as_str() {
        "prefix" => &["prefixes", "default", "strip"],
        "operation" => &["get", "set", "delete", "default"],
        "replicated" => &["replicas", "client_id", "write"],
        "gutter" => &["main", "gutter", "gutter_ttl"],
        "broadcast" => &["to", "mode"],
        "warmup" => &["cold", "warm", "holdoff", "enabled"],
        "null" => &[],
        "error" => &["message"],
        "ttl" => &["child", "max_ttl", "set_ttl"],
        "failover" => &[
            "children",
            "failover_errors",
            "miss",
            "order",
            "failover_limit",
        ],
        "all-fastest" | "all-initial" => &["children"],
        "migrate" => &["from", "to", "start_time", "interval"],
        "bigvalue" => &["child", "threshold", "item_size_max"],
        "shadow" => &[
            "main",
            "shadow",
            "key_fraction",
            "index_range",
            "max_pending",
        ],
        other => {
            return Err(format!(
                "unknown route type {other:?} (prefix, operation, replicated, gutter, \
                 broadcast, warmup, null, error, ttl, failover, all-fastest, all-initial, \
                 shadow, migrate, bigvalue)"
            ))
        }
    };
    if let Some(f) = given.iter().find(|f| !allowed.contains(f)) {
        return Err(format!("a {} route takes no {f:?}", t.kind));
    }
    let need = |v: Option<String>, field: &str| {
        v.ok_or_else(|| format!("a {} route needs {field:?}", t.kind))
    };
    let kind = match t.kind.as_str() {
        "prefix" => {
            let mut prefixes: Vec<(String, String)> =
                t.prefixes.unwrap_or_default().into_iter().collect();
            if prefixes.iter().any(|(p, _)| p.is_empty()) {
                return Err("an empty prefix: use \"default\"".into());
            }
            // Longest first, so the first match is the longest.
            prefixes.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.0.cmp(&b.0)));
            RouteKind::Prefix {
                prefixes,
                default: need(t.default, "default")?,
                strip: t.strip.unwrap_or(false),
            }
        }
        "operation" => RouteKind::Operation {
            get: t.get,
            set: t.set,
            delete: t.delete,
            default: need(t.default, "default")?,
        },
        "replicated" => {
            let replicas = need_list(t.replicas, "replicated", "replicas")?;
            let write = one_of(t.write, "write policy", &WRITE_POLICIES)?;
            RouteKind::Replicated {
                replicas,
                client_id: t.client_id,
                write,
            }
        }
        "gutter" => RouteKind::Gutter {
            main: need(t.main, "main")?,
            gutter: need(t.gutter, "gutter")?,
            ttl: t.gutter_ttl.unwrap_or(10).max(1),
        },
        "broadcast" => {
            let to = match t.to {
                Some(OneOrMany::One(one)) => Some(vec![one]),
                Some(OneOrMany::Many(many)) => Some(many),
                None => None,
            };
            let to = need_list(to, "broadcast", "to")?;
            let mode = one_of(t.mode, "mode", &BROADCAST_MODES)?;
            RouteKind::Broadcast { to, mode }
        }
        "warmup" => RouteKind::WarmUp {
            cold: need(t.cold, "cold")?,
            warm: need(t.warm, "warm")?,
            holdoff: t.holdoff.unwrap_or(2),
            enabled: t.enabled.unwrap_or(true),
        },
        "null" => RouteKind::Null,
        "error" => RouteKind::Error {
            message: error_message(t.message)?,
        },
        "ttl" => {
            if t.max_ttl.is_none() && t.set_ttl.is_none() {
                return Err("a ttl route needs \"max_ttl\" or \"set_ttl\" (or both)".into());
            }
            if t.max_ttl == Some(0) {
                return Err("max_ttl = 0 would make every write expire at once".into());
            }
            RouteKind::Ttl(TtlRewrite {
                child: need(t.child, "child")?,
                max_ttl: t.max_ttl,
                set_ttl: t.set_ttl,
            })
        }
        "failover" => RouteKind::Failover(Failover {
            children: need_list(t.children, "failover", "children")?,
            errors: failover_errors(t.failover_errors)?,
            miss: t.miss.unwrap_or(false),
            order: failover_order(t.order)?,
            limit: failover_limit(t.failover_limit)?,
        }),
        "all-fastest" => RouteKind::AllFastest {
            children: need_list(t.children, "all-fastest", "children")?,
        },
        "all-initial" => RouteKind::AllInitial {
            children: need_list(t.children, "all-initial", "children")?,
        },
        "bigvalue" => RouteKind::BigValue(big_value(
            need(t.child, "child")?,
            t.threshold,
            t.item_size_max,
        )?),
        "migrate" => RouteKind::Migrate(Migrate {
            from: need(t.from, "from")?,
            to: match t.to {
                Some(OneOrMany::One(to)) => to,
                Some(OneOrMany::Many(_)) => {
                    return Err("a migrate route's \"to\" is one pool or route".into())
                }
                None => return Err("a migrate route needs \"to\"".into()),
            },
            start_time: t
                .start_time
                .ok_or("a migrate route needs \"start_time\" (Unix seconds)")?,
            interval: match t.interval {
                Some(0) => return Err("interval = 0: the move needs at least a second".into()),
                Some(i) => i,
                None => 3600,
            },
        }),
        _ => {
            if t.max_pending == Some(0) {
                return Err("max_pending = 0 would shadow nothing".into());
            }
            RouteKind::Shadow(Shadow {
                main: need(t.main, "main")?,
                shadow: need(t.shadow, "shadow")?,
                keys: shadow_keys(t.key_fraction, t.index_range)?,
                max_pending: t.max_pending.unwrap_or(1024) as usize,
            })
        }
    };
    Ok(RouteConfig {
        name: name.to_string(),
        workers: listener_workers(t.workers.as_deref(), t.listen.is_some())?,
        listen: t.listen,
        kind,
    })
}

/// `write` values, the default first.
const WRITE_POLICIES: [(&str, WritePolicy); 3] = [
    ("any", WritePolicy::Any),
    ("majority", WritePolicy::Majority),
    ("all", WritePolicy::All),
];

/// `mode` values, the default first.
const BROADCAST_MODES: [(&str, BroadcastMode); 2] = [
    ("all-sync", BroadcastMode::AllSync),
    ("all-async", BroadcastMode::AllAsync),
];

/// The value `given` names among `choices` (the first when not given); the error lists them.
fn one_of<T: Copy>(given: Option<String>, what: &str, choices: &[(&str, T)]) -> Result<T, String> {
    let name = given.as_deref().unwrap_or(choices[0].0);
    match choices.iter().find(|(n, _)| *n == name) {
        Some((_, value)) => Ok(*value),
        None => {
            let names: Vec<&str> = choices.iter().map(|(n, _)| *n).collect();
            Err(format!("unknown {what} {name:?} ({})", names.join(", ")))
        }
    }
}

/// A list a route type needs (`field` of a `kind` route): at least one name.
fn need_list(list: Option<Vec<String>>, kind: &str, field: &str) -> Result<Vec<String>, String> {
    match list {
        Some(list) if !list.is_empty() => Ok(list),
        _ => Err(format!("a {kind} route needs {field:?}")),
    }
}

/// Checks that every name a route uses exists and that no route reaches itself.
pub(crate) fn check(routes: &[RouteConfig], pools: &[&str]) -> Result<(), String> {
    let by_name: HashMap<&str, &RouteConfig> =
        routes.iter().map(|r| (r.name.as_str(), r)).collect();
    for r in routes {
        if pools.contains(&r.name.as_str()) {
            return Err(format!("{:?} names both a pool and a route", r.name));
        }
        for c in r.kind.children() {
            if !pools.contains(&c) && !by_name.contains_key(c) {
                return Err(format!("route {}: no pool or route named {c:?}", r.name));
            }
        }
        if let RouteKind::Shadow(s) = &r.kind {
            if matches!(s.keys, ShadowKeys::IndexRange(..)) && !pools.contains(&s.main.as_str()) {
                return Err(format!(
                    "route {}: index_range counts main's servers: main must be a pool",
                    r.name
                ));
            }
        }
    }
    // Depth-first from every route; a name met again on the current path is a cycle.
    fn visit<'a>(
        name: &'a str,
        by_name: &HashMap<&'a str, &'a RouteConfig>,
        path: &mut Vec<&'a str>,
        done: &mut Vec<&'a str>,
    ) -> Result<(), String> {
        let Some(r) = by_name.get(name) else {
            return Ok(()); // a pool
        };
        if done.contains(&name) {
            return Ok(());
        }
        if path.contains(&name) {
            path.push(name);
            return Err(format!("routes loop: {}", path.join(" -> ")));
        }
        path.push(name);
        for c in r.kind.children() {
            visit(c, by_name, path, done)?;
        }
        path.pop();
        done.push(name);
        Ok(())
    }
    let mut done = Vec::new();
    for r in routes {
        visit(&r.name, &by_name, &mut Vec::new(), &mut done)?;
    }
    Ok(())
}
