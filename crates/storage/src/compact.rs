//! Compaction: freeing the room that dead copies hold, without evicting anything.
//!
//! Every overwrite and delete leaves the old copy in its segment until the segment is merged
//! or expires, and the round-robin merge may not come by for a long while: a stream with 7%
//! sets kept about 9% of a 64 MiB heap dead, one with 30% overwrites about a fifth. Before
//! the evictor drops a live item it looks for a run of consecutive sealed segments in one
//! chain whose live items fit in fewer segments than the run (the run that frees the most
//! segments for the fewest bytes copied, if it costs at most [`MAX_COPIED_PER_FREED`] segments
//! of copying per segment freed), and copies them, in order, into fresh segments.
//!
//! A destination is filled to the last byte before the next is opened; each source is freed
//! as soon as its last item moved, so the next destination can be the segment just freed (the
//! evictor holds only one spare). Destinations take the first source's place in the chain and
//! its creation time, so the chain stays sorted by age; they stay MERGING (no one else merges,
//! expires or evicts them) until full. If no segment is free for the next destination, the
//! compaction stops there: items already moved were relinked, and the source being copied
//! goes back to SEALED with those items dead in it.

use crate::engine_state::EngineState;
use crate::segment::{state, NONE, SEALED};
use crate::ttl::N_BUCKETS;
use std::sync::atomic::Ordering;

/// Most segments one compaction reads.
const MAX_RUN: usize = 16;

/// Most segments' worth of live bytes a compaction copies per segment it frees.
const MAX_COPIED_PER_FREED: usize = 6;

/// One compaction, if a run is worth it; true when it freed a segment.
pub(crate) fn compact_once(engine: &EngineState) -> bool {
    let Some((bucket, run)) = claim_best_run(engine) else {
        return false;
    };
    compact(engine, bucket, &run) > 0
}

/// A run the scan found: its chain, first segment, length and live bytes.
struct Candidate {
    bucket: usize,
    first: u32,
    len: usize,
    live: usize,
}

impl Candidate {
    fn freed(&self, seg_size: usize) -> usize {
        self.len - self.live.div_ceil(seg_size).max(1)
    }
}

/// Finds the best run in the heap and claims it (MERGING) under its chain's lock.
fn claim_best_run(engine: &EngineState) -> Option<(usize, Vec<u32>)> {
    let now = engine.clock().now();
    let generation = engine.current_generation(now);
    let seg_size = engine.heap().segment_size();
    let compactable = |seg: u32| {
        let h = engine.segment(seg);
        h.state.load(Ordering::Acquire) == state::SEALED
            && h.is_settled()
            && !h.is_dead(now, generation)
    };
    let mut best: Option<Candidate> = None;
    let mut lives = Vec::new();
    for bucket in 0..N_BUCKETS {
        let chain = engine.chains().lock(bucket);
        if chain.segments < 2 {
            continue;
        }
        // (segment, live bytes, compactable) in chain order.
        lives.clear();
        let mut at = chain.head;
        while at != NONE {
            let h = engine.segment(at);
            lives.push((
                at,
                h.live_bytes.load(Ordering::Relaxed) as usize,
                compactable(at),
            ));
            at = h.next.load(Ordering::Relaxed);
        }
        drop(chain);
        for start in 0..lives.len() {
            let mut live = 0;
            for (len, &(_, l, ok)) in lives[start..].iter().take(MAX_RUN).enumerate() {
                if !ok {
                    break;
                }
                live += l;
                let c = Candidate {
                    bucket,
                    first: lives[start].0,
                    len: len + 1,
                    live,
                };
                let freed = c.freed(seg_size);
                if freed == 0 || live > MAX_COPIED_PER_FREED * freed * seg_size {
                    continue;
                }
                let better = best.as_ref().is_none_or(|b| {
                    let bf = b.freed(seg_size);
                    freed > bf || (freed == bf && live < b.live)
                });
                if better {
                    best = Some(c);
                }
            }
        }
    }
    let best = best?;
    // Claim it again under the lock: the chain may have changed since the scan.
    let chain = engine.chains().lock(best.bucket);
    let mut run = Vec::with_capacity(best.len);
    let mut at = best.first;
    let in_chain = engine.segment(at).ttl_bucket.load(Ordering::Relaxed) as usize == best.bucket;
    while in_chain && at != NONE && run.len() < best.len && compactable(at) {
        run.push(at);
        at = engine.segment(at).next.load(Ordering::Relaxed);
    }
    if run.len() < 2 {
        return None;
    }
    for &seg in &run {
        engine
            .segment(seg)
            .state
            .store(state::MERGING, Ordering::Release);
    }
    drop(chain);
    Some((best.bucket, run))
}

/// The destination being filled.
struct Destination {
    seg: u32,
    used: usize,
}

/// Copies every live item of `run` (claimed MERGING, consecutive in `bucket`'s chain) into
/// as few fresh segments as they need; returns the net number of segments freed.
fn compact(engine: &EngineState, bucket: usize, run: &[u32]) -> usize {
    let seg_size = engine.heap().segment_size();
    let first = engine.segment(run[0]);
    let (create_at, generation) = (
        first.create_at.load(Ordering::Relaxed),
        first.generation.load(Ordering::Relaxed),
    );
    let mut table = engine.table().load();
    let mut dst: Option<Destination> = None;
    let (mut opened, mut freed, mut moved) = (0usize, 0usize, 0u64);
    let mut finished = 0;
    'sources: for &src in run {
        let h = engine.segment(src);
        let (lo, hi) = (h.min_deadline(), h.max_deadline());
        if let Some(d) = &dst {
            engine.segment(d.seg).include_deadlines(lo, hi);
        }
        // SAFETY: `src` is sealed, settled and MERGING (claimed by this compaction): its
        // bytes below the write offset are final and it cannot be reused until retired below.
        let items = unsafe { engine.items_in(src) };
        for (offset, header, size) in items {
            if dst.as_ref().is_none_or(|d| d.used + size > seg_size) {
                if let Some(full) = dst.take() {
                    seal(engine, full);
                }
                let Some(seg) = engine.free_pool().take_reserved() else {
                    break 'sources;
                };
                let d = engine.segment(seg);
                d.open(create_at, bucket, generation, state::MERGING);
                d.include_deadlines(lo, hi);
                engine
                    .chains()
                    .lock(bucket)
                    .insert_before(engine.segments(), seg, src);
                opened += 1;
                dst = Some(Destination { seg, used: 0 });
            }
            let d = dst.as_mut().expect("a destination with room");
            // SAFETY: as for `items_in` above: the item's bytes are final.
            let hash = unsafe { engine.item_hash(src, offset, &header) };
            engine.with_item_slot(&mut table, src, offset, hash, |chain, found| {
                let Some((slot, s)) = found else {
                    return; // dead
                };
                // SAFETY: `src` is sealed, settled and MERGING (claimed by this compaction),
                // so its bytes are final; [d.used, +size) in `d.seg` is this compaction's and
                // not yet published.
                unsafe {
                    engine.move_item(
                        chain,
                        slot,
                        s,
                        (src, offset),
                        (d.seg, d.used),
                        &header,
                        s.freq(),
                    );
                }
                d.used += size;
                moved += 1;
            });
        }
        // Every live item of `src` moved: free it now, so it can be the next destination.
        engine.chains().lock(bucket).unlink(engine.segments(), src);
        engine.retire_emptied(src);
        freed += 1;
        finished += 1;
    }
    if let Some(last) = dst.take() {
        seal(engine, last);
    }
    // Sources not reached (no free segment for a destination) go back as they were; the one
    // being copied keeps its unmoved items, and those already moved are dead in it.
    for &seg in &run[finished..] {
        engine
            .segment(seg)
            .state
            .store(state::SEALED, Ordering::Release);
    }
    let c = &engine.counters();
    c.compactions.fetch_add(1, Ordering::Relaxed);
    c.compacted_items.fetch_add(moved, Ordering::Relaxed);
    freed.saturating_sub(opened)
}

/// A full (or last) destination takes no more items and becomes an ordinary sealed segment.
fn seal(engine: &EngineState, d: Destination) {
    let h = engine.segment(d.seg);
    h.write_offset
        .store(d.used as u32 | SEALED, Ordering::Release);
    h.state.store(state::SEALED, Ordering::Release);
}
