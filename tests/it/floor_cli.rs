//! `memfleet floor` as a process: the floor server answers a get of `key:<n>` with the
//! value the bench stores under it, and with `--backend` the floor proxy carries requests
//! to a real `memfleet server` and its replies back.

use crate::support;

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::Duration;
use support::{connect, free_port, memfleet_server, Killed};

const EXE: &str = env!("CARGO_BIN_EXE_memfleet");

fn floor(args: &[&str]) -> (Killed, u16) {
    let port = free_port();
    let child = Command::new(EXE)
        .args(["floor", "--port", &port.to_string()])
        .args(args)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    (Killed(child), port)
}

/// Sends `request` and reads until the reply ends with `end`.
fn exchange(port: u16, request: &[u8], end: &[u8]) -> Vec<u8> {
    let mut s = connect(port, Duration::from_secs(10));
    s.write_all(request).unwrap();
    let mut reply = Vec::new();
    let mut buf = [0u8; 4096];
    while !reply.ends_with(end) {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "closed after {:?}", String::from_utf8_lossy(&reply));
        reply.extend_from_slice(&buf[..n]);
    }
    reply
}

#[test]
fn the_floor_server_answers_with_the_benchs_values() {
    let (_floor, port) = floor(&["--value-size", "5"]);
    assert_eq!(
        exchange(port, b"set key:1 0 0 2\r\nab\r\n", b"\r\n"),
        b"STORED\r\n"
    );
    let reply = exchange(port, b"get key:1 other\r\n", b"END\r\n");
    let text = String::from_utf8_lossy(&reply);
    assert!(text.starts_with("VALUE key:1 0 5\r\n"), "{text}");
    assert!(!text.contains("other"), "{text}");
    assert_eq!(exchange(port, b"bogus\r\n", b"\r\n"), b"ERROR\r\n");
}

#[test]
fn the_floor_proxy_forwards_to_its_backend() {
    let (_server, backend) = memfleet_server(&["-t", "1", "-m", "16"]);
    drop(connect(backend, Duration::from_secs(1)));
    let (_proxy, port) = floor(&["--backend", &format!("127.0.0.1:{backend}")]);
    assert_eq!(
        exchange(port, b"set k 0 0 3\r\nxyz\r\n", b"\r\n"),
        b"STORED\r\n"
    );
    assert_eq!(
        exchange(port, b"get k\r\n", b"END\r\n"),
        b"VALUE k 0 3\r\nxyz\r\nEND\r\n"
    );
    // What the proxy stored is in the backend itself.
    assert_eq!(
        exchange(backend, b"get k\r\n", b"END\r\n"),
        b"VALUE k 0 3\r\nxyz\r\nEND\r\n"
    );
}

#[test]
fn value_size_and_backend_exclude_each_other() {
    let out = Command::new(EXE)
        .args(["floor", "--port", "1", "--value-size", "5"])
        .args(["--backend", "127.0.0.1:2"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cannot be used with"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
