//! UDP with memcached's framing, through a real socket: framing, multi-datagram replies,
//! what reads-only UDP refuses, every command (text and binary) with `--udp-writes`, and
//! that UDP is off unless asked for.

use crate::common;

use common::TestServer;
use std::net::UdpSocket;
use std::time::Duration;

fn udp_server() -> (TestServer, UdpSocket) {
    udp_server_with(false)
}

fn udp_server_with(writes: bool) -> (TestServer, UdpSocket) {
    let s = TestServer::with(|s| {
        s.listen.udp_port = Some(0);
        s.listen.udp_writes = writes;
    });
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
    let refused = b"CLIENT_ERROR UDP serves only get, gets and mg (writes need --udp-writes)\r\n";
    assert_eq!(ask(&sock, 1, b"set k 0 0 1\r\nx\r\n"), refused);
    assert_eq!(ask(&sock, 2, b"delete k\r\n"), refused);
    // noreply asks for no answer, but a refused write is not a silent success.
    assert_eq!(ask(&sock, 7, b"set k 0 0 1 noreply\r\nx\r\n"), refused);
    assert_eq!(ask(&sock, 8, b"incr n 1\r\n"), refused);
    assert_eq!(ask(&sock, 9, b"ms k 1\r\nx\r\n"), refused);
    assert_eq!(
        ask(&sock, 10, &binary(SET, b"k", &[0; 8], b"x")),
        b"CLIENT_ERROR UDP serves the binary protocol only with --udp-writes\r\n"
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

const GET: u8 = 0x00;
const SET: u8 = 0x01;
const DELETE: u8 = 0x04;
const INCREMENT: u8 = 0x05;
const SETQ: u8 = 0x11;

/// A binary-protocol request (opaque 0xfeedface, no CAS).
fn binary(opcode: u8, key: &[u8], extras: &[u8], value: &[u8]) -> Vec<u8> {
    let mut p = vec![0x80, opcode];
    p.extend_from_slice(&(key.len() as u16).to_be_bytes());
    p.extend_from_slice(&[extras.len() as u8, 0, 0, 0]);
    let body = extras.len() + key.len() + value.len();
    p.extend_from_slice(&(body as u32).to_be_bytes());
    p.extend_from_slice(&0xfeedface_u32.to_be_bytes());
    p.extend_from_slice(&[0; 8]);
    for part in [extras, key, value] {
        p.extend_from_slice(part);
    }
    p
}

/// A binary reply's opcode, status, opaque and value (after extras and key).
fn binary_reply(reply: &[u8]) -> (u8, u16, u32, Vec<u8>) {
    assert_eq!(reply[0], 0x81, "a binary reply: {reply:?}");
    let key = u16::from_be_bytes([reply[2], reply[3]]) as usize;
    let extras = reply[4] as usize;
    let body = u32::from_be_bytes(reply[8..12].try_into().unwrap()) as usize;
    assert_eq!(reply.len(), 24 + body, "one whole packet");
    let status = u16::from_be_bytes([reply[6], reply[7]]);
    let opaque = u32::from_be_bytes(reply[12..16].try_into().unwrap());
    (
        reply[1],
        status,
        opaque,
        reply[24 + extras + key..].to_vec(),
    )
}

#[test]
fn udp_writes_serve_every_text_command() {
    let (s, sock) = udp_server_with(true);
    let mut c = s.connect();
    assert_eq!(ask(&sock, 1, b"set k 3 0 2\r\nhi\r\n"), b"STORED\r\n");
    c.check("get k\r\n", "VALUE k 3 2\r\nhi\r\nEND\r\n");
    assert_eq!(ask(&sock, 2, b"get k\r\n"), b"VALUE k 3 2\r\nhi\r\nEND\r\n");
    assert_eq!(ask(&sock, 3, b"add k 0 0 1\r\nx\r\n"), b"NOT_STORED\r\n");
    assert_eq!(ask(&sock, 4, b"append k 0 0 1\r\n!\r\n"), b"STORED\r\n");
    assert_eq!(ask(&sock, 5, b"touch k 100\r\n"), b"TOUCHED\r\n");
    let ttl = ask(&sock, 6, b"mg k v t\r\n");
    assert!(
        ttl == b"VA 3 t100\r\nhi!\r\n" || ttl == b"VA 3 t99\r\nhi!\r\n",
        "{ttl:?}"
    );
    assert_eq!(ask(&sock, 7, b"delete k\r\n"), b"DELETED\r\n");
    c.check("get k\r\n", "END\r\n");
    assert_eq!(ask(&sock, 8, b"set n 0 0 2\r\n40\r\n"), b"STORED\r\n");
    assert_eq!(ask(&sock, 9, b"incr n 2\r\n"), b"42\r\n");
    assert_eq!(ask(&sock, 10, b"decr n 1\r\n"), b"41\r\n");
    assert_eq!(ask(&sock, 11, b"ms m 2 T0\r\nhi\r\n"), b"HD\r\n");
    assert_eq!(ask(&sock, 12, b"mg m v\r\n"), b"VA 2\r\nhi\r\n");
    assert_eq!(ask(&sock, 13, b"ma n D8\r\n"), b"HD\r\n");
    assert_eq!(ask(&sock, 14, b"md m\r\n"), b"HD\r\n");
    c.check("get m n\r\n", "VALUE n 0 2\r\n49\r\nEND\r\n");
    // Lease reads over UDP hand out tokens when writes are on, as over TCP.
    let lease = ask(&sock, 15, b"mg fresh v N30\r\n");
    assert!(lease.starts_with(b"VA 0 W"), "{lease:?}");
    c.check("mg fresh v\r\n", "VA 0 Z\r\n\r\n");
    assert_eq!(c.stat("udp_requests"), 15);
}

#[test]
fn udp_writes_take_noreply_quiet_and_several_commands_per_datagram() {
    let (s, sock) = udp_server_with(true);
    let mut c = s.connect();
    // libmemcached's UDP mode: writes with noreply, nothing comes back, and they happen.
    sock.send(&frame(1, 0, 1, b"set a 0 0 1 noreply\r\n1\r\n"))
        .unwrap();
    sock.send(&frame(2, 0, 1, b"set b 0 0 1 noreply\r\n2\r\n"))
        .unwrap();
    sock.send(&frame(3, 0, 1, b"incr b 5 noreply\r\n")).unwrap();
    sock.send(&frame(4, 0, 1, b"delete a noreply\r\n")).unwrap();
    sock.send(&frame(5, 0, 1, b"ms q 1 q\r\nx\r\n")).unwrap();
    // The first reply datagram is the next request's: the writes above said nothing.
    assert_eq!(
        ask(&sock, 6, b"get a b q\r\n"),
        b"VALUE b 0 1\r\n7\r\nVALUE q 0 1\r\nx\r\nEND\r\n"
    );
    c.check("get a b\r\n", "VALUE b 0 1\r\n7\r\nEND\r\n");
    // Several commands in one datagram: their replies, in order, form one message.
    assert_eq!(
        ask(
            &sock,
            7,
            b"set c 0 0 1\r\n3\r\nget c\r\nmg nope v q\r\nmn\r\n"
        ),
        b"STORED\r\nVALUE c 0 1\r\n3\r\nEND\r\nMN\r\n"
    );
    // A command cut short runs what came before it and says so.
    assert_eq!(
        ask(&sock, 8, b"delete c\r\nset d 0 0 10\r\nabc"),
        b"DELETED\r\nCLIENT_ERROR a UDP request must end with a complete command\r\n"
    );
    c.check("get c d\r\n", "END\r\n");
    assert_eq!(ask(&sock, 9, b"bogus\r\n"), b"ERROR\r\n");
    // A reply over the UDP limit is refused whatever asked for it; the write still ran.
    let mut set = b"set big 0 0 70000\r\n".to_vec();
    set.extend(std::iter::repeat_n(b'x', 70_000));
    set.extend_from_slice(b"\r\n");
    c.check(set, "STORED\r\n");
    assert_eq!(
        ask(&sock, 10, b"set e 0 0 1\r\ne\r\nget big\r\n"),
        b"SERVER_ERROR reply too large for UDP; use TCP\r\n"
    );
    c.check("get e\r\n", "VALUE e 0 1\r\ne\r\nEND\r\n");
}

#[test]
fn udp_writes_serve_the_binary_protocol() {
    let (s, sock) = udp_server_with(true);
    let mut c = s.connect();
    let flags_exptime = [0, 0, 0, 9, 0, 0, 0, 0];
    let stored = ask(&sock, 1, &binary(SET, b"k", &flags_exptime, b"value"));
    assert_eq!(binary_reply(&stored), (SET, 0, 0xfeedface, vec![]));
    c.check("get k\r\n", "VALUE k 9 5\r\nvalue\r\nEND\r\n");
    let got = ask(&sock, 2, &binary(GET, b"k", &[], b""));
    assert_eq!(binary_reply(&got), (GET, 0, 0xfeedface, b"value".to_vec()));
    let missing = ask(&sock, 3, &binary(GET, b"nope", &[], b""));
    assert_eq!(binary_reply(&missing).1, 1, "key not found");
    let mut counter = 40u64.to_be_bytes().to_vec(); // delta, then initial, then exptime
    counter.extend_from_slice(&2u64.to_be_bytes());
    counter.extend_from_slice(&[0; 4]);
    let created = ask(&sock, 4, &binary(INCREMENT, b"n", &counter, b""));
    assert_eq!(binary_reply(&created).3, 2u64.to_be_bytes());
    let added = ask(&sock, 5, &binary(INCREMENT, b"n", &counter, b""));
    assert_eq!(binary_reply(&added).3, 42u64.to_be_bytes());
    let deleted = ask(&sock, 6, &binary(DELETE, b"k", &[], b""));
    assert_eq!(binary_reply(&deleted).1, 0);
    c.check("get k n\r\n", "VALUE n 0 2\r\n42\r\nEND\r\n");
    // A quiet set says nothing; two requests in one datagram, one message back.
    let mut two = binary(SETQ, b"q", &flags_exptime, b"quiet");
    two.extend_from_slice(&binary(GET, b"q", &[], b""));
    let got = ask(&sock, 7, &two);
    assert_eq!(binary_reply(&got), (GET, 0, 0xfeedface, b"quiet".to_vec()));
}
