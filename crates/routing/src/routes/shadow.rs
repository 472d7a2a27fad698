//! `shadow`: `main` answers; the same requests for the keys `key_fraction = [from, to)` of
//! the hash space (or whose server is `index_range = [from, to)` of main's pool; default:
//! every key) also go to `shadow`, at most `max_pending` at once (more are dropped and
//! counted); gets that reach both compare the replies (mcrouter's `ShadowRoute`, beyond it
//! the comparison).

use super::RouteType;
use serde::Deserialize;

/// A `shadow` route's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shadow {
    /// Answers the client.
    pub main: String,
    /// Gets a copy of the requests for the chosen keys.
    pub shadow: String,
    /// The chosen keys.
    pub keys: ShadowKeys,
    /// Shadow requests in flight at most; more are dropped (and counted).
    pub max_pending: usize,
}

/// Which keys a `shadow` route shadows.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ShadowKeys {
    /// Every key.
    All,
    /// The keys whose hash (xxh3, as a fraction of 2^64) falls in `[from, to)`: the same
    /// keys on every router and every run.
    KeyFraction(f64, f64),
    /// The keys whose server in the main pool has an index in `[from, to)` (main must be a
    /// pool).
    IndexRange(usize, usize),
}

impl Eq for ShadowKeys {}

/// A `shadow` route's table.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ShadowTable {
    main: String,
    shadow: String,
    key_fraction: Option<Vec<f64>>,
    index_range: Option<Vec<i64>>,
    max_pending: Option<u32>,
}

impl RouteType for Shadow {
    type Table = ShadowTable;

    fn read(_: &str, t: ShadowTable) -> Result<Shadow, String> {
        if t.max_pending == Some(0) {
            return Err("max_pending = 0 would shadow nothing".into());
        }
        Ok(Shadow {
            main: t.main,
            shadow: t.shadow,
            keys: shadow_keys(t.key_fraction, t.index_range)?,
            max_pending: t.max_pending.unwrap_or(1024) as usize,
        })
    }

    fn children(&self) -> Vec<&str> {
        vec![&self.main, &self.shadow]
    }

    fn check_names(&self, pools: &[&str]) -> Result<(), String> {
        if matches!(self.keys, ShadowKeys::IndexRange(..)) && !pools.contains(&self.main.as_str()) {
            return Err("index_range counts main's servers: main must be a pool".into());
        }
        Ok(())
    }
}

/// Reads a `shadow` route's key choice: `key_fraction = [from, to]` or `index_range =
/// [from, to]`, at most one.
fn shadow_keys(
    key_fraction: Option<Vec<f64>>,
    index_range: Option<Vec<i64>>,
) -> Result<ShadowKeys, String> {
    match (key_fraction, index_range) {
        (Some(_), Some(_)) => Err("key_fraction and index_range are alternatives: give one".into()),
        (None, None) => Ok(ShadowKeys::All),
        (Some(f), None) => match f.as_slice() {
            [from, to] if (0.0..=1.0).contains(from) && (0.0..=1.0).contains(to) && from <= to => {
                Ok(ShadowKeys::KeyFraction(*from, *to))
            }
            _ => Err(format!(
                "key_fraction = {f:?}: [from, to] with 0 <= from <= to <= 1"
            )),
        },
        (None, Some(r)) => match r.as_slice() {
            [from, to] if 0 <= *from && from < to => {
                Ok(ShadowKeys::IndexRange(*from as usize, *to as usize))
            }
            _ => Err(format!(
                "index_range = {r:?}: [from, to] server indexes with 0 <= from < to"
            )),
        },
    }
}
