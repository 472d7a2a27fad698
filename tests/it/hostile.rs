//! A catalogue of hostile input against `memfleet server` (issue 10): truncated and lying
//! data blocks, huge and negative numbers, bad keys, binary garbage, endless lines, garbage
//! pipelined after valid commands, slow-drip writers, a client that never reads. Each input
//! goes on its own connection and must get an error reply or a closed connection — never a
//! crash — while items stored before stay intact and the server's memory stays bounded.
//! (The exact words are compared with memcached's by `tests/it/differential.rs`; this test is
//! about survival.)

use crate::support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// How an input must be answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expect {
    /// Some reply line starts with ERROR, CLIENT_ERROR or SERVER_ERROR (the connection may
    /// also close afterwards).
    Error,
    /// The server closes the connection (possibly after an error line).
    Close,
    /// Any of the two.
    ErrorOrClose,
    /// No reply yet and the connection stays open: the request is incomplete and the
    /// server waits for the rest (as memcached does), holding no more than its limits.
    Waits,
    /// Accepted as memcached accepts it (its key rules are spaces and length only; data is
    /// opaque; flags wrap): some reply, no error required.
    Answered,
}

fn catalogue() -> Vec<(&'static str, Vec<u8>, Expect)> {
    use Expect::*;
    let long_key = "k".repeat(251);
    let mut c: Vec<(&'static str, Vec<u8>, Expect)> = vec![
        (
            "truncated data block",
            b"set t 0 0 10\r\nabc".to_vec(),
            Waits,
        ),
        (
            "data longer than announced",
            b"set t 0 0 3\r\nabcdef\r\n".to_vec(),
            Error,
        ),
        (
            "data shorter than announced, newline early",
            b"set t 0 0 10\r\nab\r\n".to_vec(),
            Waits,
        ),
        (
            "length not a number",
            b"set t 0 0 abc\r\nx\r\n".to_vec(),
            Error,
        ),
        ("negative length", b"set t 0 0 -1\r\nx\r\n".to_vec(), Error),
        (
            "length over u64",
            b"set t 0 0 99999999999999999999999\r\nx\r\n".to_vec(),
            Error,
        ),
        (
            "huge length (2 GiB)",
            b"set t 0 0 2147483648\r\n".to_vec(),
            ErrorOrClose,
        ),
        (
            // Refused, but (as in memcached 1.6.45) the error goes out only once the
            // refused block has been swallowed.
            "length just over the item limit",
            format!("set t 0 0 {}\r\n", 2 << 20).into_bytes(),
            Waits,
        ),
        (
            "flags over u32 (memcached stores it too)",
            b"set t 4294967296 0 1\r\nx\r\n".to_vec(),
            Answered,
        ),
        ("negative flags", b"set t -1 0 1\r\nx\r\n".to_vec(), Error),
        (
            "exptime not a number",
            b"set t 0 soon 1\r\nx\r\n".to_vec(),
            Error,
        ),
        (
            "cas unique over u64",
            b"cas t 0 0 1 18446744073709551616\r\nx\r\n".to_vec(),
            Error,
        ),
        (
            "incr delta over u64",
            b"incr n 18446744073709551616\r\n".to_vec(),
            Error,
        ),
        ("incr negative delta", b"incr n -5\r\n".to_vec(), Error),
        ("touch bad exptime", b"touch t x\r\n".to_vec(), Error),
        (
            "251-byte key in get",
            format!("get {long_key}\r\n").into_bytes(),
            Error,
        ),
        (
            "251-byte key in set",
            format!("set {long_key} 0 0 1\r\nx\r\n").into_bytes(),
            Error,
        ),
        (
            "251-byte key in delete",
            format!("delete {long_key}\r\n").into_bytes(),
            Error,
        ),
        (
            "251-byte key in mg",
            format!("mg {long_key} v\r\n").into_bytes(),
            Error,
        ),
        (
            "control character in key",
            b"get a\x01b\r\n".to_vec(),
            Answered,
        ),
        ("NUL in key", b"get a\0b\r\n".to_vec(), Answered),
        (
            "DEL in key",
            b"set a\x7fb 0 0 1\r\nx\r\n".to_vec(),
            Answered,
        ),
        ("unknown command", b"frobnicate\r\n".to_vec(), Error),
        ("empty line", b"\r\n".to_vec(), Error),
        ("only spaces", b"        \r\n".to_vec(), Error),
        (
            "binary garbage",
            (0u8..=255).rev().cycle().take(4096).collect(),
            ErrorOrClose,
        ),
        (
            "binary-protocol magic with a lying body length",
            {
                let mut b = vec![0x80u8, 0x01, 0, 1, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff];
                b.extend_from_slice(&[0; 12]);
                b
            },
            Waits,
        ),
        ("a 3000-byte line with no newline", vec![b'g'; 3000], Close),
        (
            "a 64 KiB line with no newline",
            vec![b'x'; 64 * 1024],
            Close,
        ),
        (
            "HTTP request",
            b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
            ErrorOrClose,
        ),
        (
            "garbage after valid commands",
            b"set ok 0 0 2\r\nhi\r\nget ok\r\n\x00\x01\x02garbage\r\nversion\r\n".to_vec(),
            Error,
        ),
        (
            "a set whose data is a command",
            b"set t 0 0 5\r\nget a\r\n".to_vec(),
            Answered,
        ),
        ("meta with an unknown flag", b"mg a v !\r\n".to_vec(), Error),
        (
            "meta numeric flag not a number",
            b"mg a T9x\r\n".to_vec(),
            Error,
        ),
        (
            "meta set with a lying size",
            b"ms a 10\r\nabc\r\nmn\r\n".to_vec(),
            Waits,
        ),
        ("meta set without a size", b"ms a\r\nx\r\n".to_vec(), Error),
        (
            "meta base64 key that is not base64",
            b"mg !!!! b v\r\n".to_vec(),
            Error,
        ),
        (
            "meta opaque over 32 bytes",
            format!("mg a O{}\r\n", "o".repeat(40)).into_bytes(),
            Error,
        ),
        (
            "too many meta flags",
            format!("mg a {}\r\n", "v ".repeat(40)).into_bytes(),
            Error,
        ),
        ("verbosity garbage", b"verbosity banana\r\n".to_vec(), Error),
        ("flush_all garbage", b"flush_all soon\r\n".to_vec(), Error),
        (
            "gat without keys and bad exptime",
            b"gat x\r\n".to_vec(),
            Error,
        ),
        (
            "lease-set with a bogus token",
            b"lease-set t x 0 0 1\r\nx\r\n".to_vec(),
            Error,
        ),
        // memcached 1.6.45 ignores what follows the key.
        ("delete with junk", b"delete a b c d\r\n".to_vec(), Answered),
        (
            "stats garbage",
            b"stats \x01\x02\r\n".to_vec(),
            ErrorOrClose,
        ),
    ];
    // Pipelined: many bad requests in one write.
    c.push((
        "a pipeline of 1,000 bad requests",
        b"bad\r\n".repeat(1000),
        Error,
    ));
    c
}

/// Sends `input` and collects replies until the server closes the connection or is quiet
/// for 300 ms; true if it closed.
fn exchange(port: u16, input: &[u8], drip: bool) -> (Vec<u8>, bool) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let write = if drip {
        input.iter().try_for_each(|b| {
            std::thread::sleep(Duration::from_millis(2));
            s.write_all(std::slice::from_ref(b))
        })
    } else {
        s.write_all(input)
    };
    let mut out = Vec::new();
    if write.is_err() {
        return (out, true);
    }
    let mut buf = [0u8; 65536];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return (out, true),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return (out, true),
            Err(_) => return (out, false),
        }
    }
}

/// Sends `input` and reads exactly `want.len()` bytes.
fn exact(port: u16, input: &[u8], want: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(input).unwrap();
    let mut got = vec![0; want.len()];
    s.read_exact(&mut got).unwrap();
    got
}

fn is_error(reply: &[u8]) -> bool {
    reply.split(|&b| b == b'\n').any(|l| {
        l.starts_with(b"ERROR") || l.starts_with(b"CLIENT_ERROR") || l.starts_with(b"SERVER_ERROR")
    })
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap()
}

#[test]
fn hostile_input_gets_errors_or_a_close_and_breaks_nothing() {
    let (mut server, port) = support::memfleet_server(&["-t", "2", "-m", "64"]);
    let pid = server.0.id();
    drop(support::connect(port, Duration::from_secs(10)));
    // What must survive.
    let values: Vec<(String, Vec<u8>)> = (0..200)
        .map(|i| {
            (
                format!("keep:{i}"),
                format!("value {i} ").repeat(i % 50 + 1).into_bytes(),
            )
        })
        .collect();
    for (k, v) in &values {
        let mut set = format!("set {k} {} 0 {}\r\n", v.len() % 7, v.len()).into_bytes();
        set.extend_from_slice(v);
        set.extend_from_slice(b"\r\n");
        assert_eq!(exact(port, &set, b"STORED\r\n"), b"STORED\r\n");
    }
    let rss_before = rss_kib(pid);

    let catalogue = catalogue();
    assert!(catalogue.len() >= 40);
    let mut failures = Vec::new();
    for (name, input, expect) in &catalogue {
        let (reply, closed) = exchange(port, input, false);
        let ok = match expect {
            Expect::Error => is_error(&reply),
            Expect::Close => closed,
            Expect::ErrorOrClose => closed || is_error(&reply),
            Expect::Waits => !closed && reply.is_empty(),
            Expect::Answered => !closed && !reply.is_empty(),
        };
        if !ok {
            failures.push(format!(
                "{name}: expected {expect:?}, got {:?} (closed: {closed})",
                String::from_utf8_lossy(&reply[..reply.len().min(120)])
            ));
        }
        assert!(
            server.0.try_wait().unwrap().is_none(),
            "the server died on: {name}"
        );
    }
    // Slow drip: a request a byte at a time is still answered correctly.
    let (reply, _) = exchange(port, b"set drip 0 0 5\r\nslow!\r\nget drip\r\n", true);
    assert_eq!(reply, b"STORED\r\nVALUE drip 0 5\r\nslow!\r\nEND\r\n");
    // A client that never reads: it asks for far more than the socket buffers hold; the
    // server stops serving it rather than buffer without bound.
    let mut hog = TcpStream::connect(("127.0.0.1", port)).unwrap();
    hog.set_write_timeout(Some(Duration::from_secs(2))).unwrap();
    let big_get = format!("get {}\r\n", "keep:49 ".repeat(100)).into_bytes();
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(3) {
        if hog.write_all(&big_get).is_err() {
            break; // its receive window is full too: the server stopped reading it
        }
    }
    let rss_after = rss_kib(pid);
    // Meanwhile everyone else is served, and nothing stored was touched.
    for (k, v) in &values {
        let mut want = format!("VALUE {k} {} {}\r\n", v.len() % 7, v.len()).into_bytes();
        want.extend_from_slice(v);
        want.extend_from_slice(b"\r\nEND\r\n");
        let reply = exact(port, format!("get {k}\r\n").as_bytes(), &want);
        assert_eq!(reply, want, "{k} changed");
    }
    drop(hog);
    assert!(
        rss_after < rss_before + 64 * 1024,
        "RSS grew from {rss_before} KiB to {rss_after} KiB under hostile input"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(server.0.try_wait().unwrap().is_none(), "the server died");
}
