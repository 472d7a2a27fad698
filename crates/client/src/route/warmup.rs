//! Cold-cluster warm-up (paper §4.3): a cold cluster's misses filled from a warm one.

use super::{is_hit, Class, Ctx, Form, Op, ReplyFuture, Route, RouteCounters};
use memfleet_protocol::reply::ReplyKind;
use memfleet_protocol::StoreCommand;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// reads the database again rather than trust what it read from warm.
pub(super) fn warm_get(
    cold: &Arc<Route>,
    warm: &Arc<Route>,
    counters: &Arc<RouteCounters>,
    op: Op,
    ctx: Ctx,
) -> ReplyFuture {
    let call = cold.call(op.clone(), ctx);
    let (cold, warm, counters) = (cold.clone(), warm.clone(), counters.clone());
    Box::pin(async move {
        let reply = call.await?;
        if is_hit(&reply) || reply != b"END\r\n" {
            // A hit, an LVALUE (lease-get) or an error line: the cold cluster's answer.
            if is_hit(&reply) {
                counters.cold_hits.fetch_add(1, Ordering::Relaxed);
            }
            return Ok(reply);
        }
        counters.cold_misses.fetch_add(1, Ordering::Relaxed);
        let fetch = Op::raw(
            Class::Get,
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
        let add = Op {
            class: Class::Set,
            key: op.key.clone(),
            form: Form::Store {
                command: StoreCommand::Add,
                flags,
                exptime: ttl,
                cas: 0,
                data: data.clone().into(),
            },
        };
        match cold.call(add, ctx).await {
            Ok(r) if r == b"STORED\r\n" => {
                counters.warm_fills.fetch_add(1, Ordering::Relaxed);
            }
            _ => {
                counters.fills_refused.fetch_add(1, Ordering::Relaxed);
                return Ok(reply);
            }
        }
        if matches!(&op.form, Form::Get { head } if head == b"get") {
            let mut out = Vec::with_capacity(data.len() + op.key.len() + 32);
            memfleet_protocol::response::value(&mut out, &op.key, flags, &data, None);
            memfleet_protocol::response::end(&mut out);
            Ok(out)
        } else {
            // gets, gat, lease-get: the cold cluster's own answer (its CAS, its touch).
            cold.call(op, ctx).await
        }
    })
}

/// `VA <len> f<flags> t<ttl>\r\n<data>\r\n` into (flags, exptime for an add, data); a
/// remaining TTL of -1 (none) is exptime 0.
fn parse_mg_value(reply: &[u8]) -> Option<(u32, i64, Vec<u8>)> {
    let nl = reply.iter().position(|&b| b == b'\n')?;
    let line = reply[..nl].strip_suffix(b"\r")?;
    let mut words = line.split(|&b| b == b' ');
    if words.next()? != b"VA" {
        return None;
    }
    let len: usize = std::str::from_utf8(words.next()?).ok()?.parse().ok()?;
    let (mut flags, mut ttl) = (0u32, 0i64);
    for w in words {
        let value = std::str::from_utf8(w.get(1..)?).ok()?;
        match w.first()? {
            b'f' => flags = value.parse().ok()?,
            b't' => ttl = value.parse::<i64>().ok()?.max(0),
            _ => {}
        }
    }
    let data = reply.get(nl + 1..nl + 1 + len)?.to_vec();
    Some((flags, ttl, data))
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(parse_mg_value(b"VA 9 f0 t1\r\nshort\r\n"), None);
    }
}
