//! A router with k worker threads connects to each server `server_connections` times per
//! worker, as k nutcracker processes (one per core, as twemproxy is deployed) open k times
//! `server_connections`: one connection carrying every worker's requests was what kept the
//! router from scaling past one worker (`memfleet bench scale`, docs/BENCHMARKS.md). A
//! one-worker router keeps exactly `server_connections`.

use crate::support;

use memfleet_router::RunningRouter;
use memfleet_routing::from_toml;
use support::{backend, eventually, list, Client};

/// The connections a router of `threads` workers holds to its one server once clients on
/// more connections than it has lanes have each stored a key through it.
fn server_connections_used(threads: usize, server_connections: usize) -> usize {
    let (_server, port) = backend();
    let mut direct = Client::direct(port);
    let count =
        |c: &mut Client| -> usize { c.stat_text("curr_connections").unwrap().parse().unwrap() };
    let before = count(&mut direct);
    let toml = format!(
        "[pools.main]\nlisten = \"127.0.0.1:0\"\nservers = [{}]\nserver_connections = {server_connections}\n",
        list(&[port])
    );
    let router = RunningRouter::start(from_toml(&toml).unwrap(), threads, None).unwrap();
    // A client connection sends on one lane (they are dealt round-robin): four times as
    // many clients as lanes use every lane.
    let mut clients: Vec<Client> = (0..4 * threads * server_connections)
        .map(|_| Client::connect(router.addrs[0]))
        .collect();
    for (i, c) in clients.iter_mut().enumerate() {
        c.check(&format!("set k{i} 0 0 1\r\nx\r\n"), "STORED\r\n");
    }
    let used = count(&mut direct) - before;
    drop(router);
    eventually("the router's connections to close", || {
        count(&mut direct) == before
    });
    used
}

#[test]
fn each_worker_connects_to_each_server() {
    assert_eq!(server_connections_used(1, 1), 1);
    assert_eq!(server_connections_used(1, 2), 2);
    assert_eq!(server_connections_used(3, 1), 3);
    assert_eq!(server_connections_used(2, 2), 4);
}
