//! Size distributions of the synthetic generator ([`SizeDist`]) and the size specs of
//! `--key-size` and `--value-size` ([`SizeSpec`]). Not here: TTL mixes and presets
//! (`workload`), drawing requests (`synthetic`).
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
//! - `etc-key` and `etc-value`: the key and value sizes of Facebook's ETC pool (Atikoglu et
//!   al., SIGMETRICS '12) as mutilate draws them (the load generator's
//!   [`SizeDistribution::etc_keys`] and [`SizeDistribution::etc_values`]: generalized
//!   extreme value keys, mean 35 B, clamped to 1–250 B; generalized Pareto values, clamped
//!   to 1 B–[`MAX_VALUE_SIZE`]);
//! - any of these behind `key:` (`key:lognormal:243:1:16-4096`) is drawn once per key (the
//!   key keeps its size), otherwise every request draws afresh.
//!
//! Every distribution is sampled by its quantile function ([`SizeDist::at_unit`]) so that a
//! per-key size is a pure function of one hashed uniform number; the log-normal's uses
//! Acklam's rational approximation of the normal quantile (relative error below 1.2e-9).

use std::fmt;
use std::str::FromStr;

use crate::sizes::{SizeDistribution, MAX_KEY_SIZE, MAX_VALUE_SIZE};

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
    /// Log-normal, rounded to whole bytes and clamped.
    LogNormal(LogNormal),
    /// ETC's key sizes, clamped to 1..=250.
    EtcKey,
    /// ETC's value sizes, clamped to 1..=[`MAX_VALUE_SIZE`].
    EtcValue,
}

/// Log-normal with unclamped mean `mean` and shape `sigma` (the standard deviation of the
/// size's logarithm), rounded to whole bytes and clamped to `min..=max`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LogNormal {
    /// Mean of the unclamped distribution, bytes (positive).
    pub mean: f64,
    /// Standard deviation of `ln(size)` (0 = always `mean`, clamped).
    pub sigma: f64,
    /// Smallest size.
    pub min: u32,
    /// Largest size.
    pub max: u32,
}

impl LogNormal {
    /// The `mu` of the underlying normal: `ln(mean) - sigma^2 / 2`.
    fn mu(&self) -> f64 {
        self.mean.ln() - self.sigma * self.sigma / 2.0
    }

    /// The size at quantile `unit` in `[0, 1)`.
    fn at_unit(&self, unit: f64) -> u32 {
        let size = (self.mu() + self.sigma * normal_quantile(unit)).exp();
        // NaN cannot occur (mean > 0, sigma finite); ±inf and out-of-range values
        // clamp, and `as` saturates.
        size.round().clamp(f64::from(self.min), f64::from(self.max)) as u32
    }

    /// The mean after clamping, not counting the rounding to whole bytes.
    fn mean(&self) -> f64 {
        let (lo, hi) = (f64::from(self.min), f64::from(self.max));
        let (mean, sigma) = (self.mean, self.sigma);
        if sigma == 0.0 {
            return mean.clamp(lo, hi);
        }
        // E[clamp(X, a, b)] = a P(X < a) + E[X; a <= X <= b] + b P(X > b), and for
        // X = exp(mu + sigma Z): E[X; X <= c] = mean * Phi((ln c - mu) / sigma - sigma).
        let mu = self.mu();
        let alpha = (lo.ln() - mu) / sigma;
        let beta = (hi.ln() - mu) / sigma;
        lo * normal_cdf(alpha)
            + mean * (normal_cdf(beta - sigma) - normal_cdf(alpha - sigma))
            + hi * (1.0 - normal_cdf(beta))
    }
}

impl fmt::Display for LogNormal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let LogNormal {
            mean,
            sigma,
            min,
            max,
        } = self;
        write!(f, "lognormal:{mean}:{sigma}:{min}-{max}")
    }
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
            SizeDist::LogNormal(d) => d.at_unit(unit),
            SizeDist::EtcKey => SizeDistribution::etc_keys()
                .at_unit(unit)
                .clamp(1, MAX_KEY_SIZE) as u32,
            SizeDist::EtcValue => SizeDistribution::etc_values()
                .at_unit(unit)
                .clamp(1, MAX_VALUE_SIZE) as u32,
        }
    }

    /// The mean size (for a log-normal, the mean after clamping, not counting the rounding
    /// to whole bytes).
    pub fn mean(&self) -> f64 {
        match *self {
            SizeDist::Fixed(n) => f64::from(n),
            SizeDist::Uniform { min, max } => (f64::from(min) + f64::from(max)) / 2.0,
            SizeDist::LogNormal(d) => d.mean(),
            // No closed form after clamping: the mean of 2^18 evenly spaced quantiles.
            SizeDist::EtcKey | SizeDist::EtcValue => {
                const POINTS: u32 = 1 << 18;
                let sum: f64 = (0..POINTS)
                    .map(|i| f64::from(self.at_unit((f64::from(i) + 0.5) / f64::from(POINTS))))
                    .sum();
                sum / f64::from(POINTS)
            }
        }
    }
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
    pub(crate) const fn per_key(min: u32, max: u32) -> SizeSpec {
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
        let dist = if body == "etc-key" {
            SizeDist::EtcKey
        } else if body == "etc-value" {
            SizeDist::EtcValue
        } else if let Some(params) = body.strip_prefix("lognormal:") {
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
            SizeDist::LogNormal(LogNormal {
                mean,
                sigma,
                min,
                max,
            })
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
            SizeDist::LogNormal(d) => d.fmt(f),
            SizeDist::EtcKey => f.write_str("etc-key"),
            SizeDist::EtcValue => f.write_str("etc-value"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
                dist: SizeDist::LogNormal(LogNormal {
                    mean: 243.0,
                    sigma: 1.0,
                    min: 16,
                    max: 4096
                }),
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

        let d = SizeDist::LogNormal(LogNormal {
            mean: 243.0,
            sigma: 1.0,
            min: 16,
            max: 4096,
        });
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
        let wide = SizeDist::LogNormal(LogNormal {
            mean: 243.0,
            sigma: 0.5,
            min: 0,
            max: u32::MAX,
        });
        assert!((wide.mean() - 243.0).abs() < 1e-3, "{}", wide.mean());
        let fixed = SizeDist::LogNormal(LogNormal {
            mean: 5000.0,
            sigma: 0.0,
            min: 16,
            max: 4096,
        });
        assert_eq!((fixed.at_unit(0.3), fixed.mean()), (4096, 4096.0));
    }

    #[test]
    fn etc_sizes_parse_and_have_the_published_shape() {
        let k: SizeSpec = "etc-key".parse().unwrap();
        let v: SizeSpec = "key:etc-value".parse().unwrap();
        assert_eq!(
            (k.dist, v.dist, v.per_key),
            (SizeDist::EtcKey, SizeDist::EtcValue, true)
        );
        assert_eq!(v.to_string(), "key:etc-value");
        // GEV(30.8, 8.2, 0.079): median about 34 B, mean about 35 B.
        assert_eq!(k.dist.at_unit(0.5), 33);
        assert!((k.dist.mean() - 35.0).abs() < 1.5, "{}", k.dist.mean());
        // Generalized Pareto(0, 214.5, 0.348): median sigma (2^xi - 1) / xi, about 168 B.
        let median = 214.476 * (0.5f64.powf(-0.348_238) - 1.0) / 0.348_238;
        assert_eq!(v.dist.at_unit(0.5), median as u32);
        // Mean sigma / (1 - xi) = 329 B before the (negligible) clamping.
        assert!((v.dist.mean() - 329.1).abs() < 3.0, "{}", v.dist.mean());
        assert!(v.dist.at_unit(0.999_999_9) as usize <= MAX_VALUE_SIZE);
        assert!(k.dist.at_unit(0.0) >= 1);
    }
}
