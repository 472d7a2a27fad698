//! What one shared counter per write would cost: memcached takes one global counter per write
//! (`get_cas_id`, under a mutex); memfleet's handles take that counter in blocks of 64
//! (`hashtable/cas.rs`), one shared write per 64 stores. This runs
//! `THREADS` threads of `set`s on one cache, each set alone and each set followed by one
//! `fetch_add` on a counter all threads share (what an ordered CAS needs at the least,
//! before the 8 bytes per item it would take to keep the value), and prints nanoseconds per
//! set of each and the ratio:
//!
//! ```sh
//! cargo run --release -p memfleet-storage --example cas_counter -- 2 3000000
//! ```
//!
//! Alternates the two forms over five rounds and prints the medians.

use memfleet_storage::{Cache, Config, Expiry};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::Instant;

const KEYS: usize = 100_000;

/// The shared counter, on its own cache line as a real one would be.
#[repr(align(128))]
struct Counter(AtomicU64);

static ORDERED_CAS: Counter = Counter(AtomicU64::new(0));

fn key(buf: &mut [u8; 16], i: usize) {
    buf[..5].copy_from_slice(b"key::");
    let mut n = i;
    for b in buf[5..].iter_mut().rev() {
        *b = b'0' + (n % 10) as u8;
        n /= 10;
    }
}

/// Nanoseconds per set over `threads` threads doing `per_thread` sets each.
fn run(cache: &Cache, threads: usize, per_thread: usize, with_counter: bool) -> f64 {
    let barrier = Barrier::new(threads);
    let started = std::sync::Mutex::new(None::<Instant>);
    std::thread::scope(|s| {
        for t in 0..threads {
            let (barrier, started) = (&barrier, &started);
            s.spawn(move || {
                let mut h = cache.handle();
                let mut k = [0u8; 16];
                let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ (t as u64 + 1);
                let mut last = 0u64;
                if barrier.wait().is_leader() {
                    *started.lock().unwrap() = Some(Instant::now());
                }
                for _ in 0..per_thread {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    key(&mut k, (x % KEYS as u64) as usize);
                    h.set(&k, &[b'w'; 64], 0, Expiry::After(3600)).expect("set");
                    if with_counter {
                        last = ORDERED_CAS.0.fetch_add(1, Ordering::Relaxed);
                    }
                }
                std::hint::black_box(last);
            });
        }
    });
    let elapsed = started.lock().unwrap().unwrap().elapsed();
    elapsed.as_nanos() as f64 / (threads * per_thread) as f64 * threads as f64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let threads: usize = args.next().map_or(2, |s| s.parse().expect("threads"));
    let n: usize = args.next().map_or(3_000_000, |s| s.parse().expect("sets"));
    let cache = Cache::new(Config::new(256 << 20)).expect("cache");
    let per_thread = n / threads;
    run(&cache, threads, per_thread / 4, false); // warm: fill the keys
    let (mut plain, mut counted) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        plain.push(run(&cache, threads, per_thread, false));
        counted.push(run(&cache, threads, per_thread, true));
    }
    let (p, c) = (median(plain), median(counted));
    println!(
        "{threads} threads, {n} sets a round, 5 rounds: set {p:.1} ns of CPU, set + shared \
         counter {c:.1} ns ({:+.1}%)",
        (c / p - 1.0) * 100.0
    );
}
