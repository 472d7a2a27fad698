//! Classic text protocol cases: framing and errors (after
//! `crates/protocol/tests/it/replies_text.rs`), then cache semantics.

use std::time::Duration;

use crate::differential::harness::{cat, text, text_at_send, Case, Group};

/// Framing, parsing and error replies; most keys miss.
fn errors() -> Vec<Case> {
    let k250 = vec![b'k'; 250];
    let k251 = vec![b'k'; 251];
    let big = vec![b'x'; 2_000_000];
    let max_value = vec![b'x'; 1_048_516];
    let over_max = vec![b'x'; 1_048_517];

    let mut g = Group::text("text/framing");
    g.c("\r\n");
    g.c("\n");
    g.c("   \r\n");
    g.c("x\r\n");
    g.c("get\tfoo\r\n");
    g.c("get foo\0bar\r\n");
    g.c("\0get foo\r\n");
    g.c("set a 0 0 1\0junk\r\nx\r\n");
    g.c("  get   a  \r\n");
    g.c("get a\n");
    g.c("get a\r\r\n");
    g.c("GET a\r\n");
    g.closes("GET / HTTP/1.1\r\n");
    g.closes("POST / HTTP/1.0\r\nHost: x\r\n\r\n");
    g.closes("mget foo HTTP/1.1\r\n");
    g.c("sx / HTTP/1.1\r\n");
    // Line too long without a newline: memcached hangs up.
    g.closes(cat(&[b"set ", &[b'k'; 3000]]));
    g.closes(cat(&[b"set ", &[b'k'; 2045]]));
    g.idle(cat(&[b"set ", &[b'k'; 2044]]));
    g.c(cat(&[b"set ", &[b'k'; 3000], b" 0 0 1\r\nx\r\n"]));
    // A long multi-get line is read on, not refused.
    g.idle(cat(&[b"get ", &b"k ".repeat(1500)]));
    g.idle(cat(&[b"gets ", &b"k ".repeat(1500)]));
    g.closes(cat(&[b"gat 0 ", &b"k ".repeat(1500)]));
    g.idle(cat(&[&[b' '; 100], b"get ", &b"k ".repeat(1500)]));
    g.closes(cat(&[&[b' '; 101], b"get ", &b"k ".repeat(1500)]));
    g.c(cat(&[b"get ", &b"k ".repeat(1500), b"\r\n"]));
    let mut cases = g.cases;

    let mut g = Group::text("text/retrieval-errors");
    g.c("get\r\n");
    g.c("get a b c\r\n");
    g.c("gets a\r\n");
    g.c("bget a\r\n");
    g.c("bget\r\n");
    g.c("gx a\r\n");
    g.c(cat(&[b"get ", &k250, b"\r\n"]));
    g.c(cat(&[b"get ", &k251, b"\r\n"]));
    g.c(cat(&[b"get a ", &k251, b" b\r\n"]));
    g.c(cat(&[b"get ", &b"k ".repeat(40), &k251, b"\r\n"]));
    g.c("gat 10 a\r\n");
    g.c("gats 10 a b\r\n");
    g.c("gat 10\r\n");
    g.c("gat abc a\r\n");
    g.c("gat\r\n");
    g.c("gats\r\n");
    g.c("gat 10 a noreply\r\n");
    cases.extend(g.cases);

    let mut g = Group::text("text/storage-errors");
    g.c("set a 0 0 1\r\nx\r\n");
    g.c("set a 0 0 1 noreply\r\nx\r\n");
    g.c("set a 0 0 1 garbage\r\nx\r\n");
    g.c("set a 0 0 0\r\n\r\n");
    g.c("set a 0 0 3\r\nabcde\r\n");
    g.c("set a 0 0 1 noreply\r\nab\r\n");
    g.c("set a 0 0 1\r\nx\nget a\r\n");
    g.c("set a abc 0 1\r\nx\r\n");
    g.c("set a abc 0 1 noreply\r\nx\r\n");
    g.c("set a 0 abc 1\r\nx\r\n");
    g.c("set a -1 0 1\r\nx\r\n");
    g.c("set a 0 0 -1\r\nx\r\n");
    g.c("set a 0 0 1z\r\nx\r\n");
    g.c("set a 0 0 noreply\r\nx\r\n");
    g.c("set a 0 0 +1\r\nx\r\n");
    g.c("set a 0 0 \t1\r\nx\r\n");
    g.c("set a 0 0 1\tz\r\nx\r\n");
    g.c("set a 4294967297 0 1\r\nx\r\nget a\r\n");
    g.c("set a 0 0 4294967297\r\nx\r\nget a\r\n");
    g.c("set a 0 0 2147483646\r\nx\r\n");
    g.c("set a 0 0 1 2 3\r\nx\r\n");
    g.c("set a 0 0\r\n");
    g.c(cat(&[b"set ", &k251, b" 0 0 1\r\nx\r\n"]));
    g.c(cat(&[b"set ", &k251, b" 0 0 1 noreply\r\nx\r\n"]));
    g.c(cat(&[
        b"set ",
        &k250,
        b" 0 0 1\r\nx\r\nget ",
        &k250,
        b"\r\n",
    ]));
    g.c(cat(&[b"set a 0 0 2000000\r\n", &big, b"\r\nget a\r\n"]));
    g.c(cat(&[
        b"set a 0 0 2000000 noreply\r\n",
        &big,
        b"\r\nmn\r\n",
    ]));
    g.c(cat(&[b"set a 0 0 2000000\r\n", &big, b"12345\r\nmn\r\n"]));
    // Too large replaces nothing, but memcached unlinks the old value (a later get misses).
    g.c(cat(&[
        b"set a 0 0 1\r\nx\r\nset a 0 0 2000000\r\n",
        &big,
        b"\r\nget a\r\n",
    ]));
    g.c(cat(&[b"set k 0 0 1048516\r\n", &max_value, b"\r\n"]));
    g.c(cat(&[b"set k 0 0 1048517\r\n", &over_max, b"\r\n"]));
    g.c(cat(&[
        b"set k 1 0 1048512\r\n",
        &max_value[..1_048_512],
        b"\r\n",
    ]));
    g.c(cat(&[
        b"set k 1 0 1048513\r\n",
        &max_value[..1_048_513],
        b"\r\n",
    ]));
    g.c("add a 0 0 1\r\nx\r\n");
    g.c("replace a 0 0 1\r\nx\r\n");
    g.c("append a 0 0 1\r\nx\r\n");
    g.c("prepend a 0 0 1\r\nx\r\n");
    g.c("cas a 0 0 1 5\r\nx\r\n");
    g.c("cas a 0 0 1 5 noreply\r\nx\r\n");
    g.c("cas a 0 0 1\r\nx\r\n");
    g.c("cas a 0 0 1 abc\r\nx\r\n");
    g.c("cas a 0 0 1 -1\r\nx\r\n");
    g.c("cas a 0 0 1 noreply\r\nx\r\n");
    g.c("add a 0 0 1 noreply\r\nx\r\nadd a 0 0 1 noreply\r\ny\r\nget a\r\n");
    g.c("set a 0 abc 1 noreply\r\nx\r\n");
    g.c("set a 0 0 1 noreply\r\nxyz\r\n");
    cases.extend(g.cases);

    let mut g = Group::text("text/delete-errors");
    // Not `delete a 1`: memfleet takes a number as a hold-off (exception delete-holdoff).
    let usage = "delete a x\r\n";
    g.c("delete a\r\n");
    g.c("delete a 0\r\n");
    g.c(usage);
    g.c("delete a noreply\r\n");
    g.c("delete a 0 noreply\r\n");
    g.c("delete a x noreply\r\n");
    g.c("delete a 0 0\r\n");
    g.c("delete\r\n");
    g.c("delete a b c d\r\n");
    g.c(cat(&[b"delete ", &k251, b"\r\n"]));
    g.c(cat(&[b"delete ", &k251, b" noreply\r\n"]));
    cases.extend(g.cases);

    let mut g = Group::text("text/arith-touch-errors");
    g.c("incr a 1\r\n");
    g.c("decr a 1\r\n");
    g.c("incr a 1 x\r\n");
    g.c("incr a abc\r\n");
    g.c("incr a -1\r\n");
    g.c("incr a 18446744073709551616\r\n");
    g.c("incr a 18446744073709551615\r\n");
    g.c("incr a abc noreply\r\n");
    g.c("incr a noreply\r\n");
    g.c("incr a\r\n");
    g.c("incx a 1\r\n");
    g.c(cat(&[b"incr ", &k251, b" 1\r\n"]));
    g.c("touch a 10\r\n");
    g.c("touch a abc\r\n");
    g.c("touch a abc noreply\r\n");
    g.c("touch a\r\n");
    g.c(cat(&[b"touch ", &k251, b" 1\r\n"]));
    cases.extend(g.cases);

    let mut g = Group::text("text/other");
    g.c("flush_all\r\n");
    g.c("flush_all 0\r\n");
    g.c("flush_all abc\r\n");
    g.c("flush_all noreply\r\n");
    g.c("flush_all abc noreply\r\n");
    g.c("flush_all 0 noreply\r\n");
    g.c("flush_all 0 20\r\n");
    g.c("flush_all 1 2 3\r\n");
    g.c("flush_all -1\r\n");
    g.c("verbosity\r\n");
    g.c("verbosity 1\r\n");
    g.c("verbosity abc\r\n");
    g.c("verbosity noreply\r\n");
    g.c("verbosity 1 noreply\r\n");
    g.c("verbosity 1 2\r\n");
    g.c("verbosity 0\r\n");
    g.c("version\r\n");
    g.c("version foo\r\n");
    g.closes("quit\r\n");
    g.closes("quit foo\r\nget a\r\n");
    g.c("shutdown\r\n");
    g.c("cache_memlimit\r\n");
    g.c("lru\r\n");
    g.c("slabs\r\n");
    g.c("lru_crawler\r\n");
    // Key dumps' argument checks (the dumps themselves are in crates/server/tests/it/dumps.rs:
    // their order, CAS and sizes differ by design, and this memcached has no mgdump).
    for line in [
        "stats cachedump 1",
        "stats cachedump x 0",
        "stats cachedump 1 -1",
        "stats cachedump 300 0",
        "stats cachedump 2 0",
        "lru_crawler metadump 0",
        "lru_crawler metadump x",
        "lru_crawler metadump ,",
        "lru_crawler metadump",
        "lru_crawler crawl hash",
        "lru_crawler crawl x",
        "lru_crawler tocrawl x",
        "lru_crawler tocrawl 5",
        "lru_crawler sleep 2000000",
        "lru_crawler sleep 10",
        "lru_crawler enable",
        "lru_crawler foo bar baz",
    ] {
        g.c(format!("{line}\r\n"));
    }
    g.c("extstore a b\r\n");
    g.c("stats\r\n");
    g.c("stats reset\r\n");
    g.c("stats nosuchgroup\r\n");
    // Not `watch`: memcached turns the connection into a log stream (see the `watch`
    // exception in differential.rs).
    g.c("misbehave\r\n");
    g.c("set\r\n");
    g.c("cas\r\n");
    cases.extend(g.cases);
    cases
}

/// Behaviour that needs a real cache: values stored, read back, changed and expired.
fn semantics() -> Vec<Case> {
    let mut g = Group::text("text/semantics");
    // Storage and retrieval.
    g.named(
        "set then get returns value and flags",
        vec![text("set k 123 0 5\r\nhello\r\nget k\r\n")],
    );
    g.named(
        "flags edge values",
        vec![text(
            "set a 4294967295 0 1\r\n1\r\nset b 0 0 1\r\n2\r\nset c 4294967296 0 1\r\n3\r\nget a b c\r\n",
        )],
    );
    g.named(
        "multi-get keeps request order, repeats, skips misses",
        vec![text(
            "set a 1 0 1\r\nA\r\nset b 2 0 2\r\nBB\r\nget b nope a b\r\ngets a nope b\r\n",
        )],
    );
    g.named(
        "overwrite replaces value and flags",
        vec![text(
            "set k 1 0 3\r\none\r\nset k 2 0 5\r\nthree\r\nget k\r\n",
        )],
    );
    g.named(
        "empty value",
        vec![text("set k 7 0 0\r\n\r\nget k\r\ngets k\r\n")],
    );
    g.named(
        "value holding CRLF and protocol words",
        vec![text("set k 0 0 14\r\nEND\r\nVALUE x\r\n\r\nget k\r\n")],
    );
    let all_bytes: Vec<u8> = (0..=255u8).collect();
    g.named(
        "every byte value round-trips",
        vec![text(cat(&[
            b"set k 0 0 256\r\n",
            &all_bytes,
            b"\r\nget k\r\n",
        ]))],
    );
    g.named(
        "non-ASCII and control bytes in keys",
        vec![text(
            b"set k\xc3\xa9 0 0 1\r\na\r\nset k\x01\x7f 0 0 1\r\nb\r\nget k\xc3\xa9 k\x01\x7f\r\n"
                .as_slice(),
        )],
    );
    let v500k = vec![b'v'; 500_000];
    g.named(
        "500 kB value round-trips",
        vec![text(cat(&[
            b"set big 9 0 500000\r\n",
            &v500k,
            b"\r\nget big\r\n",
        ]))],
    );
    g.named(
        "largest accepted value round-trips",
        vec![text(cat(&[
            b"set k 0 0 1048516\r\n",
            &vec![b'm'; 1_048_516],
            b"\r\nget k\r\n",
        ]))],
    );
    g.named(
        "noreply storage then read",
        vec![text(
            "set k 0 0 1 noreply\r\na\r\nadd k 0 0 1 noreply\r\nb\r\nreplace k 0 0 1 noreply\r\nc\r\n\
             append k 0 0 1 noreply\r\nd\r\nprepend k 0 0 1 noreply\r\ne\r\nget k\r\n",
        )],
    );
    g.named(
        "add, replace on present and absent keys",
        vec![text(
            "add k 0 0 1\r\na\r\nadd k 0 0 1\r\nb\r\nreplace k 0 0 1\r\nc\r\nreplace z 0 0 1\r\nd\r\n\
             get k z\r\n",
        )],
    );
    g.named(
        "append and prepend keep the stored flags",
        vec![text(
            "set k 5 0 2\r\nbb\r\nappend k 9 0 2\r\ncc\r\nprepend k 7 0 2\r\naa\r\nget k\r\n",
        )],
    );
    g.named(
        "append and prepend to missing keys",
        vec![text(
            "append k 0 0 1\r\na\r\nprepend k 0 0 1\r\na\r\nget k\r\n",
        )],
    );
    g.named(
        "append past the item size limit",
        vec![text(cat(&[
            b"set k 0 0 1048000\r\n",
            &vec![b'a'; 1_048_000],
            b"\r\nappend k 0 0 1000\r\n",
            &[b'b'; 1000],
            b"\r\nget z\r\n",
        ]))],
    );
    // CAS.
    g.named(
        "cas with the token from gets succeeds once",
        vec![
            text("set k 0 0 1\r\na\r\n"),
            text("gets k\r\n"),
            text("cas k 3 0 1 $C0\r\nb\r\n"),
            text("cas k 0 0 1 $C0\r\nc\r\n"),
            text("gets k\r\n"),
        ],
    );
    g.named(
        "cas with a stale token is EXISTS, noreply cas",
        vec![
            text("set k 0 0 1\r\na\r\ngets k\r\n"),
            text("cas k 0 0 1 $X0\r\nb\r\nget k\r\n"),
            text("cas k 0 0 1 $C0 noreply\r\nc\r\ngets k\r\n"),
        ],
    );
    g.named(
        "gets on several keys shows distinct tokens",
        vec![text(
            "set a 0 0 1\r\n1\r\nset b 0 0 1\r\n2\r\nset c 0 0 1\r\n3\r\ngets a b c a\r\n",
        )],
    );
    g.named(
        "every write changes the token, touch and reads do not",
        vec![text(
            "set k 0 0 1\r\n1\r\ngets k\r\nget k\r\ngets k\r\ntouch k 100\r\ngets k\r\n\
             gats 200 k\r\nappend k 0 0 1\r\n2\r\ngets k\r\nprepend k 0 0 1\r\n0\r\ngets k\r\n\
             incr k 1\r\ngets k\r\nreplace k 0 0 1\r\n5\r\ngets k\r\nset k 0 0 1\r\n6\r\ngets k\r\n",
        )],
    );
    g.named(
        "cas after delete is NOT_FOUND",
        vec![
            text("set k 0 0 1\r\na\r\ngets k\r\ndelete k\r\n"),
            text("cas k 0 0 1 $C0\r\nb\r\nget k\r\n"),
        ],
    );
    // Delete.
    g.named(
        "delete then get, add after delete",
        vec![text(
            "set k 0 0 1\r\na\r\ndelete k\r\nget k\r\ndelete k\r\nadd k 0 0 1\r\nb\r\nget k\r\n",
        )],
    );
    g.named(
        "delete noreply",
        vec![text("set k 0 0 1\r\na\r\ndelete k noreply\r\nget k\r\n")],
    );
    // Arithmetic.
    g.named(
        "incr and decr",
        vec![text(
            "set n 3 0 2\r\n10\r\nincr n 5\r\ndecr n 3\r\nget n\r\nincr n 0\r\ndecr n 0\r\n",
        )],
    );
    g.named(
        "incr wraps at 2^64",
        vec![text(
            "set n 0 0 20\r\n18446744073709551615\r\nincr n 1\r\nget n\r\n\
             set m 0 0 20\r\n18446744073709551614\r\nincr m 3\r\nget m\r\n\
             set o 0 0 1\r\n1\r\nincr o 18446744073709551615\r\n",
        )],
    );
    g.named(
        "decr stops at 0",
        vec![text(
            "set n 0 0 1\r\n5\r\ndecr n 6\r\nget n\r\ndecr n 1\r\n\
             set m 0 0 2\r\n10\r\ndecr m 18446744073709551615\r\n",
        )],
    );
    g.named(
        "decr that shortens the number pads with spaces",
        vec![text(
            "set n 0 0 3\r\n100\r\ndecr n 1\r\nget n\r\ndecr n 90\r\nget n\r\nincr n 5\r\nget n\r\n",
        )],
    );
    g.named(
        "incr that lengthens the number",
        vec![text(
            "set n 0 0 2\r\n99\r\nincr n 1\r\nget n\r\nincr n 900\r\nget n\r\n",
        )],
    );
    g.named(
        "incr on numbers with leading spaces and zeros",
        vec![text(
            "set a 0 0 3\r\n  5\r\nincr a 1\r\nget a\r\nset b 0 0 3\r\n007\r\nincr b 1\r\nget b\r\n\
             set c 0 0 2\r\n5 \r\nincr c 1\r\nget c\r\n",
        )],
    );
    g.named(
        "incr on non-numeric values",
        vec![text(
            "set a 0 0 3\r\nabc\r\nincr a 1\r\nset b 0 0 0\r\n\r\nincr b 1\r\n\
             set c 0 0 2\r\n5a\r\nincr c 1\r\nset d 0 0 2\r\n-5\r\ndecr d 1\r\n\
             set e 0 0 20\r\n18446744073709551616\r\nincr e 1\r\n\
             set f 0 0 21\r\n000000000000000000001\r\nincr f 1\r\nget f\r\n",
        )],
    );
    g.named(
        "incr noreply and flags kept",
        vec![text(
            "set n 42 0 1\r\n1\r\nincr n 5 noreply\r\ndecr n 2 noreply\r\nget n\r\n",
        )],
    );
    // Touch, gat, expiry.
    g.named(
        "touch then get",
        vec![text(
            "set k 0 0 1\r\na\r\ntouch k 100\r\nget k\r\nmg k t v\r\ntouch k 0\r\nmg k t\r\n",
        )],
    );
    g.named(
        "touch into the past expires",
        vec![text(
            "set k 0 0 1\r\na\r\ntouch k -1\r\nget k\r\ntouch k 10\r\n",
        )],
    );
    g.named(
        "touch noreply",
        vec![text(
            "set k 0 0 1\r\na\r\ntouch k 100 noreply\r\nmg k t\r\n",
        )],
    );
    g.named(
        "gat and gats",
        vec![text(
            "set a 1 0 1\r\nA\r\nset b 2 0 1\r\nB\r\ngat 100 a nope b\r\nmg a t\r\ngats 0 a b\r\n\
             mg a t\r\n",
        )],
    );
    g.named(
        "gat into the past returns the value once",
        vec![text("set k 0 0 1\r\na\r\ngat -1 k\r\nget k\r\n")],
    );
    g.named(
        "negative exptime stores an expired item",
        vec![text(
            "set k 0 -1 1\r\na\r\nget k\r\nadd k 0 0 1\r\nb\r\nget k\r\n",
        )],
    );
    g.named(
        "absolute exptime in the past expires at once",
        vec![text("set k 0 2592001 1\r\na\r\nget k\r\n")],
    );
    g.named(
        "30 days is still relative",
        vec![text("set k 0 2592000 1\r\na\r\nget k\r\nmg k t\r\n")],
    );
    g.named(
        "absolute exptime in the future",
        // memcached reads an absolute time as N or N+1 seconds away depending on where its
        // clock tick falls: 999 ahead reads as 999 or 1000, both "t1000" under ttl-remaining.
        vec![text_at_send(|| {
            format!("set k 0 {} 1\r\na\r\nget k\r\nmg k t\r\n", unix_now() + 999).into_bytes()
        })],
    );
    g.named(
        "exptime of one second passes",
        vec![
            text("set k 0 1 1\r\na\r\nset j 0 100 1\r\nb\r\nget k j\r\n"),
            text("get k j\r\n").after(Duration::from_millis(2100)),
        ],
    );
    // Flush.
    g.named(
        "flush_all empties the cache",
        vec![text(
            "set a 0 0 1\r\na\r\nset b 0 0 1\r\nb\r\nflush_all\r\nget a b\r\nadd a 0 0 1\r\nc\r\nget a\r\n",
        )],
    );
    g.named(
        "flush_all noreply",
        vec![text("set a 0 0 1\r\na\r\nflush_all noreply\r\nget a\r\n")],
    );
    g.named(
        "delayed flush_all leaves items for now",
        vec![text("set a 0 0 1\r\na\r\nflush_all 100\r\nget a\r\n")],
    );
    // Requests split across writes: the server must wait for the rest.
    g.named(
        "command line split across writes",
        vec![text("se").idle(), text("t k 0 0 1\r\nx\r\nget k\r\n")],
    );
    g.named(
        "data block split across writes",
        vec![
            text("set k 0 0 10\r\nhello").idle(),
            text("world\r\nget k\r\n"),
        ],
    );
    g.named(
        "split between data and its CRLF",
        vec![
            text("set k 0 0 2\r\nab\r").idle(),
            text("\nget k\r\nms m 2\r\ncd").idle(),
            text("\r\nmg m v\r\n"),
        ],
    );
    g.named(
        "noreply is a key for get",
        vec![text("set noreply 0 0 1\r\nx\r\nget a noreply\r\n")],
    );
    // Pipelines.
    g.named(
        "pipelined mix in one write",
        vec![text(
            "set a 1 0 1\r\n1\r\nset b 2 0 2\r\n22\r\nget a b\r\nincr a 9\r\ndecr b 2\r\n\
             append a 0 0 1\r\nx\r\nprepend b 0 0 1\r\ny\r\nget a b\r\ndelete a\r\nget a\r\n\
             add a 0 0 1\r\nz\r\nreplace c 0 0 1\r\nc\r\ntouch b 100\r\nversion\r\n\
             bogus\r\nset c 0 0 1 noreply\r\nc\r\nget c\r\nmg a v\r\nms d 1 T0\r\nd\r\nmg d v f\r\n\
             verbosity 0\r\nincr zz 1\r\nget a b c d\r\n",
        )],
    );
    g.named(
        "many small sets then one get",
        vec![text({
            let mut s = String::new();
            for i in 0..100 {
                s += &format!("set key{i} {i} 0 {}\r\n{}\r\n", i.to_string().len(), i);
            }
            s += "get";
            for i in (0..100).step_by(7) {
                s += &format!(" key{i}");
            }
            s += "\r\n";
            s
        })],
    );
    g.named(
        "errors in the middle of a pipeline do not stop it",
        vec![text(
            "set a 0 0 1\r\n1\r\nincr a x\r\nset a 0 0 1\r\n12\r\nget a\r\nfoo\r\nincr a 1\r\n\
             delete a x\r\nget a\r\n",
        )],
    );
    g.named(
        "quit ends a pipeline",
        vec![text("set k 0 0 1\r\na\r\nget k\r\nquit\r\nget k\r\n").closes()],
    );
    g.named(
        "stats after traffic (names only)",
        vec![text("set a 0 0 1\r\na\r\nget a b\r\nstats\r\n")],
    );
    g.cases
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Every text-protocol case.
pub fn cases() -> Vec<Case> {
    let mut v = errors();
    v.extend(semantics());
    v
}
