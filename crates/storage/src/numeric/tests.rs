//! Unit tests of `numeric.rs`, kept beside it so that the product file
//! holds product code only.

use super::*;

#[test]
fn parses_like_safe_strtoull() {
    assert_eq!(parse_u64(b"12"), Some(12));
    assert_eq!(parse_u64(b"  12"), Some(12));
    assert_eq!(parse_u64(b"+7"), Some(7));
    assert_eq!(parse_u64(b"99 "), Some(99));
    assert_eq!(parse_u64(b"12 34"), Some(12));
    assert_eq!(parse_u64(b"18446744073709551615"), Some(u64::MAX));
    assert_eq!(parse_u64(b"18446744073709551616"), None);
    assert_eq!(parse_u64(b"-1"), None);
    assert_eq!(parse_u64(b"-0"), Some(0));
    assert_eq!(parse_u64(b""), None);
    assert_eq!(parse_u64(b"abc"), None);
    assert_eq!(parse_u64(b"12abc"), None);
    assert_eq!(parse_u64(b" "), None);
}

#[test]
fn deltas() {
    assert_eq!(apply(u64::MAX, 2, true), 1);
    assert_eq!(apply(3, 5, false), 0);
    let mut out = Vec::new();
    render(99, 3, &mut out);
    assert_eq!(out, b"99 ");
    render(100, 2, &mut out);
    assert_eq!(out, b"100");
}
