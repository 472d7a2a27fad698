//! Engine settings: [`Config`], the errors a bad one gets ([`ConfigError`]), and the
//! [`Geometry`] a valid one gives the engine (segment count, offset alignment, table size).
//! Nothing here touches memory; `engine_state/` builds the engine from a geometry.

use crate::clock::Clock;
use crate::hashtable::{MAX_OFFSET_UNITS, MAX_SEGMENTS};

/// How the cache makes room when no free segment is left.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EvictionPolicy {
    /// Segcache's merge-based eviction (§3.6): merge N consecutive segments of one TTL
    /// bucket into one, keeping the items with the highest frequency per byte.
    Merge,
    /// Free the oldest segment whole (for comparison).
    Fifo,
    /// Never evict: writes fail with out-of-memory until expiration frees space.
    None,
}

/// Engine settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// The memory limit: the segment heap's size, in bytes.
    pub memory_bytes: usize,
    /// Bytes per segment (default 1 MiB). Also bounds the largest item.
    pub segment_size: usize,
    /// log2 of the initial number of hash buckets; derived from the memory size if unset.
    pub hash_power: Option<u32>,
    /// Segments' worth of live items ranked per merge eviction (Segcache's N, default 2; see
    /// `evict.rs`).
    pub merge_segments: usize,
    /// What to do when memory is full.
    pub eviction: EvictionPolicy,
    /// How early an item may expire, as a fraction 1/2^shift of its TTL bucket's lower bound
    /// (rounded down: none below 8 s at the default). Smaller shifts fill sparse TTL buckets' segments better at the
    /// cost of earlier expiry; see `ttl.rs`. Default 3 (1/8).
    pub expiry_precision_shift: u32,
    /// The clock (system by default; tests use a manual one).
    pub clock: Clock,
    /// Seconds a lease token stays the only one for its key (Facebook §3.2.1: "once every 10
    /// seconds per key"); later misses are hot misses. Default 10.
    pub lease_interval: u32,
    /// Seconds a deleted value is kept for lease reads to serve as stale (0: deletes drop the
    /// value at once, as memcached). Default 0 (the server turns it on).
    pub stale_after_delete: u32,
    /// A flash tier under the heap (see `flash/`): what eviction would drop goes there.
    pub flash: Option<crate::flash::FlashConfig>,
    /// Where the CAS sequence starts (default 0: the first write's CAS unique is 1, as
    /// memcached's). Tests set it high to see CAS uniques above 2^31 or 2^32 without
    /// writing billions of times; at most 2^62.
    pub cas_start: u64,
}

impl Config {
    /// Defaults for a cache of `memory_bytes`.
    pub fn new(memory_bytes: usize) -> Config {
        Config {
            memory_bytes,
            segment_size: 1 << 20,
            hash_power: None,
            merge_segments: 2,
            eviction: EvictionPolicy::Merge,
            expiry_precision_shift: crate::ttl::DEFAULT_PRECISION_SHIFT,
            clock: Clock::system(),
            lease_interval: 10,
            stale_after_delete: 0,
            flash: None,
            cas_start: 0,
        }
    }

    /// Puts a flash tier under the heap (see [`Config::flash`]).
    pub fn flash(mut self, flash: crate::flash::FlashConfig) -> Config {
        self.flash = Some(flash);
        self
    }

    /// Sets the lease interval (see [`Config::lease_interval`]; at least 1 second).
    pub fn lease_interval(mut self, secs: u32) -> Config {
        self.lease_interval = secs.max(1);
        self
    }

    /// Sets how long deleted values stay readable as stale (see
    /// [`Config::stale_after_delete`]).
    pub fn stale_after_delete(mut self, secs: u32) -> Config {
        self.stale_after_delete = secs;
        self
    }

    /// Sets where CAS counters start (see [`Config::cas_start`]).
    pub fn cas_start(mut self, start: u64) -> Config {
        self.cas_start = start.min(1 << 62);
        self
    }

    /// Sets the segment size.
    pub fn segment_size(mut self, bytes: usize) -> Config {
        self.segment_size = bytes;
        self
    }

    /// Sets the clock.
    pub fn clock(mut self, clock: Clock) -> Config {
        self.clock = clock;
        self
    }

    /// Sets the eviction policy.
    pub fn eviction(mut self, policy: EvictionPolicy) -> Config {
        self.eviction = policy;
        self
    }

    /// Sets the initial hash table size (2^power buckets of 7 items).
    pub fn hash_power(mut self, power: u32) -> Config {
        self.hash_power = Some(power);
        self
    }

    /// Sets the expiry precision (see [`Config::expiry_precision_shift`]).
    pub fn expiry_precision_shift(mut self, shift: u32) -> Config {
        self.expiry_precision_shift = shift;
        self
    }

    /// Sets the number of segments merged per eviction.
    pub fn merge_segments(mut self, n: usize) -> Config {
        self.merge_segments = n;
        self
    }
}

/// A configuration the engine cannot run with.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    /// The segment size is out of range.
    #[error("segment size must be a multiple of 4096 between 16 KiB and 1 GiB, got {0}")]
    SegmentSize(usize),
    /// Not enough memory for the minimum number of segments.
    #[error("memory limit {memory} holds fewer than {min} segments of {segment} bytes")]
    TooLittleMemory {
        /// The memory limit asked for.
        memory: usize,
        /// The segment size.
        segment: usize,
        /// The minimum segment count.
        min: usize,
    },
    /// More segments than a hash slot can address.
    #[error("memory limit needs more than {MAX_SEGMENTS} segments; use larger segments")]
    TooManySegments,
    /// Merge count out of range.
    #[error("merge_segments must be between 2 and 16, got {0}")]
    MergeSegments(usize),
    /// Expiry precision out of range.
    #[error("expiry_precision_shift must be at most 16, got {0}")]
    ExpiryPrecision(u32),
    /// Hash power out of range.
    #[error("hash_power must be between 4 and 30, got {0}")]
    HashPower(u32),
    /// The flash tier has more segments than a hash slot can name.
    #[error("flash holds {places} segments: too many for {segment}-byte segments beside {ram} in RAM; use larger segments")]
    FlashTooLarge {
        /// Flash segments.
        places: usize,
        /// RAM segments.
        ram: usize,
        /// The segment size.
        segment: usize,
    },
    /// A memory mapping of the wrong size.
    #[error("the memory file mapping has {have} bytes, the heap needs {want}")]
    MappingSize {
        /// Bytes mapped.
        have: usize,
        /// Bytes needed.
        want: usize,
    },
}

/// The shape a configuration gives the engine: checked once, shared by a new cache and a
/// restored one (which must have the same shape as the one saved).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Geometry {
    pub segments: usize,
    pub align_shift: u32,
    pub power: u32,
    pub max_power: u32,
}

impl Geometry {
    pub(crate) fn of(config: &Config) -> Result<Geometry, ConfigError> {
        let seg = config.segment_size;
        if !seg.is_multiple_of(4096) || !(16 << 10..=1 << 30).contains(&seg) {
            return Err(ConfigError::SegmentSize(seg));
        }
        let segments = config.memory_bytes / seg;
        if segments < MIN_SEGMENTS {
            return Err(ConfigError::TooLittleMemory {
                memory: config.memory_bytes,
                segment: seg,
                min: MIN_SEGMENTS,
            });
        }
        if segments > MAX_SEGMENTS {
            return Err(ConfigError::TooManySegments);
        }
        if config.expiry_precision_shift > 16 {
            return Err(ConfigError::ExpiryPrecision(config.expiry_precision_shift));
        }
        if !(2..=16).contains(&config.merge_segments) {
            return Err(ConfigError::MergeSegments(config.merge_segments));
        }
        let unit = seg.div_ceil(MAX_OFFSET_UNITS).next_power_of_two();
        let align_shift = unit.trailing_zeros();
        let flash_places = config
            .flash
            .as_ref()
            .map_or(0, |f| f.sink.places() as usize);
        if flash_places > 0 && crate::flash::laps_for(segments, flash_places) < 4 {
            return Err(ConfigError::FlashTooLarge {
                places: flash_places,
                ram: segments,
                segment: seg,
            });
        }
        let flash_bytes = flash_places * seg;
        // Flash items are sized for from the start: growth cannot rehash them (their keys
        // are on flash), so a table too small for them loses some at each doubling.
        // With flash, the table is the flash items' index: a full flash of items of the
        // hinted size fills its 7 slots a bucket between 57% and 114% (a power of two of
        // buckets for 8 items each), so a flash item costs RAM 8-16 bytes of table; a chain
        // that runs out of room drops a flash slot once the overflow buckets run half full
        // (`demote.rs`).
        let flash_buckets = config
            .flash
            .as_ref()
            .map_or(0, |f| flash_bytes / (8 * f.item_size_hint.max(64)));
        // Start with one bucket per 4 KiB of heap (room for items averaging 1 KiB at ~4 per
        // bucket); the table doubles as small items arrive.
        let max_items = (config.memory_bytes + flash_bytes) / 16;
        let max_power = (max_items / 4)
            .max(16)
            .next_power_of_two()
            .trailing_zeros()
            .min(30);
        let power = match config.hash_power {
            Some(p) if !(4..=30).contains(&p) => return Err(ConfigError::HashPower(p)),
            Some(p) => p,
            None => (config.memory_bytes / 4096 + flash_buckets)
                .max(1024)
                .next_power_of_two()
                .trailing_zeros()
                .min(max_power),
        };
        Ok(Geometry {
            segments,
            align_shift,
            power,
            max_power,
        })
    }
}

/// Fewest segments a cache can run with: room for a few active segments and a merge.
pub const MIN_SEGMENTS: usize = 8;
