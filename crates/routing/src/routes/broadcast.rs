//! `broadcast`: every request goes to every destination (`to`); `mode = "all-sync"` waits:
//! a delete is `DELETED` if any destination deleted the key (an error if any could neither
//! take nor spool it), other writes get the worst reply; `all-async` answers at once without
//! claiming success (`NOT_FOUND` for a delete), each destination spooling what it cannot
//! take (§4.1).

use super::{need_list, one_of, OneOrMany, RouteType};
use serde::Deserialize;

/// A `broadcast` route's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Broadcast {
    /// The destinations.
    pub to: Vec<String>,
    /// How to answer.
    pub mode: BroadcastMode,
}

/// How `broadcast` answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BroadcastMode {
    /// Wait for every destination; answer the worst reply.
    AllSync,
    /// Answer at once without waiting: `NOT_FOUND` for a delete (nothing is known yet),
    /// `STORED` for other writes; failures are the destinations' business (a spooling pool
    /// keeps its deletes).
    AllAsync,
}

impl BroadcastMode {
    /// Its name in TOML.
    pub fn name(self) -> &'static str {
        match self {
            BroadcastMode::AllSync => "all-sync",
            BroadcastMode::AllAsync => "all-async",
        }
    }
}

/// `mode` values, the default first.
const BROADCAST_MODES: [(&str, BroadcastMode); 2] = [
    ("all-sync", BroadcastMode::AllSync),
    ("all-async", BroadcastMode::AllAsync),
];

/// A `broadcast` route's table.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct BroadcastTable {
    to: Option<OneOrMany>,
    mode: Option<String>,
}

impl RouteType for Broadcast {
    type Table = BroadcastTable;

    fn read(kind: &str, t: BroadcastTable) -> Result<Broadcast, String> {
        let to = match t.to {
            Some(OneOrMany::One(one)) => vec![one],
            Some(OneOrMany::Many(many)) => many,
            None => Vec::new(),
        };
        Ok(Broadcast {
            to: need_list(to, kind, "to")?,
            mode: one_of(t.mode, "mode", &BROADCAST_MODES)?,
        })
    }

    fn children(&self) -> Vec<&str> {
        self.to.iter().map(String::as_str).collect()
    }
}
