//! `gutter`: when `main` fails (server down, timeout), the request goes to `gutter`; sets
//! there get at most `gutter_ttl` seconds (default 10; §3.3).

use super::RouteType;
use serde::Deserialize;

/// A `gutter` route's settings.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gutter {
    /// Where requests go while it answers.
    pub main: String,
    /// Where they go when it does not.
    pub gutter: String,
    /// Longest TTL a set into the gutter gets, seconds (`gutter_ttl`, at least 1).
    #[serde(rename = "gutter_ttl", default = "ten_seconds")]
    pub ttl: u32,
}

fn ten_seconds() -> u32 {
    10
}

impl RouteType for Gutter {
    type Table = Gutter;

    fn read(_: &str, t: Gutter) -> Result<Gutter, String> {
        Ok(Gutter {
            ttl: t.ttl.max(1),
            ..t
        })
    }

    fn children(&self) -> Vec<&str> {
        vec![&self.main, &self.gutter]
    }
}
