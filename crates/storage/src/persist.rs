//! Warm restart (Facebook §6.4): the heap lives in a shared file mapping the caller provides
//! (on tmpfs, so it survives the process, not a reboot); on a graceful stop the engine
//! describes everything *outside* the heap — segment headers, chains, free pool, hash
//! table, clock, flush generation — as a snapshot the caller stores next to the file. A
//! new process given the same mapping and that snapshot serves the same items, values,
//! flags, CAS and TTLs, without refilling.
//!
//! The snapshot is self-checking: a magic, a format number, the layout of what the heap
//! holds (`layout()`: the item header, its marks, the TTL buckets, the hash slot's fields),
//! the heap's geometry and an xxh3 checksum over the rest. Anything that does not match —
//! another format or layout, another heap size or segment size, a torn or truncated file —
//! is refused, and the caller starts empty. The writer's version is recorded but not
//! compared: a new release whose format and layout are the same (most releases) comes back
//! warm, which is what a rolling upgrade needs; a change to what the heap's bytes mean
//! must bump `FORMAT` (or changes `layout()` by itself). The caller must delete the snapshot as soon as it
//! has read it: the heap changes from then on, so after a crash the old snapshot would
//! describe bytes that are no longer there; no snapshot means an empty start.
//!
//! With a flash tier, the snapshot first has its writes finished and synced
//! (`FlashTier::quiesce`) and then keeps its image (every place's lap and state, the reclaim
//! order) with the flash slots in the table; a cache resumed with the same flash (as many
//! segments) serves them again. Otherwise, or when the writes could not be finished, the
//! flash slots are dropped and RAM alone comes back.
//!
//! I/O stays with the caller (the server): this module turns state into bytes and back.

use crate::cache::Cache;
use crate::chains::Chains;
use crate::config::{Config, ConfigError, Geometry};
use crate::engine_state::{EngineState, RestartWords, RestoredParts};
use crate::hashtable::{Table, TableImage};
use crate::heap::Heap;
use crate::segment::{state, SegmentHeader};
use crate::ttl::N_BUCKETS;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

const MAGIC: &[u8; 8] = b"MFWARM\x00\x01";
/// 4: the hash chains' info word `[cas:38][last access:16][item count:8][moved:1][lock:1]`
/// holding the low bits of each chain's CAS unique, and the word after the flush words the
/// CAS sequence's mark (`hashtable/cas.rs`); 3 had `[cas:32][last access:16][item count:8]
/// [lock byte:8]` with a per-chain write counter, and a lease-token counter there. A format-3
/// snapshot is still read: its chains' counters become their uniques.
const FORMAT: u32 = 4;
/// The previous format, whose snapshots are converted on restore.
const FORMAT_3: u32 = 3;

/// What the bytes in the heap and the snapshot mean, as a number: a release that changes
/// one of these constants cannot read an older heap, whatever `FORMAT` says.
fn layout() -> u64 {
    use crate::hashtable::slot;
    let described = format!(
        "item header {} marks {:#x} explicit cas {:#x} max key {} max value {} prefix {}; \
         ttl buckets {} never {} precision {}; slot freq {:#x} counted {:#x} segments {} offsets {}",
        crate::item::HEADER_LEN,
        crate::item::MARKS,
        crate::item::EXPLICIT_CAS,
        crate::item::MAX_KEY_LEN,
        crate::item::MAX_VALUE_LEN,
        crate::item::MAX_PREFIX,
        N_BUCKETS,
        crate::ttl::NEVER_BUCKET,
        crate::ttl::DEFAULT_PRECISION_SHIFT,
        slot::MAX_FREQ,
        slot::COUNTED,
        slot::MAX_SEGMENTS,
        slot::MAX_OFFSET_UNITS,
    );
    xxhash_rust::xxh3::xxh3_64(described.as_bytes())
}

/// Why a snapshot cannot be taken or used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SnapshotError {
    /// The cache's heap is not a file mapping (nothing would survive).
    #[error("the heap is not in a memory file")]
    NotMapped,
    /// Handles are still live: the state may change under the snapshot.
    #[error("{0} handle(s) still in use; stop every worker first")]
    InUse(usize),
    /// A segment is mid-merge or mid-retirement (an eviction was running).
    #[error("segment {0} is being evicted")]
    Busy(u32),
    /// The bytes are not a snapshot of this version and geometry.
    #[error("unusable snapshot: {0}")]
    Invalid(String),
    /// The configuration itself is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
}

/// What a restored cache holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Restored {
    /// Items the hash table points to.
    pub items: u64,
    /// Segments holding them.
    pub segments_in_use: usize,
    /// Time spent rebuilding (checks, table, headers).
    pub elapsed: Duration,
}

struct Writer(Vec<u8>);

impl Writer {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn bytes(&mut self, b: &[u8]) {
        self.u64(b.len() as u64);
        self.0.extend_from_slice(b);
    }
}

struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], SnapshotError> {
        let end = self.at.checked_add(n).filter(|e| *e <= self.buf.len());
        let end = end.ok_or_else(|| SnapshotError::Invalid("truncated".into()))?;
        let s = &self.buf[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, SnapshotError> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, SnapshotError> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    fn u64(&mut self) -> Result<u64, SnapshotError> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
    fn bytes(&mut self) -> Result<&[u8], SnapshotError> {
        let n = usize::try_from(self.u64()?).map_err(|_| invalid("length"))?;
        self.take(n)
    }
}

fn invalid(what: &str) -> SnapshotError {
    SnapshotError::Invalid(what.to_string())
}

fn expect_eq<T: PartialEq + std::fmt::Debug>(
    what: &str,
    saved: T,
    now: T,
) -> Result<(), SnapshotError> {
    if saved == now {
        Ok(())
    } else {
        Err(SnapshotError::Invalid(format!(
            "{what} was {saved:?}, is {now:?}"
        )))
    }
}

/// Every segment must be in exactly one place: one TTL bucket's chain (linked both ways, as
/// long as the chain says, and SEALED) or the free list (FREE). Anything else would let a
/// writer reuse a segment that still holds items.
fn check_membership(
    headers: &[SegmentHeader],
    chains: &Chains,
    free: &[u32],
) -> Result<(), SnapshotError> {
    use crate::segment::NONE;
    let n = headers.len();
    let mut seen = vec![false; n];
    let link = |id: u32| id == NONE || (id as usize) < n;
    for b in 0..N_BUCKETS {
        let c = chains.lock(b);
        if !link(c.head) || !link(c.tail) || !link(c.merge_cursor) {
            return Err(invalid("chain ends"));
        }
        let (mut at, mut prev, mut count) = (c.head, NONE, 0u32);
        while at != NONE {
            let h = &headers[at as usize];
            if seen[at as usize]
                || h.prev.load(Ordering::Relaxed) != prev
                || h.state.load(Ordering::Relaxed) != state::SEALED
                || h.ttl_bucket.load(Ordering::Relaxed) as usize != b
            {
                return Err(invalid("segment chains"));
            }
            seen[at as usize] = true;
            count += 1;
            prev = at;
            at = h.next.load(Ordering::Relaxed);
        }
        if prev != c.tail || count != c.segments {
            return Err(invalid("segment chain ends or length"));
        }
    }
    for &id in free {
        let h = &headers[id as usize];
        if seen[id as usize] || h.state.load(Ordering::Relaxed) != state::FREE {
            return Err(invalid("free list"));
        }
        seen[id as usize] = true;
    }
    if seen.iter().any(|s| !s) {
        return Err(invalid("a segment in neither a chain nor the free list"));
    }
    Ok(())
}

fn write_flash(w: &mut Writer, f: &crate::flash::FlashImage) {
    w.u32(f.places);
    w.u32(f.laps);
    for (&word, (meta, laps)) in f.words.iter().zip(f.meta.iter().zip(&f.laps_since_sweep)) {
        w.u32(word);
        for v in meta {
            w.u64(*v);
        }
        w.u32(*laps);
    }
    for list in [&f.order, &f.free] {
        w.u64(list.len() as u64);
        for &p in list.iter() {
            w.u32(p);
        }
    }
}

fn read_flash(r: &mut Reader<'_>) -> Result<crate::flash::FlashImage, SnapshotError> {
    let places = r.u32()?;
    let laps = r.u32()?;
    if places as usize > crate::hashtable::MAX_SEGMENTS {
        return Err(invalid("flash segments"));
    }
    let mut f = crate::flash::FlashImage {
        places,
        laps,
        ..Default::default()
    };
    for _ in 0..places {
        f.words.push(r.u32()?);
        let mut meta = [0u64; 5];
        for v in meta.iter_mut() {
            *v = r.u64()?;
        }
        f.meta.push(meta);
        f.laps_since_sweep.push(r.u32()?);
    }
    for list in [&mut f.order, &mut f.free] {
        let n = usize::try_from(r.u64()?).map_err(|_| invalid("flash list"))?;
        if n > places as usize {
            return Err(invalid("flash list longer than the flash"));
        }
        for _ in 0..n {
            list.push(r.u32()?);
        }
    }
    Ok(f)
}

impl Cache {
    /// Describes everything outside the heap, for a warm restart with the same memory file
    /// (see the module docs). Call it after every [`crate::Handle`] is dropped and the
    /// expirer stopped; it flushes the mapping too.
    pub fn snapshot(&self) -> Result<Vec<u8>, SnapshotError> {
        let s = &*self.engine;
        if !s.heap().is_mapped() {
            return Err(SnapshotError::NotMapped);
        }
        let live = s.live_handles();
        if live > 0 {
            return Err(SnapshotError::InUse(live));
        }
        // The flash survives when its writes can be finished and synced; else its slots go.
        let flash = match s.flash() {
            Some(tier) if tier.quiesce() => {
                crate::demote::sweep(s, false);
                Some(tier.image())
            }
            Some(_) => {
                crate::demote::sweep(s, true);
                None
            }
            None => None,
        };
        let mut w = Writer(Vec::new());
        w.0.extend_from_slice(MAGIC);
        w.u32(FORMAT);
        w.u64(layout());
        w.bytes(env!("CARGO_PKG_VERSION").as_bytes());
        w.u64(s.heap().segments() as u64);
        w.u64(s.heap().segment_size() as u64);
        w.u32(s.align_shift());
        w.u64(s.clock().start_unix());
        w.u32(s.clock().now());
        let words = s.restart_words();
        w.u32(words.generation);
        w.u32(words.flush_at);
        w.u32(words.reclaimed_generation);
        w.u64(words.cas_reserved);
        for (i, h) in s.segments().iter().enumerate() {
            let st = h.state.load(Ordering::Acquire);
            if st == state::MERGING || st == state::RETIRING {
                return Err(SnapshotError::Busy(i as u32));
            }
            // No handle is live, so an ACTIVE segment's writer is gone: it is sealed.
            let st = if st == state::ACTIVE {
                state::SEALED
            } else {
                st
            };
            w.u8(st);
            w.u8(u8::from(h.accessible.load(Ordering::Acquire)));
            for v in [
                h.write_offset.load(Ordering::Acquire) | crate::segment::SEALED,
                h.ttl_bucket.load(Ordering::Acquire),
                h.create_at.load(Ordering::Acquire),
                h.min_deadline(),
                h.max_deadline(),
                h.generation.load(Ordering::Acquire),
                h.epoch.load(Ordering::Acquire),
                h.prev.load(Ordering::Acquire),
                h.next.load(Ordering::Acquire),
                h.live_items.load(Ordering::Acquire),
                h.live_bytes.load(Ordering::Acquire),
            ] {
                w.u32(v);
            }
        }
        for b in 0..N_BUCKETS {
            let c = s.chains().lock(b);
            for v in [c.head, c.tail, c.merge_cursor, c.segments] {
                w.u32(v);
            }
        }
        let free = s.free_pool().list();
        w.u64(free.len() as u64);
        for id in free {
            w.u32(id);
        }
        w.u8(u8::from(flash.is_some()));
        if let Some(f) = &flash {
            write_flash(&mut w, f);
        }
        let image = s.table().load().image();
        w.u32(image.power);
        w.u64(image.next_overflow);
        w.u64(image.slots.len() as u64);
        for v in &image.slots {
            w.u64(*v);
        }
        let sum = xxhash_rust::xxh3::xxh3_64(&w.0);
        w.u64(sum);
        s.heap()
            .flush()
            .map_err(|e| SnapshotError::Invalid(format!("flushing the memory file: {e}")))?;
        Ok(w.0)
    }

    /// A cache in `mapping` (the memory file) rebuilt from `snapshot`, or the reason it
    /// cannot be; the caller then starts empty with [`Cache::with_mapping`].
    pub fn resume(
        config: Config,
        mapping: memmap2::MmapMut,
        snapshot: &[u8],
    ) -> Result<(Cache, Restored), SnapshotError> {
        let started = Instant::now();
        let geometry = Geometry::of(&config)?;
        if snapshot.len() < MAGIC.len() + 8 {
            return Err(invalid("too short"));
        }
        let (body, sum) = snapshot.split_at(snapshot.len() - 8);
        if xxhash_rust::xxh3::xxh3_64(body).to_le_bytes() != sum {
            return Err(invalid("checksum mismatch (torn or corrupt)"));
        }
        let mut r = Reader { buf: body, at: 0 };
        if r.take(MAGIC.len())? != MAGIC {
            return Err(invalid("not a memfleet snapshot"));
        }
        let format = r.u32()?;
        if format != FORMAT_3 {
            expect_eq("format", format, FORMAT)?;
        }
        expect_eq("layout", r.u64()?, layout())?;
        // The writer's version: another release of the same format and layout is welcome.
        let _written_by = r.bytes()?;
        let segments = usize::try_from(r.u64()?).map_err(|_| invalid("segments"))?;
        expect_eq("segment count", segments, geometry.segments)?;
        let segment_size = usize::try_from(r.u64()?).map_err(|_| invalid("segment size"))?;
        expect_eq("segment size", segment_size, config.segment_size)?;
        expect_eq("memory file size", mapping.len(), segments * segment_size)?;
        expect_eq("alignment", r.u32()?, geometry.align_shift)?;
        let start_unix = r.u64()?;
        let saved_now = r.u32()?;
        let generation = r.u32()?;
        let flush_at = r.u32()?;
        let reclaimed = r.u32()?;
        // Format 3's lease-token counter: tokens now come from the CAS sequence.
        let cas_reserved = r.u64()?;
        let headers: Box<[SegmentHeader]> = (0..segments).map(|_| SegmentHeader::new()).collect();
        for (i, h) in headers.iter().enumerate() {
            let st = r.u8()?;
            if st != state::FREE && st != state::SEALED {
                return Err(SnapshotError::Invalid(format!("segment {i} in state {st}")));
            }
            h.state.store(st, Ordering::Relaxed);
            h.accessible.store(r.u8()? != 0, Ordering::Relaxed);
            for f in [&h.write_offset, &h.ttl_bucket, &h.create_at] {
                f.store(r.u32()?, Ordering::Relaxed);
            }
            let (min, max) = (r.u32()?, r.u32()?);
            h.set_deadlines(min, max);
            let fields = [
                &h.generation,
                &h.epoch,
                &h.prev,
                &h.next,
                &h.live_items,
                &h.live_bytes,
            ];
            for f in fields {
                f.store(r.u32()?, Ordering::Relaxed);
            }
            let used = h.used();
            let links_ok = [
                h.prev.load(Ordering::Relaxed),
                h.next.load(Ordering::Relaxed),
            ]
            .iter()
            .all(|l| *l == crate::segment::NONE || (*l as usize) < segments);
            if used > segment_size
                || h.ttl_bucket.load(Ordering::Relaxed) as usize >= N_BUCKETS
                || !links_ok
            {
                return Err(SnapshotError::Invalid(format!("segment {i} header")));
            }
        }
        let chains = Chains::new();
        for b in 0..N_BUCKETS {
            let mut c = chains.lock(b);
            c.head = r.u32()?;
            c.tail = r.u32()?;
            c.merge_cursor = r.u32()?;
            c.segments = r.u32()?;
        }
        let free_len = usize::try_from(r.u64()?).map_err(|_| invalid("free list"))?;
        if free_len > segments {
            return Err(invalid("free list longer than the heap"));
        }
        let mut free = Vec::with_capacity(free_len);
        for _ in 0..free_len {
            let id = r.u32()?;
            if id as usize >= segments {
                return Err(invalid("free segment id"));
            }
            free.push(id);
        }
        let flash = match r.u8()? {
            0 => None,
            1 => Some(read_flash(&mut r)?),
            _ => return Err(invalid("flash flag")),
        };
        // The flash comes back when the cache has the same flash; otherwise its slots are
        // dropped once the cache is built (RAM still comes back).
        let flash = flash.filter(|f| {
            config.flash.as_ref().is_some_and(|c| {
                c.sink.places() == f.places
                    && crate::flash::laps_for(segments, f.places as usize) == f.laps
            })
        });
        let power = r.u32()?;
        let next_overflow = r.u64()?;
        let n = usize::try_from(r.u64()?).map_err(|_| invalid("table size"))?;
        if n > body.len() / 8 {
            return Err(invalid("table size"));
        }
        let mut slots = Vec::with_capacity(n);
        for _ in 0..n {
            slots.push(r.u64()?);
        }
        if r.at != body.len() {
            return Err(invalid("trailing bytes"));
        }
        let image = TableImage {
            power,
            next_overflow,
            slots,
        };
        check_membership(&headers, &chains, &free)?;
        let table = if format == FORMAT_3 {
            Table::from_format3_image(&image)
        } else {
            Table::from_image(&image).map(|t| (t, cas_reserved))
        };
        let (table, cas_reserved) = table.ok_or_else(|| invalid("hash table"))?;
        let heap = Heap::mapped(mapping, segments, segment_size);
        // Every slot must point at a whole item below its segment's write offset, in a
        // segment that is in use.
        let unit = 1usize << geometry.align_shift;
        let mut items = 0u64;
        for (i, v) in image.slots.iter().enumerate() {
            let info = (i / 8) < (1usize << power) && i % 8 == 0;
            if info || *v == 0 || *v & 0xfff == 0 {
                continue;
            }
            let slot = crate::hashtable::Slot(*v);
            let seg = slot.seg();
            let offset = slot.offset_units() as usize * unit;
            if seg as usize >= segments {
                // A flash item: its record is checked when read; its place must be stored.
                if let Some(f) = &flash {
                    if !crate::flash::FlashTier::image_holds(
                        f,
                        segments as u32,
                        seg,
                        offset,
                        segment_size,
                    ) {
                        return Err(invalid("a hash slot points at flash that is not stored"));
                    }
                    items += 1;
                }
                continue;
            }
            let h = headers.get(seg as usize);
            let used = h.map_or(0, |h| h.used());
            let in_use = h.is_some_and(|h| h.state.load(Ordering::Relaxed) == state::SEALED);
            // SAFETY: nothing else can reach the heap yet (the cache is being built), and
            // the range lies below the segment's write offset, inside the heap.
            let whole = in_use
                && offset < used
                && crate::item::decode_within(unsafe { heap.bytes(seg, offset, used - offset) })
                    .is_some();
            if !whole {
                return Err(invalid("a hash slot points outside the written heap"));
            }
            items += 1;
        }
        let clock = config.clock.resumed(start_unix, saved_now);
        let parts = RestoredParts {
            heap,
            headers,
            table,
            chains,
            free,
            clock,
            words: RestartWords {
                generation,
                flush_at,
                reclaimed_generation: reclaimed,
                cas_reserved,
            },
        };
        let engine = EngineState::restored(config, geometry, parts);
        match (engine.flash(), &flash) {
            (Some(tier), Some(f)) => tier
                .restore(f, engine.clock().now())
                .map_err(SnapshotError::Invalid)?,
            // Flash slots with no flash to serve them (or none saved) go now.
            _ => {
                crate::demote::sweep(&engine, true);
            }
        }
        let segments_in_use = segments - engine.free_pool().len();
        let cache = Cache {
            engine: std::sync::Arc::new(engine),
        };
        Ok((
            cache,
            Restored {
                items,
                segments_in_use,
                elapsed: started.elapsed(),
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(chain: &[u32], free: &[u32]) -> (Box<[SegmentHeader]>, Chains) {
        let headers: Box<[SegmentHeader]> = (0..4).map(|_| SegmentHeader::new()).collect();
        let chains = Chains::new();
        {
            let mut c = chains.lock(3);
            for &id in chain {
                headers[id as usize].open(0, 3, 0, state::SEALED);
                c.push_back(&headers, id);
            }
        }
        for &id in free {
            headers[id as usize]
                .state
                .store(state::FREE, Ordering::Relaxed);
        }
        (headers, chains)
    }

    #[test]
    fn every_segment_is_in_one_chain_or_the_free_list() {
        let (h, c) = layout(&[0, 1], &[2, 3]);
        assert_eq!(check_membership(&h, &c, &[2, 3]), Ok(()));
        // A free segment listed twice, or a chained one also free, would be handed out while
        // it holds items; a segment in neither would be lost.
        assert!(check_membership(&h, &c, &[2, 2, 3]).is_err());
        assert!(check_membership(&h, &c, &[1, 2, 3]).is_err());
        assert!(check_membership(&h, &c, &[2]).is_err());
        // A chain whose length or links disagree with its segments.
        c.lock(3).segments = 3;
        assert!(check_membership(&h, &c, &[2, 3]).is_err());
        c.lock(3).segments = 2;
        h[1].prev.store(2, Ordering::Relaxed);
        assert!(check_membership(&h, &c, &[2, 3]).is_err());
    }
}
