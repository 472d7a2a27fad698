//! Unit tests of `src/lib.rs`, kept beside it so that the product file
//! holds product code only.

use super::*;
use memfleet_protocol::auth::{login_request, UNAUTHENTICATED};
use memfleet_protocol::{parse, ParserConfig};

#[test]
fn auth_files_parse_and_only_exact_pairs_pass() {
    let c = Credentials::parse(b"# users\nalice:s3cret\r\n\nbob:pass:with:colons\n").unwrap();
    assert!(c.accepts(b"alice s3cret"));
    assert!(c.accepts(b"bob pass:with:colons"));
    for bad in [
        &b"alice s3cre"[..],
        b"alice s3cret ",
        b"alices3cret",
        b"carol s3cret",
        b"",
    ] {
        assert!(!c.accepts(bad), "{:?}", String::from_utf8_lossy(bad));
    }
    assert_eq!(
        Credentials::parse(b"no colon here\n"),
        Err(AuthFileError::NoColon(1))
    );
    assert_eq!(
        Credentials::parse(b"\n# nothing\n"),
        Err(AuthFileError::NoUsers)
    );
    assert_eq!(
        Credentials::parse(b"ok:x\na b:c\n"),
        Err(AuthFileError::BadUser(2))
    );
    assert!(!format!("{c:?}").contains("s3cret"));
}

#[test]
fn credentials_judge_a_login_request() {
    let c = Credentials::parse(b"alice:pass:with:colons and spaces\n").unwrap();
    let request = login_request(b"alice", b"pass:with:colons and spaces").unwrap();
    let (parsed, _) = parse(&request, &ParserConfig::default()).unwrap();
    assert_eq!(c.attempt(&parsed), Attempt::Accepted);
    let wrong = login_request(b"alice", b"nope").unwrap();
    let (parsed, _) = parse(&wrong, &ParserConfig::default()).unwrap();
    assert_eq!(c.attempt(&parsed), Attempt::Refused);
    let (get, _) = parse(b"get k\r\n", &ParserConfig::default()).unwrap();
    assert_eq!(c.attempt(&get).reply(), UNAUTHENTICATED);
}

#[test]
fn sasl_password_databases_end_the_password_at_a_colon() {
    // memcached's sasl_server_userdb_checkpass: the password ends at ':', CR, LF or NUL.
    let c = Credentials::parse_sasl_pwdb(b"alice:s3cret\r\nbob:pass:extra fields\n").unwrap();
    assert!(c.accepts_pair(b"alice", b"s3cret"));
    assert!(c.accepts_pair(b"bob", b"pass"));
    assert!(!c.accepts_pair(b"bob", b"pass:extra fields"));
    assert!(!c.accepts_pair(b"alice", b"s3cre"));
    assert!(!c.accepts_pair(b"alice", b""));
    assert!(!c.accepts_pair(b"carol", b"s3cret"));
    assert_eq!(
        Credentials::parse_sasl_pwdb(b"\n"),
        Err(AuthFileError::NoUsers)
    );
}
