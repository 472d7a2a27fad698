//! Drives a stream of [`Request`]s through a [`SimCache`] and counts what
//! happened, overall and per window of trace time, into a [`Report`].
//!
//! Semantics: `get`/`gets` count as gets; a miss is followed by a look-aside
//! fill (a set of the request's value size) when `fill_on_miss` is on and the
//! value size is non-zero (Twitter traces record 0 for a value that production
//! did not have, so there is nothing to fill). `set`/`add`/`replace`/`cas` are
//! applied as sets, `delete` as a delete; `append`/`prepend`/`incr`/`decr`
//! modify a value in place and are only counted. Time is made relative to the
//! first request and never runs backwards; the cache's clock is stepped one
//! second at a time with a `tick` after each step. Not here: trace parsing,
//! the report's formatting (`report`), comparison tables (`crate::run`).

use std::convert::Infallible;
use std::time::Instant;

use super::keys::write_key;
pub use super::report::{Report, WindowStats};
use super::request::{Request, TraceOp};

/// A cache the simulator can drive. Values are lengths only.
pub trait SimCache {
    /// Short name for reports (e.g. `lru`, `segcache`).
    fn name(&self) -> String;
    /// Advance the cache's clock to `now` (seconds since the trace start). Called before each request whose time moved.
    fn advance_to(&mut self, now: u32);
    /// Looks `key` up; true on a hit.
    fn get(&mut self, key: &[u8]) -> bool;
    /// Stores `key` with a value of `value_len` bytes; `ttl` 0 = never expires.
    fn set(&mut self, key: &[u8], value_len: usize, ttl: u32);
    /// The look-aside fill after a get of `key` missed: a [`set`](SimCache::set) by the
    /// same client as that get (a cache with several handles writes it through the handle
    /// that served the get).
    fn fill(&mut self, key: &[u8], value_len: usize, ttl: u32) {
        self.set(key, value_len, ttl);
    }
    /// Removes `key` if present.
    fn delete(&mut self, key: &[u8]);
    /// Periodic housekeeping hook (the Segcache engine runs proactive expiration here); called once per simulated second.
    fn tick(&mut self) {}
    /// Bytes of memory the model currently uses for live+dead items, for reporting (optional).
    fn memory_used(&self) -> Option<u64> {
        None
    }
    /// Items the model currently holds, by the same accounting as
    /// [`memory_used`](SimCache::memory_used) (optional).
    fn items(&self) -> Option<u64> {
        None
    }
    /// Remarks for the report after a run (configuration, refused writes, clock lag), one
    /// line each; none by default.
    fn remarks(&self) -> Vec<String> {
        Vec::new()
    }
}

/// How to replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayConfig {
    /// Width of a reporting window in seconds of trace time (at least 1).
    pub window_secs: u32,
    /// Whether a get miss is followed by a set of that key (look-aside fill).
    pub fill_on_miss: bool,
    /// TTL for fills whose request carries none (Twitter get lines record 0); 0 = never.
    pub fill_ttl: u32,
}

impl Default for ReplayConfig {
    fn default() -> Self {
        ReplayConfig {
            window_secs: 60,
            fill_on_miss: true,
            fill_ttl: 0,
        }
    }
}

/// Replays infallible requests (e.g. a synthetic workload).
pub fn replay<I>(requests: I, cache: &mut dyn SimCache, config: &ReplayConfig) -> Report
where
    I: IntoIterator<Item = Request>,
{
    match try_replay(requests.into_iter().map(Ok::<_, Infallible>), cache, config) {
        Ok(report) => report,
        Err(never) => match never {},
    }
}

/// Replays requests that may fail to read (e.g. a trace); stops at the first error.
pub fn try_replay<I, E>(
    requests: I,
    cache: &mut dyn SimCache,
    config: &ReplayConfig,
) -> Result<Report, E>
where
    I: IntoIterator<Item = Result<Request, E>>,
{
    let started = Instant::now();
    let window = config.window_secs.max(1);
    let mut report = Report {
        cache: cache.name(),
        window_secs: window,
        ..Report::default()
    };
    let mut first_time: Option<u32> = None;
    let mut clock = 0u32;
    let mut key = Vec::with_capacity(64);
    cache.advance_to(0);
    for req in requests {
        let req = req?;
        let first = *first_time.get_or_insert(req.time);
        let now = req.time.saturating_sub(first).max(clock);
        while clock < now {
            clock += 1;
            cache.advance_to(clock);
            cache.tick();
        }
        let w = report.window_for(now, window);
        report.requests += 1;
        write_key(req.key, req.key_size, &mut key);
        match req.op {
            TraceOp::Get | TraceOp::Gets => {
                report.gets += 1;
                report.get_bytes += u64::from(req.value_size);
                report.windows[w].gets += 1;
                if cache.get(&key) {
                    report.hits += 1;
                } else {
                    report.misses += 1;
                    report.miss_bytes += u64::from(req.value_size);
                    report.windows[w].misses += 1;
                    if config.fill_on_miss && req.value_size > 0 {
                        let ttl = if req.ttl == 0 {
                            config.fill_ttl
                        } else {
                            req.ttl
                        };
                        cache.fill(&key, req.value_size as usize, ttl);
                        report.fills += 1;
                    }
                }
            }
            TraceOp::Set | TraceOp::Add | TraceOp::Replace | TraceOp::Cas => {
                report.sets += 1;
                cache.set(&key, req.value_size as usize, req.ttl);
            }
            TraceOp::Delete => {
                report.deletes += 1;
                cache.delete(&key);
            }
            TraceOp::Append | TraceOp::Prepend | TraceOp::Incr | TraceOp::Decr => report.other += 1,
        }
    }
    report.sim_secs = clock;
    report.memory_used = cache.memory_used();
    report.items = cache.items();
    report.elapsed = started.elapsed();
    Ok(report)
}

#[cfg(test)]
mod tests;
