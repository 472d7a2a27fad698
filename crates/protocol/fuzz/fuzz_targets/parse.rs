//! Fuzz target for `memfleet_protocol::parse`: any bytes, split into pipelined requests the
//! way a server walks its read buffer.
//!
//! Not a reply check (the tests compare replies with memcached's). It asserts the parser's
//! contract: no panic, consumed lengths within the buffer, every prefix of an accepted
//! request `Incomplete`, and encode-then-parse of an accepted request giving it back.
#![no_main]

use libfuzzer_sys::fuzz_target;
use memfleet_protocol::{parse, ParseError, ParserConfig};

fuzz_target!(|data: &[u8]| {
    let cfg = ParserConfig::with_max_item_size(64 << 10);
    let mut pos = 0;
    while pos < data.len() {
        let buf = &data[pos..];
        match parse(buf, &cfg) {
            Ok((req, used)) => {
                assert!(used > 0 && used <= buf.len());
                for cut in [0, used / 2, used - 1] {
                    assert_eq!(parse(&buf[..cut], &cfg), Err(ParseError::Incomplete));
                }
                let mut enc = Vec::new();
                req.encode(&mut enc);
                let (again, used2) = parse(&enc, &cfg).expect("re-parse of an encoded request");
                assert_eq!(again, req);
                assert_eq!(used2, enc.len());
                pos += used;
            }
            Err(ParseError::Incomplete) => break,
            Err(ParseError::Invalid(r)) => {
                assert!(r.skip > 0);
                if r.close() {
                    break;
                }
                pos = pos.saturating_add(r.skip);
            }
        }
    }
});
