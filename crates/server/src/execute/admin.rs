//! Administrative commands: `flush_all`, `version`, `verbosity`, `stats` (the groups are
//! `admin_stats`'), and the commands memfleet knows only to refuse or to serve tests
//! (`shutdown`, `debugtime`).
//!
//! Not here: key dumps (`stats cachedump`, `lru_crawler`), which the connection runs as a
//! producer (`dump.rs`).

use super::{reply_status, Executor};
use crate::admin_stats::StatsReport;
use crate::version::VERSION;
use memfleet_protocol::response::{self, Status};
use memfleet_protocol::Tokens;
use memfleet_storage::Expiry;

impl Executor<'_> {
    /// `flush_all [delay] [noreply]`, unless flushing is disabled.
    pub(super) fn flush_all_command(&mut self, delay: i64, noreply: bool, out: &mut Vec<u8>) {
        if self.server.settings.flush_disabled {
            if !noreply {
                out.extend_from_slice(response::FLUSH_DISABLED);
            }
            return;
        }
        self.counters.cmd_flush.incr();
        self.flush_all(delay);
        reply_status(out, Status::Ok, noreply);
    }

    /// `version`.
    pub(super) fn version(&self, out: &mut Vec<u8>) {
        response::version(out, VERSION);
    }

    /// A command word the parser passed on without knowing it.
    pub(super) fn other(&self, command: &[u8], mut args: Tokens<'_>, out: &mut Vec<u8>) {
        match command {
            b"shutdown" => out.extend_from_slice(response::SHUTDOWN_DISABLED),
            b"debugtime" => out.extend_from_slice(match &self.server.debug_clock {
                Some(clock) => clock.command(args.next()),
                None => Status::Error.as_bytes(),
            }),
            b"config" => match &self.server.cluster_config {
                Some(cluster) => cluster.answer(args.as_bytes(), out),
                None => response::status(out, Status::Error),
            },
            _ => response::status(out, Status::Error),
        }
    }

    /// memcached's `flush_all [delay]`: a delay up to 30 days is relative, a larger one is a
    /// Unix time, zero or negative is now.
    pub(super) fn flush_all(&mut self, delay: i64) {
        let secs = match Expiry::from_memcached(delay) {
            Expiry::After(s) => s,
            Expiry::AtUnix(t) => {
                let now = self.server.cache.clock().unix_now();
                u32::try_from(t.saturating_sub(now)).unwrap_or(u32::MAX)
            }
            Expiry::Never | Expiry::Expired => 0,
        };
        self.handle.flush_all(secs);
    }

    /// `stats [group]`, `stats reset`, `stats detail ...`.
    pub(super) fn stats(&mut self, args: Tokens<'_>, out: &mut Vec<u8>) {
        let mut words = args;
        let report = StatsReport::new(self.server);
        match words.next() {
            Some(b"reset") => {
                report.reset();
                response::status(out, Status::Reset);
            }
            Some(b"detail") => match words.next() {
                Some(b"dump") => response::end(out),
                _ => response::status(out, Status::Ok),
            },
            group => match report.group(group.unwrap_or_default()) {
                Some(pairs) => StatsReport::write_text(&pairs, out),
                None => response::status(out, Status::Error),
            },
        }
    }
}
