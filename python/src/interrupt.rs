//! Long calls that Ctrl-C can end: the work runs on a thread of its own with a stop flag,
//! while the calling thread waits without the GIL and takes it back every [`SIGNAL_POLL`]
//! to run Python's signal handlers (which run on the main thread only, so the work cannot
//! stay there). When a handler raises (Ctrl-C: `KeyboardInterrupt`), the flag goes up, the
//! work ends at its next look at the flag and frees what it held, and the handler's
//! exception is raised. Used by the contractions (`expression.rs`, through
//! `einsum::with_stop`, which is `computegraph::stop::with_stop`: one flag for the engine
//! and the kernels), by the scalar graph's compiles and evaluations (`graph.rs`) and by the
//! DAG partitions' preparation and batches (`dag.rs`).

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use pyo3::prelude::*;

/// How often a waiting call runs Python's signal handlers.
const SIGNAL_POLL: std::time::Duration = std::time::Duration::from_millis(20);

/// `work(flag)` on a thread of its own; `flag` goes up when a signal handler raises, and
/// the handler's exception is returned once `work` has ended. `work` must look at the
/// flag often enough to end within a fraction of a second of it.
pub(crate) fn interruptibly<R: Send>(
    py: Python<'_>,
    work: impl FnOnce(Arc<AtomicBool>) -> PyResult<R> + Send,
) -> PyResult<R> {
    use std::sync::atomic::Ordering;
    use std::sync::mpsc::{RecvTimeoutError, channel};
    let flag = Arc::new(AtomicBool::new(false));
    py.detach(|| {
        std::thread::scope(|s| {
            let (done, finished) = channel::<()>();
            let worker_flag = flag.clone();
            let worker = s.spawn(move || {
                let r = work(worker_flag);
                let _ = done.send(());
                r
            });
            let mut raised: Option<PyErr> = None;
            loop {
                match finished.recv_timeout(SIGNAL_POLL) {
                    // Disconnected: the worker ended without sending (it panicked).
                    Ok(()) | Err(RecvTimeoutError::Disconnected) => break,
                    Err(RecvTimeoutError::Timeout) if raised.is_none() => {
                        if let Err(e) = Python::attach(|py| py.check_signals()) {
                            raised = Some(e);
                            flag.store(true, Ordering::Relaxed);
                        }
                    }
                    Err(RecvTimeoutError::Timeout) => {}
                }
            }
            let result = worker.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            match raised {
                Some(e) => Err(e),
                None => result,
            }
        })
    })
}
