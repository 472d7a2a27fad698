//! The slot encoding: what an item slot and a chain's info word hold, the tag of a key's
//! hash, and the hash function itself (xxh3, stable across processes and versions).
//!
//! ```text
//! info:  [cas:38][last access:16][item count:8][moved:1][lock:1]
//! item:  [segment:24][offset:20][counted:1][frequency:7][fetched:1][tag:11]
//! next:  [bucket index:52][tag = 0:12]
//! ```

/// The hash of a key (stable across processes and versions: xxh3).
#[inline]
pub fn hash(key: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(key)
}

pub(super) const SLOTS: usize = 8;
pub(super) const LOCK: u64 = 1;
pub(super) const MOVED: u64 = 2;
pub(super) const COUNT_SHIFT: u32 = 2;
pub(super) const TS_SHIFT: u32 = 10;
pub(super) const TS_MASK: u64 = 0xffff << TS_SHIFT;
/// The low 38 bits of the CAS unique of the chain's last write: the info word's top bits.
pub(super) const CAS_SHIFT: u32 = 26;
/// The low bits of a CAS unique a chain holds (`cas.rs`).
pub(super) const MAX_CHAIN_CAS: u64 = (1 << (64 - CAS_SHIFT)) - 1;

/// Low bits that are zero in a chain pointer (an item's tag and fetched bit).
pub(super) const TAG_BITS: u32 = 12;
pub(super) const TAG_MASK: u64 = (1 << TAG_BITS) - 1;
/// An item's tag: 11 bits of its hash.
pub(super) const ITEM_TAG_BITS: u32 = 11;
pub(super) const ITEM_TAG_MASK: u64 = (1 << ITEM_TAG_BITS) - 1;
/// memcached's `ITEM_FETCHED`: the item was read since it was written (meta `h`, `me`'s
/// `fetch=`). Taken from the tag's top bit: one more key comparison per 2 048 foreign slots
/// instead of per 4 096, and no byte more per item.
pub(super) const FETCHED: u64 = 1 << ITEM_TAG_BITS;
pub(super) const FREQ_SHIFT: u32 = 12;
pub(super) const FREQ_MASK: u64 = 0xff << FREQ_SHIFT;
pub(super) const OFFSET_SHIFT: u32 = 20;
pub(super) const OFFSET_BITS: u32 = 20;
pub(super) const SEG_SHIFT: u32 = 40;

/// The largest frequency: the slot's frequency byte is 7 bits of count and the
/// [`COUNTED`] mark.
pub const MAX_FREQ: u8 = 0x7f;
/// Set in a slot's frequency byte once an access was counted in the chain's current second
/// (the paper's smoothing: "incremented at most once per second" per object, with the last
/// access second shared by the bucket). Cleared for the whole chain when its second changes.
pub const COUNTED: u8 = 0x80;

/// Largest segment id a slot can hold.
pub const MAX_SEGMENTS: usize = 1 << 24;
/// Largest offset (in alignment units) a slot can hold.
pub const MAX_OFFSET_UNITS: usize = 1 << OFFSET_BITS;

/// A decoded item slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot(pub u64);

impl Slot {
    pub fn new(seg: u32, offset_units: u32, freq: u8, tag: u16) -> Slot {
        debug_assert!((seg as usize) < MAX_SEGMENTS);
        debug_assert!((offset_units as usize) < MAX_OFFSET_UNITS);
        debug_assert!(tag != 0 && u64::from(tag) <= ITEM_TAG_MASK);
        Slot(
            (u64::from(seg) << SEG_SHIFT)
                | (u64::from(offset_units) << OFFSET_SHIFT)
                | (u64::from(freq) << FREQ_SHIFT)
                | u64::from(tag),
        )
    }
    #[inline]
    pub fn seg(self) -> u32 {
        (self.0 >> SEG_SHIFT) as u32
    }
    #[inline]
    pub fn offset_units(self) -> u32 {
        ((self.0 >> OFFSET_SHIFT) & ((1 << OFFSET_BITS) - 1)) as u32
    }
    /// The item's access frequency (Segcache's ASFC, 0..=[`MAX_FREQ`]).
    #[inline]
    pub fn freq(self) -> u8 {
        ((self.0 & FREQ_MASK) >> FREQ_SHIFT) as u8 & MAX_FREQ
    }
    /// Whether an access was already counted in the chain's current second.
    #[inline]
    pub fn counted(self) -> bool {
        ((self.0 & FREQ_MASK) >> FREQ_SHIFT) as u8 & COUNTED != 0
    }
    #[inline]
    pub fn tag(self) -> u16 {
        (self.0 & ITEM_TAG_MASK) as u16
    }
    /// Whether the item was read since it was written (memcached's `ITEM_FETCHED`).
    #[inline]
    pub fn fetched(self) -> bool {
        self.0 & FETCHED != 0
    }
    /// The same slot marked fetched (or not).
    #[inline]
    pub fn with_fetched(self, fetched: bool) -> Slot {
        if fetched {
            Slot(self.0 | FETCHED)
        } else {
            Slot(self.0 & !FETCHED)
        }
    }
    /// The same slot with frequency `freq` and no [`COUNTED`] mark.
    #[inline]
    pub fn with_freq(self, freq: u8) -> Slot {
        debug_assert!(freq <= MAX_FREQ);
        Slot((self.0 & !FREQ_MASK) | (u64::from(freq) << FREQ_SHIFT))
    }
    /// The same slot with frequency `freq`, marked [`COUNTED`] for this second.
    #[inline]
    pub fn with_counted_freq(self, freq: u8) -> Slot {
        Slot(self.with_freq(freq).0 | (u64::from(COUNTED) << FREQ_SHIFT))
    }
    /// Same item location (ignores the frequency and the fetched mark).
    #[inline]
    pub fn same_location(self, other: Slot) -> bool {
        (self.0 & !(FREQ_MASK | FETCHED)) == (other.0 & !(FREQ_MASK | FETCHED))
    }
}

/// The 11-bit tag of a hash (never 0: 0 marks chain pointers).
#[inline]
pub fn tag_of(hash: u64) -> u16 {
    let tag = (hash >> (64 - ITEM_TAG_BITS)) as u16;
    if tag == 0 {
        1
    } else {
        tag
    }
}

#[inline]
pub(super) fn is_pointer(v: u64) -> bool {
    v != 0 && v & TAG_MASK == 0
}
