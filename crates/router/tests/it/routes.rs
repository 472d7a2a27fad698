//! Routes through real sockets, in front of real `memfleet server`s (and, for the spool's
//! ordering, a recording server): prefix and operation routing, replicated pools, the
//! gutter, delete broadcast, the delete spool across an outage and a router restart, and
//! cold-cluster warm-up with the paper's delete race.

use crate::support;
use memfleet_router::RunningRouter;
use memfleet_routing::from_toml;

use memfleet_server::Server;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use support::{addr, backend, eventually, list, Client};

#[test]
fn prefixes_and_operations_pick_pools_and_deletes_reach_every_cluster() {
    let (_a, pa) = backend();
    let (_b, pb) = backend();
    let config = from_toml(&format!(
        "[pools.a]\nservers = [{}]\n[pools.b]\nservers = [{}]\n\
         [routes.web]\nlisten = \"127.0.0.1:0\"\ntype = \"operation\"\n\
         delete = \"everywhere\"\ndefault = \"by_prefix\"\n\
         [routes.by_prefix]\ntype = \"prefix\"\nprefixes = {{ \"user:\" = \"a\" }}\ndefault = \"b\"\n\
         [routes.everywhere]\ntype = \"broadcast\"\nto = [\"a\", \"b\"]\nmode = \"all-sync\"\n",
        list(&[pa]),
        list(&[pb])
    ))
    .unwrap();
    let router = RunningRouter::start(config, 1, None).unwrap();
    let mut c = Client::connect(router.addrs[0]);
    c.check("set user:1 0 0 1\r\nu\r\n", "STORED\r\n");
    c.check("set photo:1 0 0 1\r\np\r\n", "STORED\r\n");
    assert_eq!(Client::direct(pa).get("user:1").as_deref(), Some("u"));
    assert_eq!(Client::direct(pa).get("photo:1"), None);
    assert_eq!(Client::direct(pb).get("photo:1").as_deref(), Some("p"));
    // A multi-get across both pools, in the client's order, misses left out.
    c.check(
        "get photo:1 nothing user:1\r\n",
        "VALUE photo:1 0 1\r\np\r\nVALUE user:1 0 1\r\nu\r\nEND\r\n",
    );
    // The same key in both clusters (as two frontend clusters would have it): a delete
    // through the router removes both.
    Client::direct(pb).check("set user:1 0 0 2\r\nbb\r\n", "STORED\r\n");
    c.check("delete user:1\r\n", "DELETED\r\n");
    assert_eq!(Client::direct(pa).get("user:1"), None);
    assert_eq!(Client::direct(pb).get("user:1"), None);
    // Only b has it: a broadcast delete is DELETED when any destination deleted the key
    // (pymemcache's delete() is then True), NOT_FOUND when none had it.
    c.check("delete photo:1\r\n", "DELETED\r\n");
    assert_eq!(Client::direct(pb).get("photo:1"), None);
    c.check("delete photo:1\r\n", "NOT_FOUND\r\n");
    // Meta commands route by their key too; noreply stays silent.
    c.check("ms user:2 2 T0\r\nhi\r\n", "HD\r\n");
    assert_eq!(Client::direct(pa).get("user:2").as_deref(), Some("hi"));
    c.check(
        "set photo:2 0 0 1 noreply\r\nq\r\nmg photo:2 v\r\n",
        "VA 1\r\nq\r\n",
    );
}

#[test]
fn replicated_reads_stay_on_one_replica_and_survive_its_death() {
    let (a, pa) = backend();
    let (_b, pb) = backend();
    let config = from_toml(&format!(
        "[pools.a]\nservers = [{}]\ntimeout_ms = 300\nserver_failure_limit = 1\n\
         [pools.b]\nservers = [{}]\ntimeout_ms = 300\nserver_failure_limit = 1\n\
         [routes.r]\nlisten = \"127.0.0.1:0\"\ntype = \"replicated\"\nreplicas = [\"a\", \"b\"]\n",
        list(&[pa]),
        list(&[pb])
    ))
    .unwrap();
    let router = RunningRouter::start(config, 1, None).unwrap();
    let mut c = Client::connect(router.addrs[0]);
    // Writes reach every replica.
    c.check("set k 0 0 1\r\nv\r\n", "STORED\r\n");
    assert_eq!(Client::direct(pa).get("k").as_deref(), Some("v"));
    assert_eq!(Client::direct(pb).get("k").as_deref(), Some("v"));
    // Make the replicas differ to see which one answers reads: always the same one.
    Client::direct(pa).check("set k 0 0 1\r\nA\r\n", "STORED\r\n");
    Client::direct(pb).check("set k 0 0 1\r\nB\r\n", "STORED\r\n");
    let chosen = c.get("k").unwrap();
    for _ in 0..20 {
        assert_eq!(c.get("k").unwrap(), chosen, "reads move between replicas");
    }
    // Another connection from the same host reads the same replica.
    assert_eq!(Client::connect(router.addrs[0]).get("k").unwrap(), chosen);
    // The chosen replica dies: reads fail over to the other, with no error.
    let (victim, survivor) = if chosen == "A" { (a, "B") } else { (_b, "A") };
    drop(victim);
    for _ in 0..5 {
        assert_eq!(c.get("k").as_deref(), Some(survivor));
    }
    assert!(
        c.stat_text("route:r:replica_failovers")
            .unwrap()
            .parse::<u64>()
            .unwrap()
            >= 1
    );
}

#[test]
fn a_dead_server_is_covered_by_the_gutter_with_short_ttls() {
    let servers: Vec<(Server, u16)> = (0..4).map(|_| backend()).collect();
    let ports: Vec<u16> = servers.iter().map(|(_, p)| *p).collect();
    let (_g, pg) = backend();
    let config = from_toml(&format!(
        "[pools.main]\nservers = [{}]\ntimeout_ms = 300\nserver_failure_limit = 1\n\
         server_retry_timeout_ms = 60000\n\
         [pools.gutter]\nservers = [{}]\n\
         [routes.cache]\nlisten = \"127.0.0.1:0\"\ntype = \"gutter\"\nmain = \"main\"\n\
         gutter = \"gutter\"\ngutter_ttl = 7\n",
        list(&ports),
        list(&[pg])
    ))
    .unwrap();
    let ring = config
        .pools
        .iter()
        .find(|p| p.name == "main")
        .unwrap()
        .ring()
        .unwrap();
    let router = RunningRouter::start(config, 1, None).unwrap();
    let mut c = Client::connect(router.addrs[0]);
    for i in 0..200 {
        c.check(&format!("set k{i} 0 0 1\r\nv\r\n"), "STORED\r\n");
    }
    // Kill one of the four.
    let mut servers: Vec<Option<Server>> = servers.into_iter().map(|(s, _)| Some(s)).collect();
    servers[1] = None;
    let dead = ports[1];
    let on_dead: Vec<usize> = (0..200)
        .filter(|i| ring.nodes()[ring.pick(format!("k{i}").as_bytes())].port == dead)
        .collect();
    assert!(!on_dead.is_empty());
    // No client-visible errors: its keys miss (the gutter is empty), the others hit.
    for i in 0..200 {
        let got = c.get(&format!("k{i}"));
        assert_eq!(got.is_some(), !on_dead.contains(&i), "k{i}");
    }
    // The application refills the dead server's keys: they land in the gutter, with a TTL
    // of at most 7 s whatever was asked, and are hits from then on.
    for &i in &on_dead {
        c.check(&format!("set k{i} 0 3600 1\r\ng\r\n"), "STORED\r\n");
    }
    for &i in &on_dead {
        assert_eq!(c.get(&format!("k{i}")).as_deref(), Some("g"));
        let ttl = Client::direct(pg).line(format!("mg k{i} t\r\n"));
        let t: i64 = ttl
            .trim_end()
            .strip_prefix("HD t")
            .unwrap()
            .parse()
            .unwrap();
        assert!((1..=7).contains(&t), "gutter TTL {t}");
    }
    // Keys are not rehashed onto the remaining servers.
    for &p in ports.iter().filter(|&&p| p != dead) {
        for &i in &on_dead {
            assert_eq!(Client::direct(p).get(&format!("k{i}")), None);
        }
    }
    let hits: u64 = c
        .stat_text("route:cache:gutter_hits")
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(hits, on_dead.len() as u64);
}

/// A server that answers `delete` with DELETED and `version`, recording the deletes.
fn recording_server(listener: TcpListener, seen: Arc<Mutex<Vec<String>>>) {
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let seen = seen.clone();
            std::thread::spawn(move || {
                let mut w = stream.try_clone().unwrap();
                for line in BufReader::new(stream).lines() {
                    let Ok(line) = line else { return };
                    let reply: &[u8] = if line.starts_with("delete ") {
                        seen.lock().unwrap().push(line);
                        b"DELETED\r\n"
                    } else if line == "version" {
                        b"VERSION recording\r\n"
                    } else {
                        b"ERROR\r\n"
                    };
                    if w.write_all(reply).is_err() {
                        return;
                    }
                }
            });
        }
    });
}

#[test]
fn deletes_for_a_dead_server_are_spooled_and_replayed_in_order_across_a_restart() {
    let spool = std::env::temp_dir().join(format!("memfleet-spool-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&spool);
    // A port with nothing on it yet (the server comes later).
    let port = memfleet_testkit::free_port();
    let config = || {
        from_toml(&format!(
            "[router]\nspool_dir = \"{}\"\n\
             [pools.main]\nlisten = \"127.0.0.1:0\"\nservers = [{}]\ntimeout_ms = 300\n\
             server_failure_limit = 1\nserver_retry_timeout_ms = 100\n",
            spool.display(),
            list(&[port])
        ))
        .unwrap()
    };
    let router = RunningRouter::start(config(), 1, None).unwrap();
    let mut c = Client::connect(router.addrs[0]);
    for i in 0..30 {
        // mcrouter's asynclog answers a spooled delete "not found" too.
        c.check(&format!("delete key{i}\r\n"), "NOT_FOUND\r\n");
    }
    assert_eq!(
        c.stat_text(&format!("spool:main--127.0.0.1-{port}"))
            .as_deref(),
        Some("30")
    );
    // The router goes away with the deletes on disk; a new one finds them.
    drop(c);
    drop(router);
    let router = RunningRouter::start(config(), 1, None).unwrap();
    let mut c = Client::connect(router.addrs[0]);
    for i in 30..40 {
        c.check(&format!("delete key{i}\r\n"), "NOT_FOUND\r\n");
    }
    // The server comes back: every delete arrives, once each... at least once, in order.
    let seen = Arc::new(Mutex::new(Vec::new()));
    recording_server(TcpListener::bind(addr(port)).unwrap(), seen.clone());
    eventually("the spool to drain", || seen.lock().unwrap().len() >= 40);
    let seen = seen.lock().unwrap().clone();
    let want: Vec<String> = (0..40).map(|i| format!("delete key{i}")).collect();
    assert_eq!(seen, want);
    eventually("the spool files to go", || {
        // What stays is the lock the router holds on its spool directory.
        std::fs::read_dir(&spool)
            .unwrap()
            .all(|e| e.unwrap().file_name() == "lock")
    });
    // Back to direct delivery.
    c.check("delete live\r\n", "DELETED\r\n");
    let _ = std::fs::remove_dir_all(&spool);
}

#[test]
fn a_cold_cluster_warms_from_the_warm_one_and_a_racing_delete_wins() {
    let (_cold, pc) = backend();
    let (_warm, pw) = backend();
    let toml = |enabled: bool| {
        format!(
            "[pools.cold]\nservers = [{}]\n[pools.warm]\nservers = [{}]\n\
             [routes.front]\nlisten = \"127.0.0.1:0\"\ntype = \"warmup\"\ncold = \"cold\"\n\
             warm = \"warm\"\nholdoff = 2\nenabled = {enabled}\n",
            list(&[pc]),
            list(&[pw])
        )
    };
    let router = RunningRouter::start(from_toml(&toml(true)).unwrap(), 1, None).unwrap();
    let mut c = Client::connect(router.addrs[0]);
    let mut warm = Client::direct(pw);
    let mut cold = Client::direct(pc);
    warm.check("set a 9 100 3\r\nold\r\n", "STORED\r\n");
    // A miss in cold is filled from warm, flags and TTL included.
    c.check("get a\r\n", "VALUE a 9 3\r\nold\r\nEND\r\n");
    assert_eq!(cold.get("a").as_deref(), Some("old"));
    let t = cold.line("mg a t f\r\n");
    assert!(t.starts_with("HD t") && t.trim_end().ends_with("f9"), "{t}");
    // The paper's race: the database changes, the delete reaches cold (through the
    // router, with a hold-off) before warm has it; a reader then misses in cold and finds
    // the old value in warm. Its fill must fail, and the reader must miss, not read "old".
    warm.check("set b 0 0 3\r\nold\r\n", "STORED\r\n");
    c.check("delete b\r\n", "NOT_FOUND\r\n");
    c.check("get b\r\n", "END\r\n");
    assert_eq!(cold.get("b"), None);
    // A set through the router is not refused by the hold-off (only adds are).
    c.check("set b 0 0 3\r\nnew\r\n", "STORED\r\n");
    c.check("get b\r\n", "VALUE b 0 3\r\nnew\r\nEND\r\n");
    assert_eq!(
        c.stat_text("route:front:fills_refused").as_deref(),
        Some("1")
    );
    assert_eq!(c.stat_text("route:front:warm_fills").as_deref(), Some("1"));
    // The cold cluster's hit rate rises from the fills: a first pass over keys only warm
    // has misses in cold (filled), a second pass hits.
    for i in 0..20 {
        warm.check(&format!("set w{i} 0 0 1\r\nx\r\n"), "STORED\r\n");
    }
    let hits = |c: &mut Client| -> u64 {
        c.stat_text("route:front:cold_hits")
            .unwrap()
            .parse()
            .unwrap()
    };
    let before = hits(&mut c);
    for i in 0..20 {
        assert_eq!(c.get(&format!("w{i}")).as_deref(), Some("x"));
    }
    assert_eq!(hits(&mut c), before);
    for i in 0..20 {
        assert_eq!(c.get(&format!("w{i}")).as_deref(), Some("x"));
    }
    assert_eq!(hits(&mut c), before + 20);
    assert_eq!(c.stat_text("route:front:warm_fills").as_deref(), Some("21"));
    // Once cold has recovered, a reload turns warm-up off: misses stay misses.
    router.reload(from_toml(&toml(false)).unwrap());
    let mut n = 0;
    eventually("the reload", || {
        n += 1;
        warm.check(&format!("set c{n} 0 0 1\r\nw\r\n"), "STORED\r\n");
        Client::connect(router.addrs[0])
            .get(&format!("c{n}"))
            .is_none()
    });
    assert_eq!(cold.get(&format!("c{n}")), None);
}

#[test]
fn routing_prefixes_pick_cluster_or_regional_pools_and_are_stripped() {
    let (_local, pl) = backend();
    let (_regional, pr) = backend();
    let config = from_toml(&format!(
        "[pools.cluster]\nservers = [{}]\n[pools.regional]\nservers = [{}]\n\
         [routes.front]\nlisten = \"127.0.0.1:0\"\ntype = \"prefix\"\nstrip = true\n\
         prefixes = {{ \"/west/c1/\" = \"cluster\", \"/west/*/\" = \"regional\" }}\n\
         default = \"cluster\"\n",
        list(&[pl]),
        list(&[pr])
    ))
    .unwrap();
    let router = RunningRouter::start(config, 1, None).unwrap();
    let mut c = Client::connect(router.addrs[0]);
    c.check("set /west/*/big 0 0 1\r\nr\r\n", "STORED\r\n");
    c.check("set /west/c1/small 0 0 1\r\nl\r\n", "STORED\r\n");
    c.check("ms /west/*/meta 1\r\nm\r\n", "HD\r\n");
    // Stored under the key without its routing prefix, in the pool the prefix names.
    assert_eq!(Client::direct(pr).get("big").as_deref(), Some("r"));
    assert_eq!(Client::direct(pr).get("meta").as_deref(), Some("m"));
    assert_eq!(Client::direct(pl).get("small").as_deref(), Some("l"));
    assert_eq!(Client::direct(pl).get("big"), None);
    // Keys without a prefix go to the default, as they are.
    c.check("set plain 0 0 1\r\np\r\n", "STORED\r\n");
    assert_eq!(Client::direct(pl).get("plain").as_deref(), Some("p"));
    // A get answers with the key the client asked for.
    c.check(
        "get /west/*/big\r\n",
        "VALUE /west/*/big 0 1\r\nr\r\nEND\r\n",
    );
}

#[test]
fn an_all_async_broadcast_answers_at_once_and_still_reaches_everyone() {
    let (_a, pa) = backend();
    let (_b, pb) = backend();
    let config = from_toml(&format!(
        "[pools.a]\nservers = [{}]\n[pools.b]\nservers = [{}]\n\
         [routes.fanout]\nlisten = \"127.0.0.1:0\"\ntype = \"broadcast\"\nmode = \"all-async\"\n\
         to = [\"a\", \"b\"]\n",
        list(&[pa]),
        list(&[pb])
    ))
    .unwrap();
    let router = RunningRouter::start(config, 1, None).unwrap();
    let mut c = Client::connect(router.addrs[0]);
    // Answered before the servers reply: sets as stored, deletes as NOT_FOUND (mcrouter's
    // default reply: nothing claims the delete happened).
    c.check("set k 0 0 1\r\nv\r\n", "STORED\r\n");
    eventually("both copies", || {
        Client::direct(pa).get("k").is_some() && Client::direct(pb).get("k").is_some()
    });
    c.check("delete k\r\n", "NOT_FOUND\r\n");
    eventually("both deletes", || {
        Client::direct(pa).get("k").is_none() && Client::direct(pb).get("k").is_none()
    });
    // A read needs an answer: the first destination's.
    Client::direct(pa).check("set r 0 0 1\r\na\r\n", "STORED\r\n");
    c.check("get r\r\n", "VALUE r 0 1\r\na\r\nEND\r\n");
}

#[test]
fn the_route_admin_key_names_every_server_a_key_reaches_through_a_route_tree() {
    let (_a1, pa1) = backend();
    let (_a2, pa2) = backend();
    let (_b, pb) = backend();
    let (_g, pg) = backend();
    let (_r1, pr1) = backend();
    let (_r2, pr2) = backend();
    let config = from_toml(&format!(
        "[pools.a]\nservers = [{}]\n[pools.b]\nservers = [{}]\n\
         [pools.gutter]\nservers = [{}]\n[pools.regional]\nservers = [{}]\n\
         [routes.front]\nlisten = \"127.0.0.1:0\"\ntype = \"prefix\"\nstrip = true\n\
         prefixes = {{ \"/r/\" = \"regional\" }}\ndefault = \"ops\"\n\
         [routes.ops]\ntype = \"operation\"\ndelete = \"everywhere\"\ndefault = \"cache\"\n\
         [routes.cache]\ntype = \"gutter\"\nmain = \"a\"\ngutter = \"gutter\"\n\
         [routes.everywhere]\ntype = \"broadcast\"\nto = [\"a\", \"b\"]\n",
        list(&[pa1, pa2]),
        list(&[pb]),
        list(&[pg]),
        list(&[pr1, pr2])
    ))
    .unwrap();
    let router = RunningRouter::start(config, 1, None).unwrap();
    let mut c = Client::connect(router.addrs[0]);
    // Where the keys really go: set through the router, found on one server.
    let holder = |ports: &[u16], key: &str| {
        let found: Vec<u16> = ports
            .iter()
            .copied()
            .filter(|&p| Client::direct(p).get(key).is_some())
            .collect();
        assert_eq!(found.len(), 1, "{key} on {found:?}");
        found[0]
    };
    let value = |admin: &str, servers: &[u16]| {
        let v = servers
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect::<Vec<_>>()
            .join(" ");
        format!("VALUE {admin} 0 {}\r\n{v}\r\n", v.len())
    };
    // At least eight keys, and more until both of `a`'s servers hold one (where keys land
    // depends on the servers' random ports).
    let mut plain = Vec::new();
    for i in 0..64 {
        if i >= 8 && plain.contains(&pa1) && plain.contains(&pa2) {
            break;
        }
        c.check(&format!("set k{i} 0 0 1\r\nv\r\n"), "STORED\r\n");
        c.check(&format!("set /r/x{i} 0 0 1\r\nv\r\n"), "STORED\r\n");
        plain.push(holder(&[pa1, pa2], &format!("k{i}")));
        // The regional pool sees the key without its routing prefix, and so does the answer.
        let regional = holder(&[pr1, pr2], &format!("x{i}"));
        // A plain key: its server in `a` (gets and sets), the gutter behind it, and `b`
        // (its deletes go to both clusters), the get's server first.
        let admin = format!("__memfleet__.route(k{i})");
        c.check(
            &format!("get {admin}\r\n"),
            &format!("{}END\r\n", value(&admin, &[plain[i], pg, pb])),
        );
        let admin = format!("__memfleet__.route(/r/x{i})");
        c.check(
            &format!("get {admin}\r\n"),
            &format!("{}END\r\n", value(&admin, &[regional])),
        );
    }
    assert!(
        plain.contains(&pa1) && plain.contains(&pa2),
        "{} keys all on one of two servers: {plain:?}",
        plain.len()
    );
    // Several admin keys in one get, in the client's order.
    c.check(
        "get __memfleet__.route(k0) __memfleet__.route(k1)\r\n",
        &format!(
            "{}{}END\r\n",
            value("__memfleet__.route(k0)", &[plain[0], pg, pb]),
            value("__memfleet__.route(k1)", &[plain[1], pg, pb])
        ),
    );
}
