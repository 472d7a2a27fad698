//! Fuzz target for `memfleet_protocol::reply::frame`, which the router and the client
//! library use to cut a server's byte stream into replies: a server is not trusted, so any
//! bytes must give a frame within the buffer, "incomplete" or an error — never a panic, and
//! never a frame that a shorter prefix would also have given.
#![no_main]

use libfuzzer_sys::fuzz_target;
use memfleet_protocol::reply::{frame, Frame, ReplyKind};

fuzz_target!(|data: &[u8]| {
    let Some((&selector, data)) = data.split_first() else {
        return;
    };
    let kind = match selector % 4 {
        0 => ReplyKind::Line,
        1 => ReplyKind::Retrieval,
        2 => ReplyKind::Meta,
        _ => ReplyKind::Stats,
    };
    let mut pos = 0;
    while pos < data.len() {
        let buf = &data[pos..];
        match frame(buf, kind, 64 << 10) {
            Ok(Frame::Complete(n)) => {
                assert!(n > 0 && n <= buf.len(), "frame of {n} bytes in {}", buf.len());
                // A reply is complete exactly at its end: no prefix already was.
                if n > 1 {
                    assert!(!matches!(frame(&buf[..n - 1], kind, 64 << 10), Ok(Frame::Complete(_))));
                }
                pos += n;
            }
            Ok(Frame::Incomplete) | Err(_) => break,
        }
    }
});
