//! memcached 1.6's numbers, exactly: its `safe_strtol`, `safe_strtoul` and `safe_strtoull`
//! helpers (which wrap C's `strtol`/`strtoul`/`strtoull` on a 64-bit Linux). One parser for
//! both places memcached uses them: the protocol's fields (`memfleet-protocol`) and the
//! value `incr`/`decr` work on (`memfleet-storage`).
//!
//! The quirks are kept on purpose, because a memcached-compatible server must accept and
//! reject the same numbers: leading C whitespace (`\t \v \f \r`) and a `+`/`-` sign are
//! accepted; the digits may be followed by a whitespace byte and then anything; 32-bit fields
//! are parsed as 64-bit and then silently truncated (`set k 4294967297 0 1` stores flags 1,
//! checked against memcached 1.6.18); unsigned fields reject a minus sign before the number's
//! end only when the result would be negative as a signed value; a number past 2^64 − 1 is
//! refused (C's `ERANGE`).

/// C's `isspace` in the "C" locale.
fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// What `strto*` scanned: sign, magnitude (saturated), whether it overflowed `u64`, and the
/// offset just past the last digit. `None` when no digit was found (C's `endptr == str`).
struct Scan {
    negative: bool,
    magnitude: u64,
    overflow: bool,
    end: usize,
}

fn scan(tok: &[u8]) -> Option<Scan> {
    let mut i = 0;
    while i < tok.len() && is_c_space(tok[i]) {
        i += 1;
    }
    let mut negative = false;
    if i < tok.len() && (tok[i] == b'+' || tok[i] == b'-') {
        negative = tok[i] == b'-';
        i += 1;
    }
    let digits_start = i;
    let mut magnitude: u64 = 0;
    let mut overflow = false;
    while i < tok.len() && tok[i].is_ascii_digit() {
        let d = u64::from(tok[i] - b'0');
        match magnitude.checked_mul(10).and_then(|m| m.checked_add(d)) {
            Some(m) => magnitude = m,
            None => overflow = true,
        }
        i += 1;
    }
    if i == digits_start {
        return None;
    }
    Some(Scan {
        negative,
        magnitude,
        overflow,
        end: i,
    })
}

/// memcached's trailing check: the number must be followed by the end of the token or by a
/// whitespace byte (after which anything is ignored).
fn trailer_ok(tok: &[u8], end: usize) -> bool {
    end == tok.len() || is_c_space(tok[end])
}

/// `strtoll` base 10, `None` on no digits or `ERANGE`.
fn strtoll(tok: &[u8]) -> Option<(i64, usize)> {
    let s = scan(tok)?;
    if s.overflow {
        return None;
    }
    let v = if s.negative {
        if s.magnitude > 1u64 << 63 {
            return None;
        }
        (s.magnitude as i64).wrapping_neg()
    } else {
        i64::try_from(s.magnitude).ok()?
    };
    Some((v, s.end))
}

/// `strtoull` base 10: a minus sign negates modulo 2^64, as C does.
fn strtoull(tok: &[u8]) -> Option<(u64, usize)> {
    let s = scan(tok)?;
    if s.overflow {
        return None;
    }
    let v = if s.negative {
        s.magnitude.wrapping_neg()
    } else {
        s.magnitude
    };
    Some((v, s.end))
}

/// memcached's `safe_strtol`: a 64-bit `strtol` stored into an `int32_t` (truncating).
pub fn safe_strtol(tok: &[u8]) -> Option<i32> {
    let (v, end) = strtoll(tok)?;
    trailer_ok(tok, end).then_some(v as i32)
}

/// memcached's `safe_strtoul`: a 64-bit `strtoul` stored into a `uint32_t` (truncating).
pub fn safe_strtoul(tok: &[u8]) -> Option<u32> {
    safe_strtoull(tok).map(|v| v as u32)
}

/// memcached's `safe_strtoull`: a value negative as a signed long is rejected when a `-`
/// stands before the number's end (`memchr(str, '-', endptr - str)`: its sign, not a `-`
/// after the whitespace that may follow it).
pub fn safe_strtoull(tok: &[u8]) -> Option<u64> {
    let (v, end) = strtoull(tok)?;
    if !trailer_ok(tok, end) || ((v as i64) < 0 && tok[..end].contains(&b'-')) {
        return None;
    }
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strtol_matches_c() {
        assert_eq!(safe_strtol(b"0"), Some(0));
        assert_eq!(safe_strtol(b"-1"), Some(-1));
        assert_eq!(safe_strtol(b"+7"), Some(7));
        assert_eq!(safe_strtol(b"\t7"), Some(7));
        assert_eq!(safe_strtol(b"7\tjunk"), Some(7));
        assert_eq!(safe_strtol(b"7x"), None);
        assert_eq!(safe_strtol(b""), None);
        assert_eq!(safe_strtol(b"-"), None);
        assert_eq!(safe_strtol(b"4294967297"), Some(1));
        assert_eq!(safe_strtol(b"9223372036854775807"), Some(-1));
        assert_eq!(safe_strtol(b"9223372036854775808"), None);
        assert_eq!(safe_strtol(b"-9223372036854775808"), Some(0));
        assert_eq!(safe_strtol(b"-9223372036854775809"), None);
    }

    #[test]
    fn strtoul_matches_c() {
        assert_eq!(safe_strtoul(b"4294967295"), Some(u32::MAX));
        assert_eq!(safe_strtoul(b"4294967297"), Some(1));
        assert_eq!(safe_strtoul(b"-1"), None);
        assert_eq!(safe_strtoul(b"-0"), Some(0));
        // Negation wraps modulo 2^64; the result is positive as i64, so it is accepted.
        assert_eq!(safe_strtoul(b"-18446744073709551615"), Some(1));
        assert_eq!(safe_strtoull(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(safe_strtoull(b"18446744073709551616"), None);
        assert_eq!(safe_strtoull(b"9223372036854775808"), Some(1 << 63));
        assert_eq!(safe_strtoull(b"-5"), None);
    }

    #[test]
    fn only_a_minus_before_the_numbers_end_refuses_it() {
        // memcached looks for `-` between the token's start and strtoull's end pointer:
        // after the whitespace that may end the number, a `-` is ignored like the rest.
        assert_eq!(safe_strtoull(b"9223372036854775808\t-"), Some(1 << 63));
        assert_eq!(safe_strtoul(b"18446744073709551615\t-1"), Some(u32::MAX));
        assert_eq!(safe_strtoull(b" -9223372036854775808"), None);
        assert_eq!(safe_strtoul(b"-1\t-"), None);
    }
}
