//! A route tree listener: each key's request becomes a `RouteRequest` down the tree; a
//! multi-key get becomes one per key, reassembled in the client's order.

use super::local::{
    admin_lookup, answer_locally, flush_all, general_stats, stats, stats_for, ADMIN_PREFIX,
};
use super::queued::{error_reply, forwarded, local, QueuedReply, Quiet};
use super::rewrite::{get_head, split_meta, without_quiet, QUIET_MA, QUIET_MG, QUIET_MS_MD};
use crate::reloadable::ServedTopology;
use memfleet_client::{BackendError, RequestClass, RequestForm, Route, RouteContext, RouteRequest};
use memfleet_protocol::reply::{self, ReplyKind, ServerReply};
use memfleet_protocol::{response, GetKind, Request};
use std::sync::Arc;

/// Decides how `request` goes down a route tree (any listener that is not a plain pool).
/// Multi-key gets become one operation per key, reassembled in the client's order.
pub(super) fn tree(
    root: &Arc<Route>,
    served: &ServedTopology,
    ctx: RouteContext,
    request: &Request<'_>,
    raw: &[u8],
) -> QueuedReply {
    let one = |op: RouteRequest, noreply: bool, quiet: Quiet| {
        forwarded(root.call(op, ctx), noreply, quiet)
    };
    let raw_op = |class: RequestClass, key: &[u8], head: &[u8], tail: String| {
        RouteRequest::raw(class, key, head, tail.into_bytes(), ReplyKind::Line)
    };
    let meta =
        |class: RequestClass, key: &[u8], quiet: bool, suppress: &'static [&'static [u8]]| {
            let (head, wire_key, tail) = split_meta(&without_quiet(raw));
            let op = RouteRequest {
                class,
                key: key.to_vec(),
                form: RequestForm::Raw {
                    head,
                    wire_key,
                    tail,
                    kind: ReplyKind::Meta,
                },
            };
            one(op, false, quiet.then_some(suppress))
        };
    match request {
        Request::Get(g) => {
            // The first key says whether to look (no copy of the keys for a plain get).
            let first = { g.keys }.next();
            if g.kind == GetKind::Get && first.is_some_and(|k| k.starts_with(ADMIN_PREFIX)) {
                let keys: Vec<Vec<u8>> = g.keys.map(<[u8]>::to_vec).collect();
                let servers = |key: &[u8]| {
                    let mut out = Vec::new();
                    root.servers_for(key, ctx, &mut out);
                    out
                };
                let handles = |class, key: &[u8]| root.route_handles(class, key, ctx);
                if let Some(reply) = admin_lookup(&keys, servers, handles, served, ctx.lane) {
                    return local(reply);
                }
            }
            let head = get_head(g);
            let calls: Vec<_> = g
                .keys
                .map(|k| {
                    let op = RouteRequest {
                        class: RequestClass::Get,
                        key: k.to_vec(),
                        form: RequestForm::Get { head: head.clone() },
                    };
                    root.call(op, ctx)
                })
                .collect();
            let one_key = calls.len() == 1;
            QueuedReply::Reply(Box::pin(async move {
                let mut out = Vec::new();
                for c in calls {
                    // A key whose route failed is a miss; so is an error line, but for a
                    // one-key get, which answers a server's (or a route's, such as a rate
                    // limit's) SERVER_ERROR as it came, and `max_outstanding`'s refusal.
                    let r = match c.await {
                        Ok(r) => r,
                        Err(e @ BackendError::Outstanding { .. }) if one_key => {
                            return error_reply(&e)
                        }
                        Err(_) => continue,
                    };
                    if one_key && r.starts_with(b"SERVER_ERROR") {
                        return r;
                    }
                    let values = reply::decode(&r, ReplyKind::Retrieval);
                    if matches!(values, Ok(ServerReply::Values(v)) if !v.is_empty()) {
                        out.extend_from_slice(r.strip_suffix(b"END\r\n").unwrap_or(&r));
                    }
                }
                response::end(&mut out);
                out
            }))
        }
        Request::Store(s) => one(
            RouteRequest {
                class: RequestClass::Set,
                key: s.key.to_vec(),
                form: RequestForm::Store {
                    command: s.command,
                    flags: s.flags,
                    exptime: s.exptime,
                    cas: s.cas,
                    data: Arc::from(s.data),
                },
            },
            s.noreply,
            None,
        ),
        Request::Delete {
            key,
            holdoff,
            noreply,
        } => one(
            RouteRequest {
                class: RequestClass::Delete,
                key: key.to_vec(),
                form: RequestForm::Delete { holdoff: *holdoff },
            },
            *noreply,
            None,
        ),
        Request::Arith {
            op,
            key,
            delta,
            noreply,
        } => {
            let head: &[u8] = match op {
                memfleet_protocol::ArithOp::Incr => b"incr ",
                memfleet_protocol::ArithOp::Decr => b"decr ",
            };
            one(
                raw_op(RequestClass::Set, key, head, format!(" {delta}\r\n")),
                *noreply,
                None,
            )
        }
        Request::Touch {
            key,
            exptime,
            noreply,
        } => one(
            raw_op(RequestClass::Set, key, b"touch ", format!(" {exptime}\r\n")),
            *noreply,
            None,
        ),
        Request::MetaGet(m) => meta(RequestClass::Get, &m.key.bytes(), m.flags.quiet(), QUIET_MG),
        Request::MetaDelete(m) => meta(
            RequestClass::Delete,
            &m.key.bytes(),
            m.flags.quiet(),
            QUIET_MS_MD,
        ),
        Request::MetaSet(m) => meta(
            RequestClass::Set,
            &m.key.bytes(),
            m.flags.quiet(),
            QUIET_MS_MD,
        ),
        Request::MetaArithmetic(m) => {
            meta(RequestClass::Set, &m.key.bytes(), m.flags.quiet(), QUIET_MA)
        }
        Request::MetaDebug { key } => meta(RequestClass::Other, &key.bytes(), false, &[]),
        Request::Stats { .. } | Request::FlushAll { .. } => {
            let mut pools = Vec::new();
            root.pools(&mut pools);
            match request {
                Request::FlushAll { noreply, .. } => flush_all(&pools, ctx.lane, raw, *noreply),
                Request::Stats { args } if args.is_empty() => general_stats(&pools, served),
                Request::Stats { args } => local(stats_for(&pools, served, args.as_bytes())),
                _ => local(stats(&pools, served)),
            }
        }
        Request::Other { .. }
        | Request::Version
        | Request::Verbosity { .. }
        | Request::Quit
        | Request::MetaNoop => answer_locally(request),
    }
}
