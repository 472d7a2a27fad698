//! `operation`: gets, sets and deletes can go different ways (`get`, `set`, `delete`;
//! `default` takes what is not named).

use super::RouteType;
use serde::Deserialize;

/// An `operation` route's settings.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Operation {
    /// get, gets, gat, gats, lease-get, mg.
    pub get: Option<String>,
    /// set, add, replace, append, prepend, cas, lease-set, ms, incr, decr, ma, touch.
    pub set: Option<String>,
    /// delete, md.
    pub delete: Option<String>,
    /// Whatever is not named.
    pub default: String,
}

impl RouteType for Operation {
    type Table = Operation;

    fn read(_: &str, t: Operation) -> Result<Operation, String> {
        Ok(t)
    }

    fn children(&self) -> Vec<&str> {
        let named = [&self.get, &self.set, &self.delete].into_iter().flatten();
        named
            .map(String::as_str)
            .chain([self.default.as_str()])
            .collect()
    }
}
