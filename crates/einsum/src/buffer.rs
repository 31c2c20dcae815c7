//! Recycled element buffers: tensor data returns its allocation to the process's pool when
//! the last reference drops, and kernels take their output buffers from it. Tensors over
//! memory the crate does not own (`Tensor::from_shared`) are never recycled.
//!
//! Why: a contraction graph allocates one output per step and frees inputs as the evaluator
//! moves on, so large buffers churn. Fresh large allocations come from the system as new
//! pages, and the kernel's page clearing and first-touch faults cost more than a third of
//! the time of a gradient evaluation of the larger instances (measured with `perf`).
//! Reused buffers are already mapped and warm. Kernels that write every element of their
//! output take it unzeroed ([`overwritten`]): for an output written once, zeroing was a
//! third of its memory traffic. Kernel scratch (packed operands, results before a final
//! permutation) goes back to the pool too ([`recycle`]).
//!
//! One pool per element type for the whole process, behind a lock, not one per thread: in
//! parallel evaluation a step's output is often made on one thread and dropped on another,
//! and a result goes back to the caller's thread, which drops it. With per-thread pools
//! those buffers never came back to the thread that allocates, so with two threads
//! `str_nw_mera_open_26` page-faulted its 344 MB output afresh on every evaluation (three
//! times the page faults of one thread). The lock is taken once per buffer of at least
//! [`POOL_MIN_BYTES`], against the tens of microseconds of work such a buffer carries.
//!
//! Bounds: buffers of at least [`POOL_MIN_BYTES`] are kept, at most [`POOL_MAX_BUFFERS`] of
//! them and [`POOL_MAX_BYTES`] in total per element type; [`release_buffers`] empties the
//! pools. A buffer that comes back to a full pool is kept, and the buffers that came back
//! longest ago are freed to make room (least recently returned first). Why: a forward pass
//! and a value+gradient alternating (a benchmark harness, a training loop that also reports
//! the value) left the pool full of the gradient's middle-sized buffers when the forward's
//! result came back last; turned away, it was mapped afresh by every following forward
//! pass (`str_nw_mera_open_26`: 328 MiB, 84 thousand page faults; 893 ms per forward
//! through Python against 675 with this rule, docs/PERFORMANCE.md, mera40c).
//! The buffers that came back last are the ones the next evaluation of either kind asks
//! for first, and a buffer turned away costs its pages whichever it is, so the oldest go.
//!
//! Staleness: every evaluation of a compiled einsum program calls [`begin_evaluation`]
//! (each slice of a sliced one too), and a pooled buffer remembers the count of
//! evaluations begun when it came back. When a request finds no buffer to reuse (a fresh
//! allocation follows) or a buffer comes back, the buffers that have waited while
//! [`STALE_AFTER`] evaluations per evaluation running began are freed. Repeated
//! evaluations of one program, or of up to three programs in turn (a forward pass and a
//! gradient), on one thread or several, find every request served and free nothing; a run whose
//! tensors change size (the slices of a gradient after those of its forward pass, one
//! network after another) does not keep the sizes it no longer uses, which otherwise
//! stayed in the pool beside the new ones (a sliced gradient of `str_nw_mera_open_26`
//! under an 800 MiB limit peaked at 1.68 GB of RSS with them). The one case it serves
//! badly: a long evaluation beside a sliced one on another thread, whose slices each
//! count, may see buffers it returned freed before it asks for them again (page faults,
//! not errors).

use std::any::{Any, TypeId};
use std::cell::Cell;
use std::ops::Deref;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Mutex, PoisonError};

use crate::elem::Elem;

/// Smallest buffer worth recycling (smaller ones are cheap for the allocator).
pub const POOL_MIN_BYTES: usize = 32 << 10;
/// At most this many buffers per element type. A gradient's outputs (one per
/// operand: 100 to 200 on the benchmark instances) all live until the caller drops them;
/// with 32, two thirds of them came back as fresh pages on every evaluation. 1024, not
/// 256: a value+gradient returns its kept intermediates as well as its gradients, and
/// `str_mps_varying_inner_product_200`'s are about 300 pooled buffers, so with 256 the 40
/// returned first were freed and requested afresh from `calloc` (zeroed, 10 MB) on every
/// evaluation (docs/PERFORMANCE.md, lm40b). [`POOL_MAX_BYTES`] still bounds the memory.
pub(crate) const POOL_MAX_BUFFERS: usize = 1024;
/// At most this many bytes per element type. 768 MiB, not 1 GiB: with the oldest buffers
/// freed to make room, a pool of 1 GiB stays full, and between the calls of a forward pass
/// and a value+gradient of `str_nw_mera_open_26` kept 1423 MiB resident against 1162 when
/// it turned the result away (the pool then held 755 MiB); 768 MiB holds that instance's
/// whole forward pass (728 MiB of buffers, the 328 MiB result among them) at 1144 MiB
/// resident (docs/PERFORMANCE.md, mera40c).
pub(crate) const POOL_MAX_BYTES: usize = 768 << 20;

/// One element type's buffers, in columns kept in step (sorted by capacity).
struct Pool<T> {
    buffers: Vec<Vec<T>>,
    /// The evaluation count when each buffer came back ([`EVALUATIONS`]): for staleness.
    returned: Vec<u64>,
    /// The pool's count of returns when each buffer came back: which came back longest ago
    /// (finer than `returned`, which one evaluation's buffers share).
    order: Vec<u64>,
    /// Buffers that came back so far.
    returns: u64,
    /// At most the smallest of `returned` (`u64::MAX` when empty): no buffer is stale
    /// while this one is not, so the staleness check reads the column only when one may
    /// be (removals leave it a lower bound; a scan makes it exact).
    oldest: u64,
    /// Bytes held, at most `max_bytes`, in at most `max_buffers` buffers.
    bytes: usize,
    max_bytes: usize,
    max_buffers: usize,
}

/// Evaluations begun in the process ([`begin_evaluation`]; a sliced evaluation's slices
/// each count).
static EVALUATIONS: AtomicU64 = AtomicU64::new(0);
/// Outermost evaluations running now, on all threads (a sliced evaluation is one).
static IN_FLIGHT: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// How many evaluations this thread is inside (a sliced evaluation runs one per slice).
    static DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// A pooled buffer is stale once this many evaluations per evaluation running began after
/// it came back with none taking it. Four: a forward pass and a gradient alternating in a
/// loop reuse each other's buffers every second evaluation (two had made
/// `str_nw_mera_open_26`'s forward pass page-fault in such a loop); per evaluation running,
/// so that threads evaluating side by side, which advance the count together, do not make
/// each other's buffers stale.
pub(crate) const STALE_AFTER: u64 = 4;

/// One evaluation of a compiled program, from [`begin_evaluation`] until dropped.
pub(crate) struct Evaluation {
    outermost: bool,
}

/// Counts an evaluation as begun (see the module doc), and, if it is the outermost one of
/// its thread, as running until the guard is dropped: the slices of a sliced evaluation
/// each count as begun (a slice's buffers serve the next slice), the sliced evaluation as
/// one running.
pub(crate) fn begin_evaluation() -> Evaluation {
    EVALUATIONS.fetch_add(1, Relaxed);
    let outermost = DEPTH.with(|d| {
        d.set(d.get() + 1);
        d.get() == 1
    });
    if outermost {
        IN_FLIGHT.fetch_add(1, Relaxed);
    }
    Evaluation { outermost }
}

impl Drop for Evaluation {
    fn drop(&mut self) {
        DEPTH.with(|d| d.set(d.get() - 1));
        if self.outermost {
            IN_FLIGHT.fetch_sub(1, Relaxed);
        }
    }
}

/// The pools, one per element type (a short list: `f64` and `c64`).
static POOLS: Mutex<Vec<(TypeId, Box<dyn Any + Send>)>> = Mutex::new(Vec::new());

fn with_pool<T: Elem, R>(f: impl FnOnce(&mut Pool<T>) -> R) -> R {
    // Nothing panics while the lock is held but an allocation failure; the pool is
    // consistent after any of its operations, so a poisoned lock is taken as it is.
    let mut pools = POOLS.lock().unwrap_or_else(PoisonError::into_inner);
    let at = match pools.iter().position(|(t, _)| *t == TypeId::of::<T>()) {
        Some(at) => at,
        None => {
            pools.push((TypeId::of::<T>(), Box::new(Pool::<T>::new(POOL_MAX_BYTES, POOL_MAX_BUFFERS))));
            pools.len() - 1
        }
    };
    f(pools[at].1.downcast_mut::<Pool<T>>().expect("pools are keyed by their element type"))
}

fn bytes<T>(capacity: usize) -> usize {
    capacity * std::mem::size_of::<T>()
}

/// A pooled allocation of capacity between `n` and `2n` (the smallest), if there is one.
/// If there is none, the stale buffers are freed (the module doc).
fn pooled<T: Elem>(n: usize) -> Option<Vec<T>> {
    if bytes::<T>(n) < POOL_MIN_BYTES {
        return None;
    }
    let mut stale = Vec::new();
    let found = with_pool::<T, _>(|p| p.take(n, clock(), &mut stale));
    drop(stale); // freed outside the lock
    found
}

/// The pool's clock: evaluations begun, and how many of them make a buffer stale now.
fn clock() -> Clock {
    let window = STALE_AFTER * IN_FLIGHT.load(Relaxed).max(1);
    #[cfg(test)]
    if KEEP_STALE.load(Relaxed) {
        return Clock { now: 0, window }; // nothing is stale
    }
    Clock { now: EVALUATIONS.load(Relaxed), window }
}

/// Evaluations begun (`now`), and after how many a returned buffer is stale (`window`).
#[derive(Copy, Clone, Debug)]
struct Clock {
    now: u64,
    window: u64,
}

impl Clock {
    fn is_stale(self, returned: u64) -> bool {
        // Saturating: an empty pool's `oldest` is `u64::MAX`, never stale.
        returned.saturating_add(self.window) <= self.now
    }
}

impl<T> Pool<T> {
    fn new(max_bytes: usize, max_buffers: usize) -> Self {
        Pool {
            buffers: Vec::new(),
            returned: Vec::new(),
            order: Vec::new(),
            returns: 0,
            oldest: u64::MAX,
            bytes: 0,
            max_bytes,
            max_buffers,
        }
    }

    /// Removes the buffer at `i` from the pool.
    fn remove(&mut self, i: usize) -> Vec<T> {
        self.returned.remove(i);
        self.order.remove(i);
        let b = self.buffers.remove(i);
        self.bytes -= bytes::<T>(b.capacity());
        b
    }

    /// The smallest buffer of capacity between `n` and `2n`, if there is one; if there is
    /// none, moves the buffers stale at `clock` into `stale`.
    fn take(&mut self, n: usize, clock: Clock, stale: &mut Vec<Vec<T>>) -> Option<Vec<T>> {
        // Buffers are sorted by capacity.
        let best = self.buffers.partition_point(|b| b.capacity() < n);
        if self.buffers.get(best).is_some_and(|b| b.capacity() <= 2 * n) {
            return Some(self.remove(best));
        }
        self.take_stale(clock, stale);
        None
    }

    /// Keeps `v`, which came back at `clock`, after moving the buffers stale at `clock`
    /// into `stale` (buffers made outside the pool come back too: stale ones make room),
    /// then as many of the buffers that came back longest ago as the pool's bounds need
    /// (the module doc). A buffer larger than the whole pool goes to `stale` itself.
    fn put(&mut self, v: Vec<T>, clock: Clock, stale: &mut Vec<Vec<T>>) {
        self.take_stale(clock, stale);
        let size = bytes::<T>(v.capacity());
        if size > self.max_bytes || self.max_buffers == 0 {
            stale.push(v);
            return;
        }
        while self.buffers.len() >= self.max_buffers || self.bytes + size > self.max_bytes {
            // At most `max_buffers` to scan, once per buffer freed (a full pool only).
            let oldest = (0..self.order.len()).min_by_key(|&i| self.order[i]).expect("a full pool holds a buffer");
            stale.push(self.remove(oldest));
        }
        self.bytes += size;
        let at = self.buffers.partition_point(|b| b.capacity() < v.capacity());
        self.buffers.insert(at, v);
        self.returned.insert(at, clock.now);
        self.oldest = self.oldest.min(clock.now);
        self.order.insert(at, self.returns);
        self.returns += 1;
    }

    /// Moves the buffers stale at `clock` (the module doc) into `stale`.
    fn take_stale(&mut self, clock: Clock, stale: &mut Vec<Vec<T>>) {
        if !clock.is_stale(self.oldest) {
            return;
        }
        let mut i = 0;
        while i < self.buffers.len() {
            if clock.is_stale(self.returned[i]) {
                stale.push(self.remove(i));
            } else {
                i += 1;
            }
        }
        self.oldest = self.returned.iter().copied().min().unwrap_or(u64::MAX);
    }
}

/// An empty vector with room for `n` elements, reusing a pooled allocation of capacity
/// between `n` and `2n` if there is one.
pub(crate) fn reserved<T: Elem>(n: usize) -> Vec<T> {
    match pooled(n) {
        Some(mut v) => {
            v.clear();
            v
        }
        None => Vec::with_capacity(n),
    }
}

/// A zeroed vector of `n` elements, reusing a pooled allocation of capacity between `n`
/// and `2n` if there is one (a fresh one comes from `calloc` for `f64`, whose large
/// allocations are zero pages the kernel maps lazily).
pub(crate) fn zeroed<T: Elem>(n: usize) -> Vec<T> {
    match pooled(n) {
        Some(mut v) => {
            v.clear();
            v.resize(n, T::zero());
            v
        }
        None => vec![T::zero(); n],
    }
}

/// A vector of `n` elements with unspecified values (stale values of a recycled buffer,
/// or zeros), for kernels that write every element before reading any: it saves the
/// zeroing pass, which for an output written once is a third of its memory traffic.
pub(crate) fn overwritten<T: Elem>(n: usize) -> Vec<T> {
    match pooled(n) {
        Some(mut v) => {
            // Elements past the old length are written once here; the others keep stale
            // values, all of them initialized `T`s.
            if v.len() >= n {
                v.truncate(n);
            } else {
                v.resize(n, T::zero());
            }
            v
        }
        None => vec![T::zero(); n],
    }
}

/// Empties the buffer pools (all element types, for every thread of the process).
///
/// Kernels recycle large buffers (the pool keeps the ones tensors gave back, up to
/// `POOL_MAX_BYTES` per element type); call this to return that memory when the process
/// is done with contractions for a while.
///
/// ```
/// use einsum::{release_buffers, Einsum, PathChoice, Tensor};
///
/// let e = Einsum::<f64>::new("ij,jk->ik", &[vec![64, 64], vec![64, 64]], PathChoice::Greedy).unwrap();
/// let a = Tensor::from_fn(vec![64, 64], |_| 1.0).unwrap();
/// let r = e.eval(&[&a, &a]).unwrap();
/// assert_eq!(r.get(&[0, 0]), Some(64.0));
/// release_buffers();
/// ```
pub fn release_buffers() {
    // Freed outside the lock.
    let pools = std::mem::take(&mut *POOLS.lock().unwrap_or_else(PoisonError::into_inner));
    drop(pools);
}

/// Tensor data: a vector that returns its allocation to the pool when dropped, or elements
/// another owner keeps alive (`Tensor::from_shared`), never recycled.
pub(crate) enum Buffer<T: Elem> {
    /// The crate's own allocation.
    Owned(Vec<T>),
    /// Someone else's memory, read through `AsRef` (its length checked once, on construction).
    Shared(Box<dyn AsRef<[T]> + Send + Sync>),
}

impl<T: Elem> Buffer<T> {
    pub(crate) fn new(v: Vec<T>) -> Self {
        Buffer::Owned(v)
    }

    /// The elements as a vector: this buffer's own allocation if it has one, else a copy.
    pub(crate) fn take(&mut self) -> Vec<T> {
        match self {
            Buffer::Owned(v) => std::mem::take(v),
            Buffer::Shared(s) => (**s).as_ref().to_vec(),
        }
    }
}

impl<T: Elem> Deref for Buffer<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        match self {
            Buffer::Owned(v) => v,
            Buffer::Shared(s) => (**s).as_ref(),
        }
    }
}

impl<T: Elem> PartialEq for Buffer<T> {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl<T: Elem> Drop for Buffer<T> {
    fn drop(&mut self) {
        if let Buffer::Owned(v) = self {
            recycle(std::mem::take(v));
        }
    }
}

/// A tensor's elements handed out of the crate (to another library's array, say) that go
/// back to the buffer pool when dropped, as a tensor's own data does.
///
/// Why: a caller that takes results out as plain vectors and drops them frees large
/// allocations together, the allocator may give those pages back to the system, and the
/// next evaluation's outputs then come from fresh pages, each paying a first-touch fault.
/// A dropped `PooledVec` is reused by the next evaluation, on whatever thread.
///
/// ```
/// use einsum::Tensor;
/// let t = Tensor::<f64>::filled(vec![512, 512], 1.0).unwrap();
/// let ptr = t.data().as_ptr();
/// let mut v = t.into_pooled_vec(); // the tensor held its data alone: no copy
/// assert_eq!((v.as_ptr(), v.len()), (ptr, 512 * 512));
/// v.as_mut_slice()[0] = 2.0;
/// assert_eq!(v[..2], [2.0, 1.0]);
/// drop(v); // back to the pool, for the next evaluation's outputs
/// ```
pub struct PooledVec<T: Elem>(Vec<T>);

impl<T: Elem> PooledVec<T> {
    pub(crate) fn new(v: Vec<T>) -> Self {
        PooledVec(v)
    }

    /// The elements, writable (the allocation is this value's alone).
    pub fn as_mut_slice(&mut self) -> &mut [T] {
        &mut self.0
    }
}

impl<T: Elem> Deref for PooledVec<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.0
    }
}

impl<T: Elem> Drop for PooledVec<T> {
    fn drop(&mut self) {
        recycle(std::mem::take(&mut self.0));
    }
}

impl<T: Elem> std::fmt::Debug for PooledVec<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("PooledVec").field(&self.0.len()).finish()
    }
}

/// Returns a kernel's scratch vector to the pool (if large enough and the pool has room),
/// as dropping tensor data does.
pub(crate) fn recycle<T: Elem>(v: Vec<T>) {
    let size = bytes::<T>(v.capacity());
    if size < POOL_MIN_BYTES {
        return;
    }
    let mut stale = Vec::new();
    with_pool::<T, _>(|p| p.put(v, clock(), &mut stale));
    drop(stale); // freed outside the lock
}

/// Unit tests that empty the pool or expect a buffer back from it hold this lock: the
/// pool is the process's, and the test harness runs tests on several threads.
#[cfg(test)]
pub(crate) static POOL_TESTS: Mutex<()> = Mutex::new(());

/// Set by unit tests that expect a buffer back (holding [`POOL_TESTS`]): other tests'
/// evaluations, on other threads, could make it stale in between.
#[cfg(test)]
static KEEP_STALE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Holds [`POOL_TESTS`] and keeps stale buffers while it lives.
#[cfg(test)]
pub(crate) struct PoolTest(#[allow(dead_code)] std::sync::MutexGuard<'static, ()>);

#[cfg(test)]
impl PoolTest {
    pub(crate) fn keeping_stale() -> Self {
        let guard = POOL_TESTS.lock().unwrap_or_else(PoisonError::into_inner);
        KEEP_STALE.store(true, Relaxed);
        PoolTest(guard)
    }
}

#[cfg(test)]
impl Drop for PoolTest {
    fn drop(&mut self) {
        KEEP_STALE.store(false, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Elements of the buffers these tests pool: 40 MB, a size no other unit test asks for
    /// (a concurrent test taking a buffer of `n/2` to `n` elements would take ours).
    const N: usize = 5_000_011;

    #[test]
    fn dropped_buffers_are_reused() {
        let _serial = PoolTest::keeping_stale();
        release_buffers();
        let mut v = zeroed::<f64>(N);
        v[3] = 1.0;
        let ptr = v.as_ptr();
        drop(Buffer::new(v));
        let w = zeroed::<f64>(N - 1);
        assert_eq!(w.as_ptr(), ptr, "the pooled allocation is reused");
        assert!(w.iter().all(|&x| x == 0.0), "and zeroed");
        // Too small a request for that buffer (under half its capacity): a fresh one.
        drop(Buffer::new(w));
        let small = zeroed::<f64>(N / 4);
        assert_ne!(small.as_ptr(), ptr);
        release_buffers();
        // Small buffers are not pooled.
        drop(Buffer::new(vec![1.0f64; 4]));
        assert!(with_pool::<f64, _>(|p| p.buffers.iter().all(|b| b.capacity() >= POOL_MIN_BYTES / 8)));
    }

    #[test]
    fn pooled_vecs_return_to_the_pool() {
        let _serial = PoolTest::keeping_stale();
        release_buffers();
        let v = PooledVec::new(zeroed::<f64>(N));
        let ptr = v.as_ptr();
        drop(v);
        let reused = overwritten::<f64>(N);
        assert_eq!(reused.as_ptr(), ptr, "a dropped PooledVec's allocation is reused");
        release_buffers();
    }

    #[test]
    fn buffers_dropped_on_another_thread_are_reused() {
        // Parallel evaluation makes a step's output on one thread and may drop it on
        // another; the result goes back to the caller's thread.
        let _serial = PoolTest::keeping_stale();
        release_buffers();
        let v = overwritten::<f64>(N);
        let ptr = v.as_ptr() as usize;
        std::thread::spawn(move || drop(Buffer::new(v))).join().expect("the thread drops the buffer");
        let reused = overwritten::<f64>(N);
        assert_eq!(reused.as_ptr() as usize, ptr, "a buffer dropped on another thread is reused");
        release_buffers();
    }

    /// The policy on a pool of its own (the process's pool sees other tests' evaluations).
    #[test]
    fn stale_buffers_are_freed_on_a_miss_or_a_return_and_hits_free_nothing() {
        let mut p = Pool::<f64>::new(POOL_MAX_BYTES, POOL_MAX_BUFFERS);
        let check = |p: &Pool<f64>| {
            assert_eq!(p.returned.len(), p.buffers.len(), "one stamp per buffer");
            assert_eq!(p.order.len(), p.buffers.len(), "one place in the order per buffer");
            assert_eq!(p.bytes, p.buffers.iter().map(|b| bytes::<f64>(b.capacity())).sum::<usize>());
            assert!(p.buffers.windows(2).all(|w| w[0].capacity() <= w[1].capacity()), "sorted");
            p.buffers.iter().map(Vec::capacity).collect::<Vec<_>>()
        };
        let at = |now: u64| Clock { now, window: STALE_AFTER };
        let mut stale = Vec::new();
        p.put(Vec::with_capacity(1000), at(0), &mut stale);
        p.put(Vec::with_capacity(300), at(STALE_AFTER), &mut stale);
        // At `STALE_AFTER`, the first buffer is stale: the second one's return freed it.
        assert_eq!((check(&p), stale.len()), (vec![300], 1));
        stale.clear();
        p.put(Vec::with_capacity(1000), at(STALE_AFTER), &mut stale);
        // A hit frees nothing, even once the other buffer is stale.
        let hit = p.take(250, at(2 * STALE_AFTER), &mut stale).expect("300 serves 250");
        assert_eq!((hit.capacity(), check(&p), stale.len()), (300, vec![1000], 0));
        // A miss (nothing between 100 and 200) frees the stale one.
        assert!(p.take(100, at(2 * STALE_AFTER), &mut stale).is_none());
        assert_eq!((check(&p), stale.len()), (vec![], 1));
        // Not stale one evaluation earlier, nor with two evaluations running (a window twice
        // as long).
        p.put(Vec::with_capacity(1000), at(0), &mut stale);
        assert!(p.take(100, at(STALE_AFTER - 1), &mut stale).is_none());
        assert!(p.take(100, Clock { now: STALE_AFTER, window: 2 * STALE_AFTER }, &mut stale).is_none());
        assert_eq!(check(&p), vec![1000]);
    }

    /// The columns agree and the bounds hold; the capacities, smallest first.
    fn capacities(p: &Pool<f64>) -> Vec<usize> {
        assert_eq!((p.returned.len(), p.order.len()), (p.buffers.len(), p.buffers.len()));
        assert_eq!(p.bytes, p.buffers.iter().map(|b| bytes::<f64>(b.capacity())).sum::<usize>());
        assert!(p.bytes <= p.max_bytes && p.buffers.len() <= p.max_buffers, "within the bounds");
        p.buffers.iter().map(Vec::capacity).collect()
    }

    /// A buffer coming back to a full pool is kept and the ones that came back longest ago
    /// are freed, as many as the bounds need; one larger than the pool is not kept.
    #[test]
    fn a_full_pool_frees_the_buffers_that_came_back_longest_ago() {
        // Room for 1000 elements of `f64`, in at most four buffers.
        let mut p = Pool::<f64>::new(bytes::<f64>(1000), 4);
        let at = Clock { now: 0, window: STALE_AFTER };
        let mut stale = Vec::new();
        for n in [300, 100, 200] {
            p.put(Vec::with_capacity(n), at, &mut stale);
        }
        assert_eq!((capacities(&p), stale.len()), (vec![100, 200, 300], 0));
        // 600 + 500 > 1000: the 300 (the oldest) makes room, though it is not the smallest.
        p.put(Vec::with_capacity(500), at, &mut stale);
        assert_eq!(capacities(&p), vec![100, 200, 500]);
        assert_eq!(stale.iter().map(Vec::capacity).collect::<Vec<_>>(), vec![300]);
        // Taking a buffer and giving it back makes it the newest: the 100 goes next.
        let b = p.take(200, at, &mut stale).expect("200 serves 200");
        p.put(b, at, &mut stale);
        p.put(Vec::with_capacity(250), at, &mut stale);
        assert_eq!(capacities(&p), vec![200, 250, 500]);
        // Several may go for one: 950 leaves room for nothing else.
        p.put(Vec::with_capacity(950), at, &mut stale);
        assert_eq!(capacities(&p), vec![950]);
        assert_eq!(stale.iter().map(Vec::capacity).collect::<Vec<_>>(), vec![300, 100, 500, 200, 250]);
        // Larger than the whole pool: turned away, the pool as it was.
        p.put(Vec::with_capacity(1001), at, &mut stale);
        assert_eq!((capacities(&p), stale.last().map(Vec::capacity)), (vec![950], Some(1001)));
        // The count bound: a fifth buffer frees the oldest of four.
        let mut p = Pool::<f64>::new(bytes::<f64>(1000), 4);
        for n in [10, 20, 30, 40, 50] {
            p.put(Vec::with_capacity(n), at, &mut stale);
        }
        assert_eq!(capacities(&p), vec![20, 30, 40, 50]);
    }

    /// A forward pass and a value+gradient alternating, as a model: the forward makes
    /// `x`, `y` and its result `r`; the gradient `x`, `y`, `p`, `q`, then `x`, `y` again
    /// (the cotangents of the intermediates), and `r`. Each gives its buffers back in that
    /// order, the result last. Together they need more than the pool holds. Turning the
    /// returning buffer away (the rule before) left the gradient's buffers in the pool
    /// and no `r`, so every forward allocated its result afresh; with the oldest freed,
    /// the forward finds all its buffers.
    #[test]
    fn a_forward_pass_between_gradients_finds_its_buffers() {
        let (x, y, p, q, r) = (10, 30, 100, 300, 1000);
        let forward = [x, y, r];
        let gradient = [x, y, p, q, x, y, r];
        // The forward's buffers fit, the gradient's do not (1040 and 1480 elements).
        let mut pool = Pool::<f64>::new(bytes::<f64>(1200), POOL_MAX_BUFFERS);
        let mut misses = Vec::new();
        for (now, sizes) in [&forward[..], &gradient[..]].into_iter().cycle().take(8).enumerate() {
            let clock = Clock { now: now as u64, window: STALE_AFTER };
            let mut stale = Vec::new();
            let mut missed = 0;
            let taken: Vec<Vec<f64>> = sizes
                .iter()
                .map(|&n| {
                    pool.take(n, clock, &mut stale).unwrap_or_else(|| {
                        missed += n;
                        Vec::with_capacity(n)
                    })
                })
                .collect();
            for b in taken {
                pool.put(b, clock, &mut stale);
            }
            capacities(&pool);
            misses.push(missed);
        }
        // After the first two calls: every forward misses nothing, every gradient its
        // `p`, `q` and the second `x` and `y` (the rule before: 1000 each, `r`).
        assert_eq!(misses[2..], [0, x + y + p + q, 0, x + y + p + q, 0, x + y + p + q]);
    }

    /// `oldest` only skips scans: on random returns and requests at a clock that moves
    /// forward, the pool frees exactly the buffers a scan of every stamp would (none
    /// stale is left after a miss or a return, none fresh is freed), and stays a lower
    /// bound of the stamps.
    #[test]
    fn the_oldest_stamp_frees_what_a_full_scan_frees() {
        for trial in 0..64 {
            let mut rng = crate::rng::Rng::for_trial(40, trial);
            let mut p = Pool::<f64>::new(bytes::<f64>(4000), 1 + rng.below(12));
            let (mut now, mut stale) = (0, Vec::new());
            for _ in 0..200 {
                now += rng.below(3) as u64;
                let clock = Clock { now, window: STALE_AFTER };
                let n = 10 + rng.below(400);
                // The model: what is stale before this call, by a scan of every stamp.
                let was_stale = p.returned.iter().filter(|&&r| clock.is_stale(r)).count();
                let held = p.buffers.len();
                stale.clear();
                if rng.below(2) == 0 {
                    let hit = p.take(n, clock, &mut stale);
                    if hit.is_none() {
                        assert_eq!(stale.len(), was_stale, "a miss frees every stale buffer");
                        assert!(p.returned.iter().all(|&r| !clock.is_stale(r)));
                    } else {
                        assert_eq!((stale.len(), p.buffers.len()), (0, held - 1), "a hit frees nothing");
                    }
                } else {
                    p.put(Vec::with_capacity(n), clock, &mut stale);
                    assert!(stale.len() >= was_stale, "a return frees every stale buffer");
                    assert!(p.returned.iter().all(|&r| !clock.is_stale(r)));
                }
                capacities(&p);
                assert!(p.returned.iter().all(|&r| p.oldest <= r), "a lower bound");
            }
        }
    }

    /// A value+gradient's buffers, returned together (gradients and kept intermediates:
    /// about 300 on `str_mps_varying_inner_product_200`), all serve the next evaluation
    /// of the same sizes.
    #[test]
    fn a_value_and_gradients_buffers_all_come_back() {
        let mut p = Pool::<f64>::new(POOL_MAX_BYTES, POOL_MAX_BUFFERS);
        let clock = Clock { now: 0, window: STALE_AFTER };
        let mut stale = Vec::new();
        let sizes: Vec<usize> = (0..320).map(|i| 4096 + 361 * (i % 117)).collect();
        for &n in &sizes {
            p.put(Vec::with_capacity(n), clock, &mut stale);
        }
        let served = sizes.iter().filter(|&&n| p.take(n, clock, &mut stale).is_some()).count();
        assert_eq!((served, stale.len()), (sizes.len(), 0));
    }

    /// Every evaluation counts as begun; only a thread's outermost one as running.
    #[test]
    fn nested_evaluations_count_as_begun_and_once_as_running() {
        let before = EVALUATIONS.load(Relaxed);
        let outer = begin_evaluation();
        let inner = begin_evaluation();
        assert!(outer.outermost && !inner.outermost);
        // Other tests' evaluations on other threads may count meanwhile, never fewer.
        assert!(IN_FLIGHT.load(Relaxed) >= 1);
        drop(inner);
        let again = begin_evaluation();
        assert!(!again.outermost);
        drop((again, outer));
        assert!(begin_evaluation().outermost);
        assert!(EVALUATIONS.load(Relaxed) >= before + 4);
    }
}
