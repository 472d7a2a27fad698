//! TLS on `memfleet server`'s TCP port, through real sockets: the text, meta and binary
//! protocols over TLS (rustls and `openssl s_client` as clients), a plaintext client on the
//! TLS port, client-certificate verification, and certificate reload on SIGHUP.

use crate::support;

use std::io::{Read, Write};
use std::time::{Duration, Instant};
use support::certs::{der_of, Issued, TestPki, TlsClient, TIMEOUT};
use support::{connect, memfleet_server};

fn tls_server(pki: &mut TestPki, extra: &[&str]) -> (support::Killed, u16, Issued) {
    let issued = pki.server("server");
    let mut args = vec![
        "--tls-cert",
        issued.cert.to_str().unwrap(),
        "--tls-key",
        issued.key.to_str().unwrap(),
        "-t",
        "2",
    ];
    args.extend_from_slice(extra);
    let (child, port) = memfleet_server(&args);
    (child, port, issued)
}

/// A binary-protocol request: header, extras, key, value.
fn binary(opcode: u8, extras: &[u8], key: &[u8], value: &[u8]) -> Vec<u8> {
    let body = extras.len() + key.len() + value.len();
    let mut packet = vec![0x80, opcode];
    packet.extend_from_slice(&(key.len() as u16).to_be_bytes());
    packet.extend_from_slice(&[extras.len() as u8, 0, 0, 0]);
    packet.extend_from_slice(&(body as u32).to_be_bytes());
    packet.extend_from_slice(&[0; 12]);
    packet.extend_from_slice(extras);
    packet.extend_from_slice(key);
    packet.extend_from_slice(value);
    packet
}

/// Reads one binary reply: (status, body).
fn binary_reply(client: &mut TlsClient) -> (u16, Vec<u8>) {
    let mut header = [0u8; 24];
    client.read_exact(&mut header).unwrap();
    assert_eq!(header[0], 0x81, "a binary reply");
    let status = u16::from_be_bytes([header[6], header[7]]);
    let len = u32::from_be_bytes(header[8..12].try_into().unwrap()) as usize;
    let mut body = vec![0; len];
    client.read_exact(&mut body).unwrap();
    (status, body)
}

#[test]
fn text_meta_and_binary_protocols_over_tls() {
    let mut pki = TestPki::new("protocols");
    let (_server, port, issued) = tls_server(&mut pki, &[]);

    let mut text = TlsClient::connect(port, &pki.ca, None).unwrap();
    assert_eq!(text.peer_cert(), der_of(&issued.cert));
    assert_eq!(
        text.ask(b"set k 5 0 5\r\nhello\r\n", b"\r\n"),
        b"STORED\r\n"
    );
    assert_eq!(
        text.ask(b"get k\r\n", b"END\r\n"),
        b"VALUE k 5 5\r\nhello\r\nEND\r\n"
    );
    assert_eq!(text.ask(b"ms m 2\r\nhi\r\n", b"\r\n"), b"HD\r\n");
    assert_eq!(text.ask(b"mg m v f\r\n", b"hi\r\n"), b"VA 2 f0\r\nhi\r\n");

    // Larger than rustls's output buffer and several TLS records: replies that the socket
    // takes in parts, pipelined requests that arrive in parts.
    let big = vec![b'x'; 700 * 1024];
    let mut request = format!("set big 0 0 {}\r\n", big.len()).into_bytes();
    request.extend_from_slice(&big);
    request.extend_from_slice(b"\r\n");
    assert_eq!(text.ask(&request, b"\r\n"), b"STORED\r\n");
    let one = [
        format!("VALUE big 0 {}\r\n", big.len()).as_bytes(),
        &big,
        b"\r\nEND\r\n",
    ]
    .concat();
    text.send(&b"get big\r\n".repeat(4)).unwrap();
    let mut reply = Vec::new();
    while reply.len() < 4 * one.len() {
        reply.extend(text.read_until(b"END\r\n").unwrap());
    }
    assert_eq!(reply, one.repeat(4));

    let mut bin = TlsClient::connect(port, &pki.ca, None).unwrap();
    bin.send(&binary(0x01, &[0, 0, 0, 7, 0, 0, 0, 0], b"b", b"binary"))
        .unwrap();
    assert_eq!(binary_reply(&mut bin).0, 0, "binary set stored");
    bin.send(&binary(0x00, &[], b"b", b"")).unwrap();
    let (status, body) = binary_reply(&mut bin);
    assert_eq!(status, 0);
    assert_eq!(body, [&[0, 0, 0, 7][..], b"binary"].concat());

    assert_eq!(text.stat("ssl_new_sessions").as_deref(), Some("2"));
    assert_eq!(text.stat("ssl_handshake_errors").as_deref(), Some("0"));
    let settings = String::from_utf8(text.ask(b"stats settings\r\n", b"END\r\n")).unwrap();
    assert!(settings.contains("STAT ssl_enabled yes\r\n"), "{settings}");
}

#[test]
fn openssl_s_client_gets_answers() {
    let mut pki = TestPki::new("s_client");
    let (_server, port, _) = tls_server(&mut pki, &[]);
    let _wait = connect(port, TIMEOUT);
    let mut s_client = std::process::Command::new("openssl")
        .args(["s_client", "-quiet", "-verify_return_error", "-CAfile"])
        .arg(&pki.ca)
        .args(["-connect", &format!("127.0.0.1:{port}")])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("openssl runs");
    s_client
        .stdin
        .take()
        .unwrap()
        .write_all(b"set a 0 0 3\r\nabc\r\nget a\r\nmn\r\nquit\r\n")
        .unwrap();
    // `quit` makes the server close, and s_client ends with it.
    let out = wait_output(s_client);
    assert_eq!(out, b"STORED\r\nVALUE a 0 3\r\nabc\r\nEND\r\nMN\r\n");
}

/// Waits (bounded) for a child to finish and returns its stdout.
fn wait_output(mut child: std::process::Child) -> Vec<u8> {
    let deadline = Instant::now() + TIMEOUT;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the child did not finish");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut out = Vec::new();
    child.stdout.take().unwrap().read_to_end(&mut out).unwrap();
    out
}

#[test]
fn plaintext_client_on_the_tls_port_is_closed_and_the_server_carries_on() {
    let mut pki = TestPki::new("plaintext");
    let (_server, port, _) = tls_server(&mut pki, &[]);
    let mut plain = connect(port, TIMEOUT);
    plain.write_all(b"set k 0 0 1\r\nx\r\nget k\r\n").unwrap();
    let mut got = Vec::new();
    // Closed (perhaps after a TLS alert), never answered in plaintext.
    let _ = plain.read_to_end(&mut got);
    assert!(!got.windows(6).any(|w| w == b"STORED"), "{got:?}");

    let mut tls = TlsClient::connect(port, &pki.ca, None).unwrap();
    assert_eq!(tls.ask(b"get k\r\n", b"END\r\n"), b"END\r\n");
    assert_eq!(tls.stat("ssl_handshake_errors").as_deref(), Some("1"));
}

#[test]
fn client_certificates_are_required_when_asked() {
    let mut pki = TestPki::new("client_auth");
    let client = pki.client("client");
    let ca = pki.ca.to_str().unwrap().to_string();
    let (_server, port, _) = tls_server(&mut pki, &["--tls-ca", &ca, "--tls-verify-client"]);

    // TLS 1.3 finishes the client's side of the handshake before the server checks the
    // certificate, so the refusal shows as no answer: an alert or a closed connection.
    let refused = TlsClient::connect(port, &pki.ca, None).and_then(|mut c| {
        c.send(b"version\r\n")?;
        c.read_until(b"\r\n")
    });
    assert!(
        refused.is_err(),
        "answered without a certificate: {refused:?}"
    );

    let mut stranger_pki = TestPki::new("client_auth_stranger");
    let stranger = stranger_pki.client("stranger");
    let refused = TlsClient::connect(port, &pki.ca, Some(&stranger)).and_then(|mut c| {
        c.send(b"version\r\n")?;
        c.read_until(b"\r\n")
    });
    assert!(
        refused.is_err(),
        "answered a certificate of another CA: {refused:?}"
    );

    let mut known = TlsClient::connect(port, &pki.ca, Some(&client)).unwrap();
    assert!(known.ask(b"version\r\n", b"\r\n").starts_with(b"VERSION "));
    assert_eq!(known.stat("ssl_handshake_errors").as_deref(), Some("2"));
}

#[test]
fn sighup_reloads_the_certificate_and_keeps_the_old_one_when_the_new_is_broken() {
    let mut pki = TestPki::new("reload");
    let first = pki.server("first");
    let second = pki.server("second");
    // The server reads these two paths; the test replaces what is in them.
    let (cert, key) = (pki.dir.join("live.pem"), pki.dir.join("live.key"));
    std::fs::copy(&first.cert, &cert).unwrap();
    std::fs::copy(&first.key, &key).unwrap();
    let (server, port) = memfleet_server(&[
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
    ]);
    let pid = server.0.id() as libc::pid_t;
    let hangup = || {
        // SAFETY: kill(2) with a child's pid and a signal number has no memory effects.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGHUP) }, 0);
    };

    let mut old = TlsClient::connect(port, &pki.ca, None).unwrap();
    assert_eq!(old.peer_cert(), der_of(&first.cert));

    std::fs::copy(&second.cert, &cert).unwrap();
    std::fs::copy(&second.key, &key).unwrap();
    hangup();
    let wanted = der_of(&second.cert);
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let fresh = TlsClient::connect(port, &pki.ca, None).unwrap();
        if fresh.peer_cert() == wanted {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the new certificate never served"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // The connection made before the reload carries on with its session.
    assert_eq!(old.ask(b"set k 0 0 2\r\nok\r\n", b"\r\n"), b"STORED\r\n");
    assert_eq!(old.stat("tls_reloads").as_deref(), Some("1"));

    // A certificate that does not load is refused; the second one stays in service.
    std::fs::write(&cert, b"-----BEGIN CERTIFICATE-----\nbroken\n").unwrap();
    hangup();
    let deadline = Instant::now() + TIMEOUT;
    while old.stat("tls_reload_errors").as_deref() != Some("1") {
        assert!(
            Instant::now() < deadline,
            "the broken reload was never counted"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut after = TlsClient::connect(port, &pki.ca, None).unwrap();
    assert_eq!(after.peer_cert(), wanted);
    assert_eq!(
        after.ask(b"get k\r\n", b"END\r\n"),
        b"VALUE k 0 2\r\nok\r\nEND\r\n"
    );
}

#[test]
fn tls_settings_come_from_the_config_file_too() {
    let mut pki = TestPki::new("config_file");
    let issued = pki.server("server");
    let config = pki.dir.join("server.toml");
    std::fs::write(
        &config,
        format!(
            "tls_cert = {:?}\ntls_key = {:?}\n",
            issued.cert.to_str().unwrap(),
            issued.key.to_str().unwrap()
        ),
    )
    .unwrap();
    let (_server, port) = memfleet_server(&["--config", config.to_str().unwrap()]);
    let mut tls = TlsClient::connect(port, &pki.ca, None).unwrap();
    assert!(tls.ask(b"version\r\n", b"\r\n").starts_with(b"VERSION "));
}
