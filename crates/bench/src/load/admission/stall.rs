//! The stall part of `memfleet bench admission`: four `memfleet server`s in one pool behind
//! a `memfleet router` (`server_failure_limit`, `timeout_ms`, `server_retry_timeout_ms`
//! small), closed-loop clients getting and setting many keys through it; one server is hung
//! (SIGSTOP) so that the router marks it down, then the router itself is stopped (SIGSTOP)
//! for the stall and continued: the requests it had in flight find their timeouts passed.
//! Run with `max_down_fraction` = 0.5 and = 1 (no cap). The router's `stats` are read every
//! 100 ms: which servers are marked down, its knockouts and `down_refused`. Not here:
//! printing and the JSON (`report`).

use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde::Serialize;

use super::fleet::{self, RouterProcess};
use super::load::{self, LoadSpec, Windows};
use crate::load::client::prefill;
use crate::load::server_stats::StatsConn;
use crate::load::workload::Workload;

/// Servers in the pool; the last one is hung.
pub(super) const SERVERS: usize = 4;

/// The `max_down_fraction`s of the stall part: the cap, and none.
pub(super) const CAPS: [f64; 2] = [0.5, 1.0];

/// What the stall part runs.
#[derive(Clone, Debug, Serialize)]
pub(super) struct StallSettings {
    pub conns: usize,
    pub depth: usize,
    pub keys: u64,
    pub value_size: usize,
    pub timeout_ms: u64,
    pub server_failure_limit: u32,
    pub server_retry_timeout_ms: u64,
    /// When the server is hung, the router stalled, for how long, and the run's end, s.
    pub hang_at_s: f64,
    pub stall_at_s: f64,
    pub stall_s: f64,
    pub duration_s: f64,
    pub router_threads: usize,
    pub seed: u64,
}

/// One reading of the router's `stats`.
#[derive(Clone, Debug, Serialize)]
pub(super) struct Sample {
    /// Seconds from the start, when the reply came.
    pub at_s: f64,
    /// `pool:stall:server:<addr>:down` of each server, in the configuration's order.
    pub down: Vec<bool>,
    /// `...:knockouts` of each server.
    pub knockouts: Vec<u64>,
    /// `pool:stall:down_refused`.
    pub down_refused: u64,
}

/// One run.
#[derive(Clone, Debug, Serialize)]
pub(super) struct StallRun {
    pub max_down_fraction: f64,
    pub samples: Vec<Sample>,
    /// When the router was stopped and continued, s from the start.
    pub stopped_at_s: f64,
    pub continued_at_s: f64,
    /// Each second's replies, `SERVER_ERROR`s and misses.
    pub replies_per_s: Vec<u64>,
    pub errors_per_s: Vec<u64>,
    pub misses_per_s: Vec<u64>,
}

impl StallRun {
    /// Most servers marked down at once (in one reading).
    pub(super) fn max_down(&self) -> usize {
        self.samples
            .iter()
            .map(|s| s.down.iter().filter(|&&d| d).count())
            .max()
            .unwrap_or(0)
    }

    /// Most healthy servers (not the hung one) marked down at once.
    pub(super) fn max_healthy_down(&self) -> usize {
        self.samples
            .iter()
            .map(|s| s.down[..SERVERS - 1].iter().filter(|&&d| d).count())
            .max()
            .unwrap_or(0)
    }

    /// Times a healthy server was marked down in the run.
    pub(super) fn healthy_knockouts(&self) -> u64 {
        self.samples
            .last()
            .map_or(0, |s| s.knockouts[..SERVERS - 1].iter().sum())
    }

    /// `down_refused` at the end.
    pub(super) fn down_refused(&self) -> u64 {
        self.samples.last().map_or(0, |s| s.down_refused)
    }

    /// Seconds from the start until the hung server was first read as down.
    pub(super) fn hung_down_at_s(&self) -> Option<f64> {
        self.samples
            .iter()
            .find(|s| s.down[SERVERS - 1])
            .map(|s| s.at_s)
    }

    /// Seconds after the router was continued until every healthy server was read as up
    /// again (0 when none was down after it; `None` when some still were at the end).
    pub(super) fn healthy_up_after_s(&self) -> Option<f64> {
        let after: Vec<&Sample> = self
            .samples
            .iter()
            .filter(|s| s.at_s >= self.continued_at_s)
            .collect();
        let last_down = after
            .iter()
            .rposition(|s| s.down[..SERVERS - 1].iter().any(|&d| d));
        match last_down {
            None => Some(0.0),
            Some(i) => after.get(i + 1).map(|s| s.at_s - self.continued_at_s),
        }
    }

    /// Client-visible failures (`SERVER_ERROR`s and misses) per second.
    pub(super) fn failures_per_s(&self) -> Vec<u64> {
        self.errors_per_s
            .iter()
            .zip(&self.misses_per_s)
            .map(|(e, m)| e + m)
            .collect()
    }
}

/// One run with `max_down_fraction`; `bin` is the memfleet executable.
pub(super) async fn run(bin: &str, s: &StallSettings, max_down_fraction: f64) -> Result<StallRun> {
    let mut servers = fleet::servers(bin, SERVERS)?;
    let listen = fleet::free_addr()?;
    let config = fleet::pool_section(
        "stall",
        listen,
        &servers,
        &[
            format!("timeout_ms = {}", s.timeout_ms),
            format!("server_failure_limit = {}", s.server_failure_limit),
            format!("server_retry_timeout_ms = {}", s.server_retry_timeout_ms),
            format!("max_down_fraction = {max_down_fraction:?}"),
        ],
    );
    let router = RouterProcess::start(bin, s.router_threads, &config, &[listen])?;
    let names: Vec<String> = servers.iter().map(|s| s.addr.to_string()).collect();
    println!(
        "[stall, max_down_fraction = {max_down_fraction}] router pid {} (-t {}) on {listen}; \
         servers {names:?}, the last one hung at {:.1} s",
        router.spawned.pid(),
        s.router_threads,
        s.hang_at_s
    );
    let w = Rc::new(Workload::new(s.keys, 0.9, s.value_size, None).map_err(anyhow::Error::msg)?);
    prefill(listen, &w, 64).await?;

    let start = Instant::now();
    let at = |secs: f64| start + Duration::from_secs_f64(secs);
    let deadline = at(s.duration_s);
    let windows = Rc::new(RefCell::new(Windows::new(start, start)));
    let spec = LoadSpec {
        addr: listen,
        conns: s.conns,
        depth: s.depth,
        pace: None,
        seed: s.seed,
    };
    let clients = {
        let (w, windows) = (w.clone(), windows.clone());
        tokio::task::spawn_local(async move { load::run(&spec, &w, deadline, &windows).await })
    };
    let sampler = {
        let names = names.clone();
        let mut conn = StatsConn::connect(listen).await?;
        tokio::task::spawn_local(async move {
            let mut samples = Vec::new();
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            while Instant::now() < deadline {
                tick.tick().await;
                let st = conn.get("").await?;
                let server = |name: &str, field: &str| {
                    st.int_or_zero(&format!("pool:stall:server:{name}:{field}"))
                };
                samples.push(Sample {
                    at_s: start.elapsed().as_secs_f64(),
                    down: names.iter().map(|n| server(n, "down") == 1).collect(),
                    knockouts: names.iter().map(|n| server(n, "knockouts")).collect(),
                    down_refused: st.int_or_zero("pool:stall:down_refused"),
                });
            }
            anyhow::Ok(samples)
        })
    };
    tokio::time::sleep_until(at(s.hang_at_s).into()).await;
    servers[SERVERS - 1].signal(libc::SIGSTOP);
    tokio::time::sleep_until(at(s.stall_at_s).into()).await;
    router.spawned.signal(libc::SIGSTOP);
    let stopped_at_s = start.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs_f64(s.stall_s)).await;
    router.spawned.signal(libc::SIGCONT);
    let continued_at_s = start.elapsed().as_secs_f64();
    let loaded = clients.await.context("the clients");
    let samples = sampler.await.context("the sampler");
    servers[SERVERS - 1].signal(libc::SIGCONT);
    loaded??;
    let samples = samples??;
    for s in &mut servers {
        s.check_alive()?;
    }
    drop(router);
    let windows = windows.borrow();
    windows.check("the stall run's clients")?;
    let per_s = |f: fn(&load::Second) -> u64| windows.seconds.iter().map(f).collect::<Vec<_>>();
    Ok(StallRun {
        max_down_fraction,
        samples,
        stopped_at_s,
        continued_at_s,
        replies_per_s: per_s(|s| s.replies),
        errors_per_s: per_s(|s| s.errors),
        misses_per_s: per_s(|s| s.misses),
    })
}
