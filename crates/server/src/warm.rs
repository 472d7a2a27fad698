//! Warm restart across upgrades (Facebook §6.4), the server's half: the memory file and
//! its snapshot. The engine's half (`memfleet_storage::persist`) turns state into bytes.
//!
//! With `--memory-file PATH` the segment heap is a shared mapping of `PATH` (put it on
//! tmpfs, e.g. `/dev/shm`: its pages are the cache's memory, and they outlive the process).
//! A graceful stop (SIGTERM, SIGINT or SIGUSR1) writes `PATH.meta`: the snapshot of
//! everything outside the heap, written to a temporary name and renamed, so it is whole or
//! absent. The next start with the same file reads `PATH.meta` and **deletes it before
//! serving**: from then on the heap changes, so if this process crashes, no snapshot
//! describes the file and the next start is empty. A snapshot of another format or layout
//! (a release that changed what the heap's bytes mean; another release of the same format
//! is taken, so upgrades stay warm), for another memory size, torn, corrupt or unreadable is refused the same way, as is a memory
//! file of the wrong size or a save killed before its rename (its `PATH.meta.tmp` is
//! removed): start empty, say why, serve. Only a snapshot that cannot be *removed* stops
//! the start, since a later start would trust it against a heap that has changed.
//!
//! The file is locked (`flock`) while a server uses it, so two servers cannot share one. A
//! file system without room for the whole file (a container's 64 MiB `/dev/shm`) is refused
//! at start: the alternative is SIGBUS once the cache fills.

use anyhow::{bail, Context};
use memfleet_storage::memmap2::MmapMut;
use memfleet_storage::{Cache, Config};
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// How the cache came up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Start {
    /// No memory file: an ordinary heap.
    Plain,
    /// A memory file, empty cache; why the contents were not used.
    Cold(String),
    /// A memory file brought back.
    Warm {
        /// Items restored.
        items: u64,
        /// Time from opening the file to a serving cache, µs.
        micros: u64,
    },
}

/// An open, locked memory file.
pub struct MemoryFile {
    path: PathBuf,
    /// Holds the lock for as long as the server runs.
    _file: File,
}

/// The snapshot's path for a memory file.
pub fn meta_path(path: &Path) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(".meta");
    PathBuf::from(p)
}

/// Refuses a memory file its file system cannot hold: pages of a shared mapping are
/// allocated as they are first written, and one that finds the tmpfs full kills the process
/// with SIGBUS, long after the start (a container's `/dev/shm` is 64 MiB unless its
/// `--shm-size` says more). What the file already holds counts as room.
fn room_for(file: &File, path: &Path, len: u64) -> anyhow::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let held = file.metadata()?.blocks() * 512;
    // SAFETY: statvfs is plain data, for which all zeroes is a valid value.
    let mut fs: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: fstatvfs fills the struct we own from a descriptor we own.
    if unsafe { libc::fstatvfs(file.as_raw_fd(), &mut fs) } != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("the file system of {}", path.display()));
    }
    let free = fs.f_bavail as u64 * fs.f_frsize as u64;
    if held + free < len {
        bail!(
            "the memory file {} needs {} MiB, and its file system has {} MiB free: a full \
             tmpfs would kill the server (SIGBUS) as the cache fills. Give it more room \
             (a container's /dev/shm: --shm-size) or a smaller memory limit",
            path.display(),
            len >> 20,
            (held + free) >> 20
        );
    }
    Ok(())
}

/// Where a snapshot is written before it is renamed to `meta`.
fn tmp_path(meta: &Path) -> PathBuf {
    let mut p = meta.as_os_str().to_owned();
    p.push(".tmp");
    PathBuf::from(p)
}

fn map(file: &File) -> anyhow::Result<MmapMut> {
    // SAFETY: the mapping's bytes may change only through this process: the file is ours
    // under an exclusive flock that every memfleet server takes before mapping it, and the
    // engine accesses the bytes under the heap's own rules. (Another program writing the
    // file anyway could make the engine read torn items, never memory outside the mapping:
    // every heap access is bounds-checked.)
    unsafe { MmapMut::map_mut(file) }.context("mapping the memory file")
}

/// Opens (creating it if needed) and locks the memory file, and builds the cache in it:
/// restored from its snapshot when there is a usable one, empty otherwise.
pub fn open(path: &Path, config: Config) -> anyhow::Result<(Cache, MemoryFile, Start)> {
    let started = Instant::now();
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .with_context(|| format!("opening the memory file {}", path.display()))?;
    // SAFETY: flock on a descriptor we own; it only takes an advisory lock.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        bail!(
            "the memory file {} is in use by another process",
            path.display()
        );
    }
    let len = Cache::mapping_len(&config)?;
    room_for(&file, path, len as u64)?;
    let meta = meta_path(path);
    // A save killed before its rename leaves a partial snapshot under the temporary name:
    // never used, only reported.
    let tmp = tmp_path(&meta);
    let interrupted = match std::fs::remove_file(&tmp) {
        Ok(()) => true,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(e) => return Err(e).with_context(|| format!("removing {}", tmp.display())),
    };
    // Before anything else, the snapshot goes: from now on the heap changes under it. One
    // that cannot be read (its permissions, a read error) is no reason to refuse to serve
    // once it is gone; one that cannot be removed is (a later start would trust it).
    let remove = || {
        std::fs::remove_file(&meta)
            .with_context(|| format!("removing the used snapshot {}", meta.display()))
    };
    let (snapshot, unreadable) = match std::fs::read(&meta) {
        Ok(bytes) => {
            remove()?;
            (Some(bytes), None)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => (None, None),
        Err(e) => {
            remove().with_context(|| format!("{} cannot be read: {e}", meta.display()))?;
            (None, Some(e))
        }
    };
    let file_len = file.metadata()?.len();
    let mut why = match (&snapshot, unreadable) {
        (None, _) if interrupted => format!(
            "the last save was interrupted (a partial snapshot {} was left; removed)",
            tmp.display()
        ),
        (None, Some(e)) => format!(
            "the snapshot {} could not be read ({e}); removed",
            meta.display()
        ),
        (None, None) if file_len == 0 => "a new memory file".to_string(),
        (None, None) => {
            "no snapshot (the last stop was not graceful, or this is a first start)".into()
        }
        (Some(_), _) if file_len != len as u64 => {
            format!("the memory file has {file_len} bytes, this memory limit needs {len}")
        }
        (Some(_), _) => String::new(),
    };
    if why.is_empty() {
        let bytes = snapshot.expect("checked above");
        match Cache::resume(config.clone(), map(&file)?, &bytes) {
            Ok((cache, restored)) => {
                let start = Start::Warm {
                    items: restored.items,
                    micros: started.elapsed().as_micros() as u64,
                };
                let memory = MemoryFile {
                    path: path.to_owned(),
                    _file: file,
                };
                return Ok((cache, memory, start));
            }
            Err(e) => why = e.to_string(),
        }
    }
    // Empty: size the file (truncating drops stale pages) and zero the mapping.
    file.set_len(0)?;
    file.set_len(len as u64)?;
    let cache = Cache::with_mapping(config, map(&file)?)?;
    let memory = MemoryFile {
        path: path.to_owned(),
        _file: file,
    };
    Ok((cache, memory, Start::Cold(why)))
}

impl MemoryFile {
    /// Writes the snapshot for the next start (every worker must have stopped).
    pub fn save(&self, cache: &Cache) -> anyhow::Result<usize> {
        let bytes = cache
            .snapshot()
            .context("taking the warm-restart snapshot")?;
        let meta = meta_path(&self.path);
        let tmp = tmp_path(&meta);
        std::fs::write(&tmp, &bytes).with_context(|| format!("writing {}", tmp.display()))?;
        File::open(&tmp)?.sync_all()?;
        std::fs::rename(&tmp, &meta).with_context(|| format!("renaming to {}", meta.display()))?;
        Ok(bytes.len())
    }
}
