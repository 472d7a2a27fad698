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
    pool_series(&snapshot, &mut text);
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

/// Each pool's member count, and for pools with DNS entries their lookups, errors and the
/// time their members last changed.
fn pool_series(snapshot: &memfleet_client::Topology, text: &mut String) {
    let _ = writeln!(
        text,
        "# HELP memfleet_router_pool_members servers in the pool's ring (written and found in DNS)"
    );
    let _ = writeln!(text, "# TYPE memfleet_router_pool_members gauge");
    for pool in snapshot.pools() {
        let _ = writeln!(
            text,
            "memfleet_router_pool_members{{pool=\"{}\"}} {}",
            pool.name(),
            pool.members().len()
        );
    }
    let dns: Vec<_> = snapshot
        .pools()
        .iter()
        .filter_map(|p| Some((p.name(), p.dns_summary()?)))
        .collect();
    if dns.is_empty() {
        return;
    }
    let series: [(&str, &str, &str); 5] = [
        (
            "dns_members",
            "gauge",
            "servers of the pool's ring found through its DNS entries",
        ),
        (
            "dns_lookups_total",
            "counter",
            "DNS questions asked for the pool's entries (SRV targets' addresses included)",
        ),
        (
            "dns_errors_total",
            "counter",
            "DNS rounds that failed, timed out or found nothing (the last good members were kept), and SRV targets without an address",
        ),
        (
            "dns_failing",
            "gauge",
            "DNS entries of the pool whose last lookup failed",
        ),
        (
            "dns_last_change_seconds",
            "gauge",
            "when the pool's DNS members last changed (Unix time; 0: never found)",
        ),
    ];
    for (name, kind, help) in series {
        let _ = writeln!(text, "# HELP memfleet_router_{name} {help}");
        let _ = writeln!(text, "# TYPE memfleet_router_{name} {kind}");
        for (pool, dns) in &dns {
            let v = match name {
                "dns_members" => dns.members as u64,
                "dns_lookups_total" => dns.lookups,
                "dns_errors_total" => dns.errors,
                "dns_failing" => dns.failing as u64,
                _ => dns.last_change_unix(),
            };
            let _ = writeln!(text, "memfleet_router_{name}{{pool=\"{pool}\"}} {v}");
        }
    }
}
