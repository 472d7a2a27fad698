//! The append path every write takes: reserve room in an active segment of the item's TTL
//! bucket (shared with the other handles of this handle's shard, see `active.rs`), opening
//! one (and evicting if needed) when none fits, then write the item's bytes, unpublished.
//! Publishing under the key's chain lock is `store.rs`'s.

use super::status::StoreError;
use super::Handle;
use crate::active::{self, Active};
use crate::clock::NEVER;
use crate::counters::{ContentionCounters, HandleCounters};
use crate::item::{self, Extras};
use crate::segment::{state, SEALED};
use crate::ttl;
use std::sync::atomic::Ordering;

/// A reserved, written, not yet published item. Holds a writer reference on its segment.
pub(crate) struct Written {
    pub seg: u32,
    pub offset: usize,
    pub len: usize,
}

/// What [`Handle::try_reserve`] found.
enum Reservation {
    /// Room reserved at this offset.
    At(usize),
    /// The segment is fine but the item's deadline does not fit its range.
    Mismatch,
    /// Full, sealed, expired, flushed or no longer ours: stop using it.
    Unusable,
}

impl Handle {
    /// Appends an item to this handle's active segment for its deadline and returns it
    /// written but unpublished, holding a writer reference. `deadline` must be in the future.
    pub(crate) fn append(
        &mut self,
        key: &[u8],
        value: &[&[u8]],
        flags: u32,
        deadline: u32,
        extras: Extras,
    ) -> Result<Written, StoreError> {
        let value_len: usize = value.iter().map(|v| v.len()).sum();
        if value_len > item::MAX_VALUE_LEN {
            return Err(StoreError::TooLarge);
        }
        let len = item::encoded_len(key.len(), value_len, flags, &extras);
        let size = self.engine.aligned(len);
        if size > self.engine.heap().segment_size() {
            return Err(StoreError::TooLarge);
        }
        let now = self.engine.clock().now();
        let ttl = (deadline != NEVER).then(|| deadline.saturating_sub(now));
        let bucket = ttl::bucket_for(ttl);
        let (seg, offset) = self.reserve(bucket, size, deadline, now)?;
        let engine = &*self.engine;
        let mut prefix = [0u8; item::MAX_PREFIX + item::MAX_KEY_LEN];
        let prefix_len = item::prefix_len(key.len(), flags, &extras);
        item::encode_prefix(&mut prefix[..prefix_len], key, value_len, flags, &extras);
        let mut at = offset;
        // SAFETY: `reserve` gave this handle [offset, offset + size) exclusively; nothing is
        // published there until the caller installs the slot.
        unsafe {
            engine.heap().write(seg, at, &prefix[..prefix_len]);
            at += prefix_len;
            for part in value {
                engine.heap().write(seg, at, part);
                at += part.len();
            }
        }
        HandleCounters::bump(&self.counters.bytes_written, size as u64);
        Ok(Written {
            seg,
            offset,
            len: size,
        })
    }

    /// Reserves `size` bytes in one of the active segments of `bucket` (shared with the
    /// other handles of this handle's shard, see `active.rs`), opening a new one when none is
    /// usable and fits the deadline (sealing the oldest if all places are taken).
    fn reserve(
        &mut self,
        bucket: usize,
        size: usize,
        deadline: u32,
        now: u32,
    ) -> Result<(u32, usize), StoreError> {
        let tolerance = ttl::tolerance_with(bucket, self.engine.config().expiry_precision_shift);
        let generation = self.engine.current_generation(now);
        let want = ReserveRequest {
            size,
            deadline,
            tolerance,
            now,
            generation,
        };
        loop {
            if let ActiveSearch::Room(at) = self.reserve_in_active(bucket, &want) {
                return Ok(at);
            }
            let engine = &*self.engine;
            let _opening = engine.active().open_lock(self.shard, bucket, || {
                let c = &engine.counters().contention;
                ContentionCounters::add(&c.open_lock_waits, 1);
            });
            // Another writer may have opened one while this one waited for the lock.
            let place = match self.reserve_in_active(bucket, &want) {
                ActiveSearch::Room(at) => return Ok(at),
                ActiveSearch::Empty(i) => i,
                ActiveSearch::Oldest(i, active) => {
                    self.seal_active(bucket, i, active);
                    i
                }
            };
            self.open_segment(bucket, place, now, generation)?;
        }
    }

    /// Tries every active segment of `bucket`, dropping the unusable ones.
    fn reserve_in_active(&self, bucket: usize, want: &ReserveRequest) -> ActiveSearch {
        let active = &self.engine.active();
        let mut empty = None;
        let mut oldest: Option<(usize, Active, u32)> = None;
        for i in 0..active::PER_BUCKET {
            let Some(a) = active.get(self.shard, bucket, i) else {
                empty.get_or_insert(i);
                continue;
            };
            match self.try_reserve(a, want) {
                Reservation::At(offset) => return ActiveSearch::Room((a.seg, offset)),
                Reservation::Mismatch => {
                    let created = self.engine.segment(a.seg).create_at.load(Ordering::Relaxed);
                    if oldest.is_none_or(|(_, _, c)| created < c) {
                        oldest = Some((i, a, created));
                    }
                }
                Reservation::Unusable => {
                    self.seal_active(bucket, i, a);
                    empty.get_or_insert(i);
                }
            }
        }
        match (empty, oldest) {
            (Some(i), _) => ActiveSearch::Empty(i),
            (None, Some((i, a, _))) => ActiveSearch::Oldest(i, a),
            (None, None) => unreachable!("every place is either empty or holds a segment"),
        }
    }

    /// Reserves room in `active` if it is still live and fits the item (its deadline within
    /// the segment's tolerance, which then includes it).
    fn try_reserve(&self, active: Active, want: &ReserveRequest) -> Reservation {
        let h = &self.engine.segment(active.seg);
        if h.epoch.load(Ordering::Acquire) != active.epoch
            || !self.engine.acquire(active.seg, self.stripe)
        {
            return Reservation::Unusable;
        }
        if h.epoch.load(Ordering::Acquire) != active.epoch
            || h.state.load(Ordering::Acquire) != state::ACTIVE
            || h.is_dead(want.now, want.generation)
        {
            self.engine.release(active.seg, self.stripe);
            return Reservation::Unusable;
        }
        if h.used() + want.size > self.engine.heap().segment_size() {
            self.engine.release(active.seg, self.stripe);
            return Reservation::Unusable;
        }
        // Before reserving, so that an item is never in a segment whose range excludes it.
        if !h.try_include_deadline(want.deadline, want.tolerance) {
            self.engine.release(active.seg, self.stripe);
            return Reservation::Mismatch;
        }
        // Counted before reserving (see `SegmentHeader::writers`): whoever sees the SEALED
        // bit and no writer knows no reservation is outstanding.
        h.writers.fetch_add(1, Ordering::SeqCst);
        crate::sync::seq_cst_handshake();
        let mut cur = h.write_offset.load(Ordering::SeqCst);
        while cur & SEALED == 0 && cur as usize + want.size <= self.engine.heap().segment_size() {
            match h.write_offset.compare_exchange_weak(
                cur,
                cur + want.size as u32,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => return Reservation::At(cur as usize),
                Err(actual) => {
                    let c = &self.engine.counters().contention;
                    ContentionCounters::add(&c.reserve_retries, 1);
                    cur = actual;
                }
            }
        }
        h.writers.fetch_sub(1, Ordering::Release);
        self.engine.release(active.seg, self.stripe);
        Reservation::Unusable
    }

    /// Stops writing to an active segment of `bucket` (it stays in its chain), if it is
    /// still in place `i`.
    fn seal_active(&self, bucket: usize, i: usize, active: Active) {
        if !self.engine.active().remove(self.shard, bucket, i, active) {
            return; // another writer replaced it already
        }
        let h = &self.engine.segment(active.seg);
        if h.epoch.load(Ordering::Acquire) == active.epoch {
            // The bit first: a merge takes SEALED segments and must find no new reservations.
            h.seal();
            let _ = h.state.compare_exchange(
                state::ACTIVE,
                state::SEALED,
                Ordering::AcqRel,
                Ordering::Acquire,
            );
        }
    }

    /// Opens a free segment (evicting if there is none) into the empty place `i`; the caller
    /// holds the place's open lock.
    fn open_segment(
        &self,
        bucket: usize,
        i: usize,
        now: u32,
        generation: u32,
    ) -> Result<(), StoreError> {
        let engine = &*self.engine;
        let seg = loop {
            if let Some(seg) = engine.free_pool().take() {
                break seg;
            }
            if crate::evict::make_room(engine).is_err() {
                engine
                    .counters()
                    .out_of_memory
                    .fetch_add(1, Ordering::Relaxed);
                return Err(StoreError::OutOfMemory);
            }
        };
        engine.count_window().opened(now);
        let h = engine.segment(seg);
        h.open(now, bucket, generation, state::ACTIVE);
        engine
            .chains()
            .lock(bucket)
            .push_back(engine.segments(), seg);
        engine.active().install(
            self.shard,
            bucket,
            i,
            Active {
                seg,
                epoch: h.epoch.load(Ordering::Acquire),
            },
        );
        Ok(())
    }
}

/// What an append needs of a segment.
struct ReserveRequest {
    size: usize,
    deadline: u32,
    tolerance: u32,
    now: u32,
    generation: u32,
}

/// What [`Handle::reserve_in_active`] found.
enum ActiveSearch {
    /// Room reserved: (segment, offset).
    Room((u32, usize)),
    /// No room; place `.0` is empty.
    Empty(usize),
    /// No room and no empty place; this is the oldest segment whose range did not fit.
    Oldest(usize, Active),
}
