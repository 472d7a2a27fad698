//! `all-fastest` (mcrouter's `AllFastestRoute`) and `all-initial` (`AllInitialRoute`):
//! every child gets the request; the first success, or the first child, answers.

use super::combine::badness;
use super::request::{ReplyFuture, RequestClass, RouteContext, RouteRequest};
use super::{Build, Route, RouteNode, Step};
use futures_util::stream::{FuturesUnordered, StreamExt};
use memfleet_routing::Fanout;
use std::sync::Arc;

/// An `all-fastest` or `all-initial` route, ready to run.
pub(super) struct FanoutRoute {
    children: Vec<Arc<Route>>,
    /// `all-initial`: the first child answers (else the first success).
    initial: bool,
}

impl FanoutRoute {
    pub(super) fn build(s: &Fanout, initial: bool, b: &mut Build<'_, '_>) -> FanoutRoute {
        FanoutRoute {
            children: s.children.iter().map(|c| b.route(c)).collect(),
            initial,
        }
    }
}

impl RouteNode for FanoutRoute {
    fn call(&self, op: RouteRequest, ctx: RouteContext) -> ReplyFuture {
        if self.initial {
            all_initial(&self.children, op, ctx)
        } else {
            all_fastest(&self.children, op, ctx)
        }
    }

    fn children(&self) -> Vec<&Arc<Route>> {
        self.children.iter().collect()
    }

    // Fan-out needs TCP replies to decide: no get target.
    fn walk<'r, 'k>(&'r self, _: RequestClass, key: &'k [u8], _: RouteContext) -> Step<'r, 'k> {
        let name = if self.initial {
            "all-initial"
        } else {
            "all-fastest"
        };
        Step::new(name).then_all(&self.children, key)
    }
}

/// `all-fastest`: every child gets `op`; the first reply that is not an error answers
/// (else the last). The others finish in the background, so a delete's spooling is never
/// cut short.
fn all_fastest(children: &[Arc<Route>], op: RouteRequest, ctx: RouteContext) -> ReplyFuture {
    let mut calls: FuturesUnordered<ReplyFuture> =
        children.iter().map(|c| c.call(op.clone(), ctx)).collect();
    Box::pin(async move {
        let mut last = None;
        while let Some(reply) = calls.next().await {
            if badness(&reply) < 3 {
                if !calls.is_empty() {
                    tokio::spawn(async move { while calls.next().await.is_some() {} });
                }
                return reply;
            }
            last = Some(reply);
        }
        last.expect("a route has at least one child")
    })
}

/// `all-initial`: every child gets `op`; the first child's reply answers, the others
/// finish in the background.
fn all_initial(children: &[Arc<Route>], op: RouteRequest, ctx: RouteContext) -> ReplyFuture {
    let first = children[0].call(op.clone(), ctx);
    let rest: Vec<ReplyFuture> = children[1..]
        .iter()
        .map(|c| c.call(op.clone(), ctx))
        .collect();
    if !rest.is_empty() {
        tokio::spawn(futures_util::future::join_all(rest));
    }
    first
}
