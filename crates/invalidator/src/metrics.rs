//! Prometheus metrics at `metrics_listen` (`GET /metrics`): what was invalidated, how long
//! from commit to delivery, and every destination's spool (depth, oldest waiting delete,
//! deliveries), served by `memfleet_client::metrics_http`.

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
const PLAIN: [[&str; 3]; 8] = [
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
        "check_failures_total",
        "counter",
        "sampled keys some destination still held after their delete",
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
        &c.check_failures,
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
        let name = "memfleet_invalidator_commit_to_delivered_seconds";
        let _ = writeln!(
            text,
            "# HELP {name} from a transaction's commit to its last delete's delivery (spool replays included)"
        );
        let _ = writeln!(text, "# TYPE {name} summary");
        for q in [0.5, 0.99, 0.999] {
            let v = h.value_at_quantile(q) as f64 / 1e6;
            let _ = writeln!(text, "{name}{{quantile=\"{q}\"}} {v}");
        }
        let _ = writeln!(text, "{name}_count {}", h.len());
    }
    let spool = counters.spool.lock().unwrap_or_else(|e| e.into_inner());
    memfleet_client::spool::prometheus("memfleet_invalidator", &spool, &mut text);
    text
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
            &counters.check_failures,
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
            ("check_failures_total counter", 107),
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
}
