//! memcached's rules for the numbers `incr` and `decr` work on.
//!
//! memcached parses the stored value with `strtoull` and accepts it when the number is followed
//! by whitespace or the end of the value (its data always ends in "\r\n"). Leading whitespace
//! and a sign are accepted, but a `-` that makes the number wrap is refused. After a `decr`
//! that shortens the number, memcached updates the item in place and pads it with spaces to
//! its old length, unless a reader still holds the item (then the number is a new item of
//! its own length); memfleet reproduces both, because clients can see them.

/// Parses a stored value the way memcached's `safe_strtoull` does (`memfleet-number`'s, the
/// protocol's parser too).
pub fn parse_u64(value: &[u8]) -> Option<u64> {
    memfleet_number::safe_strtoull(value)
}

/// Applies a delta like memcached: incr wraps at 2^64, decr stops at 0.
pub fn apply(current: u64, delta: u64, incr: bool) -> u64 {
    if incr {
        current.wrapping_add(delta)
    } else {
        current.saturating_sub(delta)
    }
}

/// The bytes memcached stores for the new number: in place (space padded) when it fits in the
/// old length, otherwise the bare digits.
pub fn render(new: u64, old_len: usize, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(new.to_string().as_bytes());
    if out.len() < old_len {
        out.resize(old_len, b' ');
    }
}

#[cfg(test)]
mod tests;
