//! Making room when no segment is free (Segcache §3.6).
//!
//! **Compaction** first (`compact.rs`): consecutive sealed segments of one chain whose live
//! items fit in fewer segments are rewritten without dropping anything (overwrites and
//! deletes leave dead copies that would otherwise wait for the round-robin merge).
//!
//! **Merge** (the default): pick a TTL bucket by smooth weighted round-robin, weighted by the
//! number of segments in each chain (the paper says round-robin; with a few TTL classes of
//! very different sizes, plain round-robin squeezed the small classes: `memfleet sim` on the
//! paper's "mix" workload at 16 MiB missed 17.8% against 13.9% weighted), take consecutive
//! sealed, unexpired segments from where the last merge in that bucket stopped, and copy the
//! items worth keeping into one fresh segment; free the sources. An item's worth is its
//! frequency (the ASFC counter in its hash slot) per byte, relative to the segment's mean item
//! size. As pelikan's merge does, each source gives up only what exceeds its share of the
//! destination (1/N of a segment), least valuable first (a threshold adjusted every tenth of a
//! segment aims at that share), and the merge takes further sources, up to [`MAX_MERGE`],
//! while the destination is less than (N-1)/N + 5% full: merged segments leave full, and
//! sources that are mostly dead lose nothing. (The first version kept 1/N of every source's
//! *written* bytes and dropped every never-read item: merged segments left half empty, and
//! the 64 MiB look-aside workload of `examples/churn.rs` missed 0.290 instead of 0.258.)
//! Kept items' frequencies are halved (a window, so past popularity fades). The merged
//! segment takes the first source's place and creation time, so the chain stays sorted by age.
//!
//! **FIFO**: free the oldest segment whole. It is also the fallback when no bucket has two
//! mergeable segments (tiny heaps, or every segment still being written).
//!
//! Only one eviction runs at a time (an eviction frees megabytes; callers that queued behind
//! it usually find a free segment when they get the lock).

use crate::cache::{EvictionPolicy, Shared};
use crate::segment::{state, NONE, SEALED};
use crate::ttl::N_BUCKETS;
use std::sync::atomic::Ordering;

/// Round-robin position and merge threshold, kept between evictions.
pub(crate) struct EvictorState {
    /// Smooth weighted round-robin credit per TTL bucket (weights: chain lengths).
    credit: Vec<i64>,
    cutoff: f64,
    last_expire_pass: Option<u32>,
}

impl Default for EvictorState {
    fn default() -> Self {
        EvictorState {
            credit: vec![0; N_BUCKETS],
            cutoff: 1.0,
            last_expire_pass: None,
        }
    }
}

/// Nothing could be evicted.
#[derive(Debug)]
pub(crate) struct NoVictim;

/// Frees at least one segment, or fails when nothing can be freed.
pub(crate) fn make_room(shared: &Shared) -> Result<(), NoVictim> {
    let mut st = shared.evictor.lock().unwrap_or_else(|e| e.into_inner());
    if shared.free.len() > 1 {
        return Ok(()); // another thread made room while we waited
    }
    // Expired segments are free for the taking: reclaim them before evicting live data.
    let now = shared.clock.now();
    if st.last_expire_pass != Some(now) {
        st.last_expire_pass = Some(now);
        if crate::expire::expire_pass(shared) > 0 && shared.free.len() > 1 {
            return Ok(());
        }
    }
    match shared.config.eviction {
        EvictionPolicy::None => Err(NoVictim),
        EvictionPolicy::Fifo => evict_oldest(shared),
        EvictionPolicy::Merge => {
            if crate::compact::compact_once(shared) || merge_once(shared, &mut st) {
                Ok(())
            } else {
                evict_oldest(shared)
            }
        }
    }
}

/// Frees the oldest segment that is not already being merged or retired.
fn evict_oldest(shared: &Shared) -> Result<(), NoVictim> {
    loop {
        let mut best: Option<(u32, usize, u32)> = None;
        for b in 0..N_BUCKETS {
            let chain = shared.chains.lock(b);
            let mut at = chain.head;
            while at != NONE {
                let h = &shared.headers[at as usize];
                let st = h.state.load(Ordering::Acquire);
                if st == state::SEALED || st == state::ACTIVE {
                    let created = h.create_at.load(Ordering::Relaxed);
                    if best.is_none_or(|(_, _, oldest)| created < oldest) {
                        best = Some((at, b, created));
                    }
                    break;
                }
                at = h.next.load(Ordering::Relaxed);
            }
        }
        let Some((victim, bucket, _)) = best else {
            return Err(NoVictim);
        };
        let claimed = {
            let mut chain = shared.chains.lock(bucket);
            let h = &shared.headers[victim as usize];
            let st = h.state.load(Ordering::Acquire);
            let ok = (st == state::SEALED || st == state::ACTIVE)
                && h.state
                    .compare_exchange(st, state::RETIRING, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok();
            if ok {
                chain.unlink(&shared.headers, victim);
            }
            ok
        };
        if claimed {
            let dropped = shared.retire(victim);
            shared
                .counters
                .evicted_items
                .fetch_add(dropped as u64, Ordering::Relaxed);
            shared
                .counters
                .evicted_segments
                .fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
    }
}

/// Most segments one merge may consume (pelikan's `max`): a merge goes on to the next
/// source while its destination is below the stop mark, so sources that are mostly dead
/// are compacted together rather than each costing live items.
pub(crate) const MAX_MERGE: usize = 8;

/// One merge eviction; false when no bucket has two mergeable segments in a row.
fn merge_once(shared: &Shared, st: &mut EvictorState) -> bool {
    let now = shared.clock.now();
    let generation = shared.current_generation(now);
    // Merge pressure in proportion to each bucket's size (smooth weighted round-robin), so a
    // small TTL class is not squeezed as hard as a large one.
    let weights: Vec<i64> = (0..N_BUCKETS)
        .map(|b| i64::from(shared.chains.lock(b).segments))
        .collect();
    let total: i64 = weights.iter().sum();
    for (c, w) in st.credit.iter_mut().zip(&weights) {
        *c += w;
    }
    let mut order: Vec<usize> = (0..N_BUCKETS).filter(|&b| weights[b] >= 2).collect();
    order.sort_by_key(|&b| std::cmp::Reverse(st.credit[b]));
    for bucket in order {
        let mut run = Vec::with_capacity(MAX_MERGE);
        {
            let mut chain = shared.chains.lock(bucket);
            if chain.segments < 2 {
                continue;
            }
            for start in [chain.merge_cursor, chain.head] {
                run.clear();
                let mut at = if start == NONE { chain.head } else { start };
                while at != NONE && run.len() < MAX_MERGE {
                    let h = &shared.headers[at as usize];
                    let mergeable = h.state.load(Ordering::Acquire) == state::SEALED
                        && h.is_settled()
                        && !h.is_dead(now, generation);
                    if mergeable {
                        run.push(at);
                    } else if run.len() >= 2 {
                        break;
                    } else {
                        run.clear();
                    }
                    at = h.next.load(Ordering::Relaxed);
                }
                if run.len() >= 2 {
                    chain.merge_cursor = at;
                    break;
                }
            }
            if run.len() < 2 {
                continue;
            }
            for &seg in &run {
                shared.headers[seg as usize]
                    .state
                    .store(state::MERGING, Ordering::Release);
            }
        }
        st.credit[bucket] -= total;
        merge(shared, st, bucket, &run);
        return true;
    }
    false
}

/// Merges a prefix of `run` (consecutive segments of `bucket`, claimed MERGING) into one new
/// segment, as pelikan's merge eviction does: each source gives up at most what exceeds its
/// share of the destination (1/N of a segment), dropping its least valuable items first, and
/// the merge takes further sources while the destination is below the stop mark. Sources
/// whose live bytes fit their share lose nothing: a merge over mostly dead segments is a
/// compaction. At least two sources are consumed, so a merge always frees a segment. Sources
/// not consumed go back to SEALED.
fn merge(shared: &Shared, st: &mut EvictorState, bucket: usize, run: &[u32]) {
    let seg_size = shared.heap.segment_size();
    let Some(dst) = shared.free.take_reserved() else {
        // No destination: fall back to freeing the first two sources whole.
        let (whole, rest) = run.split_at(2);
        let mut chain = shared.chains.lock(bucket);
        for &seg in whole {
            chain.unlink(&shared.headers, seg);
        }
        for &seg in rest {
            shared.headers[seg as usize]
                .state
                .store(state::SEALED, Ordering::Release);
        }
        drop(chain);
        for &seg in whole {
            let dropped = shared.retire(seg);
            shared
                .counters
                .evicted_items
                .fetch_add(dropped as u64, Ordering::Relaxed);
            shared
                .counters
                .evicted_segments
                .fetch_add(1, Ordering::Relaxed);
        }
        return;
    };
    let first = &shared.headers[run[0] as usize];
    let d = &shared.headers[dst as usize];
    d.open(
        first.create_at.load(Ordering::Relaxed),
        bucket,
        first.generation.load(Ordering::Relaxed),
        state::MERGING,
    );

    let n = shared.config.merge_segments;
    // Each source keeps at most its share of the destination; the merge stops taking
    // sources once the destination is this full (pelikan: (N-1)/N + 5%).
    let share = seg_size / n.min(run.len());
    let stop = seg_size * (n - 1) / n + seg_size / 20;
    let mut dst_used = 0usize;
    let mut evicted = 0u64;
    let mut retained = 0u64;
    let mut unfetched = 0u64;
    let mut cutoff = st.cutoff;
    let mut consumed = 0;
    let mut table = shared.table.load();
    for &src in run {
        if consumed >= 2 && dst_used >= stop {
            break;
        }
        consumed += 1;
        let h = &shared.headers[src as usize];
        d.include_deadlines(h.min_deadline(), h.max_deadline());
        let used = h.used();
        let live_items = h.live_items.load(Ordering::Relaxed).max(1);
        let live_bytes = h.live_bytes.load(Ordering::Relaxed) as usize;
        let mean_size = live_bytes.max(1) as f64 / f64::from(live_items);
        let to_drop = live_bytes.saturating_sub(share);
        // The cutoff adapts so that about `share` of the live bytes scanned are kept.
        let target_ratio = (share as f64 / live_bytes.max(1) as f64).min(1.0);
        let check_every = (seg_size / 10).max(1);
        cutoff = (1.0 + cutoff) / 2.0;
        let (mut scanned, mut copied, mut dropped, mut next_check) =
            (0usize, 0usize, 0usize, check_every);
        let mut offset = 0;
        while offset < used {
            let header = shared.header_at(src, offset);
            let size = shared.aligned(header.len());
            shared.with_item_slot(&mut table, src, offset, &header, |chain, found| {
                let Some((slot, s)) = found else {
                    return; // dead: overwritten or deleted
                };
                scanned += size;
                if scanned >= next_check {
                    next_check += check_every;
                    let t = (copied as f64 / scanned as f64 - target_ratio) / target_ratio;
                    if !(-0.5..=0.5).contains(&t) {
                        cutoff *= (1.0 + t).max(0.25);
                    }
                }
                let score = f64::from(s.freq()) / (size as f64 / mean_size);
                let drop = dropped < to_drop && score <= cutoff;
                if !drop && dst_used + size <= seg_size {
                    // SAFETY: `src` is sealed, settled and MERGING (claimed by this merge),
                    // so its bytes are final; [dst_used, +size) in `dst` is this merge's and
                    // not yet published.
                    unsafe {
                        shared.move_item(
                            chain,
                            slot,
                            s,
                            (src, offset),
                            (dst, dst_used),
                            &header,
                            kept_freq(s.freq()),
                        );
                    }
                    dst_used += size;
                    copied += size;
                    retained += 1;
                } else {
                    chain.remove(slot);
                    chain.bump_cas();
                    h.remove_live(size);
                    dropped += size;
                    evicted += 1;
                    unfetched += u64::from(s.freq() == 0);
                }
            });
            offset += size;
        }
    }
    st.cutoff = cutoff;
    let (done, rest) = run.split_at(consumed);
    d.write_offset
        .store(dst_used as u32 | SEALED, Ordering::Release);
    {
        let mut chain = shared.chains.lock(bucket);
        chain.insert_before(&shared.headers, dst, run[0]);
        for &seg in done {
            chain.unlink(&shared.headers, seg);
        }
        for &seg in rest {
            shared.headers[seg as usize]
                .state
                .store(state::SEALED, Ordering::Release);
        }
        // The next merge in this bucket starts after what this one consumed.
        chain.merge_cursor = rest
            .first()
            .copied()
            .unwrap_or_else(|| shared.headers[dst as usize].next.load(Ordering::Relaxed));
        d.state.store(state::SEALED, Ordering::Release);
    }
    for &seg in done {
        // Every live item was moved or dropped above; only readers need draining.
        shared.retire_emptied(seg);
    }
    let c = &shared.counters;
    c.merges.fetch_add(1, Ordering::Relaxed);
    c.evicted_segments
        .fetch_add(done.len() as u64, Ordering::Relaxed);
    c.evicted_unfetched.fetch_add(unfetched, Ordering::Relaxed);
    c.evicted_items.fetch_add(evicted, Ordering::Relaxed);
    c.merge_retained_items
        .fetch_add(retained, Ordering::Relaxed);
}

/// The frequency an item keeps when a merge moves it: halved, so past popularity fades
/// (a window) without forgetting that the item was read.
fn kept_freq(freq: u8) -> u8 {
    freq / 2
}
