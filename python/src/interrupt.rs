//! Long calls that Ctrl-C can end: the work runs on another thread with a stop flag (a
//! pool's, kept between calls: [`interruptibly_in`]; or one started for it),
//! while the calling thread waits without the GIL and takes it back every [`SIGNAL_POLL`]
//! to run Python's signal handlers (which run on the main thread only, so the work cannot
//! stay there). When a handler raises (Ctrl-C: `KeyboardInterrupt`), the flag goes up, the
//! work ends at its next look at the flag and frees what it held, and the handler's
//! exception is raised. Used by the contractions (`expression.rs`, in the call's pool,
//! through `einsum::with_stop`, which is `computegraph::stop::with_stop`: one flag for the
//! engine and the kernels), and, on a thread started per call (their passes use rayon's
//! global pool, which a pool's thread would replace by its own), by the scalar graph's
//! compiles and evaluations (`graph.rs`) and by the DAG partitions' preparation and
//! batches (`dag.rs`).
//!
//! Work that owns everything it reads ([`interruptibly_detached`]: the scalar graph's
//! compile and gradient passes) is not waited for once a handler has raised: what an
//! interrupted pass frees is most of the time it takes to end (giving back gigabytes of a
//! 10^7-node pipeline's columns to the kernel, `docs/PERFORMANCE.md`, stop43), so the work
//! ends and frees them on its own thread while the exception is raised at once. Until it
//! has, its memory is held beside that of the next call.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};

use pyo3::prelude::*;

/// How often a waiting call runs Python's signal handlers.
const SIGNAL_POLL: std::time::Duration = std::time::Duration::from_millis(20);

/// `work(flag)` on a thread of `pool` (on the calling thread's behalf: the call waits);
/// `flag` goes up when a signal handler raises, and the handler's exception is returned
/// once `work` has ended. Unlike [`interruptibly`], no thread is started: `work` runs on a
/// thread that lives on between calls (its stack and per-thread buffers already mapped),
/// and inside `pool`, so that the einsum crate's kernels use its threads.
pub(crate) fn interruptibly_in<R: Send>(
    py: Python<'_>,
    pool: &rayon::ThreadPool,
    work: impl FnOnce(Arc<AtomicBool>) -> PyResult<R> + Send,
) -> PyResult<R> {
    let flag = Arc::new(AtomicBool::new(false));
    py.detach(|| {
        let (done, finished) = channel::<PyResult<R>>();
        let worker_flag = flag.clone();
        // `in_place_scope`: the body (the waiting loop) runs here, the spawned work on a
        // thread of `pool`; the scope ends when the work has, and re-raises its panic.
        let (result, raised) = pool.in_place_scope(|s| {
            s.spawn(move |_| {
                let _ = done.send(work(worker_flag));
            });
            wait(&finished, &flag, false)
        });
        // A panicking work re-raised at the scope's end: `result` is there.
        outcome(result.unwrap_or_else(|| unreachable!("the work sent its result or panicked")), raised)
    })
}

/// `work(flag)` on a thread started for it, which owns everything `work` holds: `flag`
/// goes up when a signal handler raises, and the handler's exception is returned at once,
/// while the work ends at its next look at the flag and frees what it built on its own
/// thread. Otherwise, the work's result (a panic of the work goes on here).
pub(crate) fn interruptibly_detached<R: Send + 'static>(
    py: Python<'_>,
    work: impl FnOnce(Arc<AtomicBool>) -> PyResult<R> + Send + 'static,
) -> PyResult<R> {
    let flag = Arc::new(AtomicBool::new(false));
    py.detach(|| {
        let (done, finished) = channel::<PyResult<R>>();
        let worker_flag = flag.clone();
        let worker = std::thread::Builder::new()
            .name("cgx-pass".into())
            .spawn(move || {
                let _ = done.send(work(worker_flag));
            })
            .map_err(|e| pyo3::exceptions::PyRuntimeError::new_err(format!("could not start a thread: {e}")))?;
        match wait(&finished, &flag, true) {
            (_, Some(e)) => Err(e),
            (Some(r), None) => r,
            // Without a result the worker panicked: its panic goes on here.
            (None, None) => {
                worker.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic));
                unreachable!("a worker that ends without sending has panicked")
            }
        }
    })
}

/// Waits for the work's result on `finished`, running Python's signal handlers every
/// [`SIGNAL_POLL`] meanwhile (once one has raised, `flag` is up and the work is ending;
/// with `leave`, the wait ends there): the result (`None`: the work ended without sending,
/// it panicked, or was left) and the exception a handler raised.
fn wait<R>(
    finished: &Receiver<PyResult<R>>,
    flag: &AtomicBool,
    leave: bool,
) -> (Option<PyResult<R>>, Option<PyErr>) {
    let mut raised: Option<PyErr> = None;
    loop {
        match finished.recv_timeout(SIGNAL_POLL) {
            Ok(r) => return (Some(r), raised),
            Err(RecvTimeoutError::Disconnected) => return (None, raised),
            Err(RecvTimeoutError::Timeout) if raised.is_none() => {
                raised = signal_raised(flag);
                if leave && raised.is_some() {
                    return (None, raised);
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
        }
    }
}

/// The call's outcome: the handler's exception if one raised, else the work's result.
fn outcome<R>(result: PyResult<R>, raised: Option<PyErr>) -> PyResult<R> {
    match raised {
        Some(e) => Err(e),
        None => result,
    }
}

/// Runs Python's signal handlers; when one raises, puts `flag` up and returns its exception.
fn signal_raised(flag: &AtomicBool) -> Option<PyErr> {
    let e = Python::attach(|py| py.check_signals()).err()?;
    flag.store(true, std::sync::atomic::Ordering::Relaxed);
    Some(e)
}

/// `work(flag)` on a thread of its own; `flag` goes up when a signal handler raises, and
/// the handler's exception is returned once `work` has ended. `work` must look at the
/// flag often enough to end within a fraction of a second of it.
pub(crate) fn interruptibly<R: Send>(
    py: Python<'_>,
    work: impl FnOnce(Arc<AtomicBool>) -> PyResult<R> + Send,
) -> PyResult<R> {
    let flag = Arc::new(AtomicBool::new(false));
    py.detach(|| {
        std::thread::scope(|s| {
            let (done, finished) = channel::<PyResult<R>>();
            let worker_flag = flag.clone();
            let worker = s.spawn(move || {
                let _ = done.send(work(worker_flag));
            });
            let (result, raised) = wait(&finished, &flag, false);
            // Without a result the worker panicked: its panic goes on here.
            worker.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            outcome(result.unwrap_or_else(|| unreachable!("a worker that panicked was resumed above")), raised)
        })
    })
}
