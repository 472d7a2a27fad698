//! The binary protocol through a real socket (the differential test compares the same
//! exchanges with memcached byte for byte; these check the outcomes without it).

use crate::common;

use common::{Client, TestServer};
use memfleet_protocol::binary::{BinCommand, BinRequest, Header, SetOp, Status, NO_AUTO_CREATE};
use memfleet_protocol::ArithOp;

fn send(c: &mut Client, commands: &[BinCommand<'_>]) {
    let mut out = Vec::new();
    for (i, command) in commands.iter().enumerate() {
        BinRequest {
            command: *command,
            opaque: i as u32 + 1,
            cas: 0,
        }
        .encode(&mut out);
    }
    c.send(out);
}

/// Reads one response packet: header and body.
fn packet(c: &mut Client) -> (Header, Vec<u8>) {
    let header = Header::read(&c.read_n(24)).expect("a header");
    assert_eq!(header.magic, 0x81);
    let body = c.read_n(header.body_len as usize);
    (header, body)
}

#[test]
fn set_get_getk_and_quiet_misses() {
    let s = TestServer::start();
    let mut c = s.connect();
    send(
        &mut c,
        &[
            BinCommand::Store {
                op: SetOp::Set,
                key: b"k",
                flags: 0xdead_beef,
                exptime: 0,
                value: b"hello",
                quiet: false,
            },
            BinCommand::Get {
                key: b"k",
                quiet: false,
                with_key: false,
            },
            BinCommand::Get {
                key: b"k",
                quiet: false,
                with_key: true,
            },
            BinCommand::Get {
                key: b"missing",
                quiet: true,
                with_key: false,
            },
            BinCommand::Get {
                key: b"missing",
                quiet: false,
                with_key: false,
            },
            BinCommand::Noop,
        ],
    );
    let (h, body) = packet(&mut c);
    assert_eq!((h.opcode, h.vbucket_or_status, h.opaque), (0x01, 0, 1));
    assert!(body.is_empty() && h.cas != 0);
    let stored_cas = h.cas;
    let (h, body) = packet(&mut c);
    assert_eq!(
        (h.opcode, h.extras_len, h.key_len, h.cas),
        (0x00, 4, 0, stored_cas)
    );
    assert_eq!(body, b"\xde\xad\xbe\xefhello");
    let (h, body) = packet(&mut c);
    assert_eq!((h.opcode, h.extras_len, h.key_len), (0x0c, 4, 1));
    assert_eq!(body, b"\xde\xad\xbe\xefkhello");
    // The quiet miss (opaque 4) sends nothing: next comes the loud miss.
    let (h, body) = packet(&mut c);
    assert_eq!(
        (h.opaque, h.vbucket_or_status),
        (5, Status::KeyNotFound.code())
    );
    assert_eq!(body, b"Not found");
    let (h, _) = packet(&mut c);
    assert_eq!((h.opcode, h.opaque), (0x0a, 6));
}

#[test]
fn counters_create_with_initial_and_refuse_text() {
    let s = TestServer::start();
    let mut c = s.connect();
    let incr = |key, delta, exptime| BinCommand::Arith {
        op: ArithOp::Incr,
        key,
        delta,
        initial: 10,
        exptime,
        quiet: false,
    };
    send(
        &mut c,
        &[
            incr(b"n", 5, 0),
            incr(b"n", 5, 0),
            incr(b"absent", 1, NO_AUTO_CREATE),
            BinCommand::Store {
                op: SetOp::Set,
                key: b"t",
                flags: 0,
                exptime: 0,
                value: b"abc",
                quiet: true,
            },
            incr(b"t", 1, 0),
        ],
    );
    let (_, body) = packet(&mut c);
    assert_eq!(body, 10u64.to_be_bytes());
    let (_, body) = packet(&mut c);
    assert_eq!(body, 15u64.to_be_bytes());
    let (h, _) = packet(&mut c);
    assert_eq!(h.vbucket_or_status, Status::KeyNotFound.code());
    let (h, body) = packet(&mut c);
    assert_eq!(
        (h.opaque, h.vbucket_or_status),
        (5, Status::NonNumeric.code())
    );
    assert_eq!(body, b"Non-numeric server-side value for incr or decr");
    // The text protocol sees the same item, on another connection.
    let mut t = s.connect();
    t.check("get n\r\n", "VALUE n 0 2\r\n15\r\nEND\r\n");
}

#[test]
fn cas_add_delete_stat_and_quit() {
    let s = TestServer::start();
    let mut c = s.connect();
    let set = |op, value: &'static [u8]| BinCommand::Store {
        op,
        key: b"k",
        flags: 0,
        exptime: 0,
        value,
        quiet: false,
    };
    send(&mut c, &[set(SetOp::Set, b"1"), set(SetOp::Add, b"2")]);
    let (h, _) = packet(&mut c);
    let cas = h.cas;
    let (h, _) = packet(&mut c);
    assert_eq!(h.vbucket_or_status, Status::KeyExists.code());
    // A stale CAS is refused; the current one works.
    let mut out = Vec::new();
    for (i, token) in [cas + 1, cas].into_iter().enumerate() {
        BinRequest {
            command: set(SetOp::Set, b"3"),
            opaque: 10 + i as u32,
            cas: token,
        }
        .encode(&mut out);
    }
    c.send(out);
    assert_eq!(packet(&mut c).0.vbucket_or_status, Status::KeyExists.code());
    assert_eq!(packet(&mut c).0.vbucket_or_status, 0);
    send(
        &mut c,
        &[
            BinCommand::Delete {
                key: b"k",
                quiet: false,
            },
            BinCommand::Delete {
                key: b"k",
                quiet: false,
            },
            BinCommand::Stat { key: b"" },
        ],
    );
    assert_eq!(packet(&mut c).0.vbucket_or_status, 0);
    assert_eq!(
        packet(&mut c).0.vbucket_or_status,
        Status::KeyNotFound.code()
    );
    let mut names = Vec::new();
    loop {
        let (h, body) = packet(&mut c);
        if h.key_len == 0 {
            break;
        }
        names.push(String::from_utf8(body[..h.key_len as usize].to_vec()).unwrap());
    }
    assert!(names.iter().any(|n| n == "cmd_get") && names.iter().any(|n| n == "curr_items"));
    send(&mut c, &[BinCommand::Quit { quiet: false }]);
    assert_eq!(packet(&mut c).0.opcode, 0x07);
    assert!(c.is_closed());
}
