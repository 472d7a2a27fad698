//! `ttl`: `child` gets every request, writes with their exptime capped at `max_ttl` and/or
//! set to `set_ttl` (mcrouter's `ModifyExptimeRoute`, the memcached proxy's `ttl`): storage
//! commands, `touch`, `gat`/`gats`, meta `T`.

use super::RouteType;
use serde::Deserialize;

/// A `ttl` route's settings.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TtlRewrite {
    /// Where requests go.
    pub child: String,
    /// Writes live at most this many seconds.
    pub max_ttl: Option<u32>,
    /// Writes live this many seconds, whatever they ask (then capped by `max_ttl`).
    pub set_ttl: Option<u32>,
}

impl RouteType for TtlRewrite {
    type Table = TtlRewrite;

    fn read(_: &str, t: TtlRewrite) -> Result<TtlRewrite, String> {
        if t.max_ttl.is_none() && t.set_ttl.is_none() {
            return Err("a ttl route needs \"max_ttl\" or \"set_ttl\" (or both)".into());
        }
        if t.max_ttl == Some(0) {
            return Err("max_ttl = 0 would make every write expire at once".into());
        }
        Ok(t)
    }

    fn children(&self) -> Vec<&str> {
        vec![&self.child]
    }
}
