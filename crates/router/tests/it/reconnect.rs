//! A server that restarts while the router's connections to it are idle: the router sees
//! each connection close when it happens and connects again for the next request, so the
//! first request after the restart is served instead of failing on a dead socket (which,
//! at `server_failure_limit: 1`, would also mark the server down again). With a
//! connection per worker, a restart leaves one idle connection per worker behind.

use crate::support;

use memfleet_router::RunningRouter;
use memfleet_routing::from_toml;
use std::time::{Duration, Instant};
use support::{backend, list, server, Client};

#[test]
fn idle_connections_to_a_restarted_server_are_made_again() {
    let (first, port) = backend();
    let toml = format!(
        "[pools.main]\nlisten = \"127.0.0.1:0\"\nservers = [{}]\nserver_failure_limit = 1\n",
        list(&[port])
    );
    let threads = 3;
    let router = RunningRouter::start(from_toml(&toml).unwrap(), threads, None).unwrap();
    // Every worker's connection is used once, then left idle.
    let mut clients: Vec<Client> = (0..threads)
        .map(|_| Client::connect(router.addrs[0]))
        .collect();
    for (i, c) in clients.iter_mut().enumerate() {
        c.check(&format!("set before{i} 0 0 1\r\nx\r\n"), "STORED\r\n");
    }
    drop(first);
    let deadline = Instant::now() + Duration::from_secs(10);
    let _second = loop {
        match server(port) {
            Ok(s) => break s,
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => panic!("the server restarts on {port}: {e:#}"),
        }
    };
    // The closes have been seen long before this (they arrive as the old server exits).
    std::thread::sleep(Duration::from_millis(200));
    for (i, c) in clients.iter_mut().enumerate() {
        c.check(&format!("set after{i} 0 0 1\r\ny\r\n"), "STORED\r\n");
        c.check(
            &format!("get after{i}\r\n"),
            &format!("VALUE after{i} 0 1\r\ny\r\nEND\r\n"),
        );
    }
}
