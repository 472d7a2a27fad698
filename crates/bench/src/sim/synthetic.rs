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

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use xxhash_rust::xxh3::xxh3_64_with_seed;

use super::trace::{Op, Request};
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
        Zipf::new(self.keys, self.alpha).map(|_| ())
    }
}

// Salts separating the per-key hash streams.
const SALT_TTL: u64 = 0x7474_6c5f_636c_6173;
const SALT_KEY_SIZE: u64 = 0x6b65_795f_7369_7a65;
const SALT_VALUE_SIZE: u64 = 0x7661_6c5f_7369_7a65;

/// A uniform number in `[0, 1)` derived from `(seed, salt, id)`.
fn key_unit(seed: u64, salt: u64, id: u64) -> f64 {
    let h = xxh3_64_with_seed(&id.to_le_bytes(), seed ^ salt);
    (h >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// Iterator of synthetic requests.
#[derive(Debug, Clone)]
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

    fn value_size_of(&mut self, id: u64) -> u32 {
        let spec = self.cfg.workload.value_size;
        let unit = if spec.per_key {
            key_unit(self.cfg.seed, SALT_VALUE_SIZE, id)
        } else {
            self.rng.gen()
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
        let id = self.zipf.sample(&mut self.rng) - 1;
        let write = self.cfg.write_ratio > 0.0 && self.rng.gen::<f64>() < self.cfg.write_ratio;
        Some(Request {
            time,
            key: id,
            key_size: self.key_size_of(id),
            value_size: self.value_size_of(id),
            op: if write { Op::Set } else { Op::Get },
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
            let g = Synthetic::new(config(name, 1, 0, 1.0, 2)).unwrap();
            let mut g2 = g.clone();
            let total: f64 = (0..50_000u64)
                .map(|id| f64::from(g.key_size_of(id)) + f64::from(g2.value_size_of(id)))
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
        let writes = reqs.iter().filter(|r| r.op == Op::Set).count() as f64 / reqs.len() as f64;
        assert!((writes - 0.25).abs() < 0.02, "write share {writes}");
        assert!(reqs.iter().all(|r| matches!(r.op, Op::Get | Op::Set)));
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
}
