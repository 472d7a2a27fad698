//! Unit tests of `base64.rs`, kept beside it so that the product file
//! holds product code only.

use super::*;

fn dec(s: &[u8]) -> Option<Vec<u8>> {
    decode_key(s).map(|k| k.to_vec())
}

#[test]
fn decodes_like_memcached() {
    assert_eq!(dec(b"Zm9v").as_deref(), Some(&b"foo"[..]));
    assert_eq!(dec(b"Zm8=").as_deref(), Some(&b"fo"[..]));
    assert_eq!(dec(b"Zg==").as_deref(), Some(&b"f"[..]));
    // Bytes outside the alphabet are skipped.
    assert_eq!(dec(b"Zm!9v").as_deref(), Some(&b"foo"[..]));
    // Decoding stops after the first padded block.
    assert_eq!(dec(b"Zg==Zm9v").as_deref(), Some(&b"f"[..]));
    assert_eq!(dec(b"foo"), None);
    assert_eq!(dec(b"Zm9"), None);
    assert_eq!(dec(b"!!!!"), None);
    assert_eq!(dec(b"===="), None);
    assert_eq!(dec(b""), None);
}

#[test]
fn encode_roundtrip() {
    for len in 0..40usize {
        let src: Vec<u8> = (0..len).map(|i| (i * 37 + 11) as u8).collect();
        let mut enc = Vec::new();
        encode_into(&mut enc, &src);
        assert_eq!(enc.len(), len.div_ceil(3) * 4);
        if len > 0 {
            assert_eq!(dec(&enc), Some(src));
        }
    }
}
