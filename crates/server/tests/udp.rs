//! Reads over UDP with memcached's framing, through a real socket: framing, multi-datagram
//! replies, what UDP refuses, and that it is off unless asked for.

mod common;

use common::TestServer;
use std::net::UdpSocket;
use std::time::Duration;

fn udp_server() -> (TestServer, UdpSocket) {
    let s = TestServer::with(|s| s.udp_port = Some(0));
    let addr = s.server().udp_addr().expect("UDP is on");
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    sock.connect(addr).unwrap();
    (s, sock)
}

fn frame(id: u16, seq: u16, count: u16, payload: &[u8]) -> Vec<u8> {
    let mut d = Vec::new();
    for w in [id, seq, count, 0] {
        d.extend_from_slice(&w.to_be_bytes());
    }
    d.extend_from_slice(payload);
    d
}

/// Sends one request and reassembles the reply; checks every datagram's header.
fn ask(sock: &UdpSocket, id: u16, payload: &[u8]) -> Vec<u8> {
    sock.send(&frame(id, 0, 1, payload)).unwrap();
    let mut parts: Vec<Option<Vec<u8>>> = Vec::new();
    let mut buf = [0u8; 2048];
    loop {
        let n = sock.recv(&mut buf).expect("a reply datagram");
        assert!((8..=1400).contains(&n), "datagram of {n} bytes");
        let word = |i: usize| u16::from_be_bytes([buf[i], buf[i + 1]]);
        assert_eq!(word(0), id, "request id echoed");
        assert_eq!(word(6), 0, "reserved");
        let (seq, count) = (word(2) as usize, word(4) as usize);
        if parts.is_empty() {
            parts = vec![None; count];
        }
        assert_eq!(parts.len(), count, "same count in every datagram");
        parts[seq] = Some(buf[8..n].to_vec());
        if parts.iter().all(Option::is_some) {
            return parts.into_iter().flatten().flatten().collect();
        }
    }
}

#[test]
fn gets_and_meta_gets_over_udp() {
    let (s, sock) = udp_server();
    let mut c = s.connect();
    c.check("set k 5 0 5\r\nhello\r\n", "STORED\r\n");
    assert_eq!(
        ask(&sock, 7, b"get k\r\n"),
        b"VALUE k 5 5\r\nhello\r\nEND\r\n"
    );
    assert_eq!(ask(&sock, 8, b"get nope\r\n"), b"END\r\n");
    assert_eq!(ask(&sock, 9, b"mg k v f\r\n"), b"VA 5 f5\r\nhello\r\n");
    let gets = ask(&sock, 10, b"gets k other\r\n");
    assert!(gets.starts_with(b"VALUE k 5 5 ") && gets.ends_with(b"\r\nhello\r\nEND\r\n"));
    assert_eq!(c.stat("udp_requests"), 4);
}

#[test]
fn large_replies_span_datagrams_and_oversized_ones_are_refused() {
    let (s, sock) = udp_server();
    let mut c = s.connect();
    let value: Vec<u8> = (0..5000u32).map(|i| b'a' + (i % 26) as u8).collect();
    let mut set = b"set big 0 0 5000\r\n".to_vec();
    set.extend_from_slice(&value);
    set.extend_from_slice(b"\r\n");
    c.check(set, "STORED\r\n");
    let mut want = b"VALUE big 0 5000\r\n".to_vec();
    want.extend_from_slice(&value);
    want.extend_from_slice(b"\r\nEND\r\n");
    assert_eq!(ask(&sock, 1, b"get big\r\n"), want);
    // 100 KB is beyond what memfleet sends over UDP (amplification): an error instead.
    let mut set = b"set huge 0 0 100000\r\n".to_vec();
    set.extend(std::iter::repeat_n(b'x', 100_000));
    set.extend_from_slice(b"\r\n");
    c.check(set, "STORED\r\n");
    assert_eq!(
        ask(&sock, 2, b"get huge\r\n"),
        b"SERVER_ERROR reply too large for UDP; use TCP\r\n"
    );
    assert_eq!(c.stat("udp_too_large"), 1);
}

#[test]
fn udp_serves_reads_only_and_whole_requests_only() {
    let (s, sock) = udp_server();
    assert_eq!(
        ask(&sock, 1, b"set k 0 0 1\r\nx\r\n"),
        b"CLIENT_ERROR UDP serves only get, gets and mg\r\n"
    );
    assert_eq!(
        ask(&sock, 2, b"delete k\r\n"),
        b"CLIENT_ERROR UDP serves only get, gets and mg\r\n"
    );
    let one_request = b"CLIENT_ERROR a UDP request must be one complete command\r\n";
    assert_eq!(ask(&sock, 3, b"get k"), one_request);
    assert_eq!(ask(&sock, 4, b"get a\r\nget b\r\n"), one_request);
    // The first of a two-datagram request: memcached's words.
    sock.send(&frame(5, 0, 2, b"get k\r\n")).unwrap();
    let mut buf = [0u8; 2048];
    let n = sock.recv(&mut buf).unwrap();
    assert_eq!(
        &buf[8..n],
        b"SERVER_ERROR multi-packet request not supported\r\n"
    );
    // The set was refused: TCP still sees nothing.
    let mut c = s.connect();
    c.check("get k\r\n", "END\r\n");
    // A datagram too short for a header is dropped; the socket still works afterwards.
    sock.send(b"abc").unwrap();
    assert_eq!(ask(&sock, 6, b"get k\r\n"), b"END\r\n");
}

#[test]
fn nothing_sent_over_udp_changes_the_cache() {
    let (s, sock) = udp_server();
    let mut c = s.connect();
    c.check("set k 0 0 1\r\nv\r\nmd k I\r\n", "STORED\r\nHD\r\n");
    let refused = b"CLIENT_ERROR UDP mg takes no N, R, T or E flag\r\n";
    assert_eq!(ask(&sock, 1, b"mg k v T-1\r\n"), refused);
    assert_eq!(ask(&sock, 2, b"mg new v N30\r\n"), refused);
    assert_eq!(ask(&sock, 3, b"mg k v R30\r\n"), refused);
    // A plain mg of a stale value shows it (X) but does not take the refresh token...
    assert_eq!(ask(&sock, 4, b"mg k v\r\n"), b"VA 1 X\r\nv\r\n");
    // ...which the first TCP reader still wins.
    c.check("mg k v\r\n", "VA 1 X W\r\nv\r\n");
    c.check("mg new v\r\n", "EN\r\n");
    // A quiet miss says nothing at all: the next request's answer is the next datagram.
    sock.send(&frame(5, 0, 1, b"mg nope v q\r\n")).unwrap();
    assert_eq!(ask(&sock, 6, b"get nope\r\n"), b"END\r\n");
}

#[test]
fn udp_is_off_by_default() {
    let s = TestServer::start();
    assert_eq!(s.server().udp_addr(), None);
    // Nothing listens on UDP at the server's port: binding it ourselves succeeds.
    let addr = s.addr;
    UdpSocket::bind(addr).expect("the UDP port is free");
    let mut c = s.connect();
    assert_eq!(
        c.stats("settings")
            .into_iter()
            .find(|(k, _)| k == "udpport")
            .map(|(_, v)| v),
        Some("0".to_string())
    );
}
