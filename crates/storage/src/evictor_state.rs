//! What eviction remembers between runs: the smooth weighted round-robin credit per TTL
//! bucket and when it last ran an expiration pass. Held in the engine state under the
//! eviction lock (`EngineState::lock_evictor`); only `evict.rs` reads or changes it.

use crate::ttl::N_BUCKETS;

/// Round-robin credit and the last expiration pass, kept between evictions.
pub(crate) struct EvictorState {
    /// Smooth weighted round-robin credit per TTL bucket (weights: chain lengths).
    pub credit: Vec<i64>,
    /// The clock second of the last expiration pass a writer's eviction ran.
    pub last_expire_pass: Option<u32>,
}

impl Default for EvictorState {
    fn default() -> Self {
        EvictorState {
            credit: vec![0; N_BUCKETS],
            last_expire_pass: None,
        }
    }
}
