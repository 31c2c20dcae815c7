//! Stopping an evaluation from outside: [`with_stop`] installs a flag for the evaluations
//! that the calling thread runs, and raising the flag (from any thread) makes them end
//! with [`EinsumError::Interrupted`] soon after, instead of when the contraction is done.
//!
//! Where the flag is read: before each operation of a compiled program (an operation that
//! starts after the flag is up produces a placeholder of its output's shape and does no
//! work), between the GEMMs of a loop of GEMMs and between the row blocks of one large
//! GEMM, every few million multiply-adds of the direct loop, every [`COPY_CHECK_ELEMENTS`]
//! elements of a permutation copy or an element-wise product (a kernel that stops leaves
//! the rest of its output as it was), between slices of a sliced contraction, and once a
//! program has run (where the placeholders' result is turned into the error). The longest
//! stretch without a read is about [`GEMM_BLOCK_MACS`] multiply-adds of GEMM.
//!
//! Invariants: a stopped evaluation never returns `Ok` (its result could hold
//! placeholders); without an installed flag, or with the flag down, nothing changes. The
//! flag is the installing thread's; a pool's thread with none of its own (a worker running
//! part of an evaluation, `Einsum::eval_parallel`'s steps at once) reads the flags of
//! every evaluation running in a pool at that moment, so a parallel evaluation stops at
//! the next operation or GEMM block of any of its threads (and a flag raised stops the
//! pool work of every evaluation running in a pool then, which is what Ctrl-C asks).
//!
//! Cost: one atomic load per check while no [`with_stop`] scope is open anywhere; with one
//! open, one thread-local read per check, a few per operation and per GEMM block; on a
//! pool's thread with no flag of its own while flags are shared, a second thread-local read
//! and one atomic load per shared flag, with no lock unless the shared list changed.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::error::{EinsumError, EinsumResult};

/// The multiply-adds of one GEMM block between two reads of the flag: a GEMM with more
/// is run in row blocks of about this much work. Each block packs the right operand
/// again (`n·k` elements against the block's `rows·n·k` multiply-adds), so blocks are
/// large: at 2^28 a 3000³ product ran in 29-row blocks, and noticeably slower. At 2^29, a
/// block is a fifth of a second at 3·10^9 multiply-adds per second (one core of a loaded
/// machine), which keeps Ctrl-C's answer well under a second, and the repacking is a few
/// percent of the work (`docs/PERFORMANCE.md`, issue 39).
pub(crate) const GEMM_BLOCK_MACS: usize = 1 << 29;

/// Multiply-adds of the direct loop and of the lanes loop between two reads of the flag:
/// a few milliseconds of work, so that the read costs nothing measurable.
pub(crate) const DIRECT_STOP_CHECK: usize = 1 << 22;

/// The elements a permutation copy or an element-wise product writes between two reads of
/// the flag: 32 MiB of `f64`, a few milliseconds of memory traffic, against a read that
/// costs nanoseconds.
pub(crate) const COPY_CHECK_ELEMENTS: usize = 1 << 22;

thread_local! {
    /// The flag installed by [`with_stop`] on this thread, if any.
    static FLAG: RefCell<Option<Arc<AtomicBool>>> = const { RefCell::new(None) };
}

/// The flags of the evaluations running in pools ([`shared_with_pool`]), for the pools'
/// threads with none of their own, and how many there are (read without the lock first: none is the
/// common case).
static INSTALLED: Mutex<Vec<Arc<AtomicBool>>> = Mutex::new(Vec::new());
static INSTALLED_COUNT: AtomicUsize = AtomicUsize::new(0);
/// Bumped under [`INSTALLED`]'s lock at every change of the list, so that a pool's thread
/// reads the flags from its own copy ([`SEEN`]) and takes the lock only when the list
/// changed, that is when an evaluation enters or leaves a pool, not at every check: the
/// checks run before every operation and GEMM block, on every thread of the pool.
static INSTALLED_VERSION: AtomicU64 = AtomicU64::new(0);
/// How many [`with_stop`] scopes are open on all threads: while none is, no flag can be
/// up for anyone, and a check is one atomic load (no thread-local access).
static OPEN_SCOPES: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's copy of [`INSTALLED`], and the version it was copied at.
    static SEEN: RefCell<(u64, Vec<Arc<AtomicBool>>)> = const { RefCell::new((0, Vec::new())) };
}

/// Runs `f` with `flag` installed for this thread's evaluations: once the flag is up,
/// they end with [`EinsumError::Interrupted`]. The previous flag (if any) is back when
/// `f` returns or unwinds.
///
/// ```
/// use std::sync::Arc;
/// use std::sync::atomic::AtomicBool;
/// use einsum::{Einsum, EinsumError, PathChoice, Tensor};
///
/// let e = Einsum::<f64>::new("ij,jk->ik", &[vec![2, 3], vec![3, 4]], PathChoice::Greedy).unwrap();
/// let (a, b) = (Tensor::ones(vec![2, 3]).unwrap(), Tensor::ones(vec![3, 4]).unwrap());
/// let flag = Arc::new(AtomicBool::new(false));
/// assert!(einsum::with_stop(flag.clone(), || e.eval(&[&a, &b])).is_ok());
/// flag.store(true, std::sync::atomic::Ordering::Relaxed);
/// let stopped = einsum::with_stop(flag, || e.eval(&[&a, &b]));
/// assert_eq!(stopped.unwrap_err(), EinsumError::Interrupted);
/// ```
pub fn with_stop<R>(flag: Arc<AtomicBool>, f: impl FnOnce() -> R) -> R {
    /// Puts the previous flag back, on return and on unwinding alike.
    struct Restore(Option<Arc<AtomicBool>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let previous = self.0.take();
            FLAG.with_borrow_mut(|f| *f = previous);
            OPEN_SCOPES.fetch_sub(1, Ordering::Relaxed);
        }
    }
    // Counted before the flag is installed: an evaluation that reads the flag (on this
    // thread, or on a pool's thread it hands work to, which rayon orders after) sees it.
    OPEN_SCOPES.fetch_add(1, Ordering::Relaxed);
    let _restore = Restore(FLAG.with_borrow_mut(|f| f.replace(flag)));
    f()
}

/// Runs `f`, an evaluation that hands work to a rayon pool's threads, with this thread's
/// flag (if any) read by those of the pool's threads that have none of their own.
pub(crate) fn shared_with_pool<R>(f: impl FnOnce() -> R) -> R {
    /// Takes the flag off the shared list, on return and on unwinding alike.
    struct Unshare(Arc<AtomicBool>);
    impl Drop for Unshare {
        fn drop(&mut self) {
            let mut all = INSTALLED.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(i) = all.iter().position(|x| Arc::ptr_eq(x, &self.0)) {
                all.swap_remove(i);
                INSTALLED_COUNT.fetch_sub(1, Ordering::Relaxed);
                INSTALLED_VERSION.fetch_add(1, Ordering::Release);
            }
        }
    }
    let Some(flag) = FLAG.with_borrow(Clone::clone) else {
        return f();
    };
    {
        let mut all = INSTALLED.lock().unwrap_or_else(|e| e.into_inner());
        all.push(flag.clone());
        INSTALLED_COUNT.fetch_add(1, Ordering::Relaxed);
        INSTALLED_VERSION.fetch_add(1, Ordering::Release);
    }
    let _unshare = Unshare(flag);
    f()
}

/// Whether this thread's installed flag is up, or, on a pool's thread with none, any
/// flag shared with the pools ([`shared_with_pool`]).
pub(crate) fn requested() -> bool {
    if OPEN_SCOPES.load(Ordering::Relaxed) == 0 {
        return false;
    }
    FLAG.with_borrow(|f| match f {
        Some(f) => f.load(Ordering::Relaxed),
        None => {
            INSTALLED_COUNT.load(Ordering::Relaxed) > 0 && rayon::current_thread_index().is_some() && shared_requested()
        }
    })
}

/// Whether any flag shared with the pools is up, read from this thread's copy of the list,
/// which is renewed (under the lock) only when the list's version moved since the copy.
/// An evaluation shares its flag before handing work to the pool, and rayon's hand-over
/// orders that before the pool's threads run it, so they see the new version.
fn shared_requested() -> bool {
    let version = INSTALLED_VERSION.load(Ordering::Acquire);
    SEEN.with_borrow_mut(|(seen, flags)| {
        if *seen != version {
            let all = INSTALLED.lock().unwrap_or_else(|e| e.into_inner());
            flags.clone_from(&all);
            // Read under the lock, so that it is the version of the list just copied.
            *seen = INSTALLED_VERSION.load(Ordering::Relaxed);
        }
        flags.iter().any(|f| f.load(Ordering::Relaxed))
    })
}

/// [`EinsumError::Interrupted`] if this thread's installed flag is up.
pub(crate) fn check() -> EinsumResult<()> {
    if requested() { Err(EinsumError::Interrupted) } else { Ok(()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pool's thread keeps a copy of the shared flags: it sees a shared flag raised, and
    /// after the list changes (one flag taken off, another shared) it sees the new one.
    /// (Only raised flags are asserted: other tests may share flags at the same time.)
    #[test]
    fn pool_threads_follow_the_shared_flags() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        let on_pool = || pool.install(|| rayon::join(requested, requested));
        let first = Arc::new(AtomicBool::new(false));
        with_stop(first.clone(), || {
            shared_with_pool(|| {
                on_pool();
                first.store(true, Ordering::Relaxed);
                assert_eq!(on_pool(), (true, true));
                first.store(false, Ordering::Relaxed);
            })
        });
        let second = Arc::new(AtomicBool::new(true));
        with_stop(second, || shared_with_pool(|| assert_eq!(on_pool(), (true, true))));
    }

    #[test]
    fn flags_nest_and_are_restored() {
        let (outer, inner) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(true)));
        assert!(!requested());
        with_stop(outer.clone(), || {
            assert!(!requested());
            with_stop(inner, || assert_eq!(check(), Err(EinsumError::Interrupted)));
            assert!(!requested());
            outer.store(true, Ordering::Relaxed);
            assert!(requested());
        });
        assert!(!requested());
        // Another thread does not see this thread's flag.
        with_stop(outer, || std::thread::scope(|s| assert!(!s.spawn(requested).join().unwrap())));
    }
}
