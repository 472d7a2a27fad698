//! `prefix`: the longest matching key prefix picks the route; `default` takes the rest
//! (§3.2.2). With `strip = true` the prefix is removed from the key (mcrouter-style routing
//! prefixes such as `/region/cluster/`, §4.2).

use super::RouteType;
use serde::Deserialize;
use std::collections::BTreeMap;

/// A `prefix` route's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Prefix {
    /// (prefix, route), longest prefix first.
    pub prefixes: Vec<(String, String)>,
    /// Keys no prefix matches.
    pub default: String,
    /// Remove the matched prefix from the key.
    pub strip: bool,
}

/// A `prefix` route's table.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PrefixTable {
    #[serde(default)]
    prefixes: BTreeMap<String, String>,
    default: String,
    #[serde(default)]
    strip: bool,
}

impl RouteType for Prefix {
    type Table = PrefixTable;

    fn read(_: &str, t: PrefixTable) -> Result<Prefix, String> {
        let mut prefixes: Vec<(String, String)> = t.prefixes.into_iter().collect();
        if prefixes.iter().any(|(p, _)| p.is_empty()) {
            return Err("an empty prefix: use \"default\"".into());
        }
        // Longest first, so the first match is the longest.
        prefixes.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.0.cmp(&b.0)));
        Ok(Prefix {
            prefixes,
            default: t.default,
            strip: t.strip,
        })
    }

    fn children(&self) -> Vec<&str> {
        let prefixed = self.prefixes.iter().map(|(_, r)| r.as_str());
        prefixed.chain([self.default.as_str()]).collect()
    }
}
