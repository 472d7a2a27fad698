//! Turns a compact key id plus a recorded key size into the key bytes every
//! simulated cache sees, so that all caches in one run get identical keys.
//!
//! Encoding: the id in base 64 (URL-safe alphabet, most significant digit
//! first), a `.` terminator, then `x` padding up to the key size, which is
//! clamped to 1..=250 (memcached's key limit). The digits-plus-terminator prefix
//! is prefix-free, so distinct ids always give distinct keys whatever their
//! sizes; the price is that a key is never shorter than that prefix (2 bytes
//! for ids below 64, at most 12 for any u64), which can exceed a recorded size.
//! Keys are printable ASCII without spaces. Not here: hashing, storage.

/// memcached's maximum key length.
pub const MAX_KEY_LEN: usize = 250;

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
const TERMINATOR: u8 = b'.';
const PAD: u8 = b'x';

/// Writes the key bytes for `id` at (roughly) `key_size` bytes into `out`,
/// replacing its contents.
pub fn write_key(id: u64, key_size: u32, out: &mut Vec<u8>) {
    out.clear();
    let mut digits = [0u8; 11];
    let mut n = 0;
    let mut rest = id;
    loop {
        digits[n] = ALPHABET[(rest % 64) as usize];
        n += 1;
        rest /= 64;
        if rest == 0 {
            break;
        }
    }
    out.extend(digits[..n].iter().rev());
    out.push(TERMINATOR);
    let target = (key_size as usize).clamp(1, MAX_KEY_LEN);
    if out.len() < target {
        out.resize(target, PAD);
    }
}

/// The key bytes for `id` at `key_size`, as a new vector.
pub fn key_bytes(id: u64, key_size: u32) -> Vec<u8> {
    let mut out = Vec::new();
    write_key(id, key_size, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn pads_to_size_and_clamps() {
        assert_eq!(key_bytes(0, 8), b"A.xxxxxx");
        assert_eq!(key_bytes(64, 3), b"BA.");
        assert_eq!(key_bytes(5, 0), b"F.");
        assert_eq!(key_bytes(5, 10_000).len(), MAX_KEY_LEN);
        assert_eq!(key_bytes(u64::MAX, 1).len(), 12);
    }

    proptest! {
        #[test]
        fn distinct_ids_give_distinct_keys(a: u64, b: u64, sa in 0u32..300, sb in 0u32..300) {
            prop_assume!(a != b);
            prop_assert_ne!(key_bytes(a, sa), key_bytes(b, sb));
        }

        #[test]
        fn keys_are_deterministic_printable_and_sized(id: u64, size in 0u32..300) {
            let k = key_bytes(id, size);
            prop_assert_eq!(&k, &key_bytes(id, size));
            prop_assert!(k.iter().all(|b| b.is_ascii_graphic()));
            let want = (size as usize).clamp(1, MAX_KEY_LEN);
            prop_assert!(k.len() == want || (k.len() > want && k.ends_with(b".")));
        }
    }
}
