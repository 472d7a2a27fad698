//! A look-aside request stream with overwrites and a TTL mix, generated deterministically:
//! shared by `tests/it/churn.rs` and `examples/churn.rs`.

use memfleet_storage::{Cache, Expiry, Handle};

/// The stream's shape.
pub struct Shape {
    /// Distinct keys.
    pub keys: usize,
    /// Zipf exponent of key popularity.
    pub alpha: f64,
    /// Share of requests that are sets (the rest are gets, filled on a miss).
    pub set_share: f64,
    /// Mean value size (log-normal, sigma 1, clamped to 16 B–4 KiB; one size per key).
    pub mean_value: f64,
    /// TTL classes: (seconds, share).
    pub ttls: &'static [(u32, f64)],
    /// Requests per simulated second.
    pub rate: u64,
}

/// Segcache's `mix` TTL classes scaled by 1/60 (30 d, 14 d, 24 h, 12 h, 2 min).
pub const MIX_SCALED: [(u32, f64); 5] = [
    (43_200, 0.14),
    (20_160, 0.11),
    (1_440, 0.23),
    (720, 0.40),
    (2, 0.12),
];

/// xorshift64*: small, fast, deterministic.
pub struct Rng(pub u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn normal(&mut self) -> f64 {
        let (u, v) = (self.unit().max(1e-300), self.unit());
        (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
    }
}

struct Key {
    name: Vec<u8>,
    value_len: usize,
    ttl: u32,
}

/// The stream, replayed through a cache's handles.
pub struct Stream {
    keys: Vec<Key>,
    cdf: Vec<f64>,
    rng: Rng,
    rate: u64,
    set_share: f64,
    zeros: Vec<u8>,
    /// Gets and misses since the last [`Stream::reset_counts`].
    pub gets: u64,
    pub misses: u64,
}

impl Stream {
    /// A stream of `shape`, keys 20–40 bytes.
    pub fn new(shape: &Shape, seed: u64) -> Stream {
        let mut rng = Rng(seed | 1);
        let sigma = 1.0f64;
        let mu = shape.mean_value.ln() - sigma * sigma / 2.0;
        let keys = (0..shape.keys)
            .map(|i| {
                let len = 20 + (rng.next() % 21) as usize;
                let mut name = format!("k{i}:").into_bytes();
                name.resize(len.max(name.len()), b'x');
                let value_len = (mu + sigma * rng.normal()).exp().clamp(16.0, 4096.0) as usize;
                let mut u = rng.unit();
                let mut ttl = shape.ttls[shape.ttls.len() - 1].0;
                for &(t, share) in shape.ttls {
                    if u < share {
                        ttl = t;
                        break;
                    }
                    u -= share;
                }
                Key {
                    name,
                    value_len,
                    ttl,
                }
            })
            .collect();
        let mut cdf = Vec::with_capacity(shape.keys);
        let mut total = 0.0;
        for rank in 1..=shape.keys {
            total += 1.0 / (rank as f64).powf(shape.alpha);
            cdf.push(total);
        }
        Stream {
            keys,
            cdf,
            rng,
            rate: shape.rate,
            set_share: shape.set_share,
            zeros: vec![0; 4096],
            gets: 0,
            misses: 0,
        }
    }

    /// Forgets the gets and misses counted so far.
    pub fn reset_counts(&mut self) {
        (self.gets, self.misses) = (0, 0);
    }

    /// The miss ratio since the last reset.
    pub fn miss_ratio(&self) -> f64 {
        self.misses as f64 / self.gets.max(1) as f64
    }

    /// Runs requests `from..to` (request *i* at second *i* / rate, through handle *i* mod
    /// the number of handles), stepping `clock` and expiring once per simulated second.
    pub fn run(
        &mut self,
        cache: &Cache,
        handles: &mut [Handle],
        from: u64,
        to: u64,
        mut step: impl FnMut(u32),
    ) {
        let total = *self.cdf.last().expect("keys");
        for i in from..to {
            if i % self.rate == 0 {
                step((i / self.rate) as u32);
                cache.expire();
            }
            let u = self.rng.unit() * total;
            let k = &self.keys[self
                .cdf
                .partition_point(|&c| c < u)
                .min(self.keys.len() - 1)];
            let h = &mut handles[i as usize % handles.len()];
            let set = |h: &mut Handle, zeros: &[u8]| {
                let _ = h.set(&k.name, &zeros[..k.value_len], 0, Expiry::After(k.ttl));
            };
            if self.rng.unit() < self.set_share {
                set(h, &self.zeros);
            } else {
                self.gets += 1;
                if h.get(&k.name).is_none() {
                    self.misses += 1;
                    set(h, &self.zeros);
                }
            }
        }
    }
}
