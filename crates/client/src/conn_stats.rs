//! What a server connection measures: each request's command and its latency at the server
//! (from the write that sent it to the read that completed its reply), in fixed buckets.
//!
//! A connection's task is the only writer of its [`ConnStats`] (a relaxed load and store
//! per count, no read-modify-write), and it runs on the router worker whose clients use the
//! connection (`lanes.rs`), so nothing here is shared between workers per request. The clock
//! is read once per write and once per read, whatever number of requests they carry. Readers
//! (`stats`, `/metrics`) add the connections' counts up.

use std::sync::atomic::{AtomicU64, Ordering};

/// The commands counted, by the first word of the request sent.
pub const COMMANDS: [&str; 19] = [
    "get", "gets", "gat", "gats", "set", "add", "replace", "append", "prepend", "cas", "delete",
    "incr", "decr", "touch", "mg", "ms", "md", "ma", "other",
];

/// The latency buckets' upper bounds, µs (Prometheus `le`, with `+Inf` after them).
pub const BUCKETS_US: [u64; 14] = [
    50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000,
];

/// A moment on the monotonic clock (`CLOCK_MONOTONIC`, as `Instant`), in nanoseconds: a
/// latency is one subtraction, where `Instant`'s normalises a `timespec` per reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Stamp(u64);

impl Stamp {
    /// Now.
    pub fn now() -> Stamp {
        let mut t = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime writes only the timespec it is handed, which outlives the
        // call; it fails only for an unknown clock or a bad pointer (neither is possible
        // here), and then `t` stays 0. (libc's, not a raw vDSO call: valgrind and Miri
        // handle it.)
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
        Stamp(t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64)
    }

    /// Nanoseconds on the monotonic clock.
    pub fn nanos(self) -> u64 {
        self.0
    }

    /// Microseconds from `earlier` to this (0 if `earlier` is later).
    pub fn micros_since(self, earlier: Stamp) -> u64 {
        self.0.saturating_sub(earlier.0) / 1000
    }
}

/// The first word of a request, up to 8 bytes, as a little-endian number (zero-padded).
const fn word(text: &[u8]) -> u64 {
    let mut bytes = [0u8; 8];
    let mut i = 0;
    while i < text.len() && i < 8 {
        bytes[i] = text[i];
        i += 1;
    }
    u64::from_le_bytes(bytes)
}

/// The index in [`COMMANDS`] of the request `bytes` (its first word, at most 8 bytes
/// looked at, compared as one number: this runs for every request sent).
pub fn command_of(bytes: &[u8]) -> u8 {
    const GET: u64 = word(b"get");
    const GETS: u64 = word(b"gets");
    const GAT: u64 = word(b"gat");
    const GATS: u64 = word(b"gats");
    const SET: u64 = word(b"set");
    const ADD: u64 = word(b"add");
    const REPLACE: u64 = word(b"replace");
    const APPEND: u64 = word(b"append");
    const PREPEND: u64 = word(b"prepend");
    const CAS: u64 = word(b"cas");
    const DELETE: u64 = word(b"delete");
    const INCR: u64 = word(b"incr");
    const DECR: u64 = word(b"decr");
    const TOUCH: u64 = word(b"touch");
    const MG: u64 = word(b"mg");
    const MS: u64 = word(b"ms");
    const MD: u64 = word(b"md");
    const MA: u64 = word(b"ma");
    let mut first = [0u8; 8];
    for (to, &b) in first.iter_mut().zip(bytes) {
        if b == b' ' || b == b'\r' {
            break;
        }
        *to = b;
    }
    match u64::from_le_bytes(first) {
        GET => 0,
        GETS => 1,
        GAT => 2,
        GATS => 3,
        SET => 4,
        ADD => 5,
        REPLACE => 6,
        APPEND => 7,
        PREPEND => 8,
        CAS => 9,
        DELETE => 10,
        INCR => 11,
        DECR => 12,
        TOUCH => 13,
        MG => 14,
        MS => 15,
        MD => 16,
        MA => 17,
        _ => 18,
    }
}

/// The index of the bucket `micros` falls in.
fn bucket_of(micros: u64) -> usize {
    BUCKETS_US
        .iter()
        .position(|&b| micros <= b)
        .unwrap_or(BUCKETS_US.len())
}

/// One connection's counts.
#[repr(align(64))]
#[derive(Debug, Default)]
pub struct ConnStats {
    commands: [AtomicU64; COMMANDS.len()],
    /// Replies per bucket (not cumulative), the last one over every bound.
    buckets: [AtomicU64; BUCKETS_US.len() + 1],
    sum_us: AtomicU64,
}

/// Adds one to a counter only its connection's task writes.
fn bump(counter: &AtomicU64, by: u64) {
    counter.store(counter.load(Ordering::Relaxed) + by, Ordering::Relaxed);
}

impl ConnStats {
    /// Counts a request of command `command` (see [`command_of`]) sent.
    pub(crate) fn sent(&self, command: u8) {
        bump(&self.commands[command as usize], 1);
    }

    /// Counts a reply `micros` after its request was written.
    pub(crate) fn replied(&self, micros: u64) {
        bump(&self.buckets[bucket_of(micros)], 1);
        bump(&self.sum_us, micros);
    }

    /// Adds this connection's counts to `total`.
    pub fn add_to(&self, total: &mut Measured) {
        for (t, c) in total.commands.iter_mut().zip(&self.commands) {
            *t += c.load(Ordering::Relaxed);
        }
        for (t, b) in total.buckets.iter_mut().zip(&self.buckets) {
            *t += b.load(Ordering::Relaxed);
        }
        total.sum_us += self.sum_us.load(Ordering::Relaxed);
    }
}

/// Counts added up over connections (of a server, a pool, the router).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Measured {
    /// Requests sent, by [`COMMANDS`] index.
    pub commands: [u64; COMMANDS.len()],
    /// Replies per latency bucket (not cumulative; the last: over every bound).
    pub buckets: [u64; BUCKETS_US.len() + 1],
    /// The replies' latencies added up, µs.
    pub sum_us: u64,
}

impl Measured {
    /// Adds `other` to it.
    pub fn add(&mut self, other: &Measured) {
        for (t, c) in self.commands.iter_mut().zip(&other.commands) {
            *t += c;
        }
        for (t, b) in self.buckets.iter_mut().zip(&other.buckets) {
            *t += b;
        }
        self.sum_us += other.sum_us;
    }

    /// Counts one latency of `micros` (for counts kept by one task, added up later).
    pub fn record(&mut self, micros: u64) {
        self.record_n(micros, 1);
    }

    /// Counts `n` replies of the same latency.
    pub fn record_n(&mut self, micros: u64, n: u64) {
        self.buckets[bucket_of(micros)] += n;
        self.sum_us += micros * n;
    }

    /// Replies measured.
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }

    /// The upper bound (µs) of the bucket that holds quantile `q` (0..1); `None` without
    /// replies, `u64::MAX` when it is over every bound.
    pub fn quantile_bound_us(&self, q: f64) -> Option<u64> {
        let n = self.count();
        if n == 0 {
            return None;
        }
        let rank = ((q * n as f64).ceil() as u64).clamp(1, n);
        let mut seen = 0;
        for (i, b) in self.buckets.iter().enumerate() {
            seen += b;
            if seen >= rank {
                return Some(BUCKETS_US.get(i).copied().unwrap_or(u64::MAX));
            }
        }
        Some(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_and_buckets() {
        assert_eq!(COMMANDS[command_of(b"get a b\r\n") as usize], "get");
        assert_eq!(COMMANDS[command_of(b"mg k v\r\n") as usize], "mg");
        assert_eq!(COMMANDS[command_of(b"lease-get k\r\n") as usize], "other");
        for (i, c) in COMMANDS.iter().enumerate().take(18) {
            assert_eq!(command_of(format!("{c} k\r\n").as_bytes()), i as u8);
        }
        assert_eq!(command_of(b"version\r\n"), 18);
        assert_eq!(command_of(b"gets1 k\r\n"), 18);
        assert_eq!(command_of(b"getsgetsget k\r\n"), 18);
        assert_eq!(command_of(b"replaced k\r\n"), 18);
        assert_eq!(command_of(b"get\r\n"), 0);
        assert_eq!(command_of(b""), 18);
        let (a, b) = (Stamp::now(), Stamp::now());
        assert!(b >= a && a.micros_since(b) == 0);
        let c = Stamp(a.0 + 2_500_000);
        assert_eq!(c.micros_since(a), 2_500);
        let s = ConnStats::default();
        s.sent(0);
        for us in [10, 50, 51, 2_000_000] {
            s.replied(us);
        }
        let mut m = Measured::default();
        s.add_to(&mut m);
        assert_eq!(m.commands[0], 1);
        assert_eq!((m.buckets[0], m.buckets[1], m.buckets[14]), (2, 1, 1));
        assert_eq!(m.sum_us, 2_000_111);
        assert_eq!(m.quantile_bound_us(0.5), Some(50));
        assert_eq!(m.quantile_bound_us(0.75), Some(100));
        assert_eq!(m.quantile_bound_us(1.0), Some(u64::MAX));
    }
}
