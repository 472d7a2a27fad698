//! Prometheus metrics at `metrics_listen` (`GET /metrics`): what was invalidated, how long
//! from commit to delivery, and every destination's spool (depth, oldest waiting delete,
//! deliveries), with the wire format from `memfleet_protocol::http`.

use crate::Counters;
use memfleet_protocol::http;
use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Serves `/metrics` until aborted.
pub async fn serve(listener: TcpListener, counters: Arc<Counters>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let counters = counters.clone();
        tokio::spawn(async move {
            let _ = tokio::time::timeout(Duration::from_secs(10), answer(stream, &counters)).await;
        });
    }
}

async fn answer(mut stream: TcpStream, counters: &Counters) -> std::io::Result<()> {
    let mut request = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    let reply = loop {
        match http::head(&request) {
            http::Head::Incomplete => {}
            http::Head::Refused => return Ok(()),
            http::Head::Request { method, target } => {
                break http::answer(method, target, "/metrics", || render(counters))
            }
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 || request.len() > 64 * 1024 {
            return Ok(());
        }
        request.extend_from_slice(&chunk[..n]);
    };
    stream.write_all(&reply).await?;
    stream.shutdown().await
}

/// The Prometheus text of `counters`.
pub fn render(counters: &Counters) -> String {
    let mut text = String::new();
    let plain: [(&str, &str, &str, u64); 8] = [
        (
            "transactions_total",
            "counter",
            "committed transactions that carried invalidations",
            counters.transactions.load(Ordering::Relaxed),
        ),
        (
            "keys_total",
            "counter",
            "keys deleted in every destination",
            counters.keys.load(Ordering::Relaxed),
        ),
        (
            "batches_total",
            "counter",
            "batches sent",
            counters.batches.load(Ordering::Relaxed),
        ),
        (
            "retries_total",
            "counter",
            "batches sent again because a destination could neither take nor spool them",
            counters.retries.load(Ordering::Relaxed),
        ),
        (
            "spooled_batches_total",
            "counter",
            "batches some of whose deletes waited in a spool",
            counters.spooled_batches.load(Ordering::Relaxed),
        ),
        (
            "undelivered_batches",
            "gauge",
            "acknowledged batches whose spooled deletes are not delivered yet",
            counters.undelivered_batches.load(Ordering::Relaxed),
        ),
        (
            "acked_position",
            "gauge",
            "the last commit log position acknowledged",
            counters.acked.load(Ordering::Relaxed),
        ),
        (
            "check_failures_total",
            "counter",
            "sampled keys some destination still held after their delete",
            counters.check_failures.load(Ordering::Relaxed),
        ),
    ];
    for (name, kind, help, value) in plain {
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
