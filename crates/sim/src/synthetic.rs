//! A deterministic (seeded) synthetic request generator: keys drawn with Zipf
//! popularity, a fixed request rate in simulated seconds, a write ratio, and
//! per-key TTL classes and sizes from a [`Workload`].
//!
//! Every request is a `get` (the replay fills on a miss: look-aside) or, with
//! probability `write_ratio`, an explicit `set`. Key ids are popularity ranks
//! minus one (id 0 is the hottest). A key's TTL class, key size and (for
//! per-key value sizes) value size are functions of the seed and the key id
//! alone (hashed with xxh3), so they never change over a run and need no
//! per-key table. Not here: workload presets (`workload`), replay.
//!
//! Two kinds of change over time, both off by default:
//! - **Drifting popularity** (`drift`, keys per simulated second): the key at popularity
//!   rank `r` at time `t` is `(drift * t - r) mod keys`, so a key becomes the hottest at its
//!   own moment and then cools by `drift` ranks a second, as new content does, while the
//!   shape of the popularity (Zipf `alpha`) stays the same.
//! - **Value sizes that shift** (`value_size_late`): each key switches from the workload's
//!   value sizes to these at its own moment, spread uniformly over the run, so the early
//!   sizes fill the cache and the late ones must displace them (what calcifies memcached's
//!   slab classes, Facebook §6.2). Sizes drawn per request switch with probability growing
//!   linearly over the run.

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use xxhash_rust::xxh3::xxh3_64_with_seed;

use super::size::SizeSpec;
use super::trace::{Request, TraceOp};
use super::workload::Workload;
use super::zipf::Zipf;

/// Parameters of a synthetic run.
#[derive(Debug, Clone, PartialEq)]
pub struct SyntheticConfig {
    /// Number of distinct keys.
    pub keys: u64,
    /// Number of requests to generate.
    pub requests: u64,
    /// Requests per simulated second.
    pub rate: u32,
    /// Zipf exponent of key popularity (0 = uniform).
    pub alpha: f64,
    /// Fraction of requests that are explicit sets.
    pub write_ratio: f64,
    /// RNG seed; the same seed gives the same requests.
    pub seed: u64,
    /// TTL mix and sizes.
    pub workload: Workload,
    /// Popularity drift in keys per simulated second (0 = none; see the module docs).
    pub drift: f64,
    /// Value sizes each key switches to during the run (see the module docs).
    pub value_size_late: Option<SizeSpec>,
}

impl SyntheticConfig {
    /// Checks the numeric parameters.
    pub fn validate(&self) -> Result<(), String> {
        if self.rate == 0 {
            return Err("rate must be at least 1 request per second".into());
        }
        if !(0.0..=1.0).contains(&self.write_ratio) {
            return Err(format!(
                "write ratio must be in [0, 1], got {}",
                self.write_ratio
            ));
        }
        if !(self.drift.is_finite() && self.drift >= 0.0) {
            return Err(format!(
                "drift must be >= 0 keys per second, got {}",
                self.drift
            ));
        }
        Zipf::new(self.keys, self.alpha).map(|_| ())
    }
}

// Salts separating the per-key hash streams.
const SALT_TTL: u64 = 0x7474_6c5f_636c_6173;
const SALT_KEY_SIZE: u64 = 0x6b65_795f_7369_7a65;
const SALT_VALUE_SIZE: u64 = 0x7661_6c5f_7369_7a65;
const SALT_SHIFT: u64 = 0x7368_6966_745f_6174;

/// A uniform number in `[0, 1)` derived from `(seed, salt, id)`.
fn key_unit(seed: u64, salt: u64, id: u64) -> f64 {
    let h = xxh3_64_with_seed(&id.to_le_bytes(), seed ^ salt);
    (h >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// Iterator of synthetic requests.
#[derive(Debug)]
pub struct Synthetic {
    cfg: SyntheticConfig,
    zipf: Zipf,
    rng: StdRng,
    issued: u64,
}

impl Synthetic {
    /// A generator for `cfg` (see [`SyntheticConfig::validate`]).
    pub fn new(cfg: SyntheticConfig) -> Result<Synthetic, String> {
        cfg.validate()?;
        let zipf = Zipf::new(cfg.keys, cfg.alpha)?;
        let rng = StdRng::seed_from_u64(cfg.seed);
        Ok(Synthetic {
            cfg,
            zipf,
            rng,
            issued: 0,
        })
    }

    /// The TTL of key `id` (fixed per key).
    pub fn ttl_of(&self, id: u64) -> u32 {
        self.cfg
            .workload
            .ttl_mix
            .ttl_at_unit(key_unit(self.cfg.seed, SALT_TTL, id))
    }

    /// The key size of key `id` (fixed per key), at least 1.
    pub fn key_size_of(&self, id: u64) -> u32 {
        let unit = key_unit(self.cfg.seed, SALT_KEY_SIZE, id);
        self.cfg.workload.key_size.dist.at_unit(unit).max(1)
    }

    /// The key at popularity rank `rank` (0 = hottest) now: the rank itself without drift.
    fn key_at_rank(&self, rank: u64) -> u64 {
        if self.cfg.drift == 0.0 {
            return rank;
        }
        let keys = self.cfg.keys;
        let seconds = self.issued as f64 / f64::from(self.cfg.rate);
        let moved = ((self.cfg.drift * seconds) as u64) % keys;
        (moved + keys - rank % keys) % keys
    }

    fn value_size_of(&mut self, id: u64) -> u32 {
        let mut spec = self.cfg.workload.value_size;
        if let Some(late) = self.cfg.value_size_late {
            // How far through the run this request is, in [0, 1).
            let progress = self.issued as f64 / self.cfg.requests.max(1) as f64;
            let switch_at = if late.per_key {
                key_unit(self.cfg.seed, SALT_SHIFT, id)
            } else {
                self.rng.random()
            };
            if switch_at < progress {
                spec = late;
            }
        }
        let unit = if spec.per_key {
            key_unit(self.cfg.seed, SALT_VALUE_SIZE, id)
        } else {
            self.rng.random()
        };
        spec.dist.at_unit(unit).max(1)
    }
}

impl Iterator for Synthetic {
    type Item = Request;

    fn next(&mut self) -> Option<Request> {
        if self.issued >= self.cfg.requests {
            return None;
        }
        let time = (self.issued / u64::from(self.cfg.rate)).min(u64::from(u32::MAX)) as u32;
        self.issued += 1;
        let rank = self.zipf.sample(&mut self.rng) - 1;
        let id = self.key_at_rank(rank);
        let write = self.cfg.write_ratio > 0.0 && self.rng.random::<f64>() < self.cfg.write_ratio;
        Some(Request {
            time,
            key: id,
            key_size: self.key_size_of(id),
            value_size: self.value_size_of(id),
            op: if write { TraceOp::Set } else { TraceOp::Get },
            ttl: self.ttl_of(id),
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = usize::try_from(self.cfg.requests - self.issued).unwrap_or(usize::MAX);
        (left, Some(left))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn config(workload: &str, keys: u64, requests: u64, alpha: f64, seed: u64) -> SyntheticConfig {
        SyntheticConfig {
            keys,
            requests,
            rate: 1000,
            alpha,
            write_ratio: 0.0,
            seed,
            workload: Workload::parse(workload).unwrap(),
            drift: 0.0,
            value_size_late: None,
        }
    }

    fn generate(cfg: SyntheticConfig) -> Vec<Request> {
        Synthetic::new(cfg).unwrap().collect()
    }

    #[test]
    fn same_seed_same_requests_other_seed_other_requests() {
        let a = generate(config("mix", 1000, 5000, 1.0, 9));
        let b = generate(config("mix", 1000, 5000, 1.0, 9));
        let c = generate(config("mix", 1000, 5000, 1.0, 10));
        assert_eq!(a.len(), 5000);
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(
            a.last().unwrap().time,
            4,
            "1000 requests per simulated second"
        );
    }

    /// Share of requests going to the hottest 1% of keys.
    fn top_percent_share(alpha: f64) -> f64 {
        let keys = 10_000;
        let reqs = generate(config("n", keys, 200_000, alpha, 3));
        let hot = reqs.iter().filter(|r| r.key < keys / 100).count();
        hot as f64 / reqs.len() as f64
    }

    #[test]
    fn popularity_skew_is_measurable() {
        // Zipf(1.0) over 10k keys: H(100)/H(10000) = 5.187/9.788 = 0.530.
        let skewed = top_percent_share(1.0);
        assert!(
            (0.51..0.55).contains(&skewed),
            "alpha 1.0 top-1% share {skewed}"
        );
        let uniform = top_percent_share(0.0);
        assert!(
            (0.008..0.012).contains(&uniform),
            "alpha 0 top-1% share {uniform}"
        );
    }

    #[test]
    fn keys_keep_their_ttl_and_sizes() {
        let reqs = generate(config("mix", 2000, 50_000, 0.8, 5));
        let mut seen: HashMap<u64, (u32, u32, u32)> = HashMap::new();
        for r in &reqs {
            assert!(r.key < 2000);
            let props = (r.ttl, r.key_size, r.value_size);
            assert_eq!(
                *seen.entry(r.key).or_insert(props),
                props,
                "key {} changed",
                r.key
            );
        }
        assert!(seen.len() > 1500);
    }

    #[test]
    fn ttl_classes_follow_the_mix_over_keys() {
        let g = Synthetic::new(config("mix", 100_000, 0, 1.0, 1)).unwrap();
        let mut counts: HashMap<u32, u64> = HashMap::new();
        for id in 0..100_000 {
            *counts.entry(g.ttl_of(id)).or_default() += 1;
        }
        for &(ttl, share) in Workload::parse("mix").unwrap().ttl_mix.classes() {
            let got = counts[&ttl] as f64 / 100_000.0;
            assert!((got - share).abs() < 0.01, "ttl {ttl}: {got} vs {share}");
        }
    }

    #[test]
    fn mean_object_size_matches_the_preset() {
        for (name, mean) in [("c", 230.0), ("u2", 55.0)] {
            let mut g = Synthetic::new(config(name, 1, 0, 1.0, 2)).unwrap();
            let total: f64 = (0..50_000u64)
                .map(|id| f64::from(g.key_size_of(id)) + f64::from(g.value_size_of(id)))
                .sum();
            let got = total / 50_000.0;
            assert!(
                (got - mean).abs() < mean * 0.02,
                "{name}: mean {got} vs {mean}"
            );
        }
    }

    #[test]
    fn write_ratio_and_per_request_sizes() {
        let mut cfg = config("u2", 100, 20_000, 1.0, 4);
        cfg.write_ratio = 0.25;
        cfg.workload.value_size = "1-1000".parse().unwrap();
        let reqs = generate(cfg.clone());
        let writes =
            reqs.iter().filter(|r| r.op == TraceOp::Set).count() as f64 / reqs.len() as f64;
        assert!((writes - 0.25).abs() < 0.02, "write share {writes}");
        assert!(reqs
            .iter()
            .all(|r| matches!(r.op, TraceOp::Get | TraceOp::Set)));
        let hottest: Vec<u32> = reqs
            .iter()
            .filter(|r| r.key == 0)
            .map(|r| r.value_size)
            .collect();
        assert!(
            hottest.windows(2).any(|w| w[0] != w[1]),
            "per-request sizes vary"
        );
        cfg.write_ratio = 1.5;
        assert!(Synthetic::new(cfg.clone()).is_err());
        cfg.write_ratio = 0.0;
        cfg.rate = 0;
        assert!(Synthetic::new(cfg).is_err());
    }

    /// The key requested most often among `reqs`.
    fn hottest(reqs: &[Request]) -> u64 {
        let mut counts: HashMap<u64, u64> = HashMap::new();
        for r in reqs {
            *counts.entry(r.key).or_default() += 1;
        }
        counts.into_iter().max_by_key(|&(k, n)| (n, k)).unwrap().0
    }

    #[test]
    fn drifting_popularity_moves_the_hot_keys_on() {
        // 1000 requests per second, 10 seconds; the ranking moves 500 keys a second.
        let mut cfg = config("mix", 100_000, 10_000, 1.2, 6);
        cfg.drift = 500.0;
        let reqs = generate(cfg.clone());
        let first = hottest(&reqs[..1000]);
        let last = hottest(&reqs[9000..]);
        // Rank 0 is key (drift * t) mod keys: about 0 in the first second, 4500 in the last.
        assert!(
            !(500..=99_500).contains(&first),
            "first second's hottest {first}"
        );
        assert!(
            (4000..=5000).contains(&last),
            "last second's hottest {last}"
        );
        // A key's TTL and sizes still belong to the key, not to its rank.
        let still = generate(config("mix", 100_000, 10_000, 1.2, 6));
        assert_eq!(hottest(&still[9000..]), 0);
        cfg.drift = -1.0;
        assert!(Synthetic::new(cfg).is_err());
    }

    #[test]
    fn value_sizes_shift_once_per_key_over_the_run() {
        let mut cfg = config("mix", 1000, 40_000, 0.5, 7);
        cfg.workload.value_size = "key:100".parse().unwrap();
        cfg.value_size_late = Some("key:1000".parse().unwrap());
        let reqs = generate(cfg);
        let late_share = |part: &[Request]| {
            part.iter().filter(|r| r.value_size == 1000).count() as f64 / part.len() as f64
        };
        assert!(late_share(&reqs[..4000]) < 0.15);
        assert!(late_share(&reqs[36_000..]) > 0.85);
        // Each key switches once and never back.
        let mut switched: HashMap<u64, bool> = HashMap::new();
        for r in &reqs {
            let late = r.value_size == 1000;
            let was = switched.entry(r.key).or_insert(late);
            assert!(!*was || late, "key {} switched back", r.key);
            *was = late;
        }
    }
}
