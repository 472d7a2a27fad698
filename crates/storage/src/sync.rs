//! The synchronisation primitives of the engine's concurrent protocols: the atomics of segment
//! headers (reader counts, sealing, life cycle) and hash chains (slots, the chain lock), the
//! mutexes of chains, the free pool and eviction, and the spin-waits. They come from `std`,
//! and from [loom](https://docs.rs/loom) when the crate is built with `--cfg loom`, so that
//! `loom/tests/loom_protocol.rs` model-checks the engine's own code, orderings included, rather
//! than a copy of it. Nothing else differs between the two builds.
//!
//! Counters, the clock, the ghosts and the active-segment places keep `std` atomics in both
//! builds: they carry no hand-off of item bytes, and as loom objects they would only slow the
//! model down.

/// Atomic integers (`Ordering` is `std`'s in both builds).
#[cfg(not(loom))]
pub(crate) mod atomic {
    pub(crate) use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize};
}

/// Atomic integers (`Ordering` is `std`'s in both builds).
#[cfg(loom)]
pub(crate) mod atomic {
    pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize};
}

#[cfg(not(loom))]
pub(crate) use std::sync::{Mutex, MutexGuard};

#[cfg(loom)]
pub(crate) use loom::sync::{Mutex, MutexGuard};

/// Between the two halves of a store-then-load handshake done with `SeqCst` accesses (a
/// reader's reference against a retirement's drain, a writer's reservation against a seal):
/// nothing in the `std` build, where `SeqCst` accesses are already in one total order. Loom
/// treats `SeqCst` accesses as `AcqRel` (its README, "Unsupported features"), which would let
/// both sides miss each other; its `SeqCst` fence restores the order the real build relies on.
#[inline]
pub(crate) fn seq_cst_handshake() {
    #[cfg(loom)]
    loom::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
}

/// One turn of a spin-wait that has turned `*spins` times so far: a CPU spin hint for the
/// first `limit` turns, then a yield to the scheduler. Under loom every turn yields, so that
/// the model checker runs the thread being waited for.
#[inline]
pub(crate) fn spin_wait(spins: &mut u32, limit: u32) {
    #[cfg(loom)]
    {
        let _ = (spins, limit);
        loom::thread::yield_now();
    }
    #[cfg(not(loom))]
    {
        *spins += 1;
        if *spins < limit {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}
