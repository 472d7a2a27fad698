//! Single-thread microbenchmarks of the engine: get hit, get miss, set, and a 90/10 mix of
//! gets and sets on small objects (16-byte keys, 64-byte values), over 1,000 pre-filled keys
//! (everything in CPU caches: the engine's own cost) and over 100,000 (random accesses that
//! miss the CPU caches: what a server sees).
//!
//! Run: `cargo bench -p memfleet-storage --bench engine`. Criterion reports time per
//! operation; ops/s is its inverse (docs/BENCHMARKS.md lists both).

#![allow(missing_docs)] // criterion_group! generates undocumented functions.

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use memfleet_storage::{Cache, Config, Expiry};

/// All keys in one flat buffer, so that fetching a key costs the benchmark no cache miss of
/// its own.
struct Keys(Vec<u8>);
impl Keys {
    fn new(prefix: &str, n: usize) -> Keys {
        Keys(
            (0..n)
                .flat_map(|i| format!("{prefix}{i:011}").into_bytes())
                .collect(),
        )
    }
    fn get(&self, i: usize) -> &[u8] {
        &self.0[i * 16..i * 16 + 16]
    }
}

fn filled(n: usize) -> (Cache, Keys) {
    let cache = Cache::new(Config::new(256 << 20)).unwrap();
    let keys = Keys::new("key::", n);
    let mut h = cache.handle();
    for i in 0..n {
        h.set(keys.get(i), &[b'v'; 64], 0, Expiry::After(3600))
            .unwrap();
    }
    (cache, keys)
}

/// A cheap deterministic key sequence (xorshift), so the benchmark measures the cache.
struct Picker(u64);
impl Picker {
    fn next(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

fn bench(c: &mut Criterion) {
    for keys in [1_000, 100_000] {
        bench_keys(c, keys);
    }
}

fn bench_keys(c: &mut Criterion, n: usize) {
    let (cache, keys) = filled(n);
    let mut group = c.benchmark_group(format!("engine_{n}_keys"));
    group.throughput(Throughput::Elements(1));

    let h = cache.handle();
    let mut pick = Picker(0x9e37_79b9_7f4a_7c15);
    group.bench_function("get_hit", |b| {
        b.iter(|| {
            let k = keys.get(pick.next(n));
            let item = h.get(k).expect("prefilled");
            black_box(item.value().len());
        })
    });

    let misses = Keys::new("nope:", n);
    group.bench_function("get_miss", |b| {
        b.iter(|| {
            let k = misses.get(pick.next(n));
            black_box(h.get(k).is_none());
        })
    });

    let mut w = cache.handle();
    group.bench_function("set", |b| {
        b.iter(|| {
            let k = keys.get(pick.next(n));
            black_box(w.set(k, &[b'w'; 64], 0, Expiry::After(3600)).unwrap());
        })
    });

    let mut counter = 0u32;
    group.bench_function("mix_90get_10set", |b| {
        b.iter(|| {
            let k = keys.get(pick.next(n));
            counter = counter.wrapping_add(1);
            if counter.is_multiple_of(10) {
                black_box(w.set(k, &[b'x'; 64], 0, Expiry::After(3600)).unwrap());
            } else if let Some(item) = w.get(k) {
                black_box(item.value().len());
            }
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
