//! TLS through `memfleet router`: TLS clients on its listeners (certificate reloaded on
//! SIGHUP), TLS from the router to memfleet servers and to Debian's memcached built with
//! TLS (`-Z`), and a server whose certificate the pool does not trust.

use crate::support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::certs::{der_of, Issued, TestPki, TlsClient, TIMEOUT};
use support::{free_port, memfleet_server, Killed};

/// `memfleet server` serving TLS with `issued`.
fn tls_server(issued: &Issued) -> (Killed, u16) {
    memfleet_server(&[
        "-t",
        "1",
        "-m",
        "16",
        "--tls-cert",
        issued.cert.to_str().unwrap(),
        "--tls-key",
        issued.key.to_str().unwrap(),
    ])
}

/// A router listening on a free port with TLS from `listener`, for one pool whose `servers`
/// are reached with the pool TOML keys `pool_keys`.
fn router(dir: &Path, listener: &Issued, servers: &[u16], pool_keys: &str) -> (Killed, u16) {
    let port = free_port();
    let servers: Vec<String> = servers
        .iter()
        .map(|p| format!("\"127.0.0.1:{p}\""))
        .collect();
    let file = dir.join(format!("router-{port}.toml"));
    std::fs::write(
        &file,
        format!(
            "[pools.main]\nlisten = \"127.0.0.1:{port}\"\nservers = [{}]\ntimeout_ms = 5000\n{pool_keys}",
            servers.join(", ")
        ),
    )
    .unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_memfleet"))
        .args(["router", "-t", "1", "--config"])
        .arg(&file)
        .arg("--tls-cert")
        .arg(&listener.cert)
        .arg("--tls-key")
        .arg(&listener.key)
        .stderr(Stdio::null())
        .spawn()
        .expect("memfleet router starts");
    (Killed(child), port)
}

fn pool_tls(pki: &TestPki) -> String {
    format!("tls = true\ntls_ca = {:?}\n", pki.ca.to_str().unwrap())
}

#[test]
fn tls_client_through_the_router_to_tls_servers() {
    let mut pki = TestPki::new("router_end_to_end");
    let listener = pki.server("router");
    let backend = pki.server("backend");
    let (_a, a) = tls_server(&backend);
    let (_b, b) = tls_server(&backend);
    let (_router, port) = router(&pki.dir, &listener, &[a, b], &pool_tls(&pki));

    let mut client = TlsClient::connect(port, &pki.ca, None).unwrap();
    assert_eq!(client.peer_cert(), der_of(&listener.cert));
    for i in 0..20 {
        let set = format!("set key{i} 0 0 2\r\nv{}\r\n", i % 10);
        assert_eq!(client.ask(set.as_bytes(), b"\r\n"), b"STORED\r\n");
    }
    let get: String = (0..20).map(|i| format!(" key{i}")).collect();
    let reply = client.ask(format!("get{get}\r\n").as_bytes(), b"END\r\n");
    let expected: String = (0..20)
        .map(|i| format!("VALUE key{i} 0 2\r\nv{}\r\n", i % 10))
        .collect();
    assert_eq!(String::from_utf8(reply).unwrap(), expected + "END\r\n");
    assert_eq!(
        client.ask(b"mg key3 v\r\n", b"\r\nv3\r\n"),
        b"VA 2\r\nv3\r\n"
    );

    // Both servers got keys, over TLS (they serve nothing else).
    for server in [a, b] {
        let mut direct = TlsClient::connect(server, &pki.ca, None).unwrap();
        let items = direct.stat("curr_items").unwrap();
        assert!(items.parse::<u32>().unwrap() > 0, "{server}: {items} items");
    }
}

#[test]
fn the_router_reloads_its_certificate_on_sighup() {
    let mut pki = TestPki::new("router_reload");
    let first = pki.server("first");
    let second = pki.server("second");
    let live = Issued {
        cert: pki.dir.join("live.pem"),
        key: pki.dir.join("live.key"),
    };
    std::fs::copy(&first.cert, &live.cert).unwrap();
    std::fs::copy(&first.key, &live.key).unwrap();
    let (_server, server) = memfleet_server(&["-t", "1", "-m", "16"]);
    let (router, port) = router(&pki.dir, &live, &[server], "");

    let mut old = TlsClient::connect(port, &pki.ca, None).unwrap();
    assert_eq!(old.peer_cert(), der_of(&first.cert));
    std::fs::copy(&second.cert, &live.cert).unwrap();
    std::fs::copy(&second.key, &live.key).unwrap();
    let pid = router.0.id() as libc::pid_t;
    // SAFETY: kill(2) with our own child's pid and a signal number has no memory effects.
    let sent = unsafe { libc::kill(pid, libc::SIGHUP) };
    assert_eq!(sent, 0);
    let wanted = der_of(&second.cert);
    let deadline = Instant::now() + TIMEOUT;
    while TlsClient::connect(port, &pki.ca, None).unwrap().peer_cert() != wanted {
        assert!(
            Instant::now() < deadline,
            "the new certificate never served"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(old.ask(b"set k 0 0 1\r\nx\r\n", b"\r\n"), b"STORED\r\n");
    assert_eq!(
        old.ask(b"get k\r\n", b"END\r\n"),
        b"VALUE k 0 1\r\nx\r\nEND\r\n"
    );
}

#[test]
fn a_server_certificate_the_pool_does_not_trust_gets_no_requests() {
    let mut pki = TestPki::new("router_untrusted");
    let mut other = TestPki::new("router_untrusted_other");
    let listener = pki.server("router");
    let stranger = other.server("stranger");
    let (_server, server) = tls_server(&stranger);
    let (_router, port) = router(&pki.dir, &listener, &[server], &pool_tls(&pki));
    let mut client = TlsClient::connect(port, &pki.ca, None).unwrap();
    let reply = client.ask(b"set k 0 0 1\r\nx\r\n", b"\r\n");
    assert!(
        reply.starts_with(b"SERVER_ERROR"),
        "{:?}",
        String::from_utf8_lossy(&reply)
    );
}

#[test]
fn the_router_speaks_tls_to_memcached() {
    let mut pki = TestPki::new("router_memcached");
    let listener = pki.server("router");
    let backend = pki.server("memcached");
    // memcached reads its key after dropping to `nobody`.
    for file in [&backend.cert, &backend.key] {
        std::fs::set_permissions(file, std::os::unix::fs::PermissionsExt::from_mode(0o644))
            .unwrap();
    }
    let options = format!(
        "ssl_chain_cert={},ssl_key={}",
        backend.cert.display(),
        backend.key.display()
    );
    let (_memcached, memcached) = support::memcached(&["-Z", "-o", &options]);
    let _up = support::connect(memcached, TIMEOUT);
    let (_router, port) = router(&pki.dir, &listener, &[memcached], &pool_tls(&pki));
    let mut client = TlsClient::connect(port, &pki.ca, None).unwrap();
    assert_eq!(
        client.ask(b"set k 0 0 3\r\nabc\r\n", b"\r\n"),
        b"STORED\r\n"
    );
    assert_eq!(
        client.ask(b"get k\r\n", b"END\r\n"),
        b"VALUE k 0 3\r\nabc\r\nEND\r\n"
    );
    // And memcached holds it: ask it directly, over TLS.
    let mut direct = TlsClient::connect(memcached, &pki.ca, None).unwrap();
    assert_eq!(
        direct.ask(b"get k\r\n", b"END\r\n"),
        b"VALUE k 0 3\r\nabc\r\nEND\r\n"
    );
}

#[test]
fn the_router_presents_the_pools_client_certificate() {
    let mut pki = TestPki::new("router_client_cert");
    let listener = pki.server("router");
    let backend = pki.server("backend");
    let identity = pki.client("router-client");
    let (_server, server) = memfleet_server(&[
        "-t",
        "1",
        "-m",
        "16",
        "--tls-cert",
        backend.cert.to_str().unwrap(),
        "--tls-key",
        backend.key.to_str().unwrap(),
        "--tls-ca",
        pki.ca.to_str().unwrap(),
        "--tls-verify-client",
    ]);
    let with_identity = format!(
        "{}tls_cert = {:?}\ntls_key = {:?}\n",
        pool_tls(&pki),
        identity.cert.to_str().unwrap(),
        identity.key.to_str().unwrap()
    );
    let (_with, with) = router(&pki.dir, &listener, &[server], &with_identity);
    let (_without, without) = router(&pki.dir, &listener, &[server], &pool_tls(&pki));

    let mut client = TlsClient::connect(with, &pki.ca, None).unwrap();
    assert_eq!(client.ask(b"set k 0 0 1\r\nx\r\n", b"\r\n"), b"STORED\r\n");
    // (A failed get is a miss through the router; a failed set shows.)
    let mut client = TlsClient::connect(without, &pki.ca, None).unwrap();
    let reply = client.ask(b"set k 0 0 1\r\ny\r\n", b"\r\n");
    assert!(
        reply.starts_with(b"SERVER_ERROR"),
        "{:?}",
        String::from_utf8_lossy(&reply)
    );
}

/// The client library with UDP on and a pool that speaks TLS to its servers: gets stay on
/// the encrypted connection (a datagram would carry the key and value in the clear), and
/// the server also listening on UDP sees none.
#[test]
fn a_tls_pool_never_sends_gets_over_udp() {
    use memfleet_client::{Client, ClientOptions, UdpGet};
    use std::sync::atomic::Ordering;

    let mut pki = TestPki::new("client-tls-udp");
    let issued = pki.server("backend");
    let udp_port = free_port();
    let (_server, port) = memfleet_server(&[
        "-t",
        "1",
        "-m",
        "16",
        "-U",
        &udp_port.to_string(),
        "--tls-cert",
        issued.cert.to_str().unwrap(),
        "--tls-key",
        issued.key.to_str().unwrap(),
    ]);
    // Listening once a plain TCP connection is accepted (the handshake is not needed).
    drop(support::connect(port, TIMEOUT));
    let config = memfleet_routing::from_toml(&format!(
        "[pools.main]\nservers = [\"127.0.0.1:{port}\"]\ntimeout_ms = 5000\n{}",
        pool_tls(&pki)
    ))
    .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let cache = Client::new(
            &config,
            "main",
            ClientOptions {
                udp: Some(Duration::from_millis(200)),
                compress_above: None,
                ..ClientOptions::default()
            },
        )
        .unwrap();
        cache.set("secret", b"value", 0).await.unwrap();
        let UdpGet::Hit(v) = cache.get_udp("secret").await.unwrap() else {
            panic!("not a hit over the TLS connection");
        };
        assert_eq!(v.data, b"value");
        assert_eq!(
            cache.udp_counters().unwrap().sent.load(Ordering::Relaxed),
            0,
            "a get went out as a datagram"
        );
    });
}
