//! [`FlashSpec`]: one flash file as memcached's `ext_path` names it, `PATH:SIZE`.
//!
//! SIZE is a whole number with an optional unit, `k`, `m`, `g`, `t` or `p` in either case
//! (powers of 1024, as memcached's `ext_path=/f/e:64m`); without a unit it counts bytes.
//! memcached requires a unit and knows no `k`; both forms it accepts parse the same here. The
//! path is everything before the last colon, so a path may itself hold colons. memcached's
//! optional third field (a bucket, `ext_path=/f2:128m:compact`) is not supported: it fails as
//! a bad size.

use std::path::PathBuf;
use std::str::FromStr;

/// One flash file and how many bytes of it to use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlashSpec {
    /// The file, created if missing.
    pub path: PathBuf,
    /// Bytes to use; rounded down to whole segments when opened.
    pub size: u64,
}

/// Why a `PATH:SIZE` string is not a flash file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// No `:SIZE` part.
    #[error("must supply size to ext_path, ie: ext_path=/f/e:64m (K|M|G|T|P supported): {0:?}")]
    NoSize(String),
    /// Nothing before the colon.
    #[error("ext_path has no file path: {0:?}")]
    EmptyPath(String),
    /// SIZE is not a whole number with an optional k/m/g/t/p unit, or overflows 64 bits.
    #[error("bad ext_path size {0:?}: expected a whole number of bytes with an optional K, M, G, T or P unit, ie: 64m")]
    BadSize(String),
    /// SIZE is zero.
    #[error("ext_path size must be greater than 0: {0:?}")]
    ZeroSize(String),
}

impl FlashSpec {
    /// memcached's `PATH:SIZE` (SIZE with a k/m/g/t/p suffix, case-insensitive, as
    /// memcached's `ext_path`; a bare number counts bytes).
    pub fn parse(s: &str) -> Result<FlashSpec, SpecError> {
        let Some((path, size)) = s.rsplit_once(':') else {
            return Err(SpecError::NoSize(s.to_string()));
        };
        if path.is_empty() {
            return Err(SpecError::EmptyPath(s.to_string()));
        }
        let size = parse_size(size).ok_or_else(|| SpecError::BadSize(size.to_string()))?;
        if size == 0 {
            return Err(SpecError::ZeroSize(s.to_string()));
        }
        Ok(FlashSpec {
            path: PathBuf::from(path),
            size,
        })
    }
}

impl FromStr for FlashSpec {
    type Err = SpecError;

    fn from_str(s: &str) -> Result<FlashSpec, SpecError> {
        FlashSpec::parse(s)
    }
}

/// `64m` → 64 MiB; `None` for anything but digits with an optional unit, or an overflow.
fn parse_size(s: &str) -> Option<u64> {
    let (digits, shift) = match s.as_bytes().last()?.to_ascii_lowercase() {
        b'k' => (&s[..s.len() - 1], 10),
        b'm' => (&s[..s.len() - 1], 20),
        b'g' => (&s[..s.len() - 1], 30),
        b't' => (&s[..s.len() - 1], 40),
        b'p' => (&s[..s.len() - 1], 50),
        _ => (s, 0),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse::<u64>().ok()?.checked_mul(1u64 << shift)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("2k"), Some(2048));
        assert_eq!(parse_size("64M"), Some(64 << 20));
        assert_eq!(parse_size("1g"), Some(1 << 30));
        assert_eq!(parse_size("3T"), Some(3 << 40));
        assert_eq!(parse_size("1p"), Some(1 << 50));
        assert_eq!(parse_size("16384p"), None, "overflow");
        assert_eq!(parse_size("18446744073709551616"), None, "overflow");
        for bad in [
            "", "m", "-1", "+1", "1.5g", "1 g", " 1g", "1gb", "0x10", "1e",
        ] {
            assert_eq!(parse_size(bad), None, "{bad:?}");
        }
    }
}
