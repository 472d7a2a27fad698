//! Model-based (state-machine) property test of the engine's memcached semantics.
//!
//! Random sequences of set/add/replace/append/prepend/cas/incr/decr/delete/touch/gat/get,
//! `flush_all(0)`, proactive expiration passes and clock advances run against one [`Handle`]
//! on a manual clock and, in lock step, against a plain `HashMap` reference model. The cache
//! has 256 segments of 64 KiB (16 MiB) and a case writes at most about 1.5 MiB (plus one
//! partly used segment per TTL bucket it touches), so nothing is ever evicted (checked at
//! the end of every case). The heap is kept small because the engine zeroes it eagerly at
//! creation (see `memory.rs`), which would dominate the run time at 64 MiB per case.
//!
//! **TTLs.** The engine never serves an item at or past its deadline, but may expire it early:
//! a segment expires at the earliest deadline of the items in it, and a segment accepts items
//! only while its deadlines stay within the TTL bucket's tolerance (`max(1, lower_bound >>
//! expiry_precision_shift)`, see `src/ttl.rs`; each case runs with the default shift or a
//! random one in 0..=6). The model therefore keeps, per key, the exact deadline `hi` and the
//! earliest time `lo` the engine may legitimately drop the item. Before `lo` the engine must
//! answer exactly like the model; at or after `hi` the key must be gone; inside `[lo, hi)` the
//! model is uncertain, asks the engine (a `get`), accepts either answer and resyncs to it.
//!
//! Rewrites that keep the expiry (incr, decr, append, prepend) keep the deadline `hi`, but the
//! engine can only carry over the *effective* deadline of an item written by a plain store
//! (it stores no per-item deadline for those), and the rewritten copy can land in a segment
//! whose earliest deadline is lower again. The model widens `lo` accordingly (see
//! [`Entry::rewritten`]); that this can break the documented bound is demonstrated separately
//! by the ignored test `rewrite_keeps_the_documented_expiry_bound` below.
//!
//! **CAS.** CAS values live in the hash bucket and are shared by its keys, so the twelve keys
//! used here were chosen (offline, with xxh3) to fall into twelve different buckets of the
//! initial table; `keys_have_independent_cas_values` checks that assumption through the API.
//!
//! At the end of each case every key is compared once more, an expiration pass is run, and
//! the engine's item and byte counts must equal the model's exactly.

use memfleet_storage::{
    Cache, Clock, Config, DeltaError, Expiry, Handle, ItemRef, StoreMode, StoreStatus,
};
use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, RngSeed, TestCaseError};
use std::collections::HashMap;

/// Keys whose xxh3 hashes differ in the low 10 bits (the table starts with ≥ 1024 buckets,
/// 2^12 for a 16 MiB cache), computed once with a scratch program:
/// key0→710 key1→482 key2→105 key3→28 key4→277 key5→487 key6→405 key7→505 key8→729
/// key9→94 key10→793 key11→498.
const KEYS: [&[u8]; 12] = [
    b"key0", b"key1", b"key2", b"key3", b"key4", b"key5", b"key6", b"key7", b"key8", b"key9",
    b"key10", b"key11",
];

const NEVER: u32 = u32::MAX;

/// The tolerance of the TTL bucket an item with `ttl` seconds left goes to, from the table
/// in `src/ttl.rs` (groups of 256 buckets, 4/64/1024/16384 s wide; 1/2^shift of the bucket's
/// lower bound, at least 1 s).
fn tolerance(ttl: u32, shift: u32) -> u32 {
    const G1: u32 = 1024;
    const G2: u32 = G1 + 256 * 64;
    const G3: u32 = G2 + 256 * 1024;
    let lower = if ttl < G1 {
        ttl / 4 * 4
    } else if ttl < G2 {
        G1 + (ttl - G1) / 64 * 64
    } else if ttl < G3 {
        G2 + (ttl - G2) / 1024 * 1024
    } else {
        G3 + ((ttl - G3) / 16384).min(254) * 16384
    };
    lower >> shift
}

/// memcached's `safe_strtoull`: optional leading whitespace and sign, decimal digits, then
/// whitespace or the end; a `-` that makes the number wrap is refused.
fn memcached_number(v: &[u8]) -> Option<u64> {
    let space = |b: u8| matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c);
    let mut i = v.iter().take_while(|&&b| space(b)).count();
    let negative = v.get(i) == Some(&b'-');
    if matches!(v.get(i), Some(b'-') | Some(b'+')) {
        i += 1;
    }
    let digits = v[i..].iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 {
        return None;
    }
    let mut n: u64 = 0;
    for &d in &v[i..i + digits] {
        n = n.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
    }
    if let Some(&next) = v.get(i + digits) {
        if !space(next) {
            return None;
        }
    }
    let n = if negative { n.wrapping_neg() } else { n };
    if negative && (n as i64) < 0 {
        return None;
    }
    Some(n)
}

/// The model's view of one key.
#[derive(Clone, Debug)]
struct Entry {
    value: Vec<u8>,
    flags: u32,
    /// The exact deadline (`NEVER`: none). The engine must not serve the item at or after it.
    hi: u32,
    /// The engine must serve the item while `now < lo`.
    lo: u32,
    /// A lower bound for the deadline a rewrite carries over (the engine's own deadline).
    base_lo: u32,
    /// The stored item carries its own 4-byte deadline (written by a rewrite).
    own: bool,
}

impl Entry {
    /// An item written by a store (or touch) at `now` with `expiry`; `None` when the expiry
    /// is in the past, which deletes the key.
    fn stored(value: Vec<u8>, flags: u32, expiry: Expiry, now: u32, shift: u32) -> Option<Entry> {
        let (hi, lo) = match expiry {
            Expiry::Never | Expiry::After(0) => (NEVER, NEVER),
            Expiry::After(s) => (now + s, (now + s).saturating_sub(tolerance(s, shift))),
            Expiry::Expired => return None,
            Expiry::AtUnix(_) => unreachable!("not generated"),
        };
        Some(Entry {
            value,
            flags,
            hi,
            lo,
            base_lo: lo,
            own: false,
        })
    }

    /// The same item after a rewrite that keeps its expiry (incr, decr, append, prepend).
    ///
    /// The engine carries over the item's own deadline if it has one, else the segment's
    /// (effective) deadline; both are `>= base_lo`. The new copy then lands in a segment of
    /// the bucket for the remaining TTL, whose earliest deadline may be up to that bucket's
    /// tolerance lower.
    fn rewritten(&self, value: Vec<u8>, now: u32, shift: u32) -> Entry {
        let mut e = self.clone();
        e.value = value;
        if self.hi != NEVER {
            e.lo = self.base_lo.saturating_sub(tolerance(self.hi - now, shift));
            e.own = true;
        }
        e
    }

    /// Bytes the item takes in a segment: 5-byte header, optional 4-byte own deadline,
    /// 0/1/2/4 bytes of client flags, key, value (see the crate docs).
    fn stored_len(&self, key: &[u8]) -> u64 {
        let flags = match self.flags {
            0 => 0,
            1..=0xff => 1,
            0x100..=0xffff => 2,
            _ => 4,
        };
        (5 + if self.own { 4 } else { 0 } + flags + key.len() + self.value.len()) as u64
    }
}

#[derive(Clone, Debug)]
enum Op {
    Set(usize, Vec<u8>, u32, Expiry),
    Add(usize, Vec<u8>, u32, Expiry),
    Replace(usize, Vec<u8>, u32, Expiry),
    /// Flags and expiry are passed but must be ignored.
    Append(usize, Vec<u8>, u32, Expiry),
    Prepend(usize, Vec<u8>, u32, Expiry),
    /// `true`: the CAS value the last get/gat of the key returned; `false`: a wrong one.
    Cas(usize, Vec<u8>, u32, Expiry, bool),
    Incr(usize, u64),
    Decr(usize, u64),
    Delete(usize),
    Touch(usize, Expiry),
    Gat(usize, Expiry),
    Get(usize),
    FlushAll,
    Expire,
    Advance(u32),
}

fn key() -> impl Strategy<Value = usize> {
    0..KEYS.len()
}

fn value() -> impl Strategy<Value = Vec<u8>> {
    let numbers = vec![
        "0",
        "1",
        "9",
        "10",
        "99",
        "100",
        "999",
        "1000",
        "007",
        " 42",
        "+5",
        "-0",
        "-1",
        "18446744073709551614",
        "18446744073709551615",
        "18446744073709551616",
    ];
    prop_oneof![
        4 => prop::sample::select(numbers).prop_map(|s| s.as_bytes().to_vec()),
        4 => prop::collection::vec(prop::sample::select(b"abz019 -".to_vec()), 0..10),
        1 => (1000usize..4000, any::<u8>()).prop_map(|(n, b)| vec![b; n]),
    ]
}

fn flags() -> impl Strategy<Value = u32> {
    prop_oneof![
        4 => Just(0u32),
        1 => Just(1u32),
        1 => Just(255u32),
        1 => Just(256u32),
        1 => Just(65_535u32),
        1 => Just(65_536u32),
        1 => Just(u32::MAX),
        1 => any::<u32>(),
    ]
}

fn expiry() -> impl Strategy<Value = Expiry> {
    prop_oneof![
        3 => Just(Expiry::Never),
        1 => Just(Expiry::After(0)),
        6 => (1u32..=30).prop_map(Expiry::After),
        2 => Just(Expiry::After(100)),
        2 => Just(Expiry::After(3600)),
        1 => Just(Expiry::Expired),
    ]
}

fn delta() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        Just(1u64),
        Just(2u64),
        Just(10u64),
        Just(1000u64),
        Just(u64::MAX),
        any::<u64>(),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (key(), value(), flags(), expiry()).prop_map(|(k, v, f, e)| Op::Set(k, v, f, e)),
        3 => (key(), value(), flags(), expiry()).prop_map(|(k, v, f, e)| Op::Add(k, v, f, e)),
        3 => (key(), value(), flags(), expiry()).prop_map(|(k, v, f, e)| Op::Replace(k, v, f, e)),
        3 => (key(), value(), flags(), expiry()).prop_map(|(k, v, f, e)| Op::Append(k, v, f, e)),
        2 => (key(), value(), flags(), expiry()).prop_map(|(k, v, f, e)| Op::Prepend(k, v, f, e)),
        4 => (key(), value(), flags(), expiry(), any::<bool>())
            .prop_map(|(k, v, f, e, good)| Op::Cas(k, v, f, e, good)),
        4 => (key(), delta()).prop_map(|(k, d)| Op::Incr(k, d)),
        3 => (key(), delta()).prop_map(|(k, d)| Op::Decr(k, d)),
        2 => key().prop_map(Op::Delete),
        2 => (key(), expiry()).prop_map(|(k, e)| Op::Touch(k, e)),
        2 => (key(), expiry()).prop_map(|(k, e)| Op::Gat(k, e)),
        8 => key().prop_map(Op::Get),
        1 => Just(Op::FlushAll),
        1 => Just(Op::Expire),
        5 => (0u32..=40).prop_map(Op::Advance),
    ]
}

/// A CAS value no engine CAS can equal (they are 32-bit counters).
const WRONG_CAS: u64 = 1 << 40;

struct Harness {
    cache: Cache,
    clock: Clock,
    handle: Handle,
    now: u32,
    /// The cache's `expiry_precision_shift`.
    shift: u32,
    model: HashMap<usize, Entry>,
    /// Per key: the CAS value its last get/gat returned, and whether it is still current.
    cas: [Option<(u64, bool)>; 12],
}

impl Harness {
    fn new(shift: Option<u32>) -> Harness {
        let clock = Clock::manual();
        let mut config = Config::new(16 << 20)
            .segment_size(64 << 10)
            .clock(clock.clone());
        if let Some(shift) = shift {
            config = config.expiry_precision_shift(shift);
        }
        let cache = Cache::new(config).unwrap();
        let handle = cache.handle();
        Harness {
            shift: cache.config().expiry_precision_shift,
            cache,
            clock,
            handle,
            now: 0,
            model: HashMap::new(),
            cas: [None; 12],
        }
    }

    /// Records that the key's value changed (the bucket's CAS value moved on).
    fn changed(&mut self, k: usize) {
        if let Some((_, current)) = &mut self.cas[k] {
            *current = false;
        }
    }

    /// Checks a present item against the model's entry.
    fn check_item(now: u32, k: usize, item: &ItemRef<'_>, e: &Entry) -> Result<(), TestCaseError> {
        prop_assert_eq!(item.key(), KEYS[k]);
        prop_assert_eq!(item.value(), &e.value[..], "value of key{}", k);
        prop_assert_eq!(item.flags(), e.flags, "flags of key{}", k);
        prop_assert_eq!(item.marks(), 0);
        match item.ttl_remaining(now) {
            None => prop_assert_eq!(e.hi, NEVER, "key{} should expire", k),
            Some(left) => {
                prop_assert!(e.hi != NEVER, "key{} should never expire", k);
                let deadline = now + left;
                prop_assert!(
                    left > 0 && deadline <= e.hi && deadline >= e.lo.min(e.hi),
                    "key{}: engine deadline {} outside [{}, {}] at {}",
                    k,
                    deadline,
                    e.lo,
                    e.hi,
                    now
                );
            }
        }
        Ok(())
    }

    /// Brings the model's entry for `k` up to date with the clock: drops it once past its
    /// deadline, and inside the uncertainty window asks the engine and follows its answer.
    fn settle(&mut self, k: usize) -> Result<(), TestCaseError> {
        let now = self.now;
        let Some(e) = self.model.get(&k) else {
            return Ok(());
        };
        if e.hi != NEVER && now >= e.hi {
            self.model.remove(&k);
        } else if e.hi != NEVER && now >= e.lo {
            match self.handle.get(KEYS[k]) {
                Some(item) => Self::check_item(now, k, &item, e)?,
                None => {
                    self.model.remove(&k);
                }
            }
        }
        Ok(())
    }

    fn present(&self, k: usize) -> bool {
        self.model.contains_key(&k)
    }

    fn run(&mut self, op: &Op) -> Result<(), TestCaseError> {
        let now = self.now;
        match op.clone() {
            Op::Set(k, v, f, e) => {
                let got = self.handle.set(KEYS[k], &v, f, e).unwrap();
                prop_assert_eq!(got, StoreStatus::Stored);
                self.put(k, Entry::stored(v, f, e, now, self.shift));
            }
            Op::Add(k, v, f, e) => {
                self.settle(k)?;
                let got = self
                    .handle
                    .store(StoreMode::Add, KEYS[k], &v, f, e)
                    .unwrap();
                if self.present(k) {
                    prop_assert_eq!(got, StoreStatus::NotStored);
                } else {
                    prop_assert_eq!(got, StoreStatus::Stored);
                    self.put(k, Entry::stored(v, f, e, now, self.shift));
                }
            }
            Op::Replace(k, v, f, e) => {
                self.settle(k)?;
                let got = self
                    .handle
                    .store(StoreMode::Replace, KEYS[k], &v, f, e)
                    .unwrap();
                if self.present(k) {
                    prop_assert_eq!(got, StoreStatus::Stored);
                    self.put(k, Entry::stored(v, f, e, now, self.shift));
                } else {
                    prop_assert_eq!(got, StoreStatus::NotStored);
                }
            }
            Op::Append(k, v, f, e) | Op::Prepend(k, v, f, e) => {
                let append = matches!(op, Op::Append(..));
                self.settle(k)?;
                let mode = if append {
                    StoreMode::Append
                } else {
                    StoreMode::Prepend
                };
                let got = self.handle.store(mode, KEYS[k], &v, f, e).unwrap();
                match self.model.get(&k) {
                    Some(old) => {
                        prop_assert_eq!(got, StoreStatus::Stored);
                        let joined = if append {
                            [&old.value[..], &v[..]].concat()
                        } else {
                            [&v[..], &old.value[..]].concat()
                        };
                        let new = old.rewritten(joined, now, self.shift);
                        self.put(k, Some(new));
                    }
                    None => prop_assert_eq!(got, StoreStatus::NotStored),
                }
            }
            Op::Cas(k, v, f, e, good) => {
                self.settle(k)?;
                let (cas, current) = match (good, self.cas[k]) {
                    (true, Some((cas, current))) => (cas, current),
                    _ => (WRONG_CAS, false),
                };
                let got = self
                    .handle
                    .store(StoreMode::Cas(cas), KEYS[k], &v, f, e)
                    .unwrap();
                if !self.present(k) {
                    prop_assert_eq!(got, StoreStatus::NotFound);
                } else if current {
                    prop_assert_eq!(got, StoreStatus::Stored);
                    self.put(k, Entry::stored(v, f, e, now, self.shift));
                } else {
                    prop_assert_eq!(got, StoreStatus::Exists);
                }
            }
            Op::Incr(k, d) | Op::Decr(k, d) => {
                let incr = matches!(op, Op::Incr(..));
                self.settle(k)?;
                let got = if incr {
                    self.handle.incr(KEYS[k], d)
                } else {
                    self.handle.decr(KEYS[k], d)
                };
                match self.model.get(&k) {
                    None => prop_assert_eq!(got, Ok(None)),
                    Some(old) => match memcached_number(&old.value) {
                        None => prop_assert_eq!(got, Err(DeltaError::NonNumeric)),
                        Some(n) => {
                            let new = if incr {
                                n.wrapping_add(d)
                            } else {
                                n.saturating_sub(d)
                            };
                            prop_assert_eq!(got, Ok(Some(new)));
                            let mut text = new.to_string().into_bytes();
                            if text.len() < old.value.len() {
                                text.resize(old.value.len(), b' ');
                            }
                            let new = old.rewritten(text, now, self.shift);
                            self.put(k, Some(new));
                        }
                    },
                }
            }
            Op::Delete(k) => {
                self.settle(k)?;
                let got = self.handle.delete(KEYS[k]);
                prop_assert_eq!(got, self.present(k));
                self.put(k, None);
            }
            Op::Touch(k, e) => {
                self.settle(k)?;
                let got = self.handle.touch(KEYS[k], e).unwrap();
                prop_assert_eq!(got, self.present(k));
                if let Some(old) = self.model.remove(&k) {
                    // Touch keeps the CAS value, as in memcached.
                    if let Some(new) = Entry::stored(old.value, old.flags, e, now, self.shift) {
                        self.model.insert(k, new);
                    }
                }
            }
            Op::Gat(k, Expiry::Expired) => {
                // memcached returns the value one last time, then it is gone.
                self.settle(k)?;
                let old = self.model.remove(&k);
                let got = self.handle.get_and_touch(KEYS[k], Expiry::Expired).unwrap();
                let got = got.map(|item| (item.value().to_vec(), item.flags()));
                prop_assert_eq!(got, old.map(|o| (o.value, o.flags)), "gat -1 key{}", k);
            }
            Op::Gat(k, e) => {
                self.settle(k)?;
                let old = self.model.remove(&k);
                let touched =
                    old.and_then(|old| Entry::stored(old.value, old.flags, e, now, self.shift));
                let got = self.handle.get_and_touch(KEYS[k], e).unwrap();
                match (&got, &touched) {
                    (Some(item), Some(entry)) => {
                        Self::check_item(now, k, item, entry)?;
                        self.cas[k] = Some((item.cas(), true));
                    }
                    (None, None) => {}
                    (got, want) => prop_assert!(
                        false,
                        "gat key{}: engine {:?}, model {:?}",
                        k,
                        got.as_ref().map(|i| i.value().to_vec()),
                        want
                    ),
                }
                drop(got);
                if let Some(entry) = touched {
                    self.model.insert(k, entry);
                }
            }
            Op::Get(k) => self.get(k)?,
            Op::FlushAll => {
                self.cache.flush_all(0);
                self.model.clear();
            }
            Op::Expire => {
                self.cache.expire();
            }
            Op::Advance(n) => {
                self.clock.advance(n);
                self.now += n;
            }
        }
        Ok(())
    }

    /// Sets (or with `None` removes) the model's entry for a key whose value changed.
    fn put(&mut self, k: usize, entry: Option<Entry>) {
        self.changed(k);
        match entry {
            Some(e) => self.model.insert(k, e),
            None => self.model.remove(&k),
        };
    }

    fn get(&mut self, k: usize) -> Result<(), TestCaseError> {
        self.settle(k)?;
        let now = self.now;
        let item = self.handle.get(KEYS[k]);
        match (&item, self.model.get(&k)) {
            (Some(item), Some(e)) => {
                Self::check_item(now, k, item, e)?;
                self.cas[k] = Some((item.cas(), true));
            }
            (None, None) => {}
            (got, want) => prop_assert!(
                false,
                "get key{} at {}: engine {:?}, model {:?}",
                k,
                now,
                got.as_ref().map(|i| i.value().to_vec()),
                want
            ),
        }
        Ok(())
    }

    /// Final comparison: every key, then the engine's item and byte counts after an
    /// expiration pass must equal the model's.
    fn finish(&mut self) -> Result<(), TestCaseError> {
        for k in 0..KEYS.len() {
            self.get(k)?;
        }
        self.cache.expire();
        let stats = self.cache.stats();
        prop_assert_eq!(stats.evicted_items, 0, "the test assumes no eviction");
        prop_assert_eq!(stats.out_of_memory, 0);
        prop_assert_eq!(
            stats.items,
            self.model.len() as u64,
            "items: {:?}",
            self.model
        );
        let bytes: u64 = self.model.iter().map(|(&k, e)| e.stored_len(KEYS[k])).sum();
        prop_assert_eq!(stats.bytes, bytes, "bytes of {:?}", self.model);
        Ok(())
    }
}

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 256,
        failure_persistence: None,
        rng_seed: RngSeed::Fixed(0x6d65_6d66_6c65_6574),
        // A case costs tens of milliseconds in debug builds: bound the shrinking.
        max_shrink_iters: 2_000,
        max_shrink_time: 120_000,
        ..ProptestConfig::default()
    }
}

/// The precision shift of a case: the default (`None`) half of the time, else 0..=6.
fn shift() -> impl Strategy<Value = Option<u32>> {
    prop_oneof![Just(None), (0u32..=6).prop_map(Some)]
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn engine_matches_the_reference_model(
        shift in shift(),
        ops in prop::collection::vec(op(), 1..300),
    ) {
        let mut h = Harness::new(shift);
        for op in &ops {
            h.run(op)?;
        }
        h.finish()?;
    }
}

/// The model relies on each key having a CAS value of its own.
#[test]
fn keys_have_independent_cas_values() {
    let h = Harness::new(None);
    let mut handle = h.handle;
    for k in KEYS {
        handle.set(k, b"v", 0, Expiry::Never).unwrap();
    }
    let cas = |handle: &Handle| -> Vec<u64> {
        KEYS.iter().map(|k| handle.get(k).unwrap().cas()).collect()
    };
    for (i, k) in KEYS.iter().enumerate() {
        let before = cas(&handle);
        handle.set(k, b"w", 0, Expiry::Never).unwrap();
        let after = cas(&handle);
        for j in 0..KEYS.len() {
            if j == i {
                assert_ne!(before[j], after[j], "a write changes its key's CAS");
            } else {
                assert_eq!(before[j], after[j], "key{i} and key{j} share a CAS value");
            }
        }
    }
}

/// Hand-written cases of the rules the model encodes, so a mistake in the model cannot hide
/// one in the engine (and vice versa).
#[test]
fn model_rules_spot_checks() {
    assert_eq!(tolerance(1, 4), 0);
    assert_eq!(tolerance(7, 3), 0);
    assert_eq!(tolerance(8, 3), 1);
    assert_eq!(tolerance(30, 4), 1);
    assert_eq!(tolerance(100, 4), 6);
    assert_eq!(tolerance(3600, 4), 224);
    assert_eq!(tolerance(3600, 3), 448);
    assert_eq!(tolerance(30, 3), 3);
    // The model's table agrees with the engine's published bound.
    for shift in 0..=6 {
        for ttl in (1..=40).chain([100, 1023, 1024, 3600, 17_407, 17_408, 300_000]) {
            assert_eq!(
                tolerance(ttl, shift),
                memfleet_storage::early_expiry_bound(ttl, shift),
                "ttl {ttl} shift {shift}"
            );
        }
    }
    assert_eq!(memcached_number(b"99 "), Some(99));
    assert_eq!(memcached_number(b" 42"), Some(42));
    assert_eq!(memcached_number(b"-0"), Some(0));
    assert_eq!(memcached_number(b"-1"), None);
    assert_eq!(memcached_number(b"12a"), None);
    assert_eq!(memcached_number(b"18446744073709551616"), None);

    let mut h = Harness::new(Some(4));
    let ops = [
        Op::Set(0, b"100".to_vec(), 7, Expiry::After(10)),
        Op::Decr(0, 1),
        Op::Get(0),
        Op::Incr(0, 5),
        Op::Advance(7),
        Op::Get(0),
        Op::Advance(3),
        Op::Get(0),
    ];
    for op in &ops {
        h.run(op).unwrap();
    }
    assert!(h.model.is_empty());
    h.finish().unwrap();

    // After a shortening decr the stored value is space padded.
    let mut handle = h.handle;
    handle.set(b"n", b"100", 0, Expiry::After(20)).unwrap();
    assert_eq!(handle.decr(b"n", 1), Ok(Some(99)));
    assert_eq!(handle.get(b"n").unwrap().value(), b"99 ");
    assert_eq!(handle.incr(b"n", 1), Ok(Some(100)));
    assert_eq!(handle.get(b"n").unwrap().value(), b"100");
}

/// `early_expiry_bound` documents that an item is served at least until `deadline -
/// tolerance`, and that the first incr/decr/append/prepend of an item written by a plain
/// store may cost one more tolerance (the rewrite can only see its segment's earliest
/// deadline), after which the item carries its deadline exactly. This pins both halves.
#[test]
fn rewrite_keeps_the_documented_expiry_bound() {
    let clock = Clock::manual();
    // Shift 4 (1/16) keeps the numbers small; the default behaves the same with wider gaps.
    let config = Config::new(16 << 20)
        .clock(clock.clone())
        .expiry_precision_shift(4);
    let cache = Cache::new(config).unwrap();
    let mut h = cache.handle();
    assert_eq!(memfleet_storage::early_expiry_bound(20, 4), 1);
    // t=0: "a" opens a segment of bucket 5 (TTL 20..23, tolerance 1) with deadline 20.
    h.set(b"a", b"x", 0, Expiry::After(20)).unwrap();
    clock.advance(1);
    // t=1: "k" asks for deadline 21; it joins the same segment (spread 1), effective 20.
    h.set(b"k", b"1", 0, Expiry::After(20)).unwrap();
    // "c" opens a segment of bucket 4 (TTL 16..19, tolerance 1) with deadline 19.
    h.set(b"c", b"x", 0, Expiry::After(18)).unwrap();
    // incr keeps "k"'s expiry as the engine sees it: 20, one tolerance early; the copy has
    // TTL 19 and joins "c"'s segment, whose earliest deadline is 19.
    assert_eq!(h.incr(b"k", 1), Ok(Some(2)));
    clock.advance(16);
    // t=17: more rewrites cost nothing more (the copy carries deadline 20 exactly).
    for _ in 0..5 {
        h.incr(b"k", 1).unwrap();
    }
    // t=18 < 21 - 2 * tolerance: still served.
    clock.advance(1);
    assert_eq!(h.get(b"k").map(|i| i.value().to_vec()), Some(b"7".to_vec()));
    clock.advance(2);
    assert!(h.get(b"k").is_none(), "never served past the deadline");
}
