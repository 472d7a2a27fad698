//! Fuzz target for `memfleet_protocol::binary::parse`: any bytes, walked as pipelined binary
//! requests the way a server walks its read buffer.
//!
//! Not a reply check (the tests compare replies with memcached's). It asserts the parser's
//! contract: no panic, consumed lengths within the buffer, prefixes of an accepted request
//! `Incomplete`, encode-then-parse giving the request back, and the reply writers accepting
//! whatever the parser produced.
#![no_main]

use libfuzzer_sys::fuzz_target;
use memfleet_protocol::binary::{self, response, BinError, HEADER_LEN};
use memfleet_protocol::ParserConfig;

fuzz_target!(|data: &[u8]| {
    let cfg = ParserConfig::with_max_item_size(64 << 10);
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < data.len() {
        let buf = &data[pos..];
        match binary::parse(buf, &cfg) {
            Ok((req, used)) => {
                assert!((HEADER_LEN..=buf.len()).contains(&used));
                for cut in [0, HEADER_LEN - 1, used / 2, used - 1] {
                    assert_eq!(binary::parse(&buf[..cut], &cfg), Err(BinError::Incomplete));
                }
                let mut enc = Vec::new();
                req.encode(&mut enc);
                assert_eq!(binary::parse(&enc, &cfg), Ok((req, enc.len())));
                let to = req.reply_to();
                if let Some(key) = req.command.key() {
                    response::value(&mut out, to, 1, Some(key), key, req.cas);
                    response::miss(&mut out, to, Some(key));
                }
                response::success(&mut out, to, req.cas);
                out.clear();
                pos += used;
            }
            Err(BinError::Incomplete) => break,
            Err(BinError::Invalid(r)) => {
                assert!(r.skip >= HEADER_LEN);
                assert_eq!(r.reply_to.opcode, buf[1]);
                r.reply(&mut out);
                assert_eq!(out.is_empty(), r.kind.status().is_none());
                out.clear();
                if r.close() {
                    break;
                }
                pos = pos.saturating_add(r.skip);
            }
        }
    }
});
