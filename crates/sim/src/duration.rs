//! The one duration grammar of `memfleet bench`'s and `memfleet sim`'s flags: a decimal
//! number, then optionally a unit: `ms`, `s` (the default), `m` or `min`, `h`, `d`
//! (`10s`, `250ms`, `1.5`, `2m`, `12h`, `1d`). Each caller decides what it accepts beyond
//! that: the load generator any non-negative duration (`--duration`, `--warmup`, ...),
//! TTL mixes whole seconds that fit a `u32` (`workload`). Not here: what the durations
//! are for.

/// Why a duration did not parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DurationError {
    /// The number part is not a finite, non-negative decimal number.
    NotANumber,
    /// The text ends in letters that are not one of the units.
    UnknownUnit,
}

/// The units, longest match first (`ms` before `s` and `m`), with their seconds.
const UNITS: [(&str, f64); 6] = [
    ("ms", 1e-3),
    ("min", 60.0),
    ("s", 1.0),
    ("m", 60.0),
    ("h", 3600.0),
    ("d", 86_400.0),
];

/// The seconds `s` stands for (the number times its unit's seconds; spaces around the
/// number are allowed).
pub fn parse_seconds(s: &str) -> Result<f64, DurationError> {
    let s = s.trim();
    let (num, scale) = match UNITS.iter().find(|(unit, _)| s.ends_with(unit)) {
        Some((unit, scale)) => (&s[..s.len() - unit.len()], *scale),
        None if s.ends_with(|c: char| c.is_ascii_alphabetic()) => {
            return Err(DurationError::UnknownUnit)
        }
        None => (s, 1.0),
    };
    match num.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v * scale),
        _ => Err(DurationError::NotANumber),
    }
}

/// A flag's duration: [`parse_seconds`] as a [`std::time::Duration`], with the error a
/// command line shows. What `memfleet bench`'s duration flags (`--duration`, `--warmup`,
/// ...) take; `humantime` is not used because it has no plain numbers of seconds and no
/// fractions (`1.5`, `1.5s`).
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    parse_seconds(s)
        .ok()
        .and_then(|secs| std::time::Duration::try_from_secs_f64(secs).ok())
        .ok_or_else(|| format!("bad duration {s:?} (like 10s, 500ms, 1m)"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn flag_durations() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("1.5"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("-1s").is_err());
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("5min"), Ok(Duration::from_secs(300)));
        assert!(parse_duration("1e30d").is_err());
    }

    #[test]
    fn numbers_with_and_without_units() {
        assert_eq!(parse_seconds("10s"), Ok(10.0));
        assert_eq!(parse_seconds("250ms"), Ok(0.25));
        assert_eq!(parse_seconds("1.5"), Ok(1.5));
        assert_eq!(parse_seconds(" 2m "), Ok(120.0));
        assert_eq!(parse_seconds("2 min"), Ok(120.0));
        assert_eq!(parse_seconds("12h"), Ok(43_200.0));
        assert_eq!(parse_seconds("1d"), Ok(86_400.0));
        assert_eq!(parse_seconds("0"), Ok(0.0));
    }

    #[test]
    fn what_is_not_a_duration() {
        assert_eq!(parse_seconds("soon"), Err(DurationError::UnknownUnit));
        assert_eq!(parse_seconds("5y"), Err(DurationError::UnknownUnit));
        assert_eq!(parse_seconds("-1s"), Err(DurationError::NotANumber));
        assert_eq!(parse_seconds("s"), Err(DurationError::NotANumber));
        assert_eq!(parse_seconds(""), Err(DurationError::NotANumber));
        assert_eq!(parse_seconds("1e999"), Err(DurationError::NotANumber));
        assert_eq!(parse_seconds("1..5s"), Err(DurationError::NotANumber));
    }
}
