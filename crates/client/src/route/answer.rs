//! Routes that answer without a server or change a request before passing it on: `null`
//! (mcrouter's `NullRoute`), `error` (`ErrorRoute`) and `ttl`'s exptime rewrite
//! (`ModifyExptimeRoute`).

use super::capped_exptime;
use super::request::{RequestForm, RouteRequest};
use memfleet_protocol::reply::ReplyKind;

/// What a `null` route answers `op`: what memcached answers when the key is not there and
/// nothing is stored (a miss, `NOT_STORED`, `NOT_FOUND`; meta `EN`, `NS`, `NF`).
pub(super) fn null_reply(op: &RouteRequest) -> &'static [u8] {
    match &op.form {
        RequestForm::Get { .. } => b"END\r\n",
        RequestForm::Store { .. } => b"NOT_STORED\r\n",
        RequestForm::Delete { .. } => b"NOT_FOUND\r\n",
        RequestForm::Raw {
            kind: ReplyKind::Meta,
            head,
            ..
        } => match head.as_slice() {
            b"mg " | b"me " => b"EN\r\n",
            b"ms " => b"NS\r\n",
            _ => b"NF\r\n",
        },
        RequestForm::Raw { .. } => b"NOT_FOUND\r\n",
    }
}

/// A `ttl` route's rewrite of one exptime (memcached's convention: 0 never, above 30 days
/// a Unix time, negative already expired, which stays so).
fn rewritten(exptime: i64, max_ttl: Option<u32>, set_ttl: Option<u32>) -> i64 {
    if exptime < 0 {
        return exptime;
    }
    let e = set_ttl.map_or(exptime, i64::from);
    max_ttl.map_or(e, |cap| capped_exptime(e, cap))
}

/// `op` with the exptime of what it writes rewritten: storage commands and `lease-set`,
/// `touch`, `gat`/`gats`, and the meta `T` (TTL) and `N` (autovivify TTL) flags of `mg`,
/// `ms` and `ma`; an `ms` without `T` (stored forever) gets one. Anything else as it came.
pub(super) fn rewrite_ttl(
    mut op: RouteRequest,
    max_ttl: Option<u32>,
    set_ttl: Option<u32>,
) -> RouteRequest {
    let new = |e: i64| rewritten(e, max_ttl, set_ttl);
    match &mut op.form {
        RequestForm::Store { exptime, .. } => *exptime = new(*exptime),
        RequestForm::Get { head } => {
            // `gat <exptime>`, `gats <exptime>`.
            let text = String::from_utf8_lossy(head).into_owned();
            if let Some((cmd @ ("gat" | "gats"), e)) = text.split_once(' ') {
                if let Ok(e) = e.trim().parse::<i64>() {
                    *head = format!("{cmd} {}", new(e)).into_bytes();
                }
            }
        }
        RequestForm::Raw { head, tail, .. } => match head.as_slice() {
            b"touch " => {
                let text = String::from_utf8_lossy(tail);
                if let Ok(e) = text.trim().parse::<i64>() {
                    *tail = format!(" {}\r\n", new(e)).into_bytes();
                }
            }
            b"mg " | b"ms " | b"ma " => {
                let is_set = head.as_slice() == b"ms ";
                *tail = meta_ttls(tail, is_set, new);
            }
            _ => {}
        },
        RequestForm::Delete { .. } => {}
    }
    op
}

/// A meta request's tail (` [datalen] <flags>*\r\n[data\r\n]`) with its `T` and `N` flags
/// rewritten by `new`; `add_t`: a missing `T` is added (as `T0`, rewritten).
fn meta_ttls(tail: &[u8], add_t: bool, new: impl Fn(i64) -> i64) -> Vec<u8> {
    let line_end = tail
        .windows(2)
        .position(|w| w == b"\r\n")
        .unwrap_or(tail.len());
    let (line, rest) = tail.split_at(line_end);
    let mut out = Vec::with_capacity(tail.len() + 12);
    let mut has_t = false;
    for (i, token) in line
        .split(|&b| b == b' ')
        .filter(|t| !t.is_empty())
        .enumerate()
    {
        out.push(b' ');
        let ttl = match token.first() {
            // An `ms` line's first token is its data length, never a flag.
            _ if add_t && i == 0 => None,
            Some(b'T') => {
                has_t = true;
                Some(b'T')
            }
            Some(b'N') => Some(b'N'),
            _ => None,
        };
        match ttl.and_then(|f| Some((f, std::str::from_utf8(&token[1..]).ok()?.parse().ok()?))) {
            Some((flag, e)) => {
                out.push(flag);
                out.extend_from_slice(new(e).to_string().as_bytes());
            }
            None => out.extend_from_slice(token),
        }
    }
    if add_t && !has_t {
        out.extend_from_slice(format!(" T{}", new(0)).as_bytes());
    }
    out.extend_from_slice(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::route::RequestClass;
    use std::sync::Arc;

    fn raw(head: &[u8], tail: &[u8]) -> RouteRequest {
        RouteRequest {
            class: RequestClass::Set,
            key: b"k".to_vec(),
            form: RequestForm::Raw {
                head: head.to_vec(),
                wire_key: b"k".to_vec(),
                tail: tail.to_vec(),
                kind: ReplyKind::Meta,
            },
        }
    }

    #[test]
    fn every_form_of_exptime_is_rewritten() {
        let set = |e: i64| RouteRequest {
            class: RequestClass::Set,
            key: b"k".to_vec(),
            form: RequestForm::Store {
                command: memfleet_protocol::StoreCommand::Set,
                flags: 0,
                exptime: e,
                cas: 0,
                data: Arc::from(&b"v"[..]),
            },
        };
        let cap = |op| rewrite_ttl(op, Some(60), None).bytes();
        assert_eq!(cap(set(0)), b"set k 0 60 1\r\nv\r\n");
        assert_eq!(cap(set(10)), b"set k 0 10 1\r\nv\r\n");
        assert_eq!(cap(set(-1)), b"set k 0 -1 1\r\nv\r\n");
        assert_eq!(
            rewrite_ttl(set(10), None, Some(5)).bytes(),
            b"set k 0 5 1\r\nv\r\n"
        );
        let gat = RouteRequest {
            class: RequestClass::Get,
            key: b"k".to_vec(),
            form: RequestForm::Get {
                head: b"gat 1000".to_vec(),
            },
        };
        assert_eq!(cap(gat), b"gat 60 k\r\n");
        assert_eq!(cap(raw(b"touch ", b" 0\r\n")), b"touch k 60\r\n");
        assert_eq!(
            cap(raw(b"ms ", b" 1 T900 F3\r\nv\r\n")),
            b"ms k 1 T60 F3\r\nv\r\n"
        );
        assert_eq!(
            cap(raw(b"ms ", b" 1 F3\r\nv\r\n")),
            b"ms k 1 F3 T60\r\nv\r\n"
        );
        assert_eq!(cap(raw(b"mg ", b" v T0 N100\r\n")), b"mg k v T60 N60\r\n");
        assert_eq!(cap(raw(b"mg ", b" v\r\n")), b"mg k v\r\n");
        assert_eq!(cap(raw(b"ma ", b" N5\r\n")), b"ma k N5\r\n");
    }

    #[test]
    fn null_answers_as_a_miss_or_a_refusal() {
        assert_eq!(null_reply(&raw(b"mg ", b" v\r\n")), b"EN\r\n");
        assert_eq!(null_reply(&raw(b"ms ", b" 1\r\nv\r\n")), b"NS\r\n");
        assert_eq!(null_reply(&raw(b"md ", b"\r\n")), b"NF\r\n");
    }
}
