//! Cold-cluster warm-up through real sockets, for every form of read and delete a client
//! may send (issue: deletes as `md` must hold off fills like text deletes; `mg` and
//! `lease-get` readers must be warmed too, with leases still deciding who fills).

use crate::support;
use memfleet_router::RunningRouter;
use memfleet_routing::from_toml;

use memfleet_server::Server;
use support::{backend, list, Client};

/// A cold and a warm server behind a warm-up route (2 s hold-off), and the router.
fn warmup() -> (Server, u16, Server, u16, RunningRouter) {
    let (cold, pc) = backend();
    let (warm, pw) = backend();
    let toml = format!(
        "[pools.cold]\nservers = [{}]\n[pools.warm]\nservers = [{}]\n\
         [routes.front]\nlisten = \"127.0.0.1:0\"\ntype = \"warmup\"\ncold = \"cold\"\n\
         warm = \"warm\"\nholdoff = 2\n",
        list(&[pc]),
        list(&[pw])
    );
    let router = RunningRouter::start(from_toml(&toml).unwrap(), 1, None).unwrap();
    (cold, pc, warm, pw, router)
}

#[test]
fn every_delete_form_holds_off_the_fill_of_a_stale_warm_value() {
    let (_cold, pc, _warm, pw, router) = warmup();
    let mut c = Client::connect(router.addrs[0]);
    let mut warm = Client::direct(pw);
    let mut cold = Client::direct(pc);
    // The sequence: warm still has the old value (its delete is on its way); the
    // delete reaches cold through the route in each form; the next miss must not bring
    // the old value back into cold.
    let forms: [(&str, &str); 5] = [
        ("md k1\r\n", "NF\r\n"),
        // Quiet mode hides HD only (memcached 1.6.45 still says NF).
        ("md k2 q\r\nmn\r\n", "NF\r\nMN\r\n"),
        ("md k3 O7 k\r\n", "NF O7 kk3\r\n"),
        ("delete k4\r\n", "NOT_FOUND\r\n"),
        ("delete k5 noreply\r\nmn\r\n", "MN\r\n"),
    ];
    for (i, (delete, reply)) in forms.iter().enumerate() {
        let key = format!("k{}", i + 1);
        warm.check(&format!("set {key} 0 0 8\r\nv1-stale\r\n"), "STORED\r\n");
        c.check(delete, reply);
        assert_eq!(c.get(&key), None, "{delete:?}: the stale value came back");
        assert_eq!(
            cold.get(&key),
            None,
            "{delete:?}: cold holds the stale value"
        );
    }
    // A key cold had: md deletes it (HD) and the hold-off still blocks the refill.
    warm.check("set k6 0 0 8\r\nv1-stale\r\n", "STORED\r\n");
    cold.check("set k6 0 0 2\r\nv2\r\n", "STORED\r\n");
    c.check("md k6\r\n", "HD\r\n");
    assert_eq!(c.get("k6"), None);
    // A conditional md that does not match deletes nothing and holds nothing off.
    cold.check("set k7 0 0 2\r\nv2\r\n", "STORED\r\n");
    c.check("md k7 C999999\r\n", "EX\r\n");
    assert_eq!(c.get("k7").as_deref(), Some("v2"));
    // Keys nobody deleted are still warmed.
    warm.check("set fresh 0 0 1\r\nf\r\n", "STORED\r\n");
    assert_eq!(c.get("fresh").as_deref(), Some("f"));
    assert_eq!(cold.get("fresh").as_deref(), Some("f"));
}

#[test]
fn mg_and_lease_get_readers_are_warmed_and_leases_decide_the_fill() {
    let (_cold, pc, _warm, pw, router) = warmup();
    let mut c = Client::connect(router.addrs[0]);
    let mut warm = Client::direct(pw);
    let mut cold = Client::direct(pc);
    for key in ["a", "b", "c", "d", "e"] {
        warm.check(&format!("set {key} 5 100 2\r\nw{key}\r\n"), "STORED\r\n");
    }
    // A plain mg miss: filled, and answered with the flags the client asked for.
    c.check("mg a v f\r\n", "VA 2 f5\r\nwa\r\n");
    assert_eq!(cold.get("a").as_deref(), Some("wa"));
    // An mg that vivifies on miss (memcached's lease): the winner's fill is the warm
    // value, so the client gets it at once instead of a W to go to the database.
    c.check("mg b v N30 f\r\n", "VA 2 f5\r\nwb\r\n");
    assert_eq!(cold.get("b").as_deref(), Some("wb"));
    // mcrouter's lease-get: the lease won in cold fills it with the warm value.
    c.check("lease-get c\r\n", "VALUE c 5 2\r\nwc\r\nEND\r\n");
    assert_eq!(cold.get("c").as_deref(), Some("wc"));
    // Another client holds d's lease in cold: a hot miss, no fill behind its back.
    let taken = cold.line("lease-get d\r\n");
    assert!(taken.starts_with("LVALUE d "), "{taken}");
    let mut rest = String::new();
    for _ in 0..2 {
        std::io::BufRead::read_line(&mut cold.0, &mut rest).unwrap();
    }
    c.check("lease-get d\r\n", "LVALUE d 1 0 0\r\n\r\nEND\r\n");
    // memcached 1.6.45 answers a reader of someone else's placeholder this way too.
    c.check("mg d v\r\n", "VA 0 Z\r\n\r\n");
    cold.check("mg d v\r\n", "VA 0 Z\r\n\r\n");
    // A delete with its hold-off in cold: lease-get and mg N readers get no fill either.
    c.check("delete e\r\n", "NOT_FOUND\r\n");
    c.check("lease-get e\r\n", "LVALUE e 1 0 0\r\n\r\nEND\r\n");
    assert_eq!(cold.get("e"), None);
    assert_eq!(
        c.stat_text("route:front:warm_fills").as_deref(),
        Some("3"),
        "a, b and c were filled"
    );
}
