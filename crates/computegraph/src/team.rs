//! [`Team`]: the synchronisation of one level-parallel run (`eval.rs`): an epoch per
//! split level, an atomic claim of chunks, and the wait for every claimed chunk before
//! the next level. It knows nothing of programs or slots; `eval.rs` states what makes its
//! slot accesses sound and relies on `Team` running one level at a time, with
//! release/acquire ordering between levels.

use std::sync::Mutex;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};

use crate::error::{GraphError, GraphResult};

/// The synchronisation of one parallel run: the lead (the calling thread) and helpers
/// spawned once per run. Levels are published one at a time as epochs; within an epoch
/// every participant claims chunks until none is left, and the lead waits until every
/// claimed chunk is done before it runs or publishes anything else. So at any moment
/// either the lead alone touches the slots (a small level) or the chunks of exactly one
/// split level do, which is what the level invariant makes safe.
///
/// Between levels, helpers spin and then yield instead of sleeping in the pool: on the
/// project machine a sleeping rayon worker took about 50 µs to wake for each level, a
/// large part of a level of cheap operations. A helper that has not started yet simply
/// claims nothing; the lead never waits for a helper, only for claimed chunks.
///
/// Memory ordering: the lead writes the chunk bounds, then publishes the epoch with
/// `Release`; claims read it with `Acquire`, so they see the bounds and every slot written
/// before. A finished chunk increments `done` with `Release`; the lead reads it with
/// `Acquire`, so it sees the chunk's slot writes.
pub(crate) struct Team {
    /// `epoch << 32 | next unclaimed chunk`; epoch 0 is "none yet", [`STOP`] ends the run.
    claim: AtomicU64,
    /// Number of chunks of the current epoch.
    chunks: AtomicUsize,
    /// Chunks of the current epoch finished (or abandoned by a panic).
    done: AtomicUsize,
    /// Chunk `c` is `order[bounds[c]..bounds[c + 1]]`.
    bounds: Vec<AtomicUsize>,
    /// The first error of a chunk, or a note that one panicked.
    failure: Mutex<Option<GraphError>>,
    failed: AtomicBool,
}

/// The epoch that tells helpers to return.
const STOP: u64 = u32::MAX as u64;

impl Team {
    pub(crate) fn new(max_chunks: usize) -> Self {
        Team {
            claim: AtomicU64::new(0),
            chunks: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
            bounds: (0..=max_chunks).map(|_| AtomicUsize::new(0)).collect(),
            failure: Mutex::new(None),
            failed: AtomicBool::new(false),
        }
    }

    /// Publishes the next epoch with `chunks` chunks (bounds already stored); lead only.
    pub(crate) fn publish(&self, chunks: usize) -> u64 {
        let epoch = (self.claim.load(Relaxed) >> 32) + 1;
        self.chunks.store(chunks, Relaxed);
        self.done.store(0, Relaxed);
        self.claim.store(epoch << 32, Release);
        epoch
    }

    /// Claims the next chunk of `epoch`, if it is still the current epoch and has one left.
    pub(crate) fn claim(&self, epoch: u64) -> Option<usize> {
        let mut v = self.claim.load(Acquire);
        loop {
            let c = (v & u64::from(u32::MAX)) as usize;
            if v >> 32 != epoch || c >= self.chunks.load(Relaxed) || self.failed.load(Relaxed) {
                return None;
            }
            match self.claim.compare_exchange_weak(v, v + 1, Acquire, Acquire) {
                Ok(_) => return Some(c),
                Err(now) => v = now,
            }
        }
    }

    /// Sets bound `c` of the next epoch's chunks (chunk `c` is `bounds[c]..bounds[c + 1]`);
    /// lead only, before [`Self::publish`].
    pub(crate) fn set_bound(&self, c: usize, at: usize) {
        self.bounds[c].store(at, Relaxed);
    }

    /// The positions in `order` of chunk `c` of the current epoch.
    pub(crate) fn chunk(&self, c: usize) -> std::ops::Range<usize> {
        self.bounds[c].load(Relaxed)..self.bounds[c + 1].load(Relaxed)
    }

    /// Runs claimed chunk `c` and counts it done, even if it fails or panics.
    pub(crate) fn run(&self, f: impl FnOnce() -> GraphResult<()>) {
        let done = DoneOnDrop(self);
        if let Err(e) = f() {
            self.fail(Some(e));
        }
        drop(done);
    }

    pub(crate) fn fail(&self, e: Option<GraphError>) {
        let mut first = self.failure.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if first.is_none() {
            *first = e;
        }
        self.failed.store(true, Release);
    }

    /// Waits until the `chunks` chunks of the current epoch are done; the first error of
    /// one of them, if any.
    pub(crate) fn wait_done(&self, chunks: usize) -> GraphResult<()> {
        // After a failure nobody claims the remaining chunks: stop waiting. Chunks still
        // running finish before the run's scope ends, and the slots are not read after.
        spin_until(|| self.done.load(Acquire) >= chunks || self.failed.load(Acquire));
        if self.failed.load(Acquire) {
            let e = self.failure.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
            // `None`: a chunk panicked; rayon re-raises it when the scope ends.
            return Err(e.unwrap_or(GraphError::Invalid { phase: "parallel eval", message: "a chunk panicked".into() }));
        }
        Ok(())
    }

    /// Waits for an epoch after `seen`; `None` when the run is over.
    pub(crate) fn wait_epoch(&self, seen: u64) -> Option<u64> {
        let mut epoch = seen;
        spin_until(|| {
            epoch = self.claim.load(Acquire) >> 32;
            epoch != seen
        });
        (epoch != STOP).then_some(epoch)
    }
}

/// Counts a claimed chunk done when dropped, and marks the team failed if that happens
/// during a panic, so the lead stops instead of waiting.
struct DoneOnDrop<'a>(&'a Team);

impl Drop for DoneOnDrop<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.fail(None);
        }
        self.0.done.fetch_add(1, Release);
    }
}

/// Stops the helpers when the lead returns or unwinds.
pub(crate) struct StopOnDrop<'a>(pub(crate) &'a Team);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.claim.store(STOP << 32, Release);
    }
}

/// Spins on `ready` with a CPU hint, then yields the thread between checks.
#[inline]
fn spin_until(mut ready: impl FnMut() -> bool) {
    let mut spins = 0u32;
    while !ready() {
        if spins < 1 << 12 {
            std::hint::spin_loop();
            spins += 1;
        } else {
            std::thread::yield_now();
        }
    }
}
