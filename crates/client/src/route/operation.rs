//! `operation`: gets, sets, deletes and the rest each go their own way.

use super::request::{ReplyFuture, RequestClass, RouteContext, RouteRequest};
use super::{Build, Route, RouteNode, Step};
use memfleet_routing::Operation;
use std::sync::Arc;

/// An `operation` route, ready to run.
pub(super) struct OperationRoute {
    /// Retrievals.
    get: Arc<Route>,
    /// Storage, arithmetic, touch.
    set: Arc<Route>,
    /// Deletes.
    delete: Arc<Route>,
    /// The rest.
    other: Arc<Route>,
}

impl OperationRoute {
    pub(super) fn build(s: &Operation, b: &mut Build<'_, '_>) -> OperationRoute {
        let other = b.route(&s.default);
        let mut or_default = |r: &Option<String>| match r {
            Some(r) => b.route(r),
            None => other.clone(),
        };
        OperationRoute {
            get: or_default(&s.get),
            set: or_default(&s.set),
            delete: or_default(&s.delete),
            other: other.clone(),
        }
    }

    /// The route and its name for `class`.
    fn route_for(&self, class: RequestClass) -> (&'static str, &Arc<Route>) {
        match class {
            RequestClass::Get => ("get", &self.get),
            RequestClass::Set => ("set", &self.set),
            RequestClass::Delete => ("delete", &self.delete),
            RequestClass::Other => ("default", &self.other),
        }
    }
}

impl RouteNode for OperationRoute {
    fn call(&self, op: RouteRequest, ctx: RouteContext) -> ReplyFuture {
        self.route_for(op.class).1.call(op, ctx)
    }

    fn children(&self) -> Vec<&Arc<Route>> {
        vec![&self.get, &self.set, &self.delete, &self.other]
    }

    fn walk<'r, 'k>(&'r self, class: RequestClass, key: &'k [u8], _: RouteContext) -> Step<'r, 'k> {
        let (name, route) = self.route_for(class);
        Step::new(format!("operation|{name}")).then(route, key)
    }

    fn get_target(&self, key: &[u8], ctx: RouteContext) -> Option<std::net::SocketAddr> {
        self.get.get_target(key, ctx)
    }
}
