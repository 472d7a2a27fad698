//! `memfleet bench discovery`: a pool found through DNS (issue 27), under look-aside load,
//! while 10% of its members (⌈N/10⌉) are replaced one by one.
//!
//! Each run starts `--members` `memfleet server`s on loopback addresses sharing one port,
//! an in-process DNS server naming them (SRV `_memcache._tcp.fleet.bench`, an A record per
//! target, TTL 1 s), a two-server gutter pool and a `memfleet router` whose main pool is
//! `dnssrv+_memcache._tcp.fleet.bench` (re-resolved every `--resolve-interval`) behind a
//! `gutter` route (`fleet`). It fills `--keys` keys, and `--conns` look-aside clients (get;
//! on a miss or an error: a `--db-latency` database query, then set) run for `--duration`.
//! From `--replace-at`, every 2¼ resolve intervals (so that the changes fall at different
//! points of the router's lookup period), one member is replaced:
//!
//! 1. **in place** (a StatefulSet pod recreated): the member's server is stopped (SIGTERM), a
//!    new empty one started at a new address, and the member's A record changed. The ring is
//!    keyed on the SRV target's name, so the ideal is that no key moves.
//! 2. **new names** (a Deployment-style rollout, the second run on a fresh fleet): a server
//!    with a new name starts at a new address and joins the SRV answer as the member leaves
//!    it, and the member's server is stopped at the same moment. The ideal moves only the
//!    leavers' keys (k/N); consistent hashing also moves what the newcomers take from the
//!    others, and nothing between members that stay.
//!
//! Reported: client-visible failed requests (error replies, connection errors: 0 is the
//! goal, the gutter serving a replaced member's keys meanwhile), gets, hit ratio and the
//! gutter's gets per second, the time from each DNS change until the router's
//! `__memfleet__.pools` shows it (polled every 10 ms), and the keys moved for a sample of
//! 20,000 keys, as the router places them (`__memfleet__.route`) and as the ring computed
//! here over the member names does (`placement`: the two must agree). A run fails, after
//! printing everything, on any failed request, a key moved in place, a key moved between
//! members that stayed, a disagreement with the ring, or a change the router never showed.
//!
//! With `--out DIR`: `discovery.json` (both runs' timelines, replacements and totals) and
//! `discovery-timeline.png`: misses and failed requests per second, the DNS changes marked
//! (`report`).

mod fleet;
mod placement;
mod report;

use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use super::args::LookAside;
use super::client::prefill;
use super::look_aside::Event;
use super::run_log::RunLog;
use super::runtime;
use super::workload::Workload;
use anyhow::{bail, Context, Result};
use fleet::{Admin, Fleet, Step};
use memfleet_sim::duration::parse_duration;
use placement::{Moves, Snapshot};
use rand::rngs::SmallRng;
use rand::SeedableRng;
use tokio::io::BufReader;
use tokio::net::TcpStream;

/// `memfleet bench discovery`'s flags.
#[derive(Debug, Clone, clap::Args)]
#[command(mut_arg("duration", |a| a.default_value("20s")))]
pub struct DiscoveryArgs {
    /// The clients, the keys, the servers' executable, the database.
    #[command(flatten)]
    pub look_aside: LookAside,
    /// Members of the pool DNS names (at least 10; a tenth of them, rounded up, are
    /// replaced).
    #[arg(long, default_value_t = 36)]
    pub members: usize,
    /// When the first member is replaced; the others follow one by one, every 2¼
    /// --resolve-interval.
    #[arg(long, value_parser = parse_duration, default_value = "5s")]
    pub replace_at: Duration,
    /// How often the router looks its pool up in DNS (its `resolve_interval`).
    #[arg(long, value_parser = parse_duration, default_value = "1s")]
    pub resolve_interval: Duration,
    /// Write discovery.json and its figure into this directory, with the command that made
    /// them.
    #[arg(long, value_name = "DIR")]
    pub out: Option<std::path::PathBuf>,
}

impl DiscoveryArgs {
    /// Members replaced in each run: a tenth, rounded up.
    fn replaced(&self) -> usize {
        self.members.div_ceil(10)
    }

    /// Between one replacement and the next: two intervals and a quarter, so that the
    /// changes meet the router's lookups at different points of their period (at a whole
    /// number of intervals, every change would wait exactly as long).
    fn step_gap(&self) -> Duration {
        self.resolve_interval * 9 / 4
    }
}

/// How a run replaces members.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    InPlace,
    NewNames,
}

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Kind::InPlace => "in place",
            Kind::NewNames => "new names",
        }
    }
}

/// One second of a run.
#[derive(Clone, Copy, Debug, Default)]
struct Second {
    gets: u64,
    hits: u64,
    /// Failed requests: error replies and connection errors.
    failures: u64,
    db: u64,
    /// Gets the router sent to the gutter, and those it hit.
    gutter_gets: u64,
    gutter_hits: u64,
}

/// What one run measured.
struct Outcome {
    kind: Kind,
    members: usize,
    seconds: Vec<Second>,
    steps: Vec<Step>,
    moves: Moves,
    /// The share of keys an ideal placement moves, percent.
    ideal_percent: f64,
    /// The first distinct failures, for the report.
    failure_examples: Vec<String>,
}

impl Outcome {
    fn total(&self) -> Second {
        let mut t = Second::default();
        for s in &self.seconds {
            t.gets += s.gets;
            t.hits += s.hits;
            t.failures += s.failures;
            t.db += s.db;
            t.gutter_gets += s.gutter_gets;
            t.gutter_hits += s.gutter_hits;
        }
        t
    }

    /// The DNS-change-to-router times of the replacements, ascending, ms.
    fn followed_ms(&self) -> Vec<f64> {
        let mut ms: Vec<f64> = self
            .steps
            .iter()
            .map(|s| s.followed.as_secs_f64() * 1000.0)
            .collect();
        ms.sort_by(f64::total_cmp);
        ms
    }

    /// What went wrong beyond what the experiment expects (nothing, when all is well).
    fn problems(&self) -> Vec<String> {
        let label = self.kind.label();
        let mut p = Vec::new();
        let total = self.total();
        if total.failures > 0 {
            p.push(format!(
                "{label}: {} failed requests (first: {})",
                total.failures,
                self.failure_examples.join(" | ")
            ));
        }
        let m = &self.moves;
        if m.disagreements > 0 {
            p.push(format!(
                "{label}: the router placed {} sample keys elsewhere than the ring of the member names",
                m.disagreements
            ));
        }
        if self.kind == Kind::InPlace && m.moved > 0 {
            p.push(format!("{label}: {} keys moved (ideal: 0)", m.moved));
        }
        if m.between_stayers > 0 {
            p.push(format!(
                "{label}: {} keys moved between members that stayed",
                m.between_stayers
            ));
        }
        if m.moved != m.on_leavers + m.to_newcomers + m.between_stayers {
            p.push(format!("{label}: keys stayed on a member that left"));
        }
        p
    }
}

/// `memfleet bench discovery`.
pub fn bench(args: &DiscoveryArgs) -> Result<()> {
    let duration = args.look_aside.clients.duration;
    if args.members < 10 || args.look_aside.clients.conns == 0 {
        bail!("discovery needs --members of at least 10 and --conns of at least 1");
    }
    if args.resolve_interval < Duration::from_millis(100) {
        bail!("--resolve-interval must be at least 100ms");
    }
    let last_step = args.replace_at + args.step_gap() * (args.replaced() as u32 - 1);
    if last_step + args.resolve_interval * 2 >= duration {
        bail!(
            "the last replacement starts at {last_step:?}: --duration must leave it two \
             --resolve-interval at least (or move --replace-at earlier)"
        );
    }
    let workload = Rc::new(
        args.look_aside
            .keys
            .gets_workload("discovery", args.look_aside.keys.zipf)?,
    );
    println!(
        "memfleet bench discovery: {} members found through DNS (SRV, resolve_interval {:?}) \
         behind a router's gutter route, {}; {} members replaced from {:?}, every {:?}, of \
         {:?}: in place, then with new names",
        args.members,
        args.resolve_interval,
        args.look_aside.describe(),
        args.replaced(),
        args.replace_at,
        args.step_gap(),
        duration
    );
    let log = RunLog::new();
    log.print_start();
    let mut outcomes = Vec::new();
    for kind in [Kind::InPlace, Kind::NewNames] {
        let outcome =
            run(args, &workload, kind).with_context(|| format!("the run {}", kind.label()))?;
        outcomes.push(outcome);
    }
    print!("{}", report::text(args, &outcomes));
    let load_at_end = log.print_end();
    if let Some(dir) = &args.out {
        report::write(dir, args, &outcomes, &load_at_end)?;
    }
    let problems: Vec<String> = outcomes.iter().flat_map(Outcome::problems).collect();
    if !problems.is_empty() {
        bail!("{}", problems.join("; "));
    }
    Ok(())
}

/// The members a run replaces: spread over the names, `mc-0`, `mc-<N/k>`, ...
fn victims(members: usize, k: usize) -> Vec<String> {
    (0..k).map(|i| format!("mc-{}", i * members / k)).collect()
}

/// One run on a fresh fleet.
fn run(args: &DiscoveryArgs, workload: &Rc<Workload>, kind: Kind) -> Result<Outcome> {
    let bin = &args.look_aside.memfleet.memfleet_bin;
    let k = args.replaced();
    let mut fleet = Fleet::start(bin, args.members, k, args.resolve_interval)?;
    let addr = fleet.addr;
    println!(
        "[{}] router pid {} on {addr}, {} members on port {} of 127.0.1.x",
        kind.label(),
        fleet.router_pid(),
        args.members,
        fleet.port()
    );
    let (rt, local) = runtime()?;
    local.block_on(&rt, prefill(addr, workload, 100))?;
    let keys = placement::sample_keys(workload);
    let pool = fleet.main_pool()?;
    let ring_names =
        |f: &Fleet| -> Vec<String> { f.names().iter().map(|m| f.ring_name(m)).collect() };
    let before = Snapshot::take(
        &mut Admin::connect(addr)?,
        &keys,
        &pool,
        &ring_names(&fleet),
    )?;
    let leavers: Vec<String> = match kind {
        Kind::InPlace => Vec::new(),
        Kind::NewNames => victims(args.members, k)
            .iter()
            .map(|v| fleet.ring_name(v))
            .collect(),
    };

    let duration = args.look_aside.clients.duration;
    let seconds = (duration.as_secs_f64().ceil() as usize).max(1);
    let windows = Rc::new(RefCell::new(vec![Second::default(); seconds]));
    let examples = Rc::new(RefCell::new(Vec::new()));
    let start = Instant::now();
    let (replace_at, gap) = (args.replace_at, args.step_gap());
    let steps = std::thread::scope(|scope| {
        let fleet = &mut fleet;
        let controller = scope.spawn(move || -> Result<Vec<Step>> {
            let mut steps = Vec::new();
            for (i, victim) in victims(args.members, k).iter().enumerate() {
                let at = start + replace_at + gap * i as u32;
                std::thread::sleep(at.saturating_duration_since(Instant::now()));
                let step = match kind {
                    Kind::InPlace => fleet.replace_in_place(victim, start)?,
                    Kind::NewNames => fleet.replace_with_new_name(victim, start)?,
                };
                println!(
                    "[{}] {} {} → {} ({}): DNS changed at {:.2} s, the router followed {:.0} ms later",
                    kind.label(),
                    step.member,
                    step.old_addr,
                    step.new_addr,
                    step.replacement,
                    step.dns_change.as_secs_f64(),
                    step.followed.as_secs_f64() * 1000.0
                );
                steps.push(step);
            }
            Ok(steps)
        });
        let load = local.block_on(&rt, load(args, addr, workload, start, &windows, &examples));
        let steps = controller
            .join()
            .map_err(|_| anyhow::anyhow!("the replacing thread panicked"))?;
        load?;
        steps
    })?;
    if let Some(late) = steps.iter().find(|s| s.dns_change + s.followed > duration) {
        bail!(
            "the router followed {} only at {:.2} s, after the load ended: give a longer --duration",
            late.member,
            (late.dns_change + late.followed).as_secs_f64()
        );
    }
    let after = Snapshot::take(
        &mut Admin::connect(addr)?,
        &keys,
        &pool,
        &ring_names(&fleet),
    )?;
    let newcomers: Vec<String> = match kind {
        Kind::InPlace => Vec::new(),
        Kind::NewNames => steps
            .iter()
            .map(|s| fleet.ring_name(&s.replacement))
            .collect(),
    };
    let moves = Moves::between(&before, &after, &leavers, &newcomers);
    drop(fleet);
    let seconds = windows.borrow().clone();
    let failure_examples = examples.borrow().clone();
    Ok(Outcome {
        kind,
        members: args.members,
        seconds,
        steps,
        moves,
        ideal_percent: match kind {
            Kind::InPlace => 0.0,
            Kind::NewNames => 100.0 * k as f64 / args.members as f64,
        },
        failure_examples,
    })
}

/// The clients and the gutter's counters until the end of the run.
async fn load(
    args: &DiscoveryArgs,
    addr: SocketAddr,
    workload: &Rc<Workload>,
    start: Instant,
    windows: &Rc<RefCell<Vec<Second>>>,
    examples: &Rc<RefCell<Vec<String>>>,
) -> Result<()> {
    let deadline = start + args.look_aside.clients.duration;
    let mut clients = Vec::new();
    for c in 0..args.look_aside.clients.conns {
        let (w, windows, examples) = (workload.clone(), windows.clone(), examples.clone());
        let db_latency = args.look_aside.db_latency;
        clients.push(tokio::task::spawn_local(async move {
            let clock = Clock {
                start,
                deadline,
                windows: &windows,
                examples: &examples,
            };
            client(addr, &w, c as u64, db_latency, &clock).await
        }));
    }
    let sampler = {
        let windows = windows.clone();
        tokio::task::spawn_local(async move {
            // The gutter route's counters every second, into the windows.
            let sampled = super::gutter::sample_gutter_counters(
                addr,
                start,
                deadline,
                |second, gets, hits| {
                    if let Some(s) = windows.borrow_mut().get_mut(second) {
                        s.gutter_gets = gets;
                        s.gutter_hits = hits;
                    }
                },
            );
            if let Err(e) = sampled.await {
                eprintln!("reading the router's gutter counters: {e:#}");
            }
        })
    };
    for c in clients {
        c.await.context("a client task")?;
    }
    let _ = sampler.await;
    Ok(())
}

/// Where a client counts what happened.
struct Clock<'a> {
    start: Instant,
    deadline: Instant,
    windows: &'a RefCell<Vec<Second>>,
    examples: &'a RefCell<Vec<String>>,
}

impl Clock<'_> {
    /// Counts into the current second.
    fn count(&self, f: impl FnOnce(&mut Second)) {
        let mut w = self.windows.borrow_mut();
        let i = (self.start.elapsed().as_secs() as usize).min(w.len() - 1);
        f(&mut w[i]);
    }

    /// Counts a failed request and keeps the first few distinct ones.
    fn failed(&self, what: String) {
        self.count(|s| s.failures += 1);
        let mut e = self.examples.borrow_mut();
        if e.len() < 5 && !e.contains(&what) {
            e.push(what);
        }
    }
}

/// One look-aside client until the deadline; a connection that fails is counted and
/// opened again.
async fn client(
    addr: SocketAddr,
    workload: &Workload,
    seed: u64,
    db_latency: Duration,
    clock: &Clock<'_>,
) {
    let mut rng = SmallRng::seed_from_u64(0x646e_7373 ^ seed);
    let mut conn = None;
    while Instant::now() < clock.deadline {
        let c = match &mut conn {
            Some(c) => c,
            None => match TcpStream::connect(addr).await {
                Ok(s) => conn.insert(BufReader::new(s)),
                Err(e) => {
                    clock.failed(format!("connecting: {e}"));
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
        };
        let key = workload.key(&mut rng);
        if let Err(e) = look_aside(c, workload, key, db_latency, clock).await {
            clock.failed(format!("connection: {e}"));
            conn = None;
        }
    }
}

/// A get of `key`; on a miss or an error, the database and a set (`look_aside::read`),
/// counted on `clock`.
async fn look_aside(
    conn: &mut BufReader<TcpStream>,
    workload: &Workload,
    key: u64,
    db_latency: Duration,
    clock: &Clock<'_>,
) -> std::io::Result<()> {
    let mut buffers = super::look_aside::Buffers::default();
    super::look_aside::read(conn, workload, key, db_latency, &mut buffers, |e| match e {
        Event::Get { hit, error } => {
            clock.count(|s| {
                s.gets += 1;
                s.hits += u64::from(hit);
            });
            if let Some(line) = error {
                clock.failed(format!("get: {line}"));
            }
        }
        Event::Database => clock.count(|s| s.db += 1),
        Event::SetFailed(line) => clock.failed(format!("set: {line}")),
    })
    .await
}
