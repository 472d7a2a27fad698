//! CAS uniques: memcached's global counter, without a shared write on every store.
//!
//! memcached hands every write the next value of one counter (1, 2, 3, ...), so a CAS unique
//! is small, grows by one per write and differs between keys. Clients rely on all three: some
//! parse it into 32 bits (meta-memcache) or a signed 64-bit integer (Java's `long`), and
//! memcached's own `t/cas.t` compares two keys' uniques. One counter every worker writes
//! would cost a shared cache line per store (BENCHMARKS, "CAS uniques in write order"), so:
//!
//! - [`CasSequence`] is the engine's counter, but handles take values from it in blocks of
//!   [`BLOCK`] ([`CasBlock`]): one shared write per `BLOCK` stores of a handle.
//! - Each hash chain keeps the unique of its last write in its info word's top 38 bits
//!   (`slot.rs`), and a write sets it to `max(the handle's next value, the chain's + 1)`: a
//!   key's uniques only grow (never an ABA for a token a client holds), and two keys differ
//!   unless two handles' blocks crossed on one chain (then the later write takes the chain's
//!   next value, which another handle may also hand out).
//! - A chain holds only the low 38 bits; the full value is the largest number at or below the
//!   sequence's reserved mark with those bits ([`CasSequence::full`]). Every value a chain
//!   holds is at or below that mark, so this is exact for any chain written in the last 2^38
//!   (about 2.7 * 10^11) writes; a chain idle longer reads 2^38 higher, a change no client's
//!   `cas` can match (it fails safe, as after a write).
//!
//! The uniques stay at most `BLOCK` times the number of handles ever made above memcached's
//! counter after as many writes, and survive a warm restart (`persist.rs` saves the mark)
//! and table growth (both halves of a split chain keep its value).

use super::slot::MAX_CHAIN_CAS;
use crate::sync::atomic::AtomicU64;
use std::cell::Cell;
use std::sync::atomic::Ordering;

/// Values a handle takes from the sequence at once.
pub const BLOCK: u64 = 64;

/// The engine's CAS counter: every unique a chain holds is at or below [`Self::reserved`].
#[derive(Debug)]
pub struct CasSequence {
    reserved: AtomicU64,
}

impl CasSequence {
    /// A sequence whose first unique is `start + 1` (0: memcached's first unique, 1).
    pub fn new(start: u64) -> CasSequence {
        CasSequence {
            reserved: AtomicU64::new(start),
        }
    }

    /// The mark: every value handed out so far is at or below it.
    #[inline]
    pub fn reserved(&self) -> u64 {
        self.reserved.load(Ordering::Acquire)
    }

    /// Takes `n` new values; returns the first.
    fn reserve(&self, n: u64) -> u64 {
        self.reserved.fetch_add(n, Ordering::AcqRel) + 1
    }

    /// Raises the mark to `value` (a chain's next value past every handle's block).
    #[cfg(test)]
    fn cover(&self, value: u64) {
        if value > self.reserved.load(Ordering::Relaxed) {
            self.reserved.fetch_max(value, Ordering::AcqRel);
        }
    }

    /// The full unique of a chain holding `low` (its low 38 bits): the largest number at or
    /// below the mark with those bits, or 0 for a chain never written (no unique has low
    /// bits 0: `next_value` skips them). Read the chain's word (Acquire)
    /// first: the mark is then at least what the chain's writer reserved.
    #[inline]
    pub fn full(&self, low: u64) -> u64 {
        full_below(self.reserved.load(Ordering::Acquire), low)
    }

    /// The value a chain whose unique is `current` takes next, given a handle's proposal
    /// (0: none), with the mark raised to cover it. Never a multiple of 2^38, whose low bits
    /// would read as a chain never written.
    #[cfg(test)]
    pub(super) fn next_after(&self, current: u64, proposal: u64) -> u64 {
        let next = next_value(current, proposal);
        self.cover(next);
        next
    }

    /// For a chain holding `low`: its full unique and the one it takes next (as
    /// `next_after`), reading the mark once.
    #[inline]
    pub(super) fn advance(&self, low: u64, proposal: u64) -> (u64, u64) {
        let mark = self.reserved.load(Ordering::Acquire);
        let current = full_below(mark, low);
        let next = next_value(current, proposal);
        if next > mark {
            self.reserved.fetch_max(next, Ordering::AcqRel);
        }
        (current, next)
    }
}

#[inline]
fn full_below(mark: u64, low: u64) -> u64 {
    if low == 0 {
        0
    } else {
        mark - (mark.wrapping_sub(low) & MAX_CHAIN_CAS)
    }
}

#[inline]
fn next_value(current: u64, proposal: u64) -> u64 {
    let next = proposal.max(current + 1);
    next + u64::from(next & MAX_CHAIN_CAS == 0)
}

impl CasSequence {}

/// A handle's block of the sequence (`Send`, not `Sync`, like the handle).
#[derive(Debug, Default)]
pub struct CasBlock {
    next: Cell<u64>,
    end: Cell<u64>,
}

impl CasBlock {
    /// The handle's next value, taking a new block when this one is used up.
    #[inline]
    pub fn propose(&self, seq: &CasSequence) -> u64 {
        if self.next.get() >= self.end.get() {
            let start = seq.reserve(BLOCK);
            self.next.set(start);
            self.end.set(start + BLOCK);
        }
        self.next.get()
    }

    /// A chain took `value`: the block moves past it if it was in the block's rest.
    #[inline]
    pub fn taken(&self, value: u64) {
        if (self.next.get()..self.end.get()).contains(&value) {
            self.next.set(value + 1);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn full_values_come_back_from_their_low_bits() {
        let seq = CasSequence::new(0);
        assert_eq!(seq.full(0), 0);
        let block = CasBlock::default();
        let first = block.propose(&seq);
        assert_eq!(first, 1, "memcached's first unique");
        assert_eq!(seq.full(first & MAX_CHAIN_CAS), first);
        // Far past 2^38: values within 2^38 of the mark are exact.
        let seq = CasSequence::new(5 << 40);
        let v = seq.next_after(0, (5 << 40) - 7);
        assert_eq!(seq.full(v & MAX_CHAIN_CAS), v);
        // A multiple of 2^38 is skipped: its low bits would read as a chain never written.
        assert_eq!(seq.next_after(0, 5 << 40), (5 << 40) + 1);
        assert_eq!(seq.full(0), 0);
        let v = seq.next_after((5 << 40) + 1, 0);
        assert_eq!(v, (5 << 40) + 2);
        assert_eq!(
            seq.reserved(),
            v,
            "a chain's next value is covered by the mark"
        );
        assert_eq!(seq.full(v & MAX_CHAIN_CAS), v);
    }

    #[test]
    fn a_chain_only_grows_and_blocks_do_not_overlap() {
        let seq = CasSequence::new(0);
        let (a, b) = (CasBlock::default(), CasBlock::default());
        let (pa, pb) = (a.propose(&seq), b.propose(&seq));
        assert_eq!((pa, pb), (1, 1 + BLOCK));
        // b writes a chain first; a, whose block is older, then writes the same chain.
        let chain = seq.next_after(0, pb);
        b.taken(chain);
        let again = seq.next_after(chain, pa);
        assert_eq!(again, chain + 1, "never back below the chain's unique");
        a.taken(again);
        assert_eq!(a.propose(&seq), pa, "a's block was not used");
    }
}
