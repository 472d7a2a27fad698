//! `memfleet server` as an operator runs it: flags, environment, config file, `--help`, and
//! a clean exit on SIGTERM and SIGINT.

use memfleet_testkit::free_port;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The tests of this file pick free ports and start servers on them; one at a time, so two
/// of them cannot be handed the same port.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn memfleet() -> Command {
    Command::new(env!("CARGO_BIN_EXE_memfleet"))
}

/// Waits until the server accepts, then returns a connection.
fn connect(port: u16, child: &mut Child) -> TcpStream {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(s) = TcpStream::connect(("127.0.0.1", port)) {
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            return s;
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!("server exited early: {status}");
        }
        assert!(Instant::now() < deadline, "server did not start on {port}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn roundtrip(s: &mut TcpStream, req: &str) -> String {
    s.write_all(req.as_bytes()).unwrap();
    let mut buf = [0u8; 4096];
    let n = s.read(&mut buf).unwrap();
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

fn setting(s: &mut TcpStream, name: &str) -> String {
    s.write_all(b"stats settings\r\n").unwrap();
    let mut text = String::new();
    let mut buf = [0u8; 4096];
    while !text.ends_with("END\r\n") {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0);
        text.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("STAT {name} ")).map(String::from))
        .unwrap_or_else(|| panic!("no setting {name}"))
}

fn stop(mut child: Child, signal: i32) {
    // SAFETY: kill() with a valid pid of our own child and a standard signal number.
    unsafe {
        libc::kill(child.id() as i32, signal);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "server exited with {status}");
            return;
        }
        assert!(Instant::now() < deadline, "server ignored signal {signal}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn flags_serve_and_sigterm_exits_cleanly() {
    let _serial = serial();
    let port = free_port();
    let mut child = memfleet()
        .args([
            "server",
            "-p",
            &port.to_string(),
            "-t",
            "2",
            "-m",
            "16",
            "-c",
            "100",
        ])
        .args(["-I", "2m"])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut s = connect(port, &mut child);
    assert_eq!(roundtrip(&mut s, "set k 0 0 2\r\nhi\r\n"), "STORED\r\n");
    assert_eq!(setting(&mut s, "maxbytes"), (16 << 20).to_string());
    assert_eq!(setting(&mut s, "num_threads"), "2");
    assert_eq!(setting(&mut s, "maxconns"), "100");
    assert_eq!(setting(&mut s, "item_size_max"), (2 << 20).to_string());
    assert_eq!(setting(&mut s, "inter"), "127.0.0.1");
    stop(child, libc::SIGTERM);
}

#[test]
fn environment_and_config_file_apply_and_flags_win() {
    let _serial = serial();
    let dir = std::env::temp_dir().join(format!("memfleet-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("memfleet.toml");
    let port = free_port();
    std::fs::write(
        &config,
        format!("port = {port}\nmemory_limit = 32\nthreads = 1\nmax_connections = 50\n"),
    )
    .unwrap();
    let mut child = memfleet()
        .args(["server", "--config", config.to_str().unwrap(), "-c", "77"])
        .env("MEMFLEET_MEMORY_LIMIT", "24")
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut s = connect(port, &mut child);
    // File: port and threads; environment over file: memory; flag over file: connections.
    assert_eq!(setting(&mut s, "maxbytes"), (24 << 20).to_string());
    assert_eq!(setting(&mut s, "num_threads"), "1");
    assert_eq!(setting(&mut s, "maxconns"), "77");
    stop(child, libc::SIGINT);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn help_explains_the_flags_and_bad_settings_are_refused() {
    let out = memfleet().args(["server", "--help"]).output().unwrap();
    let help = String::from_utf8(out.stdout).unwrap();
    for flag in [
        "--port",
        "--listen",
        "--memory-limit",
        "--max-connections",
        "--threads",
        "--max-item-size",
        "--idle-timeout",
        "--admin-port",
        "--config",
        "MEMFLEET_PORT",
    ] {
        assert!(help.contains(flag), "--help lacks {flag}:\n{help}");
    }
    let out = memfleet()
        .args(["server", "-p", "0", "-m", "4"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("memory-limit"), "{err}");
    let out = memfleet()
        .args(["server", "-p", "0", "-I", "lots"])
        .output()
        .unwrap();
    assert!(!out.status.success());
}

/// A second server on a port another one serves is refused, as memcached's would be, even
/// though both would set SO_REUSEPORT (which would otherwise let them split the clients).
#[test]
fn a_port_in_use_is_an_error() {
    let _serial = serial();
    let port = free_port();
    let mut first = memfleet()
        .args(["server", "-p", &port.to_string(), "-t", "2"])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    connect(port, &mut first);
    let mut second = memfleet()
        .args(["server", "-p", &port.to_string(), "-t", "2"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let status = loop {
        if let Some(status) = second.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > deadline {
            second.kill().unwrap();
            second.wait().unwrap();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    stop(first, libc::SIGTERM);
    let mut err = String::new();
    second
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let status = status.unwrap_or_else(|| panic!("a second server started on the port: {err}"));
    assert!(!status.success());
    assert!(err.contains("cannot listen"), "{err}");
}

/// `--memory-file`: SIGUSR1 stops the server keeping its items for the next start; a
/// SIGKILL leaves no snapshot, so the start after it is empty rather than trusting a heap
/// that was changing when the process died.
#[test]
fn memory_file_survives_sigusr1_and_not_a_crash() {
    let _serial = serial();
    let dir = if std::path::Path::new("/dev/shm").is_dir() {
        std::path::PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    let file = dir.join(format!("memfleet-cli-{}", std::process::id()));
    let meta = dir.join(format!("memfleet-cli-{}.meta", std::process::id()));
    let start = |port: u16| {
        memfleet()
            .args([
                "server",
                "-p",
                &port.to_string(),
                "-m",
                "16",
                "--memory-file",
            ])
            .arg(&file)
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let port = free_port();
    let mut child = start(port);
    let mut s = connect(port, &mut child);
    assert_eq!(roundtrip(&mut s, "set k 7 0 5\r\nhello\r\n"), "STORED\r\n");
    stop(child, libc::SIGUSR1);
    assert!(meta.exists());

    let port = free_port();
    let mut child = start(port);
    let mut s = connect(port, &mut child);
    assert_eq!(
        roundtrip(&mut s, "get k\r\n"),
        "VALUE k 7 5\r\nhello\r\nEND\r\n"
    );
    assert!(!meta.exists(), "the snapshot is consumed at start");
    child.kill().unwrap();
    child.wait().unwrap();

    let port = free_port();
    let mut child = start(port);
    let mut s = connect(port, &mut child);
    assert_eq!(roundtrip(&mut s, "get k\r\n"), "END\r\n");
    stop(child, libc::SIGTERM);
    let _ = std::fs::remove_file(&file);
    let _ = std::fs::remove_file(&meta);
}
