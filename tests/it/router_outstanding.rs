//! A pool's `max_outstanding` through a real `memfleet router`: at most that many requests
//! in flight to a server, `max_outstanding_queue` more waiting (answered once places free
//! up, in order), the rest refused at once with `SERVER_ERROR` naming the limit, all
//! counted in `stats` and `/metrics`; and the issue's example configuration passing
//! `--validate-config`.

use crate::support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::{free_port, memfleet_server, until_serving, Conn, Killed};

fn router(file: &std::path::Path, admin: u16) -> Killed {
    support::router(file, Some(admin))
}

fn metrics(admin: u16) -> String {
    let mut http = TcpStream::connect(("127.0.0.1", admin)).unwrap();
    http.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
    let mut text = String::new();
    http.read_to_string(&mut text).unwrap();
    text
}

fn signal(child: &Killed, sig: i32) {
    // SAFETY: kill(2) on the pid of a child this test started and has not reaped.
    assert_eq!(unsafe { libc::kill(child.0.id() as i32, sig) }, 0);
    if sig == libc::SIGSTOP {
        // Stopped (state T in /proc) before anything more is sent.
        let stat = format!("/proc/{}/stat", child.0.id());
        let deadline = Instant::now() + Duration::from_secs(5);
        while !std::fs::read_to_string(&stat)
            .unwrap()
            .rsplit(')')
            .next()
            .unwrap()
            .trim_start()
            .starts_with('T')
        {
            assert!(Instant::now() < deadline, "not stopped");
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// Waits until `stat` reads `want`.
fn until_stat(c: &mut Conn, stat: &str, want: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while c.stat(stat) != Some(want) {
        assert!(
            Instant::now() < deadline,
            "{stat} is {:?}, not {want}",
            c.stat(stat)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_stalled_server_gets_max_outstanding_then_a_queue_then_refusals() {
    let (server_process, server) = memfleet_server(&["-t", "1", "-m", "16"]);
    until_serving(server);
    let (port, tree, admin) = (free_port(), free_port(), free_port());
    let file = std::env::temp_dir().join(format!("memfleet-outst-{}.toml", std::process::id()));
    std::fs::write(
        &file,
        format!(
            "[pools.p]\nlisten = \"127.0.0.1:{port}\"\ntimeout_ms = 20000\n\
             max_outstanding = 2\nmax_outstanding_queue = 3\n\
             servers = [\"127.0.0.1:{server}\"]\n\
             [routes.t]\nlisten = \"127.0.0.1:{tree}\"\ntype = \"operation\"\ndefault = \"p\"\n"
        ),
    )
    .unwrap();
    let _router = router(&file, admin);
    until_serving(port);
    let mut a = Conn::new(port);
    assert_eq!(a.line("set k 0 0 2\r\nhi\r\n"), "STORED\r\n");
    let mut direct = Conn::new(server);
    let gets_before = direct.stat("cmd_get").unwrap();
    let stat = |f: &str| format!("pool:p:server:127.0.0.1:{server}:{f}");

    // The server stalls: two gets in flight, three waiting, the sixth refused at once.
    signal(&server_process, libc::SIGSTOP);
    a.send("get k\r\n".repeat(5));
    let mut b = Conn::new(port);
    until_stat(&mut b, &stat("outstanding"), 5);
    assert_eq!(
        b.line("get k\r\n"),
        format!(
            "SERVER_ERROR max_outstanding: 2 requests in flight to server 127.0.0.1:{server} \
             and 3 waiting\r\n"
        )
    );
    // Through a route tree: the same refusal for one key, a miss in a multi-key get.
    let mut t = Conn::new(tree);
    assert!(t
        .line("get k\r\n")
        .starts_with("SERVER_ERROR max_outstanding: 2 requests in flight"));
    assert_eq!(t.line("get k k2\r\n"), "END\r\n");
    assert_eq!(b.stat(&stat("outstanding_waited")), Some(3));
    assert_eq!(b.stat(&stat("outstanding_refused")), Some(4), "a key each");
    // A refusal is the router's, not the server's: not an error, never marked down.
    assert_eq!(b.stat(&stat("errors")), Some(0));
    let m = metrics(admin);
    for series in [
        format!("memfleet_router_server_outstanding{{pool=\"p\",server=\"127.0.0.1:{server}\"}} 5"),
        format!(
            "memfleet_router_server_outstanding_refused_total{{pool=\"p\",server=\"127.0.0.1:{server}\"}} 4"
        ),
    ] {
        assert!(m.contains(&series), "{series} not in {m}");
    }

    // Back: the five are answered in order, and only they reached the server.
    signal(&server_process, libc::SIGCONT);
    for _ in 0..5 {
        assert_eq!(a.read_line(), "VALUE k 0 2\r\n");
        assert_eq!(a.read_line(), "hi\r\n");
        assert_eq!(a.read_line(), "END\r\n");
    }
    assert_eq!(direct.stat("cmd_get").unwrap() - gets_before, 5);
    until_stat(&mut b, &stat("outstanding"), 0);
    assert_eq!(b.line("get k\r\n"), "VALUE k 0 2\r\n");
    let _ = std::fs::remove_file(file);
}

/// A server that answers nothing until told: how many requests reached it is exactly what
/// the router let through.
#[test]
fn no_more_than_max_outstanding_reach_a_server_at_once() {
    let held = TcpListener::bind("127.0.0.1:0").unwrap();
    let server = held.local_addr().unwrap().port();
    let (port, admin) = (free_port(), free_port());
    let file = std::env::temp_dir().join(format!("memfleet-outst2-{}.toml", std::process::id()));
    std::fs::write(
        &file,
        format!(
            "[pools.p]\nlisten = \"127.0.0.1:{port}\"\ntimeout_ms = 20000\n\
             max_outstanding = 3\nmax_outstanding_queue = 100\n\
             servers = [\"127.0.0.1:{server}\"]\n"
        ),
    )
    .unwrap();
    let _router = router(&file, admin);
    until_serving(port);
    let mut c = Conn::new(port);
    c.send("get k\r\n".repeat(10));
    let (link, _) = held.accept().unwrap();
    link.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let mut link = BufReader::new(link);
    // Lines that arrive within half a second of the last.
    let arrived = |link: &mut BufReader<TcpStream>| -> usize {
        let mut n = 0;
        let mut l = String::new();
        while link.read_line(&mut l).is_ok_and(|r| r > 0) {
            assert_eq!(l, "get k\r\n");
            l.clear();
            n += 1;
        }
        n
    };
    assert_eq!(arrived(&mut link), 3, "the limit");
    // Each answer lets one waiting request through.
    link.get_mut().write_all(b"END\r\n").unwrap();
    assert_eq!(arrived(&mut link), 1);
    link.get_mut().write_all(&b"END\r\n".repeat(3)).unwrap();
    assert_eq!(arrived(&mut link), 3);
    link.get_mut().write_all(&b"END\r\n".repeat(3)).unwrap();
    assert_eq!(arrived(&mut link), 3, "the last three");
    link.get_mut().write_all(&b"END\r\n".repeat(3)).unwrap();
    for _ in 0..10 {
        assert_eq!(c.read_line(), "END\r\n");
    }
    let _ = std::fs::remove_file(file);
}

/// The configuration of issue 29 as written (its routes name a pool `old` the excerpt does
/// not define, and nothing listens), completed by that pool.
const ISSUE_EXAMPLE: &str = r#"[pools.new]
servers = ["10.0.0.5:11211", "10.0.0.6:11211"]
item_size_max = 4194304                # bytes the router lets through to this pool (default 1 MiB)
max_outstanding = 256                  # in flight per server
rates = { gets = 50000, sets = 5000, deletes = 5000 }   # per second, per router
max_down_fraction = 0.5

[routes.try_new]
type = "shadow"
main = "old"
shadow = "new"
key_fraction = [0.0, 0.1]              # the keys whose hash falls in [0, 0.1) of the space

[routes.reads]
type = "failover"
children = ["old", "new"]              # in order
miss = true                            # a miss also tries the next child

[routes.big]
type = "bigvalue"
child = "old"
threshold = 524288                     # values above this are stored as chunks

[routes.cap]
type = "ttl"
child = "old"
max_ttl = 3600                         # also: set_ttl

[routes.drain]
type = "null"                          # answers at once as mcrouter's NullRoute (miss, NOT_STORED, NOT_FOUND)
"#;

#[test]
fn the_issues_example_configuration_validates() {
    let dir = std::env::temp_dir().join(format!("memfleet-issue29-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let check = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_memfleet"))
            .args(["router", "--validate-config"])
            .arg(&path)
            .env("RUST_BACKTRACE", "0")
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // As written: the one problem is the pool it leaves out (every key is known).
    let (code, _, err) = check("excerpt.toml", ISSUE_EXAMPLE);
    assert_eq!(code, Some(1));
    assert!(err.contains("no pool or route named \"old\""), "{err}");
    assert!(err.contains("1 problem(s)"), "{err}");
    let whole = format!(
        "{ISSUE_EXAMPLE}\n[pools.old]\nlisten = \"127.0.0.1:22122\"\n\
         servers = [\"10.0.0.1:11211\", \"10.0.0.2:11211\"]\n"
    );
    let (code, out, err) = check("whole.toml", &whole);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains("OK: 2 pool(s), 5 route(s), 1 listener(s)"),
        "{out}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// With `-t 2` each worker's connection takes half of `max_outstanding`: the router's
/// total at the server is the limit, never the limit per worker.
#[test]
fn workers_share_max_outstanding_between_their_connections() {
    let held = TcpListener::bind("127.0.0.1:0").unwrap();
    let server = held.local_addr().unwrap().port();
    let port = free_port();
    let file = std::env::temp_dir().join(format!("memfleet-outst3-{}.toml", std::process::id()));
    std::fs::write(
        &file,
        format!(
            "[pools.p]\nlisten = \"127.0.0.1:{port}\"\ntimeout_ms = 20000\n\
             max_outstanding = 4\nmax_outstanding_queue = 0\n\
             servers = [\"127.0.0.1:{server}\"]\n"
        ),
    )
    .unwrap();
    let _router = Killed(
        Command::new(env!("CARGO_BIN_EXE_memfleet"))
            .args(["router", "-t", "2", "--config"])
            .arg(&file)
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    until_serving(port);
    // Two clients, on the two workers (clients are dealt round-robin), three gets each.
    let mut clients = [Conn::new(port), Conn::new(port)];
    for c in &mut clients {
        c.send("get k\r\n".repeat(3));
    }
    let mut links: Vec<BufReader<TcpStream>> = (0..2)
        .map(|_| {
            let (link, _) = held.accept().unwrap();
            link.set_read_timeout(Some(Duration::from_millis(500)))
                .unwrap();
            BufReader::new(link)
        })
        .collect();
    let mut arrived = 0;
    for link in &mut links {
        let mut l = String::new();
        while link.read_line(&mut l).is_ok_and(|r| r > 0) {
            arrived += 1;
            l.clear();
        }
    }
    assert_eq!(arrived, 4, "max_outstanding across both workers");
    for link in &mut links {
        link.get_mut().write_all(&b"END\r\n".repeat(2)).unwrap();
    }
    for c in &mut clients {
        assert_eq!(c.read_line(), "END\r\n");
        assert_eq!(c.read_line(), "END\r\n");
        assert!(c
            .read_line()
            .starts_with("SERVER_ERROR max_outstanding: 4 requests"));
    }
    let _ = std::fs::remove_file(file);
}
