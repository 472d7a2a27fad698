//! The processes a fault test runs: `memfleet server`s that can be killed, stopped and
//! restarted on their port, and a `memfleet router` reading a TOML file, logging to a file
//! the test reads, restarted by SIGTERM and reloaded by SIGHUP.

use crate::support::{free_port, Killed};
use memfleet_routing::Ring;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The router's settings every fault test uses: a request waits 300 ms at most, three
/// failures in a row mark a server down, and a down server is probed after 200 ms (then
/// 400, 800, ... up to a minute).
pub const TIMEOUT: Duration = Duration::from_millis(300);
const POOL_SETTINGS: &str =
    "timeout_ms = 300\nserver_failure_limit = 3\nserver_retry_timeout_ms = 200\n";
/// Failures in a row that mark a server down (`server_failure_limit`).
pub const FAILURE_LIMIT: usize = 3;

/// Sends `signal` to a child of this test. For SIGSTOP and SIGCONT, returns once the child
/// is stopped (or running again): the signal is delivered asynchronously, and a child busy
/// on another CPU could otherwise answer a request sent right after SIGSTOP.
pub fn signal(child: &Killed, signal: i32) {
    let pid = i32::try_from(child.0.id()).expect("a pid fits an i32");
    // SAFETY: kill(2) with the pid of our own child (not yet reaped: `Killed` reaps it only
    // when dropped) and a standard signal number; it touches no memory of ours.
    let sent = unsafe { libc::kill(pid, signal) };
    assert_eq!(sent, 0, "kill({pid}, {signal})");
    let want_stopped = match signal {
        libc::SIGSTOP => true,
        libc::SIGCONT => false,
        _ => return,
    };
    // Every thread's state (`T`: stopped), from /proc/PID/task/*/stat.
    let stopped = || -> Option<bool> {
        let mut all = true;
        for task in std::fs::read_dir(format!("/proc/{pid}/task")).ok()? {
            let stat = std::fs::read_to_string(task.ok()?.path().join("stat")).ok()?;
            // The state follows the command name's closing parenthesis.
            let state = stat.rsplit_once(')')?.1.trim_start().chars().next()?;
            all &= state == 'T';
        }
        Some(all)
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while stopped() != Some(want_stopped) {
        assert!(
            Instant::now() < deadline,
            "pid {pid} not {} after signal {signal}",
            if want_stopped { "stopped" } else { "running" }
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// `memfleet server` on 127.0.0.1:`port` (16 MiB, one worker), answering when this returns.
pub fn server(port: u16) -> Killed {
    server_with(
        Command::new(env!("CARGO_BIN_EXE_memfleet")),
        "127.0.0.1",
        port,
    )
}

/// `memfleet server` run by `command` (the binary itself, or `ip netns exec NS` before it)
/// on `host:port`, answering when this returns.
pub fn server_with(mut command: Command, host: &str, port: u16) -> Killed {
    let child = command
        .args([
            "server",
            "-t",
            "1",
            "-m",
            "16",
            "-l",
            host,
            "-p",
            &port.to_string(),
        ])
        .stderr(Stdio::null())
        .spawn()
        .expect("memfleet server starts");
    let server = Killed(child);
    let addr: SocketAddr = format!("{host}:{port}").parse().unwrap();
    assert!(answers(addr), "memfleet server on {addr} never answered");
    server
}

/// Whether `addr` answers `version` within 10 s.
pub fn answers(addr: SocketAddr) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(s) = TcpStream::connect_timeout(&addr, Duration::from_secs(1)) {
            s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            let mut s = BufReader::new(s);
            let mut line = String::new();
            if s.get_mut().write_all(b"version\r\n").is_ok()
                && s.read_line(&mut line).is_ok()
                && line.starts_with("VERSION ")
            {
                return true;
            }
        }
        std::thread::sleep(Duration::from_millis(30));
    }
    false
}

/// One request and its one-line reply (a multi-line reply: call [`lines`]).
pub fn ask(addr: SocketAddr, request: &str) -> String {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut s = BufReader::new(s);
    s.get_mut().write_all(request.as_bytes()).unwrap();
    let mut line = String::new();
    s.read_line(&mut line).unwrap();
    line
}

/// The value of `STAT name` from `stats` at `addr` (the rest of its line).
pub fn stat(addr: SocketAddr, name: &str) -> Option<String> {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut s = BufReader::new(s);
    s.get_mut().write_all(b"stats\r\n").unwrap();
    let mut found = None;
    loop {
        let mut line = String::new();
        s.read_line(&mut line).unwrap();
        if line == "END\r\n" || line.is_empty() {
            return found;
        }
        let mut words = line.trim_end().splitn(3, ' ');
        if words.nth(1) == Some(name) {
            found = words.next().map(str::to_owned);
        }
    }
}

/// Waits up to `within` for `ok`; `false` if it never held.
pub fn eventually(within: Duration, mut ok: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    ok()
}

/// A router configuration: pool `main` over `servers` (`host:port`) on `listen`, with the
/// fault tests' timeouts; optionally a gutter route on `gutter` (`(listen port, gutter
/// server port)`) and a delete spool in `spool`.
pub fn router_toml(
    listen: u16,
    servers: &[String],
    gutter: Option<(u16, u16)>,
    spool: Option<&Path>,
) -> String {
    let list: Vec<String> = servers.iter().map(|s| format!("\"{s}\"")).collect();
    let mut out = String::new();
    if let Some(dir) = spool {
        out += &format!("[router]\nspool_dir = \"{}\"\n", dir.display());
    }
    out += &format!(
        "[pools.main]\nlisten = \"127.0.0.1:{listen}\"\nservers = [{}]\n{POOL_SETTINGS}",
        list.join(", ")
    );
    if let Some((listen, server)) = gutter {
        out += &format!(
            "[pools.gutter]\nservers = [\"127.0.0.1:{server}\"]\n{POOL_SETTINGS}\
             [routes.safe]\nlisten = \"127.0.0.1:{listen}\"\ntype = \"gutter\"\n\
             main = \"main\"\ngutter = \"gutter\"\ngutter_ttl = 10\n"
        );
    }
    out
}

/// Which of `servers` (as configured) each of `keys` is on, by pool `main` of `toml`.
pub fn placement(toml: &str, servers: &[String], keys: &[String]) -> Vec<usize> {
    let config = memfleet_routing::from_toml(toml).unwrap();
    let main = config.pools.iter().find(|p| p.name == "main").unwrap();
    let ring: Ring = main.ring().unwrap();
    keys.iter()
        .map(|k| {
            let node = ring.nodes()[ring.pick(k.as_bytes())].addr();
            servers
                .iter()
                .position(|s| *s == node)
                .expect("a configured server")
        })
        .collect()
}

/// A `memfleet router` on a configuration file in its own directory, logging to a file.
pub struct Router {
    /// Its directory (configuration, log, spool).
    pub dir: PathBuf,
    /// The configuration file.
    pub config: PathBuf,
    /// Where its log goes (stderr, appended across restarts).
    pub log: PathBuf,
    /// The running process.
    pub process: Option<Killed>,
}

impl Router {
    /// The directory a router for `test` works in (removed when the router is dropped).
    pub fn dir(test: &str) -> PathBuf {
        std::env::temp_dir().join(format!("memfleet-{test}-{}", std::process::id()))
    }

    /// Writes `toml` into a fresh [`Router::dir`] and starts a router on it; returns once
    /// `listen` answers.
    pub fn start(test: &str, toml: &str, listen: u16) -> Router {
        let dir = Router::dir(test);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut router = Router {
            config: dir.join("router.toml"),
            log: dir.join("router.log"),
            dir,
            process: None,
        };
        std::fs::write(&router.config, toml).unwrap();
        router.spawn(listen);
        router
    }

    /// (Re)starts the process; returns once `listen` answers.
    pub fn spawn(&mut self, listen: u16) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_memfleet"))
            .args(["router", "-t", "1", "--config"])
            .arg(&self.config)
            // The default spool (no spool_dir) lives in the router's directory.
            .env("MEMFLEET_STATE_DIR", self.dir.join("state"))
            .stderr(log)
            .spawn()
            .expect("memfleet router starts");
        self.process = Some(Killed(child));
        let addr = SocketAddr::from(([127, 0, 0, 1], listen));
        assert!(answers(addr), "the router never answered on {addr}");
    }

    /// SIGTERM, and waits for the process to end.
    pub fn terminate(&mut self) {
        let mut process = self.process.take().expect("running");
        signal(&process, libc::SIGTERM);
        let status = process.0.wait().unwrap();
        assert!(
            status.success(),
            "the router ended with {status} on SIGTERM"
        );
    }

    /// The log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Router {
    fn drop(&mut self) {
        drop(self.process.take());
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Three servers on free ports, and their `host:port` names.
pub fn three_servers() -> (Vec<Option<Killed>>, Vec<u16>, Vec<String>) {
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let servers = ports.iter().map(|&p| Some(server(p))).collect();
    let names = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    (servers, ports, names)
}
