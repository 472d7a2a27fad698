//! A flash tier's state across a warm restart: written out and synced first
//! ([`FlashTier::quiesce`]), described ([`FlashTier::image`]) for the snapshot beside the
//! memory file (`persist.rs`), and loaded into the new process's tier after checks
//! ([`FlashTier::restore`]). The flash file itself is not read: each record is checked when
//! it is (segment id, checksum, key), so a file changed underneath costs misses, never
//! wrong bytes.

use super::{FlashTier, FREE, STATE_MASK, STORED};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What a snapshot keeps of a flash tier: every place's lap and state, its metadata, the
/// reclaim order and the free list.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FlashImage {
    /// Places (physical flash segments).
    pub places: u32,
    /// Laps an id may take.
    pub laps: u32,
    /// Each place's word (lap and state: FREE or STORED).
    pub words: Vec<u32>,
    /// Each place's generation, latest deadline, live items, items written, record bytes.
    pub meta: Vec<[u64; 5]>,
    /// Stored places, oldest first.
    pub order: Vec<u32>,
    /// Free places.
    pub free: Vec<u32>,
    /// Laps each place went through since the last sweep.
    pub laps_since_sweep: Vec<u32>,
}

impl FlashTier {
    /// Writes the filling buffer out and waits, up to [`FlashConfig::quiesce_timeout`],
    /// until every buffer is written and the device synced: then every place is FREE or
    /// STORED. False when that did not happen (a lagging or failing device): the flash then
    /// does not survive.
    ///
    /// [`FlashConfig::quiesce_timeout`]: crate::FlashConfig::quiesce_timeout
    pub fn quiesce(self: &Arc<Self>) -> bool {
        self.flush_buffer();
        let deadline = Instant::now() + self.quiesce_timeout;
        loop {
            self.submit_queued();
            if self.lock().sealed.is_empty() {
                break;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        self.sink.sync().is_ok()
    }

    /// The tier's state, after [`FlashTier::quiesce`].
    pub fn image(&self) -> FlashImage {
        let inner = self.lock();
        FlashImage {
            places: self.places,
            laps: self.laps,
            words: self
                .words
                .iter()
                .map(|w| w.load(Ordering::Acquire))
                .collect(),
            meta: self
                .meta
                .iter()
                .map(|m| {
                    [
                        u64::from(m.generation.load(Ordering::Relaxed)),
                        u64::from(m.max_deadline.load(Ordering::Relaxed)),
                        u64::from(m.live_items.load(Ordering::Relaxed)),
                        u64::from(m.items.load(Ordering::Relaxed)),
                        m.bytes.load(Ordering::Relaxed),
                    ]
                })
                .collect(),
            order: inner.order.iter().copied().collect(),
            free: inner.free.clone(),
            laps_since_sweep: inner.laps_since_sweep.to_vec(),
        }
    }

    /// Whether `seg`, `offset` names a record of a stored place in `image` (a restored hash
    /// slot must).
    pub fn image_holds(
        image: &FlashImage,
        base: u32,
        seg: u32,
        offset: usize,
        segment_size: usize,
    ) -> bool {
        let Some(idx) = seg.checked_sub(base) else {
            return false;
        };
        let (lap, place) = (idx / image.places.max(1), idx % image.places.max(1));
        image
            .words
            .get(place as usize)
            .is_some_and(|&w| w >> 2 == lap && w & STATE_MASK == STORED && offset < segment_size)
    }

    /// Loads `image` into this fresh tier (same places and laps), after checking that every
    /// place is FREE or STORED, listed once in the free list or the reclaim order.
    pub fn restore(&self, image: &FlashImage, now: u32) -> Result<(), String> {
        let n = self.places as usize;
        if image.places != self.places || image.laps != self.laps {
            return Err(format!(
                "the flash has {} segments ({} laps), the snapshot {} ({})",
                self.places, self.laps, image.places, image.laps
            ));
        }
        if image.words.len() != n || image.meta.len() != n || image.laps_since_sweep.len() != n {
            return Err("flash image of the wrong size".into());
        }
        let mut seen = vec![false; n];
        for (list, want) in [(&image.order, STORED), (&image.free, FREE)] {
            for &p in list {
                let Some(w) = image.words.get(p as usize) else {
                    return Err(format!("flash segment {p} out of range"));
                };
                if std::mem::replace(&mut seen[p as usize], true) || w & STATE_MASK != want {
                    return Err(format!(
                        "flash segment {p} listed twice or in the wrong state"
                    ));
                }
                if w >> 2 >= self.laps || image.laps_since_sweep[p as usize] >= self.laps {
                    return Err(format!("flash segment {p}: lap out of range"));
                }
            }
        }
        if seen.iter().any(|s| !s) {
            return Err("a flash segment neither stored nor free".into());
        }
        let mut inner = self.lock();
        for (p, (&w, m)) in image.words.iter().zip(&image.meta).enumerate() {
            self.words[p].store(w, Ordering::Release);
            let to32 = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
            let meta = &self.meta[p];
            meta.generation.store(to32(m[0]), Ordering::Relaxed);
            meta.max_deadline.store(to32(m[1]), Ordering::Relaxed);
            meta.live_items.store(to32(m[2]), Ordering::Relaxed);
            meta.items.store(to32(m[3]), Ordering::Relaxed);
            meta.bytes.store(m[4], Ordering::Relaxed);
            meta.opened_at.store(now, Ordering::Relaxed);
        }
        inner.order = image.order.iter().copied().collect();
        inner.free = image.free.clone();
        inner.laps_since_sweep = image.laps_since_sweep.clone().into_boxed_slice();
        if !image.order.is_empty() {
            self.used.store(true, Ordering::Relaxed);
        }
        Ok(())
    }
}
