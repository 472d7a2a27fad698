//! The files on disk: each one opened (O_DIRECT where the filesystem allows it), locked
//! against a second server, and sized to whole segments; and the map from a physical segment
//! number to its file and byte offset.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use crate::error::FlashError;
use crate::spec::FlashSpec;

/// One open flash file.
pub(crate) struct FlashFile {
    pub(crate) file: File,
    pub(crate) spec: FlashSpec,
    /// Its first physical segment.
    pub(crate) first: u32,
    /// How many segments it holds.
    pub(crate) segments: u32,
    /// Opened with O_DIRECT.
    pub(crate) direct: bool,
}

/// Every file, in physical segment order.
pub(crate) struct Layout {
    pub(crate) files: Vec<FlashFile>,
    pub(crate) segment_size: usize,
    pub(crate) segments: u32,
}

impl Layout {
    /// Opens every file; `segment_size` is already checked.
    pub(crate) fn open(specs: &[FlashSpec], segment_size: usize) -> Result<Layout, FlashError> {
        if specs.is_empty() {
            return Err(FlashError::Options("no ext_path file given".into()));
        }
        let mut files = Vec::with_capacity(specs.len());
        let mut total: u64 = 0;
        for spec in specs {
            let file = open_file(spec, segment_size, total)?;
            total += u64::from(file.segments);
            files.push(file);
        }
        Ok(Layout {
            files,
            segment_size,
            // open_file keeps the total within u32.
            segments: total as u32,
        })
    }

    /// The file holding physical segment `phys` and the segment's byte offset in it.
    pub(crate) fn locate(&self, phys: u32) -> Option<(usize, u64)> {
        let index = self
            .files
            .partition_point(|f| u64::from(f.first) + u64::from(f.segments) <= u64::from(phys));
        let file = self.files.get(index)?;
        Some((
            index,
            u64::from(phys - file.first) * self.segment_size as u64,
        ))
    }
}

/// Opens, locks and sizes one file whose first segment is `first`.
fn open_file(spec: &FlashSpec, segment_size: usize, first: u64) -> Result<FlashFile, FlashError> {
    let path = &spec.path;
    let open_err = |source: io::Error| FlashError::Open {
        path: path.clone(),
        source,
    };
    let segments = spec.size / segment_size as u64;
    if segments == 0 {
        return Err(FlashError::TooSmall {
            path: path.clone(),
            size: spec.size,
            segment: segment_size,
        });
    }
    let segments = u32::try_from(segments)
        .ok()
        .filter(|&s| first + u64::from(s) <= u64::from(u32::MAX))
        .ok_or_else(|| {
            FlashError::Options(format!(
                "more than {} segments of {segment_size} bytes in all",
                u32::MAX
            ))
        })?;
    let (file, direct) = open_direct(path, libc::O_DIRECT).map_err(open_err)?;
    lock(&file).map_err(|e| {
        if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
            FlashError::Locked { path: path.clone() }
        } else {
            open_err(e)
        }
    })?;
    size(&file, u64::from(segments) * segment_size as u64).map_err(open_err)?;
    tracing::info!(path = %path.display(), segments, first, direct, "flash file open");
    Ok(FlashFile {
        file,
        spec: spec.clone(),
        first: first as u32,
        segments,
        direct,
    })
}

/// Opens (creating) `path` with `direct_flags` (O_DIRECT), or without them where the open
/// fails with EINVAL (a filesystem that refuses O_DIRECT); says which.
fn open_direct(path: &Path, direct_flags: libc::c_int) -> io::Result<(File, bool)> {
    let mut options = OpenOptions::new();
    options.read(true).write(true).create(true);
    match options.clone().custom_flags(direct_flags).open(path) {
        Ok(file) => Ok((file, true)),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            tracing::warn!(
                path = %path.display(),
                "the filesystem refuses O_DIRECT; the flash file goes through the page cache"
            );
            Ok((options.open(path)?, false))
        }
        Err(e) => Err(e),
    }
}

/// Takes the file's exclusive lock without waiting (EWOULDBLOCK when another holds it).
fn lock(file: &File) -> io::Result<()> {
    // SAFETY: flock reads only its two integer arguments; the descriptor belongs to `file`,
    // which is open for the whole call. The lock lives as long as the open file description.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Makes the file exactly `len` bytes, allocated where the filesystem can (so a full disk
/// fails now, not at the first write); what it held below `len` is kept.
fn size(file: &File, len: u64) -> io::Result<()> {
    if file.metadata()?.len() > len {
        file.set_len(len)?;
    }
    let off_len = libc::off_t::try_from(len)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "file size too large"))?;
    // SAFETY: fallocate reads only its integer arguments; the descriptor belongs to `file`,
    // which is open for the whole call.
    let rc = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, off_len) };
    if rc == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) => file.set_len(len),
        _ => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fallback, which no filesystem here may need (tmpfs takes O_DIRECT since Linux 6.6):
    /// O_TMPFILE with O_CREAT is EINVAL on every kernel, before any filesystem is asked.
    #[test]
    fn einval_opens_without_the_flags() {
        let dir =
            std::env::temp_dir().join(format!("memfleet-flash-layout-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("f");
        let (file, direct) = open_direct(&path, libc::O_DIRECT | libc::O_TMPFILE).unwrap();
        assert!(!direct);
        assert!(file.metadata().unwrap().is_file());
        let (_, direct) = open_direct(&path, 0).unwrap();
        assert!(direct, "flags accepted");
        let missing = open_direct(&dir.join("no/such"), 0).unwrap_err();
        assert_eq!(missing.kind(), io::ErrorKind::NotFound);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
