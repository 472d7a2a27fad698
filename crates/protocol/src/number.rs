//! memcached's numbers for the protocol: the parsers are `memfleet-number`'s (memcached's
//! `safe_strto*`, shared with the engine's incr/decr), and allocation-free decimal
//! formatting for the encoders is here.
//!
//! Not here: which field uses which parser (see `text.rs` and `meta.rs`).

pub(crate) use memfleet_number::{safe_strtol, safe_strtoul, safe_strtoull};

/// Appends `v` in decimal.
#[inline]
pub fn push_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
}

/// Appends `v` in decimal, with a leading `-` when negative.
pub fn push_i64(out: &mut Vec<u8>, v: i64) {
    if v < 0 {
        out.push(b'-');
    }
    push_u64(out, v.unsigned_abs());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formatting() {
        let mut v = Vec::new();
        push_u64(&mut v, 0);
        v.push(b' ');
        push_u64(&mut v, u64::MAX);
        v.push(b' ');
        push_i64(&mut v, i64::MIN);
        v.push(b' ');
        push_i64(&mut v, -1);
        assert_eq!(v, b"0 18446744073709551615 -9223372036854775808 -1");
    }
}
