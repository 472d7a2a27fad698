//! The engine under look-aside churn: overwrites, a TTL mix and several writing handles.
//!
//! ```sh
//! cargo run --release -p memfleet-storage --example churn -- [memory MiB] [handles] [seconds]
//! ```
//!
//! The workload of the engine's miss-ratio issue, generated in-process on a manual clock:
//! 1,000,000 keys of 20–40 bytes with Zipf 0.9 popularity; values log-normal with a mean of
//! 243 bytes, clamped to 16 B–4 KiB (a size per key); Segcache's `mix` TTL classes scaled by
//! 1/60 (43,200 s 14%, 20,160 s 11%, 1,440 s 23%, 720 s 40%, 2 s 12%); 7% of requests are
//! sets, every get that misses is filled; 60,000 requests per simulated second, request *i*
//! through handle *i* mod `handles` (a server's connections are spread over its workers).
//! Prints the miss ratio over the second half of the run and the heap's live fraction at the
//! end. `memfleet sim` runs the same stream against pelikan's engine and an exact LRU.

use memfleet_storage::{Cache, Clock, Config, Expiry};

const KEYS: usize = 1_000_000;
const ALPHA: f64 = 0.9;
const RATE: u64 = 60_000;
const SET_SHARE: f64 = 0.07;
const TTLS: [(u32, f64); 5] = [
    (43_200, 0.14),
    (20_160, 0.11),
    (1_440, 0.23),
    (720, 0.40),
    (2, 0.12),
];

/// xorshift64*: small, fast, deterministic.
struct Rng(u64);

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

fn main() {
    let mut args = std::env::args().skip(1);
    let mib: usize = args.next().map_or(64, |s| s.parse().expect("memory MiB"));
    let handles: usize = args.next().map_or(1, |s| s.parse().expect("handles"));
    let seconds: u64 = args.next().map_or(90, |s| s.parse().expect("seconds"));

    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    // Log-normal with sigma 1: mean = exp(mu + 1/2).
    let sigma = 1.0f64;
    let mu = 243f64.ln() - sigma * sigma / 2.0;
    let keys: Vec<Key> = (0..KEYS)
        .map(|i| {
            let len = 20 + (rng.next() % 21) as usize;
            let mut name = format!("k{i}:").into_bytes();
            name.resize(len.max(name.len()), b'x');
            let value_len = (mu + sigma * rng.normal()).exp().clamp(16.0, 4096.0) as usize;
            let mut u = rng.unit();
            let mut ttl = TTLS[TTLS.len() - 1].0;
            for (t, share) in TTLS {
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
    let mut cdf = Vec::with_capacity(KEYS);
    let mut total = 0.0;
    for rank in 1..=KEYS {
        total += 1.0 / (rank as f64).powf(ALPHA);
        cdf.push(total);
    }

    let clock = Clock::manual();
    let cache = Cache::new(Config::new(mib << 20).clock(clock.clone())).expect("cache");
    let mut hs: Vec<_> = (0..handles).map(|_| cache.handle()).collect();
    let zeros = vec![0u8; 4096];
    let (mut gets, mut misses) = (0u64, 0u64);
    let requests = RATE * seconds;
    for i in 0..requests {
        if i % RATE == 0 {
            clock.set((i / RATE) as u32);
            cache.expire();
        }
        if i == requests / 2 {
            (gets, misses) = (0, 0);
        }
        let u = rng.unit() * total;
        let k = &keys[cdf.partition_point(|&c| c < u).min(KEYS - 1)];
        let h = &mut hs[i as usize % handles];
        let set = |h: &mut memfleet_storage::Handle| {
            let _ = h.set(&k.name, &zeros[..k.value_len], 0, Expiry::After(k.ttl));
        };
        if rng.unit() < SET_SHARE {
            set(h);
        } else {
            gets += 1;
            if h.get(&k.name).is_none() {
                misses += 1;
                set(h);
            }
        }
    }
    let s = cache.stats();
    println!(
        "memory={mib}MiB handles={handles} seconds={seconds} miss_ratio={:.4} items={} \
         live_bytes={} live_fraction={:.3} free={} active={} merges={} evicted={} expired={}",
        misses as f64 / gets as f64,
        s.items,
        s.bytes,
        s.bytes as f64 / s.heap_bytes as f64,
        s.segments_free,
        s.segments_active,
        s.merges,
        s.evicted_items,
        s.expired_items,
    );
}
