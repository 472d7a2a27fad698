//! `memfleet fleet up|down|status`: a complete small deployment on loopback, from one
//! command — what a newcomer runs to see the system, and what scenario tests build on.
//!
//! `up` starts, as background processes of this same executable:
//! - two frontend clusters (`c1`, `c2`) of `--servers` memfleet servers each,
//! - a gutter pool (one server) and a regional pool (one server),
//! - one router per cluster, in front of its own cluster, whose route (see
//!   `router-c1.toml` in the directory) sends keys under `/regional/` to the regional pool
//!   with the prefix stripped (every operation, deletes included), and other keys' gets and
//!   sets to the local cluster with the gutter behind it and their deletes to both
//!   clusters (broadcast, spooled when a server is down),
//!
//! and with `--regions 2` a replica region beside it (`regions`: its own cluster, gutter,
//! regional pool and router, a PostgreSQL 16 primary and streaming standby, an invalidator
//! per region reading its own region's database),
//!
//! writes every process id to `<dir>/pids`, waits until every process listens on its port
//! (its own socket: a port another process holds does not count) and prints how to reach
//! them. If one exits or does not listen in time, `up` fails with its log's last lines and
//! stops the others (no pids file is left). `down` stops what `pids` lists. Ports are `--base-port` + a fixed
//! offset, so a fleet's addresses are predictable.

mod regions;

use anyhow::{bail, Context};
use memfleet_testkit::RouterConfig;
use std::fmt::Write as _;
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `memfleet fleet` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum FleetCommand {
    /// Start a local fleet in the background and print its addresses.
    Up(UpArgs),
    /// Stop the fleet started in DIR.
    Down(DirArgs),
    /// Say which of the fleet's processes are running.
    Status(DirArgs),
}

/// Where a fleet keeps its files.
#[derive(clap::Args, Debug)]
pub struct DirArgs {
    /// The fleet's directory (configs, logs, pids, spools).
    #[arg(long, default_value = "/tmp/memfleet-fleet")]
    pub dir: PathBuf,
}

/// `fleet up` flags.
#[derive(clap::Args, Debug)]
pub struct UpArgs {
    #[command(flatten)]
    pub dir: DirArgs,
    /// Ports are this plus fixed offsets (servers +1.., routers +100 and +200).
    #[arg(long, default_value_t = 21000)]
    pub base_port: u16,
    /// Servers per frontend cluster.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..=20))]
    pub servers: u16,
    /// Item memory per server, MiB.
    #[arg(long, default_value_t = 64)]
    pub memory: u32,
    /// 2: a replica region too (Facebook §5), with a PostgreSQL 16 primary and standby and
    /// an invalidator per region (needs scripts/postgres16 or MEMFLEET_POSTGRES_BIN).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=2))]
    pub regions: u8,
    /// With --regions 2: how far the standby's replay stays behind the primary, in
    /// milliseconds (PostgreSQL's recovery_min_apply_delay), to watch the replica region
    /// read old rows for that long after a commit, and its invalidator's deletes follow.
    #[arg(long, default_value_t = 0, value_name = "MS")]
    pub standby_delay: u64,
}

/// One process of the fleet.
struct Member {
    name: String,
    port: u16,
    args: Vec<String>,
}

/// The kernel's ephemeral port range (`net.ipv4.ip_local_port_range`; Linux's default when
/// it cannot be read).
fn ephemeral_ports() -> (u16, u16) {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| {
            let mut it = s.split_whitespace().map(|n| n.parse::<u16>().ok());
            Some((it.next()??, it.next()??))
        })
        .unwrap_or((32768, 60999))
}

/// The fleet's layout: servers, then routers; and the routers' configuration files (name,
/// text).
fn layout(up: &UpArgs) -> (Vec<Member>, Vec<(String, String)>) {
    let base = up.base_port;
    let server = |name: String, port: u16| Member {
        name,
        port,
        args: vec![
            "server".into(),
            "-p".into(),
            port.to_string(),
            "-m".into(),
            up.memory.to_string(),
            "-t".into(),
            "1".into(),
        ],
    };
    let mut members = Vec::new();
    let mut clusters: Vec<Vec<u16>> = Vec::new();
    for (c, offset) in [(1u16, 1u16), (2, 11)] {
        let ports: Vec<u16> = (0..up.servers).map(|i| base + offset + i).collect();
        for (i, &p) in ports.iter().enumerate() {
            members.push(server(format!("c{c}-server{}", i + 1), p));
        }
        clusters.push(ports);
    }
    // Cluster 2's servers start at +11; more than 10 servers per cluster would overlap.
    let gutter = base + 41;
    let regional = base + 51;
    members.push(server("gutter".into(), gutter));
    members.push(server("regional".into(), regional));
    // A replica region: one cluster (+61..), its own gutter and regional pool.
    let replica: Vec<u16> = (0..up.servers).map(|i| base + 61 + i).collect();
    let (r2_gutter, r2_regional) = (base + 91, base + 92);
    if up.regions == 2 {
        for (i, &p) in replica.iter().enumerate() {
            members.push(server(format!("r2-server{}", i + 1), p));
        }
        members.push(server("r2-gutter".into(), r2_gutter));
        members.push(server("r2-regional".into(), r2_regional));
    }
    // A router in front of cluster `local`; deletes go to it and to `other` (none in a
    // region of one cluster).
    let router_config =
        |local: &[u16], other: &[u16], gutter: u16, regional: u16, listen: u16, spool: &str| {
            let mut c = RouterConfig::new();
            c.section("router").set_str("spool_dir", spool);
            for (name, ports) in [
                ("local", local),
                ("other", other),
                ("gutter", &[gutter][..]),
                ("regional", &[regional][..]),
            ] {
                if !ports.is_empty() {
                    c.pool(name, ports).quick_failover();
                }
            }
            // The prefix route comes first, for every operation: a `/regional/` key's delete
            // must reach the regional pool with the prefix stripped, as its set did (a delete
            // broadcast placed before the prefix route would carry the prefix and find nothing).
            c.route("front", "prefix")
                .listen(listen)
                .set("prefixes", "{ \"/regional/\" = \"regional\" }")
                .set("strip", true)
                .set_str("default", "by_operation");
            c.route("by_operation", "operation")
                .set_str("delete", "invalidate")
                .set_str("default", "cache");
            c.gutter_route("cache", "local", "gutter", 10);
            let to: &[&str] = if other.is_empty() {
                &["local"]
            } else {
                &["local", "other"]
            };
            c.route("invalidate", "broadcast")
                .set_str("mode", "all-sync")
                .set_strs("to", to);
            c.text()
        };
    let dir = up.dir.dir.display().to_string();
    let mut configs = vec![
        (
            "router-c1".to_string(),
            router_config(
                &clusters[0],
                &clusters[1],
                gutter,
                regional,
                base + 100,
                &format!("{dir}/spool-r1"),
            ),
        ),
        (
            "router-c2".to_string(),
            router_config(
                &clusters[1],
                &clusters[0],
                gutter,
                regional,
                base + 200,
                &format!("{dir}/spool-r2"),
            ),
        ),
    ];
    let mut routers = vec![("router-c1", base + 100), ("router-c2", base + 200)];
    if up.regions == 2 {
        let port = regions::ReplicaPorts::of(base).router;
        configs.push((
            "router-r2".to_string(),
            router_config(
                &replica,
                &[],
                r2_gutter,
                r2_regional,
                port,
                &format!("{dir}/spool-router-r2"),
            ),
        ));
        routers.push(("router-r2", port));
    }
    for (name, port) in routers {
        members.push(Member {
            name: name.into(),
            port,
            args: vec![
                "router".into(),
                "-t".into(),
                "1".into(),
                "--config".into(),
                format!("{dir}/{name}.toml"),
            ],
        });
    }
    (members, configs)
}

/// Runs a `memfleet fleet` subcommand.
pub fn run(command: &FleetCommand) -> anyhow::Result<()> {
    match command {
        FleetCommand::Up(up) => self::up(up),
        FleetCommand::Down(d) => down(&d.dir),
        FleetCommand::Status(d) => status(&d.dir),
    }
}

fn up(up: &UpArgs) -> anyhow::Result<()> {
    let dir = &up.dir.dir;
    if dir.join("pids").exists() {
        bail!(
            "a fleet is already up in {} (memfleet fleet down --dir {0})",
            dir.display()
        );
    }
    if up.servers > 10 {
        bail!("--servers is at most 10 (the clusters' port ranges would overlap)");
    }
    if up.standby_delay > 0 && up.regions != 2 {
        bail!("--standby-delay holds back the replica region's standby: it needs --regions 2");
    }
    // The fleet's ports run from the base to base + 350 (the replica region's metrics): none may lie
    // in the kernel's ephemeral range, where a listener can lose its port to an outgoing
    // connection's source port before it binds.
    let (low, high) = ephemeral_ports();
    let top = u32::from(up.base_port) + 350;
    if u32::from(up.base_port) <= u32::from(high) && top >= u32::from(low) {
        bail!(
            "--base-port {} puts the fleet's ports ({}..={top}) in the kernel's ephemeral \
             range ({low}-{high}, net.ipv4.ip_local_port_range), where an outgoing connection \
             can take a port before its listener binds it: pick one below {}",
            up.base_port,
            up.base_port,
            u32::from(low).saturating_sub(350)
        );
    }
    if top > u32::from(u16::MAX) {
        bail!(
            "--base-port {} leaves no room for the fleet's ports (up to base + 350)",
            up.base_port
        );
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let (mut members, configs) = layout(up);
    for (name, text) in configs {
        std::fs::write(dir.join(format!("{name}.toml")), text)?;
    }
    if up.regions == 2 {
        // The databases first: the invalidators, started last, need them. Stopped again if
        // anything after fails before the processes are started.
        let dbs = regions::start_databases(dir, up.standby_delay)?;
        let written = regions_configs(up, dir, &dbs);
        if let Err(e) = written {
            let _ = regions::stop_databases(dir);
            return Err(e);
        }
        members.extend(
            regions::invalidators(
                &dir.display().to_string(),
                &regions::ReplicaPorts::of(up.base_port),
            )
            .into_iter()
            .map(|(name, port, args)| Member { name, port, args }),
        );
    }
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => {
            let _ = regions::stop_databases(dir);
            return Err(e).context("finding the memfleet executable");
        }
    };
    let mut pids = String::new();
    let mut started: Vec<(&Member, Child)> = Vec::new();
    for m in &members {
        let spawned = std::fs::File::create(dir.join(format!("{}.log", m.name)))
            .and_then(|log| Ok((log.try_clone()?, log)))
            .and_then(|(out, err)| {
                Command::new(&exe)
                    .args(&m.args)
                    .stdin(Stdio::null())
                    .stdout(out)
                    .stderr(err)
                    // Its own process group: the fleet outlives this command and a
                    // terminal's ^C.
                    .process_group(0)
                    .spawn()
            });
        let child = match spawned {
            Ok(child) => child,
            Err(e) => {
                stop(&mut started);
                let _ = std::fs::remove_file(dir.join("pids"));
                let _ = regions::stop_databases(dir);
                return Err(e).with_context(|| format!("starting {}", m.name));
            }
        };
        let _ = writeln!(pids, "{} {} {}", child.id(), m.name, m.port);
        started.push((m, child));
        // Written as we go, so that `down` can stop a fleet this command could not.
        if let Err(e) = std::fs::write(dir.join("pids"), &pids) {
            stop(&mut started);
            let _ = std::fs::remove_file(dir.join("pids"));
            let _ = regions::stop_databases(dir);
            return Err(e).context("writing the pids file");
        }
    }
    if let Err(failed) = wait_listening(&mut started) {
        stop(&mut started);
        let _ = std::fs::remove_file(dir.join("pids"));
        let _ = regions::stop_databases(dir);
        let mut report = String::new();
        for (m, why) in &failed {
            let log = dir.join(format!("{}.log", m.name));
            let _ = writeln!(
                report,
                "{} (127.0.0.1:{}) {why}; the end of {}:",
                m.name,
                m.port,
                log.display()
            );
            for line in log_tail(&log, 10) {
                let _ = writeln!(report, "{}", format!("    {line}").trim_end());
            }
        }
        bail!(
            "the fleet did not start: {} of {} processes failed; stopped the other {}\n{}",
            failed.len(),
            started.len(),
            started.len() - failed.len(),
            report.trim_end()
        );
    }
    let base = up.base_port;
    println!("memfleet fleet up in {}:", dir.display());
    for m in &members {
        println!("  {:<20} 127.0.0.1:{}", m.name, m.port);
    }
    for (name, port) in regions::database_ports(dir) {
        println!("  {name:<20} 127.0.0.1:{port} (user postgres, database postgres)");
    }
    if up.regions == 2 {
        println!(
            "\nTwo regions: writes go to postgres-primary, in one transaction with \
             SELECT pg_logical_emit_message(true, 'memfleet', 'KEY ...'); invalidator-master \
             deletes the keys through router-c1/router-c2 once committed, invalidator-replica \
             through router-r2 once the standby replayed them (metrics at /metrics on their \
             ports)."
        );
    }
    println!(
        "\nClients talk to a cluster's router, e.g. (bash alone, no nc needed)\n  \
         exec 3<>/dev/tcp/127.0.0.1/{}; printf 'set k 0 0 2\\r\\nhi\\r\\nget k\\r\\n' >&3; \
         timeout 1 cat <&3; exec 3<&-\n\
         Keys under /regional/ live in the regional pool; other keys' deletes reach both \
         clusters.\n\
         Routes: {}/router-c1.toml. Stop with: memfleet fleet down --dir {}",
        base + 100,
        dir.display(),
        dir.display()
    );
    Ok(())
}

/// Writes the two invalidators' configuration files of a two-region fleet.
fn regions_configs(up: &UpArgs, dir: &Path, dbs: &regions::Databases) -> anyhow::Result<()> {
    let ports = regions::ReplicaPorts::of(up.base_port);
    let d = dir.display().to_string();
    let base = up.base_port;
    for (name, db, primary, routers, metrics) in [
        (
            "master",
            &dbs.primary,
            None,
            vec![base + 100, base + 200],
            ports.metrics_master,
        ),
        (
            "replica",
            &dbs.standby,
            Some(&dbs.primary),
            vec![ports.router],
            ports.metrics_replica,
        ),
    ] {
        let text = regions::invalidator_config(name, db, primary, &routers, metrics, &d);
        std::fs::write(dir.join(format!("invalidator-{name}.toml")), text)?;
    }
    Ok(())
}

/// How long `up` waits for every process to listen.
const START_DEADLINE: Duration = Duration::from_secs(20);

/// Waits until every started process listens on its own port, or has exited, or the
/// deadline passes. A port that answers is not enough: another process may hold it (this
/// one then fails to bind and exits). `Err`: every process that exited or did not listen
/// in time, and why (all of them, when all their ports were taken).
fn wait_listening<'a>(
    started: &mut [(&'a Member, Child)],
) -> Result<(), Vec<(&'a Member, String)>> {
    let deadline = Instant::now() + START_DEADLINE;
    let mut waiting: Vec<usize> = (0..started.len()).collect();
    let mut failed = Vec::new();
    while !waiting.is_empty() {
        if Instant::now() > deadline {
            let why = format!("did not listen within {}s", START_DEADLINE.as_secs());
            failed.extend(waiting.iter().map(|&i| (started[i].0, why.clone())));
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
        waiting.retain(|&i| {
            let (m, child) = &mut started[i];
            match child.try_wait() {
                Ok(Some(status)) => {
                    failed.push((*m, format!("exited ({status})")));
                    false
                }
                Err(e) => {
                    failed.push((*m, format!("cannot be watched ({e})")));
                    false
                }
                Ok(None) => !listens(child.id(), m.port),
            }
        });
    }
    if failed.is_empty() {
        Ok(())
    } else {
        // In the fleet's order.
        failed.sort_by_key(|(m, _)| started.iter().position(|(s, _)| std::ptr::eq(*s, *m)));
        Err(failed)
    }
}

/// Whether 127.0.0.1:`port` accepts connections and the listening socket is process
/// `pid`'s (found through `/proc`: the socket's inode among the process's descriptors).
/// Without a readable `/proc/net/tcp`, a connection that succeeds is taken as enough.
fn listens(pid: u32, port: u16) -> bool {
    let mut inodes = Vec::new();
    let mut readable = false;
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        readable = true;
        // "sl local_address rem_address st ... uid timeout inode": the local port is the
        // hex after the colon, st 0A is LISTEN, the inode is the tenth field.
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            let local_port = f
                .get(1)
                .and_then(|a| a.rsplit_once(':'))
                .and_then(|(_, p)| u16::from_str_radix(p, 16).ok());
            if local_port == Some(port) && f.get(3) == Some(&"0A") {
                if let Some(inode) = f.get(9) {
                    inodes.push(format!("socket:[{inode}]"));
                }
            }
        }
    }
    let owned = !readable
        || std::fs::read_dir(format!("/proc/{pid}/fd")).is_ok_and(|mut fds| {
            fds.any(|fd| {
                fd.and_then(|fd| std::fs::read_link(fd.path()))
                    .is_ok_and(|target| inodes.iter().any(|i| target.as_os_str() == i.as_str()))
            })
        });
    owned && TcpStream::connect(("127.0.0.1", port)).is_ok()
}

/// The last `n` lines of a log file before any stack backtrace (none when it cannot be
/// read): with `RUST_BACKTRACE` set, the error a process exited with comes before one.
fn log_tail(path: &Path, n: usize) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut lines: Vec<&str> = text.lines().collect();
    if let Some(at) = lines
        .iter()
        .rposition(|l| l.trim().eq_ignore_ascii_case("stack backtrace:"))
    {
        lines.truncate(at);
    }
    while lines.last().is_some_and(|l| l.trim().is_empty()) {
        lines.pop();
    }
    lines[lines.len().saturating_sub(n)..]
        .iter()
        .map(|l| l.to_string())
        .collect()
}

/// Stops processes this command started (SIGTERM, then SIGKILL after a while) and reaps
/// them.
fn stop(started: &mut [(&Member, Child)]) {
    for (_, child) in started.iter_mut() {
        // Only a child not yet reaped: a reaped one's pid may belong to another process.
        if matches!(child.try_wait(), Ok(None)) {
            signal(child.id() as i32, libc::SIGTERM);
        }
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    for (_, child) in started.iter_mut() {
        while matches!(child.try_wait(), Ok(None)) {
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// (pid, name, port) of every process `pids` lists.
fn members(dir: &Path) -> anyhow::Result<Vec<(i32, String, u16)>> {
    let text = std::fs::read_to_string(dir.join("pids"))
        .with_context(|| format!("no fleet in {} (no pids file)", dir.display()))?;
    text.lines()
        .map(|l| {
            let mut w = l.split_whitespace();
            let parsed = (|| {
                Some((
                    w.next()?.parse().ok()?,
                    w.next()?.to_string(),
                    w.next()?.parse().ok()?,
                ))
            })();
            parsed.with_context(|| format!("bad line in pids: {l:?}"))
        })
        .collect()
}

/// Whether `pid` is a live process (a zombie, exited but not yet reaped, is not).
fn alive(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // "pid (comm) S ...": the state follows the last ')'.
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.trim_start().chars().next())
        .is_some_and(|state| state != 'Z' && state != 'X')
}

fn signal(pid: i32, sig: libc::c_int) {
    // SAFETY: kill takes no pointers; at worst it fails (ESRCH) for a pid that is gone.
    unsafe { libc::kill(pid, sig) };
}

fn down(dir: &Path) -> anyhow::Result<()> {
    let members = match members(dir) {
        Ok(members) => members,
        // No processes, but maybe databases a failed `up` left.
        Err(e) => {
            let databases = regions::stop_databases(dir)?;
            if databases == 0 {
                return Err(e);
            }
            println!(
                "memfleet fleet in {}: {databases} databases stopped",
                dir.display()
            );
            return Ok(());
        }
    };
    for (pid, _, _) in &members {
        signal(*pid, libc::SIGTERM);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    for (pid, name, _) in &members {
        while alive(*pid) {
            if Instant::now() > deadline {
                signal(*pid, libc::SIGKILL);
                eprintln!("{name} ({pid}) did not stop in time: killed");
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    std::fs::remove_file(dir.join("pids"))?;
    let databases = regions::stop_databases(dir)?;
    println!(
        "memfleet fleet in {} stopped ({} processes{})",
        dir.display(),
        members.len(),
        if databases > 0 {
            format!(", {databases} databases")
        } else {
            String::new()
        }
    );
    Ok(())
}

fn status(dir: &Path) -> anyhow::Result<()> {
    for (pid, name, port) in members(dir)? {
        let state = if alive(pid) { "running" } else { "stopped" };
        println!("{name:<20} 127.0.0.1:{port:<6} pid {pid:<8} {state}");
    }
    for (name, port) in regions::database_ports(dir) {
        let state = if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            "running"
        } else {
            "stopped"
        };
        println!("{name:<20} 127.0.0.1:{port:<6} {state}");
    }
    Ok(())
}
