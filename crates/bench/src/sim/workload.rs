//! Workload *shapes* for the synthetic generator: TTL mixes, size
//! distributions and the named presets modelled on the Segcache paper's
//! (NSDI '21) Table 3 production workloads `c`, `u1`, `u2`, `n` and `mix`.
//!
//! Preset TTL mixes (the share left over goes to the largest class, which is
//! how the paper's `c` row is read: "remainder 1d"):
//! - `c`: 1d 65%, 14d 27%, 12h 7% (1d gets the remaining 1%)
//! - `u1`: 5d 100%; `u2`: 12h 100%; `n`: 30d 100%
//! - `mix`: 30d 14%, 14d 11%, 24h 23%, 12h 38%, 2min 12% (12h gets the remaining 2%)
//!
//! Preset sizes reproduce Table 3's mean object (key + value) sizes: c 230 B,
//! u1 290 B, u2 55 B, n 45 B, mix 243 B. Keys are 16–32 B (10–20 B for the small
//! u2 and n), values uniform over ±50% of the remaining mean, both drawn once
//! per key. Not here: drawing requests (that is `synthetic`).
//!
//! Size specs ([`SizeSpec`], `--key-size` and `--value-size`):
//! - `N`: always N bytes;
//! - `MIN-MAX`: uniform over `MIN..=MAX`;
//! - `lognormal:MEAN:SIGMA:MIN-MAX`: log-normal, `exp(mu + SIGMA * Z)` with `Z` standard
//!   normal and `mu = ln(MEAN) - SIGMA^2 / 2`, so that MEAN is the mean of the *unclamped*
//!   distribution; each draw is rounded to whole bytes and clamped to `MIN..=MAX` (the
//!   reported mean, [`SizeDist::mean`], is the clamped one). `lognormal:243:1:16-4096`
//!   has a median of 147 B and a clamped mean of 242.4 B (1.3% of draws are raised to
//!   16 B, 0.04% cut to 4 KiB);
//! - any of these behind `key:` (`key:lognormal:243:1:16-4096`) is drawn once per key (the
//!   key keeps its size), otherwise every request draws afresh.
//!
//! Every distribution is sampled by its quantile function ([`SizeDist::at_unit`]) so that a
//! per-key size is a pure function of one hashed uniform number; the log-normal's uses
//! Acklam's rational approximation of the normal quantile (relative error below 1.2e-9).

use std::fmt;
use std::str::FromStr;

/// A distribution of byte sizes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SizeDist {
    /// Always this size.
    Fixed(u32),
    /// Uniform over `min..=max`.
    Uniform {
        /// Smallest size.
        min: u32,
        /// Largest size.
        max: u32,
    },
    /// Log-normal with unclamped mean `mean` and shape `sigma` (the standard deviation of
    /// the size's logarithm), rounded to whole bytes and clamped to `min..=max`.
    LogNormal {
        /// Mean of the unclamped distribution, bytes (positive).
        mean: f64,
        /// Standard deviation of `ln(size)` (0 = always `mean`, clamped).
        sigma: f64,
        /// Smallest size.
        min: u32,
        /// Largest size.
        max: u32,
    },
}

impl SizeDist {
    /// The size at quantile `unit` in `[0, 1)`.
    pub fn at_unit(&self, unit: f64) -> u32 {
        match *self {
            SizeDist::Fixed(n) => n,
            SizeDist::Uniform { min, max } => {
                let span = f64::from(max - min) + 1.0;
                min + ((unit * span) as u32).min(max - min)
            }
            SizeDist::LogNormal {
                mean,
                sigma,
                min,
                max,
            } => {
                let size = (log_normal_mu(mean, sigma) + sigma * normal_quantile(unit)).exp();
                // NaN cannot occur (mean > 0, sigma finite); ±inf and out-of-range values
                // clamp, and `as` saturates.
                size.round().clamp(f64::from(min), f64::from(max)) as u32
            }
        }
    }

    /// The mean size (for a log-normal, the mean after clamping, not counting the rounding
    /// to whole bytes).
    pub fn mean(&self) -> f64 {
        match *self {
            SizeDist::Fixed(n) => f64::from(n),
            SizeDist::Uniform { min, max } => (f64::from(min) + f64::from(max)) / 2.0,
            SizeDist::LogNormal {
                mean,
                sigma,
                min,
                max,
            } => {
                let (lo, hi) = (f64::from(min), f64::from(max));
                if sigma == 0.0 {
                    return mean.clamp(lo, hi);
                }
                // E[clamp(X, a, b)] = a P(X < a) + E[X; a <= X <= b] + b P(X > b), and for
                // X = exp(mu + sigma Z): E[X; X <= c] = mean * Phi((ln c - mu) / sigma - sigma).
                let mu = log_normal_mu(mean, sigma);
                let alpha = (lo.ln() - mu) / sigma;
                let beta = (hi.ln() - mu) / sigma;
                lo * normal_cdf(alpha)
                    + mean * (normal_cdf(beta - sigma) - normal_cdf(alpha - sigma))
                    + hi * (1.0 - normal_cdf(beta))
            }
        }
    }
}

/// The `mu` of a log-normal whose mean is `mean`: `ln(mean) - sigma^2 / 2`.
fn log_normal_mu(mean: f64, sigma: f64) -> f64 {
    mean.ln() - sigma * sigma / 2.0
}

/// The standard normal quantile (inverse CDF) at `p`: Acklam's rational approximation,
/// relative error below 1.15e-9. `p <= 0` gives -inf and `p >= 1` gives +inf.
fn normal_quantile(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] = [
        7.784_695_709_041_462e-3,
        3.224_671_290_700_398e-1,
        2.445_134_137_142_996,
        3.754_408_661_907_416,
    ];
    const LOW: f64 = 0.024_25;
    if p <= 0.0 {
        return f64::NEG_INFINITY;
    }
    if p >= 1.0 {
        return f64::INFINITY;
    }
    let tail = |q: f64| {
        let q = (-2.0 * q.ln()).sqrt();
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    };
    if p < LOW {
        tail(p)
    } else if p > 1.0 - LOW {
        -tail(1.0 - p)
    } else {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    }
}

/// The standard normal CDF, `erfc(-x / sqrt 2) / 2`, with the Chebyshev-fitted `erfc` of
/// Numerical Recipes (fractional error below 1.2e-7).
fn normal_cdf(x: f64) -> f64 {
    let z = (x / std::f64::consts::SQRT_2).abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -z * z - 1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98
                                + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let erfc = t * poly.exp();
    if x >= 0.0 {
        1.0 - erfc / 2.0
    } else {
        erfc / 2.0
    }
}

/// A size distribution plus whether a key draws its size once (`per_key`) or
/// every request draws afresh.
///
/// Text form: `64` (fixed), `32-128` (uniform, drawn per request),
/// `lognormal:MEAN:SIGMA:MIN-MAX` (log-normal, see the module docs), and any of them
/// behind `key:` (`key:32-128`, `key:lognormal:243:1:16-4096`) to draw once per key.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SizeSpec {
    /// The distribution.
    pub dist: SizeDist,
    /// Draw once per key (the key keeps its size) rather than per request.
    pub per_key: bool,
}

impl SizeSpec {
    const fn per_key(min: u32, max: u32) -> SizeSpec {
        SizeSpec {
            dist: SizeDist::Uniform { min, max },
            per_key: true,
        }
    }
}

impl FromStr for SizeSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (per_key, body) = match s.trim().strip_prefix("key:") {
            Some(rest) => (true, rest),
            None => (false, s.trim()),
        };
        let num = |t: &str| {
            t.trim()
                .parse::<u32>()
                .map_err(|_| format!("size {t:?} in {s:?} is not a byte count"))
        };
        let range = |t: &str| {
            let (lo, hi) = t
                .split_once('-')
                .ok_or_else(|| format!("{t:?} in {s:?} is not a size range MIN-MAX"))?;
            let (min, max) = (num(lo)?, num(hi)?);
            if min > max {
                return Err(format!("size range {s:?} has min > max"));
            }
            Ok((min, max))
        };
        let dist = if let Some(params) = body.strip_prefix("lognormal:") {
            let parts: Vec<&str> = params.split(':').collect();
            let [mean, sigma, bounds] = parts[..] else {
                return Err(format!(
                    "log-normal size {s:?} is not lognormal:MEAN:SIGMA:MIN-MAX"
                ));
            };
            let real = |t: &str, what: &str| {
                t.trim()
                    .parse::<f64>()
                    .ok()
                    .filter(|x| x.is_finite())
                    .ok_or_else(|| format!("{what} {t:?} in {s:?} is not a number"))
            };
            let (mean, sigma) = (real(mean, "mean")?, real(sigma, "sigma")?);
            if mean <= 0.0 || sigma < 0.0 {
                return Err(format!(
                    "log-normal size {s:?} needs MEAN > 0 and SIGMA >= 0"
                ));
            }
            let (min, max) = range(bounds)?;
            SizeDist::LogNormal {
                mean,
                sigma,
                min,
                max,
            }
        } else if body.contains('-') {
            let (min, max) = range(body)?;
            SizeDist::Uniform { min, max }
        } else {
            SizeDist::Fixed(num(body)?)
        };
        Ok(SizeSpec { dist, per_key })
    }
}

impl fmt::Display for SizeSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.per_key {
            f.write_str("key:")?;
        }
        match self.dist {
            SizeDist::Fixed(n) => write!(f, "{n}"),
            SizeDist::Uniform { min, max } => write!(f, "{min}-{max}"),
            SizeDist::LogNormal {
                mean,
                sigma,
                min,
                max,
            } => write!(f, "lognormal:{mean}:{sigma}:{min}-{max}"),
        }
    }
}

/// TTL classes with their shares of the key population.
#[derive(Debug, Clone, PartialEq)]
pub struct TtlMix {
    /// `(ttl seconds, share)`; shares sum to 1. TTL 0 means never expires.
    classes: Vec<(u32, f64)>,
}

const MIN: u32 = 60;
const HOUR: u32 = 3600;
const DAY: u32 = 86_400;

impl TtlMix {
    /// Builds a mix; shares must be positive and sum to at most 1, and the
    /// remainder is added to the largest class.
    pub fn new(classes: Vec<(u32, f64)>) -> Result<TtlMix, String> {
        if classes.is_empty() {
            return Err("a TTL mix needs at least one class".into());
        }
        if let Some((ttl, share)) = classes.iter().find(|(_, p)| !(p.is_finite() && *p > 0.0)) {
            return Err(format!(
                "TTL class {ttl}s has share {share}; shares must be > 0"
            ));
        }
        let total: f64 = classes.iter().map(|(_, p)| p).sum();
        if total > 1.0 + 1e-9 {
            return Err(format!("TTL shares sum to {total}, more than 1"));
        }
        let mut classes = classes;
        let largest = (0..classes.len())
            .max_by(|&a, &b| classes[a].1.total_cmp(&classes[b].1).then(b.cmp(&a)))
            .unwrap_or(0);
        classes[largest].1 += (1.0 - total).max(0.0);
        Ok(TtlMix { classes })
    }

    /// A single TTL for every key.
    pub fn single(ttl: u32) -> TtlMix {
        TtlMix {
            classes: vec![(ttl, 1.0)],
        }
    }

    /// The named Segcache Table 3 mixes: `c`, `u1`, `u2`, `n`, `mix`.
    pub fn preset(name: &str) -> Option<TtlMix> {
        let classes = match name {
            "c" => vec![(DAY, 0.65), (14 * DAY, 0.27), (12 * HOUR, 0.07)],
            "u1" => vec![(5 * DAY, 1.0)],
            "u2" => vec![(12 * HOUR, 1.0)],
            "n" => vec![(30 * DAY, 1.0)],
            "mix" => vec![
                (30 * DAY, 0.14),
                (14 * DAY, 0.11),
                (24 * HOUR, 0.23),
                (12 * HOUR, 0.38),
                (2 * MIN, 0.12),
            ],
            _ => return None,
        };
        TtlMix::new(classes).ok()
    }

    /// The `(ttl, share)` classes.
    pub fn classes(&self) -> &[(u32, f64)] {
        &self.classes
    }

    /// The TTL at quantile `unit` in `[0, 1)` of the key population.
    pub fn ttl_at_unit(&self, unit: f64) -> u32 {
        let mut acc = 0.0;
        for &(ttl, share) in &self.classes {
            acc += share;
            if unit < acc {
                return ttl;
            }
        }
        self.classes.last().map_or(0, |c| c.0)
    }
}

/// Parses a duration: plain seconds or with a suffix `s`, `m`/`min`, `h`, `d`.
fn parse_duration(t: &str) -> Result<u32, String> {
    let t = t.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let n: u32 = digits
        .parse()
        .map_err(|_| format!("TTL {t:?} is not a duration"))?;
    let scale = match unit {
        "" | "s" => 1,
        "m" | "min" => MIN,
        "h" => HOUR,
        "d" => DAY,
        _ => return Err(format!("TTL {t:?} has an unknown unit (use s, m, h or d)")),
    };
    n.checked_mul(scale)
        .ok_or_else(|| format!("TTL {t:?} is too long"))
}

impl FromStr for TtlMix {
    type Err = String;

    /// A preset name, or `ttl:share,...` such as `120:0.5,3600:0.5` or `12h:0.4,1d:0.6`.
    fn from_str(s: &str) -> Result<Self, String> {
        if let Some(mix) = TtlMix::preset(s.trim()) {
            return Ok(mix);
        }
        let mut classes = Vec::new();
        for part in s.split(',').filter(|p| !p.trim().is_empty()) {
            let (ttl, share) = part
                .split_once(':')
                .ok_or_else(|| format!("TTL class {part:?} is not ttl:share"))?;
            let share: f64 = share
                .trim()
                .parse()
                .map_err(|_| format!("share {share:?} is not a number"))?;
            classes.push((parse_duration(ttl)?, share));
        }
        TtlMix::new(classes)
    }
}

/// A named workload shape: TTL mix and key/value sizes.
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    /// Preset name or the custom TTL spec it came from.
    pub name: String,
    /// TTL class shares; a key's class is fixed.
    pub ttl_mix: TtlMix,
    /// Key sizes; always drawn once per key (a key's bytes depend on its size).
    pub key_size: SizeSpec,
    /// Value sizes.
    pub value_size: SizeSpec,
}

/// Names of the preset workloads.
pub const PRESETS: [&str; 5] = ["c", "u1", "u2", "n", "mix"];

impl Workload {
    /// A preset from Segcache's Table 3 (`c`, `u1`, `u2`, `n`, `mix`), or a
    /// custom TTL spec (see [`TtlMix`]'s `FromStr`) with `mix`'s sizes.
    pub fn parse(spec: &str) -> Result<Workload, String> {
        let spec = spec.trim();
        let (key_size, value_size) = match spec {
            "c" => (SizeSpec::per_key(16, 32), SizeSpec::per_key(103, 309)),
            "u1" => (SizeSpec::per_key(16, 32), SizeSpec::per_key(133, 399)),
            "u2" => (SizeSpec::per_key(10, 20), SizeSpec::per_key(20, 60)),
            "n" => (SizeSpec::per_key(10, 20), SizeSpec::per_key(15, 45)),
            _ => (SizeSpec::per_key(16, 32), SizeSpec::per_key(110, 328)),
        };
        let ttl_mix = spec.parse().map_err(|e| {
            format!(
                "workload {spec:?}: {e} (presets are {}, or give ttl:share,...)",
                PRESETS.join(", ")
            )
        })?;
        Ok(Workload {
            name: spec.to_string(),
            ttl_mix,
            key_size,
            value_size,
        })
    }

    /// Mean key + value bytes per object (per key, for per-key sizes).
    pub fn mean_object_size(&self) -> f64 {
        self.key_size.dist.mean() + self.value_size.dist.mean()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_have_table3_mean_object_sizes() {
        for (name, mean) in [
            ("c", 230.0),
            ("u1", 290.0),
            ("u2", 55.0),
            ("n", 45.0),
            ("mix", 243.0),
        ] {
            let w = Workload::parse(name).unwrap();
            assert_eq!(w.mean_object_size(), mean, "{name}");
            assert!(w.key_size.per_key && w.value_size.per_key);
        }
    }

    #[test]
    fn preset_ttl_mixes() {
        let c = TtlMix::preset("c").unwrap();
        assert_eq!(c.classes().len(), 3);
        assert!(
            (c.classes()[0].1 - 0.66).abs() < 1e-12,
            "1d takes the remainder"
        );
        let mix = TtlMix::preset("mix").unwrap();
        let twelve_h = mix.classes().iter().find(|c| c.0 == 12 * HOUR).unwrap();
        assert!((twelve_h.1 - 0.40).abs() < 1e-12);
        assert_eq!(mix.ttl_at_unit(0.0), 30 * DAY);
        assert_eq!(mix.ttl_at_unit(0.999_999), 120);
        assert_eq!(TtlMix::preset("u1").unwrap().classes(), &[(5 * DAY, 1.0)]);
        assert_eq!(TtlMix::preset("u2").unwrap().ttl_at_unit(0.5), 43_200);
        assert_eq!(TtlMix::preset("n").unwrap().ttl_at_unit(0.5), 2_592_000);
        for name in PRESETS {
            let total: f64 = TtlMix::preset(name)
                .unwrap()
                .classes()
                .iter()
                .map(|c| c.1)
                .sum();
            assert!((total - 1.0).abs() < 1e-12, "{name}");
        }
    }

    #[test]
    fn custom_ttl_specs() {
        let m: TtlMix = "120:0.5,3600:0.5".parse().unwrap();
        assert_eq!(m.classes(), &[(120, 0.5), (3600, 0.5)]);
        assert_eq!(m.ttl_at_unit(0.49), 120);
        assert_eq!(m.ttl_at_unit(0.5), 3600);
        let m: TtlMix = "2m:0.2, 1d:0.3,0:0.4".parse().unwrap();
        assert_eq!(
            m.classes().iter().map(|c| c.0).collect::<Vec<_>>(),
            vec![120, DAY, 0]
        );
        assert!((m.classes()[2].1 - 0.5).abs() < 1e-12);
        assert!("120:0.7,60:0.7".parse::<TtlMix>().is_err());
        assert!("120".parse::<TtlMix>().is_err());
        assert!("5y:1".parse::<TtlMix>().is_err());
        assert!("120:-1".parse::<TtlMix>().is_err());
        let w = Workload::parse("60:1").unwrap();
        assert_eq!(w.ttl_mix, TtlMix::single(60));
        assert_eq!(w.mean_object_size(), 243.0);
        assert!(Workload::parse("nope").unwrap_err().contains("presets are"));
    }

    #[test]
    fn size_specs_parse_and_sample() {
        let s: SizeSpec = "64".parse().unwrap();
        assert_eq!(
            s,
            SizeSpec {
                dist: SizeDist::Fixed(64),
                per_key: false
            }
        );
        let s: SizeSpec = "key:10-20".parse().unwrap();
        assert_eq!(s, SizeSpec::per_key(10, 20));
        assert_eq!(s.to_string(), "key:10-20");
        assert_eq!(s.dist.at_unit(0.0), 10);
        assert_eq!(s.dist.at_unit(0.999_999_9), 20);
        assert_eq!(s.dist.mean(), 15.0);
        assert!("20-10".parse::<SizeSpec>().is_err());
        assert!("big".parse::<SizeSpec>().is_err());
    }

    #[test]
    fn log_normal_specs_parse_round_trip_and_reject_nonsense() {
        let s: SizeSpec = "key:lognormal:243:1:16-4096".parse().unwrap();
        assert_eq!(
            s,
            SizeSpec {
                dist: SizeDist::LogNormal {
                    mean: 243.0,
                    sigma: 1.0,
                    min: 16,
                    max: 4096
                },
                per_key: true
            }
        );
        assert_eq!(s.to_string(), "key:lognormal:243:1:16-4096");
        let s: SizeSpec = " lognormal:100.5:0.25:1-1000 ".parse().unwrap();
        assert!(!s.per_key);
        assert_eq!(s.to_string().parse::<SizeSpec>().unwrap(), s);
        for bad in [
            "lognormal:243:1",
            "lognormal:243:1:16",
            "lognormal:243:1:4096-16",
            "lognormal:0:1:16-4096",
            "lognormal:243:-1:16-4096",
            "lognormal:243:nan:16-4096",
            "lognormal:x:1:16-4096",
            "lognormal:243:1:16-4096:9",
        ] {
            assert!(bad.parse::<SizeSpec>().is_err(), "{bad}");
        }
    }

    #[test]
    fn log_normal_quantiles_and_clamped_mean() {
        // Known normal quantiles.
        assert!((normal_quantile(0.5)).abs() < 1e-12);
        assert!((normal_quantile(0.975) - 1.959_963_985).abs() < 1e-8);
        assert!((normal_quantile(0.001) + 3.090_232_306).abs() < 1e-8);
        assert!((normal_cdf(1.959_963_985) - 0.975).abs() < 1e-7);
        assert!((normal_cdf(0.0) - 0.5).abs() < 1e-7);

        let d = SizeDist::LogNormal {
            mean: 243.0,
            sigma: 1.0,
            min: 16,
            max: 4096,
        };
        // Median exp(mu) = 243 / e^0.5 = 147.4.
        assert_eq!(d.at_unit(0.5), 147);
        assert_eq!(d.at_unit(0.0), 16);
        assert_eq!(d.at_unit(0.999_999_999), 4096);
        assert!((d.mean() - 242.43).abs() < 0.01, "{}", d.mean());
        // The sample mean of evenly spaced quantiles matches the clamped mean.
        let n = 200_000;
        let sampled: f64 = (0..n)
            .map(|i| f64::from(d.at_unit((f64::from(i) + 0.5) / f64::from(n))))
            .sum::<f64>()
            / f64::from(n);
        assert!(
            (sampled - d.mean()).abs() < 0.5,
            "{sampled} vs {}",
            d.mean()
        );
        // Without clamping in the way, the mean is the given one.
        let wide = SizeDist::LogNormal {
            mean: 243.0,
            sigma: 0.5,
            min: 0,
            max: u32::MAX,
        };
        assert!((wide.mean() - 243.0).abs() < 1e-3, "{}", wide.mean());
        let fixed = SizeDist::LogNormal {
            mean: 5000.0,
            sigma: 0.0,
            min: 16,
            max: 4096,
        };
        assert_eq!((fixed.at_unit(0.3), fixed.mean()), (4096, 4096.0));
    }
}
