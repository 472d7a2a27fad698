//! The routes an operator drains, caps and fails over with, through a real `memfleet
//! router` process in front of real `memfleet server` processes (and a port nothing listens
//! on): `null`, `error`, `ttl` (`max_ttl`, `set_ttl`), `failover` (connection errors, `miss
//! = true`), `all-fastest`, `all-initial`, `migrate`.

use crate::support;

use std::io::{BufRead, Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::{free_port, memfleet_server, until_serving, Conn, Killed};

/// What this module asks of a text connection beyond `support::Conn`'s own.
trait ConnExt {
    fn ttl(&mut self, key: &str) -> i64;
}

impl ConnExt for Conn {
    /// The remaining TTL the server gives `key` (meta `t`): -1 for none.
    fn ttl(&mut self, key: &str) -> i64 {
        let l = self.line(format!("mg {key} t\r\n"));
        l.trim_end()
            .strip_prefix("HD t")
            .unwrap_or_else(|| panic!("mg {key} t: {l:?}"))
            .parse()
            .unwrap()
    }
}

/// A router on `config` (written to a file of its own), serving once `port` answers.
fn router(config: &str, port: u16) -> (Killed, std::path::PathBuf) {
    let path = std::env::temp_dir().join(format!(
        "memfleet-failover-routes-{}-{port}.toml",
        std::process::id()
    ));
    std::fs::write(&path, config).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_memfleet"))
        .args(["router", "-t", "1", "--config"])
        .arg(&path)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let router = Killed(child);
    until_serving(port);
    (router, path)
}

#[test]
fn null_error_and_ttl_routes_answer_and_rewrite_as_mcrouters() {
    let (_a, a) = memfleet_server(&["-t", "1", "-m", "16"]);
    until_serving(a);
    let [drain, err, cap, fixed] = [free_port(), free_port(), free_port(), free_port()];
    let (_router, file) = router(
        &format!(
            "[pools.a]\nservers = [\"127.0.0.1:{a}\"]\n\
             [routes.drain]\nlisten = \"127.0.0.1:{drain}\"\ntype = \"null\"\n\
             [routes.err]\nlisten = \"127.0.0.1:{err}\"\ntype = \"error\"\n\
             message = \"cluster draining\"\n\
             [routes.cap]\nlisten = \"127.0.0.1:{cap}\"\ntype = \"ttl\"\nchild = \"a\"\n\
             max_ttl = 3600\n\
             [routes.fixed]\nlisten = \"127.0.0.1:{fixed}\"\ntype = \"ttl\"\nchild = \"a\"\n\
             set_ttl = 100\n"
        ),
        drain,
    );
    let mut server = Conn::new(a);

    // null: nothing reaches a server; the answers of a key that is not there.
    let mut c = Conn::new(drain);
    for (request, reply) in [
        ("set k 0 0 1\r\nv\r\n", "NOT_STORED\r\n"),
        ("add k 0 0 1\r\nv\r\n", "NOT_STORED\r\n"),
        ("get k\r\n", "END\r\n"),
        ("delete k\r\n", "NOT_FOUND\r\n"),
        ("incr k 1\r\n", "NOT_FOUND\r\n"),
        ("touch k 10\r\n", "NOT_FOUND\r\n"),
        ("mg k v\r\n", "EN\r\n"),
        ("ms k 1\r\nv\r\n", "NS\r\n"),
        ("md k\r\n", "NF\r\n"),
        ("ma k\r\n", "NF\r\n"),
    ] {
        assert_eq!(c.line(request), reply, "{request:?}");
    }
    assert_eq!(server.get("k"), None, "a null route reached the server");

    // error: every request gets the configured SERVER_ERROR (in a multi-key get the key
    // is a miss, as any key whose route failed).
    let mut c = Conn::new(err);
    assert_eq!(
        c.line("set k 0 0 1\r\nv\r\n"),
        "SERVER_ERROR cluster draining\r\n"
    );
    assert_eq!(c.line("delete k\r\n"), "SERVER_ERROR cluster draining\r\n");
    assert_eq!(c.line("mg k v\r\n"), "SERVER_ERROR cluster draining\r\n");
    assert_eq!(c.line("get k\r\n"), "SERVER_ERROR cluster draining\r\n");
    assert_eq!(c.line("get k k2\r\n"), "END\r\n");
    assert_eq!(server.get("k"), None);

    // ttl max_ttl: writes that would live longer (or forever) live at most an hour.
    let mut c = Conn::new(cap);
    let near = |t: i64, want: i64| (want - 5..=want).contains(&t);
    assert_eq!(c.line("set forever 0 0 1\r\nv\r\n"), "STORED\r\n");
    assert!(
        near(server.ttl("forever"), 3600),
        "{}",
        server.ttl("forever")
    );
    assert_eq!(c.line("set short 0 10 1\r\nv\r\n"), "STORED\r\n");
    assert!(near(server.ttl("short"), 10));
    assert_eq!(c.line("set k 0 99999 1\r\nv\r\n"), "STORED\r\n");
    assert!(near(server.ttl("k"), 3600));
    assert_eq!(c.line("touch short 0\r\n"), "TOUCHED\r\n");
    assert!(near(server.ttl("short"), 3600));
    assert_eq!(server.line("touch k 5\r\n"), "TOUCHED\r\n");
    assert_eq!(c.line("gat 0 k\r\n"), "VALUE k 0 1\r\n");
    assert_eq!(c.line(""), "v\r\n");
    assert_eq!(c.line(""), "END\r\n");
    assert!(near(server.ttl("k"), 3600));
    assert_eq!(c.line("ms m 1\r\nv\r\n"), "HD\r\n");
    assert!(near(server.ttl("m"), 3600));
    assert_eq!(c.line("ms m 1 T86400\r\nv\r\n"), "HD\r\n");
    assert!(near(server.ttl("m"), 3600));
    assert_eq!(c.line("ms m 1 T20\r\nv\r\n"), "HD\r\n");
    assert!(near(server.ttl("m"), 20));
    assert_eq!(c.get("m").as_deref(), Some("v"));

    // ttl set_ttl: every write lives 100 s, whatever it asked.
    let mut c = Conn::new(fixed);
    assert_eq!(c.line("set f 0 0 1\r\nv\r\n"), "STORED\r\n");
    assert!(near(server.ttl("f"), 100));
    assert_eq!(c.line("set f 0 5 1\r\nv\r\n"), "STORED\r\n");
    assert!(near(server.ttl("f"), 100));
    let _ = std::fs::remove_file(file);
}

#[test]
fn failover_tries_the_next_child_on_errors_and_misses_and_all_routes_fan_out() {
    let (_a, a) = memfleet_server(&["-t", "1", "-m", "16"]);
    let (_b, b) = memfleet_server(&["-t", "1", "-m", "16"]);
    until_serving(a);
    until_serving(b);
    // Nothing listens: connection refused (held, so that no test beside this one takes it).
    let (_held, dead) = support::refused_port();
    let [reads, missy, strict, fastest, initial] = [
        free_port(),
        free_port(),
        free_port(),
        free_port(),
        free_port(),
    ];
    let (_router, file) = router(
        &format!(
            "[pools.a]\nservers = [\"127.0.0.1:{a}\"]\n\
             [pools.b]\nservers = [\"127.0.0.1:{b}\"]\n\
             [pools.dead]\ntimeout_ms = 200\nserver_failure_limit = 100\n\
             servers = [\"127.0.0.1:{dead}\"]\n\
             [routes.reads]\nlisten = \"127.0.0.1:{reads}\"\ntype = \"failover\"\n\
             children = [\"dead\", \"a\"]\n\
             [routes.missy]\nlisten = \"127.0.0.1:{missy}\"\ntype = \"failover\"\n\
             children = [\"b\", \"a\"]\nmiss = true\n\
             [routes.strict]\nlisten = \"127.0.0.1:{strict}\"\ntype = \"failover\"\n\
             children = [\"dead\", \"a\"]\nfailover_errors = [\"timeout\"]\n\
             [routes.fastest]\nlisten = \"127.0.0.1:{fastest}\"\ntype = \"all-fastest\"\n\
             children = [\"dead\", \"a\"]\n\
             [routes.initial]\nlisten = \"127.0.0.1:{initial}\"\ntype = \"all-initial\"\n\
             children = [\"a\", \"b\"]\n"
        ),
        reads,
    );
    let (mut on_a, mut on_b) = (Conn::new(a), Conn::new(b));

    // Connection refused by the first child: the second answers, and it is counted.
    let mut c = Conn::new(reads);
    assert_eq!(c.line("set k 0 0 1\r\nA\r\n"), "STORED\r\n");
    assert_eq!(on_a.get("k").as_deref(), Some("A"));
    assert_eq!(c.get("k").as_deref(), Some("A"));
    assert_eq!(c.stat("route:reads:failovers"), Some(2));
    // The refusing server is a suspect (failing, not yet down: its limit is 100); a is not.
    c.0.get_mut()
        .write_all(b"stats suspect_servers\r\n")
        .unwrap();
    let suspect = c.0.by_ref().lines().next().unwrap().unwrap();
    let failures: u32 = suspect
        .strip_prefix(&format!("STAT dead:127.0.0.1:{dead} failures="))
        .and_then(|rest| rest.strip_suffix(",down=0"))
        .unwrap_or_else(|| panic!("{suspect}"))
        .parse()
        .unwrap();
    assert!(failures >= 2, "{suspect}");
    assert_eq!(c.line(""), "END\r\n", "a is not a suspect");
    // Only timeouts fail over here: the refused connection is the answer.
    let mut c = Conn::new(strict);
    assert!(c.line("set k 0 0 1\r\nS\r\n").starts_with("SERVER_ERROR"));
    assert_eq!(on_a.get("k").as_deref(), Some("A"));

    // miss = true: b's miss goes on to a; without it, b's miss is the answer.
    assert_eq!(on_a.line("set m 0 0 1\r\nM\r\n"), "STORED\r\n");
    let mut c = Conn::new(missy);
    assert_eq!(c.get("m").as_deref(), Some("M"));
    assert_eq!(c.line("mg m v\r\n"), "VA 1\r\n");
    assert_eq!(c.line(""), "M\r\n");
    assert_eq!(on_b.line("set m 0 0 1\r\nB\r\n"), "STORED\r\n");
    assert_eq!(c.get("m").as_deref(), Some("B"), "b's hit is the answer");
    let mut c = Conn::new(reads);
    assert_eq!(on_a.line("delete m\r\n"), "DELETED\r\n");
    assert_eq!(
        c.get("m"),
        None,
        "a miss in a does not fail over without miss"
    );

    // all-fastest: the first reply that is not an error, whoever sends it.
    let mut c = Conn::new(fastest);
    assert_eq!(c.line("set f 0 0 1\r\nF\r\n"), "STORED\r\n");
    assert_eq!(on_a.get("f").as_deref(), Some("F"));
    assert_eq!(c.get("f").as_deref(), Some("F"));

    // all-initial: a answers; b gets every request too, in the background.
    let mut c = Conn::new(initial);
    assert_eq!(c.line("set i 0 0 1\r\nI\r\n"), "STORED\r\n");
    assert_eq!(on_a.get("i").as_deref(), Some("I"));
    let deadline = Instant::now() + Duration::from_secs(5);
    while on_b.get("i").is_none() {
        assert!(Instant::now() < deadline, "b never got the set");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(on_b.line("set i 0 0 1\r\nX\r\n"), "STORED\r\n");
    assert_eq!(c.get("i").as_deref(), Some("I"), "a's reply, not b's");
    let _ = std::fs::remove_file(file);
}

#[test]
fn migrate_moves_keys_from_old_to_new_at_its_start_time() {
    let (_old, old) = memfleet_server(&["-t", "1", "-m", "16"]);
    let (_new, new) = memfleet_server(&["-t", "1", "-m", "16"]);
    until_serving(old);
    until_serving(new);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let [before, during, after] = [free_port(), free_port(), free_port()];
    let route = |name: &str, port: u16, start: u64, interval: u64| {
        format!(
            "[routes.{name}]\nlisten = \"127.0.0.1:{port}\"\ntype = \"migrate\"\n\
             from = \"old\"\nto = \"new\"\nstart_time = {start}\ninterval = {interval}\n"
        )
    };
    let (_router, file) = router(
        &format!(
            "[pools.old]\nservers = [\"127.0.0.1:{old}\"]\n\
             [pools.new]\nservers = [\"127.0.0.1:{new}\"]\n{}{}{}",
            route("before", before, now + 100_000, 3600),
            route("during", during, now - 10, 100_000),
            route("after", after, now - 100, 10),
        ),
        before,
    );
    let (mut on_old, mut on_new) = (Conn::new(old), Conn::new(new));

    // Before the start: the old cluster alone.
    let mut c = Conn::new(before);
    assert_eq!(c.line("set b 0 0 1\r\nB\r\n"), "STORED\r\n");
    assert_eq!(
        (on_old.get("b").as_deref(), on_new.get("b")),
        (Some("B"), None)
    );
    assert_eq!(c.get("b").as_deref(), Some("B"));

    // During the move: writes to new; gets from new, falling back to old; deletes to both.
    let mut c = Conn::new(during);
    assert_eq!(on_old.line("set only_old 0 0 1\r\nO\r\n"), "STORED\r\n");
    assert_eq!(c.get("only_old").as_deref(), Some("O"), "fallback to old");
    assert_eq!(c.line("mg only_old v\r\n"), "VA 1\r\n");
    assert_eq!(c.line(""), "O\r\n");
    assert_eq!(c.line("set k 0 0 3\r\nnew\r\n"), "STORED\r\n");
    assert_eq!(on_new.get("k").as_deref(), Some("new"));
    assert_eq!(on_old.get("k"), None);
    assert_eq!(on_old.line("set k 0 0 3\r\nold\r\n"), "STORED\r\n");
    assert_eq!(c.get("k").as_deref(), Some("new"), "new's value first");
    assert_eq!(c.line("delete k\r\n"), "DELETED\r\n");
    assert_eq!(
        (on_old.get("k"), on_new.get("k")),
        (None, None),
        "deleted in both"
    );
    assert_eq!(c.get("k"), None, "no stale read from old after a delete");
    assert_eq!(c.line("delete only_old\r\n"), "DELETED\r\n");
    assert_eq!(c.get("only_old"), None);
    assert_eq!(
        c.get("__memfleet__.route_handles(get,k)").unwrap(),
        format!(
            "migrate|moving: to, then from on a miss\n pool|new|127.0.0.1:{new}\n \
             pool|old|127.0.0.1:{old}\n"
        )
    );

    // After the move: the new cluster alone.
    let mut c = Conn::new(after);
    assert_eq!(on_old.line("set gone 0 0 1\r\nG\r\n"), "STORED\r\n");
    assert_eq!(c.get("gone"), None, "old is no longer read");
    assert_eq!(c.line("set a 0 0 1\r\nA\r\n"), "STORED\r\n");
    assert_eq!(
        (on_old.get("a"), on_new.get("a").as_deref()),
        (None, Some("A"))
    );
    let _ = std::fs::remove_file(file);
}

#[test]
fn replicated_reads_go_to_the_routers_zone_first() {
    let (_a, a) = memfleet_server(&["-t", "1", "-m", "16"]);
    let (_b, b) = memfleet_server(&["-t", "1", "-m", "16"]);
    until_serving(a);
    until_serving(b);
    let (_held, dead) = support::refused_port();
    let [ab, ba, gone] = [free_port(), free_port(), free_port()];
    let (_router, file) = router(
        &format!(
            "[router]\nzone = \"z2\"\n\
             [pools.a]\nzone = \"z1\"\nservers = [\"127.0.0.1:{a}\"]\n\
             [pools.b]\nzone = \"z2\"\nservers = [\"127.0.0.1:{b}\"]\n\
             [pools.dead]\nzone = \"z2\"\ntimeout_ms = 200\nservers = [\"127.0.0.1:{dead}\"]\n\
             [routes.ab]\nlisten = \"127.0.0.1:{ab}\"\ntype = \"replicated\"\n\
             replicas = [\"a\", \"b\"]\n\
             [routes.ba]\nlisten = \"127.0.0.1:{ba}\"\ntype = \"replicated\"\n\
             replicas = [\"b\", \"a\"]\n\
             [routes.gone]\nlisten = \"127.0.0.1:{gone}\"\ntype = \"replicated\"\n\
             replicas = [\"a\", \"dead\"]\n"
        ),
        ab,
    );
    assert_eq!(Conn::new(a).line("set k 0 0 1\r\nA\r\n"), "STORED\r\n");
    assert_eq!(Conn::new(b).line("set k 0 0 1\r\nB\r\n"), "STORED\r\n");
    // Whatever the replicas' order (a client's choice would pick the same position in
    // both), the replica of the router's zone answers.
    assert_eq!(Conn::new(ab).get("k").as_deref(), Some("B"));
    assert_eq!(Conn::new(ba).get("k").as_deref(), Some("B"));
    // The zone's replica cannot answer: the read fails over to the other zone.
    assert_eq!(Conn::new(gone).get("k").as_deref(), Some("A"));
    let mut c = Conn::new(gone);
    assert_eq!(c.stat("route:gone:replica_failovers"), Some(1));
    let _ = std::fs::remove_file(file);
}
