//! `all-fastest`: every child gets the request; the first success answers (else the last
//! reply; mcrouter's `AllFastestRoute`). `all-initial`: every child gets the request; the
//! first child's reply answers, the others' are not waited for (`AllInitialRoute`).

use super::{need_list, RouteType};
use serde::Deserialize;

/// An `all-fastest` or `all-initial` route's settings.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fanout {
    /// The children.
    #[serde(default)]
    pub children: Vec<String>,
}

impl RouteType for Fanout {
    type Table = Fanout;

    fn read(kind: &str, t: Fanout) -> Result<Fanout, String> {
        Ok(Fanout {
            children: need_list(t.children, kind, "children")?,
        })
    }

    fn children(&self) -> Vec<&str> {
        self.children.iter().map(String::as_str).collect()
    }
}
