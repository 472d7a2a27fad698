//! `memfleet router` as an operator runs it: a TOML file, reloaded when it changes and on
//! SIGHUP, a broken file refused while the old configuration keeps serving.

mod support;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::{free_port, Killed};

/// Waits until `port` accepts and answers `version`.
fn until_serving(port: u16) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(s) = TcpStream::connect(("127.0.0.1", port)) {
            s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            let mut s = BufReader::new(s);
            if s.get_mut().write_all(b"version\r\n").is_ok() {
                let mut line = String::new();
                if s.read_line(&mut line).is_ok() && line.starts_with("VERSION ") {
                    return true;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

fn set_get(port: u16) -> String {
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut s = BufReader::new(s);
    s.get_mut()
        .write_all(b"set k 0 0 1\r\nv\r\nget k\r\n")
        .unwrap();
    let mut out = String::new();
    for _ in 0..4 {
        s.read_line(&mut out).unwrap();
    }
    out
}

#[test]
fn the_router_reloads_its_file_and_refuses_a_broken_one() {
    let memfleet = env!("CARGO_BIN_EXE_memfleet");
    let backend = free_port();
    let _server = Killed(
        Command::new(memfleet)
            .args(["server", "-t", "1", "-m", "16", "-p", &backend.to_string()])
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let dir = std::env::temp_dir().join(format!("memfleet-router-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("pools.toml");
    let pool = |listen: u16| {
        format!(
            "[pools.main]\nlisten = \"127.0.0.1:{listen}\"\nservers = [\"127.0.0.1:{backend}\"]\n"
        )
    };
    let (a, b) = (free_port(), free_port());
    std::fs::write(&file, pool(a)).unwrap();
    let router = Killed(
        Command::new(memfleet)
            .args(["router", "-t", "1", "--config"])
            .arg(&file)
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    assert!(until_serving(a));
    assert_eq!(set_get(a), "STORED\r\nVALUE k 0 1\r\nv\r\nEND\r\n");
    // The file changes: the pool moves to another port, without a restart.
    std::fs::write(&file, pool(b)).unwrap();
    assert!(until_serving(b), "the new listener never came up");
    assert_eq!(set_get(b), "STORED\r\nVALUE k 0 1\r\nv\r\nEND\r\n");
    assert!(
        TcpStream::connect(("127.0.0.1", a)).is_err(),
        "the old listener is gone"
    );
    // A broken file (and a SIGHUP asking for it) changes nothing.
    std::fs::write(&file, "[pools.main]\nservers = 7\n").unwrap();
    // SAFETY: kill() with the pid of our own running child and a standard signal.
    unsafe {
        libc::kill(router.0.id() as i32, libc::SIGHUP);
    }
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(set_get(b), "STORED\r\nVALUE k 0 1\r\nv\r\nEND\r\n");
    let _ = std::fs::remove_dir_all(&dir);
}
