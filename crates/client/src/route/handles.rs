//! The route tree an operation on a key walks, as text (the router's admin key
//! `__memfleet__.route_handles(OP,KEY)`, mcrouter's `__mcrouter__.route_handles(op,key)`):
//! one node a line, each child indented one space more than its parent, in the order the
//! operation reaches them (the first child a get asks first, failover targets after it).
//! Read-only: nothing is sent.

use super::request::{RequestClass, RouteContext};
use super::Route;
use crate::Pool;
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
        match self {
            Route::Pool(pool) => {
                let _ = writeln!(out, "{:depth$}{}", "", pool_handle(pool, key));
            }
            Route::Node(node) => {
                let step = node.0.walk(class, key, ctx);
                let _ = writeln!(out, "{:depth$}{}", "", step.line);
                for (child, key) in step.next {
                    child.handles(class, key, ctx, depth + 1, out);
                }
            }
        }
    }
}
