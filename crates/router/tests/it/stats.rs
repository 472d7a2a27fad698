//! The router's `stats` through a real socket: one `STAT name value` per line (clients such
//! as pymemcache keep only a line's first value), no name twice, and
//! each server's counters under `pool:<pool>:server:<server>:<counter>`.

use crate::support;
use memfleet_router::RunningRouter;
use memfleet_routing::from_toml;

use memfleet_testkit::free_port;
use std::collections::HashMap;
use std::io::{BufRead, Write};
use support::{backend, Client};

/// Every line of one `stats` reply, as `(name, value)`, checked to be `STAT name value`.
fn stats(c: &mut Client) -> Vec<(String, String)> {
    c.0.get_mut().write_all(b"stats\r\n").unwrap();
    let mut rows = Vec::new();
    loop {
        let mut l = String::new();
        c.0.read_line(&mut l).unwrap();
        assert!(l.ends_with("\r\n"), "cut short: {l:?}");
        let l = l.trim_end_matches("\r\n");
        if l == "END" {
            return rows;
        }
        let fields: Vec<&str> = l.split(' ').collect();
        assert_eq!(fields.len(), 3, "not `STAT name value`: {l:?}");
        assert_eq!(fields[0], "STAT", "{l:?}");
        assert!(!fields[2].is_empty(), "no value: {l:?}");
        rows.push((fields[1].to_string(), fields[2].to_string()));
    }
}

#[test]
fn stats_has_one_value_per_line_and_no_name_twice() {
    let (_a, a) = backend();
    let (_b, b) = backend();
    let (_c, c) = backend();
    let (p1, p2) = (free_port(), free_port());
    let toml = format!(
        "[pools.one]\nlisten = \"127.0.0.1:{p1}\"\nservers = [\"127.0.0.1:{a}\", \"127.0.0.1:{b}\"]\n\
         [pools.two]\nlisten = \"127.0.0.1:{p2}\"\nservers = [\"127.0.0.1:{c}\", \"127.0.0.1:{a}\"]\n"
    );
    let _router = RunningRouter::start(from_toml(&toml).unwrap(), 1, None).unwrap();
    let mut one = Client::direct(p1);
    for i in 0..20 {
        one.check(&format!("set k{i} 0 0 1\r\nx\r\n"), "STORED\r\n");
    }
    // Each listener reports its own pool; pool two shares server a with pool one.
    let rows_one = stats(&mut one);
    let rows_two = stats(&mut Client::direct(p2));
    for (pool, rows) in [("one", &rows_one), ("two", &rows_two)] {
        let mut seen: HashMap<&str, &str> = HashMap::new();
        for (name, value) in rows {
            assert!(
                seen.insert(name, value).is_none(),
                "{name} twice in {rows:?}"
            );
        }
        assert_eq!(
            seen.get(format!("pool:{pool}:servers").as_str()),
            Some(&"2")
        );
    }
    let counter = |rows: &[(String, String)], pool: &str, port: u16, field: &str| -> u64 {
        let name = format!("pool:{pool}:server:127.0.0.1:{port}:{field}");
        rows.iter()
            .find(|(n, _)| *n == name)
            .unwrap_or_else(|| panic!("{name} missing from {rows:?}"))
            .1
            .parse()
            .unwrap()
    };
    // Pool one's 20 sets went to its two servers; pool two saw none, not even on server a.
    let one = |port, field| counter(&rows_one, "one", port, field);
    let two = |port, field| counter(&rows_two, "two", port, field);
    assert_eq!(one(a, "requests") + one(b, "requests"), 20);
    assert_eq!(two(a, "requests") + two(c, "requests"), 0);
    for field in ["errors", "down", "knockouts"] {
        assert_eq!(
            one(a, field) + one(b, field) + two(a, field) + two(c, field),
            0
        );
    }
}

#[test]
fn plain_stats_sum_the_servers_figures_under_the_router_s_own_process_lines() {
    let (a_server, a) = backend();
    let (_b, b) = backend();
    let p = free_port();
    let toml = format!(
        "[pools.one]\nlisten = \"127.0.0.1:{p}\"\nservers = [\"127.0.0.1:{a}\", \"127.0.0.1:{b}\"]\n"
    );
    let _router = RunningRouter::start(from_toml(&toml).unwrap(), 1, None).unwrap();
    let mut c = Client::direct(p);
    for i in 0..30 {
        c.check(&format!("set k{i} 0 0 1\r\nx\r\n"), "STORED\r\n");
    }
    // What each server holds, asked directly.
    let held = |port: u16| -> u64 {
        let rows = stats(&mut Client::direct(port));
        let n = rows.iter().find(|(n, _)| n == "curr_items").unwrap();
        n.1.parse().unwrap()
    };
    let (on_a, on_b) = (held(a), held(b));
    assert_eq!(on_a + on_b, 30);
    assert!(
        on_a > 0 && on_b > 0,
        "both servers hold keys: {on_a} and {on_b}"
    );
    let get = |rows: &[(String, String)], name: &str| -> Option<String> {
        rows.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone())
    };
    let rows = stats(&mut c);
    assert_eq!(get(&rows, "curr_items").as_deref(), Some("30"), "{rows:?}");
    assert_eq!(get(&rows, "servers").as_deref(), Some("2"));
    assert_eq!(get(&rows, "servers_answering").as_deref(), Some("2"));
    assert_eq!(get(&rows, "pid"), Some(std::process::id().to_string()));
    assert!(get(&rows, "version").unwrap().contains("memfleet-router"));
    assert_eq!(get(&rows, "cmd_set").as_deref(), Some("30"));
    // The router's own counters follow, and asking did not count as requests to the servers.
    assert_eq!(get(&rows, "pool:one:servers").as_deref(), Some("2"));
    let requests = |rows: &[(String, String)]| -> u64 {
        [a, b]
            .iter()
            .map(|port| {
                get(rows, &format!("pool:one:server:127.0.0.1:{port}:requests"))
                    .unwrap()
                    .parse::<u64>()
                    .unwrap()
            })
            .sum()
    };
    assert_eq!(requests(&rows), 30);
    // A server gone: the sum is the one that answered.
    drop(a_server);
    let rows = stats(&mut c);
    assert_eq!(get(&rows, "servers_answering").as_deref(), Some("1"));
    assert_eq!(get(&rows, "curr_items"), Some(on_b.to_string()));
    assert_eq!(requests(&rows), 30);
}
