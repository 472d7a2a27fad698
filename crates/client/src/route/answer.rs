//! Routes that answer without a server: `null` (mcrouter's `NullRoute`) and `error`
//! (`ErrorRoute`).

use super::request::{ReplyFuture, RequestClass, RequestForm, RouteContext, RouteRequest};
use super::{ready, Route, RouteNode, Step};
use memfleet_protocol::reply::ReplyKind;
use memfleet_routing::ErrorAnswer;
use std::sync::Arc;

/// A `null` route.
pub(super) struct NullRoute;

impl RouteNode for NullRoute {
    fn call(&self, op: RouteRequest, _: RouteContext) -> ReplyFuture {
        ready(Ok(null_reply(&op).to_vec()))
    }

    fn children(&self) -> Vec<&Arc<Route>> {
        Vec::new()
    }

    fn walk<'r, 'k>(&'r self, _: RequestClass, _: &'k [u8], _: RouteContext) -> Step<'r, 'k> {
        Step::new("null")
    }
}

/// An `error` route: its whole reply line.
pub(super) struct ErrorRoute(Vec<u8>);

impl ErrorRoute {
    pub(super) fn build(s: &ErrorAnswer) -> ErrorRoute {
        ErrorRoute(format!("SERVER_ERROR {}\r\n", s.message).into_bytes())
    }
}

impl RouteNode for ErrorRoute {
    fn call(&self, _: RouteRequest, _: RouteContext) -> ReplyFuture {
        ready(Ok(self.0.clone()))
    }

    fn children(&self) -> Vec<&Arc<Route>> {
        Vec::new()
    }

    fn walk<'r, 'k>(&'r self, _: RequestClass, _: &'k [u8], _: RouteContext) -> Step<'r, 'k> {
        let text = String::from_utf8_lossy(&self.0);
        Step::new(format!("error|{}", text.trim_end()))
    }
}

/// What a `null` route answers `op`: what memcached answers when the key is not there and
/// nothing is stored (a miss, `NOT_STORED`, `NOT_FOUND`; meta `EN`, `NS`, `NF`).
fn null_reply(op: &RouteRequest) -> &'static [u8] {
    match &op.form {
        RequestForm::Get { .. } => b"END\r\n",
        RequestForm::Store { .. } => b"NOT_STORED\r\n",
        RequestForm::Delete { .. } => b"NOT_FOUND\r\n",
        RequestForm::Raw {
            kind: ReplyKind::Meta,
            head,
            ..
        } => match head.as_slice() {
            b"mg " | b"me " => b"EN\r\n",
            b"ms " => b"NS\r\n",
            _ => b"NF\r\n",
        },
        RequestForm::Raw { .. } => b"NOT_FOUND\r\n",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(head: &[u8], tail: &[u8]) -> RouteRequest {
        RouteRequest::meta_on_k(head, tail)
    }

    #[test]
    fn null_answers_as_a_miss_or_a_refusal() {
        assert_eq!(null_reply(&raw(b"mg ", b" v\r\n")), b"EN\r\n");
        assert_eq!(null_reply(&raw(b"ms ", b" 1\r\nv\r\n")), b"NS\r\n");
        assert_eq!(null_reply(&raw(b"md ", b"\r\n")), b"NF\r\n");
    }
}
