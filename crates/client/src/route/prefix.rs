//! `prefix`: the longest matching prefix picks the route; with `strip`, the key goes on
//! without it (and comes back with it in `VALUE` lines).

use super::request::{ReplyFuture, RequestClass, RequestForm, RouteContext, RouteRequest};
use super::{Build, Route, RouteNode, Step};
use memfleet_protocol::reply::{self, ReplyKind, ServerReply};
use memfleet_protocol::response;
use memfleet_routing::Prefix;
use std::sync::Arc;

/// A `prefix` route, ready to run.
pub(super) struct PrefixRoute {
    /// (prefix, route), longest first.
    prefixes: Vec<(Vec<u8>, Arc<Route>)>,
    /// Keys no prefix matches.
    default: Arc<Route>,
    /// Remove the prefix from the key.
    strip: bool,
}

impl PrefixRoute {
    pub(super) fn build(s: &Prefix, b: &mut Build<'_, '_>) -> PrefixRoute {
        PrefixRoute {
            prefixes: s
                .prefixes
                .iter()
                .map(|(p, r)| (p.as_bytes().to_vec(), b.route(r)))
                .collect(),
            default: b.route(&s.default),
            strip: s.strip,
        }
    }

    /// The matched prefix's length and route for `key` (0 and `default`: none matched).
    fn route_for(&self, key: &[u8]) -> Option<(&[u8], &Arc<Route>)> {
        let (p, r) = self.prefixes.iter().find(|(p, _)| key.starts_with(p))?;
        Some((p, r))
    }
}

impl RouteNode for PrefixRoute {
    fn call(&self, op: RouteRequest, ctx: RouteContext) -> ReplyFuture {
        let Some((p, route)) = self.route_for(&op.key) else {
            return self.default.call(op, ctx);
        };
        if !self.strip {
            return route.call(op, ctx);
        }
        let call = route.call(op.with_key(&op.key[p.len()..]), ctx);
        if !matches!(op.form, RequestForm::Get { .. }) {
            return call;
        }
        // The client asked for its key, prefix and all: that is the key its VALUE line
        // names.
        Box::pin(async move { call.await.map(|r| rekey(r, &op.key)) })
    }

    fn children(&self) -> Vec<&Arc<Route>> {
        let prefixed = self.prefixes.iter().map(|(_, r)| r);
        prefixed.chain([&self.default]).collect()
    }

    fn walk<'r, 'k>(&'r self, _: RequestClass, key: &'k [u8], _: RouteContext) -> Step<'r, 'k> {
        match self.route_for(key) {
            Some((p, route)) => {
                let prefix = String::from_utf8_lossy(p);
                let strip = if self.strip { "|strip" } else { "" };
                let key = if self.strip { &key[p.len()..] } else { key };
                Step::new(format!("prefix|{prefix}{strip}")).then(route, key)
            }
            None => Step::new("prefix|default").then(&self.default, key),
        }
    }

    fn get_target(&self, key: &[u8], ctx: RouteContext) -> Option<std::net::SocketAddr> {
        match self.route_for(key) {
            Some(_) if self.strip => None,
            Some((_, route)) => route.get_target(key, ctx),
            None => self.default.get_target(key, ctx),
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
