//! Key and value size distributions of the load generator (`memfleet bench`'s
//! `--value-size`, `--key-size`; here because the simulator's `etc-key`/`etc-value`
//! specs use them too), and how a key's sizes are drawn: once per key, as a pure function of the key number, so that
//! every set of a key stores the same bytes and a get can be checked against them.
//!
//! Distributions (text form in parentheses):
//! - fixed (`100`) and uniform (`16-64`, both ends included);
//! - the item sizes of Facebook's pools (`fb-wildcard`, `fb-app`, `fb-replicated`,
//!   `fb-regional`), from Table 3 of "Scaling Memcache at Facebook" (NSDI '13), which
//!   gives p5, p25, p50, p75, p95, p99 and the mean. Sizes are interpolated
//!   geometrically (linear in log size) between the published percentiles, because
//!   item sizes are heavy-tailed: linear interpolation would put far too much mass in
//!   the p95..p99 span. Below p5 the p5..p25 log-slope is extended down to p0; above
//!   p99 the sizes grow geometrically to a largest size chosen so that the whole
//!   distribution has the published mean, kept within [p99, [`MAX_VALUE_SIZE`]]
//!   (`fb-replicated`'s mean, 66 B, is below what its percentiles already imply, so
//!   its top stays at p99 and its mean is 67 B);
//! - the ETC workload of Atikoglu et al. (SIGMETRICS '12) as mutilate generates it
//!   (`etc`): keys from a generalized extreme value distribution (μ = 30.7984,
//!   σ = 8.20449, ξ = 0.078688), values from a generalized Pareto distribution
//!   (μ = 0, σ = 214.476, ξ = 0.348238), both by their inverse CDF.
//!
//! Every value size is at most [`MAX_VALUE_SIZE`] so that the item (value, key and the
//! server's per-item header) fits memcached's and memfleet's default 1 MiB item limit.

use std::fmt;
use std::str::FromStr;

/// Largest value the load generator stores: 1 MiB item limit minus room for a 250-byte
/// key and any server's item header.
pub const MAX_VALUE_SIZE: usize = 1_000_000;
/// Longest key memcached accepts.
pub const MAX_KEY_SIZE: usize = 250;

/// The percentiles of Facebook's Table 3, in order.
const FB_PERCENTILES: [f64; 6] = [0.05, 0.25, 0.50, 0.75, 0.95, 0.99];

/// A Facebook pool of Table 3: (name, mean, sizes at [`FB_PERCENTILES`]), bytes.
const FB_POOLS: [(&str, f64, [f64; 6]); 4] = [
    (
        "wildcard",
        1_110.0,
        [77.0, 102.0, 169.0, 363.0, 3_650.0, 18_300.0],
    ),
    (
        "app",
        881.0,
        [103.0, 247.0, 269.0, 337.0, 1_680.0, 10_400.0],
    ),
    ("replicated", 66.0, [62.0, 68.0, 68.0, 68.0, 68.0, 68.0]),
    (
        "regional",
        31_800.0,
        [231.0, 824.0, 5_310.0, 24_000.0, 158_000.0, 381_000.0],
    ),
];

/// ETC key sizes: generalized extreme value (μ, σ, ξ), as in mutilate's `fb_key`.
const ETC_KEY: (f64, f64, f64) = (30.7984, 8.20449, 0.078688);
/// ETC value sizes: generalized Pareto (μ, σ, ξ), as in mutilate's `fb_value`.
const ETC_VALUE: (f64, f64, f64) = (0.0, 214.476, 0.348238);

/// A distribution of byte sizes, sampled by its quantile function.
#[derive(Debug, Clone, PartialEq)]
pub enum SizeDistribution {
    /// Always this size.
    Fixed(usize),
    /// Uniform over `min..=max`.
    Uniform {
        /// Smallest size.
        min: usize,
        /// Largest size.
        max: usize,
    },
    /// Piecewise geometric interpolation through `(quantile, size)` knots, from
    /// quantile 0 to 1 (a Facebook Table 3 pool).
    Knots {
        /// The name it was given by (`fb-app`, ...).
        name: String,
        /// `(quantile, size)` in increasing order, first at 0 and last at 1.
        knots: Vec<(f64, f64)>,
    },
    /// Generalized extreme value (μ, σ, ξ): ETC's key sizes.
    Gev(f64, f64, f64),
    /// Generalized Pareto (μ, σ, ξ): ETC's value sizes.
    GeneralizedPareto(f64, f64, f64),
}

impl SizeDistribution {
    /// ETC's key sizes.
    pub fn etc_keys() -> SizeDistribution {
        let (mu, sigma, xi) = ETC_KEY;
        SizeDistribution::Gev(mu, sigma, xi)
    }

    /// ETC's value sizes.
    pub fn etc_values() -> SizeDistribution {
        let (mu, sigma, xi) = ETC_VALUE;
        SizeDistribution::GeneralizedPareto(mu, sigma, xi)
    }

    /// A Facebook Table 3 pool by name (`wildcard`, `app`, `replicated`, `regional`).
    pub fn facebook_pool(pool: &str) -> Option<SizeDistribution> {
        let &(name, mean, sizes) = FB_POOLS.iter().find(|p| p.0 == pool)?;
        Some(SizeDistribution::Knots {
            name: format!("fb-{name}"),
            knots: facebook_knots(mean, sizes),
        })
    }

    /// The size at quantile `unit` in `[0, 1)`, before any clamping.
    pub fn at_unit(&self, unit: f64) -> usize {
        let unit = unit.clamp(0.0, 1.0 - f64::EPSILON);
        match self {
            SizeDistribution::Fixed(n) => *n,
            SizeDistribution::Uniform { min, max } => {
                let span = (max - min) as f64 + 1.0;
                min + ((unit * span) as usize).min(max - min)
            }
            SizeDistribution::Knots { knots, .. } => {
                let i = knots
                    .windows(2)
                    .position(|w| unit < w[1].0)
                    .unwrap_or(knots.len() - 2);
                let ((q0, s0), (q1, s1)) = (knots[i], knots[i + 1]);
                let t = (unit - q0) / (q1 - q0);
                (s0 * (s1 / s0).powf(t)).round() as usize
            }
            // Inverse CDFs, as mutilate's Generator draws them.
            SizeDistribution::Gev(mu, sigma, xi) => {
                let x = mu + sigma * ((-(unit.max(1e-300)).ln()).powf(-xi) - 1.0) / xi;
                x.max(0.0) as usize
            }
            SizeDistribution::GeneralizedPareto(mu, sigma, xi) => {
                let x = mu + sigma * ((1.0 - unit).powf(-xi) - 1.0) / xi;
                x.max(0.0) as usize
            }
        }
    }

    /// An upper bound of the sizes (infinite tails report `usize::MAX`).
    pub fn max(&self) -> usize {
        match self {
            SizeDistribution::Fixed(n) => *n,
            SizeDistribution::Uniform { max, .. } => *max,
            SizeDistribution::Knots { knots, .. } => {
                knots.last().map_or(0, |k| k.1.ceil() as usize)
            }
            SizeDistribution::Gev(..) | SizeDistribution::GeneralizedPareto(..) => usize::MAX,
        }
    }

    /// The size every key gets if there is only one.
    pub fn fixed(&self) -> Option<usize> {
        match self {
            SizeDistribution::Fixed(n) => Some(*n),
            _ => None,
        }
    }
}

/// The knots of a Table 3 pool: p0 (the p5..p25 log-slope extended down), the published
/// percentiles, and p100 chosen so the mean is the published one (within [p99, cap]).
fn facebook_knots(mean: f64, sizes: [f64; 6]) -> Vec<(f64, f64)> {
    let slope = (sizes[0] / sizes[1]).ln() / (FB_PERCENTILES[1] - FB_PERCENTILES[0]);
    let p0 = (sizes[0] * (slope * FB_PERCENTILES[0]).exp()).max(1.0);
    let mut knots = vec![(0.0, p0)];
    knots.extend(FB_PERCENTILES.iter().copied().zip(sizes));
    let p99 = sizes[5];
    let with_top = |top: f64| {
        let mut k = knots.clone();
        k.push((1.0, top));
        k
    };
    // The mean grows with the top size: bisect on it.
    let (mut lo, mut hi) = (p99, MAX_VALUE_SIZE as f64);
    if knots_mean(&with_top(hi)) <= mean {
        lo = hi;
    } else if knots_mean(&with_top(lo)) < mean {
        for _ in 0..100 {
            let mid = (lo + hi) / 2.0;
            if knots_mean(&with_top(mid)) < mean {
                lo = mid;
            } else {
                hi = mid;
            }
        }
    }
    with_top(lo)
}

/// The exact mean of a piecewise geometric interpolation.
fn knots_mean(knots: &[(f64, f64)]) -> f64 {
    knots
        .windows(2)
        .map(|w| {
            let ((q0, s0), (q1, s1)) = (w[0], w[1]);
            let segment_mean = if (s1 - s0).abs() < 1e-9 {
                s0
            } else {
                (s1 - s0) / (s1 / s0).ln()
            };
            segment_mean * (q1 - q0)
        })
        .sum()
}

impl FromStr for SizeDistribution {
    type Err = String;

    /// `100`, `16-64`, `fb-wildcard`, `fb-app`, `fb-replicated`, `fb-regional` or `etc`
    /// (ETC's value sizes; [`KeySizes`] reads `etc` as ETC's key sizes).
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        if s == "etc" {
            return Ok(SizeDistribution::etc_values());
        }
        if let Some(pool) = s.strip_prefix("fb-") {
            return SizeDistribution::facebook_pool(pool).ok_or_else(|| {
                format!(
                    "unknown Facebook pool {s:?} (fb-wildcard, fb-app, fb-replicated, fb-regional)"
                )
            });
        }
        let num = |t: &str| {
            t.trim().parse::<usize>().map_err(|_| {
                format!("size {s:?} is not N, A-B, fb-wildcard|app|replicated|regional or etc")
            })
        };
        match s.split_once('-') {
            None => Ok(SizeDistribution::Fixed(num(s)?)),
            Some((lo, hi)) => {
                let (min, max) = (num(lo)?, num(hi)?);
                if min > max {
                    return Err(format!("size range {s:?} has min > max"));
                }
                Ok(SizeDistribution::Uniform { min, max })
            }
        }
    }
}

impl fmt::Display for SizeDistribution {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SizeDistribution::Fixed(n) => write!(f, "{n}"),
            SizeDistribution::Uniform { min, max } => write!(f, "{min}-{max}"),
            SizeDistribution::Knots { name, .. } => f.write_str(name),
            SizeDistribution::Gev(..) | SizeDistribution::GeneralizedPareto(..) => {
                f.write_str("etc")
            }
        }
    }
}

/// `--value-size`: a distribution of value sizes, in bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct ValueSizes(pub SizeDistribution);

impl ValueSizes {
    /// The one size of a fixed distribution, or an error naming `what` needs one.
    pub fn fixed(&self, what: &str) -> Result<usize, String> {
        self.0
            .fixed()
            .ok_or_else(|| format!("{what} takes a fixed --value-size (bytes), not {self}"))
    }
}

impl FromStr for ValueSizes {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let d: SizeDistribution = s.parse()?;
        if d.fixed().is_some_and(|n| n > MAX_VALUE_SIZE)
            || matches!(d, SizeDistribution::Uniform { max, .. } if max > MAX_VALUE_SIZE)
        {
            return Err(format!(
                "value size {s:?} is above the {MAX_VALUE_SIZE}-byte limit"
            ));
        }
        Ok(ValueSizes(d))
    }
}

impl fmt::Display for ValueSizes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// `--key-size`: a distribution of key sizes, in bytes (`etc` is ETC's key sizes).
#[derive(Debug, Clone, PartialEq)]
pub struct KeySizes(pub SizeDistribution);

impl FromStr for KeySizes {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let d = match s.trim() {
            "etc" => SizeDistribution::etc_keys(),
            other if other.starts_with("fb-") => {
                return Err(format!(
                    "key size {s:?}: the fb-* distributions are item sizes; give N, A-B or etc"
                ))
            }
            other => other.parse()?,
        };
        if d.max() != usize::MAX && d.max() > MAX_KEY_SIZE {
            return Err(format!(
                "key size {s:?} is above memcached's {MAX_KEY_SIZE}-byte limit"
            ));
        }
        Ok(KeySizes(d))
    }
}

impl fmt::Display for KeySizes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A uniform number in `[0, 1)` that is a pure function of `(n, salt)`: the quantile a
/// key draws its sizes and TTL at (splitmix64, so neighbouring keys are unrelated).
pub fn key_unit(n: u64, salt: u64) -> f64 {
    let mut z = n
        .wrapping_add(salt.wrapping_mul(0xD1B5_4A32_D192_ED03))
        .wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn median(d: &SizeDistribution) -> usize {
        let mut v: Vec<usize> = (0..20_001).map(|i| d.at_unit(key_unit(i, 7))).collect();
        v.sort_unstable();
        v[v.len() / 2]
    }

    fn mean(d: &SizeDistribution) -> f64 {
        let n = 200_000;
        (0..n)
            .map(|i| d.at_unit(key_unit(i, 9)).min(MAX_VALUE_SIZE) as f64)
            .sum::<f64>()
            / n as f64
    }

    #[test]
    fn parses_and_prints() {
        for s in [
            "100",
            "16-64",
            "fb-wildcard",
            "fb-app",
            "fb-replicated",
            "fb-regional",
            "etc",
        ] {
            assert_eq!(s.parse::<SizeDistribution>().unwrap().to_string(), s);
        }
        assert!("64-16".parse::<SizeDistribution>().is_err());
        assert!("fb-nope".parse::<SizeDistribution>().is_err());
        assert!("big".parse::<SizeDistribution>().is_err());
        assert!("2000000".parse::<ValueSizes>().is_err());
        assert!("10-251".parse::<KeySizes>().is_err());
        assert!("fb-app".parse::<KeySizes>().is_err());
        assert_eq!(
            "etc".parse::<KeySizes>().unwrap().0,
            SizeDistribution::etc_keys()
        );
        assert_eq!("100".parse::<ValueSizes>().unwrap().fixed("x"), Ok(100));
        assert!("etc"
            .parse::<ValueSizes>()
            .unwrap()
            .fixed("udp")
            .unwrap_err()
            .contains("udp"));
    }

    #[test]
    fn facebook_pools_hit_their_published_percentiles_and_means() {
        for &(name, published_mean, sizes) in &FB_POOLS {
            let d = SizeDistribution::facebook_pool(name).unwrap();
            for (q, want) in FB_PERCENTILES.iter().zip(sizes) {
                let got = d.at_unit(*q) as f64;
                assert!(
                    (got - want).abs() <= want * 0.01 + 1.0,
                    "{name} p{q}: {got} vs {want}"
                );
            }
            let m = mean(&d);
            match name {
                // Its percentiles alone already average above the published 66 B.
                "replicated" => assert!((m - 67.0).abs() < 1.0, "{name} mean {m}"),
                _ => assert!(
                    (m - published_mean).abs() < 0.1 * published_mean,
                    "{name} mean {m} vs {published_mean}"
                ),
            }
        }
        let wildcard = SizeDistribution::facebook_pool("wildcard").unwrap();
        let m = median(&wildcard);
        assert!((164..=174).contains(&m), "wildcard median {m}");
    }

    #[test]
    fn etc_medians_are_the_published_distributions() {
        // GEV median μ + σ((ln 2)^-ξ - 1)/ξ ≈ 33.85; GPD median σ(2^ξ - 1)/ξ ≈ 168.3.
        let keys = median(&SizeDistribution::etc_keys());
        assert!((32..=35).contains(&keys), "{keys}");
        let values = median(&SizeDistribution::etc_values());
        assert!((160..=176).contains(&values), "{values}");
        // GPD mean σ/(1-ξ) ≈ 329 (a little less after the cap on the far tail).
        let m = mean(&SizeDistribution::etc_values());
        assert!((290.0..360.0).contains(&m), "{m}");
    }

    proptest! {
        #[test]
        fn sizes_stay_within_bounds(unit in 0.0f64..1.0, lo in 0usize..500, span in 0usize..500) {
            let u = SizeDistribution::Uniform { min: lo, max: lo + span };
            let s = u.at_unit(unit);
            prop_assert!(s >= lo && s <= lo + span);
            for name in ["wildcard", "app", "replicated", "regional"] {
                let d = SizeDistribution::facebook_pool(name).unwrap();
                let s = d.at_unit(unit);
                prop_assert!((1..=MAX_VALUE_SIZE).contains(&s), "{} {}", name, s);
            }
            let k = SizeDistribution::etc_keys().at_unit(unit);
            prop_assert!(k < 1000);
        }

        #[test]
        fn key_units_are_in_range(n in any::<u64>(), salt in any::<u64>()) {
            let u = key_unit(n, salt);
            prop_assert!((0.0..1.0).contains(&u));
            prop_assert_eq!(u, key_unit(n, salt));
        }
    }
}
