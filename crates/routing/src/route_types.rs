//! The settings of the route types an operator changes a fleet with (mcrouter's names where
//! one exists): `null`, `error`, `ttl`, `failover`, `all-fastest`, `all-initial`. Read from
//! a route's TOML table by `route_config::parse`, which hands over the fields a type takes.
//!
//! | type | what it does |
//! |------|--------------|
//! | `null` | answers at once as mcrouter's `NullRoute`: gets miss, stores `NOT_STORED`, deletes and arithmetic `NOT_FOUND` (meta: `EN`, `NS`, `NF`) |
//! | `error` | answers every request `SERVER_ERROR <message>` (mcrouter's `ErrorRoute`; `message`, default `error route`) |
//! | `ttl` | `child` gets every request, writes with their exptime capped at `max_ttl` and/or set to `set_ttl` (mcrouter's `ModifyExptimeRoute`, the memcached proxy's `ttl`): storage commands, `touch`, `gat`/`gats`, meta `T` |
//! | `failover` | `children` in order (`order = "in-order"`, or per key by `"rendezvous"` hash): the next is tried when one fails with an error of `failover_errors` (default `connect`, `timeout`, `down`, `server_error`), or with `miss = true` on a get's miss; `failover_limit = { rate, burst }` caps failovers (mcrouter's token bucket) |
//! | `all-fastest` | every child gets the request; the first success answers (else the last reply) |
//! | `all-initial` | every child gets the request; the first child's reply answers, the others' are not waited for |
//! | `migrate` | moves keys `from` one route `to` another (mcrouter's `MigrateRoute`): before `start_time` (Unix seconds) everything goes to `from`; for `interval` seconds (default 3600) deletes go to both, gets to `to` falling back to `from` on a miss or a failure, everything else to `to`; then everything goes to `to` |
//! | `bigvalue` | values above `threshold` bytes are stored on `child` as chunks of `threshold` bytes under keys of their own (a random suffix per write) and an index item under the key; reads reassemble them, and a lost, stale or damaged chunk is a miss; values up to `item_size_max` (default 16 MiB) are taken (mcrouter's `BigValueRoute`) |
//! | `shadow` | `main` answers; the same requests for the keys `key_fraction = [from, to)` of the hash space (or whose server is `index_range = [from, to)` of main's pool; default: every key) also go to `shadow`, at most `max_pending` at once (more are dropped and counted); gets that reach both compare the replies (mcrouter's `ShadowRoute`, beyond it the comparison) |

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

/// A `ttl` route's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TtlRewrite {
    /// Where requests go.
    pub child: String,
    /// Writes live at most this many seconds.
    pub max_ttl: Option<u32>,
    /// Writes live this many seconds, whatever they ask (then capped by `max_ttl`).
    pub set_ttl: Option<u32>,
}

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

/// Reads a `bigvalue` route's sizes.
pub(crate) fn big_value(
    child: String,
    threshold: Option<u64>,
    item_size_max: Option<u64>,
) -> Result<BigValue, String> {
    let threshold = threshold.ok_or("a bigvalue route needs \"threshold\" (bytes)")?;
    let max = item_size_max.unwrap_or(16 << 20);
    if !(1024..=(1 << 30)).contains(&threshold) {
        return Err(format!("threshold = {threshold}: 1024 to 1073741824 bytes"));
    }
    if max <= threshold || max > 1 << 30 {
        return Err(format!(
            "item_size_max = {max}: above threshold ({threshold}) and at most 1073741824"
        ));
    }
    Ok(BigValue {
        child,
        threshold: threshold as usize,
        item_size_max: max as usize,
    })
}

/// A route table's `to`: one name (`migrate`) or a list (`broadcast`).
#[derive(serde::Deserialize, Clone, Debug)]
#[serde(untagged)]
pub(crate) enum OneOrMany {
    /// `to = "name"`.
    One(String),
    /// `to = ["a", "b"]`.
    Many(Vec<String>),
}

/// Which keys a `shadow` route shadows.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ShadowKeys {
    /// Every key.
    All,
    /// The keys whose hash (xxh3, as a fraction of 2^64) falls in `[from, to)`: the same
    /// keys on every router and every run.
    KeyFraction(f64, f64),
    /// The keys whose server in the main pool has an index in `[from, to)` (main must be a
    /// pool).
    IndexRange(usize, usize),
}

impl Eq for ShadowKeys {}

/// A `shadow` route's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shadow {
    /// Answers the client.
    pub main: String,
    /// Gets a copy of the requests for the chosen keys.
    pub shadow: String,
    /// The chosen keys.
    pub keys: ShadowKeys,
    /// Shadow requests in flight at most; more are dropped (and counted).
    pub max_pending: usize,
}

/// Reads a `shadow` route's key choice: `key_fraction = [from, to]` or `index_range =
/// [from, to]`, at most one.
pub(crate) fn shadow_keys(
    key_fraction: Option<Vec<f64>>,
    index_range: Option<Vec<i64>>,
) -> Result<ShadowKeys, String> {
    match (key_fraction, index_range) {
        (Some(_), Some(_)) => Err("key_fraction and index_range are alternatives: give one".into()),
        (None, None) => Ok(ShadowKeys::All),
        (Some(f), None) => match f.as_slice() {
            [from, to] if (0.0..=1.0).contains(from) && (0.0..=1.0).contains(to) && from <= to => {
                Ok(ShadowKeys::KeyFraction(*from, *to))
            }
            _ => Err(format!(
                "key_fraction = {f:?}: [from, to] with 0 <= from <= to <= 1"
            )),
        },
        (None, Some(r)) => match r.as_slice() {
            [from, to] if 0 <= *from && from < to => {
                Ok(ShadowKeys::IndexRange(*from as usize, *to as usize))
            }
            _ => Err(format!(
                "index_range = {r:?}: [from, to] server indexes with 0 <= from < to"
            )),
        },
    }
}

/// Reads `failover_errors`: names of [`FailoverErrors`] fields.
pub(crate) fn failover_errors(names: Option<Vec<String>>) -> Result<FailoverErrors, String> {
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
pub(crate) fn failover_limit(
    table: Option<std::collections::BTreeMap<String, f64>>,
) -> Result<Option<FailoverLimit>, String> {
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
pub(crate) fn failover_order(order: Option<String>) -> Result<FailoverOrder, String> {
    match order.as_deref() {
        None | Some("in-order") => Ok(FailoverOrder::InOrder),
        Some("rendezvous") => Ok(FailoverOrder::Rendezvous),
        Some(other) => Err(format!(
            "unknown failover order {other:?} (in-order, rendezvous)"
        )),
    }
}

/// Checks an `error` route's message: one line.
pub(crate) fn error_message(message: Option<String>) -> Result<String, String> {
    let message = message.unwrap_or_else(|| "error route".to_string());
    if message.contains(['\r', '\n']) {
        return Err("message must be one line".into());
    }
    Ok(message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{from_toml, RouteKind};

    fn route(table: &str) -> Result<RouteKind, String> {
        let text = format!(
            "[pools.a]\nservers = [\"10.0.0.1:1\"]\n[pools.b]\nservers = [\"10.0.0.2:1\"]\n\
             [routes.r]\n{table}"
        );
        from_toml(&text)
            .map(|c| c.routes[0].kind.clone())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn the_operator_routes_read_as_written() {
        assert_eq!(route("type = \"null\"\n"), Ok(RouteKind::Null));
        assert_eq!(
            route("type = \"error\"\n"),
            Ok(RouteKind::Error {
                message: "error route".into()
            })
        );
        assert_eq!(
            route("type = \"ttl\"\nchild = \"a\"\nmax_ttl = 3600\n"),
            Ok(RouteKind::Ttl(TtlRewrite {
                child: "a".into(),
                max_ttl: Some(3600),
                set_ttl: None
            }))
        );
        assert_eq!(
            route("type = \"failover\"\nchildren = [\"a\", \"b\"]\nmiss = true\n"),
            Ok(RouteKind::Failover(Failover {
                children: vec!["a".into(), "b".into()],
                errors: FailoverErrors::default(),
                miss: true,
                order: FailoverOrder::InOrder,
                limit: None,
            }))
        );
        let RouteKind::Failover(f) = route(
            "type = \"failover\"\nchildren = [\"a\", \"b\"]\norder = \"rendezvous\"\n\
             failover_errors = [\"timeout\"]\nfailover_limit = { rate = 0.5, burst = 10 }\n",
        )
        .unwrap() else {
            panic!()
        };
        assert_eq!(f.order, FailoverOrder::Rendezvous);
        assert!(f.errors.timeout && !f.errors.connect && !f.errors.server_error);
        assert_eq!(
            f.limit,
            Some(FailoverLimit {
                rate: 0.5,
                burst: 10.0
            })
        );
        assert_eq!(
            route("type = \"shadow\"\nmain = \"a\"\nshadow = \"b\"\nkey_fraction = [0.0, 0.1]\n"),
            Ok(RouteKind::Shadow(Shadow {
                main: "a".into(),
                shadow: "b".into(),
                keys: ShadowKeys::KeyFraction(0.0, 0.1),
                max_pending: 1024,
            }))
        );
        assert_eq!(
            route("type = \"shadow\"\nmain = \"a\"\nshadow = \"b\"\nindex_range = [0, 2]\n").map(
                |k| matches!(
                    k,
                    RouteKind::Shadow(Shadow {
                        keys: ShadowKeys::IndexRange(0, 2),
                        ..
                    })
                )
            ),
            Ok(true)
        );
        assert_eq!(
            route("type = \"migrate\"\nfrom = \"a\"\nto = \"b\"\nstart_time = 1767225600\n"),
            Ok(RouteKind::Migrate(Migrate {
                from: "a".into(),
                to: "b".into(),
                start_time: 1_767_225_600,
                interval: 3600,
            }))
        );
        assert_eq!(
            route("type = \"bigvalue\"\nchild = \"a\"\nthreshold = 524288\n"),
            Ok(RouteKind::BigValue(BigValue {
                child: "a".into(),
                threshold: 524_288,
                item_size_max: 16 << 20,
            }))
        );
        assert_eq!(
            route("type = \"all-fastest\"\nchildren = [\"a\", \"b\"]\n"),
            Ok(RouteKind::AllFastest {
                children: vec!["a".into(), "b".into()]
            })
        );
        for (table, why) in [
            (
                "type = \"null\"\nchild = \"a\"\n",
                "a null route takes no \"child\"",
            ),
            ("type = \"error\"\nmessage = \"a\\nb\"\n", "one line"),
            (
                "type = \"ttl\"\nchild = \"a\"\n",
                "needs \"max_ttl\" or \"set_ttl\"",
            ),
            (
                "type = \"ttl\"\nchild = \"a\"\nmax_ttl = 0\n",
                "expire at once",
            ),
            ("type = \"ttl\"\nmax_ttl = 5\n", "needs \"child\""),
            ("type = \"failover\"\n", "needs \"children\""),
            (
                "type = \"failover\"\nchildren = [\"a\"]\nfailover_errors = [\"miss\"]\n",
                "unknown failover error \"miss\"",
            ),
            (
                "type = \"failover\"\nchildren = [\"a\"]\norder = \"random\"\n",
                "unknown failover order",
            ),
            (
                "type = \"failover\"\nchildren = [\"a\"]\nfailover_limit = { rate = 2.0 }\n",
                "rate = 2",
            ),
            (
                "type = \"all-initial\"\nchildren = [\"c\"]\n",
                "no pool or route named \"c\"",
            ),
        ] {
            let err = route(table).unwrap_err();
            assert!(err.contains(why), "{table}: {err}");
        }
    }
}
