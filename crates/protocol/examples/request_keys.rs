//! What `Request::keys` costs against the hand-written match it replaced in the server's
//! prefetch (the first four keys of each request), per request, over a mix of `get`, `mg`,
//! a six-key `get` and `set`:
//!
//! ```text
//! cargo run --release -p memfleet-protocol --example request_keys
//! ```

use memfleet_protocol::{parse, ParserConfig, Request};
use std::hint::black_box;
use std::time::Instant;

/// The server's key walk before `Request::keys` (meta keys as sent, base64 ones skipped).
fn old(request: &Request<'_>, mut f: impl FnMut(&[u8])) {
    match request {
        Request::Get(get) => get.keys.take(4).for_each(f),
        Request::Store(s) => f(s.key),
        Request::MetaGet(m) if !m.key.is_base64() => f(m.key.raw()),
        _ => {}
    }
}

fn main() {
    let cfg = ParserConfig::default();
    let lines: Vec<&[u8]> = vec![
        b"get user:12345\r\n",
        b"mg user:12345 v f t\r\n",
        b"get a b c d e f\r\n",
        b"set k 0 0 1\r\nv\r\n",
    ];
    let reqs: Vec<Request<'_>> = lines.iter().map(|l| parse(l, &cfg).unwrap().0).collect();
    for round in 0..3 {
        let n = 20_000_000u64;
        let t = Instant::now();
        let mut acc = 0usize;
        for i in 0..n {
            let r = &reqs[(i % 4) as usize];
            old(black_box(r), |k| {
                acc = acc.wrapping_add(k.len() + k[0] as usize)
            });
        }
        let a = t.elapsed().as_nanos() as f64 / n as f64;
        let t = Instant::now();
        for i in 0..n {
            let r = &reqs[(i % 4) as usize];
            black_box(r).keys().take(4).for_each(|k| {
                let k = k.bytes();
                acc = acc.wrapping_add(k.len() + k[0] as usize);
            });
        }
        let b = t.elapsed().as_nanos() as f64 / n as f64;
        println!("round {round}: hand-written {a:.2} ns/request, keys() {b:.2} ns/request ({acc})");
    }
}
