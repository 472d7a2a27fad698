//! Workload *shapes* for the synthetic generator: TTL mixes, size
//! distributions and the named presets modelled on the Segcache paper's
//! (NSDI '21) Table 3 production workloads `c`, `u1`, `u2`, `n` and `mix`.
//!
//! Preset TTL mixes (the share left over goes to the largest class, which is
//! how the paper's `c` row is read: "remainder 1d"):
//! - `c`: 1d 65%, 14d 27%, 12h 7% (1d gets the remaining 1%)
//! - `u1`: 5d 100%; `u2`: 12h 100%; `n`: 30d 100%
//! - `mix`: 30d 14%, 14d 11%, 24h 23%, 12h 38%, 2min 12% (12h gets the remaining 2%)
//! - `etc`: Facebook's ETC pool (Atikoglu et al., SIGMETRICS '12): no TTL (the paper
//!   reports none; items leave by eviction or delete), ETC's key and value sizes drawn once
//!   per key (`etc-key`, `etc-value`; mean object 364 B). Its 30:1 get:set ratio is
//!   `--write-ratio 0.032`.
//!
//! Preset sizes reproduce Table 3's mean object (key + value) sizes: c 230 B,
//! u1 290 B, u2 55 B, n 45 B, mix 243 B. Keys are 16–32 B (10–20 B for the small
//! u2 and n), values uniform over ±50% of the remaining mean, both drawn once
//! per key. Not here: drawing requests (that is `synthetic`).
//!
//! Size specs are in `size`.

use std::str::FromStr;

use super::duration::{parse_seconds, DurationError};
use super::size::{SizeDist, SizeSpec};

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
            "etc" => vec![(0, 1.0)],
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

/// Parses a TTL: whole seconds, plain or with a unit (the grammar of [`crate::duration`]).
fn parse_ttl(t: &str) -> Result<u32, String> {
    let t = t.trim();
    let secs = parse_seconds(t).map_err(|e| match e {
        DurationError::NotANumber => format!("TTL {t:?} is not a duration"),
        DurationError::UnknownUnit => {
            format!("TTL {t:?} has an unknown unit (use s, m, h or d)")
        }
    })?;
    if secs.fract() != 0.0 {
        return Err(format!("TTL {t:?} is not a whole number of seconds"));
    }
    if secs > f64::from(u32::MAX) {
        return Err(format!("TTL {t:?} is too long"));
    }
    Ok(secs as u32)
}

/// The `NAME<sep>SHARE` pairs of a comma-separated list (empty parts skipped), names trimmed
/// and shares parsed: the grammar of TTL mixes (`120:0.5,3600:0.5`) and of the load
/// generator's request mix (`get=0.8,set=0.2`). `form` names a pair's form in errors.
pub fn share_list<'a>(s: &'a str, sep: char, form: &str) -> Result<Vec<(&'a str, f64)>, String> {
    s.split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|part| {
            let (name, share) = part
                .split_once(sep)
                .ok_or_else(|| format!("{part:?} is not {form}"))?;
            let name = name.trim();
            let share = share
                .trim()
                .parse()
                .map_err(|_| format!("share {share:?} of {name} is not a number"))?;
            Ok((name, share))
        })
        .collect()
}

impl FromStr for TtlMix {
    type Err = String;

    /// A preset name, or `ttl:share,...` such as `120:0.5,3600:0.5` or `12h:0.4,1d:0.6`.
    fn from_str(s: &str) -> Result<Self, String> {
        if let Some(mix) = TtlMix::preset(s.trim()) {
            return Ok(mix);
        }
        let classes = share_list(s, ':', "a TTL class ttl:share")?
            .into_iter()
            .map(|(ttl, share)| Ok((parse_ttl(ttl)?, share)))
            .collect::<Result<_, String>>()?;
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
pub const PRESETS: [&str; 6] = ["c", "u1", "u2", "n", "mix", "etc"];

impl Workload {
    /// A preset from Segcache's Table 3 (`c`, `u1`, `u2`, `n`, `mix`), Facebook's `etc`, or a
    /// custom TTL spec (see [`TtlMix`]'s `FromStr`) with `mix`'s sizes.
    pub fn parse(spec: &str) -> Result<Workload, String> {
        let spec = spec.trim();
        let (key_size, value_size) = match spec {
            "c" => (SizeSpec::per_key(16, 32), SizeSpec::per_key(103, 309)),
            "u1" => (SizeSpec::per_key(16, 32), SizeSpec::per_key(133, 399)),
            "u2" => (SizeSpec::per_key(10, 20), SizeSpec::per_key(20, 60)),
            "n" => (SizeSpec::per_key(10, 20), SizeSpec::per_key(15, 45)),
            "etc" => (
                SizeSpec {
                    dist: SizeDist::EtcKey,
                    per_key: true,
                },
                SizeSpec {
                    dist: SizeDist::EtcValue,
                    per_key: true,
                },
            ),
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
        // The shared duration grammar: minutes spelled out, fractions that make whole
        // seconds; a TTL is whole seconds that fit a u32.
        let m: TtlMix = "10min:0.5,0.5m:0.5".parse().unwrap();
        assert_eq!(m.classes(), &[(600, 0.5), (30, 0.5)]);
        let err = |s: &str| s.parse::<TtlMix>().unwrap_err();
        assert!(
            err("1.5:1").contains("whole number of seconds"),
            "{}",
            err("1.5:1")
        );
        assert!(err("250ms:1").contains("whole number of seconds"));
        assert!(err("5y:1").contains("unknown unit"));
        assert!(err("x1:1").contains("not a duration"));
        assert!(err("50000d:1").contains("too long"));
        let w = Workload::parse("60:1").unwrap();
        assert_eq!(w.ttl_mix, TtlMix::single(60));
        assert_eq!(w.mean_object_size(), 243.0);
        assert!(Workload::parse("nope").unwrap_err().contains("presets are"));
    }

    #[test]
    fn share_lists_trim_names_skip_empty_parts_and_name_the_bad_pair() {
        let list = share_list(" get=0.8, set = 0.2,", '=', "kind=share").unwrap();
        assert_eq!(list, [("get", 0.8), ("set", 0.2)]);
        assert_eq!(share_list("", ':', "ttl:share").unwrap(), []);
        let err = share_list("get=1,set", '=', "kind=share").unwrap_err();
        assert_eq!(err, r#""set" is not kind=share"#);
        let err = share_list("120:x", ':', "ttl:share").unwrap_err();
        assert_eq!(err, r#"share "x" of 120 is not a number"#);
    }
}
