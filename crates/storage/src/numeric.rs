//! memcached's rules for the numbers `incr` and `decr` work on.
//!
//! memcached parses the stored value with `strtoull` and accepts it when the number is followed
//! by whitespace or the end of the value (its data always ends in "\r\n"). Leading whitespace
//! and a sign are accepted, but a `-` that makes the number wrap is refused. After a `decr`
//! that shortens the number, memcached updates the item in place and pads it with spaces to
//! its old length, unless a reader still holds the item (then the number is a new item of
//! its own length); memfleet reproduces both, because clients can see them.

/// Parses a stored value the way memcached's `safe_strtoull` does.
pub fn parse_u64(value: &[u8]) -> Option<u64> {
    let is_space = |b: u8| matches!(b, b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r');
    let mut i = 0;
    while i < value.len() && is_space(value[i]) {
        i += 1;
    }
    let mut negative = false;
    if i < value.len() && (value[i] == b'+' || value[i] == b'-') {
        negative = value[i] == b'-';
        i += 1;
    }
    let digits_start = i;
    let mut n: u64 = 0;
    while i < value.len() && value[i].is_ascii_digit() {
        n = n.checked_mul(10)?.checked_add(u64::from(value[i] - b'0'))?;
        i += 1;
    }
    if i == digits_start {
        return None;
    }
    if i < value.len() && !is_space(value[i]) {
        return None;
    }
    let n = if negative { n.wrapping_neg() } else { n };
    if (n as i64) < 0 && negative {
        return None;
    }
    Some(n)
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
