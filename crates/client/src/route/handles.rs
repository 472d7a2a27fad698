//! The route tree an operation on a key walks, as text (the router's admin key
//! `__memfleet__.route_handles(OP,KEY)`, mcrouter's `__mcrouter__.route_handles(op,key)`):
//! one node a line, each child indented one space more than its parent, in the order the
//! operation reaches them (the first child a get asks first, failover targets after it).
//! Read-only: nothing is sent.

use super::request::{RequestClass, RouteContext};
use super::{replica_order, Phase, Route};
use crate::Pool;
use memfleet_routing::{BroadcastMode, WritePolicy};
use std::fmt::Write as _;

/// The class of the operation a client names (`get`, `set`, `delete`, `mg`, ...), `None`
/// for a name memcached does not route.
pub fn operation_class(op: &str) -> Option<RequestClass> {
    Some(match op {
        "get" | "gets" | "gat" | "gats" | "lease-get" | "mg" => RequestClass::Get,
        "set" | "add" | "replace" | "append" | "prepend" | "cas" | "lease-set" | "incr"
        | "decr" | "touch" | "ms" | "ma" => RequestClass::Set,
        "delete" | "md" => RequestClass::Delete,
        "me" => RequestClass::Other,
        _ => return None,
    })
}

/// A pool leaf's line: `pool|NAME|host:port` of the key's server.
pub fn pool_handle(pool: &Pool, key: &[u8]) -> String {
    let server = pool.ring().nodes()[pool.pick(key)].addr();
    format!("pool|{}|{server}", pool.name())
}

impl Route {
    /// The nodes an operation of `class` on `key` walks (see the module doc), one a line.
    pub fn route_handles(&self, class: RequestClass, key: &[u8], ctx: RouteContext) -> String {
        let mut out = String::new();
        self.handles(class, key, ctx, 0, &mut out);
        out
    }

    fn handles(
        &self,
        class: RequestClass,
        key: &[u8],
        ctx: RouteContext,
        depth: usize,
        out: &mut String,
    ) {
        let mut line = |text: &str| {
            let _ = writeln!(out, "{:depth$}{text}", "");
        };
        let child =
            |r: &Route, key: &[u8], out: &mut String| r.handles(class, key, ctx, depth + 1, out);
        match self {
            Route::Pool(pool) => line(&pool_handle(pool, key)),
            Route::Prefix {
                prefixes,
                default,
                strip,
            } => match prefixes.iter().find(|(p, _)| key.starts_with(p)) {
                Some((p, route)) => {
                    let prefix = String::from_utf8_lossy(p);
                    line(&format!(
                        "prefix|{prefix}{}",
                        if *strip { "|strip" } else { "" }
                    ));
                    let key = if *strip { &key[p.len()..] } else { key };
                    child(route, key, out);
                }
                None => {
                    line("prefix|default");
                    child(default, key, out);
                }
            },
            Route::Operation {
                get,
                set,
                delete,
                other,
            } => {
                let (name, route) = match class {
                    RequestClass::Get => ("get", get),
                    RequestClass::Set => ("set", set),
                    RequestClass::Delete => ("delete", delete),
                    RequestClass::Other => ("default", other),
                };
                line(&format!("operation|{name}"));
                child(route, key, out);
            }
            Route::Replicated {
                replicas,
                client_id,
                write,
                local,
                ..
            } => {
                let write = match write {
                    WritePolicy::Any => "any",
                    WritePolicy::Majority => "majority",
                    WritePolicy::All => "all",
                };
                let n = replicas.len();
                if class == RequestClass::Get {
                    line("replicated|read (failover in order)");
                    let client = client_id.unwrap_or(ctx.client);
                    for i in replica_order(n, *local, client) {
                        child(&replicas[i], key, out);
                    }
                } else {
                    line(&format!("replicated|write={write} (all replicas)"));
                    replicas.iter().for_each(|r| child(r, key, out));
                }
            }
            Route::Gutter {
                main, gutter, ttl, ..
            } => {
                line(&format!("gutter|ttl={ttl}"));
                child(main, key, out);
                child(gutter, key, out);
            }
            Route::Broadcast { to, mode } => {
                let mode = match mode {
                    BroadcastMode::AllSync => "all-sync",
                    BroadcastMode::AllAsync => "all-async",
                };
                if class == RequestClass::Get {
                    line(&format!("broadcast|{mode}|read (first destination)"));
                    child(&to[0], key, out);
                } else {
                    line(&format!("broadcast|{mode}"));
                    to.iter().for_each(|r| child(r, key, out));
                }
            }
            Route::WarmUp {
                cold,
                warm,
                holdoff,
                enabled,
                ..
            } => {
                if !enabled {
                    line("warmup|disabled");
                    child(cold, key, out);
                } else {
                    line(&format!("warmup|holdoff={holdoff}"));
                    child(cold, key, out);
                    child(warm, key, out);
                }
            }
            Route::Null => line("null"),
            Route::Error(reply) => {
                let text = String::from_utf8_lossy(reply);
                line(&format!("error|{}", text.trim_end()));
            }
            Route::Ttl {
                child: next,
                max_ttl,
                set_ttl,
            } => {
                let mut text = String::from("ttl");
                if let Some(s) = set_ttl {
                    let _ = write!(text, "|set_ttl={s}");
                }
                if let Some(m) = max_ttl {
                    let _ = write!(text, "|max_ttl={m}");
                }
                line(&text);
                child(next, key, out);
            }
            Route::Failover(f) => {
                let miss = if f.miss { "|miss" } else { "" };
                line(&format!("failover{miss} (in the order tried)"));
                for i in f.order_for(key) {
                    child(&f.children[i], key, out);
                }
            }
            Route::AllFastest(children) => {
                line("all-fastest");
                children.iter().for_each(|r| child(r, key, out));
            }
            Route::AllInitial(children) => {
                line("all-initial");
                children.iter().for_each(|r| child(r, key, out));
            }
            Route::Shadow(s) => {
                if s.shadows(key) {
                    line("shadow|main then shadow (copied)");
                    child(&s.main, key, out);
                    child(&s.shadow, key, out);
                } else {
                    line("shadow|main (key not shadowed)");
                    child(&s.main, key, out);
                }
            }
            Route::Migrate(m) => match m.phase() {
                Phase::Before => {
                    line("migrate|before (from)");
                    child(&m.from, key, out);
                }
                Phase::After => {
                    line("migrate|after (to)");
                    child(&m.to, key, out);
                }
                Phase::During if class == RequestClass::Delete => {
                    line("migrate|moving: deletes to both");
                    child(&m.to, key, out);
                    child(&m.from, key, out);
                }
                Phase::During if class == RequestClass::Get => {
                    line("migrate|moving: to, then from on a miss");
                    child(&m.to, key, out);
                    child(&m.from, key, out);
                }
                Phase::During => {
                    line("migrate|moving: to");
                    child(&m.to, key, out);
                }
            },
            Route::BigValue(b) => {
                line(&format!("bigvalue|threshold={} (the index)", b.threshold));
                child(&b.child, key, out);
            }
        }
    }
}
