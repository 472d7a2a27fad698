//! `replicated`: reads go to one replica, chosen stably per client (among the pools of the
//! router's `zone` first, when `[router] zone` and the pools' `zone` say), failing over to
//! the others; writes go to every replica (§3.2.3) and are answered by the `write` policy:
//! `any` (default), `majority` or `all` replicas must store; a delete is answered `DELETED`
//! only when every replica took it (or spooled it for later).

use super::{need_list, one_of, RouteType};
use serde::Deserialize;

/// A `replicated` route's settings.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Replicated {
    /// The replicas, in failover order from the chosen one.
    #[serde(default)]
    pub replicas: Vec<String>,
    /// Choose the read replica by this id instead of the client's address (a router
    /// running beside one application host).
    pub client_id: Option<String>,
    /// What a write needs to answer success.
    #[serde(default, deserialize_with = "write_policy")]
    pub write: WritePolicy,
}

/// What a replicated write needs before it answers success.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WritePolicy {
    /// One replica stored it (the default: a replica that missed a set only misses, and
    /// its deletes are spooled, so nothing it serves is staler than without the set).
    #[default]
    Any,
    /// More than half the replicas stored it.
    Majority,
    /// Every replica stored it.
    All,
}

impl WritePolicy {
    /// Its name in TOML.
    pub fn name(self) -> &'static str {
        WRITE_POLICIES
            .iter()
            .find(|(_, w)| *w == self)
            .map_or("any", |(n, _)| n)
    }
}

/// `write` values, the default first.
const WRITE_POLICIES: [(&str, WritePolicy); 3] = [
    ("any", WritePolicy::Any),
    ("majority", WritePolicy::Majority),
    ("all", WritePolicy::All),
];

/// Reads `write` (one of [`WRITE_POLICIES`]).
fn write_policy<'de, D: serde::Deserializer<'de>>(d: D) -> Result<WritePolicy, D::Error> {
    let name = String::deserialize(d)?;
    one_of(Some(name), "write policy", &WRITE_POLICIES).map_err(serde::de::Error::custom)
}

impl RouteType for Replicated {
    type Table = Replicated;

    fn read(kind: &str, t: Replicated) -> Result<Replicated, String> {
        Ok(Replicated {
            replicas: need_list(t.replicas, kind, "replicas")?,
            ..t
        })
    }

    fn children(&self) -> Vec<&str> {
        self.replicas.iter().map(String::as_str).collect()
    }
}
