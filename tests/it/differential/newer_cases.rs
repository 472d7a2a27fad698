//! What memcached 1.6.45's parser and connection do that 1.6.18's did not, beyond the cases
//! of `text_cases.rs` and `meta_cases.rs`: a NUL is an ordinary byte of the line, a command
//! is named by the bytes before the first space, a stray HTTP line closes whatever its
//! command, an over-long key in a retrieval command ends its error line twice, `incr`/`decr`
//! rewrite an item a pending reply holds, and replies wait while a data block arrives.
//!
//! Compared only against a 1.6.45 reference (the whole group is in `NEWER_IN_1_6_45`).

use crate::differential::harness::{cat, text, Case, Group};

/// The cases, all under `text/newer-1.6.45/`.
pub fn cases() -> Vec<Case> {
    let k251 = vec![b'k'; 251];
    let mut g = Group::text("text/newer-1.6.45");
    // Framing and dispatch.
    g.c("ab\n");
    g.c("md\n");
    g.c("  flush_all\r\n");
    g.c("  verbosity 1\r\n");
    g.c("  version\r\n");
    g.c("  mn\r\n");
    g.closes("mx / HTTP/1.1\r\n");
    g.closes("x / HTTP/1.1\r\n");
    g.closes(" GET / HTTP/1.1\r\n");
    g.c("HTTP/1.1\r\n");
    g.c("incr a 1 HTTP/1.1\r\n");
    // A NUL is part of its token.
    g.c("set a\0b 0 0 1\r\nx\r\nget a\0b\r\nget a\r\n");
    g.c("set a 0 0 1\r\nx\r\nmg a\0 v\r\nget a\0\r\n");
    g.c("set a 0 0 1 noreply\0\r\nx\r\n");
    g.c("incr a 1\0\r\n");
    g.c("mn\0\r\nget\0 a\r\nversion\0\r\nflush_all\0\r\n");
    g.c("ms a 1\0 T0\r\nx\r\n");
    // Over-long keys in retrieval commands.
    g.c(cat(&[b"get ", &k251, b" noreply\r\n"]));
    g.c(cat(&[b"gets a ", &k251, b"\r\n"]));
    g.c(cat(&[b"gat 10 ", &k251, b"\r\n"]));
    g.c(cat(&[b"gats 10 ", &k251, b" noreply\r\n"]));
    g.case(vec![
        text("set a 0 0 1\r\nx\r\n"),
        text(cat(&[b"get a ", &k251, b"\r\n"])),
    ]);
    // incr/decr on an item a reply of the same write still holds: a new, unpadded item.
    let hundred = "set n 0 0 3\r\n100\r\n";
    for between in [
        "mg n\r\n",
        "mg n v\r\n",
        "mg n q\r\n",
        "gat 0 n\r\n",
        "get n\r\nmn\r\n",
        "me n\r\n",
        "touch n 0\r\n",
        "get n\r\nappend n 0 0 1\r\n \r\n",
        "get n\r\nset n 0 0 3\r\n100\r\n",
    ] {
        g.case(vec![
            text(hundred),
            text(format!("{between}decr n 95\r\nget n\r\n")),
        ]);
    }
    g.case(vec![
        text(hundred),
        text("gets n\r\nma n MD D95\r\nget n\r\n"),
    ]);
    g.case(vec![
        text(hundred),
        text("get n\r\ndecr n 95\r\ndecr n 1\r\nget n\r\n"),
    ]);
    // memcached sends the replies so far after 21 requests of one read, then every 20.
    for versions in [19, 20, 39, 40, 41] {
        g.case(vec![
            text(hundred),
            text(format!(
                "get n\r\n{}decr n 1\r\nget n\r\n",
                "version\r\n".repeat(versions)
            )),
        ]);
    }
    // Replies wait while a data block, or a refused one, is arriving.
    g.case(vec![
        text("set a 0 0 1\r\nx\r\nget a\r\nset j 0 0 2\r\na").idle(),
        text("b\r\nget j\r\n"),
    ]);
    g.case(vec![
        text("get a\r\nset j 0 0 2\r\n").idle(),
        text("ab\r\nget j\r\n"),
    ]);
    g.case(vec![
        text("get a\r\nset big 0 0 2000000\r\nxx").idle(),
        text(vec![b'x'; 1_999_998]).idle(),
        text("\r\nget big\r\n"),
    ]);
    g.case(vec![
        text("get a\r\nms j 2\r\nab\r").idle(),
        text("\nget j\r\nmg j v\r\n"),
    ]);
    g.cases
}
