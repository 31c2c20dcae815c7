//! Stopping a long pass from outside: [`with_stop`] installs a flag for the passes that
//! the calling thread runs, and raising the flag (from any thread, a Ctrl-C handler's
//! included) makes them end with an interruption error soon after, instead of when the
//! pass is done. This is the one stop flag of the workspace: the engine's passes read it
//! here and return [`GraphError::Interrupted`], and crates above (einsum's kernels, tidu's
//! transforms) read the same flag through [`requested`] and answer with their own error.
//!
//! Where the engine reads it: every [`POLL_EVERY`] items of the passes whose work grows
//! with the graph (resolve's gathering, materialize's marking and emitting, compile's
//! passes, the interner's table growth and rebuild, and tidu's linearize and transpose,
//! which read it through [`Poll`]). A pass that
//! stops returns the error and drops what it built; nothing it made outlives it.
//!
//! Invariants: what a pass returns is never wrong: once the flag is up, a pass either
//! ends with the error or (a pass too short to read it, or one that only loses an
//! optimization, as compile's dispatch order does) completes as usual; without an
//! installed flag, or with the flag down, nothing changes. The flag is the installing
//! thread's. A rayon pool's thread with none of its own reads, instead, the flags of the
//! work handed to pools under [`shared_with_pool`] at that moment, so work split over a
//! pool stops on every thread (and a flag raised stops the pool work of every caller
//! sharing then, which is what Ctrl-C asks); other threads never see it.
//!
//! Cost: while no [`with_stop`] scope is open anywhere, a read is one atomic load; with
//! one open, a thread-local read; on a pool's thread with no flag of its own while flags
//! are shared, a second thread-local read and one atomic load per shared flag, with a lock
//! only when the shared list changed. [`Poll`] adds one decrement per item.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::error::{GraphError, GraphResult};

/// Items a pass handles between two reads of the flag. At the slowest pass (about 1 µs
/// per item, tidu's transpose) that is 16 ms: Ctrl-C is answered well within a second,
/// and the read is lost in the items' own cost.
pub const POLL_EVERY: u32 = 1 << 14;

thread_local! {
    /// The flag installed by [`with_stop`] on this thread, if any.
    static FLAG: RefCell<Option<Arc<AtomicBool>>> = const { RefCell::new(None) };
}

/// The flags shared with pools ([`shared_with_pool`]), for the pools' threads with none of
/// their own, and how many there are (read without the lock first: none is the common case).
static SHARED: Mutex<Vec<Arc<AtomicBool>>> = Mutex::new(Vec::new());
static SHARED_COUNT: AtomicUsize = AtomicUsize::new(0);
/// Bumped under [`SHARED`]'s lock at every change of the list, so that a pool's thread
/// reads the flags from its own copy ([`SEEN`]) and takes the lock only when the list
/// changed (when some work enters or leaves a pool), not at every read: reads run before
/// every einsum operation and GEMM block, on every thread of the pool.
static SHARED_VERSION: AtomicU64 = AtomicU64::new(0);
/// How many [`with_stop`] scopes are open on all threads: while none is, no flag can be up
/// for anyone, and a read is one atomic load (no thread-local access).
static OPEN_SCOPES: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's copy of [`SHARED`], and the version it was copied at.
    static SEEN: RefCell<(u64, Vec<Arc<AtomicBool>>)> = const { RefCell::new((0, Vec::new())) };
}

/// Runs `f` with `flag` installed for this thread's passes: once the flag is up, they end
/// with [`GraphError::Interrupted`]. The previous flag (if any) is back when `f` returns
/// or unwinds.
///
/// ```
/// use std::sync::Arc;
/// use std::sync::atomic::AtomicBool;
/// use computegraph::{GraphBuilder, GraphError, OperationRole::Primary, ValueRef::Local};
/// use computegraph::{stop, try_compile, try_materialize_merge, try_resolve};
/// use scalar::{ScalarKey, ScalarOp};
///
/// let mut b = GraphBuilder::<ScalarOp>::new();
/// let mut v = b.add_input(ScalarKey::var(0));
/// for _ in 0..100_000 {
///     v = b.add_operation(ScalarOp::Sin, vec![Local(v)], Primary)[0];
/// }
/// b.set_outputs(vec![v]);
/// let g = Arc::new(b.build());
/// let out = [g.global_key(v)];
/// let compile = || try_compile(&try_materialize_merge(&try_resolve(vec![g.clone()])?, &out)?);
///
/// let flag = Arc::new(AtomicBool::new(false));
/// assert!(stop::with_stop(flag.clone(), compile).is_ok());
/// flag.store(true, std::sync::atomic::Ordering::Relaxed);
/// assert_eq!(stop::with_stop(flag, compile).unwrap_err(), GraphError::Interrupted);
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
    // Counted before the flag is installed: a pass that reads the flag (on this thread, or
    // on a pool's thread it hands work to, which rayon orders after) sees it.
    OPEN_SCOPES.fetch_add(1, Ordering::Relaxed);
    let _restore = Restore(FLAG.with_borrow_mut(|f| f.replace(flag)));
    f()
}

/// Runs `f`, which hands work to a rayon pool's threads, with this thread's flag (if any)
/// read by those of the pool's threads that have none of their own.
pub fn shared_with_pool<R>(f: impl FnOnce() -> R) -> R {
    /// Takes the flag off the shared list, on return and on unwinding alike.
    struct Unshare(Arc<AtomicBool>);
    impl Drop for Unshare {
        fn drop(&mut self) {
            let mut all = SHARED.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(i) = all.iter().position(|x| Arc::ptr_eq(x, &self.0)) {
                all.swap_remove(i);
                SHARED_COUNT.fetch_sub(1, Ordering::Relaxed);
                SHARED_VERSION.fetch_add(1, Ordering::Release);
            }
        }
    }
    let Some(flag) = FLAG.with_borrow(Clone::clone) else {
        return f();
    };
    {
        let mut all = SHARED.lock().unwrap_or_else(|e| e.into_inner());
        all.push(flag.clone());
        SHARED_COUNT.fetch_add(1, Ordering::Relaxed);
        SHARED_VERSION.fetch_add(1, Ordering::Release);
    }
    let _unshare = Unshare(flag);
    f()
}

/// Whether this thread's installed flag is up, or, on a pool's thread with none, any flag
/// shared with the pools ([`shared_with_pool`]).
#[inline]
pub fn requested() -> bool {
    if OPEN_SCOPES.load(Ordering::Relaxed) == 0 {
        return false;
    }
    FLAG.with_borrow(|f| match f {
        Some(f) => f.load(Ordering::Relaxed),
        None => {
            SHARED_COUNT.load(Ordering::Relaxed) > 0 && rayon::current_thread_index().is_some() && shared_requested()
        }
    })
}

/// Whether any flag shared with the pools is up, read from this thread's copy of the list,
/// which is renewed (under the lock) only when the list's version moved since the copy.
/// Work shares its flag before it is handed to the pool, and rayon's hand-over orders that
/// before the pool's threads run it, so they see the new version.
fn shared_requested() -> bool {
    let version = SHARED_VERSION.load(Ordering::Acquire);
    SEEN.with_borrow_mut(|(seen, flags)| {
        if *seen != version {
            let all = SHARED.lock().unwrap_or_else(|e| e.into_inner());
            flags.clone_from(&all);
            // Read under the lock, so that it is the version of the list just copied.
            *seen = SHARED_VERSION.load(Ordering::Relaxed);
        }
        flags.iter().any(|f| f.load(Ordering::Relaxed))
    })
}

/// [`GraphError::Interrupted`] if this thread's installed flag is up.
pub fn check() -> GraphResult<()> {
    if requested() { Err(GraphError::Interrupted) } else { Ok(()) }
}

/// A pass's countdown to its next read of the flag: [`Poll::tick`] once per item.
///
/// ```
/// use computegraph::stop::Poll;
///
/// let mut poll = Poll::new();
/// for _ in 0..1_000_000 {
///     poll.tick()?; // an item of the pass
/// }
/// # Ok::<(), computegraph::GraphError>(())
/// ```
#[derive(Debug)]
pub struct Poll {
    left: u32,
}

impl Poll {
    /// A countdown whose first read of the flag is [`POLL_EVERY`] items away.
    pub fn new() -> Self {
        Poll { left: POLL_EVERY }
    }

    /// Counts one item, and every [`POLL_EVERY`] items reads the flag.
    #[inline]
    pub fn tick(&mut self) -> GraphResult<()> {
        self.left -= 1;
        if self.left == 0 {
            self.left = POLL_EVERY;
            return check();
        }
        Ok(())
    }
}

impl Default for Poll {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_nest_are_restored_and_stay_on_their_thread() {
        let (outer, inner) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(true)));
        assert!(!requested());
        with_stop(outer.clone(), || {
            assert!(!requested());
            with_stop(inner, || assert_eq!(check(), Err(GraphError::Interrupted)));
            assert!(!requested());
            outer.store(true, Ordering::Relaxed);
            assert!(requested());
            std::thread::scope(|s| assert!(!s.spawn(requested).join().unwrap()));
        });
        assert!(!requested());
    }

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
    fn a_poll_reads_the_flag_once_per_period() {
        let flag = Arc::new(AtomicBool::new(true));
        with_stop(flag, || {
            let mut poll = Poll::new();
            for _ in 1..POLL_EVERY {
                assert_eq!(poll.tick(), Ok(()));
            }
            assert_eq!(poll.tick(), Err(GraphError::Interrupted));
            assert_eq!(poll.tick(), Ok(()));
        });
    }
}
