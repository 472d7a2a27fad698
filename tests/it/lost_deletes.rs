//! No lost and no late delete in the routing layer (paper §3.3, §4.1, §5: "mcrouters buffer
//! deletes when downstream components become unresponsive... replayed once these downstream
//! components are available again"). A `memfleet router` process in front of `memfleet
//! server` processes, with the router's *default* settings for the spool (no `spool_dir`):
//!
//! | fault | expected |
//! |---|---|
//! | a server hangs (SIGSTOP) while its keys are deleted through a pool and a gutter route | every delete answered `NOT_FOUND` (spooled), none an error; once it is back, no read through either route returns a deleted value, and the spool is replayed within 2 s |
//! | the same, with the router restarted while the server is away | the new router replays the old one's spool before the server serves reads |
//! | the same with the server behind a cut link (network namespace, no RST) | as for a hung server |
//! | the same with the server killed (`kill -9`) and restarted on its port | every delete spooled and replayed to the new server |
//! | the same with `spool_deletes = false` | every such delete answers `SERVER_ERROR`, never a success-looking reply |
//! | a replica hangs under a replicated route | sets `STORED` (policy `any`), deletes `DELETED`; its deletes reach it before it serves reads |
//!
//! Numbers are printed (`cargo test --test it lost_deletes:: -- --nocapture`).

use crate::support;

use crate::faults::fleet::{
    ask, placement, router_toml, server, server_with, signal, stat, three_servers, Router,
};
use crate::faults::netns::Namespace;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use support::{free_port, Killed};

/// Replay after a server is back must end within this (plus a loaded machine's slack).
const REPLAY_BOUND: Duration = Duration::from_secs(2);
const SLACK: Duration = Duration::from_millis(1000);

/// One test at a time: they time replays.
static SERIAL: Mutex<()> = Mutex::new(());

fn local(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// A get's reply, whole (one key).
fn get(addr: SocketAddr, key: &str) -> String {
    use std::io::{BufRead, BufReader, Write};
    let s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut s = BufReader::new(s);
    s.get_mut()
        .write_all(format!("get {key}\r\n").as_bytes())
        .unwrap();
    let mut out = String::new();
    while !out.ends_with("END\r\n") && !out.contains("ERROR") {
        if s.read_line(&mut out).unwrap() == 0 {
            break;
        }
    }
    out
}

/// Readers that get every key through every listener, over and over, from before the
/// server returns until `drained` holds (so a read that reaches the server in the moment
/// it answers again is among them); counts replies that carry the stale value. `back`
/// brings the server back and says when. Returns (stale reads, reads, time from then
/// until drained).
fn read_until_drained(
    listeners: &[SocketAddr],
    keys: &[String],
    back: impl FnOnce() -> Instant,
    drained: impl Fn() -> bool,
) -> (usize, usize, Duration) {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let stop = AtomicBool::new(false);
    let (stale, reads) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let at = std::thread::scope(|scope| {
        for &l in listeners {
            let (stop, stale, reads) = (&stop, &stale, &reads);
            scope.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    for k in keys {
                        reads.fetch_add(1, Ordering::Relaxed);
                        if get(l, k).contains("stale") {
                            stale.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            });
        }
        // Let the readers get going against the away server first.
        std::thread::sleep(Duration::from_millis(100));
        let back = back();
        while !drained() {
            assert!(
                back.elapsed() < Duration::from_secs(15),
                "the spool never drained"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        let at = back.elapsed();
        // A little longer: reads right after the replay count too.
        std::thread::sleep(Duration::from_millis(200));
        stop.store(true, Ordering::Relaxed);
        at
    });
    (stale.into_inner(), reads.into_inner(), at)
}

/// How the server holding the deleted keys goes away, and comes back.
#[derive(Clone, Copy, PartialEq)]
enum Away {
    /// SIGSTOP, then SIGCONT.
    Hang,
    /// SIGSTOP; the router is restarted while the server is away; SIGCONT.
    HangAcrossRouterRestart,
    /// The server runs in a network namespace whose link is cut (packets vanish: no RST),
    /// then restored.
    LinkCut,
    /// `kill -9`, then a new server on the same port (empty: nothing stale can survive,
    /// but the spool must still drain and no delete may fail).
    Killed,
}

impl Away {
    fn test_name(self) -> &'static str {
        match self {
            Away::Hang => "lost-hang",
            Away::HangAcrossRouterRestart => "lost-restart",
            Away::LinkCut => "lost-linkcut",
            Away::Killed => "lost-kill9",
        }
    }
}

/// The away-server scenario: one server's keys hold `stale`; it goes away; every one of
/// them is deleted through the router (pool listener and gutter route); it comes back
/// while readers loop over those keys. No delete may fail or be lost, no read may return
/// `stale`, and the spool must drain within [`REPLAY_BOUND`].
fn away_server_gets_every_delete_before_serving(away: Away) {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let victim = 1;
    let ns = if away == Away::LinkCut {
        match Namespace::create() {
            Ok(ns) => Some(ns),
            Err(why) => {
                eprintln!(
                    "SKIPPED: cannot make a network namespace ({why}); run as root with iproute2"
                );
                return;
            }
        }
    } else {
        None
    };
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let mut names: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let mut servers: Vec<Option<Killed>> = Vec::new();
    for (i, &port) in ports.iter().enumerate() {
        servers.push(Some(match &ns {
            Some(ns) if i == victim => {
                names[i] = format!("{}:{port}", ns.ns_addr);
                server_with(
                    ns.command(env!("CARGO_BIN_EXE_memfleet")),
                    &ns.ns_addr,
                    port,
                )
            }
            _ => server(port),
        }));
    }
    let victim_addr: SocketAddr = names[victim].parse().unwrap();
    let gutter_port = free_port();
    let _gutter = server(gutter_port);
    let (listen, safe) = (free_port(), free_port());
    let toml = router_toml(listen, &names, Some((safe, gutter_port)), None);
    let keys: Vec<String> = (0..90).map(|i| format!("inval:{i}")).collect();
    let on = placement(&toml, &names, &keys);
    let test = away.test_name();
    let mut router = Router::start(test, &toml, listen);
    let victim_keys: Vec<String> = (0..keys.len())
        .filter(|&k| on[k] == victim)
        .map(|k| keys[k].clone())
        .collect();
    for k in &victim_keys {
        let set = format!("set {k} 0 0 5\r\nstale\r\n");
        assert_eq!(ask(victim_addr, &set), "STORED\r\n");
    }
    match away {
        Away::Hang | Away::HangAcrossRouterRestart => {
            signal(servers[victim].as_ref().unwrap(), libc::SIGSTOP)
        }
        Away::LinkCut => ns.as_ref().unwrap().link(false),
        Away::Killed => drop(servers[victim].take()),
    }
    // Half the deletes through the pool's listener, half through the gutter route.
    let deleting = Instant::now();
    for (i, k) in victim_keys.iter().enumerate() {
        let via = if i % 2 == 0 { listen } else { safe };
        let reply = ask(local(via), &format!("delete {k}\r\n"));
        assert_eq!(reply, "NOT_FOUND\r\n", "delete {k} through port {via}");
    }
    let deleting = deleting.elapsed();
    let queue = format!("spool:main--{}", names[victim].replace(':', "-"));
    let spooled = victim_keys.len().to_string();
    assert_eq!(
        stat(local(listen), &queue).as_deref(),
        Some(spooled.as_str())
    );
    if away == Away::HangAcrossRouterRestart {
        // The server comes back while no router runs; the new router starts with the
        // old one's spool and must replay it before serving the server's keys.
        router.terminate();
        signal(servers[victim].as_ref().unwrap(), libc::SIGCONT);
        router.spawn(listen);
    }
    let (stale, reads, replay) = read_until_drained(
        &[local(listen), local(safe)],
        &victim_keys,
        || {
            match away {
                Away::Hang => signal(servers[victim].as_ref().unwrap(), libc::SIGCONT),
                Away::HangAcrossRouterRestart => {}
                Away::LinkCut => ns.as_ref().unwrap().link(true),
                Away::Killed => servers[victim] = Some(server(ports[victim])),
            }
            Instant::now()
        },
        || stat(local(listen), &queue).is_none_or(|d| d == "0"),
    );
    eprintln!(
        "{test}: {} deletes spooled in {deleting:?}; after the server returned: {stale} stale \
         of {reads} reads, spool replayed in {replay:?}",
        victim_keys.len()
    );
    assert_eq!(
        stale, 0,
        "a deleted value was served after the server returned"
    );
    assert!(replay < REPLAY_BOUND + SLACK, "replay took {replay:?}");
    for k in &victim_keys {
        assert_eq!(get(victim_addr, k), "END\r\n", "{k} survived");
    }
    assert!(!router.log().contains("panicked"));
}

#[test]
fn a_hung_server_gets_every_delete_before_it_serves_again() {
    away_server_gets_every_delete_before_serving(Away::Hang);
}

#[test]
fn a_restarted_router_replays_the_old_spool_before_the_server_serves() {
    away_server_gets_every_delete_before_serving(Away::HangAcrossRouterRestart);
}

#[test]
fn a_server_behind_a_cut_link_gets_every_delete_before_it_serves_again() {
    away_server_gets_every_delete_before_serving(Away::LinkCut);
}

#[test]
fn a_killed_and_restarted_server_gets_every_spooled_delete() {
    away_server_gets_every_delete_before_serving(Away::Killed);
}

#[test]
fn with_spooling_off_a_delete_the_server_missed_is_an_error() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (servers, ports, names) = three_servers();
    let gutter_port = free_port();
    let _gutter = server(gutter_port);
    let (listen, safe) = (free_port(), free_port());
    let toml = router_toml(listen, &names, Some((safe, gutter_port)), None)
        .replace("[pools.main]\n", "[pools.main]\nspool_deletes = false\n");
    let keys: Vec<String> = (0..30).map(|i| format!("off:{i}")).collect();
    let on = placement(&toml, &names, &keys);
    let _router = Router::start("lost-off", &toml, listen);
    let victim = 2;
    signal(servers[victim].as_ref().unwrap(), libc::SIGSTOP);
    let mut answered = 0;
    for (i, k) in keys.iter().enumerate().filter(|(i, _)| on[*i] == victim) {
        let via = if i % 2 == 0 { listen } else { safe };
        let reply = ask(local(via), &format!("delete {k}\r\n"));
        assert!(
            reply.starts_with("SERVER_ERROR"),
            "delete {k} through {via} answered {reply:?} with the server away and no spool"
        );
        answered += 1;
    }
    assert!(answered > 0);
    signal(servers[victim].as_ref().unwrap(), libc::SIGCONT);
    let _ = ports;
}

#[test]
fn a_hung_replica_gets_its_deletes_and_writes_answer_by_policy() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (servers, ports, _) = three_servers();
    let listen = free_port();
    let settings = "timeout_ms = 300\nserver_failure_limit = 3\nserver_retry_timeout_ms = 200\n";
    let toml = format!(
        "[pools.r1]\nservers = [\"127.0.0.1:{}\"]\n{settings}\
         [pools.r2]\nservers = [\"127.0.0.1:{}\"]\n{settings}\
         [routes.both]\nlisten = \"127.0.0.1:{listen}\"\ntype = \"replicated\"\n\
         replicas = [\"r1\", \"r2\"]\n",
        ports[0], ports[1]
    );
    let router = Router::start("lost-replicated", &toml, listen);
    let keys: Vec<String> = (0..20).map(|i| format!("rep:{i}")).collect();
    for k in &keys {
        for p in &ports[..2] {
            let set = format!("set {k} 0 0 5\r\nstale\r\n");
            assert_eq!(ask(local(*p), &set), "STORED\r\n");
        }
    }
    signal(servers[1].as_ref().unwrap(), libc::SIGSTOP);
    // One replica stored it: the default policy (any) answers STORED.
    assert_eq!(ask(local(listen), "set fresh 0 0 1\r\nf\r\n"), "STORED\r\n");
    // r1 deleted them, r2's wait in the spool: DELETED.
    for k in &keys {
        assert_eq!(
            ask(local(listen), &format!("delete {k}\r\n")),
            "DELETED\r\n"
        );
    }
    let queue = format!("spool:r2--127.0.0.1-{}", ports[1]);
    let (stale, reads, replay) = read_until_drained(
        &[local(listen)],
        &keys,
        || {
            signal(servers[1].as_ref().unwrap(), libc::SIGCONT);
            Instant::now()
        },
        || stat(local(listen), &queue).is_none_or(|d| d == "0"),
    );
    eprintln!("replicated: {stale} stale of {reads} reads, spool replayed in {replay:?}");
    assert_eq!(stale, 0);
    assert!(replay < REPLAY_BOUND + SLACK, "replay took {replay:?}");
    for k in &keys {
        assert_eq!(get(local(ports[1]), k), "END\r\n", "{k} survived in r2");
    }
    assert!(!router.log().contains("panicked"));
}
