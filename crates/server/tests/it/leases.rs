//! Leases, stale reads and delete hold-offs through a real socket (Facebook §3.2.1, §4.3):
//! mcrouter's `lease-get`/`lease-set`, `delete <key> <seconds>`, and memcached's meta flags
//! `N`, `R`, `I` with the `W`, `Z`, `X` reply flags. Meta exchanges whose bytes memcached
//! 1.6.18 also produces were checked against it (CAS values aside, which differ by design).

use crate::common;

use common::{Client, TestServer};
use std::thread::sleep;
use std::time::Duration;

/// Sends `lease-get <key>` and returns (token, flags, value), token 0 for a `VALUE` hit.
fn lease_get(c: &mut Client, key: &str) -> (u64, u32, Vec<u8>) {
    c.send(format!("lease-get {key}\r\n"));
    let line = c.read_line();
    let words: Vec<&str> = line.split_whitespace().collect();
    let (token, flags, len) = match words.as_slice() {
        ["VALUE", k, flags, len] if *k == key => (0, flags.parse().unwrap(), len.parse().unwrap()),
        ["LVALUE", k, token, flags, len] if *k == key => (
            token.parse().unwrap(),
            flags.parse().unwrap(),
            len.parse().unwrap(),
        ),
        _ => panic!("unexpected lease-get reply {line:?}"),
    };
    let mut data = c.read_n(len + 2);
    data.truncate(len);
    assert_eq!(c.read_n(5), b"END\r\n");
    (token, flags, data)
}

fn lease_set(c: &mut Client, key: &str, token: u64, value: &str) -> String {
    c.send(format!(
        "lease-set {key} {token} 0 0 {}\r\n{value}\r\n",
        value.len()
    ));
    c.read_line()
}

/// Reads one meta reply line and returns it with its value (if `VA`).
fn meta(c: &mut Client, request: &str) -> (String, Option<Vec<u8>>) {
    c.send(request);
    let line = c.read_line();
    let line = line.trim_end().to_string();
    let value = line.strip_prefix("VA ").map(|rest| {
        let len: usize = rest.split(' ').next().unwrap().parse().unwrap();
        let mut v = c.read_n(len + 2);
        v.truncate(len);
        v
    });
    (line, value)
}

fn flag(line: &str, letter: char) -> Option<&str> {
    line.split(' ').skip(1).find_map(|w| w.strip_prefix(letter))
}

#[test]
fn two_clients_miss_and_only_one_gets_the_token() {
    let s = TestServer::start();
    let (mut a, mut b) = (s.connect(), s.connect());
    let (token, _, value) = lease_get(&mut a, "k");
    assert!(token > 1 && value.is_empty(), "{token}");
    // The herd: everyone else is told to wait (token 1), and plain gets still miss.
    for _ in 0..3 {
        assert_eq!(lease_get(&mut b, "k"), (1, 0, vec![]));
    }
    b.check("get k\r\n", "END\r\n");
    assert_eq!(lease_set(&mut a, "k", token, "fresh"), "STORED\r\n");
    assert_eq!(lease_get(&mut b, "k"), (0, 0, b"fresh".to_vec()));
    b.check("get k\r\n", "VALUE k 0 5\r\nfresh\r\nEND\r\n");
    assert_eq!(b.stat("lease_grants"), 1);
    assert_eq!(b.stat("lease_hot_misses"), 3);
}

#[test]
fn concurrent_lease_gets_from_many_connections_grant_one_token() {
    let s = TestServer::start();
    for round in 0..20 {
        let key = format!("herd{round}");
        let tokens: Vec<u64> = std::thread::scope(|scope| {
            let joins: Vec<_> = (0..6)
                .map(|_| {
                    let (addr, key) = (s.addr, key.clone());
                    scope.spawn(move || lease_get(&mut Client::connect(addr), &key).0)
                })
                .collect();
            joins.into_iter().map(|j| j.join().unwrap()).collect()
        });
        let winners = tokens.iter().filter(|t| **t > 1).count();
        assert_eq!(winners, 1, "round {round}: {tokens:?}");
    }
}

#[test]
fn a_delete_between_lease_get_and_lease_set_refuses_the_stale_set() {
    let s = TestServer::start();
    let mut c = s.connect();
    let (token, ..) = lease_get(&mut c, "k");
    c.check("delete k\r\n", "DELETED\r\n");
    assert_eq!(lease_set(&mut c, "k", token, "stale"), "NOT_STORED\r\n");
    c.check("get k\r\n", "END\r\n");
    assert_eq!(c.stat("lease_sets_refused"), 1);
    // A new token works; a token that is not the item's never stores.
    let (token, ..) = lease_get(&mut c, "k");
    assert!(token > 1);
    assert_eq!(lease_set(&mut c, "k", token, "v2"), "STORED\r\n");
    assert_eq!(lease_set(&mut c, "k", 424242, "v3"), "NOT_STORED\r\n");
    c.check("get k\r\n", "VALUE k 0 2\r\nv2\r\nEND\r\n");
}

#[test]
fn a_voided_token_cannot_overwrite_a_newer_fill() {
    let s = TestServer::start();
    let (mut a, mut b) = (s.connect(), s.connect());
    let (old_token, ..) = lease_get(&mut a, "hot");
    // The row changes: delete; another client gets a fresh token and fills the new value.
    b.check("delete hot\r\n", "DELETED\r\n");
    let (new_token, ..) = lease_get(&mut b, "hot");
    assert!(new_token > 1 && new_token != old_token);
    assert_eq!(lease_set(&mut b, "hot", new_token, "new"), "STORED\r\n");
    // The first client's fill, read before the change, arrives late: refused.
    assert_eq!(lease_set(&mut a, "hot", old_token, "old"), "NOT_STORED\r\n");
    a.check("get hot\r\n", "VALUE hot 0 3\r\nnew\r\nEND\r\n");
}

#[test]
fn tokens_are_rate_limited_per_key_per_lease_interval() {
    let s = TestServer::with(|s| s.leases.interval = 1);
    let mut c = s.connect();
    let (first, ..) = lease_get(&mut c, "k");
    assert!(first > 1);
    assert_eq!(lease_get(&mut c, "k").0, 1);
    // The holder never came back: after the interval someone else may fill the key.
    sleep(Duration::from_millis(2100));
    let (second, ..) = lease_get(&mut c, "k");
    assert!(second > 1 && second != first, "{first} {second}");
    assert_eq!(lease_set(&mut c, "k", first, "old"), "NOT_STORED\r\n");
    assert_eq!(lease_set(&mut c, "k", second, "new"), "STORED\r\n");
}

#[test]
fn stale_values_are_served_after_delete_to_lease_reads() {
    let s = TestServer::start();
    let mut c = s.connect();
    c.check("set k 9 0 2\r\nv1\r\n", "STORED\r\n");
    c.check("delete k\r\n", "DELETED\r\n");
    // Plain reads miss at once.
    c.check("get k\r\n", "END\r\n");
    c.check("mg k v\r\n", "EN\r\n");
    // A lease read gets the stale value with a token; the next one the stale value and a
    // hot miss: both can answer their page with slightly stale data instead of waiting.
    let (token, flags, value) = lease_get(&mut c, "k");
    assert!(token > 1);
    assert_eq!((flags, value), (9, b"v1".to_vec()));
    assert_eq!(lease_get(&mut c, "k"), (1, 9, b"v1".to_vec()));
    let (line, value) = meta(&mut c, "mg k v N30\r\n");
    assert_eq!(
        (line.as_str(), value.unwrap()),
        ("VA 2 Z X", b"v1".to_vec())
    );
    // add treats the key as deleted.
    c.check("add k 0 0 2\r\nv2\r\n", "STORED\r\n");
    assert_eq!(c.stat("lease_stale_hits"), 2);
}

#[test]
fn stale_values_expire_and_can_be_turned_off() {
    let s = TestServer::with(|s| s.leases.stale_after_delete = 1);
    let mut c = s.connect();
    c.check("set k 0 0 2\r\nv1\r\n", "STORED\r\n");
    c.check("delete k\r\n", "DELETED\r\n");
    sleep(Duration::from_millis(2100));
    let (token, _, value) = lease_get(&mut c, "k");
    assert!(token > 1 && value.is_empty());

    let s = TestServer::with(|s| s.leases.stale_after_delete = 0);
    let mut c = s.connect();
    c.check("set k 0 0 2\r\nv1\r\n", "STORED\r\n");
    c.check("delete k\r\n", "DELETED\r\n");
    let (token, _, value) = lease_get(&mut c, "k");
    assert!(token > 1 && value.is_empty());
}

#[test]
fn delete_hold_off_refuses_add_then_accepts_it() {
    let s = TestServer::start();
    let mut c = s.connect();
    c.check("set k 0 0 1\r\nv\r\n", "STORED\r\n");
    c.check("delete k 1\r\n", "DELETED\r\n");
    c.check("get k\r\n", "END\r\n");
    c.check("add k 0 0 1\r\na\r\n", "NOT_STORED\r\n");
    c.check("delete k\r\n", "NOT_FOUND\r\n");
    c.check("add k 0 0 1\r\na\r\n", "NOT_STORED\r\n");
    // Lease reads wait rather than fill during a hold-off.
    assert_eq!(lease_get(&mut c, "k"), (1, 0, vec![]));
    c.check(
        "delete other 1 noreply\r\nadd other 0 0 1\r\na\r\n",
        "NOT_STORED\r\n",
    );
    sleep(Duration::from_millis(2100));
    c.check("add k 0 0 1\r\na\r\n", "STORED\r\n");
    c.check("get k\r\n", "VALUE k 0 1\r\na\r\nEND\r\n");
    // The meta form: md with T and no I.
    c.check("md k T1\r\n", "HD\r\n");
    c.check("ms k 1 ME\r\nb\r\n", "NS\r\n");
    // A set is always allowed: the hold-off is for adds (cold-cluster warm-up).
    c.check("set k 0 0 1\r\ns\r\n", "STORED\r\n");
    c.check("get k\r\n", "VALUE k 0 1\r\ns\r\nEND\r\n");
    assert_eq!(c.stat("holdoff_deletes"), 3);
}

#[test]
fn meta_vivify_win_and_lease_set_with_the_token_as_cas() {
    let s = TestServer::start();
    let (mut a, mut b) = (s.connect(), s.connect());
    let (line, value) = meta(&mut a, "mg k s v c N30 t\r\n");
    assert!(
        line.starts_with("VA 0 s0 c") && line.ends_with(" t30 W"),
        "{line}"
    );
    assert_eq!(value.unwrap(), b"");
    let token: u64 = flag(&line, 'c').unwrap().parse().unwrap();
    let (line, _) = meta(&mut b, "mg k s v c N30 t\r\n");
    assert_eq!(line, format!("VA 0 s0 c{token} t30 Z"));
    // Without N a placeholder is still an (empty) hit flagged Z, as in memcached.
    assert_eq!(meta(&mut b, "mg k s\r\n").0, "HD s0 Z");
    b.check(format!("ms k 3 C{}\r\nbad\r\n", token + 1), "EX\r\n");
    a.check(format!("ms k 3 C{token}\r\nnew\r\n"), "HD\r\n");
    assert_eq!(
        meta(&mut b, "mg k v\r\n"),
        ("VA 3".into(), Some(b"new".to_vec()))
    );
}

#[test]
fn meta_invalidate_serves_stale_and_hands_one_client_the_refresh() {
    let s = TestServer::start();
    let mut c = s.connect();
    c.check("ms k 3 T60\r\nabc\r\n", "HD\r\n");
    c.check("md k I T30\r\n", "HD\r\n");
    c.check("md missing I\r\n", "NF\r\n");
    let (line, value) = meta(&mut c, "mg k v c t\r\n");
    assert!(line.ends_with(" t30 X W"), "{line}");
    assert_eq!(value.unwrap(), b"abc");
    let token: u64 = flag(&line, 'c').unwrap().parse().unwrap();
    let (line, _) = meta(&mut c, "mg k v t\r\n");
    assert_eq!(line, "VA 3 t30 Z X");
    // memcached serves an invalidated value to plain gets.
    c.check("get k\r\n", "VALUE k 0 3\r\nabc\r\nEND\r\n");
    // ms I with an older CAS stores the late value, still stale.
    c.check("ms k 4 I C1\r\nlate\r\n", "HD\r\n");
    assert_eq!(
        meta(&mut c, "mg k v\r\n"),
        ("VA 4 Z X".into(), Some(b"late".to_vec()))
    );
    c.check(format!("ms k 5 C{token}\r\nfresh\r\n"), "HD\r\n");
    assert_eq!(
        meta(&mut c, "mg k v\r\n"),
        ("VA 5".into(), Some(b"fresh".to_vec()))
    );
}

#[test]
fn meta_recache_wins_once_before_expiry() {
    let s = TestServer::start();
    let mut c = s.connect();
    c.check("set k 0 100 1\r\nx\r\n", "STORED\r\n");
    assert_eq!(meta(&mut c, "mg k v R30\r\n").0, "VA 1");
    assert_eq!(meta(&mut c, "mg k v R200\r\n").0, "VA 1 W");
    assert_eq!(meta(&mut c, "mg k v R200\r\n").0, "VA 1 Z");
    c.check("set k 0 100 1\r\ny\r\n", "STORED\r\n");
    assert_eq!(meta(&mut c, "mg k v\r\n").0, "VA 1");
}
