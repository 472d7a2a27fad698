//! An exact LRU cache *model* with a byte capacity, the baseline the simulator
//! compares Segcache against.
//!
//! Each item is charged `key_len + value_len + 56` bytes: 56 is memcached's
//! per-item header as counted in the Segcache paper (two LRU pointers, a hash
//! chain pointer, access and expiry times, sizes and CAS). Expiration is lazy: a
//! get that finds an expired item removes it and misses. To make room, the
//! least recently used items are evicted regardless of expiry, as memcached's
//! LRU tail does, except that up to five items at the tail are checked first and
//! an expired one among them is reclaimed instead (memcached's `lru_pull_tail`).
//! Every operation is O(1): a slab of nodes in a doubly linked list plus a hash
//! table of slab indices. Not modelled: slab classes and their rounding, so
//! this LRU wastes no memory to fragmentation and is an optimistic baseline.
//! Values are lengths only; no value bytes are stored.

use hashbrown::HashTable;
use xxhash_rust::xxh3::xxh3_64;

use super::replay::SimCache;

/// memcached's per-item header size charged to every item.
pub const ITEM_OVERHEAD: u64 = 56;
/// How many items at the tail are checked for expiry before evicting.
const TAIL_SCAN: usize = 5;
const NIL: u32 = u32::MAX;

struct Node {
    key: Box<[u8]>,
    hash: u64,
    charge: u64,
    /// Expired once `now >= expire_at`; `u32::MAX` means never.
    expire_at: u32,
    prev: u32,
    next: u32,
}

/// Counters of what the model did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LruStats {
    /// Live (unexpired) items evicted from the tail to make room.
    pub evictions: u64,
    /// Expired items reclaimed at the tail while making room.
    pub expired_reclaimed: u64,
    /// Expired items found (and removed) by a get.
    pub expired_on_get: u64,
    /// Sets dropped because the item alone exceeds the capacity.
    pub too_large: u64,
}

/// Exact LRU with lazy expiration and a byte capacity.
pub struct LruCache {
    capacity: u64,
    used: u64,
    now: u32,
    nodes: Vec<Node>,
    free: Vec<u32>,
    table: HashTable<u32>,
    /// Most recently used.
    head: u32,
    /// Least recently used.
    tail: u32,
    stats: LruStats,
}

impl LruCache {
    /// An empty cache holding at most `capacity` charged bytes.
    pub fn new(capacity: u64) -> Self {
        LruCache {
            capacity,
            used: 0,
            now: 0,
            nodes: Vec::new(),
            free: Vec::new(),
            table: HashTable::new(),
            head: NIL,
            tail: NIL,
            stats: LruStats::default(),
        }
    }

    /// Number of items held, expired or not.
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// Whether the cache holds no items.
    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// Charged bytes currently held.
    pub fn used_bytes(&self) -> u64 {
        self.used
    }

    /// The byte capacity.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// What the model has done so far.
    pub fn stats(&self) -> LruStats {
        self.stats
    }

    /// Whether `key` is held and unexpired, without touching recency.
    pub fn contains(&self, key: &[u8]) -> bool {
        self.find(xxh3_64(key), key)
            .is_some_and(|i| !self.expired(i))
    }

    /// Keys from most to least recently used (for tests and debugging).
    pub fn keys_mru(&self) -> Vec<Vec<u8>> {
        let mut out = Vec::with_capacity(self.len());
        let mut i = self.head;
        while i != NIL {
            out.push(self.nodes[i as usize].key.to_vec());
            i = self.nodes[i as usize].next;
        }
        out
    }

    fn find(&self, hash: u64, key: &[u8]) -> Option<u32> {
        let nodes = &self.nodes;
        self.table
            .find(hash, |&i| nodes[i as usize].key.as_ref() == key)
            .copied()
    }

    fn expired(&self, i: u32) -> bool {
        self.now >= self.nodes[i as usize].expire_at
    }

    fn unlink(&mut self, i: u32) {
        let (prev, next) = {
            let n = &self.nodes[i as usize];
            (n.prev, n.next)
        };
        match prev {
            NIL => self.head = next,
            p => self.nodes[p as usize].next = next,
        }
        match next {
            NIL => self.tail = prev,
            n => self.nodes[n as usize].prev = prev,
        }
    }

    fn push_front(&mut self, i: u32) {
        let old = self.head;
        {
            let n = &mut self.nodes[i as usize];
            n.prev = NIL;
            n.next = old;
        }
        match old {
            NIL => self.tail = i,
            o => self.nodes[o as usize].prev = i,
        }
        self.head = i;
    }

    fn remove(&mut self, i: u32) {
        self.unlink(i);
        let hash = self.nodes[i as usize].hash;
        if let Ok(entry) = self.table.find_entry(hash, |&j| j == i) {
            entry.remove();
        }
        let node = &mut self.nodes[i as usize];
        self.used -= node.charge;
        node.key = Box::default();
        self.free.push(i);
    }

    /// Frees room for `charge` more bytes, reclaiming expired tail items first.
    fn make_room(&mut self, charge: u64) {
        while self.used + charge > self.capacity && self.tail != NIL {
            let mut victim = self.tail;
            let mut cursor = self.tail;
            for _ in 0..TAIL_SCAN {
                if cursor == NIL {
                    break;
                }
                if self.expired(cursor) {
                    victim = cursor;
                    break;
                }
                cursor = self.nodes[cursor as usize].prev;
            }
            if self.expired(victim) {
                self.stats.expired_reclaimed += 1;
            } else {
                self.stats.evictions += 1;
            }
            self.remove(victim);
        }
    }
}

impl SimCache for LruCache {
    fn name(&self) -> String {
        "lru".into()
    }

    fn advance_to(&mut self, now: u32) {
        self.now = now;
    }

    fn get(&mut self, key: &[u8]) -> bool {
        let Some(i) = self.find(xxh3_64(key), key) else {
            return false;
        };
        if self.expired(i) {
            self.stats.expired_on_get += 1;
            self.remove(i);
            return false;
        }
        if self.head != i {
            self.unlink(i);
            self.push_front(i);
        }
        true
    }

    fn set(&mut self, key: &[u8], value_len: usize, ttl: u32) {
        let hash = xxh3_64(key);
        if let Some(old) = self.find(hash, key) {
            self.remove(old);
        }
        let charge = key.len() as u64 + value_len as u64 + ITEM_OVERHEAD;
        if charge > self.capacity {
            self.stats.too_large += 1;
            return;
        }
        self.make_room(charge);
        let expire_at = if ttl == 0 {
            u32::MAX
        } else {
            self.now.saturating_add(ttl)
        };
        let node = Node {
            key: key.into(),
            hash,
            charge,
            expire_at,
            prev: NIL,
            next: NIL,
        };
        let i = match self.free.pop() {
            Some(i) => {
                self.nodes[i as usize] = node;
                i
            }
            None => {
                self.nodes.push(node);
                (self.nodes.len() - 1) as u32
            }
        };
        let nodes = &self.nodes;
        self.table
            .insert_unique(hash, i, |&j| nodes[j as usize].hash);
        self.used += charge;
        self.push_front(i);
    }

    fn delete(&mut self, key: &[u8]) {
        if let Some(i) = self.find(xxh3_64(key), key) {
            self.remove(i);
        }
    }

    fn memory_used(&self) -> Option<u64> {
        Some(self.used)
    }

    fn items(&self) -> Option<u64> {
        Some(self.len() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Charge of a one-byte key with a value of `v` bytes.
    fn charge(v: u64) -> u64 {
        1 + v + ITEM_OVERHEAD
    }

    #[test]
    fn overhead_is_charged_per_item() {
        let mut c = LruCache::new(1 << 20);
        c.set(b"abc", 100, 0);
        assert_eq!(c.used_bytes(), 3 + 100 + 56);
        c.set(b"abc", 10, 0);
        assert_eq!(
            c.used_bytes(),
            3 + 10 + 56,
            "overwrite replaces the old charge"
        );
        c.set(b"de", 0, 0);
        assert_eq!(c.memory_used(), Some(3 + 10 + 56 + 2 + 56));
        assert_eq!(c.items(), Some(2));
        c.delete(b"abc");
        assert_eq!(c.used_bytes(), 2 + 56);
        assert_eq!(c.len(), 1);
    }

    #[test]
    fn capacity_is_respected_and_lru_is_evicted() {
        let mut c = LruCache::new(3 * charge(43));
        for k in [b"a", b"b", b"c"] {
            c.set(k, 43, 0);
        }
        assert_eq!(c.len(), 3);
        assert!(c.get(b"a"), "touch a so b becomes the LRU");
        c.set(b"d", 43, 0);
        assert!(c.used_bytes() <= c.capacity());
        assert!(!c.contains(b"b"));
        assert_eq!(
            c.keys_mru(),
            vec![b"d".to_vec(), b"a".to_vec(), b"c".to_vec()]
        );
        assert_eq!(c.stats().evictions, 1);
        // A bigger item pushes out two.
        c.set(b"e", 43 + charge(43) as usize, 0);
        assert_eq!(c.keys_mru(), vec![b"e".to_vec(), b"d".to_vec()]);
        assert!(c.used_bytes() <= c.capacity());
    }

    #[test]
    fn recency_order_follows_gets_and_sets() {
        let mut c = LruCache::new(1 << 20);
        for k in [b"1", b"2", b"3", b"4"] {
            c.set(k, 1, 0);
        }
        assert!(c.get(b"2"));
        assert!(c.get(b"4"));
        c.set(b"1", 5, 0);
        assert!(!c.get(b"9"));
        let order: Vec<u8> = c.keys_mru().into_iter().map(|k| k[0]).collect();
        assert_eq!(order, b"1423");
    }

    #[test]
    fn expiry_is_lazy_and_a_miss() {
        let mut c = LruCache::new(1 << 20);
        c.set(b"t", 10, 5);
        c.set(b"forever", 10, 0);
        c.advance_to(4);
        assert!(c.get(b"t"));
        c.advance_to(5);
        assert_eq!(c.len(), 2, "nothing is removed until looked at");
        assert!(!c.contains(b"t"));
        assert!(!c.get(b"t"));
        assert_eq!(c.len(), 1);
        assert_eq!(c.stats().expired_on_get, 1);
        c.advance_to(u32::MAX - 1);
        assert!(c.get(b"forever"));
    }

    #[test]
    fn expired_items_near_the_tail_are_reclaimed_before_live_ones() {
        let mut c = LruCache::new(4 * charge(43));
        c.set(b"a", 43, 0);
        c.set(b"b", 43, 10);
        c.set(b"c", 43, 0);
        c.set(b"d", 43, 0);
        c.advance_to(10);
        c.set(b"e", 43, 0);
        assert!(c.contains(b"a"), "the live LRU item survives");
        assert!(!c.contains(b"b"));
        assert_eq!(c.stats().expired_reclaimed, 1);
        assert_eq!(c.stats().evictions, 0);
        c.set(b"f", 43, 0);
        assert!(!c.contains(b"a"));
        assert_eq!(c.stats().evictions, 1);
    }

    #[test]
    fn too_large_items_are_dropped_and_slots_are_reused() {
        let mut c = LruCache::new(200);
        c.set(b"big", 500, 0);
        assert!(c.is_empty());
        assert_eq!(c.stats().too_large, 1);
        for round in 0..100u32 {
            c.set(&round.to_le_bytes(), 50, 0);
            assert!(c.used_bytes() <= 200);
        }
        assert_eq!(c.len(), 1);
        assert!(c.nodes.len() <= 2, "freed slots are reused");
    }
}
