//! The one read every reader does: the 4096-aligned blocks covering a byte range, pread into
//! an aligned buffer, the range copied out. A file that ends inside the range is an error
//! (`UnexpectedEof`), never zero-filled bytes.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use crate::aligned::{AlignedBuf, BLOCK};
use crate::layout::Layout;

/// Checks that `offset..offset + len` of physical segment `phys` exists.
pub(crate) fn check(layout: &Layout, phys: u32, offset: u32, len: u32) -> io::Result<()> {
    if phys >= layout.segments {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("flash segment {phys} out of range (0..{})", layout.segments),
        ));
    }
    if u64::from(offset) + u64::from(len) > layout.segment_size as u64 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "flash read {offset}+{len} past the {}-byte segment",
                layout.segment_size
            ),
        ));
    }
    Ok(())
}

/// Reads `len` bytes at `offset` of segment `phys` (already [`check`]ed) through `buf`.
pub(crate) fn read_range(
    layout: &Layout,
    phys: u32,
    offset: u32,
    len: u32,
    buf: &mut AlignedBuf,
) -> io::Result<Vec<u8>> {
    let (index, segment_at) = layout
        .locate(phys)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "segment out of range"))?;
    let pos = segment_at + u64::from(offset);
    let start = pos / BLOCK as u64 * BLOCK as u64;
    let end = (pos + u64::from(len)).next_multiple_of(BLOCK as u64);
    let span = (end - start) as usize;
    buf.ensure(span);
    let skip = (pos - start) as usize;
    let file = &layout.files[index].file;
    read_blocks(
        file,
        &mut buf.as_mut_slice()[..span],
        start,
        skip + len as usize,
    )?;
    Ok(buf.as_slice()[skip..skip + len as usize].to_vec())
}

/// Fills `dst` from byte `at` (both block-aligned), retrying EINTR and short reads that end
/// on a block boundary. A read of nothing, or one ending inside a block, is the file's end:
/// an error unless the first `need` bytes are in.
fn read_blocks(file: &File, dst: &mut [u8], at: u64, need: usize) -> io::Result<()> {
    let mut filled = 0;
    while filled < dst.len() {
        match file.read_at(&mut dst[filled..], at + filled as u64) {
            Ok(n) if n == 0 || !(filled + n).is_multiple_of(BLOCK) => {
                filled += n;
                if filled >= need {
                    return Ok(());
                }
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("flash file ends at byte {}", at + filled as u64),
                ));
            }
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Short reads through the page cache (no O_DIRECT): a file cut inside a block.
    #[test]
    fn a_file_ending_inside_the_blocks() {
        let path = std::env::temp_dir().join(format!("memfleet-flash-io-{}", std::process::id()));
        std::fs::write(&path, vec![7u8; 2 * BLOCK + 1000]).unwrap();
        let file = File::open(&path).unwrap();
        let mut buf = AlignedBuf::new(3 * BLOCK);
        read_blocks(&file, buf.as_mut_slice(), 0, 2 * BLOCK + 1000).unwrap();
        assert_eq!(
            &buf.as_slice()[..2 * BLOCK + 1000],
            &[7u8; 2 * BLOCK + 1000][..]
        );
        let err = read_blocks(&file, buf.as_mut_slice(), 0, 2 * BLOCK + 1001).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
        let err =
            read_blocks(&file, &mut buf.as_mut_slice()[..BLOCK], 3 * BLOCK as u64, 1).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof, "past the end");
        read_blocks(&file, &mut buf.as_mut_slice()[..BLOCK], BLOCK as u64, BLOCK).unwrap();
        std::fs::remove_file(&path).unwrap();
    }
}
