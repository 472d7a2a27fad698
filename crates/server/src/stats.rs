//! Server counters, kept per worker thread and summed only when someone asks (`stats`,
//! `/metrics`). Facebook found a global stats lock cost 20–30% of CPU; here each counter has
//! one writer (its worker), so updates are plain relaxed loads and stores with no contention
//! and no locked instructions, and readers add the workers' values up.

use crate::conn_stats::ConnTable;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

macro_rules! counters {
    ($(#[$meta:meta])* $name:ident { $($(#[$fmeta:meta])* $field:ident,)* }) => {
        $(#[$meta])*
        #[derive(Default, Debug)]
        pub struct $name {
            $($(#[$fmeta])* pub $field: Counter,)*
        }

        /// A plain snapshot of the counters.
        #[derive(Default, Debug, Clone, Copy, PartialEq, Eq)]
        pub struct CounterValues {
            $($(#[$fmeta])* pub $field: u64,)*
        }

        impl $name {
            /// The current values.
            pub fn snapshot(&self) -> CounterValues {
                CounterValues { $($field: self.$field.get(),)* }
            }
        }

        impl CounterValues {
            /// Adds another worker's values.
            pub fn add(&mut self, other: &CounterValues) {
                $(self.$field += other.$field;)*
            }

            /// Subtracts a baseline (`stats reset`).
            pub fn subtract(&mut self, base: &CounterValues) {
                $(self.$field = self.$field.wrapping_sub(base.$field);)*
            }

            /// `(name, value)` pairs in memcached's naming.
            pub fn pairs(&self) -> Vec<(&'static str, u64)> {
                vec![$((stringify!($field), self.$field),)*]
            }
        }
    };
}

/// One counter with a single writing thread.
#[derive(Default, Debug)]
pub struct Counter(AtomicU64);

impl Counter {
    /// Adds `n`. Only the owning worker calls this, so a load and a store cannot lose an
    /// update, and they compile to plain moves (no `lock` prefix).
    #[inline]
    pub fn add(&self, n: u64) {
        self.0.store(
            self.0.load(Ordering::Relaxed).wrapping_add(n),
            Ordering::Relaxed,
        );
    }

    /// Adds one.
    #[inline]
    pub fn incr(&self) {
        self.add(1);
    }

    /// The current value.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

counters! {
    /// A worker's command counters, named as memcached names them in `stats`.
    WorkerCounters {
        /// Retrieval requests (one per key).
        cmd_get,
        /// Storage requests.
        cmd_set,
        /// flush_all requests.
        cmd_flush,
        /// touch/gat requests (one per key).
        cmd_touch,
        /// Meta-protocol requests.
        cmd_meta,
        /// Keys found.
        get_hits,
        /// Keys not found.
        get_misses,
        /// Keys found expired on access.
        get_expired,
        /// Keys found invalidated by flush_all on access (the engine does not tell these
        /// apart from misses, so this stays 0).
        get_flushed,
        /// Deletes of absent keys.
        delete_misses,
        /// Deletes that removed a value.
        delete_hits,
        /// incr on an absent key.
        incr_misses,
        /// incr that applied.
        incr_hits,
        /// decr on an absent key.
        decr_misses,
        /// decr that applied.
        decr_hits,
        /// cas on an absent key.
        cas_misses,
        /// cas that stored.
        cas_hits,
        /// cas refused: the value changed.
        cas_badval,
        /// touch that found the key.
        touch_hits,
        /// touch on an absent key.
        touch_misses,
        /// Stores refused as too large.
        store_too_large,
        /// Stores refused for lack of memory.
        store_no_memory,
        /// Authentication attempts (`set` before authenticating, with `--auth-file`).
        auth_cmds,
        /// Authentication attempts refused.
        auth_errors,
        /// Bytes read from clients.
        bytes_read,
        /// Bytes written to clients.
        bytes_written,
        /// Times a connection yielded to others after a long batch.
        conn_yields,
        /// Lease tokens handed out (`lease-get` misses, meta `W` wins).
        lease_grants,
        /// Lease reads told to wait: another client holds the key's token (or a hold-off).
        lease_hot_misses,
        /// Lease reads answered with a stale value.
        lease_stale_hits,
        /// `lease-set`s refused: the token was voided by a delete or had been replaced.
        lease_sets_refused,
        /// Requests run over UDP (datagrams answered; reads only unless `--udp-writes`).
        udp_requests,
        /// UDP replies refused as larger than one UDP message may be.
        udp_too_large,
        /// Deletes with a hold-off (`delete <key> <seconds>`, `md <key> T<seconds>`).
        holdoff_deletes,
    }
}

/// Server-wide connection counts (updated once per connection, not per request).
#[derive(Debug)]
pub struct ConnectionCounts {
    /// Connections open now.
    pub current: AtomicUsize,
    /// Connections accepted since start.
    pub total: AtomicU64,
    /// Connections refused over the limit.
    pub rejected: AtomicU64,
    /// When the server started.
    pub started: Instant,
    /// Times accepting stopped for a while because `accept` failed (out of file
    /// descriptors, say): memcached's `listen_disabled_num`.
    pub listen_disabled: AtomicU64,
    /// Microseconds spent not accepting for that reason.
    pub listen_disabled_us: AtomicU64,
    /// Every open socket, for `stats conns`.
    pub table: Arc<ConnTable>,
}

impl Default for ConnectionCounts {
    fn default() -> Self {
        ConnectionCounts {
            current: AtomicUsize::new(0),
            total: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            started: Instant::now(),
            listen_disabled: AtomicU64::new(0),
            listen_disabled_us: AtomicU64::new(0),
            table: Arc::default(),
        }
    }
}

/// CPU time this process has used, user and system, in seconds (`getrusage`).
pub fn rusage() -> (f64, f64) {
    // SAFETY: getrusage writes into the zeroed struct we pass and reads nothing else;
    // RUSAGE_SELF is always valid.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (secs(usage.ru_utime), secs(usage.ru_stime))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_sum_across_workers() {
        let a = WorkerCounters::default();
        let b = WorkerCounters::default();
        a.cmd_get.add(3);
        b.cmd_get.incr();
        b.get_hits.incr();
        let mut total = a.snapshot();
        total.add(&b.snapshot());
        assert_eq!((total.cmd_get, total.get_hits), (4, 1));
        assert!(total.pairs().contains(&("cmd_get", 4)));
    }
}
