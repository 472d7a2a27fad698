//! `bigvalue`: values above `threshold` bytes are stored on `child` as chunks of
//! `threshold` bytes under keys of their own (a random suffix per write) and an index item
//! under the key; reads reassemble them, and a lost, stale or damaged chunk is a miss;
//! values up to `item_size_max` (default 16 MiB) are taken (mcrouter's `BigValueRoute`).

use super::RouteType;
use serde::Deserialize;

/// A `bigvalue` route's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BigValue {
    /// Where the index items and chunks go.
    pub child: String,
    /// Values above this many bytes are chunked, in chunks of this size.
    pub threshold: usize,
    /// The largest value taken, bytes.
    pub item_size_max: usize,
}

/// A `bigvalue` route's table.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct BigValueTable {
    child: String,
    threshold: Option<u64>,
    item_size_max: Option<u64>,
}

impl RouteType for BigValue {
    type Table = BigValueTable;

    fn read(_: &str, t: BigValueTable) -> Result<BigValue, String> {
        let threshold = t
            .threshold
            .ok_or("a bigvalue route needs \"threshold\" (bytes)")?;
        let max = t.item_size_max.unwrap_or(16 << 20);
        if !(1024..=(1 << 30)).contains(&threshold) {
            return Err(format!("threshold = {threshold}: 1024 to 1073741824 bytes"));
        }
        if max <= threshold || max > 1 << 30 {
            return Err(format!(
                "item_size_max = {max}: above threshold ({threshold}) and at most 1073741824"
            ));
        }
        Ok(BigValue {
            child: t.child,
            threshold: threshold as usize,
            item_size_max: max as usize,
        })
    }

    fn children(&self) -> Vec<&str> {
        vec![&self.child]
    }
}
