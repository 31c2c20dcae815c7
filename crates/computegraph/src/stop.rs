//! Stopping a long pass from outside: [`with_stop`] installs a flag for the passes that
//! the calling thread runs, and raising the flag (from any thread, a Ctrl-C handler's
//! included) makes them end with [`GraphError::Interrupted`] soon after, instead of when
//! the pass is done.
//!
//! Where the flag is read: every [`POLL_EVERY`] items of the passes whose work grows with
//! the graph (resolve's gathering, materialize's marking and emitting, compile's passes,
//! and tidu's linearize and transpose, which read it through [`Poll`]). A pass that stops
//! returns the error and drops what it built; nothing it made outlives it.
//!
//! Invariants: what a pass returns is never wrong: once the flag is up, a pass either
//! ends with the error or (a pass too short to read it, or one that only loses an
//! optimization, as compile's dispatch order does) completes as usual; without an
//! installed flag, or with the flag down, nothing changes. The flag is the installing thread's: passes run on other
//! threads (a rayon pool's) do not see it.
//!
//! Cost: one decrement per item, and one thread-local read per [`POLL_EVERY`] items (a few
//! microseconds of work apart at 100 ns per item).

use std::cell::RefCell;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::{GraphError, GraphResult};

/// Items a pass handles between two reads of the flag. At the slowest pass (about 1 µs
/// per item, tidu's transpose) that is 16 ms: Ctrl-C is answered well within a second,
/// and the read is lost in the items' own cost.
pub const POLL_EVERY: u32 = 1 << 14;

thread_local! {
    /// The flag installed by [`with_stop`] on this thread, if any.
    static FLAG: RefCell<Option<Arc<AtomicBool>>> = const { RefCell::new(None) };
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
        }
    }
    let _restore = Restore(FLAG.with_borrow_mut(|f| f.replace(flag)));
    f()
}

/// Whether this thread's installed flag is up.
pub fn requested() -> bool {
    FLAG.with_borrow(|f| f.as_ref().is_some_and(|f| f.load(Ordering::Relaxed)))
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
