//! memcached's binary protocol through `memfleet router`: a binary client gets from the
//! router, packet for packet, what the server behind it answers the same requests directly
//! (the router carries them as meta requests); with `--auth-file` the router asks binary
//! clients for SASL PLAIN as `memfleet server -S` does, side by side; a server that does
//! not answer is a "Temporary failure" naming it.

use crate::support;

use memfleet_protocol::binary::{
    BinCommand, BinRequest, ConcatOp, Header, SetOp, HEADER_LEN, NO_AUTO_CREATE,
};
use memfleet_protocol::ArithOp;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::Duration;
use support::{free_port, memfleet_server, Killed};

const TIMEOUT: Duration = Duration::from_secs(15);

/// One response packet: opcode, status, opaque, CAS, extras, key, value.
#[derive(Debug, PartialEq, Eq, Clone)]
struct Packet {
    opcode: u8,
    status: u16,
    opaque: u32,
    cas: u64,
    extras: Vec<u8>,
    key: Vec<u8>,
    value: Vec<u8>,
}

struct Bin(TcpStream);

impl Bin {
    fn open(port: u16) -> Bin {
        Bin(support::connect(port, TIMEOUT))
    }

    fn send(&mut self, requests: &[BinRequest<'_>]) {
        let mut out = Vec::new();
        for r in requests {
            r.encode(&mut out);
        }
        self.0.write_all(&out).unwrap();
    }

    /// Sends a SASL packet (opcode, key = mechanism, value = data).
    fn send_sasl(&mut self, opcode: u8, mech: &[u8], data: &[u8]) {
        let mut out = Vec::new();
        memfleet_protocol::binary::sasl::request(&mut out, opcode, mech, data, 99);
        self.0.write_all(&out).unwrap();
    }

    /// The next packet, or `None` when the connection closed.
    fn packet(&mut self) -> Option<Packet> {
        let mut head = [0u8; HEADER_LEN];
        if self.0.read_exact(&mut head).is_err() {
            return None;
        }
        let h = Header::read(&head).unwrap();
        assert_eq!(h.magic, 0x81, "a response");
        let mut body = vec![0; h.body_len as usize];
        self.0.read_exact(&mut body).unwrap();
        let (extras, rest) = body.split_at(usize::from(h.extras_len));
        let (key, value) = rest.split_at(usize::from(h.key_len));
        Some(Packet {
            opcode: h.opcode,
            status: h.vbucket_or_status,
            opaque: h.opaque,
            cas: h.cas,
            extras: extras.to_vec(),
            key: key.to_vec(),
            value: value.to_vec(),
        })
    }

    fn ask(&mut self, request: BinRequest<'_>) -> Packet {
        self.send(&[request]);
        self.packet().expect("a response")
    }
}

fn req(command: BinCommand<'_>, opaque: u32, cas: u64) -> BinRequest<'_> {
    BinRequest {
        command,
        opaque,
        cas,
    }
}

fn get(key: &[u8], with_key: bool, quiet: bool) -> BinCommand<'_> {
    BinCommand::Get {
        key,
        quiet,
        with_key,
    }
}

fn set<'a>(op: SetOp, key: &'a [u8], value: &'a [u8], quiet: bool) -> BinCommand<'a> {
    BinCommand::Store {
        op,
        key,
        flags: 7,
        exptime: 0,
        value,
        quiet,
    }
}

fn arith(op: ArithOp, key: &[u8], exptime: u32) -> BinCommand<'_> {
    BinCommand::Arith {
        op,
        key,
        delta: 5,
        initial: 10,
        exptime,
        quiet: false,
    }
}

/// Runs the exchange on a fresh connection to `port`: every response, in order (a batch of
/// quiet requests answered only where memcached answers them: hits and errors), until the final quit's
/// close.
fn exchange(port: u16) -> Vec<Packet> {
    let mut c = Bin::open(port);
    let mut got = Vec::new();
    let odd: &[u8] = b"a b\x01\xff";
    let one = |c: &mut Bin, got: &mut Vec<Packet>, r| got.push(c.ask(r));
    one(&mut c, &mut got, req(get(b"a", false, false), 1, 0));
    one(&mut c, &mut got, req(get(b"a", true, false), 2, 0));
    one(
        &mut c,
        &mut got,
        req(set(SetOp::Set, b"a", b"hello", false), 3, 0),
    );
    one(&mut c, &mut got, req(get(b"a", false, false), 4, 0));
    one(&mut c, &mut got, req(get(b"a", true, false), 5, 0));
    one(
        &mut c,
        &mut got,
        req(set(SetOp::Add, b"a", b"x", false), 6, 0),
    );
    one(
        &mut c,
        &mut got,
        req(set(SetOp::Replace, b"b", b"x", false), 7, 0),
    );
    let append = BinCommand::Concat {
        op: ConcatOp::Append,
        key: b"a",
        value: b"!",
        quiet: false,
    };
    one(&mut c, &mut got, req(append, 8, 0));
    let prepend = BinCommand::Concat {
        op: ConcatOp::Prepend,
        key: b"b",
        value: b"!",
        quiet: false,
    };
    one(&mut c, &mut got, req(prepend, 9, 0));
    // A stale CAS, then the one the last write gave.
    one(
        &mut c,
        &mut got,
        req(set(SetOp::Set, b"a", b"cas", false), 10, 1),
    );
    let current = c.ask(req(get(b"a", false, false), 11, 0));
    got.push(current.clone());
    one(
        &mut c,
        &mut got,
        req(set(SetOp::Set, b"a", b"cas", false), 12, current.cas),
    );
    one(&mut c, &mut got, req(arith(ArithOp::Incr, b"n", 0), 13, 0));
    one(&mut c, &mut got, req(arith(ArithOp::Incr, b"n", 0), 14, 0));
    one(
        &mut c,
        &mut got,
        req(arith(ArithOp::Decr, b"m", NO_AUTO_CREATE), 15, 0),
    );
    one(&mut c, &mut got, req(arith(ArithOp::Incr, b"a", 0), 16, 0));
    let touch = BinCommand::Touch {
        key: b"a",
        exptime: 100,
    };
    one(&mut c, &mut got, req(touch, 17, 0));
    let gat = BinCommand::GetAndTouch {
        key: b"a",
        exptime: 100,
        quiet: false,
        with_key: true,
    };
    one(&mut c, &mut got, req(gat, 18, 0));
    one(
        &mut c,
        &mut got,
        req(
            BinCommand::Delete {
                key: b"a",
                quiet: false,
            },
            19,
            0,
        ),
    );
    one(
        &mut c,
        &mut got,
        req(
            BinCommand::Delete {
                key: b"a",
                quiet: false,
            },
            20,
            0,
        ),
    );
    one(
        &mut c,
        &mut got,
        req(set(SetOp::Set, odd, b"odd", false), 21, 0),
    );
    one(&mut c, &mut got, req(get(odd, true, false), 22, 0));
    // A pipelined batch of quiet requests and a noop: only the hit and the noop answer.
    c.send(&[
        req(set(SetOp::Set, b"x1", b"one", true), 30, 0),
        req(set(SetOp::Set, b"x2", b"two", true), 31, 0),
        req(get(b"zz", true, true), 32, 0),
        req(get(b"x1", true, true), 33, 0),
        req(
            BinCommand::Delete {
                key: b"zz",
                quiet: true,
            },
            34,
            0,
        ),
        req(BinCommand::Noop, 35, 0),
    ]);
    for _ in 0..3 {
        got.push(c.packet().expect("a response"));
    }
    one(
        &mut c,
        &mut got,
        req(
            BinCommand::Flush {
                exptime: None,
                quiet: false,
            },
            40,
            0,
        ),
    );
    one(&mut c, &mut got, req(get(b"x1", false, false), 41, 0));
    one(
        &mut c,
        &mut got,
        req(BinCommand::Quit { quiet: false }, 42, 0),
    );
    assert_eq!(c.packet(), None, "quit closes");
    got
}

/// A scratch directory for one test (the caller removes it).
fn scratch(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "memfleet-router-binary-{}-{tag}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `memfleet router` on the configuration `toml` (written into `dir`, its log beside it)
/// with `extra` arguments, accepting connections on `listen` when this returns.
fn start_router(dir: &Path, toml: &str, listen: u16, extra: &[&str]) -> Killed {
    let config = dir.join("router.toml");
    std::fs::write(&config, toml).unwrap();
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_memfleet"))
        .args(["router", "-t", "1", "--config"])
        .arg(&config)
        .args(extra)
        .stderr(std::fs::File::create(dir.join("router.log")).unwrap())
        .spawn()
        .expect("memfleet router starts");
    let router = Killed(child);
    drop(support::connect(listen, TIMEOUT));
    router
}

/// `memfleet router` with one pool over `servers`, `extra` arguments, listening when this
/// returns.
fn router(servers: &[u16], extra: &[&str], tag: &str) -> (Killed, u16, PathBuf) {
    let port = free_port();
    let dir = scratch(tag);
    let servers: Vec<String> = servers
        .iter()
        .map(|p| format!("\"127.0.0.1:{p}\""))
        .collect();
    let toml = format!(
        "[pools.main]\nlisten = \"127.0.0.1:{port}\"\nservers = [{}]\ntimeout_ms = 5000\n",
        servers.join(", ")
    );
    let router = start_router(&dir, &toml, port, extra);
    (router, port, dir)
}

fn server(extra: &[&str]) -> (Killed, u16) {
    let mut args = vec!["-t", "1", "-m", "16"];
    args.extend_from_slice(extra);
    let started = memfleet_server(&args);
    drop(support::connect(started.1, TIMEOUT));
    started
}

#[test]
fn a_binary_client_gets_through_the_router_what_the_server_answers_it() {
    let (_direct, direct) = server(&[]);
    let (_behind, behind) = server(&[]);
    let (_router, port, dir) = router(&[behind], &[], "exchange");
    let want = exchange(direct);
    let got = exchange(port);
    let _ = std::fs::remove_dir_all(dir);
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g, w, "response {i}");
    }
    // What the exchange shows, beyond being the same: the statuses memcached sends.
    let statuses: Vec<u16> = want.iter().map(|p| p.status).collect();
    assert_eq!(
        statuses,
        [1, 1, 0, 0, 0, 2, 1, 0, 5, 2, 0, 0, 0, 0, 1, 6, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 1, 0]
    );
    assert_eq!(want[4].key, b"a");
    assert_eq!(want[4].value, b"hello");
    assert_eq!(want[4].extras, 7u32.to_be_bytes());
    assert_eq!(want[21].key, b"a b\x01\xff");
    assert_eq!(want[22].key, b"x1", "the quiet batch's one hit");
    assert_eq!(
        want[23].opaque, 34,
        "a quiet delete's miss is still answered"
    );
    assert_eq!(want[24].opaque, 35, "then the noop");

    // The binary version and a stat through the router: the router's own.
    let mut c = Bin::open(port);
    let v = c.ask(req(BinCommand::Version, 1, 0));
    assert!(v.value.starts_with(b"1.6.45-memfleet-router-"), "{v:?}");
    c.send(&[req(BinCommand::Stat { key: b"" }, 2, 0)]);
    let mut stats = 0;
    loop {
        let p = c.packet().expect("a stat");
        if p.key.is_empty() {
            break;
        }
        stats += 1;
    }
    assert!(stats > 0);
}

#[test]
fn with_an_auth_file_binary_clients_log_in_with_sasl_as_to_memcached_s() {
    let dir = scratch("pwdb");
    let pwdb = dir.join("pwdb");
    std::fs::write(&pwdb, "user:secret\n").unwrap();
    let pwdb = pwdb.to_str().unwrap();
    let (_sasl, sasl_server) = server(&["-S", "--sasl-pwdb", pwdb]);
    let (_behind, behind) = server(&[]);
    let (_router, port, rdir) = router(&[behind], &["--auth-file", pwdb], "sasl");
    let run = |port: u16| {
        let mut got = Vec::new();
        // Before logging in: refused, and closed.
        let mut c = Bin::open(port);
        got.push(c.ask(req(get(b"k", false, false), 1, 0)));
        assert_eq!(c.packet(), None, "closed after the refusal");
        let mut c = Bin::open(port);
        c.send_sasl(0x20, b"", b"");
        got.push(c.packet().unwrap());
        c.send_sasl(0x21, b"PLAIN", b"\0user\0wrong");
        got.push(c.packet().unwrap());
        c.send_sasl(0x21, b"PLAIN", b"\0user\0secret");
        got.push(c.packet().unwrap());
        got.push(c.ask(req(set(SetOp::Set, b"k", b"v", false), 2, 0)));
        got.push(c.ask(req(get(b"k", false, false), 3, 0)));
        got
    };
    let want = run(sasl_server);
    let got = run(port);
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(rdir);
    assert_eq!(got, want);
    let summary: Vec<(u16, Vec<u8>)> = want.iter().map(|p| (p.status, p.value.clone())).collect();
    assert_eq!(summary[0], (0x20, b"Auth failure.".to_vec()));
    assert_eq!(summary[1], (0, b"PLAIN".to_vec()));
    assert_eq!(summary[2], (0x20, b"Auth failure.".to_vec()));
    assert_eq!(summary[3], (0, b"Authenticated".to_vec()));
    assert_eq!(summary[5], (0, b"v".to_vec()));
    // The login never reached the server behind the router; the set did.
    let mut behind_conn = Bin::open(behind);
    assert_eq!(
        behind_conn.ask(req(get(b"k", false, false), 1, 0)).value,
        b"v"
    );
}

#[test]
fn a_server_that_does_not_answer_is_a_temporary_failure_naming_it() {
    let (_held, dead) = support::refused_port();
    let (_router, port, dir) = router(&[dead], &[], "dead");
    let mut c = Bin::open(port);
    let p = c.ask(req(get(b"k", false, false), 5, 0));
    let _ = std::fs::remove_dir_all(dir);
    assert_eq!(p.status, 0x86, "{p:?}");
    assert_eq!(p.opaque, 5);
    let message = String::from_utf8_lossy(&p.value);
    assert!(message.contains(&format!("127.0.0.1:{dead}")), "{message}");
}

/// Text and meta requests, each with the reply's kind (for framing).
const TEXT_EXCHANGE: &[&str] = &[
    "get a\r\n",
    "set a 5 0 5\r\nhello\r\n",
    "add a 0 0 1\r\nx\r\n",
    "replace b 0 0 1\r\nx\r\n",
    "append a 0 0 1\r\n!\r\n",
    "prepend b 0 0 1\r\n!\r\n",
    "gets a\r\n",
    "cas a 0 0 1 1\r\nz\r\n",
    "set n 0 0 2\r\n10\r\n",
    "incr n 5\r\n",
    "decr n 100\r\n",
    "incr missing 1\r\n",
    "incr a 1\r\n",
    "touch a 100\r\n",
    "touch missing 100\r\n",
    "gat 100 a n missing\r\n",
    "get a n missing a\r\n",
    "mg a v f c k s O9\r\n",
    "mg missing v O9 k\r\n",
    "ms m 3 F7 T0 c\r\nabc\r\n",
    "ms m 1 MA\r\nd\r\n",
    "ms m 1 ME\r\nx\r\n",
    "ms m 1 C1\r\nx\r\n",
    "mg m v f\r\n",
    "ma n D3 v\r\n",
    "ma fresh N0 J7 v\r\n",
    "ma missing\r\n",
    "md m\r\n",
    "md m\r\n",
    "delete a\r\n",
    "delete a\r\n",
    "mn\r\n",
    "mg a v N30\r\n",
    "flush_all\r\n",
    "get n\r\n",
];

/// Sends each request of [`TEXT_EXCHANGE`] to `port` and reads its whole reply.
fn text_exchange(port: u16) -> Vec<String> {
    use memfleet_protocol::reply::{frame, Frame, ReplyKind};
    let mut s = support::connect(port, TIMEOUT);
    TEXT_EXCHANGE
        .iter()
        .map(|request| {
            let kind = match request.split(' ').next().unwrap().trim_end() {
                "get" | "gets" | "gat" => ReplyKind::Retrieval,
                "mg" | "ms" | "md" | "ma" | "mn" => ReplyKind::Meta,
                _ => ReplyKind::Line,
            };
            s.write_all(request.as_bytes()).unwrap();
            let mut got = Vec::new();
            loop {
                if let Ok(Frame::Complete(n)) = frame(&got, kind, 1 << 20) {
                    assert_eq!(n, got.len(), "{request:?}: one reply");
                    break;
                }
                let mut chunk = [0u8; 4096];
                let n = s.read(&mut chunk).unwrap();
                assert!(n > 0, "{request:?}: closed");
                got.extend_from_slice(&chunk[..n]);
            }
            String::from_utf8_lossy(&got).into_owned()
        })
        .collect()
}

#[test]
fn a_pool_with_sasl_logs_in_to_its_servers_and_carries_text_as_binary() {
    let dir = scratch("carried");
    let pwdb = dir.join("pwdb");
    std::fs::write(&pwdb, "router:secret\n").unwrap();
    let (_sasl, sasl_server) = server(&["-S", "--sasl-pwdb", pwdb.to_str().unwrap()]);
    let (_direct, direct) = server(&[]);
    let port = free_port();
    let pool = |listen: u16, password: &str| {
        format!(
            "[pools.p{listen}]\nlisten = \"127.0.0.1:{listen}\"\nservers = [\"127.0.0.1:{sasl_server}\"]\n\
             timeout_ms = 5000\nserver_retry_timeout_ms = 100\nauth_user = \"router\"\n\
             auth_password = \"{password}\"\nauth_mechanism = \"sasl\"\n"
        )
    };
    let refused = free_port();
    let toml = pool(port, "secret") + &pool(refused, "wrong");
    let _router = start_router(&dir, &toml, port, &[]);
    let want = text_exchange(direct);
    let got = text_exchange(port);
    for ((request, g), w) in TEXT_EXCHANGE.iter().zip(&got).zip(&want) {
        // What binary cannot carry is refused; everything else is the server's own reply.
        if request.starts_with("mg a v N30") {
            assert_eq!(
                g,
                "CLIENT_ERROR not carried over the binary protocol: mg flag N\r\n"
            );
            continue;
        }
        assert_eq!(g, w, "{request:?}");
    }
    // A wrong password: the server refuses the login, the client hears it, the log says so.
    let mut c = support::connect(refused, TIMEOUT);
    c.write_all(b"set k 0 0 1\r\nx\r\n").unwrap();
    let mut reply = [0u8; 256];
    let n = c.read(&mut reply).unwrap();
    let reply = String::from_utf8_lossy(&reply[..n]).into_owned();
    assert!(
        reply.starts_with("SERVER_ERROR ") && reply.contains("Auth failure"),
        "{reply}"
    );
    let logged = std::fs::read_to_string(dir.join("router.log")).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(logged.contains("authentication failed"), "{logged}");
}
