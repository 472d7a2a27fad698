//! Buffers whose bytes start on a 4096-byte boundary, as O_DIRECT requires, built without
//! `unsafe`: a `Vec<u8>` over-allocated by one block, used from its first aligned byte.

/// The block size every flash I/O is aligned to (offset, length and memory).
pub(crate) const BLOCK: usize = 4096;

/// A zeroed buffer of `len` bytes starting on a [`BLOCK`] boundary.
pub(crate) struct AlignedBuf {
    raw: Vec<u8>,
    start: usize,
    len: usize,
}

impl AlignedBuf {
    /// A buffer of `len` bytes.
    pub(crate) fn new(len: usize) -> AlignedBuf {
        let raw = vec![0u8; len + BLOCK];
        // The Vec is never pushed to, so its heap pointer (and this offset) never changes.
        let start = raw.as_ptr().align_offset(BLOCK);
        assert!(start < BLOCK, "cannot align a byte buffer to {BLOCK}");
        AlignedBuf { raw, start, len }
    }

    /// Grows the buffer to at least `len` bytes (contents not kept).
    pub(crate) fn ensure(&mut self, len: usize) {
        if len > self.len {
            *self = AlignedBuf::new(len);
        }
    }

    /// The aligned bytes.
    pub(crate) fn as_slice(&self) -> &[u8] {
        &self.raw[self.start..self.start + self.len]
    }

    /// The aligned bytes, writable.
    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.raw[self.start..self.start + self.len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_at_every_size() {
        for len in [0, 1, 100, BLOCK - 1, BLOCK, BLOCK + 1, 3 * BLOCK, 1 << 20] {
            let mut buf = AlignedBuf::new(len);
            assert_eq!(buf.as_slice().len(), len);
            assert_eq!(buf.as_slice().as_ptr() as usize % BLOCK, 0, "len {len}");
            assert_eq!(buf.as_mut_slice().as_ptr() as usize % BLOCK, 0, "len {len}");
            assert!(buf.as_slice().iter().all(|&b| b == 0));
        }
    }

    #[test]
    fn ensure_grows_and_stays_aligned() {
        let mut buf = AlignedBuf::new(10);
        buf.ensure(5);
        assert_eq!(buf.as_slice().len(), 10, "never shrinks");
        buf.ensure(2 * BLOCK + 3);
        assert_eq!(buf.as_slice().len(), 2 * BLOCK + 3);
        assert_eq!(buf.as_slice().as_ptr() as usize % BLOCK, 0);
    }
}
