//! Routes built from their checked configuration (`memfleet_routing::routes`): the list of
//! route types, one line each.

use super::answer::{ErrorRoute, NullRoute};
use super::bigvalue::BigValueRoute;
use super::broadcast::BroadcastRoute;
use super::failover::FailoverRoute;
use super::fanout::FanoutRoute;
use super::gutter::GutterRoute;
use super::migrate::MigrateRoute;
use super::operation::OperationRoute;
use super::prefix::PrefixRoute;
use super::replicated::ReplicatedRoute;
use super::shadow::ShadowRoute;
use super::ttl::TtlRoute;
use super::warmup::WarmUpRoute;
use super::{Route, RouteCounters};
use crate::Pool;
use memfleet_routing::{RouteConfig, RouteKind};
use std::collections::HashMap;
use std::sync::Arc;

/// The route a configuration describes, built over the routes and pools it names.
fn node(kind: &RouteKind, b: &mut Build<'_, '_>) -> Route {
    match kind {
        RouteKind::Prefix(s) => Route::node(PrefixRoute::build(s, b)),
        RouteKind::Operation(s) => Route::node(OperationRoute::build(s, b)),
        RouteKind::Replicated(s) => Route::node(ReplicatedRoute::build(s, b)),
        RouteKind::Gutter(s) => Route::node(GutterRoute::build(s, b)),
        RouteKind::Broadcast(s) => Route::node(BroadcastRoute::build(s, b)),
        RouteKind::WarmUp(s) => Route::node(WarmUpRoute::build(s, b)),
        RouteKind::Null(_) => Route::node(NullRoute),
        RouteKind::Error(s) => Route::node(ErrorRoute::build(s)),
        RouteKind::Ttl(s) => Route::node(TtlRoute::build(s, b)),
        RouteKind::Failover(s) => Route::node(FailoverRoute::build(s, b)),
        RouteKind::AllFastest(s) => Route::node(FanoutRoute::build(s, false, b)),
        RouteKind::AllInitial(s) => Route::node(FanoutRoute::build(s, true, b)),
        RouteKind::Shadow(s) => Route::node(ShadowRoute::build(s, b)),
        RouteKind::Migrate(s) => Route::node(MigrateRoute::build(s, b)),
        RouteKind::BigValue(s) => Route::node(BigValueRoute::build(s, b)),
    }
}

/// Builds every route of `configs` over `pools`; `counters` carries the counters of the
/// routes of the previous configuration (by name) and receives this one's.
pub(crate) fn build(
    configs: &[RouteConfig],
    pools: &HashMap<String, Arc<Pool>>,
    counters: &mut HashMap<String, Arc<RouteCounters>>,
    zone: Option<&str>,
) -> HashMap<String, Arc<Route>> {
    let mut all = Routes {
        by_name: configs.iter().map(|r| (r.name.as_str(), r)).collect(),
        pools,
        old: counters,
        kept: HashMap::new(),
        built: HashMap::new(),
        zone,
    };
    for r in configs {
        all.resolve(&r.name);
    }
    let (kept, built) = (all.kept, all.built);
    *counters = kept;
    built
}

/// What building a configuration's routes needs and makes.
struct Routes<'c> {
    by_name: HashMap<&'c str, &'c RouteConfig>,
    pools: &'c HashMap<String, Arc<Pool>>,
    /// The previous configuration's counters, by route name.
    old: &'c HashMap<String, Arc<RouteCounters>>,
    /// This one's.
    kept: HashMap<String, Arc<RouteCounters>>,
    built: HashMap<String, Arc<Route>>,
    zone: Option<&'c str>,
}

impl Routes<'_> {
    /// The route called `name` (a pool or a route), building what it needs first. The
    /// configuration was checked (names exist, no loops) by `memfleet_routing`.
    fn resolve(&mut self, name: &str) -> Arc<Route> {
        if let Some(r) = self.built.get(name) {
            return r.clone();
        }
        let Some(config) = self.by_name.get(name).copied() else {
            let pool = self
                .pools
                .get(name)
                .expect("checked: every name is a pool or a route");
            return Arc::new(Route::Pool(pool.clone()));
        };
        let route = Arc::new(node(&config.kind, &mut Build { name, all: self }));
        self.built.insert(name.to_string(), route.clone());
        route
    }
}

/// One route being built: what its type's `build` asks for.
pub(super) struct Build<'a, 'c> {
    name: &'a str,
    all: &'a mut Routes<'c>,
}

impl Build<'_, '_> {
    /// The pool or route called `name`, built.
    pub(super) fn route(&mut self, name: &str) -> Arc<Route> {
        self.all.resolve(name)
    }

    /// This route's counters (those of the previous configuration's route of the same
    /// name, so a reload keeps counting), `shown` in `stats`.
    pub(super) fn counters(&mut self, shown: &'static [&'static str]) -> Arc<RouteCounters> {
        let counters = self.all.old.get(self.name).cloned().unwrap_or_default();
        *counters.shown.lock().unwrap_or_else(|e| e.into_inner()) = shown;
        self.all
            .kept
            .insert(self.name.to_string(), counters.clone());
        counters
    }

    /// Whether `name` is a pool of the router's zone.
    pub(super) fn in_zone(&self, name: &str) -> bool {
        let zone = self.all.zone;
        zone.is_some()
            && self
                .all
                .pools
                .get(name)
                .and_then(|p| p.config().zone.as_deref())
                == zone
    }
}
