use super::*;
use crate::binary::{parse as parse_binary, response as write, ReplyTo};
use crate::binary::{Opcode, Status};
use crate::{parse, ParserConfig};

/// The binary requests `text` is carried as.
fn carried(text: &[u8]) -> (Vec<BinRequest<'static>>, Awaited) {
    let (request, _) = parse(text, &ParserConfig::default()).unwrap();
    let mut out = Vec::new();
    let awaited = carry(&request, &mut out);
    let out: &'static [u8] = Box::leak(out.into_boxed_slice());
    let mut requests = Vec::new();
    let mut at = 0;
    while at < out.len() {
        let (r, used) = parse_binary(&out[at..], &ParserConfig::default()).unwrap();
        requests.push(r);
        at += used;
    }
    (requests, awaited)
}

/// Feeds `packets` (response bytes) to `awaited`: the reply once complete, and how many
/// packets it took.
fn replied(awaited: &mut Awaited, packets: &[u8]) -> (Vec<u8>, usize) {
    let mut at = 0;
    let mut n = 0;
    while let Some((r, used)) = response(&packets[at..], 1 << 20).unwrap() {
        at += used;
        n += 1;
        if let Some(reply) = awaited.take(&r) {
            return (reply, n);
        }
    }
    panic!("incomplete after {n} packets");
}

fn to(opcode: Opcode) -> ReplyTo {
    ReplyTo {
        opcode: opcode.as_u8(),
        opaque: 0,
    }
}

#[test]
fn a_multi_get_is_quiet_gets_and_a_noop() {
    let (requests, mut awaited) = carried(b"gets a b c\r\n");
    assert_eq!(requests.len(), 4);
    assert!(matches!(
        requests[1].command,
        BinCommand::Get {
            key: b"b",
            quiet: true,
            with_key: true
        }
    ));
    assert_eq!(requests[3].command, BinCommand::Noop);
    let mut packets = Vec::new();
    write::value(&mut packets, to(Opcode::GetKQ), 5, Some(b"a"), b"one", 11);
    write::value(&mut packets, to(Opcode::GetKQ), 0, Some(b"c"), b"three", 12);
    write::success(&mut packets, to(Opcode::Noop), 0);
    assert_eq!(
        replied(&mut awaited, &packets),
        (
            b"VALUE a 5 3 11\r\none\r\nVALUE c 0 5 12\r\nthree\r\nEND\r\n".to_vec(),
            3
        )
    );
}

#[test]
fn storage_replies_are_memcached_s_text_ones() {
    let cases: [(&[u8], Status, &[u8]); 6] = [
        (
            b"add k 0 0 1\r\nx\r\n",
            Status::KeyExists,
            b"NOT_STORED\r\n",
        ),
        (
            b"replace k 0 0 1\r\nx\r\n",
            Status::KeyNotFound,
            b"NOT_STORED\r\n",
        ),
        (b"cas k 0 0 1 9\r\nx\r\n", Status::KeyExists, b"EXISTS\r\n"),
        (
            b"cas k 0 0 1 9\r\nx\r\n",
            Status::KeyNotFound,
            b"NOT_FOUND\r\n",
        ),
        (
            b"append k 0 0 1\r\nx\r\n",
            Status::NotStored,
            b"NOT_STORED\r\n",
        ),
        (
            b"set k 0 0 1\r\nx\r\n",
            Status::TooLarge,
            b"SERVER_ERROR object too large for cache\r\n",
        ),
    ];
    for (text, status, want) in cases {
        let (requests, mut awaited) = carried(text);
        assert_eq!(requests.len(), 1);
        let mut packets = Vec::new();
        write::error(&mut packets, to(Opcode::Set), status);
        assert_eq!(replied(&mut awaited, &packets).0, want, "{text:?}");
    }
    let (requests, _) = carried(b"cas k 3 -1 1 9\r\nx\r\n");
    assert_eq!(requests[0].cas, 9);
    assert!(matches!(
        requests[0].command,
        BinCommand::Store {
            op: SetOp::Set,
            flags: 3,
            exptime: 2_592_001,
            ..
        }
    ));
}

#[test]
fn meta_requests_keep_their_return_flags_in_order() {
    let (requests, mut awaited) = carried(b"mg k s v O7 c f k T30\r\n");
    assert!(matches!(
        requests[0].command,
        BinCommand::GetAndTouch {
            key: b"k",
            exptime: 30,
            ..
        }
    ));
    let mut packets = Vec::new();
    write::value(&mut packets, to(Opcode::GatK), 4, Some(b"k"), b"hey", 21);
    assert_eq!(
        replied(&mut awaited, &packets).0,
        b"VA 3 s3 O7 c21 f4 kk\r\nhey\r\n"
    );
    let (_, mut awaited) = carried(b"mg k v O7 k\r\n");
    let mut packets = Vec::new();
    write::miss(&mut packets, to(Opcode::GetK), Some(b"k"));
    assert_eq!(replied(&mut awaited, &packets).0, b"EN O7 kk\r\n");
    let (requests, mut awaited) = carried(b"ma n N0 J5 D2 v\r\n");
    assert!(matches!(
        requests[0].command,
        BinCommand::Arith {
            delta: 2,
            initial: 5,
            exptime: 0,
            ..
        }
    ));
    let mut packets = Vec::new();
    write::counter(&mut packets, to(Opcode::Increment), 7, 3);
    assert_eq!(replied(&mut awaited, &packets).0, b"VA 1\r\n7\r\n");
    let (_, mut awaited) = carried(b"ms k 1 C5 MS\r\nx\r\n");
    let mut packets = Vec::new();
    write::error(&mut packets, to(Opcode::Set), Status::KeyExists);
    assert_eq!(replied(&mut awaited, &packets).0, b"EX\r\n");
}

#[test]
fn what_binary_cannot_say_is_refused_in_order() {
    for (text, what) in [
        (&b"mg k v N30\r\n"[..], "mg flag N"),
        (b"md k I T30\r\n", "md flag I"),
        (b"delete k 10\r\n", "a delete hold-off"),
        (b"lease-get k\r\n", "lease-get"),
    ] {
        let (requests, mut awaited) = carried(text);
        assert_eq!(
            requests,
            [BinRequest {
                command: BinCommand::Noop,
                opaque: 0,
                cas: 0
            }]
        );
        let mut packets = Vec::new();
        write::success(&mut packets, to(Opcode::Noop), 0);
        assert_eq!(
            String::from_utf8(replied(&mut awaited, &packets).0).unwrap(),
            format!("CLIENT_ERROR not carried over the binary protocol: {what}\r\n")
        );
    }
}

#[test]
fn stats_end_at_the_empty_stat() {
    let (requests, mut awaited) = carried(b"stats settings\r\n");
    assert_eq!(requests[0].command, BinCommand::Stat { key: b"settings" });
    let mut packets = Vec::new();
    write::stat(&mut packets, to(Opcode::Stat), b"maxbytes", b"64");
    write::stat_end(&mut packets, to(Opcode::Stat));
    assert_eq!(
        replied(&mut awaited, &packets),
        (b"STAT maxbytes 64\r\nEND\r\n".to_vec(), 2)
    );
}
