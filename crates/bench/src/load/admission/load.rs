//! The clients of `memfleet bench admission`: look-aside style connections (gets and sets
//! of many keys, paced or closed loop) recording each second's replies and latencies, and
//! the hot-key storm (pipelined gets of one key, as fast as replies come, on a thread of its
//! own). Every reply is checked (`memfleet_loadgen::reply`): a hit must carry its key's
//! value; a `SERVER_ERROR` is a client-visible error, counted; anything else is a wrong
//! reply, which fails the run. Not here: the servers and the router (`fleet`), what the
//! experiments do with the numbers (`storm`, `stall`).

use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use tokio::time::MissedTickBehavior;

use crate::load::conn::{Conn, ConnError};
use crate::load::reply::CheckedReply;
use crate::load::workload::{conn_rng, Workload, WorkloadOp};

/// One second of a client's replies.
#[derive(Clone, Debug, Default)]
pub(super) struct Second {
    /// Replies read.
    pub replies: u64,
    /// Gets answered with their value.
    pub hits: u64,
    /// Gets answered `END` (every key was stored first: a miss is a failure the client
    /// sees as one, e.g. a server marked down).
    pub misses: u64,
    /// `SERVER_ERROR` replies.
    pub errors: u64,
    /// Each reply's latency from its batch's write, µs.
    pub latencies_us: Vec<u32>,
}

/// A run's seconds, from `start` (replies before `measure_from` are not recorded).
pub(super) struct Windows {
    start: Instant,
    measure_from: Instant,
    pub seconds: Vec<Second>,
    /// Wrong replies (not a hit, a miss, `STORED` or a `SERVER_ERROR`): the first few.
    pub wrong: Vec<String>,
    pub wrong_count: u64,
}

impl Windows {
    pub(super) fn new(start: Instant, measure_from: Instant) -> Windows {
        Windows {
            start,
            measure_from,
            seconds: Vec::new(),
            wrong: Vec::new(),
            wrong_count: 0,
        }
    }

    fn record(&mut self, reply: CheckedReply, latency: Duration, at: Instant) {
        if at < self.measure_from {
            return;
        }
        let i = at.saturating_duration_since(self.start).as_secs() as usize;
        if self.seconds.len() <= i {
            self.seconds.resize(i + 1, Second::default());
        }
        let s = &mut self.seconds[i];
        s.replies += 1;
        s.latencies_us
            .push(latency.as_micros().min(u128::from(u32::MAX)) as u32);
        match reply {
            CheckedReply::Hit => s.hits += 1,
            CheckedReply::Miss => s.misses += 1,
            CheckedReply::Wrong(_, detail) if detail.contains("-> SERVER_ERROR") => s.errors += 1,
            CheckedReply::Wrong(kind, detail) => {
                self.wrong_count += 1;
                if self.wrong.len() < 5 {
                    self.wrong.push(format!("{kind}: {detail}"));
                }
            }
            CheckedReply::Stored | CheckedReply::Deleted | CheckedReply::NotFound => {}
        }
    }

    /// Fails on a wrong reply.
    pub(super) fn check(&self, what: &str) -> Result<()> {
        if self.wrong_count > 0 {
            bail!(
                "{what}: {} wrong repl(ies), e.g. {:?}",
                self.wrong_count,
                self.wrong
            );
        }
        Ok(())
    }

    /// Latency percentiles (µs) over the seconds `range` (clamped).
    pub(super) fn percentiles(&self, range: std::ops::Range<usize>, ps: &[f64]) -> Vec<f64> {
        let end = range.end.min(self.seconds.len());
        let mut all: Vec<u32> = self.seconds[range.start.min(end)..end]
            .iter()
            .flat_map(|s| s.latencies_us.iter().copied())
            .collect();
        all.sort_unstable();
        ps.iter().map(|&p| percentile(&all, p)).collect()
    }
}

/// The `p`-th percentile (0..=100) of sorted `v`, NaN when empty.
pub(super) fn percentile(v: &[u32], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    f64::from(v[rank.clamp(1, v.len()) - 1])
}

/// How a client loads the router.
#[derive(Clone, Debug)]
pub(super) struct LoadSpec {
    pub addr: SocketAddr,
    pub conns: usize,
    /// Requests per batch (one write).
    pub depth: usize,
    /// Each connection writes a batch this often (paced; a late batch goes at once), or as
    /// soon as the previous batch's replies are in (closed loop) when `None`.
    pub pace: Option<Duration>,
    pub seed: u64,
}

impl LoadSpec {
    /// Paced connections that together send `rate` requests a second.
    pub(super) fn paced(addr: SocketAddr, conns: usize, rate: f64, seed: u64) -> LoadSpec {
        LoadSpec {
            addr,
            conns,
            depth: 1,
            pace: Some(Duration::from_secs_f64(conns as f64 / rate)),
            seed,
        }
    }
}

fn conn_failed(e: ConnError) -> anyhow::Error {
    match e {
        ConnError::Io(e) => anyhow::Error::new(e).context("a client connection failed"),
        ConnError::Desync(d) => anyhow::anyhow!("an unparseable reply: {d}"),
    }
}

/// Runs `spec`'s connections until `deadline`, recording into `windows`; fails on a
/// connection that breaks (a wrong reply is recorded, [`Windows::check`] fails on it).
pub(super) async fn run(
    spec: &LoadSpec,
    w: &Rc<Workload>,
    deadline: Instant,
    windows: &Rc<RefCell<Windows>>,
) -> Result<()> {
    let mut tasks = Vec::new();
    for id in 0..spec.conns {
        let mut conn = Conn::connect(spec.addr)
            .await
            .with_context(|| format!("connecting to {}", spec.addr))?;
        let (w, windows, spec) = (w.clone(), windows.clone(), spec.clone());
        tasks.push(tokio::task::spawn_local(async move {
            let mut rng = conn_rng(spec.seed, id);
            // Connections start spread over one pace, not all at once.
            let mut ticker = spec.pace.map(|p| {
                let first = tokio::time::Instant::now() + p.mul_f64(id as f64 / spec.conns as f64);
                let mut t = tokio::time::interval_at(first, p);
                t.set_missed_tick_behavior(MissedTickBehavior::Burst);
                t
            });
            let mut ops = Vec::with_capacity(spec.depth);
            loop {
                if let Some(t) = &mut ticker {
                    t.tick().await;
                }
                if Instant::now() >= deadline {
                    return anyhow::Ok(());
                }
                ops.clear();
                ops.extend((0..spec.depth).map(|_| w.op(&mut rng)));
                let sent = Instant::now();
                conn.round_trip(&w, &ops, |_, reply, at| {
                    windows
                        .borrow_mut()
                        .record(reply, at.saturating_duration_since(sent), at)
                })
                .await
                .map_err(conn_failed)?;
            }
        }));
    }
    for t in tasks {
        t.await.context("a client task")??;
    }
    Ok(())
}

/// What the storm's clients saw.
#[derive(Clone, Debug, Default)]
pub(super) struct StormOutcome {
    /// Gets answered with the value.
    pub passed: u64,
    /// Gets answered `SERVER_ERROR rate limit: ...`.
    pub refused: u64,
    /// From the first write to the last reply.
    pub elapsed: Duration,
    /// The refusal line, as the router wrote it.
    pub refusal: Option<String>,
}

/// The storm: `conns` connections to `addr` writing `depth` gets of key 0 of `w` at a time
/// until `deadline`, each batch as soon as the previous one's replies are in (or, with
/// `rate`, paced so that all of them offer `rate` gets a second), on a thread
/// of its own (so that it does not delay the measured clients' event loop; with `idle`, under
/// SCHED_IDLE: see `--storm-idle`). Fails on any
/// reply other than the value or a rate-limit refusal.
pub(super) fn storm(
    addr: SocketAddr,
    value_size: usize,
    conns: usize,
    depth: usize,
    rate: Option<f64>,
    idle: bool,
    deadline: Instant,
) -> std::thread::JoinHandle<Result<StormOutcome>> {
    std::thread::spawn(move || {
        if idle {
            super::fleet::schedule_idle()?;
        }
        let (rt, local) = crate::load::runtime()?;
        local.block_on(&rt, async move {
            let w = Rc::new(Workload::new(1, 1.0, value_size, None).map_err(anyhow::Error::msg)?);
            let out = Rc::new(RefCell::new(StormOutcome::default()));
            let wrong: Rc<RefCell<Option<String>>> = Rc::default();
            let mut connected = Vec::new();
            for _ in 0..conns {
                connected.push(Conn::connect(addr).await?);
            }
            let start = Instant::now();
            let mut tasks = Vec::new();
            for mut conn in connected {
                let (w, out, wrong) = (w.clone(), out.clone(), wrong.clone());
                tasks.push(tokio::task::spawn_local(async move {
                    let ops = vec![WorkloadOp::Get(0); depth];
                    let mut pace = rate.map(|r| {
                        let every = Duration::from_secs_f64((conns * depth) as f64 / r);
                        let mut i = tokio::time::interval(every);
                        i.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
                        i
                    });
                    while Instant::now() < deadline {
                        if let Some(pace) = &mut pace {
                            pace.tick().await;
                        }
                        conn.round_trip(&w, &ops, |_, reply, _| {
                            let mut o = out.borrow_mut();
                            match reply {
                                CheckedReply::Hit => o.passed += 1,
                                CheckedReply::Wrong(_, d)
                                    if d.contains("SERVER_ERROR rate limit") =>
                                {
                                    o.refused += 1;
                                    if o.refusal.is_none() {
                                        o.refusal = d.split("-> ").nth(1).map(String::from);
                                    }
                                }
                                other => {
                                    wrong.borrow_mut().get_or_insert(format!("{other:?}"));
                                }
                            }
                        })
                        .await
                        .map_err(conn_failed)?;
                    }
                    anyhow::Ok(())
                }));
            }
            for t in tasks {
                t.await.context("a storm task")??;
            }
            if let Some(w) = wrong.borrow_mut().take() {
                bail!("the storm got a wrong reply: {w}");
            }
            let mut o = out.borrow().clone();
            o.elapsed = start.elapsed();
            Ok(o)
        })
    })
}
