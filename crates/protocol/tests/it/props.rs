//! Property tests: no input makes the parser panic or misreport lengths; anything it
//! accepts survives encode-then-parse unchanged; generated valid requests round-trip.
//!
//! Not here: exact reply bytes (`memcached_replies.rs`).

use crate::common;

use memfleet_protocol::*;
use proptest::prelude::*;

fn cfg() -> ParserConfig {
    ParserConfig::with_max_item_size(4096)
}

/// Checks the invariants of one `parse` call and, for an accepted request, that encoding it
/// and parsing the result gives the same request.
fn check(buf: &[u8]) -> Result<(), TestCaseError> {
    match parse(buf, &cfg()) {
        Ok((req, used)) => {
            prop_assert!(used > 0 && used <= buf.len());
            let mut enc = Vec::new();
            req.encode(&mut enc);
            let (again, used2) = parse(&enc, &cfg()).map_err(|e| {
                TestCaseError::fail(format!(
                    "re-parse of {:?}: {e:?}",
                    enc.escape_ascii().to_string()
                ))
            })?;
            prop_assert_eq!(again, req);
            prop_assert_eq!(used2, enc.len());
            let mut enc2 = Vec::new();
            again.encode(&mut enc2);
            prop_assert_eq!(enc2, enc);
        }
        Err(ParseError::Incomplete) => {}
        Err(ParseError::Invalid(r)) => {
            prop_assert!(r.skip > 0);
            prop_assert!(
                r.close()
                    || r.skip <= buf.len()
                    || matches!(
                        r.kind,
                        ErrorKind::TooLarge
                            | ErrorKind::InvalidSetMode
                            | ErrorKind::OpaqueTooLong
                            | ErrorKind::BadToken
                            | ErrorKind::DuplicateFlag
                            | ErrorKind::InvalidFlag
                            | ErrorKind::KeyDecode
                            | ErrorKind::ModeLength
                            | ErrorKind::InvalidInitial
                            | ErrorKind::InvalidDeltaFlag
                            | ErrorKind::BadCommandLineFormat
                    )
            );
        }
    }
    Ok(())
}

fn token() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        // Commands.
        prop::sample::select(vec![
            "get",
            "gets",
            "gat",
            "gats",
            "bget",
            "set",
            "add",
            "replace",
            "append",
            "prepend",
            "cas",
            "delete",
            "incr",
            "decr",
            "touch",
            "flush_all",
            "version",
            "verbosity",
            "stats",
            "quit",
            "mg",
            "ms",
            "md",
            "ma",
            "mn",
            "me",
            "shutdown",
            "lru",
            "watch",
            "cache_memlimit",
            "noreply",
            "HTTP/1.1",
            "b",
            "0",
        ])
        .prop_map(|s| s.as_bytes().to_vec()),
        // Numbers, including the quirky ones.
        prop::sample::select(vec![
            "1",
            "-1",
            "+5",
            "10",
            "4294967297",
            "2147483647",
            "18446744073709551615",
            "-0",
            "1x",
            "3",
        ])
        .prop_map(|s| s.as_bytes().to_vec()),
        // Meta flags with tokens.
        (
            prop::sample::select(b"bcfhklqstuvINTRCFMJDOPLEZ".to_vec()),
            "[0-9a-zA-Z+=-]{0,4}"
        )
            .prop_map(|(f, t)| [vec![f], t.into_bytes()].concat()),
        // Keys, base64 keys, long keys.
        "[a-z]{1,8}".prop_map(String::into_bytes),
        prop::sample::select(vec!["Zm9v", "Zm8=", "!!", "Zg=="])
            .prop_map(|s| s.as_bytes().to_vec()),
        (245usize..256).prop_map(|n| vec![b'k'; n]),
        // Anything but space and newline.
        prop::collection::vec(
            any::<u8>().prop_filter("sep", |b| *b != b' ' && *b != b'\n'),
            1..6
        ),
    ]
}

/// A line of tokens, its terminator, and maybe a data block.
fn soup() -> impl Strategy<Value = Vec<u8>> {
    (
        prop::collection::vec(token(), 0..8),
        prop::sample::select(vec![&b"\r\n"[..], b"\n", b"\r\r\n", b"", b" \r\n"]),
        prop::option::of(prop::collection::vec(any::<u8>(), 0..12)),
        prop::sample::select(vec![&b"\r\n"[..], b"", b"\n", b"xx"]),
    )
        .prop_map(|(toks, end, data, data_end)| {
            let mut v = toks.join(&b' ');
            v.extend_from_slice(end);
            if let Some(d) = data {
                v.extend_from_slice(&d);
                v.extend_from_slice(data_end);
            }
            v
        })
}

fn key() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(
        any::<u8>().prop_filter("sep", |b| !matches!(*b, b' ' | b'\n' | 0)),
        1..=250,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(buf in prop::collection::vec(any::<u8>(), 0..3000)) {
        check(&buf)?;
        // The whole stream through a connection driver terminates, whatever it holds.
        let _ = common::run(&buf);
    }

    #[test]
    fn token_soup_round_trips(lines in prop::collection::vec(soup(), 1..4)) {
        let stream = lines.concat();
        let mut pos = 0;
        // Walk the pipeline as a server would, checking each request.
        while pos < stream.len() {
            check(&stream[pos..])?;
            match parse(&stream[pos..], &cfg()) {
                Ok((_, used)) => pos += used,
                Err(ParseError::Invalid(r)) if !r.close() => pos += r.skip,
                _ => break,
            }
        }
        let _ = common::run(&stream);
    }

    #[test]
    fn store_round_trips(
        cmd in prop::sample::select(vec![StoreCommand::Set, StoreCommand::Add, StoreCommand::Replace,
            StoreCommand::Append, StoreCommand::Prepend, StoreCommand::Cas, StoreCommand::LeaseSet]),
        key in key(),
        flags in any::<u32>(),
        exptime in any::<i32>(),
        cas in any::<u64>(),
        noreply in any::<bool>(),
        data in prop::collection::vec(any::<u8>(), 0..512),
    ) {
        let cas = if matches!(cmd, StoreCommand::Cas | StoreCommand::LeaseSet) { cas } else { 0 };
        let req = Request::Store(Store { command: cmd, key: &key, flags, exptime: exptime.into(), cas, noreply, data: &data });
        let mut enc = Vec::new();
        req.encode(&mut enc);
        prop_assert_eq!(parse(&enc, &cfg()), Ok((req, enc.len())));
    }

    #[test]
    fn get_and_simple_commands_round_trip(
        keys in prop::collection::vec(key(), 1..40),
        kind in prop::sample::select(vec![GetKind::Get, GetKind::Gets, GetKind::Gat, GetKind::Gats, GetKind::LeaseGet]),
        exptime in any::<i32>(),
        delta in any::<u64>(),
        noreply in any::<bool>(),
    ) {
        let line = keys.join(&b' ');
        let exptime = if kind.touches() { i64::from(exptime) } else { 0 };
        let reqs = [
            Request::Get(Get { kind, exptime, keys: Tokens::new(&line) }),
            Request::Delete { key: &keys[0], holdoff: 0, noreply },
            Request::Delete { key: &keys[0], holdoff: delta as u32, noreply },
            Request::Arith { op: ArithOp::Decr, key: &keys[0], delta, noreply },
            Request::Touch { key: &keys[0], exptime, noreply },
            Request::FlushAll { delay: exptime, noreply },
            Request::Verbosity { level: delta as u32, noreply },
        ];
        for req in reqs {
            let mut enc = Vec::new();
            req.encode(&mut enc);
            prop_assert_eq!(parse(&enc, &cfg()), Ok((req, enc.len())));
        }
    }

    #[test]
    fn prefixes_of_valid_requests_are_incomplete(lines in prop::collection::vec(soup(), 1..2)) {
        let stream = lines.concat();
        if let Ok((_, used)) = parse(&stream, &cfg()) {
            for cut in 0..used {
                prop_assert_eq!(parse(&stream[..cut], &cfg()), Err(ParseError::Incomplete));
            }
        }
    }
}
