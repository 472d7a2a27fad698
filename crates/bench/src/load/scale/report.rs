//! What `memfleet bench scale` reports: the results (`scale.json`), the one table with the
//! engine, server and router sections, the scaling efficiency of every cell against the
//! fewest threads or workers of its series, and the figures (throughput against threads or
//! workers, one line per series, with each series' ideal linear line). Not here: the
//! measuring (`engine`, `drive`).

use std::path::{Path, PathBuf};

use anyhow::Result;
use memfleet_results::plot::{self, Series};

use super::drive::Outcome;
use super::engine::{ContentionDelta, EngineCell};
use super::machine::Machine;
use super::Settings;
use crate::load::table::{Column, Table};

/// A server or proxy cell: one target with k workers at one pipeline depth.
#[derive(Debug, Clone, serde::Serialize)]
pub struct NetCell {
    /// `memfleet`, `memcached`, `memfleet-router` or `nutcracker`.
    pub target: String,
    /// Worker threads (or nutcracker processes).
    pub workers: usize,
    /// Requests per batch.
    pub pipeline: usize,
    /// Connections in all.
    pub conns: usize,
    /// The CPUs of the processes under test.
    pub server_cpus: Vec<usize>,
    /// The CPUs of the load generator's threads.
    pub load_cpus: Vec<usize>,
    /// Load generator threads.
    pub load_threads: usize,
    /// Replies in the measured time.
    pub ops: u64,
    /// Replies per second.
    pub ops_per_sec: f64,
    /// Replies per second per worker.
    pub ops_per_sec_per_worker: f64,
    /// ops/s ÷ (k × one worker's ops/s at the fewest workers of the series).
    pub efficiency: Option<f64>,
    /// CPU time of the processes under test per reply, µs.
    pub server_us_per_op: f64,
    /// CPUs the processes under test kept busy.
    pub server_cpus_busy: f64,
    /// Share of the load threads' time they spent on a CPU (near 1: the load generator is
    /// the limit).
    pub load_busy: f64,
    /// Median latency, µs.
    pub p50_us: f64,
    /// 99th percentile latency, µs.
    pub p99_us: f64,
    /// Get hits ÷ gets.
    pub hit_ratio: f64,
    /// Wrong replies and failed connections.
    pub errors: u64,
    /// The command lines of the processes under test.
    pub commands: Vec<String>,
    /// A memfleet server's contention counters (`stats memfleet`), their deltas over the
    /// cell, warm-up included.
    #[serde(serialize_with = "super::engine::contention_json_opt")]
    pub contention: Option<ContentionDelta>,
}

impl NetCell {
    /// A cell from what the load measured.
    pub fn new(target: &str, workers: usize, pipeline: usize, o: &Outcome) -> NetCell {
        NetCell {
            target: target.to_string(),
            workers,
            pipeline,
            conns: 0,
            server_cpus: Vec::new(),
            load_cpus: Vec::new(),
            load_threads: o.load_threads,
            ops: o.ops,
            ops_per_sec: o.ops_per_sec,
            ops_per_sec_per_worker: o.ops_per_sec / workers as f64,
            efficiency: None,
            server_us_per_op: o.server_us_per_op,
            server_cpus_busy: o.server_cpus_busy,
            load_busy: o.load_busy,
            p50_us: o.p50_us,
            p99_us: o.p99_us,
            hit_ratio: o.hit_ratio,
            errors: o.errors,
            commands: Vec::new(),
            contention: None,
        }
    }

    /// The line printed when the cell ends.
    pub fn brief(&self) -> String {
        format!(
            "[{}] k={} pipeline {}: {:.0} ops/s ({:.0} per worker), {:.2} µs CPU/op, \
             {:.1} CPUs busy, load generator {:.0}% busy on {} threads, p99 {:.0} µs, {} errors",
            self.target,
            self.workers,
            self.pipeline,
            self.ops_per_sec,
            self.ops_per_sec_per_worker,
            self.server_us_per_op,
            self.server_cpus_busy,
            self.load_busy * 100.0,
            self.load_threads,
            self.p99_us,
            self.errors
        )
    }
}

/// Everything `scale.json` holds.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ScaleResults {
    /// The command line.
    pub command: String,
    /// The machine.
    pub machine: Machine,
    /// The resolved settings.
    pub settings: Settings,
    /// Engine cells.
    pub engine: Vec<EngineCell>,
    /// Server cells.
    pub server: Vec<NetCell>,
    /// Router cells.
    pub router: Vec<NetCell>,
    /// What was skipped or shared, and why.
    pub notes: Vec<String>,
    /// The load average when the table was printed.
    pub load_average_at_end: String,
    /// What the run was expected to take, seconds.
    pub estimated_s: f64,
    /// What it took, seconds.
    pub elapsed_s: f64,
}

impl ScaleResults {
    /// Empty results of a run on `machine` with `settings`.
    pub fn new(machine: Machine, settings: Settings) -> ScaleResults {
        ScaleResults {
            command: memfleet_results::provenance::command_line(),
            machine,
            settings,
            engine: Vec::new(),
            server: Vec::new(),
            router: Vec::new(),
            notes: Vec::new(),
            load_average_at_end: String::new(),
            estimated_s: 0.0,
            elapsed_s: 0.0,
        }
    }

    /// Fills in the efficiencies and the load average at the end.
    pub fn finish(&mut self) {
        self.load_average_at_end = memfleet_results::provenance::load_average();
        let bases: Vec<Option<f64>> = self
            .engine
            .iter()
            .map(|c| {
                self.engine
                    .iter()
                    .filter(|b| b.mix == c.mix && b.keys == c.keys)
                    .min_by_key(|b| b.threads)
                    .map(|b| b.ops_per_sec_per_thread)
            })
            .collect();
        for (c, base) in self.engine.iter_mut().zip(bases) {
            c.efficiency = base.map(|b| c.ops_per_sec_per_thread / b.max(1e-9));
        }
        net_efficiency(&mut self.server);
        net_efficiency(&mut self.router);
    }

    /// Wrong replies and failed connections of every cell.
    pub fn errors(&self) -> u64 {
        self.server
            .iter()
            .chain(&self.router)
            .map(|c| c.errors)
            .sum()
    }

    /// The table: header, engine, server and router sections, notes, command.
    pub fn table(&self) -> String {
        let mut out = format!(
            "memfleet bench scale on {}\n{} keys of {} bytes, values of {} bytes, {} MiB\n",
            self.machine.line(),
            self.settings.keys,
            self.settings.key_size,
            self.settings.value_size,
            self.settings.memory_mib
        );
        if !self.engine.is_empty() {
            out += &format!(
                "\nengine in-process ({} s per cell; Zipf {} scrambled or uniform keys; \
                 contention: counter deltas over the cell)\n",
                self.settings.engine_duration_s,
                super::engine::ZIPF_ALPHA
            );
            out += &engine_table(&self.engine);
        }
        for (name, cells) in [("server", &self.server), ("router", &self.router)] {
            if cells.is_empty() {
                continue;
            }
            out += &format!(
                "\n{name} over loopback (90% get / 10% set, uniform keys, {} s warm-up + {} s \
                 per cell; CPU/op: the {} CPU time per reply)\n",
                self.settings.warmup_s,
                self.settings.duration_s,
                if name == "server" {
                    "server"
                } else {
                    "proxies"
                }
            );
            out += &net_table(cells);
            out += &contention_table(cells);
        }
        for note in &self.notes {
            out += &format!("note: {note}\n");
        }
        out += &format!(
            "took {:.0} s (estimated {:.0} s); load average: {} at start, {} at end\n\
             command: {}\n",
            self.elapsed_s,
            self.estimated_s,
            self.machine.load_average_at_start,
            self.load_average_at_end,
            self.command
        );
        out
    }

    /// The figures, written to `dir`: ops/s against threads (the engine, one figure per
    /// key popularity) or workers (servers, proxies), a line per series and, after each,
    /// its ideal (k × the fewest's rate per thread or worker), at most 8 lines a figure so
    /// that no colour repeats. Returns their paths.
    pub fn figures(&self, dir: &Path) -> Result<Vec<PathBuf>> {
        let mut written = Vec::new();
        for keys in ["zipf", "uniform"] {
            let mut lines = Vec::new();
            for mix in super::engine::Mix::ALL.map(|m| m.name()) {
                let points = self
                    .engine
                    .iter()
                    .filter(|c| c.mix == mix && c.keys == keys)
                    .map(|c| (c.threads as f64, c.ops_per_sec))
                    .collect();
                with_ideal(&mut lines, mix.to_string(), points);
            }
            let title = format!("Engine in-process, {keys} keys: ops/s against threads");
            written.extend(figure(
                dir,
                &format!("scale-engine-{keys}"),
                &title,
                "threads",
                &lines,
            )?);
        }
        for (part, cells) in [("server", &self.server), ("router", &self.router)] {
            let mut series: Vec<(&str, usize)> = Vec::new();
            for c in cells {
                if !series.contains(&(c.target.as_str(), c.pipeline)) {
                    series.push((c.target.as_str(), c.pipeline));
                }
            }
            let mut lines = Vec::new();
            for (target, pipeline) in series {
                let points = cells
                    .iter()
                    .filter(|c| c.target == target && c.pipeline == pipeline)
                    .map(|c| (c.workers as f64, c.ops_per_sec))
                    .collect();
                with_ideal(&mut lines, format!("{target} pipeline {pipeline}"), points);
            }
            let title = format!("{part} over loopback: ops/s against workers");
            written.extend(figure(
                dir,
                &format!("scale-{part}"),
                &title,
                "workers (k)",
                &lines,
            )?);
        }
        Ok(written)
    }
}

/// Adds the series `name` and its ideal: linear from its first point.
fn with_ideal(lines: &mut Vec<Series>, name: String, points: Vec<(f64, f64)>) {
    let Some(&(k0, y0)) = points.first() else {
        return;
    };
    let ideal = points.iter().map(|&(k, _)| (k, y0 / k0 * k)).collect();
    lines.push(Series {
        name: name.clone(),
        points,
    });
    lines.push(Series {
        name: format!("ideal {name}"),
        points: ideal,
    });
}

/// Draws `lines` to `dir/name.png`, unless there are none.
fn figure(
    dir: &Path,
    name: &str,
    title: &str,
    x: &str,
    lines: &[Series],
) -> Result<Option<PathBuf>> {
    if lines.is_empty() {
        return Ok(None);
    }
    let path = dir.join(format!("{name}.png"));
    plot::line_chart(&path, title, x, "ops/s", lines, false)?;
    Ok(Some(path))
}

/// Fills each cell's efficiency against the fewest workers of its target and pipeline.
fn net_efficiency(cells: &mut [NetCell]) {
    let bases: Vec<Option<f64>> = cells
        .iter()
        .map(|c| {
            cells
                .iter()
                .filter(|b| b.target == c.target && b.pipeline == c.pipeline)
                .min_by_key(|b| b.workers)
                .map(|b| b.ops_per_sec_per_worker)
        })
        .collect();
    for (c, base) in cells.iter_mut().zip(bases) {
        c.efficiency = base.map(|b| c.ops_per_sec_per_worker / b.max(1e-9));
    }
}

const ENGINE_COLUMNS: [Column; 13] = [
    Column::left("mix", 8),
    Column::left("keys", 7),
    Column::right("threads", 7),
    Column::right("ops/s", 11),
    Column::right("ops/s/thread", 12),
    Column::right("eff", 5),
    Column::right("hits", 5),
    Column::right("evicted", 8),
    Column::right("reserve_retry", 13),
    Column::right("open_wait", 9),
    Column::right("chain_wait", 10),
    Column::right("chain_spin", 10),
    Column::right("evict_wait/grow", 15),
];

fn engine_table(cells: &[EngineCell]) -> String {
    let mut t = Table::new(&ENGINE_COLUMNS);
    for c in cells {
        let k = &c.contention;
        t.row(&[
            &c.mix,
            &c.keys,
            &c.threads,
            &format!("{:.0}", c.ops_per_sec),
            &format!("{:.0}", c.ops_per_sec_per_thread),
            &efficiency(c.efficiency),
            &format!("{:.3}", c.hit_ratio),
            &c.evicted_items,
            &k.reserve_retries,
            &k.open_lock_waits,
            &k.chain_lock_waits,
            &k.chain_lock_spins,
            &format!("{}/{}", k.evict_lock_waits, k.growth_stalls),
        ]);
    }
    t.text()
}

const NET_COLUMNS: [Column; 12] = [
    Column::left("target", 18),
    Column::right("k", 2),
    Column::right("pipe", 4),
    Column::right("conns", 5),
    Column::right("ops/s", 11),
    Column::right("ops/s/worker", 12),
    Column::right("eff", 5),
    Column::right("CPU µs/op", 9),
    Column::right("CPUs busy", 9),
    Column::right("load busy", 14),
    Column::right("p99 µs", 8),
    Column::right("errors", 6),
];

fn net_table(cells: &[NetCell]) -> String {
    let mut t = Table::new(&NET_COLUMNS);
    for c in cells {
        t.row(&[
            &c.target,
            &c.workers,
            &c.pipeline,
            &c.conns,
            &format!("{:.0}", c.ops_per_sec),
            &format!("{:.0}", c.ops_per_sec_per_worker),
            &efficiency(c.efficiency),
            &format!("{:.2}", c.server_us_per_op),
            &format!("{:.2}", c.server_cpus_busy),
            &format!("{:.0}% of {}", c.load_busy * 100.0, c.load_threads),
            &format!("{:.0}", c.p99_us),
            &c.errors,
        ]);
    }
    t.text()
}

const CONTENTION_COLUMNS: [Column; 8] = [
    Column::left("  contention of", 15),
    Column::right("k", 2),
    Column::right("pipe", 4),
    Column::right("reserve_retry", 13),
    Column::right("open_wait", 9),
    Column::right("chain_wait", 10),
    Column::right("chain_spin", 10),
    Column::right("evict_wait/grow", 15),
];

/// The contention counters of the cells that have them (memfleet servers), if any.
fn contention_table(cells: &[NetCell]) -> String {
    let with: Vec<(&NetCell, &ContentionDelta)> = cells
        .iter()
        .filter_map(|c| c.contention.as_ref().map(|k| (c, k)))
        .collect();
    if with.is_empty() {
        return String::new();
    }
    let mut t = Table::new(&CONTENTION_COLUMNS);
    for (c, k) in with {
        t.row(&[
            &format!("  {}", c.target),
            &c.workers,
            &c.pipeline,
            &k.reserve_retries,
            &k.open_lock_waits,
            &k.chain_lock_waits,
            &k.chain_lock_spins,
            &format!("{}/{}", k.evict_lock_waits, k.growth_stalls),
        ]);
    }
    "(stats memfleet: counter deltas over each cell, warm-up included)\n".to_string() + &t.text()
}

fn efficiency(e: Option<f64>) -> String {
    e.map_or("-".into(), |e| format!("{e:.2}"))
}
