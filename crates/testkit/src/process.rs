//! Child processes that never outlive their owner: [`Killed`] (a test's child, killed on
//! drop), [`Spawned`] (a server waited for until it accepts connections, stopped with
//! SIGTERM and then SIGKILL on drop, its stderr kept for errors), and `memfleet server` and
//! memcached on free ports. Not here: routers and their configuration files (`router`).

use std::fs::File;
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::ports::free_port;

/// How long a spawned server may take to accept connections.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// A child process killed (and reaped) when dropped, whatever the test's outcome.
pub struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `BIN server` (the memfleet executable `bin`) on a free 127.0.0.1 port with `extra`
/// arguments (stderr discarded); panics if it cannot be started.
pub fn memfleet_server(bin: &str, extra: &[&str]) -> (Killed, u16) {
    let port = free_port();
    let child = Command::new(bin)
        .args(["server", "-p", &port.to_string()])
        .args(extra)
        .stderr(Stdio::null())
        .spawn()
        .expect("memfleet server starts");
    (Killed(child), port)
}

/// Debian's memcached (the reference) on a free 127.0.0.1 port, TCP only, with `extra`
/// arguments; run as `nobody` so it also starts as root. Panics if it cannot be started.
pub fn memcached(extra: &[&str]) -> (Killed, u16) {
    let port = free_port();
    let child = Command::new("memcached")
        .args([
            "-u",
            "nobody",
            "-l",
            "127.0.0.1",
            "-U",
            "0",
            "-p",
            &port.to_string(),
        ])
        .args(extra)
        .stderr(Stdio::null())
        .spawn()
        .expect("Debian's memcached (scripts/test installs it)");
    (Killed(child), port)
}

/// A server process this run started; stopped on drop.
pub struct Spawned {
    child: Child,
    /// Where it listens.
    pub addr: SocketAddr,
    /// The full command line it was started with (taskset included).
    pub command: Vec<String>,
    stderr_path: PathBuf,
}

impl Spawned {
    /// `BIN server -m MEMORY_MIB -t 1` on a free 127.0.0.1 port, serving when it returns:
    /// the small server an experiment starts several of.
    pub fn memfleet_server(bin: &str, memory_mib: u64) -> Result<(Spawned, u16)> {
        let server = crate::ServerSpec::memfleet(bin, memory_mib).start()?;
        let port = server.addr.port();
        Ok((server, port))
    }

    /// Starts `argv` (under `taskset -c CPU` when `cpu` is given) and waits until `addr`
    /// accepts connections.
    pub fn start(argv: &[String], addr: SocketAddr, cpu: Option<usize>) -> Result<Spawned> {
        let mut command = Vec::new();
        if let Some(cpu) = cpu {
            command.extend(["taskset".to_string(), "-c".into(), cpu.to_string()]);
        }
        command.extend(argv.iter().cloned());
        let stderr_path = std::env::temp_dir().join(format!(
            "memfleet-bench-{}-{}.stderr",
            std::process::id(),
            addr.port()
        ));
        let stderr = File::create(&stderr_path)
            .with_context(|| format!("creating {}", stderr_path.display()))?;
        let child = Command::new(&command[0])
            .args(&command[1..])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .with_context(|| format!("starting {}", command[0]))?;
        let mut server = Spawned {
            child,
            addr,
            command,
            stderr_path,
        };
        server.wait_ready()?;
        Ok(server)
    }

    /// The server's PID: taskset execs the server, so it is the child's.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `signal` (SIGSTOP, SIGCONT, ...) without waiting for anything.
    pub fn signal(&self, signal: i32) {
        // SAFETY: kill only sends a signal to our own child, which has not been reaped
        // (it is still ours to wait for), so the PID cannot have been reused.
        unsafe { libc::kill(self.child.id() as libc::pid_t, signal) };
    }

    /// Sends `signal` and waits (up to a minute) for the process to exit successfully;
    /// returns how long that took.
    pub fn stop_with(&mut self, signal: i32) -> Result<Duration> {
        let started = Instant::now();
        // SAFETY: kill only sends a signal to our own child, which has not been reaped
        // (it is still ours to wait for), so the PID cannot have been reused.
        unsafe { libc::kill(self.child.id() as libc::pid_t, signal) };
        loop {
            if let Some(status) = self.child.try_wait()? {
                if !status.success() {
                    bail!(
                        "the server exited with {status}: {}",
                        self.stderr_text().trim()
                    );
                }
                return Ok(started.elapsed());
            }
            if started.elapsed() > Duration::from_secs(60) {
                bail!("the server did not stop within a minute of signal {signal}");
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// What the server wrote to stderr so far.
    pub fn stderr_text(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    fn wait_ready(&mut self) -> Result<()> {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait()? {
                bail!(
                    "{} exited at start ({status}): {}",
                    memfleet_results::provenance::shell_line(&self.command),
                    self.stderr_text().trim()
                );
            }
            if TcpStream::connect_timeout(&self.addr, Duration::from_millis(200)).is_ok() {
                return Ok(());
            }
            if start.elapsed() > START_TIMEOUT {
                bail!(
                    "{} did not accept connections on {} within {START_TIMEOUT:?}",
                    memfleet_results::provenance::shell_line(&self.command),
                    self.addr
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Whether the server is still running.
    pub fn check_alive(&mut self) -> Result<()> {
        if let Some(status) = self.child.try_wait()? {
            bail!(
                "the server {} died ({status}): {}",
                memfleet_results::provenance::shell_line(&self.command),
                self.stderr_text().trim()
            );
        }
        Ok(())
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            // SIGTERM first so a server can exit cleanly (and flush what it prints).
            let pid = self.child.id() as libc::pid_t;
            // SAFETY: kill only sends a signal to our own child, which has not been reaped
            // (try_wait said it is running), so the PID cannot have been reused.
            unsafe { libc::kill(pid, libc::SIGTERM) };
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(3) {
                if let Ok(Some(_)) = self.child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let _ = std::fs::remove_file(&self.stderr_path);
    }
}
