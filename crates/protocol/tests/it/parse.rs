//! What the parser extracts from valid requests (field by field), that every strict prefix
//! of a request is `Incomplete`, and the skip/noreply/close details of rejections that the
//! reply-level table (`memcached_replies.rs`) cannot see.
//!
//! Not here: reply bytes of malformed streams (`memcached_replies.rs`), encoders
//! (`encode.rs`), random inputs (`props.rs`).

use memfleet_protocol::*;

fn cfg() -> ParserConfig {
    ParserConfig::default()
}

fn ok(buf: &[u8]) -> Request<'_> {
    match parse(buf, &cfg()) {
        Ok((r, used)) => {
            assert_eq!(
                used,
                buf.len(),
                "consumed of {:?}",
                buf.escape_ascii().to_string()
            );
            r
        }
        Err(e) => panic!("{:?}: {e:?}", buf.escape_ascii().to_string()),
    }
}

fn rejection(buf: &[u8]) -> Rejection {
    match parse(buf, &cfg()) {
        Err(ParseError::Invalid(r)) => r,
        other => panic!(
            "{:?}: expected rejection, got {other:?}",
            buf.escape_ascii().to_string()
        ),
    }
}

fn keys(t: Tokens<'_>) -> Vec<&[u8]> {
    t.collect()
}

/// Requests covering every command; each is checked whole and at every prefix.
const SAMPLES: &[&[u8]] = &[
    b"get a\r\n",
    b"get a bb ccc\r\n",
    b"gets a\r\n",
    b"gat 100 a b\r\n",
    b"gats -1 a\r\n",
    b"set k 5 10 3\r\nabc\r\n",
    b"set k 5 10 0\r\n\r\n",
    b"set k 0 0 4 noreply\r\na\r\nb\r\n",
    b"add k 0 0 1\r\nx\r\n",
    b"replace k 0 0 1\r\nx\r\n",
    b"append k 0 0 1\r\nx\r\n",
    b"prepend k 0 0 1\r\nx\r\n",
    b"cas k 1 2 1 99\r\nx\r\n",
    b"cas k 1 2 1 99 noreply\r\nx\r\n",
    b"delete k\r\n",
    b"delete k 0\r\n",
    b"delete k noreply\r\n",
    b"incr k 5\r\n",
    b"decr k 18446744073709551615 noreply\r\n",
    b"touch k 10\r\n",
    b"flush_all\r\n",
    b"flush_all 10 noreply\r\n",
    b"version\r\n",
    b"verbosity 1\r\n",
    b"stats\r\n",
    b"stats detail on\r\n",
    b"quit\r\n",
    b"shutdown graceful\r\n",
    b"mn\r\n",
    b"me k\r\n",
    b"me Zm9v b\r\n",
    b"mg k v c f t s k Oabc q\r\n",
    b"mg Zm9v b v\r\n",
    b"ms k 3 T10 F7 C5 MA I q\r\nabc\r\n",
    b"ms k 0\r\n\r\n",
    b"md k C10 I T30 q\r\n",
    b"ma k N0 J10 D5 MD v\r\n",
    b"get a\n",
];

#[test]
fn every_prefix_is_incomplete() {
    for &req in SAMPLES {
        for cut in 0..req.len() {
            assert_eq!(
                parse(&req[..cut], &cfg()),
                Err(ParseError::Incomplete),
                "prefix {cut} of {:?}",
                req.escape_ascii().to_string()
            );
        }
        ok(req);
        // Pipelined: the next request's bytes are not consumed.
        let two = [req, b"mn\r\n".as_slice()].concat();
        let (_, used) = parse(&two, &cfg()).unwrap();
        assert_eq!(used, req.len());
    }
}

#[test]
fn retrieval_fields() {
    let Request::Get(g) = ok(b"get a bb ccc\r\n") else {
        panic!()
    };
    assert_eq!((g.kind, g.exptime), (GetKind::Get, 0));
    assert_eq!(keys(g.keys), vec![&b"a"[..], b"bb", b"ccc"]);
    let Request::Get(g) = ok(b"gats -1 a\r\n") else {
        panic!()
    };
    assert_eq!(
        (g.kind, g.exptime, g.kind.returns_cas(), g.kind.touches()),
        (GetKind::Gats, -1, true, true)
    );
    // A touch without a key is a format error (memcached 1.6.45; 1.6.18 answered `END`).
    assert!(matches!(
        parse(b"gat 10\r\n", &ParserConfig::default()),
        Err(ParseError::Invalid(r)) if r.kind == ErrorKind::BadCommandLineFormat
    ));
    // More keys than memcached's 24-token window: all of them, in order.
    let line: Vec<u8> = [
        b"get".to_vec(),
        (0..100)
            .flat_map(|i| format!(" k{i}").into_bytes())
            .collect(),
        b"\r\n".to_vec(),
    ]
    .concat();
    let Request::Get(g) = ok(&line) else { panic!() };
    assert_eq!(g.keys.count(), 100);
    assert_eq!(g.keys.last(), Some(&b"k99"[..]));
    // Keys keep any byte but space: a tab, a second \r.
    let Request::Get(g) = ok(b"get a\tb c\r\r\n") else {
        panic!()
    };
    assert_eq!(keys(g.keys), vec![&b"a\tb"[..], b"c\r"]);
}

#[test]
fn storage_fields_with_memcached_truncation() {
    let Request::Store(s) = ok(b"cas k 4294967297 -5 1 99 noreply\r\nx\r\n") else {
        panic!()
    };
    assert_eq!(s.command, StoreCommand::Cas);
    assert_eq!(
        (s.key, s.flags, s.exptime, s.cas, s.noreply, s.data),
        (&b"k"[..], 1, -5, 99, true, &b"x"[..])
    );
    // exptime is 32-bit in memcached: 2^32 + 1 is 1. The length is read strictly (1.6.45):
    // digits that fit in 32 bits, no sign or spaces.
    let Request::Store(s) = ok(b"set k 0 4294967297 1\r\nx\r\n") else {
        panic!()
    };
    assert_eq!((s.exptime, s.data), (1, &b"x"[..]));
    assert_eq!(
        rejection(b"set k 0 0 4294967297\r\nx\r\n").kind,
        ErrorKind::BadCommandLineFormat
    );
    assert_eq!(
        rejection(b"set k 0 0 +1\r\nx\r\n").kind,
        ErrorKind::BadCommandLineFormat
    );
    let Request::Store(s) = ok(b"set k 0 0 1 garbage\r\nx\r\n") else {
        panic!()
    };
    assert!(!s.noreply);
    // A data block may contain \r\n.
    let Request::Store(s) = ok(b"set k 0 0 4\r\na\r\nb\r\n") else {
        panic!()
    };
    assert_eq!(s.data, b"a\r\nb");
}

#[test]
fn other_commands_fields() {
    assert_eq!(
        ok(b"delete k 0 noreply\r\n"),
        Request::Delete {
            key: b"k",
            holdoff: 0,
            noreply: true
        }
    );
    assert_eq!(
        ok(b"incr k 5\r\n"),
        Request::Arith {
            op: ArithOp::Incr,
            key: b"k",
            delta: 5,
            noreply: false
        }
    );
    assert_eq!(
        ok(b"touch k -1 noreply\r\n"),
        Request::Touch {
            key: b"k",
            exptime: -1,
            noreply: true
        }
    );
    assert_eq!(
        ok(b"flush_all 10 20\r\n"),
        Request::FlushAll {
            delay: 10,
            noreply: false
        }
    );
    assert_eq!(
        ok(b"flush_all noreply\r\n"),
        Request::FlushAll {
            delay: 0,
            noreply: true
        }
    );
    assert_eq!(
        ok(b"verbosity 4294967297\r\n"),
        Request::Verbosity {
            level: 1,
            noreply: false
        }
    );
    let Request::Stats { args } = ok(b"stats detail on\r\n") else {
        panic!()
    };
    assert_eq!(keys(args), vec![&b"detail"[..], b"on"]);
    let Request::Other { command, args } = ok(b"shutdown graceful\r\n") else {
        panic!()
    };
    assert_eq!(
        (command, keys(args)),
        (&b"shutdown"[..], vec![&b"graceful"[..]])
    );
    assert_eq!(ok(b"quit\r\n"), Request::Quit);
    assert_eq!(ok(b"version\r\n"), Request::Version);
}

#[test]
fn meta_fields() {
    let Request::MetaGet(m) = ok(b"mg k v c f t s k Oabc q N30 R5 T-1\r\n") else {
        panic!()
    };
    assert_eq!(m.key.raw(), b"k");
    assert!(!m.key.is_base64());
    let letters: Vec<u8> = m.flags.iter().map(|f| f.letter).collect();
    assert_eq!(letters, b"vcftskOqNRT");
    assert_eq!(m.flags.opaque(), Some(&b"abc"[..]));
    assert!(m.flags.quiet() && m.flags.has(b'v') && !m.flags.has(b'h'));
    assert_eq!(
        (m.flags.vivify_ttl(), m.flags.recache_ttl(), m.flags.ttl()),
        (Some(30), Some(5), Some(-1))
    );

    let Request::MetaGet(m) = ok(b"mg Zm9v b v\r\n") else {
        panic!()
    };
    assert!(m.key.is_base64());
    assert_eq!(&*m.key.bytes(), b"foo");

    let Request::MetaSet(s) = ok(b"ms k 3 T10 F7 C5 MA I q\r\nabc\r\n") else {
        panic!()
    };
    assert_eq!(
        (s.mode, s.command(), s.data),
        (StoreCommand::Append, StoreCommand::Append, &b"abc"[..])
    );
    assert_eq!(
        (s.flags.ttl(), s.flags.client_flags(), s.flags.compare_cas()),
        (Some(10), Some(7), Some(5))
    );
    let Request::MetaSet(s) = ok(b"ms k 1 C5\r\nx\r\n") else {
        panic!()
    };
    assert_eq!(
        (s.mode, s.command()),
        (StoreCommand::Set, StoreCommand::Cas)
    );
    let Request::MetaSet(s) = ok(b"ms k 1 MR C5\r\nx\r\n") else {
        panic!()
    };
    assert_eq!(s.command(), StoreCommand::Cas);
    let Request::MetaSet(s) = ok(b"ms k 1 ME C5\r\nx\r\n") else {
        panic!()
    };
    assert_eq!(s.command(), StoreCommand::Add);

    let Request::MetaArithmetic(a) = ok(b"ma k N0 J10 D5 MD v\r\n") else {
        panic!()
    };
    assert_eq!(
        (
            a.mode,
            a.flags.delta(),
            a.flags.initial(),
            a.flags.vivify_ttl()
        ),
        (ArithOp::Decr, Some(5), Some(10), Some(0))
    );
    let Request::MetaArithmetic(a) = ok(b"ma k\r\n") else {
        panic!()
    };
    assert_eq!((a.mode, a.flags.delta()), (ArithOp::Incr, None));
    for (m, op) in [
        (b'I', ArithOp::Incr),
        (b'+', ArithOp::Incr),
        (b'-', ArithOp::Decr),
    ] {
        let line = [b"ma k M".as_slice(), &[m], b"\r\n"].concat();
        let Request::MetaArithmetic(a) = ok(&line) else {
            panic!()
        };
        assert_eq!(a.mode, op);
    }
    let Request::MetaDelete(d) = ok(b"md k C10 I T30 q\r\n") else {
        panic!()
    };
    assert!(d.flags.has(b'I') && d.flags.quiet());
    let Request::MetaDebug { key } = ok(b"me Zm9v b\r\n") else {
        panic!()
    };
    assert_eq!(&*key.bytes(), b"foo");
    let Request::MetaDebug { key } = ok(b"me Zm9v bx\r\n") else {
        panic!()
    };
    assert!(!key.is_base64());
}

#[test]
fn rejection_skip_noreply_close() {
    // Too large: swallow line + data + \r\n, replied unless noreply (checked before the data
    // arrives).
    let r = rejection(b"set a 0 0 2000000\r\n");
    assert_eq!(
        (r.kind, r.skip, r.noreply),
        (ErrorKind::TooLarge, 19 + 2_000_002, false)
    );
    let r = rejection(b"set a 0 0 2147483645 noreply\r\n");
    assert_eq!(
        (r.kind, r.skip, r.reply()),
        (ErrorKind::TooLarge, 30 + 2_147_483_647, &b""[..])
    );
    let r = rejection(b"ms a 2000000 T0\r\n");
    assert_eq!((r.kind, r.skip), (ErrorKind::TooLarge, 17 + 2_000_002));
    let r = rejection(b"ms a 5 MX\r\n");
    assert_eq!((r.kind, r.skip), (ErrorKind::InvalidSetMode, 11 + 7));
    // Bad data chunk: exactly len + 2 bytes after the line go.
    let r = rejection(b"set a 0 0 3\r\nabcde\r\n");
    assert_eq!((r.kind, r.skip), (ErrorKind::BadDataChunk, 13 + 5));
    let r = rejection(b"set a 0 0 1 noreply\r\nab\r\n");
    assert_eq!((r.kind, r.noreply), (ErrorKind::BadDataChunk, true));
    let r = rejection(b"ms a 1 q\r\nab\r\n");
    assert_eq!((r.kind, r.noreply), (ErrorKind::BadDataChunk, false));
    // Format errors skip only the line.
    let r = rejection(b"set a 0 0 -1\r\nxx\r\n");
    assert_eq!((r.kind, r.skip), (ErrorKind::BadCommandLineFormat, 14));
    // Closing errors.
    let r = rejection(&[b'x'; 2049]);
    assert!(r.close() && r.reply().is_empty());
    let r = rejection(b"GET / HTTP/1.1\r\n");
    assert_eq!((r.kind, r.close()), (ErrorKind::Http, true));
    // The configured limit is honoured.
    let small = ParserConfig::with_max_item_size(100);
    assert!(parse(b"set k 0 0 40\r\n", &small) == Err(ParseError::Incomplete));
    assert!(
        matches!(parse(b"set k 0 0 41\r\n", &small), Err(ParseError::Invalid(r)) if r.kind == ErrorKind::TooLarge)
    );
}

#[test]
fn error_kinds_reply_bytes() {
    assert_eq!(ErrorKind::UnknownCommand.reply(), b"ERROR\r\n");
    assert_eq!(
        ErrorKind::DeleteUsage.reply(),
        b"CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n"
    );
    assert_eq!(
        ErrorKind::MgOptionsTooLong.reply(),
        b"CLIENT_ERROR options flags are too long\r\n"
    );
    assert_eq!(
        ErrorKind::OptionsTooLong.reply(),
        b"CLIENT_ERROR options flags too long\r\n"
    );
    assert_eq!(
        ErrorKind::BadDataChunk.to_string(),
        "CLIENT_ERROR bad data chunk"
    );
}

#[test]
fn lease_commands_and_delete_hold_off() {
    let Request::Get(g) = ok(b"lease-get k1 k2\r\n") else {
        panic!()
    };
    assert_eq!(g.kind, GetKind::LeaseGet);
    assert_eq!(g.keys.collect::<Vec<_>>(), vec![&b"k1"[..], &b"k2"[..]]);
    let Request::Store(s) = ok(b"lease-set k 12345 7 60 3 noreply\r\nabc\r\n") else {
        panic!()
    };
    assert_eq!(
        (s.command, s.key, s.cas, s.flags, s.exptime, s.data, s.noreply),
        (
            StoreCommand::LeaseSet,
            &b"k"[..],
            12345,
            7,
            60,
            &b"abc"[..],
            true
        )
    );
    // A token that is not a number is a format error, as for cas.
    assert_eq!(
        rejection(b"lease-set k x 0 0 1\r\na\r\n").kind,
        ErrorKind::BadCommandLineFormat
    );
    assert_eq!(
        ok(b"delete k 5\r\n"),
        Request::Delete {
            key: b"k",
            holdoff: 5,
            noreply: false
        }
    );
    assert_eq!(
        ok(b"delete k 5 noreply\r\n"),
        Request::Delete {
            key: b"k",
            holdoff: 5,
            noreply: true
        }
    );
    // Anything else after the key is ignored, as memcached 1.6.45 does.
    assert_eq!(
        ok(b"delete k -5 x\r\n"),
        Request::Delete {
            key: b"k",
            holdoff: 0,
            noreply: false
        }
    );
}
