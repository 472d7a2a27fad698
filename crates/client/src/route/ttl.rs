//! `ttl` (mcrouter's `ModifyExptimeRoute`): the child gets every request, with the exptime
//! of what it writes capped and/or set.

use super::request::{ReplyFuture, RequestClass, RequestForm, RouteContext, RouteRequest};
use super::{Build, Route, RouteNode, Step};
use memfleet_routing::TtlRewrite;
use std::sync::Arc;

/// A `ttl` route, ready to run.
pub(super) struct TtlRoute {
    child: Arc<Route>,
    max_ttl: Option<u32>,
    set_ttl: Option<u32>,
}

impl TtlRoute {
    pub(super) fn build(s: &TtlRewrite, b: &mut Build<'_, '_>) -> TtlRoute {
        TtlRoute {
            child: b.route(&s.child),
            max_ttl: s.max_ttl,
            set_ttl: s.set_ttl,
        }
    }
}

impl RouteNode for TtlRoute {
    fn call(&self, op: RouteRequest, ctx: RouteContext) -> ReplyFuture {
        self.child
            .call(rewrite_ttl(op, self.max_ttl, self.set_ttl), ctx)
    }

    fn children(&self) -> Vec<&Arc<Route>> {
        vec![&self.child]
    }

    fn walk<'r, 'k>(&'r self, _: RequestClass, key: &'k [u8], _: RouteContext) -> Step<'r, 'k> {
        let mut line = String::from("ttl");
        if let Some(s) = self.set_ttl {
            line.push_str(&format!("|set_ttl={s}"));
        }
        if let Some(m) = self.max_ttl {
            line.push_str(&format!("|max_ttl={m}"));
        }
        Step::new(line).then(&self.child, key)
    }

    // A get's plain key and server, unchanged: the TTL rewrite touches no get.
    fn get_target(&self, key: &[u8], ctx: RouteContext) -> Option<std::net::SocketAddr> {
        self.child.get_target(key, ctx)
    }
}

/// A TTL no longer than `cap` seconds, in memcached's exptime convention (0 = never,
/// above 30 days = an absolute Unix time, negative = already expired).
pub(super) fn capped_exptime(exptime: i64, cap: u32) -> i64 {
    const MONTH: i64 = 30 * 24 * 3600;
    let cap = i64::from(cap);
    match exptime {
        e if e < 0 => e,
        0 => cap,
        e if e > MONTH => {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() as i64);
            if e <= now {
                -1
            } else {
                (e - now).min(cap)
            }
        }
        e => e.min(cap),
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
fn rewrite_ttl(mut op: RouteRequest, max_ttl: Option<u32>, set_ttl: Option<u32>) -> RouteRequest {
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

    fn raw(head: &[u8], tail: &[u8]) -> RouteRequest {
        RouteRequest::meta_on_k(head, tail)
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
    fn ttls_are_capped_in_every_exptime_form() {
        assert_eq!(capped_exptime(0, 10), 10);
        assert_eq!(capped_exptime(5, 10), 5);
        assert_eq!(capped_exptime(3600, 10), 10);
        assert_eq!(capped_exptime(-1, 10), -1);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        assert_eq!(capped_exptime(now + 3600, 10), 10);
        assert_eq!(capped_exptime(now - 5, 10), -1);
    }
}
