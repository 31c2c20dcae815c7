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

/// The size of a transparent huge page on x86_64 (a PMD's reach).
const HUGE_PAGE: usize = 2 << 20;

/// Compile's columns of at most this many bytes get the room past their end that
/// [`program_vec`] describes. The room is counted by the allocator while the column
/// fills (the pipeline's peak is measured that way), and what it saves, the faults of
/// one partial huge page, is a smaller share of a larger column: at 10^7 nodes (columns
/// of 40 to 160 MB) the room would add about 2 bytes/node to compile's peak and save
/// about 1% of its faults, at 10^6 (4 to 16 MB) it saves a third.
const PROGRAM_PAD_MAX_BYTES: usize = 32 << 20;

/// An empty vector with room for `n` values, advised as [`huge_vec`] does when it spans at
/// most [`PROGRAM_HUGE_MAX_BYTES`]: for compile's columns.
///
/// A column of one huge page to [`PROGRAM_PAD_MAX_BYTES`] gets room for [`HUGE_PAGE`] more
/// bytes than `n` values, and the advice covers it: the kernel backs with a huge page only
/// an aligned 2 MiB range that lies wholly inside the advised memory, and the allocator
/// places a column anywhere, so without the room the part of the column after its last
/// 2 MiB boundary (half a huge page on average, 512 faults of 4 KiB at worst) was faulted
/// a page at a time. The room is address space, never written: [`trim`] gives it back
/// once the column is full, before it joins the program (the head before the column's
/// first boundary cannot be helped: its huge page would reach the neighbouring
/// allocation).
pub(crate) fn program_vec<T>(n: usize) -> Vec<T> {
    let bytes = n.saturating_mul(size_of::<T>());
    if !(HUGE_PAGE..=PROGRAM_HUGE_MAX_BYTES).contains(&bytes) {
        return Vec::with_capacity(n);
    }
    let room = if bytes <= PROGRAM_PAD_MAX_BYTES { HUGE_PAGE.div_ceil(size_of::<T>().max(1)) } else { 0 };
    let mut v = Vec::with_capacity(n + room);
    advise(&mut v);
    v
}

/// `v` without the room beyond its values that [`program_vec`] added. Shrinking in place
/// (glibc splits the block; `mremap` for a mapped one) copies nothing.
pub(crate) fn trim<T>(mut v: Vec<T>) -> Vec<T> {
    if v.capacity() > v.len() {
        v.shrink_to_fit();
    }
    v
}

/// Pushes `x` onto `v`, a column of compile's whose final length is not known up front
/// (the sequential evaluator's runs): when `v` is full it moves to a [`program_vec`] of
/// twice the room, so that its pages come advised as the other program columns' do,
/// where a growth by `realloc` would fault the new room in a 4 KiB page at a time. Give
/// it to [`trim`] once it is complete.
#[inline]
pub(crate) fn push_grown<T>(v: &mut Vec<T>, x: T) {
    if v.len() == v.capacity() {
        grow(v);
    }
    v.push(x);
}

/// From a column of this many bytes on, [`push_grown`] skips the doublings below a huge
/// page: each of them was a fresh mapping, faulted 4 KiB at a time, and a copy, on the way
/// to a column that reaches huge pages anyway (a chain of random variants has a run every
/// few instructions). Smaller columns (a small program's) double as before.
const GROW_TO_HUGE_FROM_BYTES: usize = 64 << 10;

#[cold]
fn grow<T>(v: &mut Vec<T>) {
    let size = size_of::<T>().max(1);
    let mut n = v.capacity().saturating_mul(2).max(64);
    if v.capacity().saturating_mul(size) >= GROW_TO_HUGE_FROM_BYTES {
        // The first capacity of the doubling sequence that spans a huge page, so that the
        // capacities from there on, and the column's last one, are those of plain doubling.
        while n.saturating_mul(size) < HUGE_PAGE {
            n *= 2;
        }
    }
    if n.saturating_mul(size) > PROGRAM_PAD_MAX_BYTES {
        // A move would hold both columns at once, counted in the pipeline's peak; past
        // the bound the room gains little (see the bound), so `realloc` grows it.
        v.reserve(n - v.len());
        return;
    }
    let mut bigger = program_vec(n);
    bigger.append(v);
    *v = bigger;
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
    if buffer.capacity().saturating_mul(size_of::<T>()) < HUGE_MIN_BYTES {
        return;
    }
    advise(buffer);
}

/// [`advise_huge`] at any size.
fn advise<T>(buffer: &mut Vec<T>) {
    #[cfg(all(target_os = "linux", not(miri)))]
    {
        const PAGE: usize = 4096;
        let bytes = buffer.capacity().saturating_mul(size_of::<T>());
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_column_of_a_huge_page_gets_room_past_its_end_and_trim_gives_it_back() {
        let n = HUGE_PAGE / size_of::<u32>();
        let mut v: Vec<u32> = program_vec(n);
        assert!(v.capacity() >= 2 * n, "room for a huge page past the end");
        v.extend(0..n as u32);
        let v = trim(v);
        assert!(v.capacity() < 2 * n, "the room is given back");
        // Past the bound, none.
        let big = PROGRAM_PAD_MAX_BYTES / size_of::<u32>() + 1;
        assert!(program_vec::<u32>(big).capacity() < big + 1024);
        assert!(v.iter().copied().eq(0..n as u32));
        // Below a huge page, and above the bound, no room.
        assert!(program_vec::<u32>(n - 1).capacity() < n);
        assert!(program_vec::<u8>(PROGRAM_HUGE_MAX_BYTES + 1).capacity() < PROGRAM_HUGE_MAX_BYTES + 2);
    }

    /// Past [`GROW_TO_HUGE_FROM_BYTES`] the capacities below a huge page are skipped, and
    /// from the first one that spans a huge page they are plain doubling's.
    #[test]
    fn growth_skips_to_the_doubling_that_spans_a_huge_page() {
        let doubled = |c: usize| {
            let n = c.saturating_mul(2).max(64);
            if (HUGE_PAGE..=PROGRAM_PAD_MAX_BYTES).contains(&(n * 8)) { n + HUGE_PAGE / 8 } else { n }
        };
        let mut expected = vec![0usize];
        while expected.last().unwrap() * 8 < 4 * HUGE_PAGE {
            expected.push(doubled(*expected.last().unwrap()));
        }
        let mut v: Vec<u64> = Vec::new();
        let mut seen = vec![0usize];
        for i in 0..(4 * HUGE_PAGE / 8) as u64 {
            push_grown(&mut v, i);
            if v.capacity() != *seen.last().unwrap() {
                seen.push(v.capacity());
            }
        }
        let jump = GROW_TO_HUGE_FROM_BYTES / 8;
        let skipped: Vec<usize> = expected.iter().copied().filter(|&c| c < 2 * jump || c * 8 >= HUGE_PAGE).collect();
        assert_eq!(seen[..], skipped[..seen.len()]);
        assert!(v.iter().copied().eq(0..(4 * HUGE_PAGE / 8) as u64));
    }

    #[test]
    fn pushes_that_grow_keep_every_value_in_order() {
        let n = HUGE_PAGE / size_of::<u64>() * 3;
        let mut v = Vec::new();
        for i in 0..n as u64 {
            push_grown(&mut v, i);
        }
        let v = trim(v);
        assert_eq!(v.len(), n);
        assert!(v.iter().copied().eq(0..n as u64));
    }
}
