//! Unit tests of `flags.rs`, kept beside it so that the product file
//! holds product code only.

use super::*;

#[test]
fn parses_values_in_order() {
    let f = MetaFlags::parse(b"v T30 Oab k C99 F5 MS D3 J7 N-1 R10 q", b"foo").unwrap();
    assert!(f.has(b'v') && f.has(b'k') && f.quiet() && !f.has(b'c'));
    assert_eq!(f.ttl(), Some(30));
    assert_eq!(f.opaque(), Some(&b"ab"[..]));
    assert_eq!(f.compare_cas(), Some(99));
    assert_eq!(f.client_flags(), Some(5));
    assert_eq!(f.mode(), Some(b'S'));
    assert_eq!((f.delta(), f.initial()), (Some(3), Some(7)));
    assert_eq!((f.vivify_ttl(), f.recache_ttl()), (Some(-1), Some(10)));
    let letters: Vec<u8> = f.iter().map(|m| m.letter).collect();
    assert_eq!(letters, b"vTOkCFMDJNRq");
    assert_eq!(f.len(), 12);
}

#[test]
fn error_precedence() {
    let e = |raw: &[u8]| MetaFlags::parse(raw, b"foo").unwrap_err();
    assert_eq!(e(b"Tabc"), ErrorKind::BadToken);
    assert_eq!(e(b"Fabc"), ErrorKind::BadCommandLineFormat);
    assert_eq!(e(b"Fabc Tabc"), ErrorKind::BadToken);
    assert_eq!(e(b"Tabc Fabc"), ErrorKind::BadToken);
    assert_eq!(e(b"Tabc b"), ErrorKind::KeyDecode);
    assert_eq!(e(b"b Tabc"), ErrorKind::BadToken);
    assert_eq!(e(b"Jabc Dabc"), ErrorKind::InvalidDeltaFlag);
    assert_eq!(e(b"Tabc v v"), ErrorKind::DuplicateFlag);
    assert_eq!(e(b"Tabc 1"), ErrorKind::InvalidFlag);
    assert_eq!(e(b"\x80"), ErrorKind::BadCommandLineFormat);
    assert_eq!(MetaFlags::parse(b"Mxx", b"foo").unwrap().mode(), Some(b'x'));
}
