//! Unit tests of `decode.rs`, kept beside it so that the product file
//! holds product code only.

use super::*;

#[test]
fn retrievals_decode_to_their_values() {
    let r = decode(
        b"VALUE a 5 3 77\r\nabc\r\nLVALUE b 9 0 0\r\n\r\nEND\r\n",
        ReplyKind::Retrieval,
    )
    .unwrap();
    let ServerReply::Values(v) = r else {
        panic!("{r:?}")
    };
    assert_eq!(
        v,
        vec![
            ValueBlock {
                key: b"a",
                flags: 5,
                cas: Some(77),
                lease: None,
                data: b"abc"
            },
            ValueBlock {
                key: b"b",
                flags: 0,
                cas: None,
                lease: Some(9),
                data: b""
            }
        ]
    );
    assert_eq!(
        decode(b"END\r\n", ReplyKind::Retrieval),
        Ok(ServerReply::Values(Vec::new()))
    );
    assert_eq!(
        decode(
            b"VALUE a 0 1\r\nx\r\nSERVER_ERROR out of memory\r\n",
            ReplyKind::Retrieval
        ),
        Ok(ServerReply::Error(ErrorClass::Server, b"out of memory"))
    );
}

#[test]
fn meta_replies_decode_with_flags_and_value() {
    let r = decode(b"VA 2 f5 t-1 X W\r\nhi\r\n", ReplyKind::Meta).unwrap();
    let ServerReply::Meta(m) = r else {
        panic!("{r:?}")
    };
    assert_eq!((m.code, m.data), (MetaCode::Va, Some(&b"hi"[..])));
    assert_eq!(m.flag_number::<u32>(b'f'), Some(5));
    assert_eq!(m.flag_number::<i64>(b't'), Some(-1));
    assert_eq!(m.flag(b'X'), Some(&b""[..]));
    assert_eq!(m.flag(b'c'), None);
    for (bytes, code) in [
        (&b"HD\r\n"[..], MetaCode::Hd),
        (b"EN\r\n", MetaCode::En),
        (b"NF\r\n", MetaCode::Nf),
        (b"EX c9\r\n", MetaCode::Ex),
        (b"MN\r\n", MetaCode::Mn),
    ] {
        assert!(
            matches!(decode(bytes, ReplyKind::Meta), Ok(ServerReply::Meta(m)) if m.code == code)
        );
    }
}

#[test]
fn lines_stats_and_errors() {
    fn line(b: &[u8]) -> Result<ServerReply<'_>, Malformed> {
        decode(b, ReplyKind::Line)
    }
    assert_eq!(line(b"STORED\r\n"), Ok(ServerReply::Status(Status::Stored)));
    assert_eq!(line(b"42\r\n"), Ok(ServerReply::Number(42)));
    assert_eq!(
        line(b"VERSION 1.6.45\r\n"),
        Ok(ServerReply::Version(b"1.6.45"))
    );
    assert_eq!(
        line(b"CLIENT_ERROR bad data chunk\r\n"),
        Ok(ServerReply::Error(ErrorClass::Client, b"bad data chunk"))
    );
    assert_eq!(
        line(b"ERROR\r\n"),
        Ok(ServerReply::Error(ErrorClass::Error, b""))
    );
    let stats = b"STAT pid 1\r\nSTAT uptime 2\r\nEND\r\n";
    assert_eq!(
        decode(stats, ReplyKind::Stats),
        Ok(ServerReply::Stats(&stats[..]))
    );
    assert_eq!(
        decode(b"RESET\r\n", ReplyKind::Stats),
        Ok(ServerReply::Status(Status::Reset))
    );
}

#[test]
fn malformed_replies_are_refused() {
    for (bytes, kind) in [
        (&b"VALUE a 0 5\r\nabc\r\nEND\r\n"[..], ReplyKind::Retrieval),
        (b"VALUE a x 1\r\na\r\nEND\r\n", ReplyKind::Retrieval),
        (b"STORED\r\n", ReplyKind::Retrieval),
        (b"VA 3\r\nab\r\n", ReplyKind::Meta),
        (b"ZZ\r\n", ReplyKind::Meta),
        (b"STORED\n", ReplyKind::Line),
        (b"STORED\r\nSTORED\r\n", ReplyKind::Line),
        (b"HELLO\r\n", ReplyKind::Line),
        (b"VALUE a 0 1\r\nx\r\n", ReplyKind::Retrieval),
    ] {
        assert!(
            decode(bytes, kind).is_err(),
            "{:?}",
            String::from_utf8_lossy(bytes)
        );
    }
}

#[test]
fn verdicts_and_hits_from_the_first_line() {
    assert_eq!(verdict(b"STORED\r\n"), Verdict::Success);
    assert_eq!(verdict(b"END\r\n"), Verdict::Success);
    assert_eq!(verdict(b"EN\r\n"), Verdict::Success);
    assert_eq!(verdict(b"NOT_FOUND\r\n"), Verdict::Refused);
    assert_eq!(verdict(b"EX c5\r\n"), Verdict::Refused);
    assert_eq!(verdict(b"SERVER_ERROR busy\r\n"), Verdict::Failed);
    assert_eq!(verdict(b"ERROR\r\n"), Verdict::Failed);
    assert!(Verdict::Failed > Verdict::Refused && Verdict::Refused > Verdict::Success);
    assert!(is_hit(b"VALUE k 0 1\r\nx\r\nEND\r\n"));
    assert!(is_hit(b"VA 1\r\nx\r\n"));
    assert!(!is_hit(b"LVALUE k 1 0 0\r\n\r\nEND\r\n"));
    assert!(!is_hit(b"END\r\n") && !is_hit(b"EN\r\n"));
}
