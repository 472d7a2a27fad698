//! systemd's readiness protocol (`sd_notify(3)`) as the units' `Type=notify` relies on it,
//! through real processes: each test binds its own unix datagram socket, starts `memfleet`
//! with `NOTIFY_SOCKET` naming it, and checks what arrives against what the process serves
//! at that moment. `READY=1` must come only once every listener accepts (checked the moment
//! it arrives), `STOPPING=1` on SIGTERM, and for the router the reload protocol of
//! `Type=notify-reload` around SIGHUP (`RELOADING=1` + `MONOTONIC_USEC`, then `READY=1` once
//! the new configuration serves).

use crate::support;

use memfleet_server::{Server, Settings};
use memfleet_testkit::{free_port, Postgres, RouterConfig};
use std::io::{Read, Write};
use std::net::{TcpStream, UdpSocket};
use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use support::Killed;

const EXE: &str = env!("CARGO_BIN_EXE_memfleet");

/// The tests pick free ports and start processes on them: one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// A scratch directory and the notification socket in it, removed on drop.
struct Notify {
    dir: PathBuf,
    socket: UnixDatagram,
}

impl Notify {
    fn new(name: &str) -> Notify {
        let dir =
            std::env::temp_dir().join(format!("memfleet-notify-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let socket = UnixDatagram::bind(dir.join("notify.sock")).unwrap();
        Notify { dir, socket }
    }

    /// `memfleet ARGS` with `NOTIFY_SOCKET` set to this socket (killed if the test fails).
    fn spawn(&self, args: &[&str]) -> Killed {
        Killed(
            Command::new(EXE)
                .args(args)
                .env("NOTIFY_SOCKET", self.dir.join("notify.sock"))
                .env("MEMFLEET_STATE_DIR", self.dir.join("state"))
                .stdin(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        )
    }

    /// The next datagram, split in lines; None after `wait`.
    fn next(&self, wait: Duration) -> Option<Vec<String>> {
        self.socket.set_read_timeout(Some(wait)).unwrap();
        let mut buf = [0u8; 4096];
        match self.socket.recv(&mut buf) {
            Ok(n) => Some(
                String::from_utf8_lossy(&buf[..n])
                    .lines()
                    .map(String::from)
                    .collect(),
            ),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                None
            }
            Err(e) => panic!("notify socket: {e}"),
        }
    }

    /// Starts `memfleet` with the arguments `args` gives for three free ports (data, UDP,
    /// admin) and waits for READY=1 (no datagram before it). A start that exits first —
    /// another test took a port between `free_port` and the bind — is tried again on other
    /// ports, twice at most. Returns the process, its ports and the READY datagram.
    fn start_ready(
        &self,
        args: impl Fn(u16, u16, u16) -> Vec<String>,
    ) -> (Killed, (u16, u16, u16), Vec<String>) {
        for attempt in 1..=3 {
            let ports = (free_port(), free_port(), free_port());
            let argv = args(ports.0, ports.1, ports.2);
            let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
            let mut child = self.spawn(&argv);
            let deadline = Instant::now() + Duration::from_secs(20);
            loop {
                if let Some(msg) = self.next(Duration::from_millis(50)) {
                    if msg.iter().any(|l| l == "READY=1") {
                        return (child, ports, msg);
                    }
                    panic!("before READY=1: {msg:?}");
                }
                if let Some(status) = child.0.try_wait().unwrap() {
                    assert!(attempt < 3, "exited ({status}) before READY=1, three times");
                    break;
                }
                assert!(Instant::now() < deadline, "no READY=1 within 20 s");
            }
        }
        unreachable!("the third attempt returns or fails")
    }

    /// Waits (up to 20 s, while `child` runs) for a datagram holding `line`; returns it.
    /// Every datagram before it is checked by `before` (e.g. no READY=1 yet).
    fn expect(&self, child: &mut Child, line: &str, before: impl Fn(&[String])) -> Vec<String> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(msg) = self.next(Duration::from_millis(50)) {
                if msg.iter().any(|l| l == line) {
                    return msg;
                }
                before(&msg);
                continue;
            }
            if let Some(status) = child.try_wait().unwrap() {
                panic!("exited ({status}) before sending {line}");
            }
            assert!(Instant::now() < deadline, "no {line} within 20 s");
        }
    }
}

impl Drop for Notify {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn accepts(port: u16) -> bool {
    TcpStream::connect(("127.0.0.1", port)).is_ok()
}

fn version(port: u16) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"version\r\n").unwrap();
    let mut buf = [0u8; 256];
    let n = s.read(&mut buf).unwrap();
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

fn signal(child: &Child, sig: i32) {
    // SAFETY: kill() sends a signal to our own child, not yet reaped.
    unsafe { libc::kill(child.id() as libc::pid_t, sig) };
}

/// Waits up to 30 s for `child` to exit; it must exit successfully.
fn exits_cleanly(child: &mut Child) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "exited with {status}");
            return;
        }
        assert!(Instant::now() < deadline, "did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn no_ready(msg: &[String]) {
    assert!(
        !msg.iter().any(|l| l == "READY=1"),
        "a second READY=1: {msg:?}"
    );
}

fn monotonic_usec() -> u128 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u128 * 1_000_000 + ts.tv_nsec as u128 / 1000
}

#[test]
fn server_is_ready_once_every_listener_is_bound_and_says_when_it_stops() {
    let _serial = serial();
    let notify = Notify::new("server");
    let memory_file = notify.dir.join("heap");
    let args = |port: u16, udp: u16, admin: u16| {
        vec![
            "server".to_string(),
            "-l".into(),
            "127.0.0.1".into(),
            "-p".into(),
            port.to_string(),
            "-U".into(),
            udp.to_string(),
            "--admin-port".into(),
            admin.to_string(),
            "-t".into(),
            "2".into(),
            "-m".into(),
            "16".into(),
            "--memory-file".into(),
            memory_file.to_str().unwrap().into(),
        ]
    };
    let (mut child, (port, udp, admin), ready) = notify.start_ready(args);
    // At READY=1 every listener is bound: the data port and the admin port accept, and the
    // UDP port is taken.
    assert!(accepts(port), "READY=1 before the data port accepts");
    assert!(accepts(admin), "READY=1 before the admin port accepts");
    assert!(
        UdpSocket::bind(("127.0.0.1", udp)).is_err(),
        "READY=1 before the UDP port is bound"
    );
    assert!(version(port).starts_with("VERSION "));
    let status = ready.iter().find(|l| l.starts_with("STATUS=")).unwrap();
    assert!(
        status.contains(&format!("serving on 127.0.0.1:{port}")),
        "{status}"
    );
    assert!(status.contains("started empty"), "{status}");
    {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(b"set kept 0 0 1\r\nv\r\n").unwrap();
        let mut buf = [0u8; 16];
        let n = s.read(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"STORED\r\n");
    }

    signal(&child.0, libc::SIGTERM);
    let stopping = notify.expect(&mut child.0, "STOPPING=1", no_ready);
    assert!(
        stopping
            .iter()
            .any(|l| l.contains("saving the memory file")),
        "{stopping:?}"
    );
    exits_cleanly(&mut child.0);

    // The next start comes back warm and says so in its status.
    let (mut child, (port, _, _), ready) = notify.start_ready(args);
    assert!(accepts(port));
    assert!(
        ready.iter().any(|l| l.contains("warm restart: 1 items")),
        "{ready:?}"
    );
    signal(&child.0, libc::SIGINT);
    notify.expect(&mut child.0, "STOPPING=1", no_ready);
    exits_cleanly(&mut child.0);
}

#[test]
fn a_notify_socket_nobody_listens_on_does_not_stop_the_server() {
    let _serial = serial();
    let port = free_port();
    let mut child = Killed(
        Command::new(EXE)
            .args(["server", "-l", "127.0.0.1", "-p", &port.to_string()])
            .env("NOTIFY_SOCKET", "/nonexistent/memfleet-notify.sock")
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut s = support::connect(port, Duration::from_secs(5));
    s.write_all(b"version\r\n").unwrap();
    let mut buf = [0u8; 64];
    assert!(s.read(&mut buf).unwrap() > 0);
    signal(&child.0, libc::SIGTERM);
    exits_cleanly(&mut child.0);
}

#[test]
fn router_is_ready_when_listening_and_follows_the_reload_protocol_on_sighup() {
    let _serial = serial();
    let backend = Server::start(Settings::single_worker(0, 16 << 20)).unwrap();
    let backend = backend.local_addr().port();
    let notify = Notify::new("router");
    let (first, second, admin) = (free_port(), free_port(), free_port());
    let config = notify.dir.join("router.toml");
    let mut one = RouterConfig::new();
    one.pool("main", &[backend]).listen(first);
    std::fs::write(&config, one.text()).unwrap();
    let admin_listen = format!("127.0.0.1:{admin}");
    let mut child = notify.spawn(&[
        "router",
        "--config",
        config.to_str().unwrap(),
        "--admin-listen",
        &admin_listen,
        "-t",
        "1",
    ]);
    notify.expect(&mut child.0, "READY=1", |msg| {
        panic!("before READY=1: {msg:?}")
    });
    assert!(accepts(first), "READY=1 before the listener accepts");
    assert!(accepts(admin), "READY=1 before the admin port accepts");
    assert!(version(first).starts_with("VERSION "));

    // A SIGHUP whose new file adds a listener: RELOADING=1 with the monotonic clock's time
    // of the signal, then READY=1 once the new listener accepts. The new pool is large (its
    // ring takes a while to build, and the listener is bound after it), so a READY=1 sent
    // before the reload is applied would be seen before the listener exists.
    let mut two = one.clone();
    let many: Vec<u16> = (0..3000).map(|i| 20000 + i).collect();
    two.pool("more", &many).listen(second);
    std::fs::write(&config, two.text()).unwrap();
    let before = monotonic_usec();
    signal(&child.0, libc::SIGHUP);
    let reloading = notify.expect(&mut child.0, "RELOADING=1", no_ready);
    let stamp: u128 = reloading
        .iter()
        .find_map(|l| l.strip_prefix("MONOTONIC_USEC="))
        .expect("MONOTONIC_USEC with RELOADING=1")
        .parse()
        .unwrap();
    assert!(
        before <= stamp && stamp <= monotonic_usec(),
        "MONOTONIC_USEC={stamp} is not CLOCK_MONOTONIC at the signal (sent after {before})"
    );
    notify.expect(&mut child.0, "READY=1", |msg| {
        panic!("between RELOADING=1 and READY=1: {msg:?}")
    });
    assert!(
        accepts(second),
        "READY=1 before the reloaded configuration serves"
    );

    // A SIGHUP whose file is refused still ends the reload: READY=1, the old one serving.
    std::fs::write(&config, "[pools.broken\n").unwrap();
    signal(&child.0, libc::SIGHUP);
    notify.expect(&mut child.0, "RELOADING=1", no_ready);
    let ready = notify.expect(&mut child.0, "READY=1", |msg| {
        panic!("between RELOADING=1 and READY=1: {msg:?}")
    });
    assert!(
        ready
            .iter()
            .any(|l| l.starts_with("STATUS=serving the previous configuration")),
        "{ready:?}"
    );
    assert!(version(first).starts_with("VERSION "));
    assert!(accepts(second));

    signal(&child.0, libc::SIGTERM);
    notify.expect(&mut child.0, "STOPPING=1", no_ready);
    exits_cleanly(&mut child.0);
}

#[test]
fn invalidator_is_ready_once_streaming_and_says_when_it_stops() {
    let _serial = serial();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let postgres = Postgres::start().unwrap();
    let db = rt.block_on(postgres.connect()).unwrap();
    let cache = Server::start(Settings::single_worker(0, 16 << 20)).unwrap();
    let notify = Notify::new("invalidator");
    let metrics = free_port();
    let config = notify.dir.join("invalidator.toml");
    std::fs::write(
        &config,
        format!(
            "[database]\nhost = \"127.0.0.1\"\nport = {}\nuser = \"postgres\"\n\
             dbname = \"postgres\"\ncreate = true\n\n\
             [invalidator]\nroute = \"cache\"\nmetrics_listen = \"127.0.0.1:{metrics}\"\n\n\
             [pools.cache]\nservers = [\"127.0.0.1:{}\"]\n",
            postgres.port,
            cache.local_addr().port()
        ),
    )
    .unwrap();
    let mut child = notify.spawn(&["invalidator", "--config", config.to_str().unwrap()]);
    let ready = notify.expect(&mut child.0, "READY=1", |msg| {
        panic!("before READY=1: {msg:?}")
    });
    assert!(accepts(metrics), "READY=1 before the metrics port accepts");
    let streaming = rt
        .block_on(db.query_opt("SELECT 1 FROM pg_replication_slots WHERE active", &[]))
        .unwrap();
    assert!(streaming.is_some(), "READY=1 before the slot streams");
    assert!(
        ready
            .iter()
            .any(|l| l.starts_with("STATUS=streaming from slot")),
        "{ready:?}"
    );
    signal(&child.0, libc::SIGTERM);
    notify.expect(&mut child.0, "STOPPING=1", no_ready);
    exits_cleanly(&mut child.0);
}
