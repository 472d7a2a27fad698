//! Binary SASL (`-S`, memcached's `--enable-sasl-pwdb`) through a real socket: what a
//! connection may do before it logs in, PLAIN with right and wrong passwords, the limits,
//! and a password database changed while the server runs. memcached 1.6.45's behaviour
//! (proto_bin.c) is what each check states.

use crate::common;

use common::{Client, TestServer};
use memfleet_protocol::binary::{BinCommand, BinRequest, Header, SetOp};

const LIST_MECHS: u8 = 0x20;
const AUTH: u8 = 0x21;
const STEP: u8 = 0x22;

/// A raw request packet: opcode, key, value, no extras.
fn raw(opcode: u8, key: &[u8], value: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    Header {
        magic: 0x80,
        opcode,
        key_len: key.len() as u16,
        extras_len: 0,
        data_type: 0,
        vbucket_or_status: 0,
        body_len: (key.len() + value.len()) as u32,
        opaque: 0x1234,
        cas: 0,
    }
    .write(&mut out);
    out.extend_from_slice(key);
    out.extend_from_slice(value);
    out
}

fn request(command: BinCommand<'_>) -> Vec<u8> {
    let mut out = Vec::new();
    BinRequest {
        command,
        opaque: 1,
        cas: 0,
    }
    .encode(&mut out);
    out
}

/// One response: status and body.
fn reply(c: &mut Client) -> (u16, Vec<u8>) {
    let header = Header::read(&c.read_n(24)).expect("a header");
    assert_eq!(header.magic, 0x81);
    (header.vbucket_or_status, c.read_n(header.body_len as usize))
}

fn plain(user: &str, password: &str) -> Vec<u8> {
    raw(AUTH, b"PLAIN", format!("\0{user}\0{password}").as_bytes())
}

fn server(pwdb: &std::path::Path) -> TestServer {
    let path = pwdb.to_path_buf();
    TestServer::with(move |s| s.listen.sasl_pwdb = Some(path))
}

struct Pwdb(std::path::PathBuf);
impl Drop for Pwdb {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
fn pwdb(text: &str) -> Pwdb {
    let path = std::env::temp_dir().join(format!(
        "memfleet-sasl-{}-{:x}",
        std::process::id(),
        rand_suffix()
    ));
    std::fs::write(&path, text).unwrap();
    Pwdb(path)
}
fn rand_suffix() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(std::time::SystemTime::now())
}

#[test]
fn before_logging_in_only_sasl_and_version_are_served() {
    let db = pwdb("alice:s3cret\n");
    let s = server(&db.0);
    // A text connection is closed without a word: -S serves the binary protocol only.
    let mut text = s.connect();
    text.send("get k\r\n");
    assert!(text.is_closed());
    // Version and the mechanisms are served; anything else is "Auth failure." and a close.
    let mut c = s.connect();
    c.send(raw(0x0b, b"", b""));
    let (status, body) = reply(&mut c);
    assert_eq!(status, 0);
    assert!(body.starts_with(b"1.6.45-memfleet-"), "{body:?}");
    c.send(raw(LIST_MECHS, b"", b""));
    assert_eq!(reply(&mut c), (0, b"PLAIN".to_vec()));
    c.send(request(BinCommand::Get {
        key: b"k",
        quiet: false,
        with_key: false,
    }));
    assert_eq!(reply(&mut c), (0x20, b"Auth failure.".to_vec()));
    assert!(c.is_closed());
}

#[test]
fn plain_logs_in_with_the_right_password_only() {
    let db = pwdb("# users\nalice:s3cret\nbob:pw:ignored after a colon\n");
    let s = server(&db.0);
    let mut c = s.connect();
    for bad in [
        plain("alice", "wrong"),
        plain("carol", "s3cret"),
        plain("bob", "pw:ignored"),
    ] {
        c.send(bad);
        assert_eq!(reply(&mut c), (0x20, b"Auth failure.".to_vec()));
    }
    // An unknown mechanism, a step (PLAIN has one), data that is not PLAIN's: refused, the
    // connection kept.
    c.send(raw(AUTH, b"CRAM-MD5", b"alice"));
    assert_eq!(reply(&mut c).0, 0x20);
    c.send(raw(STEP, b"PLAIN", b"\0alice\0s3cret"));
    assert_eq!(reply(&mut c).0, 0x20);
    c.send(raw(AUTH, b"PLAIN", b"alice s3cret"));
    assert_eq!(reply(&mut c).0, 0x20);
    c.send(plain("alice", "s3cret"));
    assert_eq!(reply(&mut c), (0, b"Authenticated".to_vec()));
    c.send(request(BinCommand::Store {
        op: SetOp::Set,
        key: b"k",
        flags: 7,
        exptime: 0,
        value: b"v",
        quiet: false,
    }));
    assert_eq!(reply(&mut c).0, 0);
    c.send(request(BinCommand::Get {
        key: b"k",
        quiet: false,
        with_key: false,
    }));
    let (status, body) = reply(&mut c);
    assert_eq!((status, &body[4..]), (0, &b"v"[..]));
    // bob's password ends at the colon, as in memcached's database.
    let mut b = s.connect();
    b.send(plain("bob", "pw"));
    assert_eq!(reply(&mut b).0, 0);
    // Counted as memcached counts them: every attempt, and the failures.
    let mut stats = s.connect();
    stats.send(raw(AUTH, b"PLAIN", b"\0alice\0s3cret"));
    assert_eq!(reply(&mut stats).0, 0);
    stats.send(raw(0x10, b"", b""));
    let mut seen = std::collections::HashMap::new();
    loop {
        let header = Header::read(&stats.read_n(24)).unwrap();
        let body = stats.read_n(header.body_len as usize);
        if header.key_len == 0 {
            break;
        }
        let (k, v) = body.split_at(header.key_len as usize);
        seen.insert(
            String::from_utf8_lossy(k).into_owned(),
            String::from_utf8_lossy(v).into_owned(),
        );
    }
    assert_eq!(seen["auth_cmds"], "9");
    assert_eq!(seen["auth_errors"], "6");
}

#[test]
fn long_mechanisms_and_data_are_invalid_arguments_and_the_connection_stays() {
    let db = pwdb("alice:s3cret\n");
    let s = server(&db.0);
    let mut c = s.connect();
    c.send(raw(AUTH, &[b'M'; 33], b""));
    assert_eq!(reply(&mut c), (0x04, b"Invalid arguments".to_vec()));
    c.send(raw(AUTH, b"PLAIN", &vec![b'x'; 4097]));
    assert_eq!(reply(&mut c), (0x04, b"Invalid arguments".to_vec()));
    c.send(plain("alice", "s3cret"));
    assert_eq!(reply(&mut c).0, 0);
    // A List Mechs with a body is a protocol error: "Invalid arguments", then a close.
    c.send(raw(LIST_MECHS, b"", b"x"));
    assert_eq!(reply(&mut c).0, 0x04);
    assert!(c.is_closed());
}

#[test]
fn a_user_added_to_the_database_logs_in_without_a_restart() {
    let db = pwdb("alice:s3cret\n");
    let s = server(&db.0);
    let mut c = s.connect();
    c.send(plain("carol", "new"));
    assert_eq!(reply(&mut c).0, 0x20);
    // A different size, so the change is seen even within the file system's clock tick.
    std::fs::write(&db.0, "alice:s3cret\ncarol:new\n").unwrap();
    c.send(plain("carol", "new"));
    assert_eq!(reply(&mut c), (0, b"Authenticated".to_vec()));
    // An emptied database refuses everyone.
    std::fs::write(&db.0, "").unwrap();
    let mut d = s.connect();
    d.send(plain("alice", "s3cret"));
    assert_eq!(reply(&mut d).0, 0x20);
}
