//! The engine under look-aside churn: overwrites, a TTL mix and several writing handles.
//!
//! ```sh
//! cargo run --release -p memfleet-storage --example churn -- [memory MiB] [handles] [seconds] [N]
//! ```
//!
//! The workload of the engine's miss-ratio issue, generated in-process on a manual clock:
//! 1,000,000 keys of 20–40 bytes with Zipf 0.9 popularity; values log-normal with a mean of
//! 243 bytes, clamped to 16 B–4 KiB (a size per key); Segcache's `mix` TTL classes scaled by
//! 1/60 (43,200 s 14%, 20,160 s 11%, 1,440 s 23%, 720 s 40%, 2 s 12%); 7% of requests are
//! sets, every get that misses is filled; 60,000 requests per simulated second, request *i*
//! through handle *i* mod `handles` (a server's connections are spread over its workers).
//! `N` is the number of segments per merge (default: the engine's, 2). Prints the miss ratio over the
//! second half of the run and where the heap is at the end: live items, dead copies, and
//! room not yet written. `memfleet sim` runs the same kind of stream against pelikan's engine
//! and an exact LRU.

#[path = "../tests/it/support/churn_workload.rs"]
mod workload;

use memfleet_storage::{Cache, Clock, Config};
use workload::{Shape, Stream, MIX_SCALED};

fn main() {
    let mut args = std::env::args().skip(1);
    let mib: usize = args.next().map_or(64, |s| s.parse().expect("memory MiB"));
    let handles: usize = args.next().map_or(1, |s| s.parse().expect("handles"));
    let seconds: u64 = args.next().map_or(90, |s| s.parse().expect("seconds"));
    let merge: usize = args
        .next()
        .map_or(Config::new(64 << 20).merge_segments, |s| {
            s.parse().expect("segments per merge")
        });
    let shape = Shape {
        keys: 1_000_000,
        alpha: 0.9,
        set_share: 0.07,
        mean_value: 243.0,
        ttls: &MIX_SCALED,
        rate: 60_000,
    };
    let mut stream = Stream::new(&shape, 0x9e37_79b9_7f4a_7c15);
    let clock = Clock::manual();
    let cache = Cache::new(
        Config::new(mib << 20)
            .merge_segments(merge)
            .clock(clock.clone()),
    )
    .expect("cache");
    let mut hs: Vec<_> = (0..handles).map(|_| cache.handle()).collect();
    let requests = shape.rate * seconds;
    stream.run(&cache, &mut hs, 0, requests / 2, |s| clock.set(s));
    stream.reset_counts();
    stream.run(&cache, &mut hs, requests / 2, requests, |s| clock.set(s));
    let s = cache.stats();
    let share = |b: u64| b as f64 / s.heap_bytes as f64;
    println!(
        "memory={mib}MiB handles={handles} seconds={seconds} miss_ratio={:.4} items={} \
         live={:.3} dead={:.3} unwritten={:.3} free_segments={} active={} merges={} \
         compactions={} evicted={} evicted_unfetched={} expired={}",
        stream.miss_ratio(),
        s.items,
        share(s.bytes),
        share(s.dead_bytes),
        share(s.unwritten_bytes),
        s.segments_free,
        s.segments_active,
        s.merges,
        s.compactions,
        s.evicted_items,
        s.evicted_unfetched,
        s.expired_items,
    );
}
