//! `shadow` through a real `memfleet router` in front of real `memfleet server`s: main
//! answers alone; the keys of `key_fraction` (always the same ones) are copied to the
//! shadow; gets are compared and mismatches counted in `stats` and `/metrics`; a full
//! queue drops copies (counted) and never slows main down.

use crate::support;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};
use support::{free_port, memfleet_server, until_serving, Conn};

fn eventually(what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_shadow_gets_the_same_keys_main_answers_and_mismatches_are_counted() {
    let (_old, old) = memfleet_server(&["-t", "1", "-m", "16"]);
    let (_new, new) = memfleet_server(&["-t", "1", "-m", "16"]);
    until_serving(old);
    until_serving(new);
    // A shadow that never answers: its copies fill the queue.
    let hung = TcpListener::bind("127.0.0.1:0").unwrap();
    let hung_port = hung.local_addr().unwrap().port();
    let (port, full, admin) = (free_port(), free_port(), free_port());
    let file = std::env::temp_dir().join(format!("memfleet-shadow-{}.toml", std::process::id()));
    std::fs::write(
        &file,
        format!(
            "[pools.old]\nservers = [\"127.0.0.1:{old}\"]\n\
             [pools.new]\nservers = [\"127.0.0.1:{new}\"]\n\
             [pools.hung]\ntimeout_ms = 3000\nservers = [\"127.0.0.1:{hung_port}\"]\n\
             [routes.try_new]\nlisten = \"127.0.0.1:{port}\"\ntype = \"shadow\"\n\
             main = \"old\"\nshadow = \"new\"\nkey_fraction = [0.0, 0.5]\n\
             [routes.full]\nlisten = \"127.0.0.1:{full}\"\ntype = \"shadow\"\n\
             main = \"old\"\nshadow = \"hung\"\nmax_pending = 2\n"
        ),
    )
    .unwrap();
    let _router = support::router(&file, Some(admin));
    until_serving(port);
    let (mut c, mut on_old, mut on_new) = (Conn::new(port), Conn::new(old), Conn::new(new));

    // Half the key space is shadowed: those keys, and only those, reach the new cluster.
    let keys: Vec<String> = (0..200).map(|i| format!("user:{i}")).collect();
    for k in &keys {
        assert_eq!(c.line(format!("set {k} 0 0 1\r\nv\r\n")), "STORED\r\n");
    }
    let shadowed = |on_new: &mut Conn| -> Vec<String> {
        keys.iter()
            .filter(|k| on_new.get(k).is_some())
            .cloned()
            .collect()
    };
    eventually("the copies", || {
        shadowed(&mut on_new).len() as u64 == c.stat("route:try_new:shadow_requests").unwrap()
    });
    let first = shadowed(&mut on_new);
    assert!(
        (60..=140).contains(&first.len()),
        "{} of 200 shadowed",
        first.len()
    );
    assert_eq!(
        c.stat("route:try_new:shadow_requests").unwrap(),
        first.len() as u64
    );
    for k in &keys {
        assert_eq!(on_old.get(k).as_deref(), Some("v"), "main has every key");
    }
    // The same keys every time (the key's hash decides): deleted through the route, set
    // again, the new cluster holds the same ones.
    for k in &keys {
        assert_eq!(c.line(format!("delete {k}\r\n")), "DELETED\r\n");
    }
    eventually("the deletes", || shadowed(&mut on_new).is_empty());
    for k in &keys {
        assert_eq!(c.line(format!("set {k} 0 0 1\r\nw\r\n")), "STORED\r\n");
    }
    eventually("the same keys", || shadowed(&mut on_new) == first);

    // Main answers alone; gets that reach both are compared.
    let (hit, miss) = (&first[0], keys.iter().find(|k| !first.contains(k)).unwrap());
    assert_eq!(c.get(hit).as_deref(), Some("w"));
    eventually("a comparison", || {
        c.stat("route:try_new:shadow_compared").unwrap() == 1
    });
    assert_eq!(c.stat("route:try_new:shadow_mismatches").unwrap(), 0);
    assert_eq!(
        on_new.line(format!("set {hit} 0 0 5\r\nstale\r\n")),
        "STORED\r\n"
    );
    assert_eq!(
        c.get(hit).as_deref(),
        Some("w"),
        "the client sees main's value"
    );
    eventually("a mismatch", || {
        c.stat("route:try_new:shadow_mismatches").unwrap() == 1
    });
    assert_eq!(c.get(miss).as_deref(), Some("w"));
    assert_eq!(
        c.stat("route:try_new:shadow_compared").unwrap(),
        2,
        "an unshadowed key"
    );
    // ... in /metrics too.
    let mut http = TcpStream::connect(("127.0.0.1", admin)).unwrap();
    http.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
    let mut metrics = String::new();
    http.read_to_string(&mut metrics).unwrap();
    assert!(
        metrics.contains("memfleet_router_route_shadow_mismatches{route=\"try_new\"} 1"),
        "{metrics}"
    );

    // A shadow that hangs: two copies wait, the rest are dropped, and main answers at once.
    let mut f = Conn::new(full);
    let started = Instant::now();
    for i in 0..10 {
        assert_eq!(f.line(format!("set h{i} 0 0 1\r\nv\r\n")), "STORED\r\n");
    }
    assert_eq!(f.get("h9").as_deref(), Some("v"));
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "main waited for the shadow"
    );
    assert_eq!(f.stat("route:full:shadow_requests").unwrap(), 2);
    assert_eq!(f.stat("route:full:shadow_dropped").unwrap(), 9);
    drop(hung);
    let _ = std::fs::remove_file(file);
}

#[test]
fn index_range_shadows_the_keys_of_main_servers_by_index() {
    let (_a, a) = memfleet_server(&["-t", "1", "-m", "16"]);
    let (_b, b) = memfleet_server(&["-t", "1", "-m", "16"]);
    let (_new, new) = memfleet_server(&["-t", "1", "-m", "16"]);
    for p in [a, b, new] {
        until_serving(p);
    }
    let port = free_port();
    let file =
        std::env::temp_dir().join(format!("memfleet-shadow-index-{}.toml", std::process::id()));
    std::fs::write(
        &file,
        format!(
            "[pools.old]\nservers = [\"127.0.0.1:{a}\", \"127.0.0.1:{b}\"]\n\
             [pools.new]\nservers = [\"127.0.0.1:{new}\"]\n\
             [routes.r]\nlisten = \"127.0.0.1:{port}\"\ntype = \"shadow\"\n\
             main = \"old\"\nshadow = \"new\"\nindex_range = [0, 1]\n"
        ),
    )
    .unwrap();
    let _router = support::router(&file, None);
    until_serving(port);
    let mut c = Conn::new(port);
    let keys: Vec<String> = (0..100).map(|i| format!("k{i}")).collect();
    for k in &keys {
        assert_eq!(c.line(format!("set {k} 0 0 1\r\nv\r\n")), "STORED\r\n");
    }
    let on = |port: u16| -> Vec<String> {
        let mut s = Conn::new(port);
        keys.iter()
            .filter(|k| s.get(k).is_some())
            .cloned()
            .collect()
    };
    let (on_a, on_b) = (on(a), on(b));
    assert!(
        !on_a.is_empty() && !on_b.is_empty(),
        "both servers hold keys"
    );
    eventually("the copies", || {
        c.stat("route:r:shadow_requests").unwrap() as usize == on(new).len()
    });
    let copied = on(new);
    assert!(
        copied == on_a || copied == on_b,
        "the new cluster holds exactly one main server's keys"
    );
    let _ = std::fs::remove_file(file);
}
