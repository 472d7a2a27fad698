//! The client library against real `memfleet server`s: every command, compressed and typed
//! values, look-aside with leases under many concurrent callers (one loader call), stale
//! reads, the flow-control window under timeouts, and the router's gutter from the same
//! configuration.

use memfleet_client::{CasOutcome, Client, ClientOptions, Lease, FLAG_COMPRESSED};
use memfleet_routing::from_toml;
use memfleet_server::{Server, Settings};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn server() -> (Server, u16) {
    let s = Server::start(Settings::single_worker(0, 16 << 20)).expect("server starts");
    let port = s.local_addr().port();
    (s, port)
}

fn pool(name: &str, ports: &[u16], extra: &str) -> String {
    let list: Vec<String> = ports.iter().map(|p| format!("\"127.0.0.1:{p}\"")).collect();
    format!("[pools.{name}]\nservers = [{}]\n{extra}\n", list.join(", "))
}

/// What a server holds for `key`, asked directly (not through the client).
fn direct(port: u16, request: &str) -> Vec<u8> {
    let mut s = TcpStream::connect(SocketAddr::from(([127, 0, 0, 1], port))).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 65536];
    while let Ok(n) = s.read(&mut buf) {
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
        if out.ends_with(b"END\r\n") || out.ends_with(b"\r\n") && !out.starts_with(b"VALUE") {
            break;
        }
    }
    out
}

#[tokio::test]
async fn every_command_round_trips_through_the_pool() {
    let (_a, pa) = server();
    let (_b, pb) = server();
    let cache =
        Client::with_servers(&[&format!("127.0.0.1:{pa}"), &format!("127.0.0.1:{pb}")]).unwrap();
    cache.set("k", b"v1", 0).await.unwrap();
    let v = cache.get("k").await.unwrap().unwrap();
    assert_eq!((v.data.as_slice(), v.flags, v.cas), (&b"v1"[..], 0, None));
    cache.set_with_flags("f", b"x", 42, 0).await.unwrap();
    assert_eq!(cache.get("f").await.unwrap().unwrap().flags, 42);
    assert!(!cache.add("k", b"no", 0).await.unwrap());
    assert!(cache.add("new", b"yes", 0).await.unwrap());
    assert!(cache.replace("k", b"v2", 0).await.unwrap());
    assert!(!cache.replace("absent", b"v", 0).await.unwrap());
    assert!(cache.append("k", b"+").await.unwrap());
    assert!(cache.prepend("k", b"<").await.unwrap());
    assert_eq!(cache.get("k").await.unwrap().unwrap().data, b"<v2+");
    let cas = cache.gets("k").await.unwrap().unwrap().cas.unwrap();
    assert_eq!(
        cache.cas("k", b"c1", 0, cas).await.unwrap(),
        CasOutcome::Stored
    );
    assert_eq!(
        cache.cas("k", b"c2", 0, cas).await.unwrap(),
        CasOutcome::Exists
    );
    assert_eq!(
        cache.cas("gone", b"c", 0, 1).await.unwrap(),
        CasOutcome::NotFound
    );
    cache.set("n", b"10", 0).await.unwrap();
    assert_eq!(cache.incr("n", 5).await.unwrap(), Some(15));
    assert_eq!(cache.decr("n", 20).await.unwrap(), Some(0));
    assert_eq!(cache.incr("nothing", 1).await.unwrap(), None);
    assert!(cache.touch("k", 100).await.unwrap());
    assert!(!cache.touch("nothing", 100).await.unwrap());
    assert_eq!(cache.gat("k", 200).await.unwrap().unwrap().data, b"c1");
    assert!(cache.delete("k").await.unwrap());
    assert!(!cache.delete("k").await.unwrap());
    assert_eq!(cache.get("k").await.unwrap(), None);
    // Meta commands, routed by key like the rest.
    assert_eq!(
        cache.meta("ms", "m", "T0 F3", Some(b"meta")).await.unwrap(),
        b"HD\r\n"
    );
    assert_eq!(
        cache.meta("mg", "m", "v f", None).await.unwrap(),
        b"VA 4 f3\r\nmeta\r\n"
    );
    // Many keys at once, across both servers; misses left out.
    let keys: Vec<String> = (0..50).map(|i| format!("many:{i}")).collect();
    for k in keys.iter().step_by(2) {
        cache.set(k, k.as_bytes(), 0).await.unwrap();
    }
    let found = cache.get_many(&keys).await.unwrap();
    assert_eq!(found.len(), 25);
    assert!(keys
        .iter()
        .step_by(2)
        .all(|k| found[k.as_bytes()].data == k.as_bytes()));
    // Both servers hold some of them (the pool's ring spread them).
    let on = |port| {
        keys.iter()
            .filter(|k| direct(port, &format!("get {k}\r\n")).starts_with(b"VALUE"))
            .count()
    };
    assert!(on(pa) > 0 && on(pb) > 0 && on(pa) + on(pb) == 25);
    // Every server answers version; flush_all empties them all.
    let versions = cache.versions().await;
    assert_eq!(versions.len(), 2);
    assert!(
        versions
            .iter()
            .all(|(_, v)| v.as_ref().unwrap().starts_with("1.6")),
        "{versions:?}"
    );
    cache.flush_all().await.unwrap();
    assert!(cache.get_many(&keys).await.unwrap().is_empty());
    // Bad keys are refused before anything is sent.
    assert!(cache.get("with space").await.is_err());
    assert!(cache.set("k".repeat(251), b"v", 0).await.is_err());
}

#[tokio::test]
async fn large_values_are_compressed_and_typed_values_round_trip() {
    let (_s, port) = server();
    let config = from_toml(&pool("main", &[port], "")).unwrap();
    let options = ClientOptions {
        compress_above: Some(1024),
        ..ClientOptions::default()
    };
    let cache = Client::new(&config, "main", options).unwrap();
    let big = "all work and no play ".repeat(500).into_bytes();
    cache.set_with_flags("big", &big, 7, 0).await.unwrap();
    let stored = direct(port, "mg big s f\r\n");
    let line = String::from_utf8_lossy(&stored).to_string();
    let size: usize = line
        .split(' ')
        .find_map(|w| w.strip_prefix('s')?.parse().ok())
        .unwrap();
    let flags: u32 = line
        .split(' ')
        .find_map(|w| w.trim_end().strip_prefix('f')?.parse().ok())
        .unwrap();
    assert!(size < big.len() / 4, "stored {size} bytes of {}", big.len());
    assert_eq!(flags, 7 | FLAG_COMPRESSED);
    let back = cache.get("big").await.unwrap().unwrap();
    assert_eq!((back.data, back.flags), (big, 7));
    // Small values are stored as they are.
    cache.set("small", b"tiny", 0).await.unwrap();
    assert!(direct(port, "get small\r\n").starts_with(b"VALUE small 0 4\r\ntiny"));

    #[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
    struct Profile {
        name: String,
        friends: Vec<u32>,
    }
    let p = Profile {
        name: "Ada".into(),
        friends: vec![1, 2, 3],
    };
    cache.set_json("profile:1", &p, 0).await.unwrap();
    assert_eq!(
        cache.get_json::<Profile>("profile:1").await.unwrap(),
        Some(p)
    );
    assert_eq!(cache.get_json::<Profile>("profile:2").await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_key_is_loaded_once_however_many_callers_miss() {
    let (_s, port) = server();
    let config = from_toml(&pool("main", &[port], "")).unwrap();
    let cache = Client::new(&config, "main", ClientOptions::default()).unwrap();
    let loads = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..50)
        .map(|_| {
            let (cache, loads) = (cache.clone(), loads.clone());
            tokio::spawn(async move {
                cache
                    .get_or_fill("hot", 60, || {
                        let loads = loads.clone();
                        async move {
                            loads.fetch_add(1, Ordering::SeqCst);
                            // A slow database: every other caller misses meanwhile.
                            tokio::time::sleep(Duration::from_millis(100)).await;
                            Ok::<_, std::io::Error>(b"from the database".to_vec())
                        }
                    })
                    .await
                    .unwrap()
            })
        })
        .collect();
    for t in tasks {
        assert_eq!(t.await.unwrap(), b"from the database");
    }
    assert_eq!(
        loads.load(Ordering::SeqCst),
        1,
        "the loader ran more than once"
    );
    // Filled with the lease: a plain get hits.
    assert_eq!(
        cache.get("hot").await.unwrap().unwrap().data,
        b"from the database"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_values_are_taken_when_allowed_and_stale_sets_are_refused() {
    let (_s, port) = server();
    let config = from_toml(&pool("main", &[port], "")).unwrap();
    let strict = Client::new(&config, "main", ClientOptions::default()).unwrap();
    let relaxed = Client::new(
        &config,
        "main",
        ClientOptions {
            accept_stale: true,
            ..ClientOptions::default()
        },
    )
    .unwrap();
    strict.set("row", b"old", 0).await.unwrap();
    strict.delete("row").await.unwrap();
    // A first reader takes the lease and its database read is slow.
    let Lease::Token { token, stale } = strict.lease_get("row").await.unwrap() else {
        panic!("no lease for the first reader");
    };
    assert_eq!(stale.unwrap().data, b"old");
    // A reader that accepts stale data does not wait for it.
    let started = Instant::now();
    let got = relaxed
        .get_or_fill("row", 60, || async {
            Ok::<_, std::io::Error>(b"loaded".to_vec())
        })
        .await
        .unwrap();
    assert_eq!(got, b"old");
    assert!(started.elapsed() < Duration::from_millis(500));
    // The database changes again before the first reader fills: its set is refused.
    strict.delete("row").await.unwrap();
    assert!(!strict
        .lease_set("row", token, b"stale fill", 60)
        .await
        .unwrap());
    assert_eq!(strict.get("row").await.unwrap(), None);
}

/// A server that accepts connections and never answers (nor closes them).
fn black_hole() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in l.incoming().flatten() {
            held.push(s);
        }
    });
    port
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_window_shrinks_when_requests_time_out_and_grows_back() {
    let (_s, good) = server();
    let hole = black_hole();
    // Timeouts but no knockout (a failure limit never reached): every request to the hole
    // times out.
    let config = from_toml(&format!(
        "{}{}\n[routes.r]\ntype = \"prefix\"\nprefixes = {{ \"slow:\" = \"hole\" }}\ndefault = \"good\"\n",
        pool("good", &[good], ""),
        pool("hole", &[hole], "timeout_ms = 50\nserver_failure_limit = 1000"),
    ))
    .unwrap();
    let cache = Client::new(
        &config,
        "r",
        ClientOptions {
            window: (32, 1, 64),
            ..ClientOptions::default()
        },
    )
    .unwrap();
    assert_eq!(cache.window_size(), 32);
    for i in 0..4 {
        assert!(cache.get(format!("slow:{i}")).await.is_err());
    }
    assert_eq!(cache.window_size(), 2, "halved on each of 4 timeouts");
    // Successes grow it again, one per window's worth.
    for i in 0..200 {
        cache.get(format!("fine:{i}")).await.unwrap();
    }
    assert!(cache.window_size() >= 16, "window {}", cache.window_size());
    assert_eq!(cache.outstanding(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_fails_over_to_the_gutter_like_the_router() {
    let (main, pm) = server();
    let (_g, pg) = server();
    let config = from_toml(&format!(
        "{}{}\n[routes.cache]\ntype = \"gutter\"\nmain = \"main\"\ngutter = \"gutter\"\ngutter_ttl = 5\n",
        pool("main", &[pm], "timeout_ms = 200\nserver_failure_limit = 1"),
        pool("gutter", &[pg], ""),
    ))
    .unwrap();
    let cache = Client::new(&config, "cache", ClientOptions::default()).unwrap();
    cache.set("k", b"main", 3600).await.unwrap();
    drop(main);
    // The main server is gone: gets miss (no error), a refill lands in the gutter with
    // its TTL capped, and hits.
    assert_eq!(cache.get("k").await.unwrap(), None);
    cache.set("k", b"gutter", 3600).await.unwrap();
    assert_eq!(cache.get("k").await.unwrap().unwrap().data, b"gutter");
    let ttl = String::from_utf8(direct(pg, "mg k t\r\n")).unwrap();
    let t: u32 = ttl
        .trim_end()
        .strip_prefix("HD t")
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=5).contains(&t), "{ttl}");
    let counters = cache.topology().route_counters();
    assert_eq!(counters[0].1.get("gutter_hits"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_markers_send_reads_to_the_master_until_the_replica_catches_up() {
    let (_local, pl) = server();
    let (_regional, pr) = server();
    let config = from_toml(&format!(
        "{}{}\n[routes.front]\ntype = \"prefix\"\nprefixes = {{ \"remote-marker:\" = \"regional\" }}\n\
         default = \"local\"\n",
        pool("local", &[pl], ""),
        pool("regional", &[pr], ""),
    ))
    .unwrap();
    let cache = Client::new(&config, "front", ClientOptions::default()).unwrap();
    let read = |cache: Client| async move {
        cache
            .get_or_fill_regional(
                "user:1",
                60,
                || async { Ok::<_, std::io::Error>(b"replica".to_vec()) },
                || async { Ok::<_, std::io::Error>(b"master".to_vec()) },
            )
            .await
            .unwrap()
    };
    // A write from this replica region: marker first (in the regional pool), then the
    // database write, then the local delete.
    let marker = cache.mark_remote_write("user:1", 60).await.unwrap();
    let token = marker.strip_prefix("remote-marker:user:1:").unwrap();
    assert_eq!(token.len(), 16, "{marker}");
    // The write's marker and the key's index (naming the write's token), both in the
    // regional pool.
    assert!(direct(pr, &format!("get {marker}\r\n")).starts_with(b"VALUE"));
    let index = direct(pr, "get remote-marker:user:1\r\n");
    assert!(String::from_utf8_lossy(&index).contains(token), "{index:?}");
    assert!(direct(pl, "get remote-marker:user:1\r\n").starts_with(b"END"));
    cache.delete("user:1").await.unwrap();
    // Until the invalidation arrives, a miss reads the master (and fills with it).
    assert_eq!(read(cache.clone()).await, b"master");
    // A second write of the key before the first's invalidation arrived: the first's
    // invalidation (late, or delivered again) must not clear the second's marker.
    let second = cache.mark_remote_write("user:1", 60).await.unwrap();
    assert_ne!(second, marker);
    cache.delete("user:1").await.unwrap();
    cache.delete(&marker).await.unwrap();
    assert_eq!(read(cache.clone()).await, b"master");
    // Two web servers writing the key at once: both writes are listed in the index, and
    // the key stays marked until the last of them has arrived, in whatever order.
    let third = cache.mark_remote_write("user:1", 60).await.unwrap();
    let index = direct(pr, "get remote-marker:user:1\r\n");
    for token in [&second, &third] {
        let token = token.rsplit(':').next().unwrap();
        assert!(String::from_utf8_lossy(&index).contains(token), "{index:?}");
    }
    cache.delete("user:1").await.unwrap();
    cache.delete(&third).await.unwrap();
    assert_eq!(read(cache.clone()).await, b"master");
    // The replica has the second write too: its invalidation deletes the key and its
    // marker.
    cache.delete("user:1").await.unwrap();
    cache.delete(&second).await.unwrap();
    assert_eq!(read(cache.clone()).await, b"replica");
    assert_eq!(cache.get("user:1").await.unwrap().unwrap().data, b"replica");
    let stats = cache.regional_stats();
    assert_eq!(
        (stats.markers_set, stats.master_reads, stats.replica_reads),
        (3, 3, 1)
    );
}
