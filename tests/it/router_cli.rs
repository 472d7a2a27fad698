//! `memfleet router` as an operator runs it: a TOML file, reloaded when it changes and on
//! SIGHUP, a broken file refused while the old configuration keeps serving; and the book's
//! routes example, read from docs/routes.md itself, in front of real servers.

use crate::support;

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

/// The TOML block of the book's "Routes" section (docs/routes.md), as written.
fn book_routes_example() -> String {
    let chapter = include_str!("../../docs/routes.md");
    let section = chapter
        .split_once("## Routes: several pools as one deployment")
        .expect("docs/routes.md has its Routes section")
        .1;
    let block = section
        .split_once("```toml\n")
        .expect("the Routes section has a TOML example")
        .1;
    block
        .split_once("```")
        .expect("the TOML example ends")
        .0
        .to_string()
}

/// One request through a fresh connection, and its reply: one line, or the `VALUE` lines
/// through `END`.
fn ask(port: u16, request: &str) -> String {
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut s = BufReader::new(s);
    s.get_mut().write_all(request.as_bytes()).unwrap();
    let mut out = String::new();
    s.read_line(&mut out).unwrap();
    if out.starts_with("VALUE ") {
        while !out.ends_with("END\r\n") {
            assert_ne!(s.read_line(&mut out).unwrap(), 0, "reply cut short: {out}");
        }
    }
    out
}

#[test]
fn the_book_routes_example_sends_session_keys_deletes_included_to_the_session_pools() {
    let memfleet = env!("CARGO_BIN_EXE_memfleet");
    // The example's pools, each a real server.
    let names = [
        "cluster_a",
        "cluster_b",
        "sessions_a",
        "sessions_b",
        "gutter",
    ];
    let servers: Vec<(Killed, u16)> = names
        .iter()
        .map(|_| support::memfleet_server(&["-t", "1", "-m", "16"]))
        .collect();
    let port = |name: &str| servers[names.iter().position(|n| *n == name).unwrap()].1;
    for (_, p) in &servers {
        assert!(until_serving(*p));
    }
    let dir = std::env::temp_dir().join(format!("memfleet-readme-routes-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // The example as written, but for where it listens and spools (and the pools, which
    // it leaves to the reader).
    let example = book_routes_example();
    let listen = free_port();
    let mut config = example.clone();
    for (from, to) in [
        (
            "listen = \"127.0.0.1:5000\"".to_string(),
            format!("listen = \"127.0.0.1:{listen}\""),
        ),
        (
            "spool_dir = \"/var/spool/memfleet\"".to_string(),
            format!("spool_dir = \"{}\"", dir.join("spool").display()),
        ),
    ] {
        assert_eq!(example.matches(&from).count(), 1, "{from} in:\n{example}");
        config = config.replace(&from, &to);
    }
    for name in names {
        config.push_str(&format!(
            "\n[pools.{name}]\nservers = [\"127.0.0.1:{}\"]\n",
            port(name)
        ));
    }
    let file = dir.join("routes.toml");
    std::fs::write(&file, &config).unwrap();
    let _router = Killed(
        Command::new(memfleet)
            .args(["router", "-t", "1", "--config"])
            .arg(&file)
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    assert!(until_serving(listen), "the router never served:\n{config}");
    let holds = |name: &str, key: &str| ask(port(name), &format!("get {key}\r\n")) != "END\r\n";

    // A session key is written to both session pools, and nowhere else.
    assert_eq!(ask(listen, "set session:42 0 0 1\r\ns\r\n"), "STORED\r\n");
    assert!(holds("sessions_a", "session:42") && holds("sessions_b", "session:42"));
    assert!(!holds("cluster_a", "session:42") && !holds("cluster_b", "session:42"));
    assert_eq!(
        ask(listen, "get session:42\r\n"),
        "VALUE session:42 0 1\r\ns\r\nEND\r\n"
    );
    // Its delete reaches both session pools.
    assert_eq!(ask(listen, "delete session:42\r\n"), "DELETED\r\n");
    assert!(
        !holds("sessions_a", "session:42"),
        "sessions_a still holds it"
    );
    assert!(
        !holds("sessions_b", "session:42"),
        "sessions_b still holds it"
    );
    assert_eq!(ask(listen, "get session:42\r\n"), "END\r\n");

    // Other keys: gets and sets to cluster_a, deletes to both clusters.
    assert_eq!(ask(listen, "set user:1 0 0 1\r\nu\r\n"), "STORED\r\n");
    assert!(holds("cluster_a", "user:1") && !holds("sessions_a", "user:1"));
    assert_eq!(
        ask(port("cluster_b"), "set user:1 0 0 1\r\nb\r\n"),
        "STORED\r\n"
    );
    assert_eq!(ask(listen, "delete user:1\r\n"), "DELETED\r\n");
    assert!(!holds("cluster_a", "user:1") && !holds("cluster_b", "user:1"));
    let _ = std::fs::remove_dir_all(&dir);
}
