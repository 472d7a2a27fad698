//! Connection-level behaviour: the connection limit, idle timeout, shutdown, the metrics
//! endpoint, and the memory an idle connection costs.

use crate::common;

use common::{Client, TestServer};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

#[test]
fn connections_over_the_limit_are_told_and_closed() {
    let s = TestServer::with(|s| s.limits.max_connections = 3);
    let mut open: Vec<Client> = (0..3).map(|_| s.connect()).collect();
    for c in &mut open {
        c.check("mn\r\n", "MN\r\n");
    }
    let mut extra = s.connect();
    let mut reply = Vec::new();
    extra.stream.read_to_end(&mut reply).unwrap();
    assert_eq!(reply, b"ERROR Too many open connections\r\n");
    // Closing one makes room again.
    drop(open.pop());
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut c = s.connect();
        c.send("mn\r\n");
        let mut buf = [0u8; 64];
        let n = c.stream.read(&mut buf).unwrap_or(0);
        if &buf[..n] == b"MN\r\n" {
            break;
        }
        assert!(Instant::now() < deadline, "no room after a close");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(open[0].stat("rejected_connections") >= 1);
}

#[test]
fn idle_connections_are_closed_after_the_timeout() {
    let s = TestServer::with(|s| s.limits.idle_timeout = Some(Duration::from_secs(1)));
    let mut c = s.connect();
    c.check("mn\r\n", "MN\r\n");
    let start = Instant::now();
    assert!(c.is_closed());
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_millis(900),
        "closed too early: {waited:?}"
    );
    assert!(
        waited < Duration::from_secs(5),
        "closed too late: {waited:?}"
    );
}

#[test]
fn shutdown_closes_connections_and_the_port() {
    let s = TestServer::start();
    let addr = s.addr;
    let mut c = s.connect();
    c.check("set k 0 0 1\r\na\r\n", "STORED\r\n");
    s.stop();
    assert!(c.is_closed());
    assert!(TcpStream::connect(addr).is_err());
}

#[test]
fn metrics_endpoint_serves_prometheus_text() {
    let s = TestServer::with(|s| s.listen.admin_port = Some(0));
    let mut c = s.connect();
    c.check(
        "set k 0 0 1\r\na\r\nget k\r\n",
        "STORED\r\nVALUE k 0 1\r\na\r\nEND\r\n",
    );
    let admin = s.server().admin_addr().unwrap();
    let mut http = TcpStream::connect(admin).unwrap();
    http.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut body = String::new();
    http.read_to_string(&mut body).unwrap();
    assert!(body.starts_with("HTTP/1.1 200 OK\r\n"), "{body}");
    assert!(body.contains("\nmemfleet_get_hits 1\n"), "{body}");
    assert!(body.contains("# TYPE memfleet_curr_items gauge\nmemfleet_curr_items 1\n"));
    let mut http = TcpStream::connect(admin).unwrap();
    http.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
    let mut body = String::new();
    http.read_to_string(&mut body).unwrap();
    assert!(body.starts_with("HTTP/1.1 404"), "{body}");
}

fn rss_bytes() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    let kib: usize = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib * 1024
}

/// Idle connections hold no buffers: after each has sent a request (so its buffers were
/// used), the server's memory grows by a small, fixed amount per connection. (The client
/// sockets are in the kernel, not in this process's RSS.)
#[test]
fn idle_connections_cost_little_memory() {
    const N: usize = 2000;
    let s = TestServer::with(|s| s.limits.max_connections = N + 10);
    let mut warm = s.connect();
    warm.check("set k 0 0 5\r\nhello\r\n", "STORED\r\n");
    let before = rss_bytes();
    let mut conns = Vec::with_capacity(N);
    for _ in 0..N {
        let mut c = s.connect();
        c.check("get k\r\n", "VALUE k 0 5\r\nhello\r\nEND\r\n");
        conns.push(c);
    }
    let per_conn = rss_bytes().saturating_sub(before) / N;
    eprintln!("RSS growth per idle connection: {per_conn} bytes");
    // The per-worker buffers are 32 KiB and more; a connection that kept its own would cost
    // at least that. Task, socket registration and state stay well under 4 KiB.
    assert!(per_conn < 4096, "{per_conn} bytes per idle connection");
}
