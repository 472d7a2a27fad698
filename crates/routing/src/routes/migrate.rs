//! `migrate`: moves keys `from` one route `to` another (mcrouter's `MigrateRoute`): before
//! `start_time` (Unix seconds) everything goes to `from`; for `interval` seconds (default
//! 3600) deletes go to both, gets to `to` falling back to `from` on a miss or a failure,
//! everything else to `to`; then everything goes to `to`.

use super::{OneOrMany, RouteType};
use serde::Deserialize;

/// A `migrate` route's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Migrate {
    /// Where keys are now.
    pub from: String,
    /// Where they go.
    pub to: String,
    /// When the move starts, Unix seconds.
    pub start_time: u64,
    /// How long the move lasts, seconds.
    pub interval: u64,
}

/// A `migrate` route's table.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct MigrateTable {
    from: String,
    to: Option<OneOrMany>,
    start_time: Option<u64>,
    interval: Option<u64>,
}

impl RouteType for Migrate {
    type Table = MigrateTable;

    fn read(_: &str, t: MigrateTable) -> Result<Migrate, String> {
        Ok(Migrate {
            from: t.from,
            to: match t.to {
                Some(OneOrMany::One(to)) => to,
                Some(OneOrMany::Many(_)) => {
                    return Err("a migrate route's \"to\" is one pool or route".into())
                }
                None => return Err("a migrate route needs \"to\"".into()),
            },
            start_time: t
                .start_time
                .ok_or("a migrate route needs \"start_time\" (Unix seconds)")?,
            interval: match t.interval {
                Some(0) => return Err("interval = 0: the move needs at least a second".into()),
                Some(i) => i,
                None => 3600,
            },
        })
    }

    fn children(&self) -> Vec<&str> {
        vec![&self.from, &self.to]
    }
}
