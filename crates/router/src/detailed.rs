//! The commands each pool sent and each server's latencies (`memfleet_client::conn_stats`,
//! measured by the server connections), and each listener route's latencies
//! (`route_latency.rs`): as Prometheus histograms and counters for `/metrics`, and as
//! `stats detailed` lines.

use memfleet_client::conn_stats::{Measured, BUCKETS_US, COMMANDS};
use memfleet_client::{Backend, Pool};
use std::fmt::Write as _;
use std::sync::Arc;

/// Each pool's servers' figures: (pool, [(server, figures)]).
fn figures(pools: &[Arc<Pool>]) -> Vec<(String, Vec<(String, Measured)>)> {
    pools
        .iter()
        .map(|p| {
            let servers = p
                .members()
                .iter()
                .map(|b| (b.name().to_string(), b.measured()))
                .collect();
            (p.name().to_string(), servers)
        })
        .collect()
}

/// Every server once (a server in two pools is one `Backend`): the router's total.
fn total(pools: &[Arc<Pool>]) -> Measured {
    let mut seen: Vec<*const Backend> = Vec::new();
    let mut total = Measured::default();
    for p in pools {
        for b in p.members() {
            if !seen.contains(&Arc::as_ptr(b)) {
                seen.push(Arc::as_ptr(b));
                total.add(&b.measured());
            }
        }
    }
    total
}

/// One Prometheus histogram: cumulative `_bucket`s up to `+Inf`, `_sum` (seconds), `_count`.
fn histogram(text: &mut String, name: &str, labels: &str, m: &Measured) {
    let mut cumulative = 0;
    for (i, n) in m.buckets.iter().enumerate() {
        cumulative += n;
        let le = BUCKETS_US
            .get(i)
            .map_or("+Inf".to_string(), |us| format!("{}", *us as f64 / 1e6));
        let _ = writeln!(text, "{name}_bucket{{{labels},le=\"{le}\"}} {cumulative}");
    }
    let _ = writeln!(text, "{name}_sum{{{labels}}} {}", m.sum_us as f64 / 1e6);
    let _ = writeln!(text, "{name}_count{{{labels}}} {}", m.count());
}

/// `latency_count`, `latency_mean_us`, `latency_p50_us`, `latency_p99_us` of `m`, each a
/// `STAT {at}:...` line.
fn latency_lines(out: &mut String, at: &str, m: &Measured) {
    let count = m.count();
    let mean = m.sum_us.checked_div(count).unwrap_or(0);
    let bound = |q| match m.quantile_bound_us(q) {
        None => "0".to_string(),
        Some(u64::MAX) => "inf".to_string(),
        Some(us) => us.to_string(),
    };
    let _ = write!(out, "STAT {at}:latency_count {count}\r\n");
    let _ = write!(out, "STAT {at}:latency_mean_us {mean}\r\n");
    let _ = write!(out, "STAT {at}:latency_p50_us {}\r\n", bound(0.5));
    let _ = write!(out, "STAT {at}:latency_p99_us {}\r\n", bound(0.99));
}

/// `/metrics`: `memfleet_router_server_latency_seconds` (a histogram per pool and server),
/// `memfleet_router_pool_commands_total` and `memfleet_router_commands_total`.
pub(crate) fn prometheus(pools: &[Arc<Pool>], text: &mut String) {
    let figures = figures(pools);
    let name = "memfleet_router_server_latency_seconds";
    let _ = writeln!(
        text,
        "# HELP {name} time from writing a request to its server to reading its reply"
    );
    let _ = writeln!(text, "# TYPE {name} histogram");
    for (pool, servers) in &figures {
        for (server, m) in servers {
            histogram(
                text,
                name,
                &format!("pool=\"{pool}\",server=\"{server}\""),
                m,
            );
        }
    }
    let name = "memfleet_router_route_latency_seconds";
    let _ = writeln!(
        text,
        "# HELP {name} time from reading a client's request to writing its reply, per listener's route"
    );
    let _ = writeln!(text, "# TYPE {name} histogram");
    for (route, m) in crate::route_latency::snapshot() {
        histogram(text, name, &format!("route=\"{route}\""), &m);
    }
    let name = "memfleet_router_pool_commands_total";
    let _ = writeln!(
        text,
        "# HELP {name} requests sent to the pool's servers, by command"
    );
    let _ = writeln!(text, "# TYPE {name} counter");
    for (pool, servers) in &figures {
        let mut sum = Measured::default();
        for (_, m) in servers {
            sum.add(m);
        }
        for (command, n) in COMMANDS.iter().zip(sum.commands) {
            let _ = writeln!(text, "{name}{{pool=\"{pool}\",command=\"{command}\"}} {n}");
        }
    }
    let name = "memfleet_router_commands_total";
    let _ = writeln!(
        text,
        "# HELP {name} requests sent to all servers, by command"
    );
    let _ = writeln!(text, "# TYPE {name} counter");
    for (command, n) in COMMANDS.iter().zip(total(pools).commands) {
        let _ = writeln!(text, "{name}{{command=\"{command}\"}} {n}");
    }
}

/// `stats detailed`: `cmd_<command>` in total and `pool:<pool>:cmd_<command>` (the commands
/// sent), each server's and each listener route's (`route:<name>:...`) `latency_count`,
/// `latency_mean_us`, `latency_p50_us`, `latency_p99_us` (the upper bound of the bucket
/// holding the quantile, `inf` past the last), then `END`.
pub(crate) fn stat_lines(pools: &[Arc<Pool>]) -> Vec<u8> {
    let mut out = String::new();
    for (command, n) in COMMANDS.iter().zip(total(pools).commands) {
        let _ = write!(out, "STAT cmd_{command} {n}\r\n");
    }
    for (pool, servers) in figures(pools) {
        let mut sum = Measured::default();
        for (_, m) in &servers {
            sum.add(m);
        }
        for (command, n) in COMMANDS.iter().zip(sum.commands) {
            let _ = write!(out, "STAT pool:{pool}:cmd_{command} {n}\r\n");
        }
        for (server, m) in servers {
            latency_lines(&mut out, &format!("pool:{pool}:server:{server}"), &m);
        }
    }
    for (route, m) in crate::route_latency::snapshot() {
        latency_lines(&mut out, &format!("route:{route}"), &m);
    }
    out.push_str("END\r\n");
    out.into_bytes()
}
