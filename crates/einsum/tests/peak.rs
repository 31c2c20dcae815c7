//! Measured peak memory of sliced contractions (its own test binary: it installs a
//! counting global allocator).
//!
//! The allocator counts, per thread, the bytes allocated and not yet freed while a
//! measurement is on, and their peak. A measurement covers one evaluation on the test's
//! thread (evaluation is sequential) and starts with the thread's buffer pool emptied, so
//! buffers the pool keeps count as allocated, as they are, and after a GEMM on the thread,
//! so that the GEMM library's per-thread workspace is not counted. The instance's unsliced peak is
//! far above the target; sliced, the measured peak of the value, of the gradient and of a
//! Hessian-vector product stays under it, and the results equal the unsliced ones. A
//! gradient planned within a target (`Einsum::gradient_within`, recomputing intermediates)
//! stays under it too, with the gradients of `Einsum::gradient`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use einsum::{ContractionPath, Einsum, EinsumOptions, MemoryLimit, PathChoice, SlicedEinsum, Slicing, Tensor};

struct Counting;

thread_local! {
    static ON: Cell<bool> = const { Cell::new(false) };
    static LIVE: Cell<i64> = const { Cell::new(0) };
    static PEAK: Cell<i64> = const { Cell::new(0) };
}

fn note(delta: i64) {
    // `try_with`: thread-locals may be gone while a thread exits.
    let _ = ON.try_with(|on| {
        if on.get() {
            let live = LIVE.with(|l| {
                l.set(l.get() + delta);
                l.get()
            });
            PEAK.with(|p| p.set(p.get().max(live)));
        }
    });
}

// SAFETY: every call is forwarded to the system allocator unchanged; the counters are
// thread-local cells that never allocate. (A counting allocator has no safe form: the
// crate denies unsafe code and this impl alone allows it.)
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size() as i64);
        // SAFETY: the caller's contract, forwarded.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size() as i64);
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        note(-(layout.size() as i64));
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size as i64 - layout.size() as i64);
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Held by each measurement ([`measured`]).
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// `f`'s result and the peak bytes it allocated on this thread beyond what was live when
/// it started (the pool emptied first). The caller adds what was live before (the
/// operands).
fn measured<R>(f: impl FnOnce() -> R) -> (R, u64) {
    // One measurement at a time in the process: the buffer pool is shared, and a buffer
    // this thread allocated but another thread took from the pool and freed would stay
    // counted here.
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    warm_gemm_workspace();
    einsum::release_buffers();
    LIVE.with(|l| l.set(0));
    PEAK.with(|p| p.set(0));
    ON.with(|on| on.set(true));
    let r = f();
    ON.with(|on| on.set(false));
    einsum::release_buffers();
    (r, PEAK.with(|p| p.get()).max(0) as u64)
}

/// Runs a GEMM on this thread, unmeasured. faer's GEMM allocates a packing workspace per
/// thread on its first call (two buffers the size of the L3 cache, 64 MiB on a 32 MiB L3)
/// and keeps it for the thread's life: it is no evaluation's memory, but the first
/// measurement on a thread was charged for it (a plain gradient's "72 MB" peak was 64 MiB
/// of it and 5.1 MB of tensors).
fn warm_gemm_workspace() {
    let e = Einsum::<f64>::new("ij,jk->ik", &[vec![256, 256], vec![256, 256]], PathChoice::Greedy).unwrap();
    let a = Tensor::from_fn(vec![256, 256], |i| (i[0] + i[1]) as f64).unwrap();
    let r = e.eval(&[&a, &a]).unwrap();
    assert!(r.get(&[1, 1]).is_some_and(f64::is_finite));
}

#[test]
fn sliced_runs_stay_under_the_target_with_the_unsliced_values() {
    // Σ_ab (A·Bᵀ)_ab (C·Dᵀ)_ab: the intermediate A·Bᵀ (1024x1024 doubles, 8 MiB) dwarfs
    // the four 1024x4 operands (32 KiB each).
    let expr = "ai,bi,aj,bj->";
    let shapes = vec![vec![1024, 4]; 4];
    let path = PathChoice::Explicit(ContractionPath::new(vec![[0, 1], [0, 1], [0, 1]]));
    let ops: Vec<Tensor<f64>> = (0..4)
        .map(|k| Tensor::from_fn(vec![1024, 4], |i| ((i[0] * 7 + i[1] * 3 + k) % 11) as f64 / 11.0 - 0.4).unwrap())
        .collect();
    let refs: Vec<&Tensor<f64>> = ops.iter().collect();
    // The operands are allocated before any measurement; they count against the target.
    let operand_bytes: u64 = ops.iter().map(|t| 8 * t.len() as u64).sum();
    let plain = Einsum::<f64>::new(expr, &shapes, path.clone()).unwrap();
    let (want, unsliced_peak) = measured(|| plain.eval(&refs).unwrap());
    let unsliced_peak = unsliced_peak + operand_bytes;
    let wrt = [0, 1, 2, 3];
    let grad = plain.gradient(&wrt).unwrap();
    let one = Tensor::scalar(1.0);
    let (want_grads, unsliced_grad_peak) = measured(|| grad.eval(&refs, &one).unwrap());
    let unsliced_grad_peak = unsliced_grad_peak + operand_bytes;

    let target: u64 = 512 << 10;
    assert!(unsliced_peak > 16 * target, "the instance is not large enough: {unsliced_peak} bytes");
    let options = EinsumOptions::default().memory_limit(MemoryLimit::Bytes(target));
    assert!(Einsum::<f64>::with_options(expr, &shapes, path.clone(), &options).is_err());
    let s = SlicedEinsum::<f64>::new(expr, &shapes, path, &options, &Slicing::Memory { gradient: true }).unwrap();
    let p = s.plan();
    assert!(p.n_slices() > 1 && p.gradient_peak_bytes() <= target, "{p:?}");

    let (got, peak) = measured(|| s.eval(&refs).unwrap());
    let peak = peak + operand_bytes;
    assert!(peak <= target, "measured peak {peak} bytes over the target {target} (unsliced {unsliced_peak})");
    let scale = want.data()[0].abs().max(1.0);
    assert!(got.max_abs_diff(&want).unwrap() <= 1e-9 * scale, "{got:?} vs {want:?}");

    let g = s.gradient(&wrt).unwrap();
    let (grads, grad_peak) = measured(|| g.eval(&refs, &one).unwrap());
    let grad_peak = grad_peak + operand_bytes;
    // The gradients themselves (4 x 32 KiB) are the result and count in the peak.
    assert!(grad_peak <= target, "gradient: measured {grad_peak} bytes over {target} (unsliced {unsliced_grad_peak})");
    for (a, b) in grads.iter().zip(&want_grads) {
        assert!(a.max_abs_diff(b).unwrap() <= 1e-9 * (1.0 + b.max_abs()));
    }
    println!(
        "target {target}: forward {peak} (unsliced {unsliced_peak}), gradient {grad_peak} (unsliced \
         {unsliced_grad_peak}) bytes; {} slices on {:?}, overhead {:.3}",
        p.n_slices(),
        p.labels(),
        p.overhead()
    );
}

#[test]
fn a_sliced_hvp_stays_under_the_target_with_the_unsliced_products() {
    // The network of the test above: the unsliced HVP holds the 8 MiB intermediate A·Bᵀ,
    // its tangent, and their cotangents.
    let expr = "ai,bi,aj,bj->";
    let shapes = vec![vec![1024, 4]; 4];
    let path = PathChoice::Explicit(ContractionPath::new(vec![[0, 1], [0, 1], [0, 1]]));
    let make =
        |k: usize| Tensor::from_fn(vec![1024, 4], |i| ((i[0] * 7 + i[1] * 3 + k) % 11) as f64 / 11.0 - 0.4).unwrap();
    let ops: Vec<Tensor<f64>> = (0..4).map(make).collect();
    let dirs: Vec<Tensor<f64>> = (4..8).map(make).collect();
    let refs: Vec<&Tensor<f64>> = ops.iter().collect();
    let drefs: Vec<&Tensor<f64>> = dirs.iter().collect();
    // The operands and the directions are allocated before any measurement.
    let held: u64 = ops.iter().chain(&dirs).map(|t| 8 * t.len() as u64).sum();
    let wrt = [0, 1, 2, 3];
    let one = Tensor::scalar(1.0);
    let plain = Einsum::<f64>::new(expr, &shapes, path.clone()).unwrap().hvp(&wrt).unwrap();
    let (want, unsliced_peak) = measured(|| plain.eval(&refs, &one, &drefs).unwrap());
    let unsliced_peak = unsliced_peak + held;

    // Sliced on `a` alone under this target (1024 slices); under 640 KiB, `b` too (2^20).
    let target: u64 = 700 << 10;
    assert!(unsliced_peak > 16 * target, "the instance is not large enough: {unsliced_peak} bytes");
    let options = EinsumOptions::default().memory_limit(MemoryLimit::Bytes(target));
    let s = SlicedEinsum::<f64>::new(expr, &shapes, path, &options, &Slicing::MemoryHvp).unwrap();
    let p = s.plan();
    assert!(p.n_slices() > 1 && p.hvp_peak_bytes() <= target, "{p:?}");
    let h = s.hvp(&wrt).unwrap();
    let (got, peak) = measured(|| h.eval(&refs, &one, &drefs).unwrap());
    let peak = peak + held;
    // The products themselves (4 x 32 KiB) are the result and count in the peak.
    assert!(peak <= target, "HVP: measured {peak} bytes over {target} (unsliced {unsliced_peak})");
    for (a, b) in got.iter().zip(&want) {
        assert!(a.max_abs_diff(b).unwrap() <= 1e-9 * (1.0 + b.max_abs()));
    }
    println!(
        "target {target}: HVP measured {peak} bytes, estimated {} (unsliced {unsliced_peak}); {} slices on {:?}, \
         overhead {:.3}",
        p.hvp_peak_bytes(),
        p.n_slices(),
        p.labels(),
        p.overhead()
    );
}

/// A chain `U0·V0·U1·V1·…·W·Z` whose every other intermediate is `n x n` (`Uk` is the
/// vector `x_k`, `Vk` the vector `x_{k+1}`, each `n x n` an outer product), contracted left
/// to right: the plain reverse pass keeps every `n x n` intermediate, `m` of them. (With
/// `Uk` and `Vk` of shape `n x 4` sharing a summed label, `reassoc.rs` contracts the
/// gradients around each `n x n` expansion without it, and nothing of that size is kept.)
fn chain(m: usize, n: usize) -> (String, Vec<Vec<usize>>, Vec<[usize; 2]>) {
    let x = |k: usize| char::from(b'a' + k as u8);
    let mut terms = Vec::new();
    let mut shapes = Vec::new();
    for k in 0..m {
        terms.push(x(k).to_string());
        terms.push(x(k + 1).to_string());
        shapes.extend([vec![n], vec![n]]);
    }
    terms.push(x(m).to_string());
    terms.push(x(0).to_string());
    shapes.extend([vec![n], vec![n]]);
    let mut path = vec![[0, 1]];
    path.extend((2..terms.len()).rev().map(|len| [0, len - 1]));
    (terms.join(",") + "->", shapes, path)
}

#[test]
fn a_checkpointed_gradient_stays_under_the_target_with_the_plain_gradients() {
    let (expr, shapes, path) = chain(8, 256);
    let e = Einsum::<f64>::new(&expr, &shapes, PathChoice::Explicit(ContractionPath::new(path))).unwrap();
    let ops: Vec<Tensor<f64>> = shapes
        .iter()
        .enumerate()
        .map(|(k, s)| {
            Tensor::from_fn(s.clone(), |i| ((i[0] * 7 + i.get(1).unwrap_or(&0) * 3 + k) % 11) as f64 / 11.0 - 0.4)
                .unwrap()
        })
        .collect();
    let refs: Vec<&Tensor<f64>> = ops.iter().collect();
    let one = Tensor::scalar(1.0);
    // The operands and the cotangent are allocated before any measurement.
    let held: u64 = ops.iter().map(|t| 8 * t.len() as u64).sum::<u64>() + 8;
    let wrt: Vec<usize> = (0..shapes.len()).collect();
    let plain = e.gradient(&wrt).unwrap();
    let ((want_v, want), plain_peak) = measured(|| plain.eval_with_value(&refs, &one).unwrap());
    let plain_peak = plain_peak + held;

    let target: u64 = 3 << 20;
    assert!(plain_peak > target + (target >> 2), "the chain is not large enough: {plain_peak} bytes");
    let g = e.gradient_within(&wrt, MemoryLimit::Bytes(target)).unwrap();
    assert!(g.peak_bytes() <= target, "simulated {}", g.peak_bytes());
    let ((v, got), peak) = measured(|| g.eval_with_value(&refs, &one).unwrap());
    let peak = peak + held;
    assert!(peak <= target, "checkpointed: measured {peak} bytes over {target} (plain {plain_peak})");
    assert!((v.data()[0] - want_v.data()[0]).abs() <= 1e-12 * (1.0 + want_v.data()[0].abs()));
    for (a, b) in got.iter().zip(&want) {
        assert!(a.max_abs_diff(b).unwrap() <= 1e-12 * (1.0 + b.max_abs()));
    }
    let all = e.gradient_within(&wrt, MemoryLimit::Unlimited).unwrap();
    // The compiled program keeps every intermediate, as the simulation with all kept does:
    // its measured peak stays within that simulation's.
    assert!(plain_peak <= all.peak_bytes(), "plain: measured {plain_peak} bytes, simulated {}", all.peak_bytes());
    println!(
        "target {target}: checkpointed gradient measured {peak} bytes, simulated {} (plain measured {plain_peak}, \
         simulated {}); kept {} of {} intermediates; multiply-adds {:.3e} against {:.3e} with all kept",
        g.peak_bytes(),
        all.peak_bytes(),
        g.kept(),
        all.kept(),
        g.multiply_adds(),
        all.multiply_adds()
    );
}
