//! The engine part of `memfleet bench scale`: Segcache in-process, no sockets. For each mix
//! (get-only, 90/10, 50/50 get/set), key popularity (scrambled Zipf, uniform) and thread
//! count, a fresh [`Cache`] is filled by the threads themselves (each pinned to a core of
//! its own, with its own [`memfleet_storage::Handle`]), then every thread runs its
//! pre-drawn requests in a closed loop for the cell's duration. Reported per cell: ops/s,
//! ops/s per thread, the hit ratio, items evicted, and the deltas of the engine's
//! contention counters over the measured time. Not here: the efficiency column and the
//! table (`report`), the flags (`mod`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};

use memfleet_loadgen::cpu;
use memfleet_sim::zipf::Zipf;
use memfleet_storage::{Cache, Config, Expiry};

/// Bytes of every key: `k` and 15 decimal digits.
pub const KEY_SIZE: usize = 16;
/// Bytes of every value.
pub const VALUE_SIZE: usize = 64;
/// The Zipf exponent of the skewed runs.
pub const ZIPF_ALPHA: f64 = 0.99;
/// Requests drawn ahead per thread (cycled): enough that the cycle is no cache's size,
/// and drawn before the clock starts so that the sampler's cost is not measured.
const RING: usize = 1 << 20;
/// Requests between two looks at the stop flag.
const BATCH: usize = 256;
/// The bit of a drawn request that makes it a set.
const SET_BIT: u32 = 1 << 31;

/// A request mix.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Mix {
    /// Gets only.
    GetOnly,
    /// 90% gets, 10% sets.
    Get90,
    /// Half gets, half sets.
    Get50,
}

impl Mix {
    /// Every mix, in table order.
    pub const ALL: [Mix; 3] = [Mix::GetOnly, Mix::Get90, Mix::Get50];

    /// The share of gets.
    pub fn gets(self) -> f64 {
        match self {
            Mix::GetOnly => 1.0,
            Mix::Get90 => 0.9,
            Mix::Get50 => 0.5,
        }
    }

    /// Its name in the table.
    pub fn name(self) -> &'static str {
        match self {
            Mix::GetOnly => "get-only",
            Mix::Get90 => "90/10",
            Mix::Get50 => "50/50",
        }
    }
}

/// Key popularity.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Popularity {
    /// Zipf([`ZIPF_ALPHA`]), ranks scrambled over the key range.
    Zipf,
    /// Every key alike.
    Uniform,
}

impl Popularity {
    /// Both, in table order.
    pub const ALL: [Popularity; 2] = [Popularity::Zipf, Popularity::Uniform];

    /// Its name in the table.
    pub fn name(self) -> &'static str {
        match self {
            Popularity::Zipf => "zipf",
            Popularity::Uniform => "uniform",
        }
    }
}

/// How the engine part runs.
#[derive(Debug, Clone)]
pub struct EngineSettings {
    /// Thread counts, ascending.
    pub threads: Vec<usize>,
    /// Distinct keys, all stored before measuring.
    pub keys: u64,
    /// The heap, in bytes.
    pub memory_bytes: usize,
    /// Measured time per cell.
    pub duration: Duration,
    /// RNG seed.
    pub seed: u64,
    /// The CPUs this process may run on: thread `i` is pinned to `cpus[i]`.
    pub cpus: Vec<usize>,
}

/// The engine's contention counters over one cell's measured time (storage's own, as the
/// difference of two readings).
pub type ContentionDelta = memfleet_storage::Contention;

/// A contention reading as a JSON object, the counters by their names.
pub fn contention_json<S: serde::Serializer>(
    c: &ContentionDelta,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let mut map = serializer.serialize_map(Some(ContentionDelta::NAMES.len()))?;
    for (name, value) in ContentionDelta::NAMES.iter().zip(c.values()) {
        map.serialize_entry(name, &value)?;
    }
    map.end()
}

/// [`contention_json`] of a reading that may be absent (`null`).
pub fn contention_json_opt<S: serde::Serializer>(
    c: &Option<ContentionDelta>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match c {
        Some(c) => contention_json(c, serializer),
        None => serializer.serialize_none(),
    }
}

/// One measured cell.
#[derive(Debug, Clone, serde::Serialize)]
pub struct EngineCell {
    /// The mix's name.
    pub mix: &'static str,
    /// The popularity's name.
    pub keys: &'static str,
    /// Threads.
    pub threads: usize,
    /// The CPUs they were pinned to.
    pub cpus: Vec<usize>,
    /// Requests completed in the measured time.
    pub ops: u64,
    /// Requests per second, all threads.
    pub ops_per_sec: f64,
    /// Requests per second per thread.
    pub ops_per_sec_per_thread: f64,
    /// ops/s ÷ (threads × ops/s of the fewest threads of the same mix and keys, per
    /// thread): 1.0 is linear scaling (filled in by `report`).
    pub efficiency: Option<f64>,
    /// Get hits ÷ gets.
    pub hit_ratio: f64,
    /// Items evicted in the measured time.
    pub evicted_items: u64,
    /// Seconds the threads took to fill the cache.
    pub prefill_s: f64,
    /// The contention counters' deltas over the measured time.
    #[serde(serialize_with = "contention_json")]
    pub contention: ContentionDelta,
}

/// The cells `s` asks for: every mix × popularity × thread count.
pub fn cells(s: &EngineSettings) -> usize {
    Mix::ALL.len() * Popularity::ALL.len() * s.threads.len()
}

/// Runs every cell, printing a line per cell as it ends.
pub fn run(s: &EngineSettings) -> Result<Vec<EngineCell>> {
    if s.keys == 0 || s.keys >= u64::from(SET_BIT) {
        bail!("--keys must be between 1 and {}", SET_BIT - 1);
    }
    if let Some(&k) = s.threads.iter().find(|&&k| k == 0 || k > s.cpus.len()) {
        bail!(
            "engine threads {k}: must be between 1 and the {} CPUs this process may use",
            s.cpus.len()
        );
    }
    let mut out = Vec::new();
    for mix in Mix::ALL {
        for popularity in Popularity::ALL {
            for &threads in &s.threads {
                let cell = run_cell(s, mix, popularity, threads).with_context(|| {
                    format!(
                        "engine {} {} with {threads} threads",
                        mix.name(),
                        popularity.name()
                    )
                })?;
                println!(
                    "[engine] {:8} {:7} {:2} threads: {:>12.0} ops/s ({:.0} per thread), hits {:.3}, prefill {:.2} s",
                    cell.mix,
                    cell.keys,
                    threads,
                    cell.ops_per_sec,
                    cell.ops_per_sec_per_thread,
                    cell.hit_ratio,
                    cell.prefill_s
                );
                out.push(cell);
            }
        }
    }
    Ok(out)
}

/// What one thread did in the measured time.
#[derive(Debug, Default, Clone, Copy)]
struct Done {
    ops: u64,
    gets: u64,
    hits: u64,
    elapsed: Duration,
}

fn run_cell(
    s: &EngineSettings,
    mix: Mix,
    popularity: Popularity,
    threads: usize,
) -> Result<EngineCell> {
    let cache = Cache::new(Config::new(s.memory_bytes)).context("creating the cache")?;
    let cpus = s.cpus[..threads].to_vec();
    // Threads + this one: once after the fill (stats are read), once to start the clock.
    let barrier = Barrier::new(threads + 1);
    let stop = AtomicBool::new(false);
    let started = Instant::now();
    let (done, before, after, prefill) = std::thread::scope(|scope| {
        let workers: Vec<_> = cpus
            .iter()
            .enumerate()
            .map(|(i, &cpu)| {
                let (cache, barrier, stop) = (&cache, &barrier, &stop);
                scope.spawn(move || {
                    worker(s, cache, mix, popularity, (i, threads), cpu, barrier, stop)
                })
            })
            .collect();
        barrier.wait();
        let prefill = started.elapsed();
        let before = cache.stats();
        barrier.wait();
        std::thread::sleep(s.duration);
        stop.store(true, Ordering::Relaxed);
        let done: Vec<Result<Done>> = workers
            .into_iter()
            .map(|w| w.join().expect("an engine thread panicked"))
            .collect();
        (done, before, cache.stats(), prefill)
    });
    let done = done.into_iter().collect::<Result<Vec<Done>>>()?;
    let ops: u64 = done.iter().map(|d| d.ops).sum();
    let ops_per_sec: f64 = done
        .iter()
        .map(|d| d.ops as f64 / d.elapsed.as_secs_f64().max(1e-9))
        .sum();
    let (gets, hits) = done
        .iter()
        .fold((0, 0), |(g, h), d| (g + d.gets, h + d.hits));
    Ok(EngineCell {
        mix: mix.name(),
        keys: popularity.name(),
        threads,
        cpus,
        ops,
        ops_per_sec,
        ops_per_sec_per_thread: ops_per_sec / threads as f64,
        efficiency: None,
        hit_ratio: if gets == 0 {
            1.0
        } else {
            hits as f64 / gets as f64
        },
        evicted_items: after.evicted_items.saturating_sub(before.evicted_items),
        prefill_s: prefill.as_secs_f64(),
        contention: after.contention.since(&before.contention),
    })
}

/// One engine thread: pinned to `cpu`, it stores its share (`slot.0` of `slot.1`) of the
/// keys, draws its requests, waits for the start and runs until `stop`. A thread that
/// fails still passes both barrier waits, so the others are never left waiting.
#[allow(clippy::too_many_arguments)]
fn worker(
    s: &EngineSettings,
    cache: &Cache,
    mix: Mix,
    popularity: Popularity,
    slot: (usize, usize),
    cpu: usize,
    barrier: &Barrier,
    stop: &AtomicBool,
) -> Result<Done> {
    let ready = prepare(s, cache, mix, popularity, slot, cpu);
    barrier.wait();
    barrier.wait();
    let (_pinned, mut handle, ring) = ready?;
    let value = value_bytes();
    let mut key = [0u8; KEY_SIZE];
    let mut done = Done::default();
    let mut touched = 0u8;
    let start = Instant::now();
    let mut at = 0;
    while !stop.load(Ordering::Relaxed) {
        for &op in &ring[at..at + BATCH] {
            write_key(u64::from(op & !SET_BIT), &mut key);
            if op & SET_BIT == 0 {
                done.gets += 1;
                if let Some(item) = handle.get(&key) {
                    // Read the value's last byte, as a server copying it out would.
                    done.hits += 1;
                    touched ^= item.value().last().copied().unwrap_or(0);
                }
            } else {
                handle
                    .set(&key, &value, 0, Expiry::Never)
                    .context("a set failed")?;
            }
        }
        done.ops += BATCH as u64;
        at = (at + BATCH) % ring.len();
    }
    done.elapsed = start.elapsed();
    std::hint::black_box(touched);
    Ok(done)
}

/// The pinning, handle and drawn requests of one thread, after it stored its keys.
fn prepare(
    s: &EngineSettings,
    cache: &Cache,
    mix: Mix,
    popularity: Popularity,
    (index, of): (usize, usize),
    cpu: usize,
) -> Result<(cpu::Pinned, memfleet_storage::Handle, Vec<u32>)> {
    let pinned = cpu::pin_this_thread(cpu)?;
    let mut handle = cache.handle();
    let value = value_bytes();
    let mut key = [0u8; KEY_SIZE];
    let mut n = index as u64;
    while n < s.keys {
        write_key(n, &mut key);
        handle
            .set(&key, &value, 0, Expiry::Never)
            .context("pre-filling")?;
        n += of as u64;
    }
    let ring = draw(s, mix, popularity, index)?;
    Ok((pinned, handle, ring))
}

/// `RING` requests (a multiple of `BATCH`) for thread `index`: a key number, with
/// [`SET_BIT`] set for a set.
fn draw(s: &EngineSettings, mix: Mix, popularity: Popularity, index: usize) -> Result<Vec<u32>> {
    let mut rng = SmallRng::seed_from_u64(s.seed ^ (index as u64).wrapping_mul(0x9E37_79B9));
    let zipf = match popularity {
        Popularity::Zipf => Some(Zipf::new(s.keys, ZIPF_ALPHA).map_err(anyhow::Error::msg)?),
        Popularity::Uniform => None,
    };
    let scramble = Scramble::new(s.keys);
    let ring = (0..RING)
        .map(|_| {
            let n = match &zipf {
                Some(z) => scramble.apply(z.sample(&mut rng) - 1),
                None => rng.random_range(0..s.keys),
            };
            let set = rng.random::<f64>() >= mix.gets();
            n as u32 | if set { SET_BIT } else { 0 }
        })
        .collect();
    Ok(ring)
}

/// A fixed permutation of `0..n` (multiplication by a constant prime to `n`), so that the
/// popular ranks of the Zipf draw are keys spread over the whole range, not its start.
struct Scramble {
    n: u64,
    factor: u64,
}

impl Scramble {
    fn new(n: u64) -> Scramble {
        let mut factor = 0x9E37_79B9_7F4A_7C15 % n.max(1);
        while n > 1 && gcd(factor, n) != 1 {
            factor = (factor + 1) % n;
        }
        Scramble { n, factor }
    }

    fn apply(&self, rank: u64) -> u64 {
        if self.n <= 1 {
            return 0;
        }
        (u128::from(rank) * u128::from(self.factor) % u128::from(self.n)) as u64
    }
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// Key `n`: `k` and `n` in 15 zero-padded decimal digits.
fn write_key(mut n: u64, key: &mut [u8; KEY_SIZE]) {
    key[0] = b'k';
    for b in key[1..].iter_mut().rev() {
        *b = b'0' + (n % 10) as u8;
        n /= 10;
    }
}

/// Every value's bytes.
fn value_bytes() -> [u8; VALUE_SIZE] {
    std::array::from_fn(|i| b'a' + (i % 26) as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scramble_is_a_permutation() {
        for n in [1, 2, 7, 10, 97, 1000, 4096] {
            let s = Scramble::new(n);
            let mut seen: Vec<u64> = (0..n).map(|r| s.apply(r)).collect();
            seen.sort_unstable();
            assert_eq!(seen, (0..n).collect::<Vec<_>>(), "n = {n}");
        }
        // The most popular ranks do not stay at the start of the range.
        let s = Scramble::new(1_000_000);
        assert!((1..10).all(|r| s.apply(r) > 1000));
    }

    #[test]
    fn keys_are_fixed_size_and_distinct() {
        let (mut a, mut b) = ([0u8; KEY_SIZE], [0u8; KEY_SIZE]);
        write_key(0, &mut a);
        write_key(123_456_789, &mut b);
        assert_eq!(&a, b"k000000000000000");
        assert_eq!(&b, b"k000000123456789");
    }

    #[test]
    fn a_tiny_cell_counts_hits_and_ops() {
        let s = EngineSettings {
            threads: vec![1],
            keys: 1000,
            memory_bytes: 16 << 20,
            duration: Duration::from_millis(50),
            seed: 1,
            cpus: super::super::machine::allowed_cpus().unwrap(),
        };
        let cell = run_cell(&s, Mix::GetOnly, Popularity::Zipf, 1).unwrap();
        assert!(cell.ops > 0 && cell.ops_per_sec > 0.0, "{cell:?}");
        assert_eq!(cell.hit_ratio, 1.0, "every key was stored: {cell:?}");
        assert_eq!(cell.evicted_items, 0);
        let cell = run_cell(&s, Mix::Get50, Popularity::Uniform, 1).unwrap();
        assert!(cell.ops > 0 && cell.hit_ratio == 1.0, "{cell:?}");
    }
}
