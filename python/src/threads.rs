//! How many threads a call of `cgx._core` runs on: a process-wide setting
//! (`set_num_threads`), overridden on one Python thread for the calls it makes
//! (`_swap_call_threads`, behind `cgx.threads(n)` and the `threads=` keywords), and by
//! default every core the process may use. The einsum crate then decides by estimated cost
//! whether a given contraction enters the pool at all (`threads.rs` there), so a small
//! contraction runs on the calling thread whatever the setting and no call is slower for
//! the default.
//!
//! Pools: one rayon pool per thread count asked for, built on first use and kept for the
//! process (a pool's threads sleep between calls); a count of 1 runs on the calling thread,
//! outside any pool, exactly as before threads were offered. A long call that Ctrl-C must
//! be able to end runs off the calling thread (`interrupt.rs`): in its pool, or on one
//! thread's call, on that Python thread's own worker ([`own_worker`]), a pool of one
//! thread kept while the Python thread lives. A thread started per call cost 1.1 ms of a
//! 15 ms `lm_batch` forward pass: its stack and the matrix library's per-thread packing
//! buffers were fresh pages every time (about 250 page faults a call).

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex};

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;

/// The process-wide count (0: not set, every core).
static PROCESS_THREADS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// The count for the calls this (Python) thread makes (0: the process-wide one).
    static CALL_THREADS: Cell<usize> = const { Cell::new(0) };
}

thread_local! {
    /// This (Python) thread's own worker for its one-thread calls ([`own_worker`]).
    static OWN_WORKER: std::cell::OnceCell<Arc<rayon::ThreadPool>> = const { std::cell::OnceCell::new() };
}

/// The pools built so far, by thread count.
static POOLS: LazyLock<Mutex<HashMap<usize, Arc<rayon::ThreadPool>>>> = LazyLock::new(Mutex::default);

/// Every core the process may use (its affinity mask, as rayon counts them).
fn all_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// A count from Python: at least 1 (`None` passes through).
fn checked(n: Option<i64>) -> PyResult<usize> {
    match n {
        None => Ok(0),
        Some(n) if n >= 1 => usize::try_from(n).map_err(|_| PyValueError::new_err(format!("{n} threads is too many"))),
        Some(n) => Err(PyValueError::new_err(format!("the number of threads must be at least 1, not {n}"))),
    }
}

/// `set_num_threads(n)`: the threads of every later call that names none (`None`: back to
/// the default, every core the process may use).
#[pyfunction]
#[pyo3(signature = (n=None))]
pub fn set_num_threads(n: Option<i64>) -> PyResult<()> {
    PROCESS_THREADS.store(checked(n)?, Ordering::Relaxed);
    Ok(())
}

/// `get_num_threads()`: the threads a call made now from this Python thread runs on.
#[pyfunction]
pub fn get_num_threads() -> usize {
    match (CALL_THREADS.get(), PROCESS_THREADS.load(Ordering::Relaxed)) {
        (0, 0) => all_cores(),
        (0, n) | (n, _) => n,
    }
}

/// `_swap_call_threads(n)`: sets the count of this Python thread's calls (`None`: the
/// process-wide one) and returns the previous value (`None` if there was none), for
/// `cgx.threads`, which puts it back.
#[pyfunction]
#[pyo3(signature = (n=None))]
pub fn _swap_call_threads(n: Option<i64>) -> PyResult<Option<usize>> {
    let previous = CALL_THREADS.replace(checked(n)?);
    Ok((previous != 0).then_some(previous))
}

/// The pool a call made now from this thread runs in (`None`: one thread, no pool).
pub(crate) fn call_pool() -> PyResult<Option<Arc<rayon::ThreadPool>>> {
    let n = get_num_threads();
    if n <= 1 {
        return Ok(None);
    }
    let mut pools = POOLS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = pools.get(&n) {
        return Ok(Some(p.clone()));
    }
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(n)
        .thread_name(|i| format!("cgx-{i}"))
        .build()
        .map_err(|e| PyRuntimeError::new_err(format!("cannot start {n} threads: {e}")))?;
    let pool = Arc::new(pool);
    pools.insert(n, pool.clone());
    Ok(Some(pool))
}

/// The calling (Python) thread's own worker: a pool of one thread, built on its first use
/// and ended with the Python thread, where its one-thread calls that Ctrl-C must be able to
/// end run. One per Python thread, so that Python threads calling at once still run at
/// once; inside it the einsum crate sees a pool of one thread and splits nothing.
pub(crate) fn own_worker() -> PyResult<Arc<rayon::ThreadPool>> {
    OWN_WORKER.with(|cell| {
        if let Some(p) = cell.get() {
            return Ok(p.clone());
        }
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .thread_name(|_| "cgx-call".to_string())
            .build()
            .map_err(|e| PyRuntimeError::new_err(format!("cannot start a worker thread: {e}")))?;
        Ok(cell.get_or_init(|| Arc::new(pool)).clone())
    })
}

/// `f` inside `pool` (where the einsum crate's evaluations use its threads), or on the
/// calling thread without one.
pub(crate) fn on<R: Send>(pool: Option<&rayon::ThreadPool>, f: impl FnOnce() -> R + Send) -> R {
    match pool {
        Some(p) => p.install(f),
        None => f(),
    }
}
