//! memcached's ASCII authentication (`-Y authfile`), the same exchanges through Debian's
//! memcached and `memfleet server`: before a `set` carrying `user password`, everything is
//! refused with the same words; a wrong pair may retry; the authenticating `set` stores
//! nothing; afterwards the connection works as any other. And what memfleet adds: binary
//! connections are closed (no SASL), and UDP cannot be combined with authentication.

use crate::support;

use memfleet_protocol::reply::{frame, Frame, ReplyKind};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;
use support::{free_port, Killed};

/// (request, reply shape)
const EXCHANGES: &[&[(&str, ReplyKind)]] = &[
    &[
        ("get foo\r\n", ReplyKind::Retrieval),
        ("version\r\n", ReplyKind::Line),
        ("mg foo v\r\n", ReplyKind::Meta),
        ("delete foo\r\n", ReplyKind::Line),
        ("set foo 0 0 7\r\nuser ba\r\n", ReplyKind::Line),
        ("set foo 0 0 12\r\nuser secret2\r\n", ReplyKind::Line),
        ("set foo 0 0 11\r\nuser secret\r\n", ReplyKind::Line),
        ("get foo\r\n", ReplyKind::Retrieval),
        ("set a 0 0 1\r\nx\r\n", ReplyKind::Line),
        ("get a\r\n", ReplyKind::Retrieval),
        ("delete a\r\n", ReplyKind::Line),
    ],
    &[
        ("incr n 1\r\n", ReplyKind::Line),
        ("flush_all\r\n", ReplyKind::Line),
        ("set k 0 0 12\r\nother secret\r\n", ReplyKind::Line),
        ("bogus\r\n", ReplyKind::Line),
        ("set k 0 0 11\r\nother secret\r\n", ReplyKind::Line),
        ("set k 0 0 11\r\nuser secret\r\n", ReplyKind::Line),
        ("incr n 1\r\n", ReplyKind::Line),
    ],
];

fn start_memfleet(authfile: &std::path::Path) -> (Killed, u16) {
    support::memfleet_server(&["-t", "1", "-Y", &authfile.display().to_string()])
}

fn start_memcached(authfile: &std::path::Path) -> Option<(Killed, u16)> {
    if !std::path::Path::new("/usr/bin/memcached").exists() {
        assert!(
            std::env::var("CI").is_err(),
            "memcached is needed under CI (scripts/test installs it)"
        );
        return None;
    }
    Some(support::memcached(&[
        "-t",
        "1",
        "-Y",
        &authfile.display().to_string(),
    ]))
}

/// Runs one exchange on a new connection; the reply to each request.
fn run(port: u16, exchange: &[(&str, ReplyKind)]) -> Vec<String> {
    let mut s = support::connect(port, Duration::from_secs(5));
    let mut replies = Vec::new();
    for (request, kind) in exchange {
        s.write_all(request.as_bytes()).unwrap();
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            if let Ok(Frame::Complete(n)) = frame(&buf, *kind, 1 << 20) {
                replies.push(String::from_utf8_lossy(&buf[..n]).into_owned());
                break;
            }
            let n = s.read(&mut chunk).unwrap();
            assert!(n > 0, "connection closed after {request:?}");
            buf.extend_from_slice(&chunk[..n]);
        }
    }
    replies
}

#[test]
fn ascii_auth_answers_as_memcached_does() {
    let dir = std::env::temp_dir().join(format!("memfleet-auth-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let authfile = dir.join("authfile");
    std::fs::write(&authfile, "user:secret\n").unwrap();
    // memcached reads it as nobody.
    let _ = Command::new("chmod")
        .arg("-R")
        .arg("a+rX")
        .arg(&dir)
        .status();
    let (_memfleet, mf) = start_memfleet(&authfile);
    let memcached = start_memcached(&authfile);
    for exchange in EXCHANGES {
        let got = run(mf, exchange);
        if let Some((_, mc)) = &memcached {
            let want = run(*mc, exchange);
            assert_eq!(got, want, "memfleet vs memcached for {exchange:?}");
        }
        // Whatever memcached says, these hold.
        assert!(
            got[0].starts_with("CLIENT_ERROR unauthenticated"),
            "{got:?}"
        );
    }
    let first = run(mf, EXCHANGES[0]);
    assert_eq!(first[4], "CLIENT_ERROR authentication failure\r\n");
    assert_eq!(first[6], "STORED\r\n");
    assert_eq!(
        first[7], "END\r\n",
        "the authenticating set stored its data"
    );
    assert_eq!(first[9], "VALUE a 0 1\r\nx\r\nEND\r\n");

    // memcached's counters of it, once in.
    let stats = run(
        mf,
        &[
            ("set x 0 0 11\r\nuser secret\r\n", ReplyKind::Line),
            ("stats\r\n", ReplyKind::Stats),
        ],
    );
    assert!(stats[1].contains("STAT auth_cmds 9\r\n"), "{}", stats[1]);
    assert!(stats[1].contains("STAT auth_errors 5\r\n"), "{}", stats[1]);

    // No SASL: a binary-protocol connection is closed.
    let mut s = TcpStream::connect(("127.0.0.1", mf)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut get = vec![0x80u8, 0x00, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0];
    get.extend_from_slice(&[0; 8]);
    get.push(b'k');
    s.write_all(&get).unwrap();
    let mut buf = [0u8; 64];
    assert_eq!(
        s.read(&mut buf).unwrap_or(0),
        0,
        "binary connection not closed"
    );

    // UDP cannot authenticate: refused at start, with the reason.
    let out = Command::new(env!("CARGO_BIN_EXE_memfleet"))
        .args([
            "server",
            "-p",
            &free_port().to_string(),
            "-U",
            "31999",
            "-Y",
        ])
        .arg(&authfile)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot be combined"));
    let _ = std::fs::remove_dir_all(&dir);
}
