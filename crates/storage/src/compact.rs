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

use crate::cache::Shared;
use crate::segment::{state, NONE, SEALED};
use crate::ttl::N_BUCKETS;
use std::sync::atomic::Ordering;

/// Most segments one compaction reads.
const MAX_RUN: usize = 16;

/// Most segments' worth of live bytes a compaction copies per segment it frees.
const MAX_COPIED_PER_FREED: usize = 6;

/// One compaction, if a run is worth it; true when it freed a segment.
pub(crate) fn compact_once(shared: &Shared) -> bool {
    let Some((bucket, run)) = claim_best_run(shared) else {
        return false;
    };
    compact(shared, bucket, &run) > 0
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
fn claim_best_run(shared: &Shared) -> Option<(usize, Vec<u32>)> {
    let now = shared.clock.now();
    let generation = shared.current_generation(now);
    let seg_size = shared.heap.segment_size();
    let compactable = |seg: u32| {
        let h = &shared.headers[seg as usize];
        h.state.load(Ordering::Acquire) == state::SEALED
            && h.is_settled()
            && !h.is_dead(now, generation)
    };
    let mut best: Option<Candidate> = None;
    let mut lives = Vec::new();
    for bucket in 0..N_BUCKETS {
        let chain = shared.chains.lock(bucket);
        if chain.segments < 2 {
            continue;
        }
        // (segment, live bytes, compactable) in chain order.
        lives.clear();
        let mut at = chain.head;
        while at != NONE {
            let h = &shared.headers[at as usize];
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
    let chain = shared.chains.lock(best.bucket);
    let mut run = Vec::with_capacity(best.len);
    let mut at = best.first;
    let in_chain = shared.headers[at as usize]
        .ttl_bucket
        .load(Ordering::Relaxed) as usize
        == best.bucket;
    while in_chain && at != NONE && run.len() < best.len && compactable(at) {
        run.push(at);
        at = shared.headers[at as usize].next.load(Ordering::Relaxed);
    }
    if run.len() < 2 {
        return None;
    }
    for &seg in &run {
        shared.headers[seg as usize]
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
fn compact(shared: &Shared, bucket: usize, run: &[u32]) -> usize {
    let seg_size = shared.heap.segment_size();
    let first = &shared.headers[run[0] as usize];
    let (create_at, generation) = (
        first.create_at.load(Ordering::Relaxed),
        first.generation.load(Ordering::Relaxed),
    );
    let mut table = shared.table.load();
    let mut dst: Option<Destination> = None;
    let (mut opened, mut freed, mut moved) = (0usize, 0usize, 0u64);
    let mut finished = 0;
    'sources: for &src in run {
        let h = &shared.headers[src as usize];
        let (lo, hi) = (h.min_deadline(), h.max_deadline());
        if let Some(d) = &dst {
            shared.headers[d.seg as usize].include_deadlines(lo, hi);
        }
        for (offset, header, size) in shared.items_in(src) {
            if dst.as_ref().is_none_or(|d| d.used + size > seg_size) {
                if let Some(full) = dst.take() {
                    seal(shared, full);
                }
                let Some(seg) = shared.free.take_reserved() else {
                    break 'sources;
                };
                let d = &shared.headers[seg as usize];
                d.open(create_at, bucket, generation, state::MERGING);
                d.include_deadlines(lo, hi);
                shared
                    .chains
                    .lock(bucket)
                    .insert_before(&shared.headers, seg, src);
                opened += 1;
                dst = Some(Destination { seg, used: 0 });
            }
            let d = dst.as_mut().expect("a destination with room");
            shared.with_item_slot(&mut table, src, offset, &header, |chain, found, _| {
                let Some((slot, s)) = found else {
                    return; // dead
                };
                // SAFETY: `src` is sealed, settled and MERGING (claimed by this compaction),
                // so its bytes are final; [d.used, +size) in `d.seg` is this compaction's and
                // not yet published.
                unsafe {
                    shared.move_item(
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
        shared.chains.lock(bucket).unlink(&shared.headers, src);
        shared.retire_emptied(src);
        freed += 1;
        finished += 1;
    }
    if let Some(last) = dst.take() {
        seal(shared, last);
    }
    // Sources not reached (no free segment for a destination) go back as they were; the one
    // being copied keeps its unmoved items, and those already moved are dead in it.
    for &seg in &run[finished..] {
        shared.headers[seg as usize]
            .state
            .store(state::SEALED, Ordering::Release);
    }
    let c = &shared.counters;
    c.compactions.fetch_add(1, Ordering::Relaxed);
    c.compacted_items.fetch_add(moved, Ordering::Relaxed);
    freed.saturating_sub(opened)
}

/// A full (or last) destination takes no more items and becomes an ordinary sealed segment.
fn seal(shared: &Shared, d: Destination) {
    let h = &shared.headers[d.seg as usize];
    h.write_offset
        .store(d.used as u32 | SEALED, Ordering::Release);
    h.state.store(state::SEALED, Ordering::Release);
}
