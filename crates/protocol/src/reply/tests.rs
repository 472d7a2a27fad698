//! Unit tests of `reply/mod.rs`, kept beside it so that the product file
//! holds product code only.

use super::*;

const MAX: usize = 1 << 20;

/// Every prefix is incomplete and the whole is complete (with trailing bytes ignored).
fn whole(kind: ReplyKind, reply: &[u8]) {
    for cut in 0..reply.len() {
        assert_eq!(
            frame(&reply[..cut], kind, MAX),
            Ok(Frame::Incomplete),
            "{:?} cut at {cut}",
            String::from_utf8_lossy(reply)
        );
    }
    let mut more = reply.to_vec();
    more.extend_from_slice(b"NEXT REPLY\r\n");
    assert_eq!(frame(&more, kind, MAX), Ok(Frame::Complete(reply.len())));
}

#[test]
fn every_shape_is_framed() {
    whole(ReplyKind::Line, b"STORED\r\n");
    whole(ReplyKind::Line, b"12345\r\n");
    whole(ReplyKind::Retrieval, b"END\r\n");
    whole(
        ReplyKind::Retrieval,
        b"VALUE a 0 5\r\nhello\r\nVALUE b 7 3 99\r\nEND\r\nEND\r\n",
    );
    whole(ReplyKind::Retrieval, b"LVALUE k 12 0 2\r\nhi\r\nEND\r\n");
    whole(ReplyKind::Meta, b"HD c12 t30\r\n");
    whole(ReplyKind::Meta, b"VA 5 f3 W\r\nhel\r\n\r\n");
    whole(ReplyKind::Meta, b"EN\r\n");
    whole(ReplyKind::Stats, b"STAT pid 1\r\nSTAT uptime 5\r\nEND\r\n");
    whole(ReplyKind::Stats, b"RESET\r\n");
    // An error line ends a reply of any shape, even mid-way through a get.
    whole(
        ReplyKind::Retrieval,
        b"VALUE a 0 1\r\nx\r\nSERVER_ERROR out of memory\r\n",
    );
    whole(ReplyKind::Meta, b"CLIENT_ERROR bad command line format\r\n");
    whole(ReplyKind::Stats, b"ERROR\r\n");
}

#[test]
fn garbage_is_refused() {
    let bad = |kind, bytes: &[u8]| frame(bytes, kind, MAX).is_err();
    assert!(bad(ReplyKind::Retrieval, b"STORED\r\n"));
    assert!(bad(ReplyKind::Retrieval, b"VALUE a 0 x\r\n"));
    assert!(bad(ReplyKind::Retrieval, b"VALUE a 0 1\r\nxy\r\nEND\r\n"));
    assert!(bad(ReplyKind::Meta, b"VA 99999999 \r\n"));
    assert!(bad(ReplyKind::Line, b"STORED\n"));
    assert!(bad(ReplyKind::Line, &[b'x'; MAX_REPLY_LINE + 1]));
}

#[test]
fn requests_know_their_reply_shape() {
    let cfg = crate::ParserConfig::default();
    let kind = |text: &[u8]| ReplyKind::of(&crate::parse(text, &cfg).unwrap().0);
    assert_eq!(kind(b"get a b\r\n"), ReplyKind::Retrieval);
    assert_eq!(kind(b"lease-get a\r\n"), ReplyKind::Retrieval);
    assert_eq!(kind(b"set a 0 0 1\r\nx\r\n"), ReplyKind::Line);
    assert_eq!(kind(b"mg a v\r\n"), ReplyKind::Meta);
    assert_eq!(kind(b"stats slabs\r\n"), ReplyKind::Stats);
    assert_eq!(kind(b"incr a 1\r\n"), ReplyKind::Line);
}
