//! Faults under traffic: a `memfleet router` in front of three `memfleet server`s, clients
//! setting keys through it all the time, and one thing going wrong at a time:
//!
//! | fault | expected |
//! |---|---|
//! | a server killed (`kill -9`) | errors for its keys only, fast (connection refused, then marked down); none through a gutter route; back after a restart |
//! | a server stopped (SIGSTOP) | its keys time out within the pool's timeout until it is marked down, then fail fast; the rest unaffected; back after SIGCONT |
//! | a server's link cut (network namespace, no RST) | the same as a stopped server: found by timeout, marked down, back when the link is |
//! | the router restarted (SIGTERM, same port) | connection errors only in the gap; a delete spooled while a server was down reaches it after both restarts |
//! | a broken configuration reloaded (SIGHUP) | refused and logged, the old one keeps serving; a good one then applies |
//!
//! Every request is timed (`faults/traffic.rs`); the tests assert error counts, the slowest
//! request and the recovery time, and print them (`cargo test --test it faults:: -- --nocapture`).
//! The router's settings (`faults/fleet.rs`): 300 ms timeout, three failures mark a server
//! down, probes from 200 ms. The tests run one at a time (their timing is the point).

use crate::support;

pub mod fleet;
pub mod netns;
pub mod traffic;

use self::fleet::{
    answers, ask, eventually, placement, router_toml, server, server_with, signal, stat,
    three_servers, Router, FAILURE_LIMIT, TIMEOUT,
};
use self::netns::Namespace;
use self::traffic::{Samples, Tally, Traffic};
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::Duration;
use support::free_port;

/// Client connections sending traffic.
const CLIENTS: usize = 4;
/// What a loaded two-core machine may add to any request (scheduling, debug build).
const SLACK: Duration = Duration::from_millis(1000);
/// How long a fault lasts.
const OUTAGE: Duration = Duration::from_millis(2500);
/// How long after the fault ends the failed server's keys must work again: the probe's
/// pause has doubled to at most 3.2 s by then (200 ms, 400, 800, 1600, 3200).
const RECOVERY: Duration = Duration::from_secs(6);

/// One test at a time: they measure latencies.
static SERIAL: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn keys() -> Vec<String> {
    (0..90).map(|i| format!("fault:{i}")).collect()
}

fn local(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

fn show(name: &str, t: &Tally) {
    eprintln!(
        "  {name}: {} requests, {} SERVER_ERROR, {} refused, {} hung, {} slow errors, \
         max latency {:?}, slowest error {:?}",
        t.requests,
        t.server_errors,
        t.refused,
        t.hung,
        t.slow_errors,
        t.max_latency,
        t.max_error_latency
    );
}

/// One server's fault, as a test caused it.
struct Fault<'a> {
    /// The router's address (for its `stats`).
    router: SocketAddr,
    /// Which server each key is on (by index).
    on: &'a [usize],
    /// The failed server's index, and its name in the router's `stats`.
    victim: usize,
    name: &'a str,
    /// When it failed and when it was repaired, on the traffic's clock.
    fault: Duration,
    repaired: Duration,
    /// How many requests may wait for a whole timeout before the server is marked down.
    slow_error_bound: usize,
}

/// What `f` cost: checks the bounds every fault shares, and that the router marked the
/// victim down and up again; returns when the victim's keys worked again.
fn check_fault(samples: &Samples, f: Fault<'_>) -> Duration {
    let Fault {
        router,
        on,
        victim,
        name,
        fault,
        repaired,
        slow_error_bound,
    } = f;
    let everything = samples.tally(Duration::ZERO, Duration::MAX, TIMEOUT / 2, |_| true);
    let others = samples.tally(Duration::ZERO, Duration::MAX, TIMEOUT / 2, |k| {
        on[k] != victim
    });
    // Requests sent just before the fault may meet it; those sent half a second before may not.
    let settled = fault.saturating_sub(Duration::from_millis(500));
    let before = samples.tally(Duration::ZERO, settled, TIMEOUT / 2, |k| on[k] == victim);
    // From just after the fault until the repair, nothing of the victim's can succeed.
    let during = samples.tally(
        fault + Duration::from_millis(50),
        repaired,
        TIMEOUT / 2,
        |k| on[k] == victim,
    );
    let back = samples
        .first_stored_after(repaired, |k| on[k] == victim)
        .expect("the victim's keys never worked again");
    let after = samples.tally(
        back + Duration::from_millis(500),
        Duration::MAX,
        TIMEOUT / 2,
        |_| true,
    );
    show("all keys, whole run", &everything);
    show("other servers' keys", &others);
    show("victim's keys during the fault", &during);
    show("all keys after recovery", &after);
    eprintln!(
        "  victim error rate during the fault {:.1}%, back {:?} after the repair",
        100.0 * during.failures() as f64 / during.requests.max(1) as f64,
        back - repaired
    );
    assert_eq!(
        (everything.hung, everything.unexpected),
        (0, 0),
        "no hang, no garbage"
    );
    assert_eq!(others.failures(), 0, "only the victim's keys fail");
    assert_eq!(
        before.failures(),
        0,
        "nothing failed before the fault at {fault:?}: {:?}",
        samples.failures(Duration::ZERO, settled, |_| true)
    );
    assert!(
        during.requests > 0,
        "traffic reached the victim's keys during the fault"
    );
    assert_eq!(
        during.failures(),
        during.requests,
        "a dead server stores nothing"
    );
    assert_eq!(during.refused, 0, "the router itself stays up");
    assert!(
        everything.max_latency < TIMEOUT + SLACK,
        "a request took {:?}",
        everything.max_latency
    );
    assert!(
        everything.slow_errors <= slow_error_bound,
        "{} requests waited for a timeout; marking down should stop that after {FAILURE_LIMIT}",
        everything.slow_errors
    );
    let health = |counter: &str| -> u64 {
        stat(router, &format!("pool:main:server:{name}:{counter}"))
            .expect("the victim's stats")
            .parse()
            .unwrap()
    };
    let (down, knockouts) = (health("down"), health("knockouts"));
    eprintln!("  router's view of the victim: down={down} knockouts={knockouts}");
    assert_eq!(down, 0, "still down");
    assert!(knockouts > 0, "never marked down");
    assert!(
        back - repaired < RECOVERY,
        "recovery took {:?}",
        back - repaired
    );
    assert_eq!(after.failures(), 0, "errors after recovery");
    back
}

#[test]
fn a_killed_server_costs_only_its_keys_and_nothing_behind_a_gutter() {
    let _serial = one_at_a_time();
    eprintln!("kill -9:");
    let (mut servers, ports, names) = three_servers();
    let gutter_port = free_port();
    let _gutter = server(gutter_port);
    let (listen, safe) = (free_port(), free_port());
    let toml = router_toml(listen, &names, Some((safe, gutter_port)), None);
    let keys = keys();
    let on = placement(&toml, &names, &keys);
    let _router = Router::start("faults-kill", &toml, listen);
    assert!(answers(local(safe)));
    let direct = Traffic::start(local(listen), &keys, CLIENTS);
    let guarded = Traffic::start(local(safe), &keys, 2);
    std::thread::sleep(Duration::from_secs(1));

    let victim = 1;
    let killed = direct.now();
    drop(servers[victim].take()); // SIGKILL, reaped
    std::thread::sleep(OUTAGE);
    let restarted = direct.now();
    servers[victim] = Some(server(ports[victim]));
    let victim_key = &keys[on.iter().position(|&s| s == victim).unwrap()];
    assert!(eventually(RECOVERY, || {
        ask(local(listen), &format!("set {victim_key} 0 0 1\r\nx\r\n")) == "STORED\r\n"
    }));
    std::thread::sleep(Duration::from_secs(1));
    let (direct, guarded) = (direct.stop(), guarded.stop());

    // A dead server refuses connections: its keys fail at once, not after a timeout.
    check_fault(
        &direct,
        Fault {
            router: local(listen),
            on: &on,
            victim,
            name: &names[victim],
            fault: killed,
            repaired: restarted,
            slow_error_bound: 0,
        },
    );
    let behind_gutter = guarded.tally(Duration::ZERO, Duration::MAX, TIMEOUT / 2, |_| true);
    show("through the gutter route, whole run", &behind_gutter);
    assert_eq!(
        behind_gutter.failures(),
        0,
        "the gutter takes the dead server's keys"
    );
    assert!(behind_gutter.max_latency < TIMEOUT * 2 + SLACK);
}

#[test]
fn a_stopped_server_times_out_within_the_timeout_and_comes_back() {
    let _serial = one_at_a_time();
    eprintln!("SIGSTOP:");
    let (servers, _ports, names) = three_servers();
    let listen = free_port();
    let toml = router_toml(listen, &names, None, None);
    let keys = keys();
    let on = placement(&toml, &names, &keys);
    let _router = Router::start("faults-stop", &toml, listen);
    let traffic = Traffic::start(local(listen), &keys, CLIENTS);
    std::thread::sleep(Duration::from_secs(1));

    let victim = 2;
    let stopped = traffic.now();
    signal(servers[victim].as_ref().unwrap(), libc::SIGSTOP);
    std::thread::sleep(OUTAGE);
    let resumed = traffic.now();
    signal(servers[victim].as_ref().unwrap(), libc::SIGCONT);
    std::thread::sleep(RECOVERY);
    let samples = traffic.stop();

    // Each client waits for one timeout at most, until FAILURE_LIMIT of them mark it down.
    check_fault(
        &samples,
        Fault {
            router: local(listen),
            on: &on,
            victim,
            name: &names[victim],
            fault: stopped,
            repaired: resumed,
            slow_error_bound: FAILURE_LIMIT + CLIENTS,
        },
    );
}

#[test]
fn a_blackholed_server_is_found_by_timeout_and_comes_back_with_its_link() {
    let _serial = one_at_a_time();
    eprintln!("link cut (network namespace):");
    let ns = match Namespace::create() {
        Ok(ns) => ns,
        Err(why) => {
            eprintln!(
                "SKIPPED: cannot make a network namespace ({why}); run as root with iproute2"
            );
            return;
        }
    };
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let _local: Vec<_> = ports[..2].iter().map(|&p| server(p)).collect();
    let _remote = server_with(
        ns.command(env!("CARGO_BIN_EXE_memfleet")),
        &ns.ns_addr,
        ports[2],
    );
    let mut names: Vec<String> = ports[..2]
        .iter()
        .map(|p| format!("127.0.0.1:{p}"))
        .collect();
    names.push(format!("{}:{}", ns.ns_addr, ports[2]));
    let listen = free_port();
    let toml = router_toml(listen, &names, None, None);
    let keys = keys();
    let on = placement(&toml, &names, &keys);
    let _router = Router::start("faults-netns", &toml, listen);
    let traffic = Traffic::start(local(listen), &keys, CLIENTS);
    std::thread::sleep(Duration::from_secs(1));

    let victim = 2;
    let cut = traffic.now();
    ns.link(false);
    std::thread::sleep(OUTAGE);
    let restored = traffic.now();
    ns.link(true);
    std::thread::sleep(RECOVERY);
    let samples = traffic.stop();

    check_fault(
        &samples,
        Fault {
            router: local(listen),
            on: &on,
            victim,
            name: &names[victim],
            fault: cut,
            repaired: restored,
            slow_error_bound: FAILURE_LIMIT + CLIENTS,
        },
    );
}

#[test]
fn a_router_restart_costs_only_its_gap_and_keeps_spooled_deletes() {
    let _serial = one_at_a_time();
    eprintln!("router restart:");
    let (mut servers, ports, names) = three_servers();
    let listen = free_port();
    // Inside the router's directory: gone with it, also when the test fails.
    let spool = Router::dir("faults-restart").join("spool");
    let toml = router_toml(listen, &names, None, Some(&spool));
    let keys = keys();
    let on = placement(&toml, &names, &keys);
    let mut router = Router::start("faults-restart", &toml, listen);
    let traffic = Traffic::start(local(listen), &keys, CLIENTS);
    std::thread::sleep(Duration::from_secs(1));

    // A server dies; deletes for its keys go to the spool (answered NOT_FOUND, as
    // mcrouter's asynclog does).
    let victim = 0;
    drop(servers[victim].take());
    let victim_keys: Vec<&String> = (0..keys.len())
        .filter(|&k| on[k] == victim)
        .map(|k| &keys[k])
        .collect();
    assert!(eventually(Duration::from_secs(5), || {
        ask(
            local(listen),
            &format!("set {} 0 0 1\r\nx\r\n", victim_keys[0]),
        )
        .contains("marked down")
    }));
    for key in &victim_keys {
        assert_eq!(
            ask(local(listen), &format!("delete {key}\r\n")),
            "NOT_FOUND\r\n"
        );
    }
    let queue = format!("spool:main--127.0.0.1-{}", ports[victim]);
    let spooled = victim_keys.len().to_string();
    assert_eq!(
        stat(local(listen), &queue).as_deref(),
        Some(spooled.as_str())
    );

    // The router restarts on the same port.
    let stopping = traffic.now();
    router.terminate();
    router.spawn(listen);
    let serving = traffic.now();
    std::thread::sleep(Duration::from_secs(1));
    // The server comes back (empty): the new router delivers the old router's spool.
    let restarted = traffic.now();
    servers[victim] = Some(server(ports[victim]));
    let delivered = eventually(Duration::from_secs(10), || {
        // A miss, or a hit on a key the traffic set again first: either way it arrived.
        let count =
            |name| stat(local(ports[victim]), name).map_or(0, |n| n.parse::<usize>().unwrap());
        count("delete_misses") + count("delete_hits") >= victim_keys.len()
    });
    let drained = eventually(Duration::from_secs(5), || {
        stat(local(listen), &queue).is_none_or(|d| d == "0")
    });
    std::thread::sleep(Duration::from_secs(1));
    let samples = traffic.stop();

    let slow = TIMEOUT / 2;
    // A request in flight at the SIGTERM counts as in the gap (it was sent just before).
    let in_flight = Duration::from_millis(300);
    let gap = samples.tally(stopping - in_flight, serving + in_flight, slow, |_| true);
    let outside_gap = |from, to| samples.tally(from, to, slow, |_| true).refused;
    let others = samples.tally(Duration::ZERO, Duration::MAX, slow, |k| on[k] != victim);
    eprintln!(
        "  gap {:?}: {} requests refused; {} deletes spooled, delivered after the restarts: {delivered}",
        serving - stopping,
        gap.refused,
        victim_keys.len()
    );
    show("other servers' keys", &others);
    assert!(delivered, "the spooled deletes never reached the server");
    assert!(drained, "the spool never drained");
    assert_eq!(
        outside_gap(Duration::ZERO, stopping - in_flight),
        0,
        "refused before the restart at {stopping:?}: {:?}",
        samples.failures(Duration::ZERO, stopping, |k| on[k] != victim)
    );
    assert_eq!(
        outside_gap(serving + in_flight, Duration::MAX),
        0,
        "refused after the new router answered"
    );
    assert_eq!(others.server_errors + others.hung + others.unexpected, 0);
    assert!(others.max_latency < TIMEOUT + SLACK);
    // The victim's keys failed while it was down and worked once it was back.
    let back = samples
        .first_stored_after(restarted, |k| on[k] == victim)
        .expect("the victim's keys never worked again");
    assert!(back - restarted < RECOVERY);
}

#[test]
fn a_broken_reload_is_refused_and_logged_and_a_good_one_applies() {
    let _serial = one_at_a_time();
    eprintln!("reloads:");
    let (_servers, _ports, names) = three_servers();
    let listen = free_port();
    let toml = router_toml(listen, &names, None, None);
    let keys = keys();
    let router = Router::start("faults-reload", &toml, listen);
    let traffic = Traffic::start(local(listen), &keys, CLIENTS);
    let hup = |text: &str| {
        // Written whole (rename) so the file watcher never reads half of it.
        let tmp = router.dir.join("next.toml");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, &router.config).unwrap();
        signal(router.process.as_ref().unwrap(), libc::SIGHUP);
    };
    let route_of = |key: &str| {
        let s = std::net::TcpStream::connect(local(listen)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut r = std::io::BufReader::new(s);
        std::io::Write::write_all(
            r.get_mut(),
            format!("get __memfleet__.route({key})\r\n").as_bytes(),
        )
        .unwrap();
        let mut value = String::new();
        for _ in 0..2 {
            value.clear();
            std::io::BufRead::read_line(&mut r, &mut value).unwrap();
        }
        value.trim_end().to_owned()
    };
    std::thread::sleep(Duration::from_secs(1));

    // Broken TOML.
    hup("[pools.main\nservers = [\n");
    assert!(
        eventually(Duration::from_secs(5), || router
            .log()
            .contains("new configuration refused")),
        "no error logged: {}",
        router.log()
    );
    // Well-formed, but a route names a pool that does not exist.
    hup(&format!(
        "{toml}[routes.broken]\nlisten = \"127.0.0.1:{}\"\ntype = \"gutter\"\nmain = \"main\"\ngutter = \"nope\"\n",
        free_port()
    ));
    assert!(
        eventually(Duration::from_secs(5), || router.log().contains("nope")),
        "no error logged: {}",
        router.log()
    );
    std::thread::sleep(Duration::from_millis(500));
    let on_third = keys
        .iter()
        .find(|k| route_of(k) == names[2])
        .expect("some key is on the third server")
        .clone();
    // A good configuration: the third server leaves the pool.
    hup(&router_toml(listen, &names[..2], None, None));
    assert!(
        eventually(Duration::from_secs(5), || route_of(&on_third) != names[2]),
        "the good configuration never applied"
    );
    std::thread::sleep(Duration::from_millis(500));
    let samples = traffic.stop();
    let all = samples.tally(Duration::ZERO, Duration::MAX, TIMEOUT / 2, |_| true);
    show("all keys, three reloads", &all);
    assert_eq!(all.failures(), 0, "a reload cost a request");
    assert!(all.max_latency < TIMEOUT + SLACK);
    let refusals = router.log().matches("refused").count();
    eprintln!("  {refusals} refusals logged");
}
