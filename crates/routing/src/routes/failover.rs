//! `failover`: `children` in order (`order = "in-order"`, or per key by `"rendezvous"`
//! hash): the next is tried when one fails with an error of `failover_errors` (default
//! `connect`, `timeout`, `down`, `server_error`), or with `miss = true` on a get's miss;
//! `failover_limit = { rate, burst }` caps failovers (mcrouter's `FailoverRoute` and its
//! token bucket; the memcached proxy's `failover{miss=true}`).

use super::{need_list, RouteType};
use serde::Deserialize;
use std::collections::BTreeMap;

/// A `failover` route's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failover {
    /// The children, tried in `order`.
    pub children: Vec<String>,
    /// What fails over.
    pub errors: FailoverErrors,
    /// A get's miss tries the next child too (the memcached proxy's `failover{miss=true}`).
    pub miss: bool,
    /// The order.
    pub order: FailoverOrder,
    /// The cap on failovers, if any.
    pub limit: Option<FailoverLimit>,
}

/// Which failures a `failover` route fails over on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FailoverErrors {
    /// The connection could not be made or broke (`connect`).
    pub connect: bool,
    /// No reply within the pool's timeout (`timeout`).
    pub timeout: bool,
    /// The server is marked down, or holds reads while it replays spooled deletes (`down`).
    pub down: bool,
    /// The server answered `SERVER_ERROR` (`server_error`).
    pub server_error: bool,
}

impl Default for FailoverErrors {
    fn default() -> Self {
        FailoverErrors {
            connect: true,
            timeout: true,
            down: true,
            server_error: true,
        }
    }
}

/// The order a `failover` route tries its children in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FailoverOrder {
    /// As written.
    #[default]
    InOrder,
    /// Per key, by rendezvous hash: each key has its own stable order, so one child's
    /// failure spreads its keys over the others.
    Rendezvous,
}

/// mcrouter's failover limit: each request adds `rate` tokens (up to `burst`), each
/// failover takes one; without a token the first child's reply stands.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FailoverLimit {
    /// Tokens a request adds (0 < rate ≤ 1: the share of requests that may fail over).
    pub rate: f64,
    /// The most tokens kept (failovers in a burst).
    pub burst: f64,
}

impl Eq for FailoverLimit {}

/// A `failover` route's table.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FailoverTable {
    #[serde(default)]
    children: Vec<String>,
    failover_errors: Option<Vec<String>>,
    #[serde(default)]
    miss: bool,
    order: Option<String>,
    failover_limit: Option<BTreeMap<String, f64>>,
}

impl RouteType for Failover {
    type Table = FailoverTable;

    fn read(kind: &str, t: FailoverTable) -> Result<Failover, String> {
        Ok(Failover {
            children: need_list(t.children, kind, "children")?,
            errors: failover_errors(t.failover_errors)?,
            miss: t.miss,
            order: failover_order(t.order)?,
            limit: failover_limit(t.failover_limit)?,
        })
    }

    fn children(&self) -> Vec<&str> {
        self.children.iter().map(String::as_str).collect()
    }
}

/// Reads `failover_errors`: names of [`FailoverErrors`] fields.
fn failover_errors(names: Option<Vec<String>>) -> Result<FailoverErrors, String> {
    let Some(names) = names else {
        return Ok(FailoverErrors::default());
    };
    let mut e = FailoverErrors {
        connect: false,
        timeout: false,
        down: false,
        server_error: false,
    };
    for n in names {
        match n.as_str() {
            "connect" => e.connect = true,
            "timeout" => e.timeout = true,
            "down" => e.down = true,
            "server_error" => e.server_error = true,
            other => {
                return Err(format!(
                    "unknown failover error {other:?} (connect, timeout, down, server_error)"
                ))
            }
        }
    }
    Ok(e)
}

/// Reads `failover_limit = { rate = R, burst = B }`.
fn failover_limit(table: Option<BTreeMap<String, f64>>) -> Result<Option<FailoverLimit>, String> {
    let Some(t) = table else {
        return Ok(None);
    };
    if let Some(k) = t.keys().find(|k| *k != "rate" && *k != "burst") {
        return Err(format!("failover_limit takes rate and burst, not {k:?}"));
    }
    let rate = *t.get("rate").ok_or("failover_limit needs rate")?;
    let burst = t.get("burst").copied().unwrap_or(100.0);
    if rate.is_nan() || rate <= 0.0 || rate > 1.0 {
        return Err(format!(
            "failover_limit rate = {rate}: the share of requests that may fail over, in (0, 1]"
        ));
    }
    if burst.is_nan() || burst < 1.0 {
        return Err(format!("failover_limit burst = {burst}: at least 1"));
    }
    Ok(Some(FailoverLimit { rate, burst }))
}

/// Reads `order`.
fn failover_order(order: Option<String>) -> Result<FailoverOrder, String> {
    match order.as_deref() {
        None | Some("in-order") => Ok(FailoverOrder::InOrder),
        Some("rendezvous") => Ok(FailoverOrder::Rendezvous),
        Some(other) => Err(format!(
            "unknown failover order {other:?} (in-order, rendezvous)"
        )),
    }
}
