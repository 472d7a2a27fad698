//! What the load generator asks: which key (`key:<n>`, uniform or Zipf over a
//! fixed range), get or set, and the exact bytes of each request and of each
//! value. Values are a pure function of the key so that a get reply can be
//! checked byte for byte against what any earlier set stored. Not here: sockets
//! or reply parsing (`client`).

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::sim::zipf::Zipf;

/// The prefix of every key.
pub const KEY_PREFIX: &[u8] = b"key:";

/// Distinct value contents: a value is a window into a pattern, shifted by
/// `key % VALUE_SHIFTS`, so values of different keys differ (a reply carrying
/// another key's value is caught in all but 1 in 97 cases, on top of the key
/// check of the `VALUE` line).
const VALUE_SHIFTS: u64 = 97;

const PATTERN_ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";

/// One request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `get key:<n>`.
    Get(u64),
    /// `set key:<n> 0 0 <size>` with [`Workload::value`] of `n`.
    Set(u64),
}

impl Op {
    /// The key number.
    pub fn key(self) -> u64 {
        match self {
            Op::Get(k) | Op::Set(k) => k,
        }
    }
}

/// The request mix and the byte encodings shared by every connection.
#[derive(Debug, Clone)]
pub struct Workload {
    keys: u64,
    get_ratio: f64,
    zipf: Option<Zipf>,
    value_size: usize,
    pattern: Vec<u8>,
}

impl Workload {
    /// `keys` distinct keys (`key:0` .. `key:<keys-1>`), a fraction `get_ratio` of gets,
    /// values of `value_size` bytes, keys uniform or Zipf with exponent `zipf`.
    pub fn new(
        keys: u64,
        get_ratio: f64,
        value_size: usize,
        zipf: Option<f64>,
    ) -> Result<Workload, String> {
        if keys == 0 {
            return Err("--keys must be at least 1".into());
        }
        if !(0.0..=1.0).contains(&get_ratio) {
            return Err(format!("--get-ratio must be within 0..=1, got {get_ratio}"));
        }
        let zipf = zipf.map(|s| Zipf::new(keys, s)).transpose()?;
        let pattern = (0..value_size + VALUE_SHIFTS as usize)
            .map(|i| PATTERN_ALPHABET[i % PATTERN_ALPHABET.len()])
            .collect();
        Ok(Workload {
            keys,
            get_ratio,
            zipf,
            value_size,
            pattern,
        })
    }

    /// Number of distinct keys.
    pub fn keys(&self) -> u64 {
        self.keys
    }

    /// Value size in bytes.
    pub fn value_size(&self) -> usize {
        self.value_size
    }

    /// The value every set of key `n` stores.
    pub fn value(&self, n: u64) -> &[u8] {
        let shift = (n % VALUE_SHIFTS) as usize;
        &self.pattern[shift..shift + self.value_size]
    }

    /// Draws a key number.
    pub fn key<R: Rng + ?Sized>(&self, rng: &mut R) -> u64 {
        match &self.zipf {
            // Rank 1 is the most popular; key:0 gets it.
            Some(z) => z.sample(rng) - 1,
            None => rng.gen_range(0..self.keys),
        }
    }

    /// Draws a request.
    pub fn op<R: Rng + ?Sized>(&self, rng: &mut R) -> Op {
        let key = self.key(rng);
        if rng.gen::<f64>() < self.get_ratio {
            Op::Get(key)
        } else {
            Op::Set(key)
        }
    }

    /// Appends the request bytes of `op` to `out`.
    pub fn encode(&self, op: Op, out: &mut Vec<u8>) {
        match op {
            Op::Get(n) => {
                out.extend_from_slice(b"get ");
                push_key(n, out);
                out.extend_from_slice(b"\r\n");
            }
            Op::Set(n) => {
                out.extend_from_slice(b"set ");
                push_key(n, out);
                out.extend_from_slice(b" 0 0 ");
                push_u64(self.value_size as u64, out);
                out.extend_from_slice(b"\r\n");
                out.extend_from_slice(self.value(n));
                out.extend_from_slice(b"\r\n");
            }
        }
    }
}

/// A fast, seedable RNG for one connection: each gets its own stream so runs are
/// reproducible per seed whatever the interleaving of connections.
pub fn conn_rng(seed: u64, conn: usize) -> SmallRng {
    SmallRng::seed_from_u64(seed ^ (conn as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

/// Appends `key:<n>` to `out`.
pub fn push_key(n: u64, out: &mut Vec<u8>) {
    out.extend_from_slice(KEY_PREFIX);
    push_u64(n, out);
}

/// Appends the decimal digits of `n` (no allocation, unlike `write!`).
pub fn push_u64(mut n: u64, out: &mut Vec<u8>) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

/// The key number of `key:<n>`, if `key` is exactly that with `n` in canonical decimal.
pub fn parse_key(key: &[u8]) -> Option<u64> {
    let digits = key.strip_prefix(KEY_PREFIX)?;
    let n = parse_u64(digits)?;
    // "key:007" is another key than "key:7".
    (digits.len() == 1 || digits[0] != b'0').then_some(n)
}

/// A decimal `u64` made only of ASCII digits.
pub fn parse_u64(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || digits.len() > 20 {
        return None;
    }
    let mut n: u64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        n = n.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
    }
    Some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_decimal_and_round_trip() {
        for n in [0, 7, 10, 99_999, u64::MAX] {
            let mut out = Vec::new();
            push_key(n, &mut out);
            assert_eq!(out, format!("key:{n}").into_bytes());
            assert_eq!(parse_key(&out), Some(n));
        }
        assert_eq!(parse_key(b"key:007"), None);
        assert_eq!(parse_key(b"key:"), None);
        assert_eq!(parse_key(b"key:1x"), None);
        assert_eq!(parse_key(b"kee:1"), None);
        assert_eq!(parse_key(b"key:18446744073709551616"), None);
    }

    #[test]
    fn requests_are_memcached_text() {
        let w = Workload::new(100, 0.9, 10, None).unwrap();
        let mut out = Vec::new();
        w.encode(Op::Get(42), &mut out);
        w.encode(Op::Set(1), &mut out);
        assert_eq!(
            out,
            b"get key:42\r\nset key:1 0 0 10\r\nbcdefghijk\r\n".as_slice()
        );
    }

    #[test]
    fn values_depend_on_the_key_and_have_the_right_size() {
        let w = Workload::new(1000, 0.9, 100, None).unwrap();
        assert_eq!(w.value(3).len(), 100);
        assert_eq!(w.value(3), w.value(3 + VALUE_SHIFTS));
        assert_ne!(w.value(3), w.value(4));
        assert!(w.value(5).iter().all(|b| b.is_ascii_alphanumeric()));
    }

    #[test]
    fn keys_stay_in_range_and_the_mix_holds() {
        for zipf in [None, Some(0.99)] {
            let w = Workload::new(1000, 0.9, 100, zipf).unwrap();
            let mut rng = conn_rng(1, 0);
            let mut gets = 0;
            let mut seen = vec![false; 1000];
            for _ in 0..100_000 {
                let op = w.op(&mut rng);
                assert!(op.key() < 1000);
                seen[op.key() as usize] = true;
                gets += matches!(op, Op::Get(_)) as u32;
            }
            assert!((89_000..91_000).contains(&gets), "{gets} gets");
            assert!(seen[0], "key:0 never drawn");
            if zipf.is_none() {
                assert!(seen.iter().all(|&s| s), "uniform missed a key");
            }
        }
    }

    #[test]
    fn zipf_favours_low_keys() {
        let w = Workload::new(100_000, 1.0, 100, Some(1.0)).unwrap();
        let mut rng = conn_rng(3, 1);
        let low = (0..10_000).filter(|_| w.key(&mut rng) < 10).count();
        // Zipf(1) over 100k keys puts ~24% of the mass on the top 10.
        assert!((1_800..3_000).contains(&low), "{low}");
    }

    #[test]
    fn bad_parameters_are_refused() {
        assert!(Workload::new(0, 0.9, 100, None).is_err());
        assert!(Workload::new(10, 1.5, 100, None).is_err());
        assert!(Workload::new(10, 0.9, 100, Some(-1.0)).is_err());
    }
}
