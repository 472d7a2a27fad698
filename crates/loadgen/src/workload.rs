//! What the load generator asks: which key (`key:<n>`, uniform or Zipf over a
//! fixed range, optionally padded to a drawn key size), get, set or delete,
//! and the exact bytes of each request (text or meta protocol) and of each
//! value. A key's sizes, TTL and value bytes are a pure function of its number
//! so that a get reply can be checked byte for byte against what any earlier
//! set stored. Not here: sockets or reply parsing (`client`), the size
//! distributions themselves (`memfleet_sim::sizes`).

use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};

use memfleet_protocol::number::push_u64;
use memfleet_sim::sizes::{key_unit, SizeDistribution, MAX_KEY_SIZE, MAX_VALUE_SIZE};
use memfleet_sim::workload::{share_list, TtlMix};
use memfleet_sim::zipf::Zipf;

/// The prefix of every key.
pub const KEY_PREFIX: &[u8] = b"key:";

/// Distinct value contents: a value is a window into a pattern, shifted by
/// `key % VALUE_SHIFTS`, so values of different keys differ (a reply carrying
/// another key's value is caught in all but 1 in 97 cases, on top of the key
/// check of the `VALUE` line).
const VALUE_SHIFTS: u64 = 97;

const PATTERN_ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";

/// Salts of [`key_unit`]: a key's value size, key size and TTL are independent draws.
const VALUE_SIZE_SALT: u64 = 1;
const KEY_SIZE_SALT: u64 = 2;
const TTL_SALT: u64 = 3;

/// Between the number of a padded key and its padding: not a digit, so `key:1.xx` and
/// `key:12` can never be the same key.
const KEY_PAD_SEPARATOR: u8 = b'.';

/// One request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkloadOp {
    /// Get key `n`.
    Get(u64),
    /// Set key `n` to [`Workload::value`] of `n`, with its TTL.
    Set(u64),
    /// Delete key `n`.
    Delete(u64),
}

impl WorkloadOp {
    /// The key number.
    pub fn key(self) -> u64 {
        match self {
            WorkloadOp::Get(k) | WorkloadOp::Set(k) | WorkloadOp::Delete(k) => k,
        }
    }
}

/// The wire protocol of the requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// `get`, `set`, `delete` (memcached's text protocol).
    #[default]
    Text,
    /// `mg`, `ms`, `md` (memcached 1.6's meta commands).
    Meta,
}

/// Shares of gets, sets and deletes (summing to 1).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Mix {
    /// Share of gets.
    pub get: f64,
    /// Share of sets.
    pub set: f64,
    /// Share of deletes.
    pub delete: f64,
}

impl Mix {
    /// A mix from its shares, which must be within 0..=1 and sum to 1.
    pub fn new(get: f64, set: f64, delete: f64) -> Result<Mix, String> {
        let shares = [get, set, delete];
        if shares.iter().any(|s| !(0.0..=1.0).contains(s)) {
            return Err(format!(
                "request shares must be within 0..=1: get {get}, set {set}, delete {delete}"
            ));
        }
        let total: f64 = shares.iter().sum();
        if (total - 1.0).abs() > 1e-6 {
            return Err(format!(
                "request shares must sum to 1: get {get} + set {set} + delete {delete} = {total}"
            ));
        }
        Ok(Mix { get, set, delete })
    }

    /// Gets at `get_ratio`, deletes at `delete_ratio`, sets the rest.
    pub fn from_ratios(get_ratio: f64, delete_ratio: f64) -> Result<Mix, String> {
        if !(0.0..=1.0).contains(&get_ratio) {
            return Err(format!("--get-ratio must be within 0..=1, got {get_ratio}"));
        }
        if !(0.0..=1.0).contains(&delete_ratio) || get_ratio + delete_ratio > 1.0 + 1e-9 {
            return Err(format!(
                "--delete-ratio must be within 0..=1-get ratio, got {delete_ratio} with get ratio {get_ratio}"
            ));
        }
        let set = (1.0 - get_ratio - delete_ratio).max(0.0);
        Ok(Mix {
            get: get_ratio,
            set,
            delete: delete_ratio,
        })
    }
}

impl std::str::FromStr for Mix {
    type Err = String;

    /// `get=0.8,set=0.15,delete=0.05`; missing kinds get 0.
    fn from_str(s: &str) -> Result<Mix, String> {
        let (mut get, mut set, mut delete) = (0.0, 0.0, 0.0);
        for (kind, share) in share_list(s, '=', "kind=share (get, set, delete)")? {
            match kind {
                "get" => get = share,
                "set" => set = share,
                "delete" => delete = share,
                other => return Err(format!("unknown request kind {other:?} (get, set, delete)")),
            }
        }
        Mix::new(get, set, delete)
    }
}

/// Everything that decides the requests of a run.
#[derive(Debug, Clone)]
pub struct WorkloadSpec {
    /// Distinct keys.
    pub keys: u64,
    /// Request shares.
    pub mix: Mix,
    /// Zipf exponent of key popularity (uniform when `None`).
    pub zipf: Option<f64>,
    /// Key sizes; `None` keeps keys at `key:<n>`.
    pub key_sizes: Option<SizeDistribution>,
    /// Value sizes.
    pub value_sizes: SizeDistribution,
    /// TTLs of sets (a key's TTL class is fixed).
    pub ttl: TtlMix,
    /// Wire protocol.
    pub protocol: Protocol,
}

/// The request mix and the byte encodings shared by every connection.
#[derive(Debug, Clone)]
pub struct Workload {
    keys: u64,
    mix: Mix,
    zipf: Option<Zipf>,
    key_sizes: Option<SizeDistribution>,
    value_sizes: SizeDistribution,
    ttl: TtlMix,
    protocol: Protocol,
    pattern: Vec<u8>,
}

impl Workload {
    /// `keys` distinct keys (`key:0` .. `key:<keys-1>`), a fraction `get_ratio` of gets
    /// and the rest sets, values of `value_size` bytes, keys uniform or Zipf with
    /// exponent `zipf`, no TTL, text protocol.
    pub fn new(
        keys: u64,
        get_ratio: f64,
        value_size: usize,
        zipf: Option<f64>,
    ) -> Result<Workload, String> {
        Workload::from_spec(WorkloadSpec {
            keys,
            mix: Mix::from_ratios(get_ratio, 0.0)?,
            zipf,
            key_sizes: None,
            value_sizes: SizeDistribution::Fixed(value_size),
            ttl: TtlMix::single(0),
            protocol: Protocol::Text,
        })
    }

    /// The workload `spec` describes.
    pub fn from_spec(spec: WorkloadSpec) -> Result<Workload, String> {
        if spec.keys == 0 {
            return Err("--keys must be at least 1".into());
        }
        let zipf = spec.zipf.map(|s| Zipf::new(spec.keys, s)).transpose()?;
        let largest = spec.value_sizes.max().min(MAX_VALUE_SIZE);
        let pattern = (0..largest + VALUE_SHIFTS as usize)
            .map(|i| PATTERN_ALPHABET[i % PATTERN_ALPHABET.len()])
            .collect();
        Ok(Workload {
            keys: spec.keys,
            mix: spec.mix,
            zipf,
            key_sizes: spec.key_sizes,
            value_sizes: spec.value_sizes,
            ttl: spec.ttl,
            protocol: spec.protocol,
            pattern,
        })
    }

    /// Number of distinct keys.
    pub fn keys(&self) -> u64 {
        self.keys
    }

    /// The request shares.
    pub fn mix(&self) -> Mix {
        self.mix
    }

    /// The wire protocol.
    pub fn protocol(&self) -> Protocol {
        self.protocol
    }

    /// The value size of a workload with fixed-size values (as [`Workload::new`] makes);
    /// for a distribution, the largest value.
    pub fn value_size(&self) -> usize {
        self.value_sizes.max().min(MAX_VALUE_SIZE)
    }

    /// The size of key `n`'s value.
    pub fn value_size_of(&self, n: u64) -> usize {
        match self.value_sizes {
            SizeDistribution::Fixed(size) => size,
            ref d => d.at_unit(key_unit(n, VALUE_SIZE_SALT)).min(MAX_VALUE_SIZE),
        }
    }

    /// The value every set of key `n` stores.
    pub fn value(&self, n: u64) -> &[u8] {
        let shift = (n % VALUE_SHIFTS) as usize;
        &self.pattern[shift..shift + self.value_size_of(n)]
    }

    /// The TTL in seconds every set of key `n` carries (0: never expires).
    pub fn ttl(&self, n: u64) -> u32 {
        match self.ttl.classes() {
            [(ttl, _)] => *ttl,
            _ => self.ttl.ttl_at_unit(key_unit(n, TTL_SALT)),
        }
    }

    /// The length of key `n` in bytes: its drawn size, but never shorter than `key:<n>`
    /// (which keeps keys unique) nor longer than memcached's limit.
    fn key_len(&self, n: u64) -> usize {
        let natural = KEY_PREFIX.len() + decimal_len(n);
        match &self.key_sizes {
            None => natural,
            Some(d) => d
                .at_unit(key_unit(n, KEY_SIZE_SALT))
                .clamp(natural, MAX_KEY_SIZE),
        }
    }

    /// The padding after `key:<n>`: empty, or a separator and alphanumerics.
    fn key_padding(&self, n: u64) -> impl Iterator<Item = u8> {
        let natural = KEY_PREFIX.len() + decimal_len(n);
        let pad = self.key_len(n) - natural;
        let shift = (n % PATTERN_ALPHABET.len() as u64) as usize;
        (0..pad).map(move |i| {
            if i == 0 {
                KEY_PAD_SEPARATOR
            } else {
                PATTERN_ALPHABET[(shift + i) % PATTERN_ALPHABET.len()]
            }
        })
    }

    /// Appends the bytes of key `n` to `out`.
    pub fn push_key_bytes(&self, n: u64, out: &mut Vec<u8>) {
        push_key(n, out);
        out.extend(self.key_padding(n));
    }

    /// Whether `key` is exactly the bytes of key `n`.
    pub fn key_matches(&self, n: u64, key: &[u8]) -> bool {
        let Some(rest) = key.strip_prefix(KEY_PREFIX) else {
            return false;
        };
        let digits = decimal_len(n);
        if rest.len() < digits || parse_u64(&rest[..digits]) != Some(n) {
            return false;
        }
        let padding = &rest[digits..];
        padding.len() + KEY_PREFIX.len() + digits == self.key_len(n)
            && padding.iter().copied().eq(self.key_padding(n))
    }

    /// Draws a key number.
    pub fn key<R: RngExt + ?Sized>(&self, rng: &mut R) -> u64 {
        match &self.zipf {
            // Rank 1 is the most popular; key:0 gets it.
            Some(z) => z.sample(rng) - 1,
            None => rng.random_range(0..self.keys),
        }
    }

    /// Draws a request.
    pub fn op<R: RngExt + ?Sized>(&self, rng: &mut R) -> WorkloadOp {
        let key = self.key(rng);
        let u = rng.random::<f64>();
        if u < self.mix.get {
            WorkloadOp::Get(key)
        } else if u < self.mix.get + self.mix.set || self.mix.delete == 0.0 {
            WorkloadOp::Set(key)
        } else {
            WorkloadOp::Delete(key)
        }
    }

    /// Appends the request bytes of `op` to `out`.
    pub fn encode(&self, op: WorkloadOp, out: &mut Vec<u8>) {
        match (self.protocol, op) {
            (Protocol::Text, WorkloadOp::Get(n)) => self.push_request(b"get ", n, b"\r\n", out),
            (Protocol::Text, WorkloadOp::Set(n)) => {
                let value = self.value(n);
                self.push_request(b"set ", n, b" 0 ", out);
                push_u64(out, u64::from(self.ttl(n)));
                out.push(b' ');
                push_u64(out, value.len() as u64);
                push_data(value, out);
            }
            (Protocol::Text, WorkloadOp::Delete(n)) => {
                self.push_request(b"delete ", n, b"\r\n", out)
            }
            // k: echo the key, f: the client flags, v: the value (a hit is
            // `VA <size> k<key> f<flags>`, a miss `EN`).
            (Protocol::Meta, WorkloadOp::Get(n)) => {
                self.push_request(b"mg ", n, b" k f v\r\n", out)
            }
            (Protocol::Meta, WorkloadOp::Set(n)) => {
                let value = self.value(n);
                self.push_request(b"ms ", n, b" ", out);
                push_u64(out, value.len() as u64);
                let ttl = self.ttl(n);
                if ttl != 0 {
                    out.extend_from_slice(b" T");
                    push_u64(out, u64::from(ttl));
                }
                push_data(value, out);
            }
            (Protocol::Meta, WorkloadOp::Delete(n)) => self.push_request(b"md ", n, b"\r\n", out),
        }
    }

    /// Appends `verb`, key `n` and `rest`.
    fn push_request(&self, verb: &[u8], n: u64, rest: &[u8], out: &mut Vec<u8>) {
        out.extend_from_slice(verb);
        self.push_key_bytes(n, out);
        out.extend_from_slice(rest);
    }
}

/// Ends a storage command's line and appends its data block.
fn push_data(value: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// Number of decimal digits of `n`.
fn decimal_len(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |l| l as usize + 1)
}

/// A fast, seedable RNG for one connection: each gets its own stream so runs are
/// reproducible per seed whatever the interleaving of connections.
pub fn conn_rng(seed: u64, conn: usize) -> SmallRng {
    SmallRng::seed_from_u64(seed ^ (conn as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

/// Appends `key:<n>` to `out`.
pub fn push_key(n: u64, out: &mut Vec<u8>) {
    out.extend_from_slice(KEY_PREFIX);
    push_u64(out, n);
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
mod tests;
