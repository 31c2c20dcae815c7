//! Pre-faulting the columns a large build is about to write, from another thread.
//!
//! A build that reserved its columns (`GraphBuilder::reserve`) writes each of them once,
//! front to back, on memory the kernel has not backed yet: every fresh 4 KiB page costs
//! the building thread a page fault (an exception, a zeroed page, a page-table update),
//! and on a build that fills the machine these faults are a large share of its time, more as
//! the kernel reclaims page cache to back them. The machine the build runs on has more
//! than one core and the build uses one, so [`Prefault::spawn`] hands the reserved and
//! not yet written part of each column to a helper thread, which asks the kernel to back
//! it (`MADV_POPULATE_WRITE`) ahead of the writes. The building thread then finds its
//! pages present.
//!
//! Invariants: nothing here reads or writes the columns' contents. `MADV_POPULATE_WRITE`
//! only faults pages in (as a write would, without writing), so it cannot race with the
//! builder's writes, and a range that was freed or moved meanwhile (a column that grew
//! past its reservation) makes the call fail harmlessly or back pages nobody uses. The
//! helper works in pieces of [`PIECE`] bytes, advancing every column by the same share
//! of its length in turn (the builder writes them at proportional rates), checks a stop
//! flag between pieces, and is stopped and joined when the [`Prefault`] is dropped. A
//! kernel without `MADV_POPULATE_WRITE` (before Linux 5.14) fails the first call and
//! the helper stops. Off Linux, and under Miri, nothing is spawned.
//!
//! Complexity: one `madvise` per piece; the helper's work is the page faults the builder
//! would have taken.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

/// Builds whose reserved columns hold fewer bytes than this (about 2·10^7 nodes of the
/// `window` DAG) are not pre-faulted. Below it the helper bought no wall time and cost
/// the builder user time: a page the other core zeroed is in that core's cache, not the
/// builder's, so its first writes miss (docs/PERFORMANCE.md, big41). Unit tests use a
/// smaller bound, so that small builds exercise the helper.
pub(crate) const PREFAULT_MIN_BYTES: usize = if cfg!(test) { 16 << 20 } else { 512 << 20 };

/// Bytes populated per `madvise` call: small enough that the call holds the process's
/// memory-map lock only briefly (the builder's own allocations need it), large enough
/// that the calls themselves cost little.
const PIECE: usize = 256 << 10;

/// The page size the ranges are aligned to.
const PAGE: usize = 4096;

/// A helper thread pre-faulting address ranges; stopped and joined on drop.
pub(crate) struct Prefault {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Prefault {
    /// Starts a helper thread that populates `ranges` (`(address, bytes)` of memory that
    /// will be written, front to back), or returns `None` when they hold fewer than
    /// [`PREFAULT_MIN_BYTES`], off Linux, or when no thread can be started.
    pub(crate) fn spawn(ranges: &[(usize, usize)]) -> Option<Prefault> {
        // Whole pages inside each range: the advice must not reach memory that is not
        // the column's (the partial pages at the ends are the builder's to fault).
        let pages: Vec<(usize, usize)> = ranges
            .iter()
            .map(|&(start, bytes)| (start.next_multiple_of(PAGE), start.saturating_add(bytes) / PAGE * PAGE))
            .filter(|&(first, end)| end > first)
            .collect();
        let total: usize = pages.iter().map(|&(first, end)| end - first).sum();
        if total < PREFAULT_MIN_BYTES || !cfg!(all(target_os = "linux", not(miri))) {
            return None;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("cg-prefault".into())
            .spawn(move || populate_in_turn(&pages, &flag))
            .ok()?;
        Some(Prefault { stop, thread: Some(thread) })
    }
}

impl Drop for Prefault {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            // The helper returns after its current piece; a panic there (none is expected)
            // must not become the builder's.
            let _ = t.join();
        }
    }
}

/// Populates the page-aligned `ranges` a piece at a time, each range advanced by the
/// same share of its length in turn, until done, stopped, or the kernel refuses.
fn populate_in_turn(ranges: &[(usize, usize)], stop: &AtomicBool) {
    let longest = ranges.iter().map(|&(first, end)| end - first).max().unwrap_or(0);
    let steps = longest.div_ceil(PIECE);
    for step in 0..steps {
        for &(first, end) in ranges {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            let (a, b) = piece(first, end, step, steps);
            if b > a && !populate(a, b - a) {
                return;
            }
        }
    }
}

/// The part of the page-aligned range `[first, end)` that step `step` of `steps`
/// populates: its share of the range in whole pages, the last step taking the rest, so
/// that the steps tile the range.
fn piece(first: usize, end: usize, step: usize, steps: usize) -> (usize, usize) {
    let pages = (end - first) / PAGE;
    let at = |s: usize| first + pages * s / steps * PAGE;
    (at(step), if step + 1 == steps { end } else { at(step + 1) })
}

/// Asks the kernel to back `[start, start + bytes)` (page-aligned) as a write would;
/// `false` when it refuses for a reason that will not pass (no `MADV_POPULATE_WRITE`).
fn populate(start: usize, bytes: usize) -> bool {
    #[cfg(all(target_os = "linux", not(miri)))]
    {
        // SAFETY: `MADV_POPULATE_WRITE` faults the pages of the range in, writable, without
        // reading or writing their contents, so no Rust-visible memory changes whoever
        // owns it; an unmapped range fails with `ENOMEM` and changes nothing.
        let r = unsafe { libc::madvise(start as *mut libc::c_void, bytes, libc::MADV_POPULATE_WRITE) };
        // `EINVAL`: a kernel before 5.14, which will refuse every call. Any other failure
        // (a range freed meanwhile, `ENOMEM`; a signal, `EINTR`) concerns this piece only.
        r == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::EINVAL)
    }
    #[cfg(not(all(target_os = "linux", not(miri))))]
    {
        let _ = (start, bytes);
        false
    }
}

/// Backs the whole pages of `[start, start + bytes)` as a write would, on this thread, at
/// once (one `madvise`): for a fresh zeroed allocation that is about to be read and
/// written at random, so that its first reads do not map the shared zero page, to be
/// faulted again on the first write. Nothing happens when the kernel refuses.
pub(crate) fn populate_now(start: usize, bytes: usize) {
    let (first, end) = (start.next_multiple_of(PAGE), start.saturating_add(bytes) / PAGE * PAGE);
    if end > first {
        populate(first, end - first);
    }
}

/// The reserved, not yet written part of a column as an `(address, bytes)` range: the
/// column's entries are `written`, in an allocation of `capacity_bytes`.
pub(crate) fn spare<T>(written: &[T], capacity_bytes: usize) -> (usize, usize) {
    let bytes = size_of_val(written);
    (written.as_ptr() as usize + bytes, capacity_bytes.saturating_sub(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_ranges_start_no_thread() {
        let v: Vec<u32> = Vec::with_capacity(1024);
        assert!(Prefault::spawn(&[spare(&v, v.capacity() * 4)]).is_none());
        assert!(Prefault::spawn(&[]).is_none());
    }

    #[test]
    fn prefaulted_columns_keep_what_is_written_to_them() {
        // Written while the helper populates the same pages: the contents are the writes'.
        let n = PREFAULT_MIN_BYTES / size_of::<u64>();
        let (mut a, mut b): (Vec<u64>, Vec<u32>) = (Vec::with_capacity(n), Vec::with_capacity(n / 3));
        a.extend(0..17);
        let helper = Prefault::spawn(&[spare(&a, a.capacity() * 8), spare(&b, b.capacity() * 4)]);
        assert_eq!(helper.is_some(), cfg!(all(target_os = "linux", not(miri))));
        for i in 17..n as u64 {
            a.push(i.wrapping_mul(0x9E37_79B9));
            if i % 3 == 0 {
                b.push(i as u32);
            }
        }
        drop(helper);
        assert!(
            a.iter()
                .enumerate()
                .all(|(i, &x)| x == if i < 17 { i as u64 } else { (i as u64).wrapping_mul(0x9E37_79B9) })
        );
        assert!(b.iter().zip((18..n as u32).step_by(3)).all(|(&x, y)| x == y));
    }

    #[test]
    fn a_freed_range_is_harmless() {
        let n = 2 * PREFAULT_MIN_BYTES / size_of::<u64>();
        let v: Vec<u64> = Vec::with_capacity(n);
        let range = spare(&v, v.capacity() * 8);
        drop(v);
        // Populating memory that was given back fails or backs pages nobody reads.
        drop(Prefault::spawn(&[range]));
        let w: Vec<u64> = vec![7; 1000];
        assert!(w.iter().all(|&x| x == 7));
    }

    #[test]
    fn pieces_cover_every_page_once() {
        // The per-step shares of a range tile it: consecutive, page-aligned, no gap,
        // ending at its end, for ranges shorter and longer than the number of steps.
        for (pages, steps) in [(1234, 7), (3, 7), (7, 7), (1, 1), (100, 1), (5000, 4096)] {
            let (first, end) = (1 << 20, (1 << 20) + pages * PAGE);
            let mut next = first;
            for step in 0..steps {
                let (a, b) = piece(first, end, step, steps);
                assert_eq!(a, next);
                assert!(b >= a && b % PAGE == 0);
                next = b;
            }
            assert_eq!(next, end);
        }
    }
}
