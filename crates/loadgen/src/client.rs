//! The connection driver: N connections on one current-thread tokio runtime,
//! each sending a pipelined batch of requests in one write and reading until
//! every reply of the batch is in, then the next batch (closed loop; the open
//! loop is `open_loop`), with warm-up, measured phase and CPU readings around
//! them, and the pre-fill of every key. Every reply is checked (`reply`); anything
//! wrong is an error, counted by kind with a first example. Not here: the
//! connection and its counters (`conn`), which requests (`workload`), CPU
//! accounting (`cpu`), printing (`report`).

use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use super::conn::{conn_error, Conn, Phase, RunState, Stats};
use super::workload::{Workload, WorkloadOp};

/// How long connections may take to finish their last batch after the run ends.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);
/// Stores every key once (`set`, pipelined `depth` deep), checking each reply.
pub async fn prefill(addr: SocketAddr, w: &Workload, depth: usize) -> Result<()> {
    let mut conn = Conn::connect(addr)
        .await
        .with_context(|| format!("connecting to {addr} to pre-fill"))?;
    let mut stats = Stats::default();
    let mut ops = Vec::with_capacity(depth);
    let mut key = 0;
    while key < w.keys() {
        ops.clear();
        ops.extend((key..w.keys().min(key + depth as u64)).map(WorkloadOp::Set));
        key += ops.len() as u64;
        let r = conn
            .round_trip(w, &ops, |op, reply, _| {
                stats.reply(op, reply, Duration::ZERO, false)
            })
            .await;
        if let Err(e) = r {
            conn_error(&mut stats, e);
        }
        if stats.errors > 0 {
            let (kind, (_, example)) = stats.error_kinds.iter().next().expect("an error");
            bail!("pre-filling {addr} failed: {kind}: {example}");
        }
    }
    Ok(())
}
async fn drive(
    mut conn: Conn,
    w: Rc<Workload>,
    depth: usize,
    seed: u64,
    id: usize,
    sh: Rc<RunState>,
) {
    let mut rng = super::workload::conn_rng(seed, id);
    let mut ops = Vec::with_capacity(depth);
    while sh.phase.get() != Phase::Stop {
        ops.clear();
        ops.extend((0..depth).map(|_| w.op(&mut rng)));
        let sent = Instant::now();
        let r = conn
            .round_trip(&w, &ops, |op, reply, at| {
                let measured = sh.phase.get() == Phase::Measure;
                sh.stats
                    .borrow_mut()
                    .reply(op, reply, at.duration_since(sent), measured);
            })
            .await;
        if let Err(e) = r {
            conn_error(&mut sh.stats.borrow_mut(), e);
            break;
        }
    }
    sh.running.set(sh.running.get() - 1);
}

/// One measured phase of load: its counters, duration and the CPU readings.
#[derive(Debug, Clone)]
pub struct Measured {
    /// Counters and latencies.
    pub stats: Stats,
    /// Wall time of the measured phase.
    pub elapsed: Duration,
    /// Server CPU time (user+system, all threads) during the measured phase.
    pub server_cpu: Option<Duration>,
    /// The load generator's event-loop thread's CPU time during the measured phase.
    pub client_cpu: Duration,
}

/// How to load one server.
#[derive(Debug, Clone)]
pub struct LoadConfig {
    /// Server address.
    pub addr: SocketAddr,
    /// The server's PID, for its CPU time.
    pub server_pid: Option<u32>,
    /// Connections.
    pub conns: usize,
    /// Requests per batch (open loop: most requests per write when behind).
    pub depth: usize,
    /// Open loop at this many requests per second across all connections; closed loop
    /// when `None`.
    pub rate: Option<f64>,
    /// Advanced by the milliseconds of warm-up and measured time as they pass.
    pub progress: Option<indicatif::ProgressBar>,
    /// Unmeasured time first.
    pub warmup: Duration,
    /// Measured time.
    pub duration: Duration,
    /// RNG seed.
    pub seed: u64,
}

/// Sleeps for `time`, advancing `progress` ten times a second.
async fn wait(time: Duration, progress: Option<&indicatif::ProgressBar>) {
    let Some(bar) = progress else {
        return tokio::time::sleep(time).await;
    };
    let start = tokio::time::Instant::now();
    let end = start + time;
    let mut shown = Duration::ZERO;
    while tokio::time::Instant::now() < end {
        tokio::time::sleep_until(end.min(tokio::time::Instant::now() + Duration::from_millis(100)))
            .await;
        let passed = start.elapsed().min(time);
        bar.inc((passed - shown).as_millis() as u64);
        shown = Duration::from_millis(passed.as_millis() as u64);
    }
}

fn server_cpu(pid: Option<u32>) -> Result<Option<Duration>> {
    pid.map(|p| super::cpu::cpu_time(super::cpu::Who::Process(p)))
        .transpose()
        .context("reading the server's CPU time (has it exited?)")
}

/// Runs warm-up then the measured phase against one server, on the calling thread.
/// Must be called inside a current-thread runtime's `LocalSet`.
pub async fn measure(cfg: &LoadConfig, w: Rc<Workload>) -> Result<Measured> {
    use super::cpu::{cpu_time, Who};
    let sh = Rc::new(RunState {
        phase: Cell::new(Phase::Warmup),
        stats: RefCell::new(Stats::default()),
        running: Cell::new(0),
    });
    let mut conns = Vec::with_capacity(cfg.conns);
    for i in 0..cfg.conns {
        let c = Conn::connect(cfg.addr)
            .await
            .with_context(|| format!("opening connection {} to {}", i + 1, cfg.addr))?;
        conns.push(c);
    }
    let mut tasks = Vec::with_capacity(cfg.conns);
    if let Some(rate) = cfg.rate {
        tasks = super::open_loop::spawn(conns, &w, rate, cfg.depth, cfg.seed, &sh);
    } else {
        for (id, conn) in conns.into_iter().enumerate() {
            sh.running.set(sh.running.get() + 1);
            tasks.push(tokio::task::spawn_local(drive(
                conn,
                w.clone(),
                cfg.depth,
                cfg.seed,
                id,
                sh.clone(),
            )));
        }
    }
    wait(cfg.warmup, cfg.progress.as_ref()).await;

    sh.phase.set(Phase::Measure);
    let t0 = Instant::now();
    let srv0 = server_cpu(cfg.server_pid)?;
    let cli0 = cpu_time(Who::ThisThread)?;
    wait(cfg.duration, cfg.progress.as_ref()).await;
    sh.phase.set(Phase::Stop);
    let elapsed = t0.elapsed();
    let srv1 = server_cpu(cfg.server_pid)?;
    let cli1 = cpu_time(Who::ThisThread)?;

    let drained = tokio::time::timeout(DRAIN_TIMEOUT, async {
        for t in &mut tasks {
            // A panicking connection task is a bug: surface it.
            if let Err(e) = t.await {
                std::panic::resume_unwind(e.into_panic());
            }
        }
    })
    .await;
    if drained.is_err() {
        for t in &tasks {
            t.abort();
        }
        let stuck = sh.running.get();
        sh.stats.borrow_mut().error(
            "connection: no reply at the end of the run",
            format!("{stuck} connection(s) still waiting after {DRAIN_TIMEOUT:?}"),
        );
    }
    let stats = sh.stats.borrow().clone();
    Ok(Measured {
        stats,
        elapsed,
        server_cpu: srv0.zip(srv1).map(|(a, b)| b.saturating_sub(a)),
        client_cpu: cli1.saturating_sub(cli0),
    })
}
