//! Transparent huge pages for the engine's largest buffers.
//!
//! A buffer of many MiB that is written once and then read at random (the interner's
//! operation table) pays twice for 4 KiB pages: one page fault per page when it is first
//! written (more than a microsecond each on a VM), and a TLB miss on most random reads once
//! it spans more pages than the TLB holds. On Linux, where transparent huge pages are often
//! enabled only for memory that asks for them (`madvise` mode), [`advise_huge`] asks for
//! them on a fresh buffer's capacity before it is first written, so the kernel backs it
//! with 2 MiB pages where it can. Elsewhere, and for small buffers, it does nothing.
//!
//! Nothing here affects results: the advice changes how memory is backed, not its contents,
//! and a kernel that refuses it leaves the buffer as it was.

/// Buffers below this many bytes are left alone: a huge page is 2 MiB, and a buffer of a
/// few of them gains little.
pub(crate) const HUGE_MIN_BYTES: usize = 4 << 20;

/// A thread keeps a dropped fragment's columns of at most this many bytes each for its
/// next build (`graph.rs`; the interner's table, `optable.rs`, up to [`HUGE_MIN_BYTES`]),
/// so that a process building graph after graph writes them on pages it has. Larger ones
/// are freed, and advised for huge pages when they are allocated (from [`HUGE_MIN_BYTES`]
/// on). Between builds a thread holds at most six such columns and one table.
pub(crate) const KEEP_MAX_BYTES: usize = 2 << 20;

/// An empty vector with room for `n` values, advised as [`advise_huge`] does: for the
/// columns a pass writes once, front to back (materialize's and compile's), whose first
/// writes would otherwise take one page fault per 4 KiB.
pub(crate) fn huge_vec<T>(n: usize) -> Vec<T> {
    let mut v = Vec::with_capacity(n);
    advise_huge(&mut v);
    v
}

/// `n` copies of `value` in a vector advised as [`advise_huge`] does (before the copies
/// are written).
pub(crate) fn huge_vec_of<T: Clone>(value: T, n: usize) -> Vec<T> {
    let mut v = huge_vec(n);
    v.resize(n, value);
    v
}

/// Compile's columns (the program's and its per-value scratch) are advised only up to this
/// many bytes each. Their advice is the one that costs at scale: compile runs last, when
/// the process holds most of what it will hold (14 GiB at 10^8 nodes) and what is free is
/// scarce and broken up (the fragment released before compile), so with `defrag` at
/// `madvise` a fault in an advised region compacts memory synchronously. At 10^8 nodes
/// (columns of about 1 GiB) that made compile 109 ns/node against 63.6 with huge pages
/// off; at 10^6 (columns of 4 to 16 MiB, little resident) the advice saves about 9 of
/// compile's 52 ns/node (docs/PERFORMANCE.md, compile41d).
/// 256 MiB lies between: a 10^7-node program's columns (at most about 160 MB, the
/// operations of a chain) keep it; at 10^8 every one of them is larger.
pub(crate) const PROGRAM_HUGE_MAX_BYTES: usize = 256 << 20;

/// An empty vector with room for `n` values, advised as [`huge_vec`] does when it spans at
/// most [`PROGRAM_HUGE_MAX_BYTES`]: for compile's columns.
pub(crate) fn program_vec<T>(n: usize) -> Vec<T> {
    let mut v = Vec::with_capacity(n);
    if v.capacity().saturating_mul(size_of::<T>()) <= PROGRAM_HUGE_MAX_BYTES {
        advise_huge(&mut v);
    }
    v
}

/// `n` copies of `value` in a vector advised as [`program_vec`] does (before the copies
/// are written).
pub(crate) fn program_vec_of<T: Clone>(value: T, n: usize) -> Vec<T> {
    let mut v = program_vec(n);
    v.resize(n, value);
    v
}

/// Asks the kernel to back the not yet written capacity of `buffer` with transparent huge
/// pages (Linux, buffers of at least [`HUGE_MIN_BYTES`]).
pub(crate) fn advise_huge<T>(buffer: &mut Vec<T>) {
    let bytes = buffer.capacity().saturating_mul(size_of::<T>());
    if bytes < HUGE_MIN_BYTES {
        return;
    }
    #[cfg(all(target_os = "linux", not(miri)))]
    {
        const PAGE: usize = 4096;
        let start = buffer.as_mut_ptr() as usize;
        // The whole pages inside the allocation: the advice must not reach memory that is
        // not ours.
        let (first, end) = (start.next_multiple_of(PAGE), (start + bytes) / PAGE * PAGE);
        if end > first {
            // SAFETY: `[first, end)` lies inside `buffer`'s allocation, which this function
            // borrows mutably, and is page-aligned as `madvise` requires. `MADV_HUGEPAGE`
            // only changes how the kernel backs these pages (their contents are kept), so
            // no Rust-visible memory changes; a failure (a kernel without THP) is ignored.
            unsafe {
                libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_HUGEPAGE);
            }
        }
    }
}
