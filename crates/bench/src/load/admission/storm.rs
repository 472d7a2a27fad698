//! The storm part of `memfleet bench admission`: one `memfleet router` with two pools on two
//! listeners, `hot` (`rates = { gets = R }`) and `other` (no rates), a memfleet server
//! each. A paced client on `other` (gets and sets of many keys) measures its latency
//! without the storm (baseline), then with it: connections hammering one key on `hot` with
//! pipelined gets as fast as replies come. What `hot`'s server saw (its own `cmd_get`) is
//! compared with R over the storm's time, the refusals the router counted with those the
//! storm's clients read. Not here: printing and the JSON (`report`).

use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde::Serialize;

use super::fleet::{self, RouterProcess};
use super::load::{self, LoadSpec, Windows};
use crate::load::client::prefill;
use crate::load::workload::Workload;

/// What the storm part runs.
#[derive(Clone, Debug, Serialize)]
pub(super) struct StormSettings {
    pub rate: u32,
    pub steady_rate: f64,
    pub steady_conns: usize,
    pub storm_conns: usize,
    pub storm_depth: usize,
    pub storm_rate: Option<f64>,
    pub storm_idle: bool,
    pub storm_direct: bool,
    pub split_workers: bool,
    pub window_s: f64,
    pub warmup_s: f64,
    pub repeat: usize,
    pub keys: u64,
    pub value_size: usize,
    pub router_threads: usize,
    pub seed: u64,
}

/// The latency percentiles the report shows.
pub(super) const PERCENTILES: [f64; 3] = [50.0, 99.0, 99.9];

/// `other`'s client in one phase.
#[derive(Clone, Debug, Serialize)]
pub(super) struct Steady {
    pub replies: u64,
    pub errors: u64,
    pub misses: u64,
    /// p50, p99, p99.9 over the phase, µs.
    pub percentiles_us: Vec<f64>,
    /// Each second's p99, µs.
    pub p99_per_s: Vec<f64>,
}

impl Steady {
    fn of(w: &Windows, seconds: usize) -> Steady {
        let s = &w.seconds[..w.seconds.len().min(seconds)];
        Steady {
            replies: s.iter().map(|s| s.replies).sum(),
            errors: s.iter().map(|s| s.errors).sum(),
            misses: s.iter().map(|s| s.misses).sum(),
            percentiles_us: w.percentiles(0..seconds, &PERCENTILES),
            p99_per_s: (0..s.len())
                .map(|i| w.percentiles(i..i + 1, &[99.0])[0])
                .collect(),
        }
    }

    pub(super) fn p99(&self) -> f64 {
        self.percentiles_us[1]
    }
}

/// One repeat: the baseline and the storm.
#[derive(Clone, Debug, Serialize)]
pub(super) struct StormRepeat {
    pub baseline: Steady,
    pub with_storm: Steady,
    /// `cmd_get` of `hot`'s server over the storm.
    pub hot_gets: u64,
    /// From the storm's first write to its last reply.
    pub storm_s: f64,
    /// Gets the storm's clients had answered with the value, and refused.
    pub storm_passed: u64,
    pub storm_refused: u64,
    /// The router's `pool:hot:rate_limited_gets` over the storm.
    pub router_refused: u64,
    /// `hot`'s server's gets in each second of the storm.
    pub hot_gets_per_s: Vec<u64>,
    /// The refusal line the storm read.
    pub refusal: Option<String>,
}

impl StormRepeat {
    /// The storm's requests a second.
    pub(super) fn offered_per_s(&self) -> f64 {
        (self.storm_passed + self.storm_refused) as f64 / self.storm_s
    }

    /// Gets a second that reached `hot`'s server.
    pub(super) fn hot_per_s(&self) -> f64 {
        self.hot_gets as f64 / self.storm_s
    }

    /// `other`'s p99 with the storm over without.
    pub(super) fn p99_ratio(&self) -> f64 {
        self.with_storm.p99() / self.baseline.p99()
    }
}

/// The burst a GCRA cell of `rate` lets through at once (`client::topology::rates`: 1/100
/// of a second's requests, at least 1).
pub(super) fn burst(rate: u32) -> u64 {
    u64::from((rate / 100).max(1))
}

/// Runs the storm part; `bin` is the memfleet executable.
pub(super) async fn run(bin: &str, s: &StormSettings) -> Result<Vec<StormRepeat>> {
    let hot_server = if s.storm_idle {
        // Started from a thread under SCHED_IDLE: the server's threads inherit it.
        let bin = bin.to_string();
        let server = std::thread::spawn(move || {
            fleet::schedule_idle()?;
            fleet::server(&bin)
        })
        .join()
        .map_err(|_| anyhow::anyhow!("starting hot's server panicked"))??;
        fleet::check_idle(server.pid())?;
        server
    } else {
        fleet::server(bin)?
    };
    let other_server = fleet::server(bin)?;
    let (hot, other) = (fleet::free_addr()?, fleet::free_addr()?);
    // `--split-workers`: hot's clients on the last worker, other's on the rest.
    let (mut hot_extra, mut other_extra) =
        (vec![format!("rates = {{ gets = {} }}", s.rate)], vec![]);
    if s.split_workers {
        let last = s.router_threads - 1;
        hot_extra.push(format!("workers = [{last}]"));
        other_extra.push(format!("workers = {:?}", (0..last).collect::<Vec<_>>()));
    }
    let config = format!(
        "{}\n{}",
        fleet::pool_section("hot", hot, std::slice::from_ref(&hot_server), &hot_extra),
        fleet::pool_section(
            "other",
            other,
            std::slice::from_ref(&other_server),
            &other_extra
        )
    );
    let router = RouterProcess::start(bin, s.router_threads, &config, &[hot, other])?;
    println!(
        "[storm] router pid {} (-t {}): pool hot on {hot} (server {}, rates = {{ gets = {} }}), \
         pool other on {other} (server {})",
        router.spawned.pid(),
        s.router_threads,
        hot_server.addr,
        s.rate,
        other_server.addr
    );
    let w = Rc::new(Workload::new(s.keys, 0.9, s.value_size, None).map_err(anyhow::Error::msg)?);
    prefill(other, &w, 64).await?;
    let hot_key = Workload::new(1, 1.0, s.value_size, None).map_err(anyhow::Error::msg)?;
    prefill(hot, &hot_key, 1).await?;

    let mut repeats = Vec::new();
    for r in 0..s.repeat {
        let seed = s.seed.wrapping_add(r as u64);
        let spec = LoadSpec::paced(other, s.steady_conns, s.steady_rate, seed);
        let baseline = steady(&spec, &w, s).await?;
        let repeat = with_storm(&spec, &w, s, hot, hot_server.addr, baseline).await?;
        println!(
            "[storm] repeat {}: other p99 {:.0} µs without the storm, {:.0} µs with; storm \
             {:.0} gets/s offered, hot server {:.0} gets/s (R = {})",
            r + 1,
            repeat.baseline.p99(),
            repeat.with_storm.p99(),
            repeat.offered_per_s(),
            repeat.hot_per_s(),
            s.rate
        );
        repeats.push(repeat);
    }
    drop(router);
    Ok(repeats)
}

/// `other`'s paced client for the warm-up and the window, from now.
async fn steady(spec: &LoadSpec, w: &Rc<Workload>, s: &StormSettings) -> Result<Steady> {
    let start = Instant::now();
    let measure_from = start + Duration::from_secs_f64(s.warmup_s);
    let deadline = measure_from + Duration::from_secs_f64(s.window_s);
    let windows = Rc::new(RefCell::new(Windows::new(measure_from, measure_from)));
    load::run(spec, w, deadline, &windows).await?;
    let windows = windows.borrow();
    windows.check("other's client")?;
    Ok(Steady::of(&windows, s.window_s.ceil() as usize))
}

/// The storm against `hot` from now to the end of `other`'s client's window.
async fn with_storm(
    spec: &LoadSpec,
    w: &Rc<Workload>,
    s: &StormSettings,
    hot: SocketAddr,
    hot_server: SocketAddr,
    baseline: Steady,
) -> Result<StormRepeat> {
    let refused =
        |st: &crate::load::server_stats::Stats| st.int_or_zero("pool:hot:rate_limited_gets");
    let refused_before = refused(&fleet::stats_once(hot).await?);
    let gets_before = fleet::cmd_gets(&[hot_server]).await?;
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(s.warmup_s + s.window_s);
    // The control run (`--storm-direct`) skips the router.
    let storm = load::storm(
        if s.storm_direct { hot_server } else { hot },
        s.value_size,
        s.storm_conns,
        s.storm_depth,
        s.storm_rate,
        s.storm_idle,
        end,
    );
    // `hot`'s server's gets each second of the storm.
    let sampler = tokio::task::spawn_local(async move {
        let mut per_s = Vec::new();
        let mut last = gets_before;
        for tick in 1u32.. {
            let at = start + Duration::from_secs(tick.into());
            if at > end + Duration::from_millis(500) {
                break;
            }
            tokio::time::sleep_until(at.into()).await;
            let now = fleet::cmd_gets(&[hot_server]).await?;
            per_s.push(now - last);
            last = now;
        }
        anyhow::Ok(per_s)
    });
    let with_storm = steady(spec, w, s).await;
    let hot_gets_per_s = sampler.await.context("the sampler")??;
    let outcome = tokio::task::spawn_blocking(move || storm.join())
        .await
        .context("waiting for the storm")?
        .map_err(|_| anyhow::anyhow!("the storm's thread panicked"))??;
    let with_storm = with_storm?;
    let hot_gets = fleet::cmd_gets(&[hot_server]).await? - gets_before;
    let router_refused = refused(&fleet::stats_once(hot).await?) - refused_before;
    Ok(StormRepeat {
        baseline,
        with_storm,
        hot_gets,
        storm_s: outcome.elapsed.as_secs_f64(),
        storm_passed: outcome.passed,
        storm_refused: outcome.refused,
        router_refused,
        hot_gets_per_s,
        refusal: outcome.refusal,
    })
}
