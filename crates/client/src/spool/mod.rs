//! The delete spool (Facebook §5: "mcrouters buffer deletes when downstream components
//! become unresponsive"; mcrouter's asynclog): a delete that cannot reach its server is
//! written to a file, flushed to disk before the client hears back, and replayed in order
//! once the server answers again — also after a router restart.
//!
//! **Where.** A configuration's `spool_dir`, or by default a slot of the user's state
//! directory (`default_state_dir`): `<state>/spool/<n>`, the first slot no other process
//! holds. Every spool directory is held with an exclusive lock (`<dir>/lock`) for as long as
//! the process uses it, so two routers (or a router and an application) never append to, or
//! replay, the same files; a restarted process takes the first free slot and so resumes
//! what an earlier one left. Directories are created `0700` and files `0600`; an existing
//! directory that others can write to is refused.
//!
//! **Files.** One queue per (pool, server): `<dir>/<pool>--<host>-<port>.spool` holds the
//! requests as they would be sent, one line each, appended; `<same>.done` holds how many of
//! its bytes have been delivered (written to a temporary file and renamed, so it is always
//! whole). A replayed delete that is lost in a crash between delivery and the `.done` update
//! is sent again: deletes are idempotent, so at-least-once is what is promised. Once
//! everything is delivered both files are removed.
//!
//! **Order and reads.** While a queue holds anything, new deletes for its server join the
//! queue rather than overtake it, and the pool does not read from the server
//! ([`SpoolQueue::holds_reads`]): a server that comes back serves nothing before the deletes it
//! missed. Replay probes a down server at least once a second, and sends at most
//! [`REPLAY_WINDOW`] deletes at a time on one connection, so live traffic on the others
//! keeps flowing.
//!
//! | file | what it holds |
//! |------|---------------|
//! | (this file) | [`Spooler`]: a process's spool directory (slot, lock) and its queues; their Prometheus text |
//! | `queue.rs` | [`SpoolQueue`]: one server's queue, group-committed appends, the replay |
//! | `files.rs` | the on-disk layout: state directory, lock, file names, `.done` offsets, whole-line reads |

mod files;
mod queue;

pub use files::default_state_dir;
pub use queue::{SpoolQueue, SpoolQueueStats, REPLAY_PROBE, REPLAY_WINDOW};

use crate::backend::Backend;
use files::{file_name, safe_dir, take_lock};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Slots tried under the default state directory.
const SLOTS: usize = 1024;

/// The spools of one process, by (pool, server).
pub struct Spooler {
    dir: PathBuf,
    default_location: bool,
    /// Held (an exclusive `flock`) while this spooler lives.
    _lock: std::fs::File,
    queues: Mutex<HashMap<String, Arc<SpoolQueue>>>,
    /// Queues replaying (so holding deletes, or about to find they hold none): while any
    /// is, pools take the path that checks each key's queue.
    busy: Arc<AtomicUsize>,
}

impl Spooler {
    /// A spooler writing into `dir` (created `0700` if missing); fails when another process
    /// holds it or others can write to it.
    pub fn new(dir: &Path) -> std::io::Result<Arc<Spooler>> {
        safe_dir(dir)?;
        let lock = take_lock(dir)?.ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::AddrInUse,
                format!(
                    "{} is in use (by another process, or another client or router in this one)",
                    dir.display()
                ),
            )
        })?;
        Ok(Spooler::holding(dir, lock, false))
    }

    /// A spooler in the first free slot of the default state directory
    /// ([`default_state_dir`]`/spool/<n>`).
    pub fn in_state_dir() -> std::io::Result<Arc<Spooler>> {
        let base = default_state_dir().ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "no state directory for the delete spool (set MEMFLEET_STATE_DIR or HOME, \
                 give spool_dir, or turn spooling off with spool_deletes = false)",
            )
        })?;
        let spools = base.join("spool");
        safe_dir(&spools)?;
        for slot in 0..SLOTS {
            let dir = spools.join(slot.to_string());
            safe_dir(&dir)?;
            if let Some(lock) = take_lock(&dir)? {
                return Ok(Spooler::holding(&dir, lock, true));
            }
        }
        Err(std::io::Error::new(
            std::io::ErrorKind::AddrInUse,
            format!("all {SLOTS} spool slots in {} are in use", spools.display()),
        ))
    }

    fn holding(dir: &Path, lock: std::fs::File, default_location: bool) -> Arc<Spooler> {
        Arc::new(Spooler {
            dir: dir.to_path_buf(),
            default_location,
            _lock: lock,
            queues: Mutex::new(HashMap::new()),
            busy: Arc::new(AtomicUsize::new(0)),
        })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether it is a slot of the default state directory (not a configured `spool_dir`).
    pub fn is_default_location(&self) -> bool {
        self.default_location
    }

    /// Whether any queue may hold deletes (its replay is running).
    pub fn busy(&self) -> bool {
        self.busy.load(Ordering::Acquire) > 0
    }

    /// The queue of `backend` in `pool`, resuming its replay if it holds deletes from an
    /// earlier run.
    pub fn queue(self: &Arc<Self>, pool: &str, backend: &Arc<Backend>) -> Arc<SpoolQueue> {
        let name = file_name(pool, backend.name());
        let mut queues = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(q) = queues.get(&name) {
            // A reload may have made a new Backend for the same server.
            q.set_backend(backend);
            return q.clone();
        }
        let queue = SpoolQueue::open(name.clone(), &self.dir, backend, self.busy.clone());
        queues.insert(name, queue.clone());
        queue
    }

    /// Every queue's state, sorted by name.
    pub fn stats(&self) -> Vec<SpoolQueueStats> {
        let queues = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        let mut out: Vec<_> = queues.values().map(|q| q.stats()).collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }
}

/// Prometheus text of spool queues: `<prefix>_spool_depth`, `<prefix>_spool_oldest_seconds`
/// and `<prefix>_spool_delivered_total`, one series per queue.
pub fn prometheus(prefix: &str, queues: &[SpoolQueueStats], text: &mut String) {
    use std::fmt::Write as _;
    type Metric = (
        &'static str,
        &'static str,
        &'static str,
        fn(&SpoolQueueStats) -> f64,
    );
    let metrics: [Metric; 3] = [
        (
            "spool_depth",
            "gauge",
            "deletes waiting in the spool for a server",
            |q| q.depth as f64,
        ),
        (
            "spool_oldest_seconds",
            "gauge",
            "how long the oldest delete waiting for a server has waited",
            |q| q.oldest.map_or(0.0, |a| a.as_secs_f64()),
        ),
        (
            "spool_delivered_total",
            "counter",
            "spooled deletes delivered to a server",
            |q| q.delivered as f64,
        ),
    ];
    for (name, kind, help, value) in metrics {
        let _ = writeln!(text, "# HELP {prefix}_{name} {help}");
        let _ = writeln!(text, "# TYPE {prefix}_{name} {kind}");
        for q in queues {
            let _ = writeln!(text, "{prefix}_{name}{{queue=\"{}\"}} {}", q.name, value(q));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use files::tests::scratch;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_spool_directory_has_one_holder_and_no_other_writers() {
        let dir = scratch("lock");
        let first = Spooler::new(&dir).unwrap();
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        let second = Spooler::new(&dir).err().expect("a held spool is refused");
        assert!(second.to_string().contains("in use"), "{second}");
        drop(first);
        let again = Spooler::new(&dir).unwrap();
        drop(again);
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let open = Spooler::new(&dir)
            .err()
            .expect("a world-writable spool is refused");
        assert!(open.to_string().contains("writable by others"), "{open}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
