//! The load of the server and router parts: the project's load generator
//! (`memfleet_loadgen::client::measure`, one current-thread runtime per thread) on several
//! threads, each pinned to a load CPU of its own, together holding `conns` connections
//! spread evenly over the addresses under test (one, or one per nutcracker process). This
//! thread reads the CPU time of the processes under test around the measured time. Not
//! here: which servers and which CPUs (`server`, `router`).

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use hdrhistogram::Histogram;

use memfleet_loadgen::client::{self, LoadConfig, Measured};
use memfleet_loadgen::cpu::{self, Who};
use memfleet_loadgen::workload::{Mix, Protocol, Workload, WorkloadSpec};
use memfleet_sim::sizes::SizeDistribution;
use memfleet_sim::workload::TtlMix;

/// The requests of the server and router parts: 90% gets and 10% sets of uniformly drawn
/// keys of `key_size` bytes (`key:<n>` padded), values of `value_size` bytes, no TTL.
pub fn workload_spec(keys: u64, key_size: usize, value_size: usize) -> Result<WorkloadSpec> {
    Ok(WorkloadSpec {
        keys,
        mix: Mix::new(0.9, 0.1, 0.0).map_err(anyhow::Error::msg)?,
        zipf: None,
        key_sizes: Some(SizeDistribution::Fixed(key_size)),
        value_sizes: SizeDistribution::Fixed(value_size),
        ttl: TtlMix::single(0),
        protocol: Protocol::Text,
    })
}

/// Stores every key of `spec` at `addr`, pipelined 100 deep, on a runtime of its own.
pub fn prefill(addr: SocketAddr, spec: &WorkloadSpec) -> Result<Duration> {
    let workload = Workload::from_spec(spec.clone()).map_err(anyhow::Error::msg)?;
    let (rt, local) = crate::load::runtime()?;
    let start = Instant::now();
    local.block_on(&rt, client::prefill(addr, &workload, 100))?;
    Ok(start.elapsed())
}

/// One cell's load.
#[derive(Debug, Clone)]
pub struct Load<'a> {
    /// Where the connections go (spread evenly).
    pub addrs: &'a [SocketAddr],
    /// The processes under test, whose CPU time is read.
    pub pids: &'a [u32],
    /// Connections in all.
    pub conns: usize,
    /// Requests per batch.
    pub depth: usize,
    /// CPUs of the load generator's threads (at most one thread per connection).
    pub cpus: &'a [usize],
    /// Unmeasured time first.
    pub warmup: Duration,
    /// Measured time.
    pub duration: Duration,
    /// The requests.
    pub spec: &'a WorkloadSpec,
    /// RNG seed.
    pub seed: u64,
}

/// What one cell's load measured.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Replies in the measured time, all threads.
    pub ops: u64,
    /// Replies per second (each thread's count over its own measured time, summed).
    pub ops_per_sec: f64,
    /// CPU time of the processes under test per reply, µs.
    pub server_us_per_op: f64,
    /// CPUs the processes under test kept busy (CPU seconds per second).
    pub server_cpus_busy: f64,
    /// The load threads' CPU time ÷ (threads × measured time): near 1, the load generator
    /// is the limit.
    pub load_busy: f64,
    /// Load threads.
    pub load_threads: usize,
    /// Median and 99th percentile latency, µs.
    pub p50_us: f64,
    /// 99th percentile latency, µs.
    pub p99_us: f64,
    /// Get hits ÷ gets.
    pub hit_ratio: f64,
    /// Wrong replies and failed connections.
    pub errors: u64,
    /// Each kind of error with a count and a first example.
    pub error_kinds: Vec<String>,
}

/// Runs one cell: the load threads start together, each connects and runs warm-up then
/// measured time; this thread reads the processes' CPU time at the same offsets (the
/// threads' connection set-up, a few milliseconds, is the misalignment).
pub fn run(load: &Load<'_>) -> Result<Outcome> {
    let threads = load.cpus.len().min(load.conns).max(1);
    // Connection j goes to address j % addrs and thread j % threads.
    let jobs: Vec<Vec<(SocketAddr, usize)>> = (0..threads)
        .map(|t| {
            load.addrs
                .iter()
                .enumerate()
                .map(|(a, &addr)| {
                    let n = (0..load.conns)
                        .filter(|j| j % threads == t && j % load.addrs.len() == a)
                        .count();
                    (addr, n)
                })
                .filter(|&(_, n)| n > 0)
                .collect()
        })
        .collect();
    let barrier = Barrier::new(threads + 1);
    let (results, cpu0, cpu1, window) = std::thread::scope(|scope| {
        let handles: Vec<_> = jobs
            .iter()
            .enumerate()
            .map(|(t, jobs)| {
                let (barrier, cpu) = (&barrier, load.cpus[t % load.cpus.len()]);
                scope.spawn(move || {
                    let pinned = cpu::pin_this_thread(cpu);
                    barrier.wait();
                    let _pinned = pinned?;
                    load_thread(load, jobs, t)
                })
            })
            .collect();
        barrier.wait();
        std::thread::sleep(load.warmup);
        let cpu0 = processes_cpu(load.pids);
        let t0 = Instant::now();
        std::thread::sleep(load.duration);
        let cpu1 = processes_cpu(load.pids);
        let window = t0.elapsed();
        let results: Vec<Result<(Vec<Measured>, Duration)>> = handles
            .into_iter()
            .map(|h| h.join().expect("a load thread panicked"))
            .collect();
        (results, cpu0, cpu1, window)
    });
    let (cpu0, cpu1) = (cpu0?, cpu1?);
    let mut measured = Vec::new();
    let mut load_cpu = Duration::ZERO;
    let mut load_time = Duration::ZERO;
    for r in results {
        let (m, thread_cpu) = r?;
        load_time += m.iter().map(|m| m.elapsed).max().unwrap_or_default();
        load_cpu += thread_cpu;
        measured.extend(m);
    }
    Ok(outcome(
        &measured,
        cpu1.saturating_sub(cpu0),
        window,
        load_cpu.as_secs_f64() / load_time.as_secs_f64().max(1e-9),
        threads,
    ))
}

/// One load thread: its connections' measures side by side on one runtime; returns them
/// and the thread's CPU time over the measured phase (their readings overlap, so the
/// largest).
fn load_thread(
    load: &Load<'_>,
    jobs: &[(SocketAddr, usize)],
    thread: usize,
) -> Result<(Vec<Measured>, Duration)> {
    let (rt, local) = crate::load::runtime()?;
    let workload = Rc::new(Workload::from_spec(load.spec.clone()).map_err(anyhow::Error::msg)?);
    let configs: Vec<LoadConfig> = jobs
        .iter()
        .enumerate()
        .map(|(i, &(addr, conns))| LoadConfig {
            addr,
            server_pid: None,
            conns,
            depth: load.depth,
            rate: None,
            progress: None,
            warmup: load.warmup,
            duration: load.duration,
            seed: load
                .seed
                .wrapping_add((thread * 1000 + i) as u64 * 0x9E37_79B9),
        })
        .collect();
    let measured = local.block_on(&rt, async {
        let runs = configs
            .iter()
            .map(|cfg| client::measure(cfg, workload.clone()));
        futures_util::future::join_all(runs).await
    });
    let measured = measured
        .into_iter()
        .zip(jobs)
        .map(|(m, (addr, _))| m.with_context(|| format!("loading {addr}")))
        .collect::<Result<Vec<_>>>()?;
    let cpu = measured
        .iter()
        .map(|m| m.client_cpu)
        .max()
        .unwrap_or_default();
    Ok((measured, cpu))
}

/// The summed CPU time of `pids`.
fn processes_cpu(pids: &[u32]) -> Result<Duration> {
    pids.iter()
        .map(|&p| cpu::cpu_time(Who::Process(p)).context("reading a server's CPU time"))
        .sum()
}

fn outcome(
    measured: &[Measured],
    server_cpu: Duration,
    window: Duration,
    load_busy: f64,
    load_threads: usize,
) -> Outcome {
    let mut latency: Histogram<u64> =
        Histogram::new_with_bounds(1, 100_000_000_000, 3).expect("valid histogram bounds");
    let (mut ops, mut gets, mut hits, mut errors) = (0, 0, 0, 0);
    let mut ops_per_sec = 0.0;
    let mut error_kinds = Vec::new();
    for m in measured {
        let s = &m.stats;
        latency.add(&s.latency_ns).expect("same histogram bounds");
        ops += s.ops;
        gets += s.gets;
        hits += s.hits;
        errors += s.errors;
        ops_per_sec += s.ops as f64 / m.elapsed.as_secs_f64().max(1e-9);
        for (kind, (count, example)) in &s.error_kinds {
            error_kinds.push(format!("{count} x {kind}; first: {example}"));
        }
    }
    let in_window = ops_per_sec * window.as_secs_f64();
    Outcome {
        ops,
        ops_per_sec,
        server_us_per_op: server_cpu.as_secs_f64() * 1e6 / in_window.max(1.0),
        server_cpus_busy: server_cpu.as_secs_f64() / window.as_secs_f64().max(1e-9),
        load_busy,
        load_threads,
        p50_us: latency.value_at_percentile(50.0) as f64 / 1000.0,
        p99_us: latency.value_at_percentile(99.0) as f64 / 1000.0,
        hit_ratio: if gets == 0 {
            1.0
        } else {
            hits as f64 / gets as f64
        },
        errors,
        error_kinds,
    }
}
