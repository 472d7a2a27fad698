//! Unit tests of `reply.rs`, kept beside it so that the product file
//! holds product code only.

use super::*;

fn w() -> Workload {
    Workload::new(1000, 0.9, 10, None).unwrap()
}

fn hit(n: u64, w: &Workload) -> Vec<u8> {
    let mut v = format!("VALUE key:{n} 0 10\r\n").into_bytes();
    v.extend_from_slice(w.value(n));
    v.extend_from_slice(b"\r\nEND\r\n");
    v
}
#[test]
fn hits_misses_and_stores() {
    let w = w();
    let h = hit(7, &w);
    assert_eq!(
        parse_reply(&h, WorkloadOp::Get(7), &w),
        Parsed::CheckedReply {
            consumed: h.len(),
            reply: CheckedReply::Hit
        }
    );
    assert_eq!(
        parse_reply(b"END\r\nEND\r\n", WorkloadOp::Get(7), &w),
        Parsed::CheckedReply {
            consumed: 5,
            reply: CheckedReply::Miss
        }
    );
    assert_eq!(
        parse_reply(b"STORED\r\n", WorkloadOp::Set(7), &w),
        Parsed::CheckedReply {
            consumed: 8,
            reply: CheckedReply::Stored
        }
    );
    // A cas field (as `gets` would add) does not matter.
    let mut g = b"VALUE key:7 0 10 99\r\n".to_vec();
    g.extend_from_slice(w.value(7));
    g.extend_from_slice(b"\r\nEND\r\n");
    assert!(matches!(
        parse_reply(&g, WorkloadOp::Get(7), &w),
        Parsed::CheckedReply {
            reply: CheckedReply::Hit,
            ..
        }
    ));
}

#[test]
fn every_prefix_of_a_reply_is_incomplete() {
    let w = w();
    let h = hit(123, &w);
    for cut in 0..h.len() {
        assert_eq!(
            parse_reply(&h[..cut], WorkloadOp::Get(123), &w),
            Parsed::Incomplete,
            "{cut}"
        );
    }
    for cut in 0..8 {
        assert_eq!(
            parse_reply(&b"STORED\r\n"[..cut], WorkloadOp::Set(1), &w),
            Parsed::Incomplete
        );
    }
}

fn wrong_kind(p: Parsed) -> &'static str {
    match p {
        Parsed::CheckedReply {
            reply: CheckedReply::Wrong(kind, _),
            ..
        } => kind,
        other => panic!("not a wrong reply: {other:?}"),
    }
}

#[test]
fn wrong_replies_are_errors_that_keep_the_stream() {
    let w = w();
    let other_key = hit(8, &w);
    let mut wrong = hit(7, &w);
    wrong.extend_from_slice(b"ignored");
    wrong[0..18].copy_from_slice(b"VALUE key:8 0 10\r\n");
    assert_eq!(
        wrong_kind(parse_reply(&other_key, WorkloadOp::Get(7), &w)),
        "get: reply for another key"
    );
    // Key 8's header with key 7's data: caught as another key first.
    assert_eq!(
        wrong_kind(parse_reply(&wrong, WorkloadOp::Get(7), &w)),
        "get: reply for another key"
    );
    let mut bad_value = hit(7, &w);
    bad_value[20] ^= 1;
    assert_eq!(
        wrong_kind(parse_reply(&bad_value, WorkloadOp::Get(7), &w)),
        "get: wrong value"
    );
    let mut flags = b"VALUE key:7 5 10\r\n".to_vec();
    flags.extend_from_slice(w.value(7));
    flags.extend_from_slice(b"\r\nEND\r\n");
    assert_eq!(
        wrong_kind(parse_reply(&flags, WorkloadOp::Get(7), &w)),
        "get: wrong flags"
    );
    let short = b"VALUE key:7 0 3\r\nabc\r\nEND\r\n";
    assert_eq!(
        wrong_kind(parse_reply(short, WorkloadOp::Get(7), &w)),
        "get: wrong value"
    );
    let p = parse_reply(b"SERVER_ERROR out of memory\r\nX", WorkloadOp::Set(7), &w);
    assert_eq!(
        p,
        Parsed::CheckedReply {
            consumed: 28,
            reply: CheckedReply::Wrong(
                "set: reply is not STORED",
                "set key:7 -> SERVER_ERROR out of memory".into()
            )
        }
    );
    assert_eq!(
        wrong_kind(parse_reply(b"ERROR\r\n", WorkloadOp::Get(7), &w)),
        "get: unexpected reply line"
    );
}

#[test]
fn garbage_desyncs() {
    let w = w();
    for bad in [
        b"END\n".as_slice(),
        b"VALUE key:7 0\r\n",
        b"VALUE key:7 0 x\r\n",
        b"VALUE key:7 0 99999999999\r\n",
        b"VALUE key:7 0 10\r\nbcdefghijkXXEND\r\n",
    ] {
        assert!(
            matches!(parse_reply(bad, WorkloadOp::Get(7), &w), Parsed::Desync(_)),
            "{}",
            show(bad)
        );
    }
    let long = vec![b'x'; MAX_LINE + 1];
    assert!(matches!(
        parse_reply(&long, WorkloadOp::Set(1), &w),
        Parsed::Desync(_)
    ));
}

#[test]
fn deletes_and_meta_replies() {
    use crate::workload::{Mix, WorkloadSpec};
    use memfleet_sim::workload::TtlMix;
    let text = w();
    for (reply, want) in [
        (b"DELETED\r\n".as_slice(), CheckedReply::Deleted),
        (b"NOT_FOUND\r\n", CheckedReply::NotFound),
    ] {
        assert_eq!(
            parse_reply(reply, WorkloadOp::Delete(3), &text),
            Parsed::CheckedReply {
                consumed: reply.len(),
                reply: want
            }
        );
    }
    assert_eq!(
        wrong_kind(parse_reply(b"STORED\r\n", WorkloadOp::Delete(3), &text)),
        "delete: reply is not DELETED or NOT_FOUND"
    );
    let meta = Workload::from_spec(WorkloadSpec {
        keys: 1000,
        mix: Mix::new(1.0, 0.0, 0.0).unwrap(),
        zipf: None,
        key_sizes: Some(memfleet_sim::sizes::SizeDistribution::Fixed(12)),
        value_sizes: memfleet_sim::sizes::SizeDistribution::Fixed(10),
        ttl: TtlMix::single(0),
        protocol: Protocol::Meta,
    })
    .unwrap();
    let mut key = Vec::new();
    meta.push_key_bytes(7, &mut key);
    let key = String::from_utf8(key).unwrap();
    assert_eq!(key.len(), 12);
    let hit = |header: &str| {
        let mut v = format!("VA 10 {header}\r\n").into_bytes();
        v.extend_from_slice(meta.value(7));
        v.extend_from_slice(b"\r\n");
        v
    };
    let good = hit(&format!("k{key} f0"));
    assert_eq!(
        parse_reply(&good, WorkloadOp::Get(7), &meta),
        Parsed::CheckedReply {
            consumed: good.len(),
            reply: CheckedReply::Hit
        }
    );
    for cut in 0..good.len() {
        assert_eq!(
            parse_reply(&good[..cut], WorkloadOp::Get(7), &meta),
            Parsed::Incomplete
        );
    }
    // Flags in another order are fine.
    let reordered = hit(&format!("f0 k{key}"));
    assert!(matches!(
        parse_reply(&reordered, WorkloadOp::Get(7), &meta),
        Parsed::CheckedReply {
            reply: CheckedReply::Hit,
            ..
        }
    ));
    assert_eq!(
        wrong_kind(parse_reply(&hit("kkey:7 f0"), WorkloadOp::Get(7), &meta)),
        "mg: reply for another key"
    );
    assert_eq!(
        wrong_kind(parse_reply(
            &hit(&format!("k{key} f3")),
            WorkloadOp::Get(7),
            &meta
        )),
        "mg: wrong flags"
    );
    let mut bad = good.clone();
    let at = bad.len() - 4;
    bad[at] ^= 1;
    assert_eq!(
        wrong_kind(parse_reply(&bad, WorkloadOp::Get(7), &meta)),
        "mg: wrong value"
    );
    assert_eq!(
        parse_reply(b"EN\r\n", WorkloadOp::Get(7), &meta),
        Parsed::CheckedReply {
            consumed: 4,
            reply: CheckedReply::Miss
        }
    );
    assert_eq!(
        parse_reply(b"EN kkey:7\r\n", WorkloadOp::Get(7), &meta),
        Parsed::CheckedReply {
            consumed: 11,
            reply: CheckedReply::Miss
        }
    );
    assert_eq!(
        parse_reply(b"HD\r\n", WorkloadOp::Set(7), &meta),
        Parsed::CheckedReply {
            consumed: 4,
            reply: CheckedReply::Stored
        }
    );
    assert_eq!(
        parse_reply(b"NF\r\n", WorkloadOp::Delete(7), &meta),
        Parsed::CheckedReply {
            consumed: 4,
            reply: CheckedReply::NotFound
        }
    );
    assert_eq!(
        wrong_kind(parse_reply(b"NS\r\n", WorkloadOp::Set(7), &meta)),
        "ms: reply is not HD"
    );
    let mut unframed = good.clone();
    let end = unframed.len() - 2;
    unframed[end] = b'X';
    assert!(matches!(
        parse_reply(&unframed, WorkloadOp::Get(7), &meta),
        Parsed::Desync(_)
    ));
}
