//! What `bench invalidation` reads from the `memfleet invalidator` it started: one
//! `GET /metrics` (Prometheus text) turned into the counters, the commit-to-delivered
//! percentiles (the summary, whose quantile 1 is the maximum) and a latency CDF (the
//! histogram's buckets, interpolated within each). Not here: running the experiment
//! (`invalidation`).

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use anyhow::{bail, Context, Result};

use super::report::{cdf_percentiles, CdfPoint};

const SUMMARY: &str = "memfleet_invalidator_commit_to_delivered_seconds";
const HISTOGRAM: &str = "memfleet_invalidator_delivery_latency_seconds";

/// One scrape: every sample by its series (`name` or `name{labels}`).
pub struct Scrape {
    samples: HashMap<String, f64>,
}

impl Scrape {
    /// `GET /metrics` from `addr`.
    pub fn fetch(addr: SocketAddr) -> Result<Scrape> {
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
            .with_context(|| format!("connecting to the invalidator's metrics at {addr}"))?;
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")?;
        let mut reply = String::new();
        s.read_to_string(&mut reply)?;
        let Some((head, body)) = reply.split_once("\r\n\r\n") else {
            bail!("no HTTP reply from the invalidator's metrics at {addr}");
        };
        if !head.starts_with("HTTP/1.1 200") {
            bail!("the invalidator's metrics answered {head:?}");
        }
        Ok(Scrape::parse(body))
    }

    /// The samples of a Prometheus text page (comments skipped).
    pub fn parse(text: &str) -> Scrape {
        let samples = text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.rsplit_once(' '))
            .filter_map(|(series, value)| Some((series.to_string(), value.parse().ok()?)))
            .collect();
        Scrape { samples }
    }

    /// `memfleet_invalidator_NAME`, 0 when absent.
    pub fn counter(&self, name: &str) -> u64 {
        self.samples
            .get(&format!("memfleet_invalidator_{name}"))
            .map_or(0, |v| *v as u64)
    }

    /// The summary's `quantile` of the commit-to-delivered latency, µs.
    pub fn quantile_us(&self, quantile: &str) -> u64 {
        self.samples
            .get(&format!("{SUMMARY}{{quantile=\"{quantile}\"}}"))
            .map_or(0, |s| (s * 1e6).round() as u64)
    }

    /// `quantile` of the summary `memfleet_invalidator_NAME` (in seconds), µs.
    pub fn summary_us(&self, name: &str, quantile: &str) -> u64 {
        self.samples
            .get(&format!(
                "memfleet_invalidator_{name}{{quantile=\"{quantile}\"}}"
            ))
            .map_or(0, |s| (s * 1e6).round() as u64)
    }

    /// The gauge `memfleet_invalidator_NAME`, 0 when absent.
    pub fn gauge(&self, name: &str) -> f64 {
        self.samples
            .get(&format!("memfleet_invalidator_{name}"))
            .copied()
            .unwrap_or(0.0)
    }

    /// The histogram's (upper bound µs, cumulative count) buckets, `+Inf` left out, in order.
    fn buckets(&self) -> Vec<(f64, f64)> {
        let prefix = format!("{HISTOGRAM}_bucket{{le=\"");
        let mut b: Vec<(f64, f64)> = self
            .samples
            .iter()
            .filter_map(|(series, count)| {
                let le = series.strip_prefix(&prefix)?.strip_suffix("\"}")?;
                Some((le.parse::<f64>().ok()? * 1e6, *count))
            })
            .collect();
        b.sort_by(|x, y| x.0.total_cmp(&y.0));
        b
    }

    /// Latencies delivered within `us` (a bucket bound), as a share of all.
    pub fn share_within(&self, us: f64) -> f64 {
        let total = self
            .samples
            .get(&format!("{HISTOGRAM}_count"))
            .copied()
            .unwrap_or(0.0);
        let within = self
            .buckets()
            .into_iter()
            .find(|(le, _)| (*le - us).abs() < 0.5)
            .map_or(0.0, |(_, c)| c);
        within / total.max(1.0)
    }

    /// The latency CDF at [`cdf_percentiles`], linear within each bucket and never above the
    /// maximum; empty when nothing was delivered.
    pub fn latency_cdf(&self) -> Vec<CdfPoint> {
        let buckets = self.buckets();
        let total = self
            .samples
            .get(&format!("{HISTOGRAM}_count"))
            .copied()
            .unwrap_or(0.0);
        if total == 0.0 {
            return Vec::new();
        }
        let max = self.quantile_us("1") as f64;
        cdf_percentiles()
            .into_iter()
            .map(|percentile| {
                let want = percentile / 100.0 * total;
                let (mut lo, mut below) = (0.0, 0.0);
                let mut latency = max;
                for &(le, count) in &buckets {
                    if count >= want && count > below {
                        latency = lo + (le - lo) * ((want - below) / (count - below)).max(0.0);
                        break;
                    }
                    (lo, below) = (le, count);
                }
                CdfPoint {
                    percentile,
                    latency_us: latency.min(max),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_quantiles_and_a_cdf_from_the_buckets() {
        let text = "# HELP x\n\
            memfleet_invalidator_keys_total 40\n\
            memfleet_invalidator_commit_to_delivered_seconds{quantile=\"0.5\"} 0.0015\n\
            memfleet_invalidator_commit_to_delivered_seconds{quantile=\"1\"} 2.5\n\
            memfleet_invalidator_delivery_latency_seconds_bucket{le=\"0.001\"} 0\n\
            memfleet_invalidator_delivery_latency_seconds_bucket{le=\"0.002\"} 2\n\
            memfleet_invalidator_delivery_latency_seconds_bucket{le=\"1\"} 3\n\
            memfleet_invalidator_delivery_latency_seconds_bucket{le=\"10\"} 4\n\
            memfleet_invalidator_delivery_latency_seconds_bucket{le=\"+Inf\"} 4\n\
            memfleet_invalidator_delivery_latency_seconds_count 4\n";
        let s = Scrape::parse(text);
        assert_eq!(s.counter("keys_total"), 40);
        assert_eq!(s.counter("retries_total"), 0);
        assert_eq!(s.quantile_us("0.5"), 1500);
        assert_eq!(s.quantile_us("1"), 2_500_000);
        assert_eq!(s.share_within(1e6), 0.75);
        let cdf = s.latency_cdf();
        let at = |p: f64| cdf.iter().find(|c| c.percentile == p).unwrap().latency_us;
        assert_eq!(at(0.0), 1000.0);
        assert_eq!(at(25.0), 1500.0);
        assert_eq!(at(50.0), 2000.0);
        // In the last bucket, but never above the maximum.
        assert_eq!(at(100.0), 2_500_000.0);
        assert!(cdf.windows(2).all(|w| w[0].latency_us <= w[1].latency_us));
    }
}
