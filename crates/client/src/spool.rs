//! The delete spool (Facebook §5: "mcrouters buffer deletes when downstream components
//! become unresponsive"; mcrouter's asynclog): a delete that cannot reach its server is
//! written to a file, flushed to disk before the client hears back, and replayed in order
//! once the server answers again — also after a router restart.
//!
//! One queue per (pool, server): `<dir>/<pool>--<host>-<port>.spool` holds the requests as
//! they would be sent, one line each, appended; `<same>.done` holds how many of its bytes
//! have been delivered (written to a temporary file and renamed, so it is always whole).
//! A replayed delete that is lost in a crash between delivery and the `.done` update is
//! sent again: deletes are idempotent, so at-least-once is what is promised. Once
//! everything is delivered both files are removed.
//!
//! While a queue holds anything, new deletes for its server join the queue rather than
//! overtake it.

use crate::backend::Backend;
use memfleet_protocol::reply::ReplyKind;
use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Bytes of spool read per replay step.
const CHUNK: u64 = 256 * 1024;

/// The spools of one router, by (pool, server).
pub struct Spooler {
    dir: PathBuf,
    queues: Mutex<HashMap<String, Arc<Queue>>>,
}

/// One server's queue of undelivered deletes.
pub struct Queue {
    path: PathBuf,
    done_path: PathBuf,
    /// Serializes appends and the final truncation.
    file: tokio::sync::Mutex<()>,
    depth: AtomicU64,
    replaying: AtomicBool,
    backend: Mutex<Arc<Backend>>,
}

impl Spooler {
    /// A spooler writing into `dir` (created if missing).
    pub fn new(dir: &Path) -> std::io::Result<Arc<Spooler>> {
        std::fs::create_dir_all(dir)?;
        Ok(Arc::new(Spooler {
            dir: dir.to_path_buf(),
            queues: Mutex::new(HashMap::new()),
        }))
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The queue of `backend` in `pool`, resuming its replay if it holds deletes from an
    /// earlier run.
    pub fn queue(self: &Arc<Self>, pool: &str, backend: &Arc<Backend>) -> Arc<Queue> {
        let name = file_name(pool, backend.name());
        let mut queues = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(q) = queues.get(&name) {
            // A reload may have made a new Backend for the same server.
            *q.backend.lock().unwrap_or_else(|e| e.into_inner()) = backend.clone();
            return q.clone();
        }
        let path = self.dir.join(format!("{name}.spool"));
        let done_path = self.dir.join(format!("{name}.spool.done"));
        let queue = Arc::new(Queue {
            depth: AtomicU64::new(pending_lines(&path, &done_path)),
            path,
            done_path,
            file: tokio::sync::Mutex::new(()),
            replaying: AtomicBool::new(false),
            backend: Mutex::new(backend.clone()),
        });
        queues.insert(name, queue.clone());
        if queue.depth() > 0 {
            tracing::info!(
                server = backend.name(),
                deletes = queue.depth(),
                "replaying spooled deletes"
            );
            queue.start_replay();
        }
        queue
    }

    /// Every queue's depth, by file name (for stats and metrics).
    pub fn depths(&self) -> Vec<(String, u64)> {
        let queues = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        let mut out: Vec<_> = queues.iter().map(|(n, q)| (n.clone(), q.depth())).collect();
        out.sort();
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

impl Queue {
    /// Deletes waiting.
    pub fn depth(&self) -> u64 {
        self.depth.load(Ordering::Acquire)
    }

    /// Appends one request and flushes it to disk; starts the replay.
    pub async fn append(self: &Arc<Self>, request: Vec<u8>) -> std::io::Result<()> {
        let guard = self.file.lock().await;
        let path = self.path.clone();
        tokio::task::spawn_blocking(move || {
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)?;
            f.write_all(&request)?;
            f.sync_data()
        })
        .await
        .map_err(std::io::Error::other)??;
        self.depth.fetch_add(1, Ordering::AcqRel);
        drop(guard);
        self.start_replay();
        Ok(())
    }

    fn start_replay(self: &Arc<Self>) {
        if !self.replaying.swap(true, Ordering::AcqRel) {
            tokio::spawn(self.clone().replay());
        }
    }

    /// Delivers the queue in order until it is empty, waiting while the server is down.
    async fn replay(self: Arc<Self>) {
        let mut pause = Duration::from_millis(50);
        loop {
            let backend = self
                .backend
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            if backend.health().down.load(Ordering::Acquire) {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
                continue;
            }
            let done = read_done(&self.done_path);
            let chunk = match read_chunk(&self.path, done) {
                Ok(c) => c,
                Err(e) => {
                    tracing::error!(error = %e, spool = %self.path.display(), "cannot read the spool");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            };
            if chunk.is_empty() {
                // Everything delivered: remove the files, unless an append came meanwhile.
                let _guard = self.file.lock().await;
                if read_chunk(&self.path, done).is_ok_and(|c| c.is_empty()) {
                    let _ = std::fs::remove_file(&self.path);
                    let _ = std::fs::remove_file(&self.done_path);
                    self.depth.store(0, Ordering::Release);
                    self.replaying.store(false, Ordering::Release);
                    tracing::info!(spool = %self.path.display(), "spooled deletes delivered");
                    return;
                }
                continue;
            }
            let mut delivered = 0usize;
            let mut failed = false;
            for line in chunk.split_inclusive(|&b| b == b'\n') {
                if !line.ends_with(b"\n") {
                    break; // an append in progress
                }
                // Any reply is a delivery (NOT_FOUND included); no reply is a failure.
                match backend.call(0, line.to_vec(), ReplyKind::Line).await {
                    Ok(_) => {
                        delivered += line.len();
                        self.depth.fetch_sub(1, Ordering::AcqRel);
                    }
                    Err(_) => {
                        failed = true;
                        break;
                    }
                }
            }
            if delivered > 0 {
                if let Err(e) = write_done(&self.done_path, done + delivered as u64) {
                    tracing::error!(error = %e, "cannot record spool progress");
                }
                pause = Duration::from_millis(50);
            }
            if failed {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
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
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(offset.to_string().as_bytes())?;
    f.sync_data()?;
    std::fs::rename(&tmp, done_path)
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let dir = std::env::temp_dir().join(format!("memfleet-spool-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (path, done) = (dir.join("q.spool"), dir.join("q.spool.done"));
        std::fs::write(&path, b"delete a\r\ndelete b\r\ndelete c\r\n").unwrap();
        assert_eq!(pending_lines(&path, &done), 3);
        write_done(&done, 10).unwrap();
        assert_eq!(pending_lines(&path, &done), 2);
        assert_eq!(read_chunk(&path, 10).unwrap(), b"delete b\r\ndelete c\r\n");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
