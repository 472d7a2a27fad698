//! `memfleet_protocol::reply::frame` against real servers: a pipeline of every kind of
//! request goes to Debian's memcached and to memfleet, and framing the bytes that come back,
//! reply by reply with the shape each request expects, must consume them exactly.

use crate::support;

use memfleet_protocol::reply::{frame, Frame, ReplyKind};
use memfleet_protocol::{parse, ParserConfig};
use std::io::{Read, Write};
use support::connect as connect_with;

const PIPELINE: &[u8] = b"set a 5 0 5\r\nhello\r\nget a b\r\ngets a\r\nget nope\r\n\
    append a 0 0 1\r\n!\r\nincr n 1\r\nset n 0 0 1\r\n7\r\nincr n 5\r\ndecr n 1\r\n\
    touch a 100\r\ndelete b\r\nmg a v f t c\r\nmg nope v\r\nms m 3 T60\r\nabc\r\nmd m\r\n\
    ma n v\r\nmn\r\nstats settings\r\nversion\r\nset big 0 0 3000\r\n";

fn requests() -> Vec<u8> {
    let mut r = PIPELINE.to_vec();
    r.extend(std::iter::repeat_n(b'z', 3000));
    r.extend_from_slice(b"\r\nget big a\r\nbogus command\r\nflush_all\r\nverbosity 1\r\n");
    r
}

fn check(port: u16, name: &str) {
    let mut s = connect_to(port);
    let reqs = requests();
    s.write_all(&reqs).unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(_) => break, // the read timeout: everything has arrived
        }
    }
    let cfg = ParserConfig::default();
    let (mut at_req, mut at_rep, mut replies) = (0, 0, 0);
    while at_req < reqs.len() {
        let (kind, used) = match parse(&reqs[at_req..], &cfg) {
            Ok((r, used)) => (ReplyKind::of(&r), used),
            // An unknown command: memcached answers one line.
            Err(memfleet_protocol::ParseError::Invalid(r)) => (ReplyKind::Line, r.skip),
            Err(e) => panic!("{e:?}"),
        };
        match frame(&out[at_rep..], kind, 1 << 20).unwrap() {
            Frame::Complete(n) => at_rep += n,
            Frame::Incomplete => panic!(
                "{name}: reply {replies} incomplete: {:?}",
                String::from_utf8_lossy(&out[at_rep..])
            ),
        }
        at_req += used;
        replies += 1;
    }
    assert_eq!(
        at_rep,
        out.len(),
        "{name}: bytes left after {replies} replies"
    );
    assert_eq!(replies, 24, "{name}");
}

#[test]
fn replies_of_memcached_and_memfleet_frame_exactly() {
    let (_memcached, mc) = support::memcached(&[]);
    let (_memfleet, mf) = support::memfleet_server(&["-t", "1", "-m", "16"]);
    check(mc, "memcached");
    check(mf, "memfleet");
}

fn connect_to(port: u16) -> std::net::TcpStream {
    connect_with(port, std::time::Duration::from_millis(500))
}
