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
//! items worth keeping into one fresh segment; free the sources. A merge takes sources until
//! their live bytes would fill N segments (at least two, at most [`MAX_MERGE`]: mostly dead
//! sources are compacted together), ranks all their live items by worth (frequency, the ASFC
//! counter in the hash slot, plus one, per byte) and keeps the best that fill one segment.
//!
//! The ranking is across the sources, not per source. Pelikan, and this engine before, made
//! each source give up what exceeded its 1/N share of the destination: a segment that an
//! earlier merge had filled with proven items lost as much as one of never-read new items.
//! Ranked together, proven items stay and new items that were never read go first, the
//! probation that S3-FIFO (Yang et al., SOSP'23) gives new objects. Dropped keys are
//! remembered as ghosts (`ghost.rs`) so that one that comes back is not on probation again.
//! Merges pass over segments whose items are being read (`second_chance`), so that the
//! window a merge ranks is not all proven items while unread ones wait elsewhere. With this,
//! N = 2 measured best (a smaller N evicts in smaller steps). On the look-aside workload of
//! BENCHMARKS.md at 64 MiB with 1 MiB segments: per-source quotas 0.2768, ranked 0.2688,
//! plus ghosts 0.2617, worth plus one 0.2578, N = 2 0.2555, second chance 0.2499 (pelikan
//! 0.2833).
//!
//! Kept items' frequencies are halved (a window, so past popularity fades; keeping three
//! quarters measured the same, 0.2548 to 0.2556, and no decay 0.2549, but an item read once
//! long ago must not outrank new items forever). The merged segment takes the first source's
//! place and creation time, so the chain stays sorted by age.
//!
//! **FIFO**: free the oldest segment whole. It is also the fallback when no bucket has two
//! mergeable segments (tiny heaps, or every segment still being written).
//!
//! Only one eviction runs at a time (an eviction frees megabytes; callers that queued behind
//! it usually find a free segment when they get the lock).

use crate::chains::Chain;
use crate::config::EvictionPolicy;
use crate::engine_state::EngineState;
use crate::evictor_state::EvictorState;
use crate::segment::{state, NONE, SEALED};
use crate::ttl::N_BUCKETS;
use std::sync::atomic::Ordering;

/// Nothing could be evicted.
#[derive(Debug)]
pub(crate) struct NoVictim;

/// Frees at least one segment, or fails when nothing can be freed.
pub(crate) fn make_room(engine: &EngineState) -> Result<(), NoVictim> {
    let mut st = engine.lock_evictor();
    if engine.free_pool().len() > 1 {
        return Ok(()); // another thread made room while we waited
    }
    // Expired segments are free for the taking: reclaim them before evicting live data.
    let now = engine.clock().now();
    if st.last_expire_pass != Some(now) {
        st.last_expire_pass = Some(now);
        if crate::expire::expire_pass(engine) > 0 && engine.free_pool().len() > 1 {
            return Ok(());
        }
    }
    match engine.config().eviction {
        EvictionPolicy::None => Err(NoVictim),
        EvictionPolicy::Fifo => evict_oldest(engine),
        EvictionPolicy::Merge => {
            if crate::compact::compact_once(engine) || merge_once(engine, &mut st) {
                Ok(())
            } else {
                evict_oldest(engine)
            }
        }
    }
}

/// Frees the oldest segment that is not already being merged or retired.
fn evict_oldest(engine: &EngineState) -> Result<(), NoVictim> {
    loop {
        let mut best: Option<(u32, usize, u32)> = None;
        for b in 0..N_BUCKETS {
            let chain = engine.chains().lock(b);
            let mut at = chain.head;
            while at != NONE {
                let h = engine.segment(at);
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
        let Some((victim, bucket, created)) = best else {
            return Err(NoVictim);
        };
        let claimed = {
            let mut chain = engine.chains().lock(bucket);
            let h = engine.segment(victim);
            let st = h.state.load(Ordering::Acquire);
            let ok = (st == state::SEALED || st == state::ACTIVE)
                && h.state
                    .compare_exchange(st, state::RETIRING, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok();
            if ok {
                chain.unlink(engine.segments(), victim);
            }
            ok
        };
        if claimed {
            evict_whole(engine, victim, created);
            return Ok(());
        }
    }
}

/// Under the bucket's chain lock: unlinks the merge sources `consumed` and returns the
/// others, `rest`, to SEALED.
fn unlink_consumed(engine: &EngineState, chain: &mut Chain, consumed: &[u32], rest: &[u32]) {
    for &seg in consumed {
        chain.unlink(engine.segments(), seg);
    }
    for &seg in rest {
        engine
            .segment(seg)
            .state
            .store(state::SEALED, Ordering::Release);
    }
}

/// Retires `seg` (claimed and unlinked), created at `created`, counting its items and
/// itself as evicted.
fn evict_whole(engine: &EngineState, seg: u32, created: u32) {
    let live = engine.segment(seg).live_items.load(Ordering::Relaxed) as usize;
    let dropped = crate::demote::retire_demoting(engine, seg);
    engine
        .counters()
        .demoted_items
        .fetch_add(live.saturating_sub(dropped) as u64, Ordering::Relaxed);
    engine
        .counters()
        .evicted_items
        .fetch_add(dropped as u64, Ordering::Relaxed);
    engine
        .counters()
        .evicted_segment(created, engine.clock().now());
}

/// Most segments one merge may consume (pelikan's `max`): a merge goes on to the next
/// source while its sources' live bytes would not fill N segments, so sources that are
/// mostly dead are compacted together rather than each costing live items.
pub(crate) const MAX_MERGE: usize = 8;

/// One merge eviction; false when no bucket has two mergeable segments in a row.
fn merge_once(engine: &EngineState, st: &mut EvictorState) -> bool {
    let now = engine.clock().now();
    let generation = engine.current_generation(now);
    // Merge pressure in proportion to each bucket's size (smooth weighted round-robin), so a
    // small TTL class is not squeezed as hard as a large one.
    let weights: Vec<i64> = (0..N_BUCKETS)
        .map(|b| i64::from(engine.chains().lock(b).segments))
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
            let mut chain = engine.chains().lock(bucket);
            if chain.segments < 2 {
                continue;
            }
            for start in [chain.merge_cursor, chain.head] {
                run.clear();
                let mut at = if start == NONE { chain.head } else { start };
                while at != NONE && run.len() < MAX_MERGE {
                    let h = engine.segment(at);
                    let mergeable = h.state.load(Ordering::Acquire) == state::SEALED
                        && h.is_settled()
                        && !h.is_dead(now, generation)
                        && !second_chance(h);
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
                engine
                    .segment(seg)
                    .state
                    .store(state::MERGING, Ordering::Release);
            }
        }
        st.credit[bucket] -= total;
        merge(engine, bucket, &run);
        return true;
    }
    false
}

/// Merges a prefix of `run` (consecutive segments of `bucket`, claimed MERGING) into one new
/// segment: the prefix whose live bytes would fill N segments (at least two, so a merge
/// always frees a segment), ranked together, the most valuable items that fit one segment
/// kept. Sources whose live items all fit lose nothing: a merge over mostly dead segments is
/// a compaction. Sources not consumed go back to SEALED.
fn merge(engine: &EngineState, bucket: usize, run: &[u32]) {
    let seg_size = engine.heap().segment_size();
    let Some(dst) = engine.free_pool().take_reserved() else {
        // No destination: fall back to freeing the first two sources whole.
        let (whole, rest) = run.split_at(2);
        let mut chain = engine.chains().lock(bucket);
        unlink_consumed(engine, &mut chain, whole, rest);
        drop(chain);
        for &seg in whole {
            let created = engine.segment(seg).create_at.load(Ordering::Relaxed);
            evict_whole(engine, seg, created);
        }
        return;
    };
    let first = engine.segment(run[0]);
    let first_created = first.create_at.load(Ordering::Relaxed);
    let d = engine.segment(dst);
    d.open(
        first_created,
        bucket,
        first.generation.load(Ordering::Relaxed),
        state::MERGING,
    );

    let n = engine.config().merge_segments;
    // How many sources: enough that their live bytes would fill N segments (with full
    // sources, N, whose tails are never quite full, hence 15/16; with mostly dead ones,
    // more, up to the run), and never fewer than two.
    let mut consumed = 0;
    let mut live_total = 0usize;
    for &src in run {
        if consumed >= 2 && live_total >= n * seg_size * 15 / 16 {
            break;
        }
        consumed += 1;
        live_total += engine.segment(src).live_bytes.load(Ordering::Relaxed) as usize;
    }
    let sources = &run[..consumed];
    // Pass 1: how many live bytes of each worth class the sources hold (a histogram, so a
    // merge needs no memory per item, whatever the item count).
    let mut table = engine.table().load();
    let mut bytes_of_class = [0usize; WORTH_CLASSES];
    for &src in sources {
        let h = engine.segment(src);
        d.include_deadlines(h.min_deadline(), h.max_deadline());
        // SAFETY: every source is sealed, settled and MERGING (claimed by this merge): its
        // bytes below the write offset are final and it is not reused before it is retired.
        let items = unsafe { engine.items_in(src) };
        for (offset, header, size) in items {
            // SAFETY: as for `items_in` above.
            let hash = unsafe { engine.item_hash(src, offset, &header) };
            let freq = engine.with_item_slot(&mut table, src, offset, hash, |_, found| {
                found.map(|(_, s)| s.freq())
            });
            if let Some(freq) = freq {
                bytes_of_class[worth_class(freq, size)] += size;
            }
        }
    }
    // The most valuable classes that fill one segment stay; the cutoff class keeps what fits
    // of it, in chain order.
    let mut cutoff = 0;
    let mut cutoff_room = 0;
    let mut above = 0usize;
    for class in (0..WORTH_CLASSES).rev() {
        if above + bytes_of_class[class] > seg_size {
            cutoff = class;
            cutoff_room = seg_size - above;
            break;
        }
        above += bytes_of_class[class];
    }
    // Pass 2: move the kept, drop the rest (items that died since pass 1 are skipped).
    let mut dst_used = 0usize;
    let mut evicted = 0u64;
    let mut retained = 0u64;
    let mut unfetched = 0u64;
    let mut demoted = 0u64;
    let now = engine.clock().now();
    for &src in sources {
        let h = engine.segment(src);
        // SAFETY: as in pass 1: the sources are still MERGING, their bytes final.
        let items = unsafe { engine.items_in(src) };
        for (offset, header, size) in items {
            // SAFETY: as for `items_in` above.
            let hash = unsafe { engine.item_hash(src, offset, &header) };
            engine.with_item_slot(&mut table, src, offset, hash, |chain, found| {
                let Some((slot, s)) = found else {
                    return; // dead: overwritten or deleted
                };
                let class = worth_class(s.freq(), size);
                let keep = class > cutoff || (class == cutoff && size <= cutoff_room);
                if keep && class == cutoff {
                    cutoff_room -= size;
                }
                if keep && dst_used + size <= seg_size {
                    // SAFETY: `src` is sealed, settled and MERGING (claimed by this merge),
                    // so its bytes are final; [dst_used, +size) in `dst` is this merge's and
                    // not yet published.
                    unsafe {
                        engine.move_item(
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
                    retained += 1;
                } else {
                    // SAFETY: as for the move above: the source's bytes are final.
                    if unsafe {
                        crate::demote::to_flash(
                            engine, chain, slot, s, src, offset, &header, hash, now,
                        )
                    } {
                        demoted += 1;
                        return;
                    }
                    chain.remove(slot);
                    chain.bump_cas(engine.cas_sequence(), 0);
                    h.remove_live(size);
                    engine.ghosts().remember(hash, s.freq());
                    evicted += 1;
                    unfetched += u64::from(s.freq() == 0);
                }
            });
        }
    }
    let (done, rest) = run.split_at(consumed);
    d.write_offset
        .store(dst_used as u32 | SEALED, Ordering::Release);
    {
        let mut chain = engine.chains().lock(bucket);
        chain.insert_before(engine.segments(), dst, run[0]);
        unlink_consumed(engine, &mut chain, done, rest);
        // The next merge in this bucket starts after what this one consumed.
        chain.merge_cursor = rest
            .first()
            .copied()
            .unwrap_or_else(|| engine.segment(dst).next.load(Ordering::Relaxed));
        d.state.store(state::SEALED, Ordering::Release);
    }
    for &seg in done {
        // Every live item was moved or dropped above; only readers need draining.
        engine.retire_emptied(seg);
    }
    let c = &engine.counters();
    c.merges.fetch_add(1, Ordering::Relaxed);
    c.evicted_segments
        .fetch_add(done.len() as u64, Ordering::Relaxed);
    // The merged run's first segment is its oldest (a chain is in creation order).
    c.last_evicted_age.store(
        u64::from(engine.clock().now().saturating_sub(first_created)),
        Ordering::Relaxed,
    );
    c.evicted_unfetched.fetch_add(unfetched, Ordering::Relaxed);
    c.evicted_items.fetch_add(evicted, Ordering::Relaxed);
    c.demoted_items.fetch_add(demoted, Ordering::Relaxed);
    c.merge_retained_items
        .fetch_add(retained, Ordering::Relaxed);
}

/// Whether a merge passes over this segment this time: it does when reads of its items since
/// it was opened or last passed over number at least half its live items (and forgets them,
/// so the segment is not passed over again unless read again: CLOCK's second chance, per
/// segment). Without it a merge window of segments full of items that are read, say an
/// earlier merge's output, had to give up all but one segment of them while segments of
/// items never read waited elsewhere in the chain (`tests/it/eviction_smoke.rs`).
fn second_chance(h: &crate::segment::SegmentHeader) -> bool {
    let reads = h.reads.load(Ordering::Relaxed);
    let hot = reads >= (h.live_items.load(Ordering::Relaxed) / 2).max(1);
    if hot {
        h.reads.store(0, Ordering::Relaxed);
    }
    hot
}

/// Worth classes: eighths of an octave of (frequency + 1) per byte, from 2^-31 (a one-GiB
/// item never read) to 2^7 (a one-byte item read every second for two minutes).
const WORTH_CLASSES: usize = 38 * 8;

/// The class of what an item is worth keeping: its reads, plus one for the write that
/// brought it, per byte it takes. Per byte, because a small item costs less room for the hits
/// it brings (the miss ratio counts objects); the plus one ranks unread items by size too, so
/// that a small new item outlasts a large one. (On the look-aside workload of BENCHMARKS.md at
/// 64 MiB: frequency alone missed 0.2617, plus one 0.2578.)
fn worth_class(freq: u8, size: usize) -> usize {
    let worth = (f64::from(freq) + 1.0) / size.max(1) as f64;
    let class = (worth.log2() * 8.0).floor() as i64 + 31 * 8;
    class.clamp(0, WORTH_CLASSES as i64 - 1) as usize
}

/// The frequency an item keeps when a merge moves it: halved, so past popularity fades
/// (a window) without forgetting that the item was read.
fn kept_freq(freq: u8) -> u8 {
    (freq / 2).max(freq.min(1))
}
