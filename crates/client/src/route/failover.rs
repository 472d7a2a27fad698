//! `failover` (mcrouter's `FailoverRoute`, the memcached proxy's `failover{miss=true}`):
//! children in order, the next tried while a reply fails over, within the failover limit.

use super::counters::RouteCounters;
use super::request::{ReplyFuture, RequestClass, RouteContext, RouteReply, RouteRequest};
use super::{Build, Route, RouteNode, Step};
use crate::backend::BackendError;
use memfleet_routing::{Failover, FailoverErrors, FailoverLimit, FailoverOrder};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// mcrouter's failover limit as a token bucket in one atomic word (an `f64`'s bits): each
/// request adds `rate`, up to `burst`; each failover takes 1.
#[derive(Debug)]
pub(super) struct FailoverBucket {
    limit: FailoverLimit,
    tokens: AtomicU64,
}

impl FailoverBucket {
    /// A full bucket.
    fn new(limit: FailoverLimit) -> FailoverBucket {
        FailoverBucket {
            limit,
            tokens: AtomicU64::new(limit.burst.to_bits()),
        }
    }

    /// Applies `f` to the tokens; whether it did (`f` said `Some`).
    fn update(&self, f: impl Fn(f64) -> Option<f64>) -> bool {
        self.tokens
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |bits| {
                f(f64::from_bits(bits)).map(f64::to_bits)
            })
            .is_ok()
    }

    /// A request passed: `rate` more tokens.
    fn credit(&self) {
        let (rate, burst) = (self.limit.rate, self.limit.burst);
        self.update(|t| Some((t + rate).min(burst)));
    }

    /// A failover: takes a token if there is one.
    fn take(&self) -> bool {
        self.update(|t| (t >= 1.0).then_some(t - 1.0))
    }
}

/// A `failover` route, ready to run.
pub(super) struct FailoverRoute {
    /// The children.
    children: Vec<Arc<Route>>,
    /// What fails over.
    errors: FailoverErrors,
    /// A get's miss fails over too.
    miss: bool,
    /// The order children are tried in.
    order: FailoverOrder,
    /// The failover limit.
    limit: Option<Arc<FailoverBucket>>,
    /// `failovers`, `failovers_limited`.
    counters: Arc<RouteCounters>,
}

/// Whether `reply` to `class` moves on to the next child.
fn fails_over(reply: &RouteReply, class: RequestClass, errors: FailoverErrors, miss: bool) -> bool {
    match reply {
        // Not sent: marked down, replaying, or over `max_outstanding`.
        Err(
            BackendError::Down(_) | BackendError::Replaying(_) | BackendError::Outstanding { .. },
        ) => errors.down,
        Err(BackendError::Connection(_) | BackendError::Auth { .. }) => errors.connect,
        Err(BackendError::Timeout(_)) => errors.timeout,
        Ok(r) if r.starts_with(b"SERVER_ERROR") => errors.server_error,
        Ok(r) => {
            miss && class == RequestClass::Get
                && (r.as_slice() == b"END\r\n" || r.starts_with(b"EN\r\n") || r.starts_with(b"EN "))
        }
    }
}

impl FailoverRoute {
    pub(super) fn build(s: &Failover, b: &mut Build<'_, '_>) -> FailoverRoute {
        FailoverRoute {
            children: s.children.iter().map(|c| b.route(c)).collect(),
            errors: s.errors,
            miss: s.miss,
            order: s.order,
            limit: s.limit.map(|l| Arc::new(FailoverBucket::new(l))),
            counters: b.counters(&["failovers", "failovers_limited"]),
        }
    }

    /// The children's order for `key`: as written, or by rendezvous hash of the key.
    fn order_for(&self, key: &[u8]) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.children.len()).collect();
        if self.order == FailoverOrder::Rendezvous {
            order.sort_by_key(|&i| {
                std::cmp::Reverse(xxhash_rust::xxh3::xxh3_64_with_seed(key, i as u64))
            });
        }
        order
    }
}

impl RouteNode for FailoverRoute {
    /// Sends `op` to the first child now; the next ones follow while replies fail over.
    fn call(&self, op: RouteRequest, ctx: RouteContext) -> ReplyFuture {
        let order = self.order_for(&op.key);
        let first = self.children[order[0]].call(op.clone(), ctx);
        if let Some(limit) = &self.limit {
            limit.credit();
        }
        if order.len() == 1 {
            return first;
        }
        let children = self.children.clone();
        let (errors, miss) = (self.errors, self.miss);
        let (limit, counters) = (self.limit.clone(), self.counters.clone());
        Box::pin(async move {
            let mut reply = first.await;
            for &next in &order[1..] {
                if !fails_over(&reply, op.class, errors, miss) {
                    break;
                }
                if limit.as_ref().is_some_and(|l| !l.take()) {
                    counters.failovers_limited.fetch_add(1, Ordering::Relaxed);
                    break;
                }
                counters.failovers.fetch_add(1, Ordering::Relaxed);
                reply = children[next].call(op.clone(), ctx).await;
            }
            reply
        })
    }

    fn children(&self) -> Vec<&Arc<Route>> {
        self.children.iter().collect()
    }

    // Failover needs TCP replies to decide: no get target.
    fn walk<'r, 'k>(&'r self, _: RequestClass, key: &'k [u8], _: RouteContext) -> Step<'r, 'k> {
        let miss = if self.miss { "|miss" } else { "" };
        let order = self.order_for(key).into_iter().map(|i| &self.children[i]);
        Step::new(format!("failover{miss} (in the order tried)")).then_all(order, key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bucket_lets_rate_of_the_requests_fail_over() {
        let b = FailoverBucket::new(FailoverLimit {
            rate: 0.5,
            burst: 2.0,
        });
        assert!(b.take() && b.take() && !b.take());
        b.credit();
        assert!(!b.take());
        b.credit();
        assert!(b.take());
        for _ in 0..100 {
            b.credit();
        }
        assert!(b.take() && b.take() && !b.take());
    }

    #[test]
    fn what_fails_over() {
        let all = FailoverErrors::default();
        let get = RequestClass::Get;
        assert!(fails_over(
            &Err(BackendError::Timeout("s".into())),
            get,
            all,
            false
        ));
        assert!(fails_over(
            &Ok(b"SERVER_ERROR busy\r\n".to_vec()),
            get,
            all,
            false
        ));
        assert!(!fails_over(&Ok(b"END\r\n".to_vec()), get, all, false));
        assert!(fails_over(&Ok(b"END\r\n".to_vec()), get, all, true));
        assert!(fails_over(&Ok(b"EN\r\n".to_vec()), get, all, true));
        assert!(!fails_over(
            &Ok(b"NOT_STORED\r\n".to_vec()),
            RequestClass::Set,
            all,
            true
        ));
        let only_timeouts = FailoverErrors {
            connect: false,
            timeout: true,
            down: false,
            server_error: false,
        };
        assert!(!fails_over(
            &Err(BackendError::Down("s".into())),
            get,
            only_timeouts,
            false
        ));
        assert!(!fails_over(
            &Ok(b"SERVER_ERROR x\r\n".to_vec()),
            get,
            only_timeouts,
            false
        ));
    }
}
