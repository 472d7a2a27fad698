//! One server's queue of undelivered deletes: appends group-committed to its file (flushed
//! before the client hears back), and the replay that delivers them in order.

use super::files::{pending_lines, read_chunk, read_done, write_done};
use crate::backend::Backend;
use memfleet_protocol::reply::ReplyKind;
use std::collections::VecDeque;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// Deletes a replay has in flight at once (one connection's pipeline).
pub const REPLAY_WINDOW: usize = 32;
/// The longest pause between two attempts to reach a server with queued deletes.
pub const REPLAY_PROBE: Duration = Duration::from_secs(1);
/// Append times are remembered at most this often (what the oldest queued age is read
/// from); finer is not worth the memory.
const MARK_EVERY: Duration = Duration::from_millis(10);

/// Where an append hears whether its flush succeeded (the error as text: every append
/// of a group gets it).
type FlushNotice = tokio::sync::oneshot::Sender<Result<(), String>>;

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

impl SpoolQueue {
    /// The queue `name` in `dir` for `backend`, counting what an earlier run left in its file
    /// (and resuming its replay if that is anything). `busy` counts the spooler's replaying
    /// queues.
    pub(super) fn open(
        name: String,
        dir: &Path,
        backend: &Arc<Backend>,
        busy: Arc<AtomicUsize>,
    ) -> Arc<SpoolQueue> {
        let path = dir.join(format!("{name}.spool"));
        let done_path = dir.join(format!("{name}.spool.done"));
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
            name,
            appended: AtomicU64::new(found),
            delivered: AtomicU64::new(0),
            marks: Mutex::new(marks),
            path,
            done_path,
            file: tokio::sync::Mutex::new(()),
            incoming: Mutex::new(Vec::new()),
            replaying: AtomicBool::new(false),
            backend: Mutex::new(backend.clone()),
            busy,
        });
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

    /// Sends this queue's replay to `backend` (a reload made a new one for the same server).
    pub(super) fn set_backend(&self, backend: &Arc<Backend>) {
        *self.backend.lock().unwrap_or_else(|e| e.into_inner()) = backend.clone();
    }

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
