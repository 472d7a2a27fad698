//! The processes of `memfleet bench admission`: `memfleet server`s on free loopback ports
//! and a `memfleet router -t N` on a configuration file of its own (removed with it), and
//! reading their `stats`. Not here: what the configuration says (`storm`, `stall`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use memfleet_testkit::Spawned;

use crate::load::server_stats::{Stats, StatsConn};
use crate::load::target::free_port;

/// `memfleet server -t 1 -m 64` on a free port.
pub(super) fn server(bin: &str) -> Result<Spawned> {
    Ok(Spawned::memfleet_server(bin, 64)?.0)
}

/// `n` servers.
pub(super) fn servers(bin: &str, n: usize) -> Result<Vec<Spawned>> {
    (0..n).map(|_| server(bin)).collect()
}

/// A `memfleet router` with its configuration file.
pub(super) struct RouterProcess {
    pub spawned: Spawned,
    config: PathBuf,
}

impl RouterProcess {
    /// Writes `config` and starts `bin router -t threads --config FILE`; returns once every
    /// address of `listens` (the configuration's listeners) accepts connections.
    pub(super) fn start(
        bin: &str,
        threads: usize,
        config: &str,
        listens: &[SocketAddr],
    ) -> Result<RouterProcess> {
        let first = *listens.first().context("a router needs a listener")?;
        let path = std::env::temp_dir().join(format!(
            "memfleet-bench-admission-{}-{}.toml",
            std::process::id(),
            first.port()
        ));
        std::fs::write(&path, config).with_context(|| format!("writing {}", path.display()))?;
        let argv: Vec<String> = [bin, "router", "-t", &threads.to_string(), "--config"]
            .map(String::from)
            .into_iter()
            .chain([path.display().to_string()])
            .collect();
        let router = RouterProcess {
            spawned: match Spawned::start(&argv, first, None) {
                Ok(s) => s,
                Err(e) => {
                    let _ = std::fs::remove_file(&path);
                    return Err(e);
                }
            },
            config: path,
        };
        let started = Instant::now();
        for addr in &listens[1..] {
            while std::net::TcpStream::connect_timeout(addr, Duration::from_millis(200)).is_err() {
                if started.elapsed() > Duration::from_secs(10) {
                    bail!("the router did not listen on {addr} within 10 s");
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        Ok(router)
    }
}

impl Drop for RouterProcess {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.config);
    }
}

/// `[pools.NAME]` with `servers` and `listen`, then `extra` lines (`key = value`).
pub(super) fn pool_section(
    name: &str,
    listen: SocketAddr,
    servers: &[Spawned],
    extra: &[String],
) -> String {
    let list: Vec<String> = servers.iter().map(|s| format!("\"{}\"", s.addr)).collect();
    let mut text = format!(
        "[pools.{name}]\nlisten = \"{listen}\"\nservers = [{}]\n",
        list.join(", ")
    );
    for line in extra {
        text.push_str(line);
        text.push('\n');
    }
    text
}

/// Puts the calling thread (and what it starts from now on: threads and child processes
/// inherit it) under SCHED_IDLE, which runs only when no other thread wants the CPU.
pub(super) fn schedule_idle() -> Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `param` is a valid sched_param for the call's duration; pid 0 is this thread.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) } != 0 {
        bail!(
            "sched_setscheduler(SCHED_IDLE): {}",
            std::io::Error::last_os_error()
        );
    }
    Ok(())
}

/// Fails unless process `pid` runs under SCHED_IDLE.
pub(super) fn check_idle(pid: u32) -> Result<()> {
    let pid = libc::pid_t::try_from(pid).context("pid")?;
    // SAFETY: a plain query of another process's policy; no memory is passed.
    let policy = unsafe { libc::sched_getscheduler(pid) };
    if policy != libc::SCHED_IDLE {
        bail!("process {pid} runs under scheduling policy {policy}, not SCHED_IDLE");
    }
    Ok(())
}

/// A free loopback address.
pub(super) fn free_addr() -> Result<SocketAddr> {
    Ok(([127, 0, 0, 1], free_port()?).into())
}

/// One `stats` of `addr` on a connection of its own.
pub(super) async fn stats_once(addr: SocketAddr) -> Result<Stats> {
    StatsConn::connect(addr).await?.get("").await
}

/// The sum of `cmd_get` over `servers` (each asked on a connection of its own).
pub(super) async fn cmd_gets(servers: &[SocketAddr]) -> Result<u64> {
    let mut total = 0;
    for &s in servers {
        total += stats_once(s)
            .await?
            .int("cmd_get")
            .with_context(|| format!("no cmd_get in {s}'s stats"))?;
    }
    Ok(total)
}
