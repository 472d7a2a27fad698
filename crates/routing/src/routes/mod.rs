//! Routes: how a request finds its pool when a deployment has more than one (Facebook's
//! §3.2.2–§4.3, mcrouter's route handles). A route is a small tree whose leaves are pools;
//! each inner node is one route type, a file of this module holding its settings, how its
//! TOML table reads and what it checks:
//!
//! | type | file | what it does |
//! |------|------|--------------|
//! | `prefix` | `prefix.rs` | the longest matching key prefix picks the route (§3.2.2, §4.2) |
//! | `operation` | `operation.rs` | gets, sets and deletes can go different ways |
//! | `replicated` | `replicated.rs` | reads to one replica, writes to every replica (§3.2.3) |
//! | `gutter` | `gutter.rs` | a failed request goes to a gutter pool, with short TTLs (§3.3) |
//! | `broadcast` | `broadcast.rs` | every request to every destination (§4.1) |
//! | `warmup` | `warmup.rs` | a cold cluster filled from a warm one (§4.3) |
//! | `null`, `error` | `answer.rs` | answer at once (mcrouter's `NullRoute`, `ErrorRoute`) |
//! | `ttl` | `ttl.rs` | writes' exptime capped or set (`ModifyExptimeRoute`) |
//! | `failover` | `failover.rs` | children in order, the next on a failure (`FailoverRoute`) |
//! | `all-fastest`, `all-initial` | `fanout.rs` | every child; the first success or the first child answers |
//! | `shadow` | `shadow.rs` | main answers, chosen keys copied to a shadow (`ShadowRoute`) |
//! | `migrate` | `migrate.rs` | from one route to another at a given time (`MigrateRoute`) |
//! | `bigvalue` | `bigvalue.rs` | large values as chunks and an index (`BigValueRoute`) |
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
//! `memfleet_client::route`'s job (for the router and applications alike), one file there
//! per type too. A new route type is a file here, a file there, and a line in each crate's
//! list of types (`route_types!` below, `memfleet_client`'s `route/build.rs`).

mod answer;
mod bigvalue;
mod broadcast;
mod failover;
mod fanout;
mod gutter;
mod migrate;
mod operation;
mod prefix;
mod replicated;
mod shadow;
mod ttl;
mod warmup;

pub use answer::{ErrorAnswer, Null};
pub use bigvalue::BigValue;
pub use broadcast::{Broadcast, BroadcastMode};
pub use failover::{Failover, FailoverErrors, FailoverLimit, FailoverOrder};
pub use fanout::Fanout;
pub use gutter::Gutter;
pub use migrate::Migrate;
pub use operation::Operation;
pub use prefix::Prefix;
pub use replicated::{Replicated, WritePolicy};
pub use shadow::{Shadow, ShadowKeys};
pub use ttl::TtlRewrite;
pub use warmup::WarmUp;

use crate::listener_workers::{listener_workers, ListenerWorkers};
use serde::de::DeserializeOwned;
use std::collections::HashMap;

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

/// One route type's settings: read from its TOML table (the fields as written, `Table`),
/// checked, and the names of the pools and routes it sends to.
pub(crate) trait RouteType: Sized {
    /// The route's TOML table without `type`, `listen` and `workers`, as written.
    type Table: DeserializeOwned;
    /// The settings of a `kind` route (`kind`: its type's name, for errors), checked.
    fn read(kind: &str, table: Self::Table) -> Result<Self, String>;
    /// The pools and routes it sends to.
    fn children(&self) -> Vec<&str>;
    /// What it needs of the names it uses beyond their existence (`pools`: the pools').
    fn check_names(&self, _pools: &[&str]) -> Result<(), String> {
        Ok(())
    }
}

/// The list of route types: the `RouteKind` enum, the names `type` takes, and the
/// dispatch of reading and checking to each type's file.
macro_rules! route_types {
    ($($name:literal => $variant:ident($settings:ty) $doc:literal,)*) => {
        /// The route types (see the module table). Every `String` in them names a pool or
        /// a route.
        #[derive(Clone, Debug, PartialEq, Eq)]
        pub enum RouteKind {
            $(#[doc = $doc] $variant($settings),)*
        }

        /// What `type` takes, in the order of the module's table.
        const TYPE_NAMES: &[&str] = &[$($name),*];

        impl RouteKind {
            /// The names it refers to.
            pub fn children(&self) -> Vec<&str> {
                match self {
                    $(RouteKind::$variant(s) => s.children(),)*
                }
            }

            /// Its `type` in TOML.
            pub fn type_name(&self) -> &'static str {
                match self {
                    $(RouteKind::$variant(_) => $name,)*
                }
            }

            fn check_names(&self, pools: &[&str]) -> Result<(), String> {
                match self {
                    $(RouteKind::$variant(s) => s.check_names(pools),)*
                }
            }

            /// A `kind` route's table (without `type`, `listen`, `workers`), read.
            fn read(kind: &str, table: toml::Value) -> Result<RouteKind, String> {
                match kind {
                    $($name => read_as::<$settings>(kind, table).map(RouteKind::$variant),)*
                    other => Err(format!(
                        "unknown route type {other:?} ({})",
                        TYPE_NAMES.join(", ")
                    )),
                }
            }
        }
    };
}

route_types! {
    "prefix" => Prefix(Prefix) "Longest prefix first.",
    "operation" => Operation(Operation) "By operation.",
    "replicated" => Replicated(Replicated) "Replicas.",
    "gutter" => Gutter(Gutter) "Failover to a gutter.",
    "broadcast" => Broadcast(Broadcast) "To every destination.",
    "warmup" => WarmUp(WarmUp) "Cold-cluster warm-up.",
    "null" => Null(Null) "Answers at once, reaching nothing (mcrouter's `NullRoute`).",
    "error" => Error(ErrorAnswer) "Answers `SERVER_ERROR <message>` (mcrouter's `ErrorRoute`).",
    "ttl" => Ttl(TtlRewrite) "Rewrites writes' exptime (mcrouter's `ModifyExptimeRoute`).",
    "failover" => Failover(Failover) "Ordered failover (mcrouter's `FailoverRoute`).",
    "all-fastest" => AllFastest(Fanout) "To every child; the first success answers (mcrouter's `AllFastestRoute`).",
    "all-initial" => AllInitial(Fanout) "To every child; the first child answers (mcrouter's `AllInitialRoute`).",
    "shadow" => Shadow(Shadow) "Main answers; chosen keys are shadowed (mcrouter's `ShadowRoute`).",
    "migrate" => Migrate(Migrate) "Moves keys from one route to another at a given time (mcrouter's `MigrateRoute`).",
    "bigvalue" => BigValue(BigValue) "Large values as chunks (mcrouter's `BigValueRoute`).",
}

/// A `kind` route's table read as `T`, serde's words for a field too many or missing put
/// in the operator's terms (`a gutter route needs "gutter"`).
fn read_as<T: RouteType>(kind: &str, table: toml::Value) -> Result<T, String> {
    let table = crate::toml_table::table_as::<T::Table>(table).map_err(|e| {
        let field = |what: &str| {
            let rest = &e[e.find(what)? + what.len()..];
            Some(rest[..rest.find('`')?].to_string())
        };
        if let Some(f) = field("unknown field `") {
            format!("a {kind} route takes no {f:?}")
        } else if let Some(f) = field("missing field `") {
            format!("a {kind} route needs {f:?}")
        } else {
            e
        }
    })?;
    T::read(kind, table)
}

/// Turns a TOML route table into a [`RouteConfig`]; the error says what is wrong.
pub(crate) fn parse(name: &str, table: toml::Value) -> Result<RouteConfig, String> {
    let toml::Value::Table(mut table) = table else {
        return Err(format!("{name:?} must be a table ([routes.{name}])"));
    };
    let kind = match table.remove("type") {
        Some(toml::Value::String(kind)) => kind,
        Some(other) => return Err(format!("type must be a string, not a {}", other.type_str())),
        None => return Err(format!("a route needs a type ({})", TYPE_NAMES.join(", "))),
    };
    let listen = match table.remove("listen") {
        Some(toml::Value::String(listen)) => Some(listen),
        Some(other) => {
            return Err(format!(
                "listen must be a string, not a {}",
                other.type_str()
            ))
        }
        None => None,
    };
    let workers: Option<Vec<u64>> = match table.remove("workers") {
        Some(w) => Some(
            crate::toml_table::table_as::<WorkersOnly>(toml::Value::Table(
                [("workers".to_string(), w)].into_iter().collect(),
            ))?
            .workers,
        ),
        None => None,
    };
    let kind = RouteKind::read(&kind, toml::Value::Table(table))?;
    Ok(RouteConfig {
        name: name.to_string(),
        workers: listener_workers(workers.as_deref(), listen.is_some())?,
        listen,
        kind,
    })
}

/// A route's `workers`, read with the same checks as the pools' (`workers: invalid ...`).
#[derive(serde::Deserialize)]
struct WorkersOnly {
    workers: Vec<u64>,
}

/// The value `given` names among `choices` (the first when not given); the error lists them.
pub(crate) fn one_of<T: Copy>(
    given: Option<String>,
    what: &str,
    choices: &[(&str, T)],
) -> Result<T, String> {
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
pub(crate) fn need_list(list: Vec<String>, kind: &str, field: &str) -> Result<Vec<String>, String> {
    if list.is_empty() {
        return Err(format!("a {kind} route needs {field:?}"));
    }
    Ok(list)
}

/// A route table's `to`: one name (`migrate`) or a list (`broadcast`).
#[derive(serde::Deserialize, Clone, Debug)]
#[serde(untagged)]
pub(crate) enum OneOrMany {
    /// `to = "name"`.
    One(String),
    /// `to = ["a", "b"]`.
    Many(Vec<String>),
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
        r.kind
            .check_names(pools)
            .map_err(|e| format!("route {}: {e}", r.name))?;
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

#[cfg(test)]
mod tests;
