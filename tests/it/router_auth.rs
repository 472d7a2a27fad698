//! memcached's ASCII authentication (`-Y authfile`) through `memfleet router`, both ways:
//! the router logging in to `memfleet server -Y` and to Debian's memcached `-Y` (pool keys
//! `auth_user` and `auth_password_file` / `auth_password`, also under TLS), a refused login
//! reaching the client as `SERVER_ERROR` and the router's log, and the router's own
//! `--auth-file` refusing unauthenticated clients with memcached's replies (reloaded on
//! SIGHUP).

use crate::support;

use memfleet_protocol::reply::{frame, Frame, ReplyKind};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use support::certs::{TestPki, TlsClient};
use support::{free_port, memfleet_server, Killed};

/// Generous on a loaded 2-core machine.
const TIMEOUT: Duration = Duration::from_secs(15);

/// A scratch directory for one test, readable by memcached's `nobody`; removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(test: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!(
            "memfleet-router-auth-{}-{test}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    /// Writes `name` (mode 0644) and returns its path.
    fn file(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o644))
            .unwrap();
        path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `memfleet router` for one pool over `servers` with the TOML `pool_keys` and `extra`
/// arguments; its log (stderr) goes to a file whose path is returned.
fn router(
    dir: &Scratch,
    servers: &[u16],
    pool_keys: &str,
    extra: &[&str],
) -> (Killed, u16, PathBuf) {
    let port = free_port();
    let servers: Vec<String> = servers
        .iter()
        .map(|p| format!("\"127.0.0.1:{p}\""))
        .collect();
    let config = dir.file(
        &format!("router-{port}.toml"),
        &format!(
            "[pools.main]\nlisten = \"127.0.0.1:{port}\"\nservers = [{}]\ntimeout_ms = 5000\n\
             server_retry_timeout_ms = 200\n{pool_keys}",
            servers.join(", ")
        ),
    );
    let log = dir.0.join(format!("router-{port}.log"));
    let child = Command::new(env!("CARGO_BIN_EXE_memfleet"))
        .args(["router", "-t", "1", "--config"])
        .arg(&config)
        .args(extra)
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("memfleet router starts");
    (Killed(child), port, log)
}

/// `memfleet server -Y authfile`, listening when this returns.
fn auth_server(authfile: &Path, extra: &[&str]) -> (Killed, u16) {
    let mut args = vec!["-t", "1", "-m", "16", "-Y", authfile.to_str().unwrap()];
    args.extend_from_slice(extra);
    listening(memfleet_server(&args))
}

/// Returns once the server `started` accepts connections (a router started before would
/// fail its first requests).
fn listening(started: (Killed, u16)) -> (Killed, u16) {
    drop(support::connect(started.1, TIMEOUT));
    started
}

/// A plain TCP connection that sends requests and reads whole replies.
struct Conn(std::net::TcpStream);

/// What this module asks of a text connection beyond `support::Conn`'s own.
trait ConnExt {
    fn open(port: u16) -> Conn;
    fn ask(&mut self, request: &str, kind: ReplyKind) -> String;
    fn line(&mut self, request: &str) -> String;
    fn login(port: u16, user: &str, password: &str) -> Conn;
}

impl ConnExt for Conn {
    fn open(port: u16) -> Conn {
        Conn(support::connect(port, TIMEOUT))
    }

    /// Sends `request` and returns its reply, framed as `kind`.
    fn ask(&mut self, request: &str, kind: ReplyKind) -> String {
        self.0.write_all(request.as_bytes()).unwrap();
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            if let Ok(Frame::Complete(n)) = frame(&buf, kind, 1 << 20) {
                assert_eq!(n, buf.len(), "more than one reply to {request:?}");
                return String::from_utf8_lossy(&buf).into_owned();
            }
            let n = self.0.read(&mut chunk).unwrap();
            assert!(n > 0, "connection closed after {request:?}");
            buf.extend_from_slice(&chunk[..n]);
        }
    }

    fn line(&mut self, request: &str) -> String {
        self.ask(request, ReplyKind::Line)
    }

    /// Authenticates as `user` with `password`.
    fn login(port: u16, user: &str, password: &str) -> Conn {
        let mut conn = Conn::open(port);
        let data = format!("{user} {password}");
        let reply = conn.line(&format!("set auth 0 0 {}\r\n{data}\r\n", data.len()));
        assert_eq!(reply, "STORED\r\n", "login as {user} on {port}");
        conn
    }
}

/// Stores 20 keys through the router at `port` and reads them back in one multi-get.
fn round_trip(port: u16) {
    let mut c = Conn::open(port);
    for i in 0..20 {
        let reply = c.line(&format!("set key{i} 0 0 2\r\nv{}\r\n", i % 10));
        assert_eq!(reply, "STORED\r\n", "set key{i}");
    }
    let keys: String = (0..20).map(|i| format!(" key{i}")).collect();
    let expected: String = (0..20)
        .map(|i| format!("VALUE key{i} 0 2\r\nv{}\r\n", i % 10))
        .collect();
    assert_eq!(
        c.ask(&format!("get{keys}\r\n"), ReplyKind::Retrieval),
        expected + "END\r\n"
    );
}

/// The `curr_items` of an authenticated connection.
fn items(conn: &mut Conn) -> u64 {
    let stats = conn.ask("stats\r\n", ReplyKind::Stats);
    let line = stats
        .lines()
        .find_map(|l| l.strip_prefix("STAT curr_items "))
        .unwrap_or_else(|| panic!("no curr_items in {stats}"));
    line.trim().parse().unwrap()
}

/// Waits until `log` contains `text`.
fn wait_for_log(log: &Path, text: &str) -> String {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let written = std::fs::read_to_string(log).unwrap_or_default();
        if written.contains(text) {
            return written;
        }
        assert!(
            Instant::now() < deadline,
            "{text:?} never logged:\n{written}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn the_router_logs_in_to_authenticating_servers() {
    let dir = Scratch::new("servers");
    let authfile = dir.file(
        "authfile",
        "# the cache's users\nrouter:s3cret:pw\nother:x\n",
    );
    // The password file as an editor leaves it: with a final line break.
    let password = dir.file("password", "s3cret:pw\n");
    let (_a, a) = auth_server(&authfile, &[]);
    let (_b, b) = auth_server(&authfile, &[]);
    let keys = format!(
        "auth_user = \"router\"\nauth_password_file = {:?}\n",
        password.to_str().unwrap()
    );
    let (_router, port, _log) = router(&dir, &[a, b], &keys, &[]);
    round_trip(port);
    // Both servers hold keys, and nothing under the login key (`memfleet:auth`).
    for server in [a, b] {
        let mut direct = Conn::login(server, "other", "x");
        assert!(items(&mut direct) > 0, "server {server} got no keys");
        assert_eq!(
            direct.ask("get memfleet:auth\r\n", ReplyKind::Retrieval),
            "END\r\n"
        );
    }
    // The inline password works the same way.
    let inline = "auth_user = \"router\"\nauth_password = \"s3cret:pw\"\n";
    let (_inline, port, _log) = router(&dir, &[a, b], inline, &[]);
    round_trip(port);
}

#[test]
fn a_refused_login_is_a_server_error_and_logged() {
    let dir = Scratch::new("refused");
    let authfile = dir.file("authfile", "router:right\n");
    let (_a, a) = auth_server(&authfile, &[]);
    let (_b, b) = auth_server(&authfile, &[]);
    let keys = "auth_user = \"router\"\nauth_password = \"wrong\"\n";
    let (_router, port, log) = router(&dir, &[a, b], keys, &[]);
    let mut c = Conn::open(port);
    for i in 0..4 {
        let reply = c.line(&format!("set key{i} 0 0 1\r\nx\r\n"));
        assert!(reply.starts_with("SERVER_ERROR "), "{reply:?}");
    }
    // The first failure says why; later ones may say the server is marked down.
    let written = wait_for_log(&log, "authentication failed");
    assert!(
        written.contains("CLIENT_ERROR authentication failure"),
        "{written}"
    );
    assert!(
        !written.contains("wrong"),
        "the password was logged:\n{written}"
    );
    // The servers stored nothing.
    for server in [a, b] {
        assert_eq!(items(&mut Conn::login(server, "router", "right")), 0);
    }
    // A client sees the reason on a server's first refusal.
    let (_one, one) = auth_server(&authfile, &[]);
    let (_r, port, _log) = router(&dir, &[one], keys, &[]);
    let reply = Conn::open(port).line("set k 0 0 1\r\nx\r\n");
    assert!(
        reply.starts_with("SERVER_ERROR authentication to server 127.0.0.1:")
            && reply.ends_with("failed: CLIENT_ERROR authentication failure\r\n"),
        "{reply:?}"
    );
}

#[test]
fn the_router_logs_in_to_memcached() {
    if !Path::new("/usr/bin/memcached").exists() {
        assert!(
            std::env::var("CI").is_err(),
            "memcached is needed under CI (scripts/test installs it)"
        );
        return;
    }
    let dir = Scratch::new("memcached");
    // memcached reads the file as `nobody`.
    let _ = Command::new("chmod").arg("a+rx").arg(&dir.0).status();
    let authfile = dir.file("authfile", "router:s3cret\n");
    let (_memcached, memcached) = listening(support::memcached(&[
        "-t",
        "1",
        "-Y",
        authfile.to_str().unwrap(),
    ]));
    let keys = "auth_user = \"router\"\nauth_password = \"s3cret\"\n";
    let (_router, port, _log) = router(&dir, &[memcached], keys, &[]);
    round_trip(port);
    let mut direct = Conn::login(memcached, "router", "s3cret");
    assert_eq!(
        direct.ask("get key3\r\n", ReplyKind::Retrieval),
        "VALUE key3 0 2\r\nv3\r\nEND\r\n"
    );
    // memcached stored nothing readable under the login key either.
    assert_eq!(
        direct.ask("get memfleet:auth\r\n", ReplyKind::Retrieval),
        "END\r\n"
    );
}

#[test]
fn tls_and_authentication_together() {
    let mut pki = TestPki::new("router_auth_tls");
    let backend = pki.server("backend");
    let dir = Scratch::new("tls");
    let authfile = dir.file("authfile", "router:s3cret\n");
    let (_server, server) = auth_server(
        &authfile,
        &[
            "--tls-cert",
            backend.cert.to_str().unwrap(),
            "--tls-key",
            backend.key.to_str().unwrap(),
        ],
    );
    let keys = format!(
        "tls = true\ntls_ca = {:?}\nauth_user = \"router\"\nauth_password = \"s3cret\"\n",
        pki.ca.to_str().unwrap()
    );
    let (_router, port, _log) = router(&dir, &[server], &keys, &[]);
    round_trip(port);
    // The server requires both: a TLS client that has not logged in is refused.
    let mut direct = TlsClient::connect(server, &pki.ca, None).unwrap();
    assert_eq!(
        direct.ask(b"get key1\r\n", b"\r\n"),
        b"CLIENT_ERROR unauthenticated\r\n"
    );
    assert_eq!(
        direct.ask(b"set a 0 0 13\r\nrouter s3cret\r\n", b"\r\n"),
        b"STORED\r\n"
    );
    assert_eq!(
        direct.ask(b"get key1\r\n", b"END\r\n"),
        b"VALUE key1 0 2\r\nv1\r\nEND\r\n"
    );
}

/// (request, reply shape) before and after authenticating, as in `tests/it/auth.rs`.
const CLIENT_EXCHANGE: &[(&str, ReplyKind)] = &[
    ("get foo\r\n", ReplyKind::Retrieval),
    ("version\r\n", ReplyKind::Line),
    ("mg foo v\r\n", ReplyKind::Meta),
    ("delete foo\r\n", ReplyKind::Line),
    ("bogus\r\n", ReplyKind::Line),
    ("set foo 0 0 7\r\nuser ba\r\n", ReplyKind::Line),
    ("set foo 0 0 11\r\nuser secret\r\n", ReplyKind::Line),
    ("get foo\r\n", ReplyKind::Retrieval),
    ("set a 0 0 1\r\nx\r\n", ReplyKind::Line),
    ("get a\r\n", ReplyKind::Retrieval),
    ("delete a\r\n", ReplyKind::Line),
];

fn run(port: u16, exchange: &[(&str, ReplyKind)]) -> Vec<String> {
    let mut c = Conn::open(port);
    exchange.iter().map(|(r, k)| c.ask(r, *k)).collect()
}

#[test]
fn a_router_with_an_auth_file_refuses_clients_as_memcached_does() {
    let dir = Scratch::new("listener");
    let _ = Command::new("chmod").arg("a+rx").arg(&dir.0).status();
    let authfile = dir.file("authfile", "user:secret\n");
    let (_server, server) = listening(memfleet_server(&["-t", "1", "-m", "16"]));
    let (router, port, log) = router(
        &dir,
        &[server],
        "",
        &["--auth-file", authfile.to_str().unwrap()],
    );
    let got = run(port, CLIENT_EXCHANGE);
    assert_eq!(got[0], "CLIENT_ERROR unauthenticated\r\n");
    assert_eq!(got[4], "CLIENT_ERROR unauthenticated\r\n", "bogus");
    assert_eq!(got[5], "CLIENT_ERROR authentication failure\r\n");
    assert_eq!(got[6], "STORED\r\n");
    assert_eq!(got[7], "END\r\n", "the authenticating set stored its data");
    assert_eq!(got[8], "STORED\r\n");
    assert_eq!(got[9], "VALUE a 0 1\r\nx\r\nEND\r\n");
    assert_eq!(got[10], "DELETED\r\n");
    if Path::new("/usr/bin/memcached").exists() {
        let (_memcached, memcached) =
            support::memcached(&["-t", "1", "-Y", authfile.to_str().unwrap()]);
        let _up = support::connect(memcached, TIMEOUT);
        assert_eq!(got, run(memcached, CLIENT_EXCHANGE), "router vs memcached");
    }
    // The login attempts never reached the server (they would have stored `foo`).
    assert_eq!(
        Conn::open(server).ask("get foo\r\n", ReplyKind::Retrieval),
        "END\r\n"
    );
    // `quit` is honoured before authenticating.
    let mut quitter = Conn::open(port);
    quitter.0.write_all(b"quit\r\n").unwrap();
    assert_eq!(quitter.0.read(&mut [0u8; 16]).unwrap_or(0), 0);

    // SIGHUP reloads the file: the new password lets in new connections, the old one no
    // longer does; a connection already in stays in.
    let mut inside = Conn::login(port, "user", "secret");
    std::fs::write(&authfile, "user:changed\n").unwrap();
    let pid = router.0.id() as libc::pid_t;
    // SAFETY: kill(2) with our own child's pid and a signal number has no memory effects.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGHUP) }, 0);
    wait_for_log(&log, "auth file reloaded");
    let mut old = Conn::open(port);
    assert_eq!(
        old.line("set x 0 0 11\r\nuser secret\r\n"),
        "CLIENT_ERROR authentication failure\r\n"
    );
    let _new = Conn::login(port, "user", "changed");
    assert_eq!(inside.line("set k 0 0 1\r\ny\r\n"), "STORED\r\n");
    // A file that does not parse keeps the users in service.
    std::fs::write(&authfile, "no colon\n").unwrap();
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGHUP) }, 0);
    wait_for_log(&log, "auth file refused");
    let _still = Conn::login(port, "user", "changed");
}

#[test]
fn a_reload_rereads_the_password_file() {
    let dir = Scratch::new("password_reload");
    let authfile = dir.file("authfile", "router:right\n");
    let password = dir.file("password", "wrong\n");
    let (_server, server) = auth_server(&authfile, &[]);
    let keys = format!(
        "auth_user = \"router\"\nauth_password_file = {:?}\n",
        password.to_str().unwrap()
    );
    let (router, port, log) = router(&dir, &[server], &keys, &[]);
    let mut c = Conn::open(port);
    let reply = c.line("set k 0 0 1\r\nx\r\n");
    assert!(reply.starts_with("SERVER_ERROR "), "{reply:?}");
    wait_for_log(&log, "authentication failed");
    // The right password, and SIGHUP: the pool's connections are remade with it (the
    // server's failures so far do not keep it down).
    std::fs::write(&password, "right").unwrap();
    let pid = router.0.id() as libc::pid_t;
    // SAFETY: kill(2) with our own child's pid and a signal number has no memory effects.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGHUP) }, 0);
    wait_for_log(&log, "reloading the configuration");
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let reply = c.line("set k 0 0 1\r\nx\r\n");
        if reply == "STORED\r\n" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still {reply:?} after the reload"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        c.ask("get k\r\n", ReplyKind::Retrieval),
        "VALUE k 0 1\r\nx\r\nEND\r\n"
    );
}
