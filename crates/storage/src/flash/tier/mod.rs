//! [`FlashTier`]: the places (physical flash segments), their laps and states, the write
//! buffers, reclaiming and expiring, and the counters. See `mod.rs` for the design.

mod counters;
mod image;

pub use counters::FlashCounters;
pub use image::FlashImage;

use super::record::{self, RECORD_HEADER};
use super::{FlashConfig, FlashFetch, FlashSink, FlashStats, FlashWriteDone};
use crate::sync::Mutex;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

const FREE: u32 = 0;
const FILLING: u32 = 1;
const WRITING: u32 = 2;
const STORED: u32 = 3;
const STATE_MASK: u32 = 3;

/// Per place: what reads and expiry need without the lock.
#[derive(Default)]
struct PlaceMeta {
    /// The flush generation its items were demoted in.
    generation: AtomicU32,
    /// The latest deadline of its items (the place is dead once it passed).
    max_deadline: AtomicU32,
    /// Items whose slots still point at it.
    live_items: AtomicU32,
    /// Items written to it, and their record bytes (for the live bytes estimate).
    items: AtomicU32,
    bytes: AtomicU64,
    /// The engine second its buffer was opened (after a warm restart: the second it was
    /// restored), what a key dump shows as a flash item's last access.
    opened_at: AtomicU32,
}

/// A buffer being filled.
struct Filling {
    place: u32,
    word: u32,
    buf: Vec<u8>,
    used: usize,
}

/// A full buffer, queued or being written; its items are read from it until it is written.
struct Sealed {
    place: u32,
    word: u32,
    bytes: Arc<[u8]>,
    submitted: bool,
}

struct Inner {
    filling: Option<Filling>,
    sealed: VecDeque<Sealed>,
    /// Places holding items (WRITING or STORED), oldest first.
    order: VecDeque<u32>,
    free: Vec<u32>,
    /// Laps each place went through since the last completed sweep started.
    laps_since_sweep: Box<[u32]>,
    /// Write budget: bytes that may still be written, and the second it was last refilled.
    budget: f64,
    budget_at: u32,
}

fn bump(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

/// Why a demotion did not happen: the item is evicted as without flash (counted).
#[derive(Debug)]
pub(crate) struct Refused;

/// The flash tier of one engine.
pub(crate) struct FlashTier {
    /// The first flash segment id (the RAM segment count).
    base: u32,
    places: u32,
    /// Laps an id can name before it comes round: ids stay below the slot's 24-bit limit.
    laps: u32,
    segment_size: usize,
    /// Records start at multiples of this (the engine's slot offset unit).
    unit: usize,
    words: Box<[AtomicU32]>,
    meta: Box<[PlaceMeta]>,
    inner: Mutex<Inner>,
    sink: Arc<dyn FlashSink>,
    write_budget: Option<u64>,
    write_buffers: usize,
    quiesce_timeout: std::time::Duration,
    /// An item was demoted (or a restored tier holds some): slots may point at flash.
    used: AtomicBool,
    pub counters: FlashCounters,
}

impl FlashTier {
    /// A tier over `config.sink`'s places whose ids start at `base`; `None` when the ids do
    /// not fit a slot (too many places for the segment size) — the geometry checks first.
    pub fn new(
        base: u32,
        segment_size: usize,
        align_shift: u32,
        config: &FlashConfig,
        now: u32,
    ) -> FlashTier {
        let places = config.sink.places();
        let laps = laps_for(base as usize, places as usize);
        FlashTier {
            base,
            places,
            laps,
            segment_size,
            unit: 1 << align_shift,
            words: (0..places).map(|_| AtomicU32::new(FREE)).collect(),
            meta: (0..places).map(|_| PlaceMeta::default()).collect(),
            inner: Mutex::new(Inner {
                filling: None,
                sealed: VecDeque::new(),
                order: VecDeque::new(),
                free: (0..places).rev().collect(),
                laps_since_sweep: vec![0; places as usize].into_boxed_slice(),
                budget: config.write_budget.map_or(0.0, |b| b as f64),
                budget_at: now,
            }),
            sink: config.sink.clone(),
            write_budget: config.write_budget,
            write_buffers: config.write_buffers.max(2),
            quiesce_timeout: config.quiesce_timeout,
            used: AtomicBool::new(false),
            counters: FlashCounters::default(),
        }
    }

    fn lock(&self) -> crate::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether an item was ever demoted (before that, no slot can point at flash).
    #[inline]
    pub fn in_use(&self) -> bool {
        self.used.load(Ordering::Relaxed)
    }

    /// The place of flash id `seg` if that id is still live there.
    #[inline]
    pub fn resolve(&self, seg: u32) -> Option<u32> {
        let idx = seg.checked_sub(self.base)?;
        let (lap, place) = (idx / self.places, idx % self.places);
        let word = self.words.get(place as usize)?.load(Ordering::Acquire);
        (word >> 2 == lap && word & STATE_MASK != FREE).then_some(place)
    }

    /// Whether the items of flash id `seg` are flushed (written before `generation`).
    pub fn flushed(&self, place: u32, generation: u32) -> bool {
        self.meta[place as usize].generation.load(Ordering::Acquire) != generation
    }

    fn id(&self, place: u32, word: u32) -> u32 {
        self.base + (word >> 2) * self.places + place
    }

    /// A slot that pointed at flash id `seg` is gone (overwritten, deleted, promoted, dropped).
    pub fn forget(&self, seg: u32) {
        if let Some(place) = self.resolve(seg) {
            let live = &self.meta[place as usize].live_items;
            let _ = live.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        }
    }

    /// Appends `item` (expiring at `deadline`, demoted in flush generation `generation`) to
    /// the write buffer and returns its flash id and offset; the caller points its slot there.
    pub fn demote(
        self: &Arc<Self>,
        item: &[u8],
        deadline: u32,
        now: u32,
        generation: u32,
    ) -> Result<(u32, usize), Refused> {
        let len = RECORD_HEADER + item.len();
        if len > self.segment_size {
            return Err(Refused);
        }
        let result = self.demote_locked(item, deadline, now, generation, len);
        // The sink is called without the lock held: it may report a write done at once.
        self.submit_queued();
        result
    }

    fn demote_locked(
        &self,
        item: &[u8],
        deadline: u32,
        now: u32,
        generation: u32,
        len: usize,
    ) -> Result<(u32, usize), Refused> {
        let mut inner = self.lock();
        if let Some(budget) = self.write_budget {
            let elapsed = now.saturating_sub(inner.budget_at);
            if elapsed > 0 {
                // At most one second's worth banked: a burst after an idle hour is still paced.
                inner.budget = (inner.budget + elapsed as f64 * budget as f64).min(budget as f64);
                inner.budget_at = now;
            }
            if inner.budget < len as f64 {
                bump(&self.counters.budget_drops, 1);
                return Err(Refused);
            }
            inner.budget -= len as f64;
        }
        let fits = inner.filling.as_ref().and_then(|f| {
            let place = f.place as usize;
            let same_generation = self.meta[place].generation.load(Ordering::Relaxed) == generation;
            same_generation
                .then(|| record::place(f.used, len, self.segment_size))
                .flatten()
        });
        let at = match fits {
            Some(at) => at,
            None => {
                if let Some(full) = inner.filling.take() {
                    self.seal(&mut inner, full);
                }
                let Some(filling) = self.open(&mut inner, generation, now) else {
                    bump(&self.counters.write_lag_drops, 1);
                    return Err(Refused);
                };
                inner.filling = Some(filling);
                0
            }
        };
        let f = inner.filling.as_mut().expect("a buffer is filling");
        let seg = self.id(f.place, f.word);
        record::encode(&mut f.buf[at..at + len], seg, deadline, item);
        f.used = (at + len).next_multiple_of(self.unit);
        let m = &self.meta[f.place as usize];
        m.live_items.fetch_add(1, Ordering::Relaxed);
        m.items.fetch_add(1, Ordering::Relaxed);
        m.bytes.fetch_add(len as u64, Ordering::Relaxed);
        m.max_deadline.fetch_max(deadline, Ordering::Relaxed);
        if f.used >= self.segment_size {
            let full = inner.filling.take().expect("filling");
            self.seal(&mut inner, full);
        }
        bump(&self.counters.objects_written, 1);
        self.used.store(true, Ordering::Relaxed);
        bump(&self.counters.item_bytes_admitted, item.len() as u64);
        Ok((seg, at))
    }

    /// Opens a place for a new buffer: a free one, else the oldest stored one reclaimed.
    /// `None` when every buffer is taken (the device lags) or nothing can be reclaimed.
    fn open(&self, inner: &mut Inner, generation: u32, now: u32) -> Option<Filling> {
        if inner.sealed.len() + 1 >= self.write_buffers {
            return None;
        }
        let place = match inner.free.pop() {
            Some(p) => p,
            None => self.reclaim_oldest(inner)?,
        };
        let old = self.words[place as usize].load(Ordering::Relaxed);
        debug_assert_eq!(old & STATE_MASK, FREE);
        let word = (old & !STATE_MASK) | FILLING;
        let m = &self.meta[place as usize];
        m.generation.store(generation, Ordering::Relaxed);
        m.max_deadline.store(0, Ordering::Relaxed);
        m.live_items.store(0, Ordering::Relaxed);
        m.items.store(0, Ordering::Relaxed);
        m.bytes.store(0, Ordering::Relaxed);
        m.opened_at.store(now, Ordering::Relaxed);
        self.words[place as usize].store(word, Ordering::Release);
        Some(Filling {
            place,
            word,
            buf: vec![0; self.segment_size],
            used: 0,
        })
    }

    /// Frees the oldest stored place (its items die at once: the lap moves on).
    fn reclaim_oldest(&self, inner: &mut Inner) -> Option<u32> {
        let pos = inner.order.iter().position(|&p| {
            self.words[p as usize].load(Ordering::Relaxed) & STATE_MASK == STORED
                && inner.laps_since_sweep[p as usize] + 1 < self.laps
        })?;
        let place = inner.order.remove(pos).expect("position is in range");
        let live = self.meta[place as usize].live_items.load(Ordering::Relaxed);
        bump(&self.counters.page_reclaims, 1);
        if live > 0 {
            bump(&self.counters.page_evictions, 1);
            bump(&self.counters.objects_evicted, u64::from(live));
            let m = &self.meta[place as usize];
            let items = u64::from(m.items.load(Ordering::Relaxed).max(1));
            let bytes = m.bytes.load(Ordering::Relaxed) * u64::from(live) / items;
            bump(&self.counters.bytes_evicted, bytes);
        }
        self.free_place(inner, place);
        inner.free.pop()
    }

    /// Moves `place` to its next lap, FREE (every id of its old lap is dead from here on).
    fn free_place(&self, inner: &mut Inner, place: u32) {
        let word = self.words[place as usize].load(Ordering::Relaxed);
        let lap = ((word >> 2) + 1) % self.laps;
        self.words[place as usize].store(lap << 2 | FREE, Ordering::Release);
        self.meta[place as usize]
            .live_items
            .store(0, Ordering::Relaxed);
        inner.laps_since_sweep[place as usize] += 1;
        inner.free.push(place);
    }

    /// Seals a full (or abandoned) buffer and queues it for writing.
    fn seal(&self, inner: &mut Inner, full: Filling) {
        let word = (full.word & !STATE_MASK) | WRITING;
        self.words[full.place as usize].store(word, Ordering::Release);
        inner.order.push_back(full.place);
        inner.sealed.push_back(Sealed {
            place: full.place,
            word,
            bytes: Arc::from(full.buf),
            submitted: false,
        });
    }

    /// Hands queued buffers to the sink, oldest first, until it refuses one (the rest are
    /// tried again at the next demotion). Called without the lock.
    fn submit_queued(self: &Arc<Self>) {
        let pending: Vec<(u32, u32, Arc<[u8]>)> = {
            let mut inner = self.lock();
            inner
                .sealed
                .iter_mut()
                .filter(|s| !s.submitted)
                .map(|s| {
                    s.submitted = true;
                    (s.place, s.word, s.bytes.clone())
                })
                .collect()
        };
        for (i, (place, word, bytes)) in pending.iter().enumerate() {
            let done = FlashWriteDone {
                tier: self.clone(),
                place: *place,
                word: *word,
                finished: false,
            };
            if let Err(mut refused) = self.sink.write(*place, bytes.clone(), done) {
                // Not a failure: the device is busy. Keep the buffers for the next try.
                refused.finished = true;
                let mut inner = self.lock();
                for (p, w, _) in &pending[i..] {
                    if let Some(s) = inner
                        .sealed
                        .iter_mut()
                        .find(|s| s.place == *p && s.word == *w)
                    {
                        s.submitted = false;
                    }
                }
                break;
            }
        }
    }

    /// Writes the filling buffer now if it holds anything (a shutdown, or a test).
    pub fn flush_buffer(self: &Arc<Self>) {
        let mut inner = self.lock();
        if let Some(f) = inner.filling.take() {
            if f.used > 0 {
                self.seal(&mut inner, f);
            } else {
                self.words[f.place as usize].store(f.word & !STATE_MASK | FREE, Ordering::Release);
                inner.free.push(f.place);
            }
        }
        drop(inner);
        self.submit_queued();
    }

    /// The sink finished writing `place` (as `word`).
    pub fn written(&self, place: u32, word: u32, ok: bool) {
        let mut inner = self.lock();
        if let Some(pos) = inner
            .sealed
            .iter()
            .position(|s| s.place == place && s.word == word)
        {
            inner.sealed.remove(pos);
        }
        if self.words[place as usize].load(Ordering::Relaxed) != word {
            return;
        }
        if ok {
            bump(&self.counters.bytes_written, self.segment_size as u64);
            let stored = (word & !STATE_MASK) | STORED;
            self.words[place as usize].store(stored, Ordering::Release);
        } else {
            bump(&self.counters.write_errors, 1);
            if let Some(pos) = inner.order.iter().position(|&p| p == place) {
                inner.order.remove(pos);
            }
            self.free_place(&mut inner, place);
        }
    }

    /// How to read the record at (`seg`, `offset`).
    pub fn fetch(&self, seg: u32, offset: usize) -> FlashFetch {
        let Some(place) = self.resolve(seg) else {
            return FlashFetch::Gone;
        };
        let device = FlashFetch::Device {
            place,
            offset: offset as u32,
            len: record::first_read(offset, self.segment_size) as u32,
        };
        // A written segment needs no lock (the common case: most flash hits); a buffer does.
        let word = self.words[place as usize].load(Ordering::Acquire);
        if word & STATE_MASK == STORED && self.id(place, word) == seg {
            return device;
        }
        let inner = self.lock();
        let word = self.words[place as usize].load(Ordering::Acquire);
        if self.id(place, word) != seg {
            return FlashFetch::Gone;
        }
        // A buffer's records were written by this tier: whole, so their length is known.
        let local = |bytes: &[u8]| {
            let item_at = offset + RECORD_HEADER;
            let Some(fixed) = bytes.get(item_at..item_at + crate::item::HEADER_LEN) else {
                return FlashFetch::Gone;
            };
            let prefix = crate::item::HEADER_LEN + crate::item::extensions_len(fixed);
            let Some(head) = bytes.get(item_at..item_at + prefix) else {
                return FlashFetch::Gone;
            };
            let end = item_at + crate::item::decode(head).len();
            bytes
                .get(offset..end)
                .map_or(FlashFetch::Gone, |b| FlashFetch::Local(b.to_vec()))
        };
        match word & STATE_MASK {
            FILLING => match &inner.filling {
                Some(f) if f.place == place => local(&f.buf[..f.used]),
                _ => FlashFetch::Gone,
            },
            WRITING => match inner
                .sealed
                .iter()
                .find(|s| s.place == place && s.word == word)
            {
                Some(s) => local(&s.bytes),
                None => FlashFetch::Gone,
            },
            STORED => device,
            _ => FlashFetch::Gone,
        }
    }

    /// For a key dump: the next place at or after `*place` that holds items, as its flash
    /// id, the second it was opened, and how to read it whole (a buffer's bytes now, or a
    /// device read of the segment); moves `*place` past it. `None` once every place was
    /// visited.
    pub fn dump_segment(&self, place: &mut u32) -> Option<(u32, u32, FlashFetch)> {
        while *place < self.places {
            let p = *place;
            *place += 1;
            let word = self.words[p as usize].load(Ordering::Acquire);
            let opened_at = self.meta[p as usize].opened_at.load(Ordering::Relaxed);
            let seg = self.id(p, word);
            match word & STATE_MASK {
                FREE => continue,
                STORED => {
                    let read = FlashFetch::Device {
                        place: p,
                        offset: 0,
                        len: self.segment_size as u32,
                    };
                    return Some((seg, opened_at, read));
                }
                _ => {}
            }
            let inner = self.lock();
            if self.words[p as usize].load(Ordering::Acquire) != word {
                drop(inner);
                // Sealed or written meanwhile: look again.
                *place = p;
                continue;
            }
            let bytes = match &inner.filling {
                Some(f) if f.place == p && f.word == word => Some(f.buf[..f.used].to_vec()),
                _ => inner
                    .sealed
                    .iter()
                    .find(|s| s.place == p && s.word == word)
                    .map(|s| s.bytes.to_vec()),
            };
            if let Some(bytes) = bytes {
                return Some((seg, opened_at, FlashFetch::Local(bytes)));
            }
        }
        None
    }

    /// Drops every stored place whose items all expired or were flushed; returns how many.
    pub fn expire(&self, now: u32, generation: u32) -> usize {
        let mut inner = self.lock();
        let dead: Vec<u32> = inner
            .order
            .iter()
            .copied()
            .filter(|&p| {
                let m = &self.meta[p as usize];
                self.words[p as usize].load(Ordering::Relaxed) & STATE_MASK == STORED
                    && (m.generation.load(Ordering::Relaxed) != generation
                        || m.max_deadline.load(Ordering::Relaxed) <= now)
            })
            .collect();
        for &place in &dead {
            inner.order.retain(|&p| p != place);
            self.free_place(&mut inner, place);
        }
        bump(&self.counters.pages_expired, dead.len() as u64);
        dead.len()
    }

    /// Whether some place is near the end of its laps: a sweep ([`crate::Cache::sweep_flash`])
    /// must remove dead slots before ids come round.
    pub fn needs_sweep(&self) -> bool {
        let inner = self.lock();
        inner
            .laps_since_sweep
            .iter()
            .any(|&n| n + 2 >= self.laps / 2)
    }

    /// What a sweep starting now will have cleaned up to.
    pub fn sweep_started(&self) -> Box<[u32]> {
        self.lock().laps_since_sweep.clone()
    }

    /// A sweep that started with `snapshot` is done: those laps' dead slots are gone.
    pub fn sweep_done(&self, snapshot: &[u32]) {
        let mut inner = self.lock();
        for (n, s) in inner.laps_since_sweep.iter_mut().zip(snapshot) {
            *n -= s;
        }
        bump(&self.counters.sweeps, 1);
    }

    /// Statistics now.
    pub fn stats(&self) -> FlashStats {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let (mut used, mut live, mut bytes_used) = (0u64, 0u64, 0u64);
        for (w, m) in self.words.iter().zip(self.meta.iter()) {
            if w.load(Ordering::Relaxed) & STATE_MASK != FREE {
                used += 1;
                let l = u64::from(m.live_items.load(Ordering::Relaxed));
                let items = u64::from(m.items.load(Ordering::Relaxed)).max(1);
                live += l;
                bytes_used += m.bytes.load(Ordering::Relaxed) * l / items;
            }
        }
        FlashStats {
            pages_total: u64::from(self.places),
            pages_used: used,
            pages_free: u64::from(self.places) - used,
            page_size: self.segment_size as u64,
            objects_written: get(&c.objects_written),
            objects_used: live,
            item_bytes_admitted: get(&c.item_bytes_admitted),
            bytes_written: get(&c.bytes_written),
            bytes_used,
            objects_read: get(&c.objects_read),
            bytes_read: get(&c.bytes_read),
            hits: get(&c.hits),
            promotions: get(&c.promotions),
            misses: get(&c.misses),
            bad_checksums: get(&c.bad_checksums),
            aborted: get(&c.aborted),
            page_reclaims: get(&c.page_reclaims),
            page_evictions: get(&c.page_evictions),
            objects_evicted: get(&c.objects_evicted),
            bytes_evicted: get(&c.bytes_evicted),
            pages_expired: get(&c.pages_expired),
            write_lag_drops: get(&c.write_lag_drops),
            budget_drops: get(&c.budget_drops),
            tag_conflict_drops: get(&c.tag_conflict_drops),
            purged: get(&c.purged),
            write_errors: get(&c.write_errors),
            growth_drops: get(&c.growth_drops),
            index_drops: get(&c.index_drops),
            sweeps: get(&c.sweeps),
        }
    }
}

/// Laps a place's ids may take: as many as keep `base + laps × places` within a slot's
/// 24-bit segment id.
pub(crate) fn laps_for(base: usize, places: usize) -> u32 {
    ((crate::hashtable::MAX_SEGMENTS - base) / places.max(1)).min(1 << 20) as u32
}

/// The deadline a record stores: the item's own if it has one and it is earlier than its
/// segment's (which is `NEVER` for items that never expire).
pub(crate) fn record_deadline(segment_min: u32, own: Option<u32>) -> u32 {
    own.map_or(segment_min, |d| d.min(segment_min))
}
