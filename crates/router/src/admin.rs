//! The router's admin address: Prometheus metrics per pool and server (`GET /metrics`,
//! served by `memfleet_client::metrics_http`).

use crate::reloadable::ServedTopology;
use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use tokio::net::TcpListener;

/// Serves `/metrics` for `pools` until aborted.
pub async fn serve(listener: TcpListener, pools: ServedTopology) {
    memfleet_client::metrics_http::serve(listener, move || metrics(&pools)).await;
}

/// The `max_outstanding` series of the servers of pools that set it.
fn outstanding(snapshot: &memfleet_client::Topology, text: &mut String) {
    let series: [(&str, &str, &str); 3] = [
        (
            "outstanding",
            "gauge",
            "requests in flight to the server or waiting under max_outstanding",
        ),
        (
            "outstanding_waited_total",
            "counter",
            "requests that waited for a place under max_outstanding",
        ),
        (
            "outstanding_refused_total",
            "counter",
            "requests refused: max_outstanding reached and its queue full",
        ),
    ];
    for (i, (name, kind, help)) in series.into_iter().enumerate() {
        let mut head = false;
        for pool in snapshot.pools() {
            for b in pool.members() {
                let Some(counts) = b.outstanding() else {
                    continue;
                };
                if !head {
                    let _ = writeln!(text, "# HELP memfleet_router_server_{name} {help}");
                    let _ = writeln!(text, "# TYPE memfleet_router_server_{name} {kind}");
                    head = true;
                }
                let v = [counts.0, counts.1, counts.2][i];
                let _ = writeln!(
                    text,
                    "memfleet_router_server_{name}{{pool=\"{}\",server=\"{}\"}} {v}",
                    pool.name(),
                    b.name()
                );
            }
        }
    }
}

/// The Prometheus text of every pool's servers, the routes' counters and the spool.
fn metrics(served: &ServedTopology) -> String {
    let snapshot = served.load();
    let mut text = String::new();
    let series: [(&str, &str, &str); 4] = [
        ("requests_total", "counter", "requests sent to the server"),
        (
            "errors_total",
            "counter",
            "requests that failed: timeout, connection, marked down",
        ),
        ("down", "gauge", "1 while the server is marked down"),
        (
            "knockouts_total",
            "counter",
            "times the server was marked down",
        ),
    ];
    for (name, kind, help) in series {
        let _ = writeln!(text, "# HELP memfleet_router_server_{name} {help}");
        let _ = writeln!(text, "# TYPE memfleet_router_server_{name} {kind}");
        for pool in snapshot.pools() {
            for b in pool.members() {
                let h = b.health();
                let v = match name {
                    "requests_total" => h.requests.load(Ordering::Relaxed),
                    "errors_total" => h.errors.load(Ordering::Relaxed),
                    "down" => u64::from(h.down.load(Ordering::Relaxed)),
                    _ => h.knockouts.load(Ordering::Relaxed),
                };
                let _ = writeln!(
                    text,
                    "memfleet_router_server_{name}{{pool=\"{}\",server=\"{}\"}} {v}",
                    pool.name(),
                    b.name()
                );
            }
        }
    }
    outstanding(&snapshot, &mut text);
    crate::detailed::prometheus(snapshot.pools(), &mut text);
    snapshot.prometheus_pools("memfleet_router", &mut text);
    for (name, help) in memfleet_client::route::COUNTERS {
        let counters = snapshot.route_counters();
        let series: Vec<_> = counters
            .iter()
            .filter(|(_, c)| c.shown().iter().any(|(n, _)| *n == name))
            .collect();
        if series.is_empty() {
            continue;
        }
        let _ = writeln!(text, "# HELP memfleet_router_route_{name} {help}");
        let _ = writeln!(text, "# TYPE memfleet_router_route_{name} counter");
        for (route, counters) in series {
            let v = counters.get(name);
            let _ = writeln!(
                text,
                "memfleet_router_route_{name}{{route=\"{route}\"}} {v}"
            );
        }
    }
    memfleet_client::spool::prometheus("memfleet_router", &snapshot.spool_stats(), &mut text);
    text
}
