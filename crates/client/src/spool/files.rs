//! The spool's on-disk layout: where the state directory is, the directory lock, queue file
//! names, `.done` offsets (written by rename), and reading whole lines from an offset.

use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Bytes of spool read per replay step.
const CHUNK: u64 = 256 * 1024;

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
pub(super) fn safe_dir(dir: &Path) -> std::io::Result<()> {
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
pub(super) fn take_lock(dir: &Path) -> std::io::Result<Option<std::fs::File>> {
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

/// `<pool>--<host>-<port>`, with anything but letters, digits, `.`, `_` and `-` as `_`.
pub(super) fn file_name(pool: &str, server: &str) -> String {
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

/// The byte offset delivered so far (0 without a `.done` file).
pub(super) fn read_done(done_path: &Path) -> u64 {
    std::fs::read_to_string(done_path)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

/// Deletes in the spool not yet delivered.
pub(super) fn pending_lines(path: &Path, done_path: &Path) -> u64 {
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

/// Up to [`CHUNK`] bytes of the spool from `from`, whole lines only.
pub(super) fn read_chunk(path: &Path, from: u64) -> std::io::Result<Vec<u8>> {
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

/// Records `offset` as delivered: a temporary file, synced, renamed over `.done`.
pub(super) fn write_done(done_path: &Path, offset: u64) -> std::io::Result<()> {
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
pub(super) mod tests {
    use super::*;

    /// A directory for a test to use, gone if an earlier run left it.
    pub(in crate::spool) fn scratch(name: &str) -> PathBuf {
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
}
