//! memfleet-bench: memfleet's benchmarking tools.
//!
//! Today this is the in-process cache *simulator* behind `memfleet sim`
//! ([`sim`]): it replays recorded traces or seeded synthetic workloads through
//! cache models and reports miss ratios. It is not a network load generator and
//! it does not depend on the storage engine: the Segcache adapter is handed to
//! [`sim::run`] by the caller.

pub mod sim;
