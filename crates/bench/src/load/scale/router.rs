//! The router part of `memfleet bench scale`: `memfleet router -t k` against nutcracker
//! deployed as it is in production, one single-threaded process per core (k processes,
//! the load's connections spread evenly over them), and `memfleet router -t 1` deployed
//! the same way (`memfleet-router-pc`; at k = 1 the same as `-t 1`, its own base), all reading the same twemproxy YAML
//! (`--twemproxy`) in front of the same backend, a `memfleet server` on the last CPUs.
//! Proxies run on the first k CPUs, the load generator on the CPUs between. Not here:
//! the load (`drive`), the table (`report`).

use memfleet_testkit::ServerSpec;
use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{Context, Result};

use memfleet_loadgen::target::free_port;
use memfleet_results::provenance::shell_line;
use memfleet_testkit::Spawned;

use super::drive;
use super::report::NetCell;
use super::server::{pinned, split_cpus, version};
use super::Settings;

/// Backend CPUs for proxies with up to `k` workers: one per four proxy workers.
fn backend_cpus(k: usize) -> usize {
    k.div_ceil(4)
}

/// The worker counts of the router part: those of `s` that leave the load generator at
/// least k CPUs beside k proxy CPUs and the backend's, or all of them when given with
/// --workers; at least k = 1 (on 2 CPUs the load then shares the backend's).
pub fn workers(s: &Settings) -> Vec<usize> {
    if s.workers_given {
        return s.workers.clone();
    }
    let fit: Vec<usize> = s
        .workers
        .iter()
        .copied()
        .filter(|&k| 2 * k + backend_cpus(k) <= s.cpus.len())
        .collect();
    if fit.is_empty() {
        vec![1]
    } else {
        fit
    }
}

/// A twemproxy pool listening on `port` in front of `backend`.
fn yaml(port: u16, backend: SocketAddr) -> String {
    format!(
        "scale:\n  listen: 127.0.0.1:{port}\n  hash: fnv1a_64\n  distribution: ketama\n  \
         timeout: 1000\n  servers:\n   - {backend}:1\n"
    )
}

/// Configuration files written for the run, removed when dropped.
struct Files(Vec<PathBuf>);

impl Files {
    fn write(&mut self, port: u16, text: &str) -> Result<String> {
        let path = std::env::temp_dir().join(format!(
            "memfleet-bench-scale-{}-{port}.yml",
            std::process::id()
        ));
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        self.0.push(path.clone());
        Ok(path.display().to_string())
    }
}

impl Drop for Files {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// The proxies of one cell: their processes and the addresses they listen on.
struct Proxies {
    name: &'static str,
    processes: Vec<Spawned>,
    addrs: Vec<SocketAddr>,
}

/// `memfleet router -t k` on `cpus`.
fn memfleet_router(
    s: &Settings,
    cpus: &[usize],
    backend: SocketAddr,
    files: &mut Files,
) -> Result<Proxies> {
    let port = free_port()?;
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let config = files.write(port, &yaml(port, backend))?;
    let argv = [&s.memfleet_bin, "router", "-t", &cpus.len().to_string()]
        .map(String::from)
        .into_iter()
        .chain(["--twemproxy".to_string(), config])
        .collect();
    let router = Spawned::start(&pinned(cpus, argv), addr, None)?;
    Ok(Proxies {
        name: "memfleet-router",
        processes: vec![router],
        addrs: vec![addr],
    })
}

/// One single-threaded proxy per CPU of `cpus`, each on a port of its own with its own copy
/// of the file (the load is spread evenly over them): `argv` makes a proxy's command line
/// from its configuration file.
fn one_per_core(
    name: &'static str,
    cpus: &[usize],
    backend: SocketAddr,
    files: &mut Files,
    argv: impl Fn(String) -> Result<Vec<String>>,
) -> Result<Proxies> {
    let mut proxies = Proxies {
        name,
        processes: Vec::new(),
        addrs: Vec::new(),
    };
    for &cpu in cpus {
        let port = free_port()?;
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let config = files.write(port, &yaml(port, backend))?;
        proxies
            .processes
            .push(Spawned::start(&pinned(&[cpu], argv(config)?), addr, None)?);
        proxies.addrs.push(addr);
    }
    Ok(proxies)
}

/// One `memfleet router -t 1` per CPU of `cpus`, deployed as nutcracker is.
fn memfleet_routers_per_core(
    s: &Settings,
    cpus: &[usize],
    backend: SocketAddr,
    files: &mut Files,
) -> Result<Proxies> {
    one_per_core("memfleet-router-pc", cpus, backend, files, |config| {
        Ok(
            [&s.memfleet_bin, "router", "-t", "1", "--twemproxy", &config]
                .map(String::from)
                .to_vec(),
        )
    })
}

/// One nutcracker per CPU of `cpus` (its stats port on a free port of its own).
fn nutcrackers(
    s: &Settings,
    cpus: &[usize],
    backend: SocketAddr,
    files: &mut Files,
) -> Result<Proxies> {
    one_per_core("nutcracker", cpus, backend, files, |config| {
        Ok(vec![
            s.nutcracker.clone(),
            "-c".into(),
            config,
            "-s".into(),
            free_port()?.to_string(),
            "-a".into(),
            "127.0.0.1".into(),
            "-o".into(),
            "/dev/null".into(),
        ])
    })
}

/// Runs every router cell.
pub fn run(s: &Settings, notes: &mut Vec<String>) -> Result<Vec<NetCell>> {
    let workers = workers(s);
    let have_nutcracker = match version(&s.nutcracker, "-V") {
        Some(v) => {
            notes.push(format!("nutcracker is {v} ({})", s.nutcracker));
            true
        }
        None => {
            notes.push(format!(
                "nutcracker left out: {} -V did not run (give --nutcracker PATH)",
                s.nutcracker
            ));
            false
        }
    };
    let b = backend_cpus(workers.iter().copied().max().unwrap_or(1));
    let n = s.cpus.len();
    let backend_cpus = s.cpus[n.saturating_sub(b)..].to_vec();
    let spec = drive::workload_spec(s.keys, s.key_size, s.value_size)?;
    let backend_port = free_port()?;
    let backend: SocketAddr = ([127, 0, 0, 1], backend_port).into();
    let argv = ServerSpec::memfleet(&s.memfleet_bin, s.memory_mib)
        .threads(b)
        .argv(backend_port);
    let mut server = Spawned::start(&pinned(&backend_cpus, argv), backend, None)?;
    let fill = drive::prefill(backend, &spec).context("filling the backend")?;
    println!(
        "[router] backend: {} (pid {}), filled {} keys in {:.2} s",
        shell_line(&server.command),
        server.pid(),
        s.keys,
        fill.as_secs_f64()
    );
    let mut files = Files(Vec::new());
    let mut cells = Vec::new();
    for &k in &workers {
        let (proxy_cpus, load_cpus) = split_cpus(&s.cpus, k, b, notes, "router");
        let mut kinds = vec![memfleet_router(s, &proxy_cpus, backend, &mut files)?];
        kinds.push(memfleet_routers_per_core(
            s,
            &proxy_cpus,
            backend,
            &mut files,
        )?);
        if have_nutcracker {
            kinds.push(nutcrackers(s, &proxy_cpus, backend, &mut files)?);
        }
        for mut proxies in kinds {
            let pids: Vec<u32> = proxies.processes.iter().map(Spawned::pid).collect();
            let commands: Vec<String> = proxies
                .processes
                .iter()
                .map(|p| shell_line(&p.command))
                .collect();
            println!("[{}] k={k}: started {}", proxies.name, commands.join("; "));
            for &depth in &s.pipeline {
                let load = s.cell_load((&proxies.addrs, &pids), k, depth, &load_cpus, &spec);
                let outcome = drive::run(&load)
                    .with_context(|| format!("loading {} k={k} pipeline {depth}", proxies.name))?;
                let mut cell = NetCell::new(proxies.name, k, depth, &outcome);
                cell.conns = load.conns;
                cell.server_cpus = proxy_cpus.clone();
                cell.load_cpus = load_cpus.clone();
                cell.commands = commands.clone();
                println!("{}", cell.brief());
                for e in &outcome.error_kinds {
                    println!("[{}]   ERROR {e}", proxies.name);
                }
                cells.push(cell);
                for p in &mut proxies.processes {
                    p.check_alive()?;
                }
                server.check_alive()?;
            }
        }
    }
    Ok(cells)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pool_file_names_the_listener_and_the_backend() {
        let text = yaml(7, "127.0.0.1:9".parse().unwrap());
        assert!(text.contains("listen: 127.0.0.1:7\n"), "{text}");
        assert!(text.contains("   - 127.0.0.1:9:1\n"), "{text}");
        assert_eq!(
            (backend_cpus(1), backend_cpus(4), backend_cpus(8)),
            (1, 1, 2)
        );
    }
}
