//! Segment chains (one per TTL bucket, oldest first) and the pool of free segments.
//!
//! Both are protected by small mutexes held for a few pointer updates: segments are opened,
//! merged or retired once per megabyte of writes, so these locks are cold compared with the
//! per-request paths (the paper's "macro management").

use crate::segment::{SegmentHeader, NONE};
use crate::sync::{Mutex, MutexGuard};
use crate::ttl::N_BUCKETS;
use std::sync::atomic::Ordering;

/// The ends of one TTL bucket's chain.
#[derive(Debug)]
pub struct Chain {
    pub head: u32,
    pub tail: u32,
    /// Where the next merge in this bucket starts (the paper merges down the chain, so that
    /// a freshly merged segment is not merged again in the same round).
    pub merge_cursor: u32,
    pub segments: u32,
}

/// All TTL buckets' chains.
pub struct Chains {
    chains: Box<[Mutex<Chain>]>,
}

impl Chains {
    pub fn new() -> Chains {
        Chains {
            chains: (0..N_BUCKETS)
                .map(|_| {
                    Mutex::new(Chain {
                        head: NONE,
                        tail: NONE,
                        merge_cursor: NONE,
                        segments: 0,
                    })
                })
                .collect(),
        }
    }

    /// Locks bucket `b`'s chain.
    pub fn lock(&self, b: usize) -> MutexGuard<'_, Chain> {
        self.chains[b].lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Chain {
    /// Appends `id` at the tail (the newest end).
    pub fn push_back(&mut self, headers: &[SegmentHeader], id: u32) {
        let h = &headers[id as usize];
        h.prev.store(self.tail, Ordering::Relaxed);
        h.next.store(NONE, Ordering::Relaxed);
        if self.tail == NONE {
            self.head = id;
        } else {
            headers[self.tail as usize]
                .next
                .store(id, Ordering::Relaxed);
        }
        self.tail = id;
        self.segments += 1;
    }

    /// Inserts `id` just before `before`, which is in this chain.
    pub fn insert_before(&mut self, headers: &[SegmentHeader], id: u32, before: u32) {
        let b = &headers[before as usize];
        let prev = b.prev.load(Ordering::Relaxed);
        let h = &headers[id as usize];
        h.prev.store(prev, Ordering::Relaxed);
        h.next.store(before, Ordering::Relaxed);
        b.prev.store(id, Ordering::Relaxed);
        if prev == NONE {
            self.head = id;
        } else {
            headers[prev as usize].next.store(id, Ordering::Relaxed);
        }
        self.segments += 1;
    }

    /// Removes `id`, which is in this chain.
    pub fn unlink(&mut self, headers: &[SegmentHeader], id: u32) {
        let h = &headers[id as usize];
        let prev = h.prev.load(Ordering::Relaxed);
        let next = h.next.load(Ordering::Relaxed);
        if prev == NONE {
            self.head = next;
        } else {
            headers[prev as usize].next.store(next, Ordering::Relaxed);
        }
        if next == NONE {
            self.tail = prev;
        } else {
            headers[next as usize].prev.store(prev, Ordering::Relaxed);
        }
        if self.merge_cursor == id {
            self.merge_cursor = next;
        }
        h.prev.store(NONE, Ordering::Relaxed);
        h.next.store(NONE, Ordering::Relaxed);
        self.segments -= 1;
    }
}

/// Free segments. One segment stays in reserve for the evictor: a merge needs an empty
/// destination before it can free its sources.
pub struct FreePool {
    free: Mutex<Vec<u32>>,
    reserve: usize,
}

impl FreePool {
    pub fn new(segments: usize, reserve: usize) -> FreePool {
        // Hand out low ids first: touching the heap front to back keeps resident memory compact.
        FreePool {
            free: Mutex::new((0..segments as u32).rev().collect()),
            reserve,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Vec<u32>> {
        self.free.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A free segment for a writer, leaving the reserve alone.
    pub fn take(&self) -> Option<u32> {
        let mut free = self.lock();
        if free.len() > self.reserve {
            free.pop()
        } else {
            None
        }
    }

    /// A free segment for the evictor, which may use the reserve.
    pub fn take_reserved(&self) -> Option<u32> {
        self.lock().pop()
    }

    pub fn put(&self, id: u32) {
        self.lock().push(id);
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// The free list, in the order `take` would not hand it out (for a warm restart).
    pub fn list(&self) -> Vec<u32> {
        self.lock().clone()
    }

    /// A pool holding exactly `list`.
    pub fn from_list(list: Vec<u32>, reserve: usize) -> FreePool {
        FreePool {
            free: Mutex::new(list),
            reserve,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(chain: &Chain, headers: &[SegmentHeader]) -> Vec<u32> {
        let mut out = vec![];
        let mut at = chain.head;
        while at != NONE {
            out.push(at);
            at = headers[at as usize].next.load(Ordering::Relaxed);
        }
        out
    }

    #[test]
    fn chain_operations_keep_links_consistent() {
        let headers: Vec<SegmentHeader> = (0..6).map(|_| SegmentHeader::new()).collect();
        let chains = Chains::new();
        let mut c = chains.lock(3);
        for id in [0, 1, 2, 3] {
            c.push_back(&headers, id);
        }
        c.insert_before(&headers, 5, 1);
        assert_eq!(ids(&c, &headers), [0, 5, 1, 2, 3]);
        c.unlink(&headers, 0);
        c.unlink(&headers, 3);
        c.insert_before(&headers, 4, 5);
        assert_eq!(ids(&c, &headers), [4, 5, 1, 2]);
        assert_eq!((c.head, c.tail, c.segments), (4, 2, 4));
    }

    #[test]
    fn reserve_is_kept_for_the_evictor() {
        let pool = FreePool::new(2, 1);
        assert_eq!(pool.take(), Some(0));
        assert_eq!(pool.take(), None);
        assert_eq!(pool.take_reserved(), Some(1));
        assert_eq!(pool.take_reserved(), None);
    }
}
