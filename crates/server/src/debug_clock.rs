//! `debugtime`, the command of memcached's debug build (`memcached-debug`) that moves the
//! server's clock, for tests of expiry that should not sleep (memcached's `t/expirations.t`).
//!
//! Only with `--debug-time`: the cache then runs on a manual clock that a thread of its own
//! sets, ten times a second, to the real seconds since the start plus the offset `debugtime`
//! has added. `debugtime <secs>` adds to the offset, `debugtime p` stops the clock and
//! `debugtime r` lets it run again (jumping over the pause, as memcached's does). Unlike
//! memcached's, this clock never runs backwards: a negative offset holds it still until real
//! time has caught up. Without the flag the command is `ERROR`, as in a release memcached.
//!
//! Not here: the clock itself (`memfleet_storage::Clock::manual`).

use memfleet_protocol::response::Status;
use memfleet_storage::Clock;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the ticker sets the clock.
const TICK: Duration = Duration::from_millis(100);

/// The movable clock behind `--debug-time`.
pub struct DebugClock {
    clock: Clock,
    started: Instant,
    offset: AtomicI64,
    paused: AtomicBool,
}

impl DebugClock {
    /// A manual clock for the cache, and its driver.
    pub fn new() -> Arc<DebugClock> {
        Arc::new(DebugClock {
            clock: Clock::manual(),
            started: Instant::now(),
            offset: AtomicI64::new(0),
            paused: AtomicBool::new(false),
        })
    }

    /// The clock to give the cache.
    pub fn clock(&self) -> Clock {
        self.clock.clone()
    }

    /// Starts the thread that keeps the clock running while the server holds this.
    pub fn spawn(self: &Arc<Self>) -> std::io::Result<()> {
        let me = Arc::downgrade(self);
        std::thread::Builder::new()
            .name("memfleet-debug-clock".into())
            .spawn(move || {
                while let Some(me) = me.upgrade() {
                    me.tick();
                    drop(me);
                    std::thread::sleep(TICK);
                }
            })?;
        Ok(())
    }

    fn tick(&self) {
        if self.paused.load(Ordering::Acquire) {
            return;
        }
        let real = i64::try_from(self.started.elapsed().as_secs()).unwrap_or(i64::MAX);
        let now = real.saturating_add(self.offset.load(Ordering::Acquire));
        self.clock
            .set(u32::try_from(now.max(0)).unwrap_or(u32::MAX));
    }

    /// Runs `debugtime <argument>`: the reply line, as memcached 1.6.45's debug build gives
    /// it.
    pub fn command(&self, argument: Option<&[u8]>) -> &'static [u8] {
        match argument {
            None => return Status::Error.as_bytes(),
            Some(b"p") => self.paused.store(true, Ordering::Release),
            Some(b"r") => self.paused.store(false, Ordering::Release),
            Some(secs) => {
                let Some(secs) = std::str::from_utf8(secs)
                    .ok()
                    .and_then(|s| s.parse::<i64>().ok())
                else {
                    return Status::Error.as_bytes();
                };
                self.offset.fetch_add(secs, Ordering::AcqRel);
                if !self.paused.load(Ordering::Acquire) {
                    self.tick();
                } else if let Ok(forward) = u32::try_from(secs) {
                    // A stopped clock still moves when told to, as memcached's does.
                    self.clock.advance(forward);
                }
            }
        }
        Status::Ok.as_bytes()
    }
}
