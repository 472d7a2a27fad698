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

use crate::backend::Backend;
use memfleet_protocol::reply::ReplyKind;
use std::collections::{HashMap, VecDeque};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// Bytes of spool read per replay step.
const CHUNK: u64 = 256 * 1024;
/// Deletes a replay has in flight at once (one connection's pipeline).
pub const REPLAY_WINDOW: usize = 32;
/// The longest pause between two attempts to reach a server with queued deletes.
pub const REPLAY_PROBE: Duration = Duration::from_secs(1);
/// Slots tried under the default state directory.
const SLOTS: usize = 1024;
/// Append times are remembered at most this often (what the oldest queued age is read
/// from); finer is not worth the memory.
const MARK_EVERY: Duration = Duration::from_millis(10);

/// Where an append hears whether its flush succeeded (the error as text: every append
/// of a group gets it).
type FlushNotice = tokio::sync::oneshot::Sender<Result<(), String>>;

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

/// One server's queue of undelivered deletes.
pub struct SpoolQueue {
    name: String,
    path: PathBuf,
    done_path: PathBuf,
    /// Serializes writes to the file and the final truncation.
    file: tokio::sync::Mutex<()>,
    /// Appends waiting for the next write and flush (group commit: the appends that arrive
    /// while one flush runs share the next).
    incoming: Mutex<Vec<(Vec<u8>, FlushNotice)>>,
    /// Deletes put in this queue by this process (plus those found at start).
    appended: AtomicU64,
    /// Deletes delivered from it.
    delivered: AtomicU64,
    /// (appended count before it, when): sampled append times, oldest first.
    marks: Mutex<VecDeque<(u64, Instant)>>,
    replaying: AtomicBool,
    backend: Mutex<Arc<Backend>>,
    busy: Arc<AtomicUsize>,
}

/// A queue's state, for stats, metrics and the invalidator's delivery report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpoolQueueStats {
    /// `<pool>--<host>-<port>`.
    pub name: String,
    /// Deletes waiting.
    pub depth: u64,
    /// How long the oldest waiting delete has waited (`None`: nothing waits).
    pub oldest: Option<Duration>,
    /// Deletes this process put in the queue (those found at start included).
    pub appended: u64,
    /// Deletes delivered from it.
    pub delivered: u64,
}

/// Where spools live by default: `$MEMFLEET_STATE_DIR`, else systemd's `$STATE_DIRECTORY`
/// (its first entry), else `$XDG_STATE_HOME/memfleet`, else `$HOME/.local/state/memfleet`.
pub fn default_state_dir() -> Option<PathBuf> {
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    if let Some(dir) = var("MEMFLEET_STATE_DIR") {
        return Some(dir.into());
    }
    if let Some(dirs) = var("STATE_DIRECTORY") {
        let first = dirs.to_string_lossy().split(':').next()?.to_string();
        return Some(first.into());
    }
    if let Some(dir) = var("XDG_STATE_HOME") {
        return Some(PathBuf::from(dir).join("memfleet"));
    }
    var("HOME").map(|home| PathBuf::from(home).join(".local/state/memfleet"))
}

/// Creates `dir` (and its parents) `0700` if missing, and refuses one others can write to.
fn safe_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let mode = std::fs::metadata(dir)?.permissions().mode();
    if mode & 0o022 != 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!(
                "{} is writable by others (mode {:o}): a spool must not be; chmod go-w it",
                dir.display(),
                mode & 0o777
            ),
        ));
    }
    Ok(())
}

/// Opens `<dir>/lock` and takes it; `Ok(None)` when another process holds it.
fn take_lock(dir: &Path) -> std::io::Result<Option<std::fs::File>> {
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(dir.join("lock"))?;
    match lock.try_lock() {
        Ok(()) => Ok(Some(lock)),
        Err(std::fs::TryLockError::WouldBlock) => Ok(None),
        Err(std::fs::TryLockError::Error(e)) => Err(e),
    }
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
            *q.backend.lock().unwrap_or_else(|e| e.into_inner()) = backend.clone();
            return q.clone();
        }
        let path = self.dir.join(format!("{name}.spool"));
        let done_path = self.dir.join(format!("{name}.spool.done"));
        let found = pending_lines(&path, &done_path);
        let mut marks = VecDeque::new();
        if found > 0 {
            // What an earlier run left has waited at least since the file last changed.
            let age = std::fs::metadata(&path)
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| SystemTime::now().duration_since(t).ok())
                .unwrap_or_default();
            let now = Instant::now();
            marks.push_back((0, now.checked_sub(age).unwrap_or(now)));
        }
        let queue = Arc::new(SpoolQueue {
            name: name.clone(),
            appended: AtomicU64::new(found),
            delivered: AtomicU64::new(0),
            marks: Mutex::new(marks),
            path,
            done_path,
            file: tokio::sync::Mutex::new(()),
            incoming: Mutex::new(Vec::new()),
            replaying: AtomicBool::new(false),
            backend: Mutex::new(backend.clone()),
            busy: self.busy.clone(),
        });
        queues.insert(name, queue.clone());
        if found > 0 {
            tracing::info!(
                server = backend.name(),
                deletes = found,
                "replaying spooled deletes"
            );
            queue.start_replay();
        }
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

/// `<pool>--<host>-<port>`, with anything but letters, digits, `.`, `_` and `-` as `_`.
fn file_name(pool: &str, server: &str) -> String {
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                    c
                } else if c == ':' {
                    '-'
                } else {
                    '_'
                }
            })
            .collect()
    };
    format!("{}--{}", clean(pool), clean(server))
}

fn read_done(done_path: &Path) -> u64 {
    std::fs::read_to_string(done_path)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

/// Deletes in the spool not yet delivered.
fn pending_lines(path: &Path, done_path: &Path) -> u64 {
    let Ok(mut f) = std::fs::File::open(path) else {
        return 0;
    };
    let done = read_done(done_path);
    let mut rest = Vec::new();
    if f.seek(SeekFrom::Start(done)).is_err() || f.read_to_end(&mut rest).is_err() {
        return 0;
    }
    rest.iter().filter(|&&b| b == b'\n').count() as u64
}

impl SpoolQueue {
    /// Deletes waiting.
    pub fn depth(&self) -> u64 {
        let delivered = self.delivered.load(Ordering::Acquire);
        self.appended
            .load(Ordering::Acquire)
            .saturating_sub(delivered)
    }

    /// Whether reads must not be served by its server yet: it has deletes to replay first.
    pub fn holds_reads(&self) -> bool {
        self.depth() > 0
    }

    /// Its state now.
    pub fn stats(&self) -> SpoolQueueStats {
        let delivered = self.delivered.load(Ordering::Acquire);
        let appended = self.appended.load(Ordering::Acquire);
        let depth = appended.saturating_sub(delivered);
        let oldest = (depth > 0)
            .then(|| {
                let marks = self.marks.lock().unwrap_or_else(|e| e.into_inner());
                // The oldest waiting delete came at or after the last mark not yet passed.
                marks
                    .iter()
                    .take_while(|(seq, _)| *seq <= delivered)
                    .last()
                    .or(marks.front())
                    .map(|(_, at)| at.elapsed())
            })
            .flatten();
        SpoolQueueStats {
            name: self.name.clone(),
            depth,
            oldest,
            appended,
            delivered,
        }
    }

    /// Appends one request and flushes it to disk; starts the replay. Appends made while
    /// a flush runs are written and flushed together next, in the order they came.
    pub async fn append(self: &Arc<Self>, request: Vec<u8>) -> std::io::Result<()> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.incoming
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((request, tx));
        {
            // Whoever gets the file next writes everything waiting, this request or not.
            let _guard = self.file.lock().await;
            let batch =
                std::mem::take(&mut *self.incoming.lock().unwrap_or_else(|e| e.into_inner()));
            if !batch.is_empty() {
                let mut bytes = Vec::with_capacity(batch.iter().map(|(r, _)| r.len()).sum());
                batch.iter().for_each(|(r, _)| bytes.extend_from_slice(r));
                let path = self.path.clone();
                let written = tokio::task::spawn_blocking(move || {
                    let mut f = std::fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .mode(0o600)
                        .open(&path)?;
                    f.write_all(&bytes)?;
                    f.sync_data()
                })
                .await
                .map_err(std::io::Error::other)
                .and_then(|r| r)
                .map_err(|e| e.to_string());
                if written.is_ok() {
                    let before = self.appended.load(Ordering::Acquire);
                    let mut marks = self.marks.lock().unwrap_or_else(|e| e.into_inner());
                    if marks
                        .back()
                        .is_none_or(|(_, at)| at.elapsed() >= MARK_EVERY)
                    {
                        marks.push_back((before, Instant::now()));
                    }
                    drop(marks);
                    self.appended
                        .fetch_add(batch.len() as u64, Ordering::AcqRel);
                }
                for (_, tx) in batch {
                    let _ = tx.send(written.clone());
                }
            }
        }
        rx.await
            .map_err(std::io::Error::other)?
            .map_err(std::io::Error::other)?;
        self.start_replay();
        Ok(())
    }

    fn start_replay(self: &Arc<Self>) {
        if !self.replaying.swap(true, Ordering::AcqRel) {
            self.busy.fetch_add(1, Ordering::AcqRel);
            tokio::spawn(self.clone().replay());
        }
    }

    /// Counts `n` deliveries and forgets the marks they passed.
    fn delivered(&self, n: u64) {
        let delivered = self.delivered.fetch_add(n, Ordering::AcqRel) + n;
        let mut marks = self.marks.lock().unwrap_or_else(|e| e.into_inner());
        // Keep the last mark at or before `delivered`: the next waiting delete's time.
        while marks.len() > 1 && marks[1].0 <= delivered {
            marks.pop_front();
        }
    }

    /// Delivers the queue in order until it is empty, probing its server while it is down.
    async fn replay(self: Arc<Self>) {
        let mut pause = Duration::from_millis(50);
        loop {
            let backend = self
                .backend
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            if backend.health().down.load(Ordering::Acquire) {
                // The backend's own probe backs off to a minute; a server owed deletes is
                // asked at least once a second.
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(REPLAY_PROBE);
                backend.probe_once().await;
                continue;
            }
            let done = read_done(&self.done_path);
            let chunk = match read_chunk(&self.path, done) {
                Ok(c) => c,
                Err(e) => {
                    tracing::error!(error = %e, spool = %self.path.display(), "cannot read the spool");
                    tokio::time::sleep(REPLAY_PROBE).await;
                    continue;
                }
            };
            if chunk.is_empty() {
                // Everything delivered: remove the files, unless an append came meanwhile.
                let _guard = self.file.lock().await;
                if read_chunk(&self.path, done).is_ok_and(|c| c.is_empty()) {
                    let _ = std::fs::remove_file(&self.path);
                    let _ = std::fs::remove_file(&self.done_path);
                    // Whatever was counted is delivered (an earlier run's count included).
                    let rest = self.depth();
                    if rest > 0 {
                        self.delivered(rest);
                    }
                    self.busy.fetch_sub(1, Ordering::AcqRel);
                    self.replaying.store(false, Ordering::Release);
                    tracing::info!(spool = %self.path.display(), "spooled deletes delivered");
                    return;
                }
                continue;
            }
            let lines: Vec<&[u8]> = chunk
                .split_inclusive(|&b| b == b'\n')
                .filter(|l| l.ends_with(b"\n"))
                .collect();
            let mut delivered = 0usize;
            let mut failed = false;
            for window in lines.chunks(REPLAY_WINDOW) {
                // Queued together on one connection (in order); any reply is a delivery
                // (NOT_FOUND included), no reply a failure.
                let calls: Vec<_> = window
                    .iter()
                    .map(|l| backend.call(0, l.to_vec(), ReplyKind::Line))
                    .collect();
                let replies = futures_util::future::join_all(calls).await;
                let ok = replies.iter().take_while(|r| r.is_ok()).count();
                delivered += window[..ok].iter().map(|l| l.len()).sum::<usize>();
                if ok > 0 {
                    if let Err(e) = write_done(&self.done_path, done + delivered as u64) {
                        tracing::error!(error = %e, "cannot record spool progress");
                    }
                    self.delivered(ok as u64);
                }
                if ok < window.len() {
                    failed = true;
                    break;
                }
            }
            if delivered > 0 {
                pause = Duration::from_millis(50);
            }
            if failed {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(REPLAY_PROBE);
            }
        }
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

fn read_chunk(path: &Path, from: u64) -> std::io::Result<Vec<u8>> {
    let mut f = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    f.seek(SeekFrom::Start(from))?;
    let mut out = Vec::new();
    f.take(CHUNK).read_to_end(&mut out)?;
    // Whole lines only.
    let whole = out.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    out.truncate(whole);
    Ok(out)
}

fn write_done(done_path: &Path, offset: u64) -> std::io::Result<()> {
    let tmp = done_path.with_extension("done.tmp");
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(offset.to_string().as_bytes())?;
    f.sync_data()?;
    std::fs::rename(&tmp, done_path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("memfleet-spool-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn file_names_are_safe() {
        assert_eq!(
            file_name("main", "127.0.0.1:11211"),
            "main--127.0.0.1-11211"
        );
        assert_eq!(file_name("a/b", "h:1"), "a_b--h-1");
    }

    #[test]
    fn pending_lines_count_from_the_done_offset() {
        let dir = scratch("pending");
        std::fs::create_dir_all(&dir).unwrap();
        let (path, done) = (dir.join("q.spool"), dir.join("q.spool.done"));
        std::fs::write(&path, b"delete a\r\ndelete b\r\ndelete c\r\n").unwrap();
        assert_eq!(pending_lines(&path, &done), 3);
        write_done(&done, 10).unwrap();
        assert_eq!(pending_lines(&path, &done), 2);
        assert_eq!(read_chunk(&path, 10).unwrap(), b"delete b\r\ndelete c\r\n");
        std::fs::remove_dir_all(&dir).unwrap();
    }

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
