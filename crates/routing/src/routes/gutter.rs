//! `gutter`: when `main` fails (server down, timeout), the request goes to `gutter`; sets
//! there get at most `gutter_ttl` seconds (default 10; §3.3).

use super::RouteType;
use serde::Deserialize;

/// A `gutter` route's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gutter {
    /// Where requests go while it answers.
    pub main: String,
    /// Where they go when it does not.
    pub gutter: String,
    /// Longest TTL a set into the gutter gets, seconds.
    pub ttl: u32,
}

/// A `gutter` route's table.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct GutterTable {
    main: String,
    gutter: String,
    gutter_ttl: Option<u32>,
}

impl RouteType for Gutter {
    type Table = GutterTable;

    fn read(_: &str, t: GutterTable) -> Result<Gutter, String> {
        Ok(Gutter {
            main: t.main,
            gutter: t.gutter,
            ttl: t.gutter_ttl.unwrap_or(10).max(1),
        })
    }

    fn children(&self) -> Vec<&str> {
        vec![&self.main, &self.gutter]
    }
}
