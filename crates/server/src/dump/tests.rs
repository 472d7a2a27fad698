//! Unit tests of `dump.rs`, kept beside it so that the product file
//! holds product code only.

use super::*;

#[test]
fn uri_encoding_matches_memcached() {
    let mut out = Vec::new();
    uri_encode(b"a-Z.0_~ %/\xff", &mut out);
    assert_eq!(out, b"a-Z.0_~%20%25%2F%FF");
}

#[test]
fn class_lists() {
    assert!(matches!(classes(b"1"), Classes::Some(true)));
    assert!(matches!(classes(b"2,1"), Classes::Some(true)));
    assert!(matches!(classes(b"2,,63"), Classes::Some(false)));
    assert!(matches!(classes(b","), Classes::None));
    for bad in [&b"0"[..], b"64", b"x", b"1,x", b"+1", b"-1"] {
        assert!(matches!(classes(bad), Classes::Bad), "{bad:?}");
    }
}

#[test]
fn numbers_are_digits_only() {
    assert_eq!(token_u32(b"4294967295"), Some(u32::MAX));
    assert_eq!(token_u32(b"00000000001"), Some(1));
    for bad in [
        &b""[..],
        b"4294967296",
        b"-1",
        b"+1",
        b"1x",
        b"000000000001",
    ] {
        assert_eq!(token_u32(bad), None, "{bad:?}");
    }
}
