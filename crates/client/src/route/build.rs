//! Routes built from their checked configuration (`memfleet_routing::route_config`).

use super::{
    BigValueRoute, FailoverBucket, FailoverRoute, MigrateRoute, Route, RouteCounters, ShadowRoute,
};
use crate::Pool;
use memfleet_routing::{RouteConfig, RouteKind};
use std::collections::HashMap;
use std::sync::Arc;

/// Builds every route of `configs` over `pools`; `counters` carries the counters of the
/// routes of the previous configuration (by name) and receives this one's.
pub(crate) fn build(
    configs: &[RouteConfig],
    pools: &HashMap<String, Arc<Pool>>,
    counters: &mut HashMap<String, Arc<RouteCounters>>,
    zone: Option<&str>,
) -> HashMap<String, Arc<Route>> {
    let by_name: HashMap<&str, &RouteConfig> =
        configs.iter().map(|r| (r.name.as_str(), r)).collect();
    let mut built: HashMap<String, Arc<Route>> = HashMap::new();
    let mut kept = HashMap::new();
    for r in configs {
        resolve(
            &r.name, &by_name, pools, counters, &mut kept, &mut built, zone,
        );
    }
    *counters = kept;
    built
}

/// The route called `name` (a pool or a route), building what it needs first. The
/// configuration was checked (names exist, no loops) by `memfleet_routing`.
fn resolve(
    name: &str,
    by_name: &HashMap<&str, &RouteConfig>,
    pools: &HashMap<String, Arc<Pool>>,
    old: &HashMap<String, Arc<RouteCounters>>,
    kept: &mut HashMap<String, Arc<RouteCounters>>,
    built: &mut HashMap<String, Arc<Route>>,
    zone: Option<&str>,
) -> Arc<Route> {
    if let Some(r) = built.get(name) {
        return r.clone();
    }
    let Some(config) = by_name.get(name) else {
        let pool = pools
            .get(name)
            .expect("checked: every name is a pool or a route");
        return Arc::new(Route::Pool(pool.clone()));
    };
    let mut go = |n: &str| resolve(n, by_name, pools, old, kept, built, zone);
    let counters = old.get(name).cloned().unwrap_or_default();
    let route = match &config.kind {
        RouteKind::Prefix {
            prefixes,
            default,
            strip,
        } => Route::Prefix {
            prefixes: prefixes
                .iter()
                .map(|(p, r)| (p.as_bytes().to_vec(), go(r)))
                .collect(),
            default: go(default),
            strip: *strip,
        },
        RouteKind::Operation {
            get,
            set,
            delete,
            default,
        } => {
            let other = go(default);
            let mut or_default = |r: &Option<String>| match r {
                Some(r) => go(r),
                None => other.clone(),
            };
            Route::Operation {
                get: or_default(get),
                set: or_default(set),
                delete: or_default(delete),
                other: other.clone(),
            }
        }
        RouteKind::Replicated {
            replicas,
            client_id,
            write,
        } => {
            // The replicas that are pools of the router's zone first (reads start there).
            let in_zone = |r: &String| {
                zone.is_some() && pools.get(r).and_then(|p| p.config().zone.as_deref()) == zone
            };
            let (mut ordered, remote): (Vec<&String>, Vec<&String>) =
                replicas.iter().partition(|r| in_zone(r));
            let local = ordered.len();
            ordered.extend(remote);
            Route::Replicated {
                write: *write,
                replicas: ordered.into_iter().map(|r| go(r)).collect(),
                client_id: client_id
                    .as_ref()
                    .map(|id| xxhash_rust::xxh3::xxh3_64(id.as_bytes())),
                counters: counters.clone(),
                local,
            }
        }
        RouteKind::Gutter { main, gutter, ttl } => Route::Gutter {
            main: go(main),
            gutter: go(gutter),
            ttl: *ttl,
            counters: counters.clone(),
        },
        RouteKind::Broadcast { to, mode } => Route::Broadcast {
            to: to.iter().map(|r| go(r)).collect(),
            mode: *mode,
        },
        RouteKind::WarmUp {
            cold,
            warm,
            holdoff,
            enabled,
        } => Route::WarmUp {
            cold: go(cold),
            warm: go(warm),
            holdoff: *holdoff,
            enabled: *enabled,
            counters: counters.clone(),
        },
        RouteKind::Null => Route::Null,
        RouteKind::Error { message } => {
            Route::Error(format!("SERVER_ERROR {message}\r\n").into_bytes())
        }
        RouteKind::Ttl(t) => Route::Ttl {
            child: go(&t.child),
            max_ttl: t.max_ttl,
            set_ttl: t.set_ttl,
        },
        RouteKind::Failover(f) => Route::Failover(FailoverRoute {
            children: f.children.iter().map(|c| go(c)).collect(),
            errors: f.errors,
            miss: f.miss,
            order: f.order,
            limit: f.limit.map(|l| Arc::new(FailoverBucket::new(l))),
            counters: counters.clone(),
        }),
        RouteKind::AllFastest { children } => {
            Route::AllFastest(children.iter().map(|c| go(c)).collect())
        }
        RouteKind::AllInitial { children } => {
            Route::AllInitial(children.iter().map(|c| go(c)).collect())
        }
        RouteKind::Shadow(s) => Route::Shadow(ShadowRoute {
            main: go(&s.main),
            shadow: go(&s.shadow),
            keys: s.keys,
            max_pending: s.max_pending,
            pending: Default::default(),
            counters: counters.clone(),
        }),
        RouteKind::BigValue(b) => Route::BigValue(BigValueRoute {
            child: go(&b.child),
            threshold: b.threshold,
            item_size_max: b.item_size_max,
        }),
        RouteKind::Migrate(m) => Route::Migrate(MigrateRoute {
            from: go(&m.from),
            to: go(&m.to),
            start_time: m.start_time,
            interval: m.interval,
        }),
    };
    let shown: &'static [&'static str] = match route {
        Route::Replicated { .. } => &["replica_failovers"],
        Route::Gutter { .. } => &["gutter_requests", "gutter_gets", "gutter_hits"],
        Route::WarmUp { .. } => &["cold_hits", "cold_misses", "warm_fills", "fills_refused"],
        Route::Failover(_) => &["failovers", "failovers_limited"],
        Route::Shadow(_) => &[
            "shadow_requests",
            "shadow_dropped",
            "shadow_compared",
            "shadow_mismatches",
        ],
        _ => &[],
    };
    if !shown.is_empty() {
        *counters.shown.lock().unwrap_or_else(|e| e.into_inner()) = shown;
        kept.insert(name.to_string(), counters);
    }
    let route = Arc::new(route);
    built.insert(name.to_string(), route.clone());
    route
}
