//! Proactive expiration (Segcache §3.5) and the reclaiming half of `flush_all`.
//!
//! Each chain is sorted by creation time, and every item in a segment of bucket `b` was
//! written after the segment was created with a TTL of at least `lower_bound(b)`. So once the
//! walk from the head meets a segment with `create_at + lower_bound(b) > now`, no segment
//! after it can have expired: the pass touches only the heads of the 1024 chains plus the
//! segments it frees. A flush makes every older segment dead wherever it sits, so the first
//! pass after a flush walks the chains whole.

use crate::engine_state::EngineState;
use crate::segment::{state, NONE};
use crate::ttl::{lower_bound, NEVER_BUCKET, N_BUCKETS};
use std::sync::atomic::Ordering;

/// Frees every dead segment it can claim; returns how many.
pub(crate) fn expire_pass(engine: &EngineState) -> usize {
    engine
        .counters()
        .expire_passes
        .fetch_add(1, Ordering::Relaxed);
    let now = engine.clock().now();
    let generation = engine.current_generation(now);
    let full = !engine.reclaimed_through(generation);
    let mut victims = Vec::new();
    let mut freed = 0;
    for bucket in 0..N_BUCKETS {
        if bucket == NEVER_BUCKET && !full {
            continue;
        }
        let lo = lower_bound(bucket);
        {
            let mut chain = engine.chains().lock(bucket);
            let mut at = chain.head;
            while at != NONE {
                let h = engine.segment(at);
                let next = h.next.load(Ordering::Relaxed);
                if !full && h.create_at.load(Ordering::Relaxed).saturating_add(lo) > now {
                    break;
                }
                let st = h.state.load(Ordering::Acquire);
                if (st == state::SEALED || st == state::ACTIVE)
                    && h.is_dead(now, generation)
                    && h.state
                        .compare_exchange(st, state::RETIRING, Ordering::AcqRel, Ordering::Acquire)
                        .is_ok()
                {
                    chain.unlink(engine.segments(), at);
                    let flushed = h.generation.load(Ordering::Relaxed) != generation;
                    victims.push((at, flushed));
                }
                at = next;
            }
        }
        for (seg, flushed) in victims.drain(..) {
            let dropped = engine.retire(seg) as u64;
            let c = &engine.counters();
            if flushed {
                c.flushed_items.fetch_add(dropped, Ordering::Relaxed);
            } else {
                c.expired_items.fetch_add(dropped, Ordering::Relaxed);
                c.expired_segments.fetch_add(1, Ordering::Relaxed);
            }
            freed += 1;
        }
    }
    if full {
        engine.set_reclaimed(generation);
    }
    if let Some(tier) = engine.flash() {
        // Flash segments whose items all expired or were flushed go without being read.
        tier.expire(now, generation);
        if tier.needs_sweep() {
            crate::demote::sweep(engine, false);
        }
    }
    freed
}
