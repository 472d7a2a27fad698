//! The server part of `memfleet bench scale`: for each worker count k, `memfleet server -t k`
//! and memcached `-t k`, one after the other, each started under `taskset -c` on the first
//! k usable CPUs, filled with every key, then loaded at each pipeline depth by the load
//! generator's threads on the other CPUs (`drive`). Not here: the table (`report`).

use std::net::SocketAddr;

use anyhow::{Context, Result};

use memfleet_loadgen::server_stats::StatsConn;
use memfleet_loadgen::target::{self, ServerSettings, SpawnSpec};
use memfleet_results::provenance::shell_line;
use memfleet_testkit::Spawned;

use super::drive;
use super::engine::ContentionDelta;
use super::machine::taskset_list;
use super::report::NetCell;
use super::Settings;

/// The CPUs of a run with `k` workers on `cpus`: the first k for the processes under
/// test, the rest but the last `reserved` (a backend's) for the load generator, or, when
/// none is left, the last CPU, shared with what runs there (said in `notes`).
pub fn split_cpus(
    cpus: &[usize],
    k: usize,
    reserved: usize,
    notes: &mut Vec<String>,
    what: &str,
) -> (Vec<usize>, Vec<usize>) {
    let k = k.min(cpus.len());
    let server = cpus[..k].to_vec();
    let end = cpus.len().saturating_sub(reserved).max(k);
    let mut load: Vec<usize> = cpus[k..end].to_vec();
    if load.is_empty() {
        let last = *cpus.last().expect("at least one CPU");
        notes.push(format!(
            "{what} k={k}: no CPU left for the load generator; it shares CPU {last}"
        ));
        load.push(last);
    } else if load.len() < k {
        notes.push(format!(
            "{what} k={k}: the load generator has {} CPU(s), fewer than the {k} under test",
            load.len()
        ));
    }
    (server, load)
}

/// `argv` under `taskset -c cpus`.
pub fn pinned(cpus: &[usize], argv: Vec<String>) -> Vec<String> {
    ["taskset".to_string(), "-c".into(), taskset_list(cpus)]
        .into_iter()
        .chain(argv)
        .collect()
}

/// The first line of `bin -V` (memcached's version), or None if it does not run.
pub fn version(bin: &str, flag: &str) -> Option<String> {
    let out = std::process::Command::new(bin).arg(flag).output().ok()?;
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    let line = text.lines().next()?.trim().to_string();
    (out.status.success() && !line.is_empty()).then_some(line)
}

/// Runs every server cell.
pub fn run(s: &Settings, notes: &mut Vec<String>) -> Result<Vec<NetCell>> {
    let mut targets = vec![SpawnSpec::Memfleet];
    match version(&s.memcached, "-V") {
        Some(v) => {
            notes.push(format!("memcached is {v} ({})", s.memcached));
            targets.push(SpawnSpec::Memcached);
        }
        None => notes.push(format!(
            "memcached left out: {} -V did not run (give --memcached PATH)",
            s.memcached
        )),
    }
    let spec = drive::workload_spec(s.keys, s.key_size, s.value_size)?;
    let mut cells = Vec::new();
    for &k in &s.workers {
        let (server_cpus, load_cpus) = split_cpus(&s.cpus, k, 0, notes, "server");
        let settings = ServerSettings {
            memcached_bin: s.memcached.clone(),
            memfleet_bin: s.memfleet_bin.clone(),
            threads: k as u32,
            memory_mib: s.memory_mib,
            value_size: s.value_size,
            udp: false,
        };
        for spec_of in &targets {
            let port = target::free_port()?;
            let addr: SocketAddr = ([127, 0, 0, 1], port).into();
            let argv = pinned(&server_cpus, spec_of.argv(port, &settings));
            let mut server = Spawned::start(&argv, addr, None)?;
            let command = shell_line(&server.command);
            let fill = drive::prefill(addr, &spec)
                .with_context(|| format!("filling {}", spec_of.name()))?;
            println!(
                "[{}] k={k}: started {command} (pid {}), filled {} keys in {:.2} s",
                spec_of.name(),
                server.pid(),
                s.keys,
                fill.as_secs_f64()
            );
            for &depth in &s.pipeline {
                let (addrs, pids) = ([addr], [server.pid()]);
                let load = s.cell_load((&addrs, &pids), k, depth, &load_cpus, &spec);
                let before = contention(addr, spec_of)?;
                let outcome = drive::run(&load).with_context(|| {
                    format!("loading {} k={k} pipeline {depth}", spec_of.name())
                })?;
                let mut cell = NetCell::new(spec_of.name(), k, depth, &outcome);
                cell.conns = load.conns;
                cell.server_cpus = server_cpus.clone();
                cell.load_cpus = load_cpus.clone();
                cell.commands = vec![command.clone()];
                cell.contention = contention(addr, spec_of)?
                    .zip(before)
                    .map(|(after, before)| after.since(&before));
                println!("{}", cell.brief());
                for e in &outcome.error_kinds {
                    println!("[{}]   ERROR {e}", spec_of.name());
                }
                cells.push(cell);
                server.check_alive()?;
            }
        }
    }
    Ok(cells)
}

/// A memfleet server's contention counters now (`stats memfleet`); None for memcached.
fn contention(addr: SocketAddr, server: &SpawnSpec) -> Result<Option<ContentionDelta>> {
    if *server != SpawnSpec::Memfleet {
        return Ok(None);
    }
    let (rt, local) = crate::load::runtime()?;
    let stats = local.block_on(&rt, async {
        StatsConn::connect(addr).await?.get("memfleet").await
    })?;
    let n = |name: &str| stats.int_or_zero(&format!("segcache_{name}"));
    Ok(Some(ContentionDelta::from_values(
        ContentionDelta::NAMES.map(n),
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpus_split_between_servers_and_load() {
        let mut notes = Vec::new();
        let cpus: Vec<usize> = (0..16).collect();
        let (s, l) = split_cpus(&cpus, 4, 0, &mut notes, "server");
        assert_eq!((s, l.len()), (vec![0, 1, 2, 3], 12));
        assert!(notes.is_empty());
        let (s, l) = split_cpus(&[0, 1], 1, 0, &mut notes, "server");
        assert_eq!((s, l), (vec![0], vec![1]));
        let (s, l) = split_cpus(&[0, 1], 1, 1, &mut notes, "router");
        assert_eq!((s, l), (vec![0], vec![1]));
        assert_eq!(notes.len(), 1, "{notes:?}");
        let (_, l) = split_cpus(&cpus, 8, 2, &mut notes, "router");
        assert_eq!(l, (8..14).collect::<Vec<_>>());
        assert!(notes[1].contains("fewer"), "{notes:?}");
        assert_eq!(
            pinned(&[0, 3], vec!["x".into()]),
            ["taskset", "-c", "0,3", "x"]
        );
    }
}
