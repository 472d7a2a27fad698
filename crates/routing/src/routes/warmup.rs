//! `warmup`: a miss in `cold` is filled from `warm` (`add`ed into cold, so a racing
//! delete's hold-off wins); deletes reach cold with a `holdoff`-second hold-off (default 2;
//! §4.3). `enabled = false` makes it plain `cold` (switched by a reload once cold's hit rate
//! has recovered).

use super::RouteType;
use serde::Deserialize;

/// A `warmup` route's settings.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WarmUp {
    /// The cluster being warmed (every request goes here first).
    pub cold: String,
    /// Where misses are filled from.
    pub warm: String,
    /// Hold-off of deletes sent to the cold cluster, seconds.
    #[serde(default = "default_holdoff")]
    pub holdoff: u32,
    /// Off: plain `cold`.
    #[serde(default = "enabled")]
    pub enabled: bool,
}

fn default_holdoff() -> u32 {
    2
}

fn enabled() -> bool {
    true
}

impl RouteType for WarmUp {
    type Table = WarmUp;

    fn read(_: &str, t: WarmUp) -> Result<WarmUp, String> {
        Ok(t)
    }

    fn children(&self) -> Vec<&str> {
        vec![&self.cold, &self.warm]
    }
}
