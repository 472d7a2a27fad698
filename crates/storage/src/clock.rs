//! The engine's notion of time: whole seconds since the cache was created.
//!
//! Like memcached, the engine works at one-second granularity with a 32-bit relative clock
//! (136 years of range). Tests and simulators drive a [`Clock::manual`] clock so that TTL
//! behaviour is checked without sleeping; servers use [`Clock::system`], which reads the
//! kernel's coarse monotonic clock (a few nanoseconds, no syscall).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// Longest relative expiry memcached accepts; larger exptimes are absolute Unix times.
pub const MEMCACHED_MAX_RELATIVE: i64 = 60 * 60 * 24 * 30;

/// A source of "now" in seconds since the cache started.
#[derive(Clone, Debug)]
pub struct Clock(ClockKind);

#[derive(Clone, Debug)]
enum ClockKind {
    System {
        start_coarse: u64,
        start_unix: u64,
    },
    Manual {
        now: Arc<AtomicU32>,
        start_unix: u64,
    },
}

impl Clock {
    /// The real clock.
    pub fn system() -> Clock {
        Clock(ClockKind::System {
            start_coarse: coarse_monotonic_secs(),
            start_unix: unix_now(),
        })
    }

    /// This clock continued in a new process: the same start (so the relative deadlines a
    /// warm restart brings back keep their meaning) and, for a manual clock, at least the
    /// time it had reached.
    pub fn resumed(&self, start_unix: u64, now: u32) -> Clock {
        match &self.0 {
            ClockKind::System { .. } => {
                // Never before the time the snapshot was taken, even if the wall clock was
                // stepped back meanwhile: deadlines and lease times must not run backwards.
                let elapsed = unix_now().saturating_sub(start_unix).max(u64::from(now));
                Clock(ClockKind::System {
                    start_coarse: coarse_monotonic_secs().wrapping_sub(elapsed),
                    start_unix,
                })
            }
            ClockKind::Manual { now: current, .. } => {
                // The same counter, so whoever drives this manual clock drives the cache's.
                current.fetch_max(now, Ordering::AcqRel);
                Clock(ClockKind::Manual {
                    now: current.clone(),
                    start_unix,
                })
            }
        }
    }

    /// A clock that moves only when told to ([`Clock::advance`], [`Clock::set`]); it starts at 0
    /// and pretends the cache started at the current Unix time.
    pub fn manual() -> Clock {
        Clock(ClockKind::Manual {
            now: Arc::new(AtomicU32::new(0)),
            start_unix: unix_now(),
        })
    }

    /// Seconds since the cache started.
    #[inline]
    pub fn now(&self) -> u32 {
        match &self.0 {
            ClockKind::System { start_coarse, .. } => {
                // Wrapping: a resumed clock's start may lie before boot (see `resumed`).
                (coarse_monotonic_secs().wrapping_sub(*start_coarse)) as u32
            }
            ClockKind::Manual { now, .. } => now.load(Ordering::Acquire),
        }
    }

    /// The Unix time (seconds) at which the cache started.
    pub fn start_unix(&self) -> u64 {
        match &self.0 {
            ClockKind::System { start_unix, .. } | ClockKind::Manual { start_unix, .. } => {
                *start_unix
            }
        }
    }

    /// The current Unix time as this clock sees it.
    pub fn unix_now(&self) -> u64 {
        self.start_unix() + u64::from(self.now())
    }

    /// Moves a manual clock forward; panics on the system clock, which tests must not touch.
    pub fn advance(&self, secs: u32) {
        match &self.0 {
            ClockKind::Manual { now, .. } => {
                now.fetch_add(secs, Ordering::AcqRel);
            }
            ClockKind::System { .. } => panic!("cannot advance the system clock"),
        }
    }

    /// Sets a manual clock (it may not go backwards).
    pub fn set(&self, secs: u32) {
        match &self.0 {
            ClockKind::Manual { now, .. } => {
                now.fetch_max(secs, Ordering::AcqRel);
            }
            ClockKind::System { .. } => panic!("cannot set the system clock"),
        }
    }

    /// True for a manual clock.
    pub fn is_manual(&self) -> bool {
        matches!(self.0, ClockKind::Manual { .. })
    }
}

/// When an item expires, as a client said it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expiry {
    /// Never (memcached's exptime 0).
    Never,
    /// After this many seconds (1 means "within the next second").
    After(u32),
    /// At this Unix time.
    AtUnix(u64),
    /// Already expired: the write succeeds but stores nothing (memcached's negative exptime).
    Expired,
}

impl Expiry {
    /// memcached's rule: 0 is never, negative is already expired, up to 30 days is relative,
    /// anything larger is an absolute Unix time.
    pub fn from_memcached(exptime: i64) -> Expiry {
        if exptime == 0 {
            Expiry::Never
        } else if exptime < 0 {
            Expiry::Expired
        } else if exptime > MEMCACHED_MAX_RELATIVE {
            Expiry::AtUnix(exptime as u64)
        } else {
            Expiry::After(exptime as u32)
        }
    }
}

/// A resolved deadline in clock seconds; `u32::MAX` means never.
pub(crate) type Deadline = u32;
pub(crate) const NEVER: Deadline = u32::MAX;

impl Clock {
    /// Turns a client's expiry into a deadline, or `None` when it is already in the past.
    pub(crate) fn deadline(&self, expiry: Expiry, now: u32) -> Option<Deadline> {
        match expiry {
            Expiry::Never => Some(NEVER),
            Expiry::Expired => None,
            Expiry::After(0) => Some(NEVER),
            Expiry::After(secs) => Some(now.saturating_add(secs).min(NEVER - 1)),
            Expiry::AtUnix(at) => {
                let unix = self.start_unix() + u64::from(now);
                if at <= unix {
                    None
                } else {
                    let rel = (at - self.start_unix()).min(u64::from(NEVER - 1));
                    Some(rel as u32)
                }
            }
        }
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn coarse_monotonic_secs() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec and CLOCK_MONOTONIC_COARSE is a clock id every
    // Linux kernel since 2.6.32 supports; clock_gettime writes only into `ts`.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    if rc != 0 {
        return std::time::Instant::now().elapsed().as_secs();
    }
    ts.tv_sec as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memcached_exptime_rules() {
        assert_eq!(Expiry::from_memcached(0), Expiry::Never);
        assert_eq!(Expiry::from_memcached(-1), Expiry::Expired);
        assert_eq!(Expiry::from_memcached(10), Expiry::After(10));
        assert_eq!(
            Expiry::from_memcached(MEMCACHED_MAX_RELATIVE),
            Expiry::After(2_592_000)
        );
        assert_eq!(
            Expiry::from_memcached(MEMCACHED_MAX_RELATIVE + 1),
            Expiry::AtUnix(2_592_001)
        );
    }

    #[test]
    fn deadlines() {
        let clock = Clock::manual();
        clock.set(100);
        let now = clock.now();
        assert_eq!(clock.deadline(Expiry::After(5), now), Some(105));
        assert_eq!(clock.deadline(Expiry::Never, now), Some(NEVER));
        assert_eq!(clock.deadline(Expiry::Expired, now), None);
        let unix = clock.unix_now();
        assert_eq!(clock.deadline(Expiry::AtUnix(unix), now), None);
        assert_eq!(clock.deadline(Expiry::AtUnix(unix + 7), now), Some(107));
        // A past absolute time (memcached treats "exptime <= process start" as expired).
        assert_eq!(clock.deadline(Expiry::AtUnix(5_000_000), now), None);
    }

    #[test]
    fn system_clock_moves_forward() {
        let clock = Clock::system();
        assert!(clock.now() < 2);
    }
}
