//! `null` answers at once as mcrouter's `NullRoute`: gets miss, stores `NOT_STORED`,
//! deletes and arithmetic `NOT_FOUND` (meta: `EN`, `NS`, `NF`). `error` answers every
//! request `SERVER_ERROR <message>` (mcrouter's `ErrorRoute`; `message`, default `error
//! route`).

use super::RouteType;
use serde::Deserialize;

/// A `null` route (it takes no settings).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Null {}

impl RouteType for Null {
    type Table = Null;

    fn read(_: &str, t: Null) -> Result<Null, String> {
        Ok(t)
    }

    fn children(&self) -> Vec<&str> {
        Vec::new()
    }
}

/// An `error` route's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ErrorAnswer {
    /// The error's text (one line).
    pub message: String,
}

/// An `error` route's table.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ErrorTable {
    message: Option<String>,
}

impl RouteType for ErrorAnswer {
    type Table = ErrorTable;

    fn read(_: &str, t: ErrorTable) -> Result<ErrorAnswer, String> {
        let message = t.message.unwrap_or_else(|| "error route".to_string());
        if message.contains(['\r', '\n']) {
            return Err("message must be one line".into());
        }
        Ok(ErrorAnswer { message })
    }

    fn children(&self) -> Vec<&str> {
        Vec::new()
    }
}
