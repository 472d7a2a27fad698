//! Unit tests of `replay.rs`, kept beside it so that the product file
//! holds product code only.

use super::super::lru::LruCache;
use super::*;

/// Never holds anything; records the calls it got.
#[derive(Default)]
struct Forgetful {
    sets: Vec<(Vec<u8>, usize, u32)>,
    clock: Vec<u32>,
    ticks: u32,
}

impl SimCache for Forgetful {
    fn name(&self) -> String {
        "forgetful".into()
    }
    fn advance_to(&mut self, now: u32) {
        self.clock.push(now);
    }
    fn get(&mut self, _key: &[u8]) -> bool {
        false
    }
    fn set(&mut self, key: &[u8], value_len: usize, ttl: u32) {
        self.sets.push((key.to_vec(), value_len, ttl));
    }
    fn delete(&mut self, _key: &[u8]) {}
    fn tick(&mut self) {
        self.ticks += 1;
    }
}

fn get(time: u32, key: u64) -> Request {
    Request {
        time,
        key,
        key_size: 10,
        value_size: 100,
        op: TraceOp::Get,
        ttl: 0,
    }
}

#[test]
fn a_cache_that_always_misses_has_miss_ratio_one() {
    let reqs: Vec<Request> = (0..1000)
        .map(|i| get(100 + i / 10, u64::from(i % 7)))
        .collect();
    let mut c = Forgetful::default();
    let r = replay(
        reqs,
        &mut c,
        &ReplayConfig {
            window_secs: 30,
            ..ReplayConfig::default()
        },
    );
    assert_eq!((r.gets, r.misses, r.hits, r.fills), (1000, 1000, 0, 1000));
    assert_eq!(r.miss_ratio(), 1.0);
    assert_eq!(r.byte_miss_ratio(), 1.0);
    assert_eq!(r.sim_secs, 99, "time is relative to the first request");
    assert_eq!(r.windows.len(), 4);
    assert!(r.windows.iter().all(|w| w.miss_ratio() == 1.0));
    assert_eq!(r.windows.iter().map(|w| w.gets).sum::<u64>(), 1000);
    assert_eq!(
        r.windows[3],
        WindowStats {
            start: 90,
            gets: 100,
            misses: 100
        }
    );
    assert_eq!(c.ticks, 99, "one tick per simulated second");
    assert_eq!(c.clock, (0..=99).collect::<Vec<_>>());
    assert_eq!(
        c.sets[0],
        (b"A.xxxxxxxx".to_vec(), 100, 0),
        "fill uses the request's sizes"
    );
}

#[test]
fn a_big_lru_on_a_repeating_key_set_rarely_misses() {
    let reqs = (0..100_000u32).map(|i| get(i / 1000, u64::from(i % 500)));
    let mut c = LruCache::new(1 << 20);
    let r = replay(reqs, &mut c, &ReplayConfig::default());
    assert_eq!(r.gets, 100_000);
    assert_eq!(r.misses, 500, "only compulsory misses");
    assert!(r.miss_ratio() < 0.01);
    assert_eq!(r.windows[0].misses, 500);
    assert_eq!(r.windows[1].misses, 0);
    assert_eq!(r.memory_used, Some(500 * (10 + 100 + 56)));
}

#[test]
fn writes_deletes_and_fill_switch() {
    let mk = |time, key, op, ttl| Request {
        time,
        key,
        key_size: 4,
        value_size: 20,
        op,
        ttl,
    };
    let reqs = vec![
        mk(0, 1, TraceOp::Set, 0),
        mk(0, 1, TraceOp::Get, 0),
        mk(1, 1, TraceOp::Delete, 0),
        mk(1, 1, TraceOp::Get, 0),
        mk(2, 2, TraceOp::Add, 5),
        mk(3, 2, TraceOp::Incr, 0),
        mk(8, 2, TraceOp::Get, 0),
        Request {
            value_size: 0,
            ..mk(8, 3, TraceOp::Get, 0)
        },
    ];
    let mut c = LruCache::new(1 << 20);
    let cfg = ReplayConfig {
        fill_on_miss: false,
        ..ReplayConfig::default()
    };
    let r = replay(reqs.clone(), &mut c, &cfg);
    assert_eq!(
        (r.sets, r.deletes, r.other, r.gets, r.hits),
        (2, 1, 1, 4, 1)
    );
    assert_eq!(r.fills, 0);
    assert_eq!(r.misses, 3, "deleted, expired and unknown keys miss");
    let mut c = LruCache::new(1 << 20);
    let r = replay(
        reqs,
        &mut c,
        &ReplayConfig {
            fill_ttl: 60,
            ..ReplayConfig::default()
        },
    );
    assert_eq!(r.fills, 2, "the zero-size get is not filled");
    assert!(c.len() == 2);
}

#[test]
fn out_of_order_times_never_move_the_clock_back_and_errors_stop_replay() {
    let reqs = vec![
        Ok(get(10, 1)),
        Ok(get(15, 1)),
        Ok(get(12, 1)),
        Err("bad line"),
        Ok(get(20, 1)),
    ];
    let mut c = Forgetful::default();
    let err = try_replay(reqs, &mut c, &ReplayConfig::default()).unwrap_err();
    assert_eq!(err, "bad line");
    assert_eq!(c.clock, (0..=5).collect::<Vec<_>>());
}

#[test]
fn csv_and_table_output() {
    let mut c = Forgetful::default();
    let r = replay(
        (0..4).map(|i| get(i * 2, 1)),
        &mut c,
        &ReplayConfig {
            window_secs: 4,
            ..ReplayConfig::default()
        },
    );
    let mut csv = Vec::new();
    r.write_window_csv(&mut csv).unwrap();
    assert_eq!(
        String::from_utf8(csv).unwrap(),
        "window_start,gets,misses,miss_ratio\n0,2,2,1.000000\n4,2,2,1.000000\n"
    );
    let table = r.to_string();
    assert!(
        table.contains("cache forgetful: 4 requests over 6 s"),
        "{table}"
    );
    assert!(
        table
            .lines()
            .any(|l| l.split_whitespace().eq(["miss", "ratio", "1.0000"])),
        "{table}"
    );
    assert!(r
        .summary_line()
        .starts_with("forgetful: requests=4 gets=4 misses=4 miss_ratio=1.0000"));
}
