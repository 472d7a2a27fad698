//! The segment heap: the one allocation that holds every item.
//!
//! The heap is allocated once, when the cache is created, and is exactly the configured memory
//! limit (rounded down to whole segments). Nothing else in the engine allocates per item.
//!
//! This is one of the two places in the engine with `unsafe` code (the other is the clock's
//! `clock_gettime`). Threads read and write disjoint byte ranges of one allocation at the
//! same time, which Rust references cannot express, so the heap hands out raw copies and
//! short-lived slices under a protocol the callers uphold (see `segment.rs`):
//!
//! * a range is written only by the thread that reserved it, and only before it is published
//!   in the hash table (a Release store that readers Acquire);
//! * a published range is never written again until its segment is retired, and a segment is
//!   retired only after it was made inaccessible and its reader count fell to zero.
//!
//! Bounds are always checked, so a protocol bug can return wrong bytes but never touch memory
//! outside the heap.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ptr::NonNull;

/// A fixed array of equally sized segments.
pub struct Heap {
    base: NonNull<u8>,
    backing: Backing,
    segment_size: usize,
    segments: usize,
    /// Under loom: every byte access, checked for races (see [`Shadow`]).
    #[cfg(loom)]
    shadow: Shadow,
}

/// Where the heap's bytes live.
enum Backing {
    /// Our own allocation (freed on drop).
    Allocated(Layout),
    /// A shared mapping of a file the caller opened (warm restart): the bytes outlive the
    /// process in the file, e.g. on tmpfs.
    Mapped(memmap2::MmapMut),
}

// SAFETY: the heap is plain memory; every access goes through the methods below, whose callers
// follow the publication protocol in the module docs, so sharing the pointer between threads is
// sound.
unsafe impl Send for Heap {}
// SAFETY: as above: concurrent access is to disjoint or read-only ranges only.
unsafe impl Sync for Heap {}

/// Asks the kernel to back `[ptr, ptr + len)` with transparent huge pages where it can
/// (`MADV_HUGEPAGE`; Debian's default THP mode is `madvise`, so without it the heap and the
/// hash table use 4 KiB pages). A get touches a hash bucket and an item header at random
/// places in hundreds of megabytes; with 2 MiB pages those touches stop missing the TLB as
/// well as the cache (measured: about 0.1–0.2 µs per get at 100k keys in a 1 GiB heap).
/// Only a hint: failure (no THP support) changes nothing.
pub(crate) fn advise_huge_pages(ptr: *mut u8, len: usize) {
    const PAGE: usize = 4096;
    let start = (ptr as usize).next_multiple_of(PAGE);
    let end = (ptr as usize).saturating_add(len) & !(PAGE - 1);
    if end <= start || cfg!(miri) {
        return;
    }
    #[cfg(not(miri))]
    // SAFETY: madvise only changes how the kernel backs pages of a range of our own live
    // allocation (page-aligned, inside `[ptr, ptr + len)`); MADV_HUGEPAGE never changes or
    // discards contents, so no Rust-visible memory changes.
    unsafe {
        libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
    }
}

impl Heap {
    /// Allocates `segments` segments of `segment_size` bytes, zeroed. Large allocations come
    /// from the kernel as untouched pages, so resident memory grows only as segments fill.
    /// The alignment stays at 16: the system allocator serves a larger one with
    /// `posix_memalign` plus a `memset` that would make the whole heap resident at once.
    pub fn new(segments: usize, segment_size: usize) -> Heap {
        assert!(segments > 0 && segment_size > 0);
        let size = segments
            .checked_mul(segment_size)
            .expect("heap size overflows usize");
        let layout = Layout::from_size_align(size, 16).expect("heap layout");
        // SAFETY: the layout has a non-zero size (both factors are positive).
        let ptr = unsafe { alloc_zeroed(layout) };
        let base = NonNull::new(ptr).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        advise_huge_pages(base.as_ptr(), size);
        Heap {
            base,
            backing: Backing::Allocated(layout),
            segment_size,
            segments,
            #[cfg(loom)]
            shadow: Shadow::default(),
        }
    }

    /// A heap in `mapping` (exactly `segments * segment_size` bytes, checked by the caller),
    /// whose current bytes are kept: zero them first for an empty cache.
    pub fn mapped(mut mapping: memmap2::MmapMut, segments: usize, segment_size: usize) -> Heap {
        assert_eq!(mapping.len(), segments * segment_size, "mapping size");
        let base = NonNull::new(mapping.as_mut_ptr()).expect("a mapping is never at address 0");
        advise_huge_pages(base.as_ptr(), mapping.len());
        Heap {
            base,
            backing: Backing::Mapped(mapping),
            segment_size,
            segments,
            #[cfg(loom)]
            shadow: Shadow::default(),
        }
    }

    /// Whether the heap is a file mapping.
    pub fn is_mapped(&self) -> bool {
        matches!(self.backing, Backing::Mapped(_))
    }

    /// Writes a mapped heap's bytes back to its file (nothing for an allocated heap).
    pub fn flush(&self) -> std::io::Result<()> {
        match &self.backing {
            Backing::Mapped(m) => m.flush(),
            Backing::Allocated(_) => Ok(()),
        }
    }

    /// Zeroes every byte (an empty cache in a reused mapping).
    ///
    /// # Safety
    /// Nothing may read or write the heap meanwhile (the cache is being built).
    pub unsafe fn zero(&self) {
        // SAFETY: the whole range is ours and, per the contract, untouched by anyone else.
        unsafe { std::ptr::write_bytes(self.base.as_ptr(), 0, self.segments * self.segment_size) }
    }

    /// Bytes per segment.
    pub fn segment_size(&self) -> usize {
        self.segment_size
    }

    /// Number of segments.
    pub fn segments(&self) -> usize {
        self.segments
    }

    #[inline]
    fn check(&self, seg: u32, offset: usize, len: usize) -> usize {
        assert!(
            (seg as usize) < self.segments
                && offset <= self.segment_size
                && len <= self.segment_size - offset,
            "heap access out of bounds: segment {seg} offset {offset} len {len}"
        );
        seg as usize * self.segment_size + offset
    }

    /// A view of `len` bytes at `offset` in segment `seg`.
    ///
    /// # Safety
    /// No thread may write to this range while the returned slice lives: the range must be a
    /// published item (or a range the caller itself wrote) in a segment the caller keeps from
    /// being retired.
    #[inline]
    pub unsafe fn bytes(&self, seg: u32, offset: usize, len: usize) -> &[u8] {
        let at = self.check(seg, offset, len);
        #[cfg(loom)]
        self.shadow.read(at, len);
        // SAFETY: `check` proved `at + len` lies inside the allocation; the caller guarantees
        // nobody writes the range while the slice lives.
        unsafe { std::slice::from_raw_parts(self.base.as_ptr().add(at), len) }
    }

    /// Copies `data` to `offset` in segment `seg`.
    ///
    /// # Safety
    /// The caller must own the range: it reserved it and has not published it yet, so no other
    /// thread reads or writes it.
    #[inline]
    pub unsafe fn write(&self, seg: u32, offset: usize, data: &[u8]) {
        let at = self.check(seg, offset, data.len());
        #[cfg(loom)]
        self.shadow.write(at, data.len());
        // SAFETY: `check` proved the destination lies inside the allocation; `data` is a
        // separate borrow that cannot overlap a range nobody else may touch.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.base.as_ptr().add(at), data.len())
        }
    }

    /// Copies `len` bytes inside the heap, from one segment to another.
    ///
    /// # Safety
    /// The source must be readable as for [`Heap::bytes`] and the destination owned as for
    /// [`Heap::write`]; the two ranges must not overlap.
    #[inline]
    pub unsafe fn copy(&self, from: (u32, usize), to: (u32, usize), len: usize) {
        let src = self.check(from.0, from.1, len);
        let dst = self.check(to.0, to.1, len);
        assert!(
            src + len <= dst || dst + len <= src,
            "overlapping heap copy"
        );
        #[cfg(loom)]
        {
            self.shadow.read(src, len);
            self.shadow.write(dst, len);
        }
        // SAFETY: both ranges are inside the allocation and disjoint (checked above); the
        // caller guarantees the access rules for each.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.base.as_ptr().add(src),
                self.base.as_ptr().add(dst),
                len,
            )
        }
    }
}

/// Under loom, a model of the heap's bytes for the race checker: a loom `UnsafeCell` per byte
/// touched, read for every [`Heap::bytes`] and written for every [`Heap::write`] (and both for
/// [`Heap::copy`]), so that a read not ordered after the write of the same byte (a missing
/// Release/Acquire pair in publication, or a segment reused while a reader still holds it)
/// fails the model. The access is recorded when the view is taken, not for the view's life.
#[cfg(loom)]
#[derive(Default)]
struct Shadow {
    cells: std::sync::Mutex<
        std::collections::HashMap<usize, std::sync::Arc<loom::cell::UnsafeCell<()>>>,
    >,
}

#[cfg(loom)]
impl Shadow {
    fn cell(&self, at: usize) -> std::sync::Arc<loom::cell::UnsafeCell<()>> {
        let mut cells = self.cells.lock().unwrap_or_else(|e| e.into_inner());
        cells.entry(at).or_default().clone()
    }

    fn read(&self, at: usize, len: usize) {
        for i in at..at + len {
            self.cell(i).with(|_| ());
        }
    }

    fn write(&self, at: usize, len: usize) {
        for i in at..at + len {
            self.cell(i).with_mut(|_| ());
        }
    }
}

impl Heap {
    /// Asks the CPU to start loading the cache line at `offset` in segment `seg` (nothing
    /// when out of bounds). Not a memory access: the bytes may be changing under a writer.
    #[inline]
    pub fn prefetch(&self, seg: u32, offset: usize) {
        if (seg as usize) < self.segments && offset < self.segment_size {
            let at = seg as usize * self.segment_size + offset;
            prefetch_line(self.base.as_ptr().wrapping_add(at));
        }
    }
}

/// A prefetch hint for the cache line holding `ptr`.
#[inline]
pub(crate) fn prefetch_line(ptr: *const u8) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: PREFETCHT0 is a hint, not a load: it never faults, whatever the address, and
    // has no effect the memory model can observe (no data race even if another thread is
    // writing the line). `ptr` points into an allocation of ours anyway.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(ptr.cast());
    }
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    let _ = ptr;
}

impl Drop for Heap {
    fn drop(&mut self) {
        if let Backing::Allocated(layout) = self.backing {
            // SAFETY: `base` came from `alloc_zeroed` with exactly this layout and is freed
            // once. (A mapping unmaps itself when `backing` drops.)
            unsafe { dealloc(self.base.as_ptr(), layout) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_read_copy() {
        let heap = Heap::new(3, 64);
        // SAFETY: single-threaded test; nothing else touches the heap.
        unsafe {
            heap.write(1, 10, b"hello");
            assert_eq!(heap.bytes(1, 10, 5), b"hello");
            heap.copy((1, 10), (2, 0), 5);
            assert_eq!(heap.bytes(2, 0, 5), b"hello");
            assert_eq!(heap.bytes(0, 0, 4), &[0, 0, 0, 0]);
            assert_eq!(heap.bytes(2, 64, 0), b"");
        }
    }

    #[test]
    #[should_panic(expected = "out of bounds")]
    fn out_of_bounds_panics() {
        let heap = Heap::new(1, 64);
        // SAFETY: single-threaded test; the access is rejected before any memory is touched.
        unsafe {
            heap.bytes(0, 60, 5);
        }
    }
}
