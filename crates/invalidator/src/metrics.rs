//! Prometheus metrics at `metrics_listen` (`GET /metrics`): what was invalidated, how long
//! from commit to delivery (a summary whose quantile 1 is the maximum, and a histogram of
//! ten buckets a decade from 100 µs to 100 s, which dashboards aggregate and
//! `memfleet bench invalidation` reads its CDF from), and every destination's
//! spool (depth, oldest waiting delete, deliveries), served by
//! `memfleet_client::metrics_http`.

use crate::Counters;
use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::net::TcpListener;

/// Serves `/metrics` until aborted.
pub async fn serve(listener: TcpListener, counters: Arc<Counters>) {
    memfleet_client::metrics_http::serve(listener, move || render(&counters)).await;
}

/// The series read from one counter each, in the order [`render`] reads them: name (after
/// `memfleet_invalidator_`), Prometheus type, help.
const PLAIN: [[&str; 3]; 10] = [
    [
        "transactions_total",
        "counter",
        "committed transactions that carried invalidations",
    ],
    ["keys_total", "counter", "keys deleted in every destination"],
    ["batches_total", "counter", "batches sent"],
    [
        "retries_total",
        "counter",
        "batches sent again because a destination could neither take nor spool them",
    ],
    [
        "spooled_batches_total",
        "counter",
        "batches some of whose deletes waited in a spool",
    ],
    [
        "undelivered_batches",
        "gauge",
        "acknowledged batches whose spooled deletes are not delivered yet",
    ],
    [
        "acked_position",
        "gauge",
        "the last commit log position acknowledged",
    ],
    [
        "checked_total",
        "counter",
        "sampled keys looked up in every destination after their delete",
    ],
    [
        "check_failures_total",
        "counter",
        "sampled keys some destination still held after their delete",
    ],
    [
        "remote_markers_cleared_total",
        "counter",
        "deleted keys that were remote markers (marker_prefix, paper section 5)",
    ],
];

/// The Prometheus text of `counters`.
pub fn render(counters: &Counters) -> String {
    let mut text = String::new();
    let c = counters;
    let values = [
        &c.transactions,
        &c.keys,
        &c.batches,
        &c.retries,
        &c.spooled_batches,
        &c.undelivered_batches,
        &c.acked,
        &c.checked,
        &c.check_failures,
        &c.markers_cleared,
    ];
    for ([name, kind, help], value) in PLAIN.iter().zip(values) {
        let value = value.load(Ordering::Relaxed);
        let _ = writeln!(text, "# HELP memfleet_invalidator_{name} {help}");
        let _ = writeln!(text, "# TYPE memfleet_invalidator_{name} {kind}");
        let _ = writeln!(text, "memfleet_invalidator_{name} {value}");
    }
    {
        let h = counters
            .latency_us
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        summary(
            &mut text,
            "commit_to_delivered_seconds",
            "from a transaction's commit to its last delete's delivery (spool replays included)",
            &h,
        );
        let name = "memfleet_invalidator_delivery_latency_seconds";
        let _ = writeln!(
            text,
            "# HELP {name} commit-to-delivered latency (as above) in buckets"
        );
        let _ = writeln!(text, "# TYPE {name} histogram");
        for le in bucket_bounds_us() {
            let count = h.count_between(0, le);
            let _ = writeln!(text, "{name}_bucket{{le=\"{}\"}} {count}", le as f64 / 1e6);
        }
        let _ = writeln!(text, "{name}_bucket{{le=\"+Inf\"}} {}", h.len());
        let sum = h.mean() * h.len() as f64 / 1e6;
        let _ = writeln!(text, "{name}_sum {sum}");
        let _ = writeln!(text, "{name}_count {}", h.len());
    }
    {
        let h = c.decoded_us.lock().unwrap_or_else(|e| e.into_inner());
        summary(
            &mut text,
            "commit_to_decoded_seconds",
            "from a transaction's commit to its decoding here (from a standby: after its replay)",
            &h,
        );
    }
    let lag = c
        .replication
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
        .unwrap_or_default();
    for (name, kind, help, value) in [
        (
            "reading_standby",
            "gauge",
            "1 when the database read is a standby (a replica region's)",
            if lag.standby { 1.0 } else { 0.0 },
        ),
        (
            "replication_lag_bytes",
            "gauge",
            "WAL the standby has not replayed (against the primary's position when [database.primary] is given)",
            lag.bytes as f64,
        ),
        (
            "replication_lag_seconds",
            "gauge",
            "how far the standby's replay is behind (0 when it has replayed everything)",
            lag.seconds,
        ),
    ] {
        let _ = writeln!(text, "# HELP memfleet_invalidator_{name} {help}");
        let _ = writeln!(text, "# TYPE memfleet_invalidator_{name} {kind}");
        let _ = writeln!(text, "memfleet_invalidator_{name} {value}");
    }
    let spool = counters.spool.lock().unwrap_or_else(|e| e.into_inner());
    memfleet_client::spool::prometheus("memfleet_invalidator", &spool, &mut text);
    let destinations = c
        .destinations
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    if let Some(topology) = destinations {
        topology.prometheus_pools("memfleet_invalidator", &mut text);
    }
    text
}

/// A latency histogram (µs) as the summary `memfleet_invalidator_NAME` in seconds: p50,
/// p99, p99.9 and the maximum (quantile 1).
fn summary(text: &mut String, name: &str, help: &str, h: &hdrhistogram::Histogram<u64>) {
    let name = format!("memfleet_invalidator_{name}");
    let _ = writeln!(text, "# HELP {name} {help}");
    let _ = writeln!(text, "# TYPE {name} summary");
    for q in [0.5, 0.99, 0.999, 1.0] {
        let v = h.value_at_quantile(q) as f64 / 1e6;
        let _ = writeln!(text, "{name}{{quantile=\"{q}\"}} {v}");
    }
    let _ = writeln!(text, "{name}_count {}", h.len());
}

/// The histogram's upper bounds, µs: ten a decade (1, 1.25, 1.6, 2, 2.5, 3.2, 4, 5, 6.3, 8
/// times a power of ten) from 100 µs to 100 s.
pub fn bucket_bounds_us() -> Vec<u64> {
    const STEPS: [u64; 10] = [100, 125, 160, 200, 250, 320, 400, 500, 630, 800];
    let mut bounds = Vec::new();
    let mut decade = 1u64;
    while decade <= 1_000_000 {
        bounds.extend(STEPS.iter().map(|s| s * decade));
        decade *= 10;
    }
    bounds.push(100_000_000);
    bounds
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_series_reads_its_own_counter() {
        let counters = Counters::default();
        let fields = [
            &counters.transactions,
            &counters.keys,
            &counters.batches,
            &counters.retries,
            &counters.spooled_batches,
            &counters.undelivered_batches,
            &counters.acked,
            &counters.checked,
            &counters.check_failures,
            &counters.markers_cleared,
        ];
        for (i, field) in fields.into_iter().enumerate() {
            field.store(100 + i as u64, Ordering::Relaxed);
        }
        let text = render(&counters);
        for (series, value) in [
            ("transactions_total counter", 100),
            ("keys_total counter", 101),
            ("batches_total counter", 102),
            ("retries_total counter", 103),
            ("spooled_batches_total counter", 104),
            ("undelivered_batches gauge", 105),
            ("acked_position gauge", 106),
            ("checked_total counter", 107),
            ("check_failures_total counter", 108),
            ("remote_markers_cleared_total counter", 109),
        ] {
            let (name, kind) = series.split_once(' ').unwrap();
            let name = format!("memfleet_invalidator_{name}");
            assert!(
                text.contains(&format!("# TYPE {name} {kind}\n{name} {value}\n")),
                "{name}"
            );
        }
        assert!(text.contains(
            "# HELP memfleet_invalidator_retries_total batches sent again because a destination \
             could neither take nor spool them\n"
        ));
    }

    #[test]
    fn latency_is_a_summary_with_its_maximum_and_a_cumulative_histogram() {
        let counters = Counters::default();
        counters.checked.store(7, Ordering::Relaxed);
        {
            let mut h = counters.latency_us.lock().unwrap();
            for us in [150, 900, 2_000_000] {
                h.record(us).unwrap();
            }
        }
        let text = render(&counters);
        let value = |prefix: &str| -> f64 {
            text.lines()
                .find_map(|l| l.strip_prefix(prefix))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or_else(|| panic!("no {prefix} in:\n{text}"))
        };
        assert_eq!(value("memfleet_invalidator_checked_total "), 7.0);
        let max = value("memfleet_invalidator_commit_to_delivered_seconds{quantile=\"1\"} ");
        assert!((max - 2.0).abs() < 0.01, "{max}");
        let bucket = |le: &str| {
            value(&format!(
                "memfleet_invalidator_delivery_latency_seconds_bucket{{le=\"{le}\"}} "
            ))
        };
        assert_eq!(bucket("0.0001"), 0.0);
        assert_eq!(bucket("0.00016"), 1.0);
        assert_eq!(bucket("0.001"), 2.0);
        assert_eq!(bucket("1"), 2.0);
        assert_eq!(bucket("2.5"), 3.0);
        assert_eq!(bucket("+Inf"), 3.0);
        assert_eq!(
            value("memfleet_invalidator_delivery_latency_seconds_count "),
            3.0
        );
    }
}
