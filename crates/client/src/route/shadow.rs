//! `shadow` (mcrouter's `ShadowRoute`): the main route answers the client alone; the chosen
//! keys' requests also go to the shadow route, at most `max_pending` at once (more are
//! dropped and counted), never adding latency or errors to main. Gets that reach both have
//! their replies compared (values and flags, not CAS or TTL), mismatches counted and a
//! sample (the 1st, 2nd, 4th, 8th, ...) logged, so a new cluster can be checked before it
//! takes traffic.

use super::counters::RouteCounters;
use super::request::{ReplyFuture, RequestClass, RouteContext, RouteRequest};
use super::{Build, Route, RouteNode, Step};
use memfleet_protocol::reply::{self, ReplyKind, ServerReply};
use memfleet_routing::{Shadow, ShadowKeys};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// A `shadow` route, ready to run.
pub(super) struct ShadowRoute {
    /// Answers the client.
    main: Arc<Route>,
    /// Gets a copy of the chosen keys' requests.
    shadow: Arc<Route>,
    /// The chosen keys.
    keys: ShadowKeys,
    /// Shadow requests in flight at most.
    max_pending: usize,
    /// Shadow requests in flight now.
    pending: Arc<AtomicUsize>,
    /// `shadow_requests`, `shadow_dropped`, `shadow_compared`, `shadow_mismatches`.
    counters: Arc<RouteCounters>,
}

/// Frees a place in the shadow queue when dropped.
struct Place(Arc<AtomicUsize>);

impl Drop for Place {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl ShadowRoute {
    pub(super) fn build(s: &Shadow, b: &mut Build<'_, '_>) -> ShadowRoute {
        ShadowRoute {
            main: b.route(&s.main),
            shadow: b.route(&s.shadow),
            keys: s.keys,
            max_pending: s.max_pending,
            pending: Default::default(),
            counters: b.counters(&[
                "shadow_requests",
                "shadow_dropped",
                "shadow_compared",
                "shadow_mismatches",
            ]),
        }
    }

    /// Whether `key` is one of the shadowed keys.
    fn shadows(&self, key: &[u8]) -> bool {
        match self.keys {
            ShadowKeys::All => true,
            ShadowKeys::KeyFraction(from, to) => {
                let at = xxhash_rust::xxh3::xxh3_64(key) as f64 / 18_446_744_073_709_551_616.0;
                from <= at && at < to
            }
            ShadowKeys::IndexRange(from, to) => match &*self.main {
                Route::Pool(pool) => (from..to).contains(&pool.pick(key)),
                _ => false,
            },
        }
    }

    /// A place in the shadow queue, if there is one.
    fn place(&self) -> Option<Place> {
        let before = self.pending.fetch_add(1, Ordering::AcqRel);
        let place = Place(self.pending.clone());
        (before < self.max_pending).then_some(place)
    }
}

impl RouteNode for ShadowRoute {
    /// Main's reply; the shadow's request, when the key is chosen and there is room, is
    /// queued now too (so each server sees a client's requests in order) and awaited in the
    /// background.
    fn call(&self, op: RouteRequest, ctx: RouteContext) -> ReplyFuture {
        if !self.shadows(&op.key) {
            return self.main.call(op, ctx);
        }
        let Some(place) = self.place() else {
            self.counters.shadow_dropped.fetch_add(1, Ordering::Relaxed);
            return self.main.call(op, ctx);
        };
        self.counters
            .shadow_requests
            .fetch_add(1, Ordering::Relaxed);
        let main = self.main.call(op.clone(), ctx);
        let shadowed = self.shadow.call(op.clone(), ctx);
        let counters = self.counters.clone();
        if op.class != RequestClass::Get {
            tokio::spawn(async move {
                let _ = shadowed.await;
                drop(place);
            });
            return main;
        }
        // A get: main's reply goes to the client and, copied, to the comparison.
        let (tx, rx) = tokio::sync::oneshot::channel::<Vec<u8>>();
        tokio::spawn(async move {
            let shadow_reply = shadowed.await;
            let main_reply = rx.await;
            drop(place);
            let (Ok(main_reply), Ok(shadow_reply)) = (main_reply, shadow_reply) else {
                return; // a failure is not a comparison
            };
            counters.shadow_compared.fetch_add(1, Ordering::Relaxed);
            if !same_answer(&main_reply, &shadow_reply, op.reply_kind()) {
                let n = counters.shadow_mismatches.fetch_add(1, Ordering::Relaxed) + 1;
                if n.is_power_of_two() {
                    tracing::warn!(
                        key = %String::from_utf8_lossy(&op.key),
                        main = %String::from_utf8_lossy(&main_reply[..main_reply.len().min(200)]),
                        shadow = %String::from_utf8_lossy(&shadow_reply[..shadow_reply.len().min(200)]),
                        mismatches = n,
                        "shadow reply differs from main's (a sample)"
                    );
                }
            }
        });
        Box::pin(async move {
            let reply = main.await;
            if let Ok(r) = &reply {
                let _ = tx.send(r.clone());
            }
            reply
        })
    }

    fn children(&self) -> Vec<&Arc<Route>> {
        vec![&self.main, &self.shadow]
    }

    fn walk<'r, 'k>(&'r self, _: RequestClass, key: &'k [u8], _: RouteContext) -> Step<'r, 'k> {
        if self.shadows(key) {
            let both = [&self.main, &self.shadow];
            return Step::new("shadow|main then shadow (copied)").then_all(both, key);
        }
        Step::new("shadow|main (key not shadowed)").then(&self.main, key)
    }

    fn get_target(&self, key: &[u8], ctx: RouteContext) -> Option<std::net::SocketAddr> {
        // A shadowed get must go through the route to be copied and compared.
        if self.shadows(key) {
            return None;
        }
        self.main.get_target(key, ctx)
    }
}

/// Whether two replies to the same get say the same: the same values with the same client
/// flags (CAS uniques, lease tokens and TTLs differ between clusters and are not compared),
/// or for meta gets the same status, value and client flags; anything else byte for byte.
pub(super) fn same_answer(main: &[u8], shadow: &[u8], kind: ReplyKind) -> bool {
    match (reply::decode(main, kind), reply::decode(shadow, kind)) {
        (Ok(ServerReply::Values(a)), Ok(ServerReply::Values(b))) => {
            a.len() == b.len()
                && a.iter().zip(&b).all(|(x, y)| {
                    (x.key, x.flags, x.data, x.lease.is_some())
                        == (y.key, y.flags, y.data, y.lease.is_some())
                })
        }
        (Ok(ServerReply::Meta(a)), Ok(ServerReply::Meta(b))) => {
            a.code == b.code && a.data == b.data && a.flag(b'f') == b.flag(b'f')
        }
        _ => main == shadow,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_compared_by_what_they_say() {
        let r = ReplyKind::Retrieval;
        assert!(same_answer(
            b"VALUE k 1 1 5\r\nv\r\nEND\r\n",
            b"VALUE k 1 1 9\r\nv\r\nEND\r\n",
            r
        ));
        assert!(!same_answer(b"VALUE k 1 1\r\nv\r\nEND\r\n", b"END\r\n", r));
        assert!(!same_answer(
            b"VALUE k 1 1\r\nv\r\nEND\r\n",
            b"VALUE k 2 1\r\nv\r\nEND\r\n",
            r
        ));
        let m = ReplyKind::Meta;
        assert!(same_answer(
            b"VA 1 t10 c5\r\nv\r\n",
            b"VA 1 t9 c7\r\nv\r\n",
            m
        ));
        assert!(!same_answer(b"VA 1 f1\r\nv\r\n", b"VA 1 f2\r\nv\r\n", m));
        assert!(!same_answer(b"VA 1\r\nv\r\n", b"EN\r\n", m));
    }
}
