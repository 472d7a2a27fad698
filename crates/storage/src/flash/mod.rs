//! The flash tier: segments' worth of items that eviction would drop, written to flash whole
//! (memcached's extstore, shaped by Segcache: a flash item costs RAM only its hash slot).
//!
//! **Ids.** A hash slot names its item's segment in 24 bits. Ids below the RAM segment count
//! are RAM segments; ids from there up name flash segments: `base + lap × places + place`,
//! where `place` is a physical flash segment and `lap` how many times that place has been
//! reclaimed. A place's word holds its current lap and state, so a slot that points at a lap
//! the place has left is dead at once, without I/O and without finding the slots: reclaiming
//! or expiring a flash segment is one store. Dead slots are removed when a writer or a
//! demotion meets them in their chain, and by a sweep of the whole table
//! ([`FlashTier::needs_sweep`]) before a place's lap could come round to an id a dead slot
//! still holds.
//!
//! **Writing.** Demotions (eviction's dropped items, under the eviction lock) are appended to
//! a RAM buffer the size of a segment (`record.rs`'s records); a full buffer is handed to the
//! [`FlashSink`], which writes it without blocking the evicting thread. Until it reports the
//! write done, reads of its items are served from the buffer. At most
//! [`FlashConfig::write_buffers`] buffers exist (memory outside the heap, as extstore's write
//! buffers are outside `-m`): when the device lags, demotion stops and RAM evicts as it would
//! without flash, counted. A write budget (bytes per second) does the same, counted apart.
//!
//! **Reading** is the caller's I/O ([`crate::Handle::flash_candidate`],
//! [`crate::Handle::flash_fetch`], [`crate::Handle::promote`]): the engine says where, the
//! caller reads, the engine checks the bytes (segment id, checksum, key, deadline) and moves
//! the item back into RAM. A bad read is a miss, never wrong bytes.
//!
//! **Reclaiming**: oldest first (FIFO), without reading; a segment whose items have all
//! expired, or were flushed, goes first.
//!
//! **Keys.** A flash item's key is not in RAM; its slot's 11-bit tag and the up to 4 hash
//! bits it keeps for table growth (`demote.rs`) stand for it: 15 bits of the key's hash
//! besides its chain. A write or delete of a key therefore drops every flash slot of its
//! chain that matches them. A slot of another key that matches is lost with it, counted:
//! an estimated one write in 5,000 when every chain is full of flash items, 16 times fewer
//! than with the tag alone. A chain holds at most one flash slot a key can match, so a read
//! has at most one flash candidate to fetch, and a miss reads flash about once in 10,000
//! (measured: 32 of 400,000 absent keys, against 457 when only the tag was compared). Table
//! growth consumes one kept bit per doubling; a flash slot with none left is dropped at the
//! next, counted.

pub(crate) mod record;
mod tier;

pub use record::BLOCK as FLASH_BLOCK;
pub(crate) use tier::FlashImage;
pub(crate) use tier::{laps_for, record_deadline, FlashTier};

use std::sync::Arc;

/// Where flash segments are written: a file or device, outside the engine (the server's
/// `memfleet-flash` files). Every segment is written whole, at its place.
pub trait FlashSink: Send + Sync + std::fmt::Debug {
    /// Physical flash segments (places), each [`crate::Config::segment_size`] bytes.
    fn places(&self) -> u32;
    /// Starts writing `bytes` (one segment) at `place`, without blocking. Calls
    /// [`FlashWriteDone::finish`] when the write is done (from any thread), or gives `done`
    /// back when it cannot take the write now (the engine keeps the buffer and tries again).
    fn write(
        &self,
        place: u32,
        bytes: Arc<[u8]>,
        done: FlashWriteDone,
    ) -> Result<(), FlashWriteDone>;

    /// Makes every write done so far durable (before a snapshot keeps the flash for a warm
    /// restart). Nothing by default.
    fn sync(&self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Flash tier settings ([`crate::Config::flash`]).
#[derive(Clone, Debug)]
pub struct FlashConfig {
    /// Where segments go.
    pub sink: Arc<dyn FlashSink>,
    /// Most bytes per second written to flash (`None`: no limit). Demotions over budget are
    /// evicted as without flash, counted.
    pub write_budget: Option<u64>,
    /// Segment-sized RAM buffers for writes (filling, queued, being written), at least 2.
    pub write_buffers: usize,
    /// The item size the hash table is sized for: flash bytes / this = the flash items it
    /// indexes (one 8-byte slot each, 7 to a 64-byte bucket). Smaller items fill flash
    /// past that and displace each other's slots (`index_drops`); larger ones leave slots
    /// empty.
    pub item_size_hint: usize,
    /// How long a snapshot waits for the flash's writes to finish before it gives the flash
    /// up (its slots dropped; RAM still survives the restart).
    pub quiesce_timeout: std::time::Duration,
}

impl FlashConfig {
    /// Defaults for `sink`: no write budget, 4 write buffers, items of 512 bytes (memcached's
    /// `ext_item_size`), 30 s to write the flash out before a snapshot.
    pub fn new(sink: Arc<dyn FlashSink>) -> FlashConfig {
        FlashConfig {
            sink,
            write_budget: None,
            write_buffers: 4,
            item_size_hint: 512,
            quiesce_timeout: std::time::Duration::from_secs(30),
        }
    }
}

/// The callback of one segment write ([`FlashSink::write`]). Dropped without
/// [`FlashWriteDone::finish`], the write counts as failed.
pub struct FlashWriteDone {
    tier: Arc<FlashTier>,
    place: u32,
    word: u32,
    finished: bool,
}

impl FlashWriteDone {
    /// Reports the write done (`ok`) or failed: a failed segment's items are lost (misses).
    pub fn finish(mut self, ok: bool) {
        self.finished = true;
        self.tier.written(self.place, self.word, ok);
    }
}

impl Drop for FlashWriteDone {
    fn drop(&mut self) {
        if !self.finished {
            self.tier.written(self.place, self.word, false);
        }
    }
}

impl std::fmt::Debug for FlashWriteDone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FlashWriteDone")
            .field("place", &self.place)
            .finish_non_exhaustive()
    }
}

/// A flash copy a key may have ([`crate::Handle::flash_candidate`]): its 11-bit tag matched,
/// the key is checked once the bytes are read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlashCandidate {
    pub(crate) seg: u32,
    pub(crate) offset: u32,
    pub(crate) slot: u64,
}

impl FlashCandidate {
    /// Names this copy (equal for the same slot and place).
    pub fn location(&self) -> u64 {
        (u64::from(self.seg) << 32) | u64::from(self.offset)
    }
}

/// How to get a candidate's bytes ([`crate::Handle::flash_fetch`]).
#[derive(Debug, PartialEq, Eq)]
pub enum FlashFetch {
    /// Still in a write buffer: here they are.
    Local(Vec<u8>),
    /// Read `len` bytes at `offset` of physical segment `place` (a record of one block or
    /// less is all there; a longer one says how long when given these).
    Device {
        /// The physical segment.
        place: u32,
        /// Byte offset in it.
        offset: u32,
        /// Bytes to read.
        len: u32,
    },
    /// The copy is gone (its flash segment was reclaimed or expired): a miss.
    Gone,
}

/// A flash item served from the bytes read, without moving it into RAM
/// ([`crate::Handle::read_flash`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlashItem {
    /// Its key.
    pub key: Vec<u8>,
    /// The client's flags.
    pub flags: u32,
    /// The value.
    pub value: Vec<u8>,
    /// The CAS unique `gets` returns.
    pub cas: u64,
}

/// What [`crate::Handle::read_flash`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FlashRead {
    /// Serve this (the item stays on flash; its read is counted on its slot).
    Serve(FlashItem),
    /// Read again while on flash: it is in RAM now; run the command.
    Promoted,
    /// Not served: what [`crate::Handle::promote`] would have said.
    Other(Promotion),
}

/// What [`crate::Handle::promote`] did with a candidate's bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Promotion {
    /// The item is in RAM again; run the command.
    Promoted,
    /// The bytes are another key's (a tag collision): the key has no flash copy.
    NotThisKey,
    /// The copy expired or was flushed (dropped now).
    Expired,
    /// The bytes failed their check (dropped now): a miss, counted as `badcrc_from_extstore`.
    Corrupt,
    /// The slot changed meanwhile (rewritten, deleted or reclaimed): look again.
    Gone,
    /// Read this many bytes from the record's start and call again.
    NeedMore(u32),
    /// No RAM for it now (nothing could be evicted): served as a miss.
    NoMemory,
}

/// Flash tier statistics, memcached's extstore names where they mean the same
/// ([`crate::Stats::flash`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlashStats {
    /// Physical flash segments (extstore's pages).
    pub pages_total: u64,
    /// Segments holding items (written or being written).
    pub pages_used: u64,
    /// Segments free.
    pub pages_free: u64,
    /// Bytes per segment.
    pub page_size: u64,
    /// Items written to flash (`extstore_objects_written`).
    pub objects_written: u64,
    /// Items on flash that a hash slot still points to (`extstore_objects_used`).
    pub objects_used: u64,
    /// Bytes of items admitted to flash (records, before padding).
    pub item_bytes_admitted: u64,
    /// Bytes written to the device: whole segments (`extstore_bytes_written`).
    pub bytes_written: u64,
    /// Estimated bytes of live items on flash (`extstore_bytes_used`).
    pub bytes_used: u64,
    /// Flash reads checked (`extstore_objects_read`).
    pub objects_read: u64,
    /// Bytes read from flash (`extstore_bytes_read`).
    pub bytes_read: u64,
    /// Flash hits, served from flash or moved back to RAM (`get_extstore`).
    pub hits: u64,
    /// Flash hits moved back to RAM (`recache_from_extstore`).
    pub promotions: u64,
    /// Reads that found another key, or an expired item (`miss_from_extstore`).
    pub misses: u64,
    /// Reads whose bytes failed their check (`badcrc_from_extstore`).
    pub bad_checksums: u64,
    /// Reads that failed at the device (`get_aborted_extstore`).
    pub aborted: u64,
    /// Segments reclaimed (`extstore_page_reclaims`).
    pub page_reclaims: u64,
    /// Segments reclaimed while items were still live on them (`extstore_page_evictions`).
    pub page_evictions: u64,
    /// Live items lost when their segment was reclaimed (`extstore_objects_evicted`).
    pub objects_evicted: u64,
    /// Their record bytes, estimated from the segment's average record
    /// (`extstore_bytes_evicted`).
    pub bytes_evicted: u64,
    /// Segments dropped because every item expired or was flushed.
    pub pages_expired: u64,
    /// Demotions refused because the device lagged (write buffers full).
    pub write_lag_drops: u64,
    /// Demotions refused by the write budget.
    pub budget_drops: u64,
    /// Demotions refused because the chain already had a flash slot the item's key matches
    /// (the same tag and kept hash bits).
    pub tag_conflict_drops: u64,
    /// Flash slots a write or delete of their tag dropped.
    pub purged: u64,
    /// Segment writes that failed.
    pub write_errors: u64,
    /// Flash slots dropped by hash table growth.
    pub growth_drops: u64,
    /// Flash slots a new key's slot displaced from a full chain (the table is the flash
    /// items' index: [`FlashConfig::item_size_hint`] sizes it).
    pub index_drops: u64,
    /// Whole-table sweeps of dead flash slots.
    pub sweeps: u64,
}

impl FlashStats {
    /// Bytes written to flash per byte of items admitted (1.0 = no overhead).
    pub fn write_amplification(&self) -> f64 {
        if self.item_bytes_admitted == 0 {
            0.0
        } else {
            self.bytes_written as f64 / self.item_bytes_admitted as f64
        }
    }
}
