//! Ghost frequencies: what the cache remembers of the keys it evicted.
//!
//! A merge drops the items it values least, most of them never read since they were written.
//! Under look-aside traffic a dropped key that is read again misses, is filled, and arrives
//! with a frequency of zero, so the next merge that reaches it drops it again, however often
//! it comes back. S3-FIFO's ghost queue (Yang et al., SOSP'23) answers this: remember the
//! fingerprints of evicted keys, and let a key that returns while remembered skip probation.
//!
//! Here the memory is a direct-mapped table of 32-bit words, one per [`BYTES_PER_GHOST`]
//! bytes of heap (about 1.5% of the heap; outside it, like the hash table): a 24-bit
//! fingerprint of the key and the frequency it had when evicted. A newer eviction that maps
//! to the same word replaces the older one, so the table holds roughly the most recent
//! evictions, as a FIFO ghost queue would. A new key whose fingerprint is found starts with
//! the remembered frequency plus one (the miss that brought it back), and the word is
//! cleared. Races between handles can lose or overwrite a ghost; that costs a hint, never
//! correctness, so plain relaxed atomics suffice.

use crate::hashtable::MAX_FREQ;
use std::sync::atomic::{AtomicU32, Ordering};

/// Heap bytes per ghost word.
pub(crate) const BYTES_PER_GHOST: usize = 256;

/// Fingerprints and frequencies of recently evicted keys.
pub(crate) struct Ghosts {
    words: Box<[AtomicU32]>,
    mask: usize,
}

impl Ghosts {
    /// A table for a heap of `heap_bytes`.
    pub fn for_heap(heap_bytes: usize) -> Ghosts {
        let n = (heap_bytes / BYTES_PER_GHOST).max(1024).next_power_of_two();
        Ghosts {
            words: (0..n).map(|_| AtomicU32::new(0)).collect(),
            mask: n - 1,
        }
    }

    /// Bytes the table takes.
    pub fn bytes(&self) -> usize {
        self.words.len() * std::mem::size_of::<AtomicU32>()
    }

    /// Where `hash` lives and the word it is remembered as (never 0, which means empty).
    /// The hash table indexes chains by the hash's low bits, so the ghost uses the high ones.
    fn place(&self, hash: u64) -> (usize, u32) {
        let index = (hash >> 32) as usize & self.mask;
        let fingerprint = ((hash >> 8) as u32 & 0x00ff_fffe) | 1;
        (index, fingerprint << 8)
    }

    /// Remembers that the key of `hash` was evicted with frequency `freq`.
    pub fn remember(&self, hash: u64, freq: u8) {
        let (index, word) = self.place(hash);
        self.words[index].store(word | u32::from(freq), Ordering::Relaxed);
    }

    /// The frequency a new key of `hash` starts with: one more than it had when evicted if it
    /// is remembered (and then forgotten), else 0.
    pub fn recall(&self, hash: u64) -> u8 {
        let (index, word) = self.place(hash);
        let cell = &self.words[index];
        let found = cell.load(Ordering::Relaxed);
        if found & !0xff != word {
            return 0;
        }
        cell.store(0, Ordering::Relaxed);
        ((found & 0xff) as u8).saturating_add(1).min(MAX_FREQ)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_evicted_keys_once() {
        let g = Ghosts::for_heap(1 << 20);
        assert_eq!(g.bytes(), 4096 * 4);
        let h = 0x1234_5678_9abc_def0;
        assert_eq!(g.recall(h), 0);
        g.remember(h, 0);
        assert_eq!(g.recall(h), 1);
        assert_eq!(g.recall(h), 0, "a ghost is recalled once");
        g.remember(h, 5);
        assert_eq!(g.recall(h), 6);
        g.remember(h, MAX_FREQ);
        assert_eq!(g.recall(h), MAX_FREQ);
    }

    #[test]
    fn a_different_key_in_the_same_word_is_not_recalled() {
        let g = Ghosts::for_heap(1 << 20);
        let a = 0x0000_0001_0000_0100u64;
        let b = 0x0000_0001_0000_0200u64; // same index, other fingerprint
        g.remember(a, 3);
        assert_eq!(g.recall(b), 0);
        g.remember(b, 2);
        assert_eq!(g.recall(a), 0, "b replaced a");
        assert_eq!(g.recall(b), 3);
    }
}
