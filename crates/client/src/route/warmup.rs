//! Cold-cluster warm-up (paper §4.3): a cold cluster's misses filled from a warm one.

use super::request::{ReplyFuture, RequestClass, RequestForm, RouteContext, RouteRequest};
use super::{Build, Route, RouteCounters, RouteNode, Step};
use memfleet_protocol::reply::{self, is_hit, MetaCode, MetaReply, ReplyKind, ServerReply};
use memfleet_protocol::StoreCommand;
use memfleet_routing::WarmUp;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// A `warmup` route, ready to run.
pub(super) struct WarmUpRoute {
    /// Asked first.
    cold: Arc<Route>,
    /// Fills cold's misses.
    warm: Arc<Route>,
    /// Hold-off of deletes sent to cold, seconds.
    holdoff: u32,
    /// Off: plain cold.
    enabled: bool,
    /// Cold hits and misses, fills.
    counters: Arc<RouteCounters>,
}

impl WarmUpRoute {
    pub(super) fn build(s: &WarmUp, b: &mut Build<'_, '_>) -> WarmUpRoute {
        WarmUpRoute {
            cold: b.route(&s.cold),
            warm: b.route(&s.warm),
            holdoff: s.holdoff,
            enabled: s.enabled,
            counters: b.counters(&["cold_hits", "cold_misses", "warm_fills", "fills_refused"]),
        }
    }
}

impl RouteNode for WarmUpRoute {
    fn call(&self, op: RouteRequest, ctx: RouteContext) -> ReplyFuture {
        if !self.enabled {
            return self.cold.call(op, ctx);
        }
        warm_call(
            &self.cold,
            &self.warm,
            self.holdoff,
            &self.counters,
            op,
            ctx,
        )
    }

    fn children(&self) -> Vec<&Arc<Route>> {
        vec![&self.cold, &self.warm]
    }

    fn walk<'r, 'k>(&'r self, _: RequestClass, key: &'k [u8], _: RouteContext) -> Step<'r, 'k> {
        if !self.enabled {
            return Step::new("warmup|disabled").then(&self.cold, key);
        }
        let line = format!("warmup|holdoff={}", self.holdoff);
        Step::new(line).then_all([&self.cold, &self.warm], key)
    }

    fn get_target(&self, key: &[u8], ctx: RouteContext) -> Option<std::net::SocketAddr> {
        // Enabled, a get may be filled: TCP and the route decide.
        if self.enabled {
            return None;
        }
        self.cold.get_target(key, ctx)
    }
}

/// A request through an enabled warm-up route: deletes reach cold with the hold-off,
/// reads that miss in cold are filled from warm, the rest goes to cold.
fn warm_call(
    cold: &Arc<Route>,
    warm: &Arc<Route>,
    holdoff: u32,
    counters: &Arc<RouteCounters>,
    op: RouteRequest,
    ctx: RouteContext,
) -> ReplyFuture {
    match (&op.form, op.class) {
        (RequestForm::Delete { holdoff: 0 }, _) => {
            // A delete leaves the key closed to adds for a while, so that a fill racing
            // it (read from warm before the delete reached warm) fails.
            let mut op = op;
            op.form = RequestForm::Delete { holdoff };
            cold.call(op, ctx)
        }
        (RequestForm::Raw { .. }, RequestClass::Delete) => meta_delete(cold, holdoff, op, ctx),
        (RequestForm::Get { .. }, _) | (RequestForm::Raw { .. }, RequestClass::Get) => {
            warm_get(cold, warm, counters, op, ctx)
        }
        _ => cold.call(op, ctx),
    }
}

/// Whether `key` can be written in a text command (the fills and the hold-off are text).
fn text_key(key: &[u8]) -> bool {
    !key.is_empty() && key.len() <= 250 && key.iter().all(|&b| b > b' ' && b != 0x7f)
}

/// The flags of a meta request (`tail` after its key) or reply line, as words.
fn meta_flags(line: &[u8]) -> impl Iterator<Item = &[u8]> {
    let line = line.split(|&b| b == b'\n').next().unwrap_or_default();
    line.split(|&b| matches!(b, b' ' | b'\r'))
        .filter(|w| !w.is_empty())
}

/// A meta reply, decoded (none for anything else, an error line included).
fn meta_reply(reply: &[u8]) -> Option<MetaReply<'_>> {
    match reply::decode(reply, ReplyKind::Meta) {
        Ok(ServerReply::Meta(m)) => Some(m),
        _ => None,
    }
}

/// Whether a meta reply is `HD`.
fn is_hd(reply: &[u8]) -> bool {
    meta_reply(reply).is_some_and(|m| m.code == MetaCode::Hd)
}

/// `md` through warm-up: memcached's meta delete has no hold-off, so the route follows it
/// with `delete <key> <holdoff>` (which leaves the hold-off whether or not the key was
/// there). Both go out at once, in order, unless the `md` is conditional (`C`) or keeps the
/// item (`I`, `x`): then the hold-off follows its reply — after a deletion that happened
/// for `C`, and for `I`/`x` only where no item was left to refuse a fill. The client gets
/// the `md`'s own reply.
fn meta_delete(
    cold: &Arc<Route>,
    holdoff: u32,
    op: RouteRequest,
    ctx: RouteContext,
) -> ReplyFuture {
    let call = cold.call(op.clone(), ctx);
    if holdoff == 0 || !text_key(&op.key) {
        return call;
    }
    let RequestForm::Raw { tail, .. } = &op.form else {
        return call;
    };
    let flag = |c: u8| meta_flags(tail).any(|w| w.first() == Some(&c));
    let (conditional, keeps_item) = (flag(b'C'), flag(b'I') || flag(b'x'));
    let hold = RouteRequest {
        class: RequestClass::Delete,
        key: op.key.clone(),
        form: RequestForm::Delete { holdoff },
    };
    if !conditional && !keeps_item {
        let hold_call = cold.call(hold, ctx);
        return Box::pin(async move {
            let (reply, _) = futures_util::future::join(call, hold_call).await;
            reply
        });
    }
    let cold = cold.clone();
    Box::pin(async move {
        let reply = call.await?;
        let deleted = is_hd(&reply);
        // A kept (stale) item already refuses adds; a refused conditional deleted nothing.
        if deleted != keeps_item {
            let _ = cold.call(hold, ctx).await;
        }
        Ok(reply)
    })
}

/// What a cold cluster's answer to a read says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ColdAnswer {
    /// A value (or an error line, a hot miss, a stale value): the client's answer.
    Final,
    /// A plain miss (`END`, `EN`): fill with `add`.
    Miss,
    /// A lease-get miss that won the lease with this token: fill with `lease-set`.
    Lease(u64),
    /// An `mg` miss that won the right to fill (`W`): fill with `ms C<cas>`.
    Won,
}

fn cold_answer(op: &RouteRequest, reply: &[u8]) -> ColdAnswer {
    match &op.form {
        RequestForm::Get { head } => match reply::decode(reply, ReplyKind::Retrieval) {
            Ok(ServerReply::Values(values)) => match values.first() {
                None => ColdAnswer::Miss,
                // A lease-get miss that won (token 1 is a hot miss: another client fills).
                Some(v) if head == b"lease-get" => match v.lease {
                    Some(t) if t > 1 => ColdAnswer::Lease(t),
                    _ => ColdAnswer::Final,
                },
                Some(_) => ColdAnswer::Final,
            },
            _ => ColdAnswer::Final,
        },
        RequestForm::Raw { .. } => match meta_reply(reply) {
            Some(m) if m.code == MetaCode::En => ColdAnswer::Miss,
            Some(m) if m.flag(b'W').is_some_and(|t| t.is_empty()) => ColdAnswer::Won,
            _ => ColdAnswer::Final,
        },
        _ => ColdAnswer::Final,
    }
}

/// A read through a warm-up route: the cold cluster's answer, or on a miss the warm
/// cluster's value put into the cold one (paper §4.3), in the way the miss allows: `add`
/// for a plain miss, `lease-set` with the token a lease-get won, `ms C<cas>` for an `mg`
/// that won (`W`). A refused fill (the key was deleted with a hold-off since, another
/// fill won, the lease was voided) answers the cold cluster's miss, so the client reads
/// the database again rather than trust what it read from warm.
fn warm_get(
    cold: &Arc<Route>,
    warm: &Arc<Route>,
    counters: &Arc<RouteCounters>,
    op: RouteRequest,
    ctx: RouteContext,
) -> ReplyFuture {
    let call = cold.call(op.clone(), ctx);
    let (cold, warm, counters) = (cold.clone(), warm.clone(), counters.clone());
    Box::pin(async move {
        let reply = call.await?;
        let answer = cold_answer(&op, &reply);
        if answer == ColdAnswer::Final || !text_key(&op.key) {
            if is_hit(&reply) {
                counters.cold_hits.fetch_add(1, Ordering::Relaxed);
            }
            return Ok(reply);
        }
        counters.cold_misses.fetch_add(1, Ordering::Relaxed);
        let fetch = RouteRequest::raw(
            RequestClass::Get,
            &op.key,
            b"mg ",
            b" v f t\r\n".to_vec(),
            ReplyKind::Meta,
        );
        let Ok(found) = warm.call(fetch, ctx).await else {
            return Ok(reply);
        };
        let Some((flags, ttl, data)) = parse_mg_value(&found) else {
            return Ok(reply);
        };
        let filled = match answer {
            ColdAnswer::Miss | ColdAnswer::Lease(_) => {
                let (command, cas) = match answer {
                    ColdAnswer::Lease(token) => (StoreCommand::LeaseSet, token),
                    _ => (StoreCommand::Add, 0),
                };
                let store = RouteRequest {
                    class: RequestClass::Set,
                    key: op.key.clone(),
                    form: RequestForm::Store {
                        command,
                        flags,
                        exptime: ttl,
                        cas,
                        data: data.clone().into(),
                    },
                };
                matches!(cold.call(store, ctx).await, Ok(r) if r == b"STORED\r\n")
            }
            _ => fill_won(&cold, &op.key, flags, ttl, &data, ctx).await,
        };
        if !filled {
            counters.fills_refused.fetch_add(1, Ordering::Relaxed);
            return Ok(reply);
        }
        counters.warm_fills.fetch_add(1, Ordering::Relaxed);
        match &op.form {
            RequestForm::Get { head } if head == b"get" || head == b"lease-get" => {
                // A lease-get that is answered with a value answers as a get does.
                let mut out = Vec::with_capacity(data.len() + op.key.len() + 32);
                memfleet_protocol::response::value(&mut out, &op.key, flags, &data, None);
                memfleet_protocol::response::end(&mut out);
                Ok(out)
            }
            // gets, gat, gats, mg: the cold cluster's own answer (its CAS, its touch, the
            // flags the client asked for).
            _ => cold.call(op, ctx).await,
        }
    })
}

/// Fills the placeholder an `mg N` left for its winner: reads its CAS, then stores the
/// warm value with `ms <key> <len> C<cas> F<flags> T<ttl>` (a lease-set: the CAS is the
/// winner's token). True when cold took it.
async fn fill_won(
    cold: &Arc<Route>,
    key: &[u8],
    flags: u32,
    ttl: i64,
    data: &[u8],
    ctx: RouteContext,
) -> bool {
    let ask = RouteRequest::raw(
        RequestClass::Get,
        key,
        b"mg ",
        b" c\r\n".to_vec(),
        ReplyKind::Meta,
    );
    let Ok(placeholder) = cold.call(ask, ctx).await else {
        return false;
    };
    let Some(cas) = meta_reply(&placeholder).and_then(|m| m.flag_number::<u64>(b'c')) else {
        return false;
    };
    let mut tail = format!(" {} C{cas} F{flags} T{ttl}\r\n", data.len()).into_bytes();
    tail.extend_from_slice(data);
    tail.extend_from_slice(b"\r\n");
    let store = RouteRequest::raw(RequestClass::Set, key, b"ms ", tail, ReplyKind::Meta);
    matches!(cold.call(store, ctx).await, Ok(r) if is_hd(&r))
}

/// `VA <len> f<flags> t<ttl>\r\n<data>\r\n` into (flags, exptime for an add, data); a
/// remaining TTL of -1 (none) is exptime 0; a stale value (`X`) is none.
fn parse_mg_value(reply: &[u8]) -> Option<(u32, i64, Vec<u8>)> {
    let m = meta_reply(reply)?;
    // Stale in warm (invalidated there): not a value to spread.
    if m.code != MetaCode::Va || m.flag(b'X').is_some() {
        return None;
    }
    let flags = match m.flag(b'f') {
        Some(_) => m.flag_number(b'f')?,
        None => 0,
    };
    let ttl = match m.flag(b't') {
        Some(_) => m.flag_number::<i64>(b't')?.max(0),
        None => 0,
    };
    Some((flags, ttl, m.data?.to_vec()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(form: RequestForm) -> RouteRequest {
        RouteRequest {
            class: RequestClass::Get,
            key: b"k".to_vec(),
            form,
        }
    }

    #[test]
    fn cold_misses_are_told_apart() {
        let get = op(RequestForm::Get {
            head: b"get".to_vec(),
        });
        let lease = op(RequestForm::Get {
            head: b"lease-get".to_vec(),
        });
        let mg = RouteRequest::raw(
            RequestClass::Get,
            b"k",
            b"mg ",
            b" v\r\n".to_vec(),
            ReplyKind::Meta,
        );
        assert_eq!(cold_answer(&get, b"END\r\n"), ColdAnswer::Miss);
        assert_eq!(
            cold_answer(&get, b"VALUE k 0 1\r\nv\r\nEND\r\n"),
            ColdAnswer::Final
        );
        assert_eq!(
            cold_answer(&lease, b"LVALUE k 77 0 0\r\n\r\nEND\r\n"),
            ColdAnswer::Lease(77)
        );
        assert_eq!(
            cold_answer(&lease, b"LVALUE k 1 0 0\r\n\r\nEND\r\n"),
            ColdAnswer::Final
        );
        assert_eq!(cold_answer(&mg, b"EN\r\n"), ColdAnswer::Miss);
        assert_eq!(cold_answer(&mg, b"VA 0 W\r\n\r\n"), ColdAnswer::Won);
        assert_eq!(cold_answer(&mg, b"VA 0 Z\r\n\r\n"), ColdAnswer::Final);
        assert_eq!(cold_answer(&mg, b"VA 1 Wx\r\nW\r\n"), ColdAnswer::Final);
    }

    #[test]
    fn warm_values_parse() {
        assert_eq!(
            parse_mg_value(b"VA 3 f7 t-1\r\nabc\r\n"),
            Some((7, 0, b"abc".to_vec()))
        );
        assert_eq!(
            parse_mg_value(b"VA 2 t30 f0\r\nhi\r\n"),
            Some((0, 30, b"hi".to_vec()))
        );
        assert_eq!(parse_mg_value(b"EN\r\n"), None);
        assert_eq!(parse_mg_value(b"VA 2 f0 t9 X\r\nhi\r\n"), None);
        assert_eq!(parse_mg_value(b"VA 9 f0 t1\r\nshort\r\n"), None);
    }
}
