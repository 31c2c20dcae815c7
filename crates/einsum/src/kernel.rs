//! Contraction kernels and the specs that describe them.
//!
//! A [`ContractSpec`] is a binary einsum on numeric labels in its general form: repeated
//! labels in an operand read a diagonal, repeated output labels write a diagonal, output
//! labels in neither operand broadcast, operand labels not in the output are summed. That
//! form is closed under transposition (the transpose with respect to `a` is the spec
//! `out, b -> a`), which is why the primitives use it. A [`UnarySpec`] is the one-operand
//! form: permute, sum over axes, broadcast, take or embed a diagonal.
//!
//! Kernels ([`contract`], [`unary`]):
//! - **element-wise** (`elementwise.rs`): a contraction that sums nothing and repeats no
//!   label in a tensor (products, broadcasts, outer products) writes each output element
//!   once, with no zeroing, no copy and no temporary.
//! - **direct**: one strided loop over every label (output labels outside, summed labels
//!   inside, a register accumulator when the innermost label is summed; a short innermost
//!   label gives its place to the longest one). Handles every case; used for small work
//!   and for the unusual cases.
//! - **GEMM**: labels are classified as batch (in `a`, `b`, output), left (`a`, output),
//!   right (`b`, output) and contracted (`a`, `b`, not output). A tensor whose row and
//!   column groups (left and contracted for `a`, contracted and right for `b`, left and
//!   right for the output) each form a run of consecutive axes, one ending at the innermost
//!   axis, is a batch of strided matrices as it is: no copy (a transposed matrix is read
//!   column-major). The planner (`plan`) may move labels out of the groups into the loop
//!   around the GEMMs so that the largest tensor is such a view, choosing among the
//!   candidates (each of `a`, `b`, output as the anchor, or batch labels only) by an
//!   estimated cost. The others are packed by tiled permutation copies (labels of one
//!   operand alone are summed and diagonals taken while packing), or, for the output,
//!   computed contiguously and permuted or expanded afterwards. One sequential GEMM runs
//!   per loop entry, accumulating (a looped contracted label adds into the same output):
//!   inline (`small_gemm.rs`) when it is tiny, faer otherwise.
//! - **reduction** (`reduce.rs`): at most 16 output elements over long sums (a small
//!   factor's gradient, a scalar output): both operands read in place, the sums formed in
//!   blocks of fixed content on the pool's threads. A GEMM of a few rows and columns over a
//!   long contiguous `k` inside the GEMM loop runs in `thin_gemm.rs`. Batches of dot
//!   products over the operands' common innermost labels (`ij,ij->i`, matrix–vector
//!   products, never a GEMM's `ik,jk->ij`) take its row kernel (`RowDotPlan`), and a
//!   one-operand sum ([`unary`]) its sum in the operand's own order (`SumPlan`).
//! - **lanes** (`lanes.rs`): the direct loop with the largest operand's long innermost
//!   label made innermost in every tensor, when the copies that takes are small.
//!
//! [`contract`] plans once per spec (cached in it), takes the element-wise kernel whenever
//! it applies, then the reduction or the row kernel, and otherwise chooses GEMM when the planned
//! `m·n·k` reaches [`GEMM_MIN_WORK`], or [`BATCHED_GEMM_MIN_WORK`] for a batch of GEMMs,
//! and else the lanes when they apply, the direct loop otherwise.
//!
//! Costs: the direct loop is `O(Π sizes)`; the GEMM path adds `O(|a| + |b| + |out|)` of
//! packing.

use std::borrow::Cow;
use std::sync::{Arc, OnceLock};

use smallvec::SmallVec;

use crate::buffer::{overwritten, recycle, zeroed};
use crate::elem::Elem;
use crate::elementwise::ElementwisePlan;
use crate::error::{EinsumError, EinsumResult};
use crate::gemm_loop::{MatrixView, batch_chunks, chunk_lead, matrix_view, pack_threads, spread_loop};
use crate::lanes::LanesPlan;
use crate::permute::{Group, loop_strides, permute, permute_on, shape_of};
use crate::reduce::{ReducePlan, RowDotPlan};
use crate::small_gemm::{Gathered, gather_ns, to_pack};
use crate::tensor::{Tensor, checked_len};

/// Below this `m·n·k` (per GEMM call) the direct loop is used instead of GEMM. Tuned with
/// the `steps` example: at χ = 8 an MPS step (`m·n·k` = 1024) takes 1.5 µs in the direct
/// loop and 0.6 µs through faer; at 64 the χ = 4 steps get slower.
pub const GEMM_MIN_WORK: usize = 512;

/// Below this `m·n·k` per GEMM call, a batch of GEMMs (two or more, each with `m, n ≥ 2`)
/// runs in the direct loop instead. Lower than [`GEMM_MIN_WORK`] because the direct loop
/// over a batch has short, strided inner loops (about 1 ns per multiply-add on lm_batch's
/// steps) while faer's tiny GEMMs cost 50 to 100 ns per call: 1996 GEMMs of 16×4×4 took
/// 0.19 ms against 0.51 ms, of 4×4×4 0.10 against 0.19; at 3×3×3 the two are even, and
/// matrix-vector batches (`m = 1`) stay faster in the loop.
pub const BATCHED_GEMM_MIN_WORK: usize = 64;

type Labels = Box<[u32]>;

/// Relabels to `0..n` in order of first appearance, returning the new lists and sizes.
fn canonical(lists: &[&[u32]], sizes: &[usize]) -> EinsumResult<(Vec<Labels>, Box<[usize]>)> {
    let mut map: SmallVec<[u32; 16]> = SmallVec::from_elem(u32::MAX, sizes.len());
    let mut new_sizes = Vec::new();
    let mut out = Vec::with_capacity(lists.len());
    for l in lists {
        let mut nl = Vec::with_capacity(l.len());
        for &c in l.iter() {
            let slot = map.get_mut(c as usize).ok_or_else(|| {
                EinsumError::Shape(format!("label {c} has no size (only {} sizes given)", sizes.len()))
            })?;
            if *slot == u32::MAX {
                *slot = new_sizes.len() as u32;
                new_sizes.push(sizes[c as usize]);
            }
            nl.push(*slot);
        }
        out.push(nl.into_boxed_slice());
    }
    Ok((out, new_sizes.into_boxed_slice()))
}

fn fmt_labels(f: &mut std::fmt::Formatter<'_>, l: &[u32]) -> std::fmt::Result {
    for &c in l {
        // Labels print as letters a, b, ... (then as numbers in brackets).
        match char::from_u32('a' as u32 + c).filter(|_| c < 26) {
            Some(ch) => write!(f, "{ch}")?,
            None => write!(f, "[{c}]")?,
        }
    }
    Ok(())
}

/// Product of sizes as `u64`, saturating.
fn work(sizes: &[usize]) -> u64 {
    sizes.iter().fold(1u64, |acc, &d| acc.saturating_mul(d as u64))
}

/// A binary contraction `out = Σ a·b` on numeric labels, in the general form: repeated
/// labels in an operand read a diagonal, repeated output labels write one, output labels in
/// neither operand broadcast, operand labels not in the output are summed. The form is
/// closed under transposition (the transpose with respect to `a` is `out, b -> a`), which
/// is why the AD rules use it.
///
/// ```
/// use einsum::ContractSpec;
/// // "ij,jk->ik" with i = 2, j = 3, k = 4
/// let s = ContractSpec::new(&[0, 1], &[1, 2], &[0, 2], &[2, 3, 4]).unwrap();
/// assert_eq!(s.out_shape(), vec![2, 4]);
/// // The adjoint with respect to `a`: `c ↦ Σ c·conj(b)`.
/// assert_eq!(s.transpose_a().to_string(), "ab,cb*->ac");
/// ```
#[derive(Clone)]
pub struct ContractSpec {
    a: Labels,
    b: Labels,
    out: Labels,
    sizes: Box<[usize]>,
    /// Whether `a` and `b` enter conjugated.
    conj: [bool; 2],
    /// The automatic kernel choice, planned on first evaluation (not part of equality).
    plan: OnceLock<Arc<KernelPlan>>,
}

impl PartialEq for ContractSpec {
    fn eq(&self, o: &Self) -> bool {
        (&self.a, &self.b, &self.out, &self.sizes, self.conj) == (&o.a, &o.b, &o.out, &o.sizes, o.conj)
    }
}

impl Eq for ContractSpec {}

impl std::hash::Hash for ContractSpec {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        (&self.a, &self.b, &self.out, &self.sizes, self.conj).hash(h);
    }
}

impl ContractSpec {
    /// A spec from label lists and the size of each label (`sizes[label]`). Labels are
    /// renumbered by first appearance, so specs that differ only in naming are equal.
    pub fn new(a: &[u32], b: &[u32], out: &[u32], sizes: &[usize]) -> EinsumResult<Self> {
        let (mut l, sizes) = canonical(&[a, b, out], sizes)?;
        let out = l.pop().expect("three lists");
        let b = l.pop().expect("three lists");
        let a = l.pop().expect("three lists");
        let spec = ContractSpec { a, b, out, sizes, conj: [false; 2], plan: OnceLock::new() };
        for shape in [spec.a_shape(), spec.b_shape(), spec.out_shape()] {
            checked_len(&shape).ok_or_else(|| EinsumError::Shape(format!("shape {shape:?} overflows usize")))?;
        }
        Ok(spec)
    }

    /// Labels of `a`.
    pub fn a_labels(&self) -> &[u32] {
        &self.a
    }
    /// Labels of `b`.
    pub fn b_labels(&self) -> &[u32] {
        &self.b
    }
    /// Labels of the output.
    pub fn out_labels(&self) -> &[u32] {
        &self.out
    }
    /// Size of each label.
    pub fn sizes(&self) -> &[usize] {
        &self.sizes
    }
    /// The shape `a` must have.
    pub fn a_shape(&self) -> Vec<usize> {
        shape_of(&self.a, &self.sizes)
    }
    /// The shape `b` must have.
    pub fn b_shape(&self) -> Vec<usize> {
        shape_of(&self.b, &self.sizes)
    }
    /// The output shape.
    pub fn out_shape(&self) -> Vec<usize> {
        shape_of(&self.out, &self.sizes)
    }
    /// Multiply-adds of the direct loop: the product of all label sizes (saturating).
    pub fn multiply_adds(&self) -> u64 {
        work(&self.sizes)
    }

    /// The same contraction with `a` and/or `b` conjugated: `Σ op(a)·op(b)`.
    pub fn with_conj(mut self, conj: [bool; 2]) -> Self {
        self.conj = conj;
        self.plan = OnceLock::new();
        self
    }
    /// Whether `a` and `b` enter conjugated.
    pub fn conj(&self) -> [bool; 2] {
        self.conj
    }
    /// The spec of the adjoint with respect to `a` (for `⟨x, y⟩ = Re Σ conj(x)·y`), applied
    /// to `(cotangent, b)`: `out, b -> a`. For `t ↦ Σ t·b` it is `c ↦ Σ c·conj(b)`; for
    /// `t ↦ Σ conj(t)·b` it is `c ↦ Σ conj(c)·b`.
    pub fn transpose_a(&self) -> ContractSpec {
        let [ca, cb] = self.conj;
        let spec = ContractSpec::new(&self.out, &self.b, &self.a, &self.sizes).expect("a valid spec transposes");
        spec.with_conj([ca, cb ^ !ca])
    }
    /// The spec of the adjoint with respect to `b`, applied to `(a, cotangent)`:
    /// `a, out -> b`, conjugations as in [`ContractSpec::transpose_a`].
    pub fn transpose_b(&self) -> ContractSpec {
        let [ca, cb] = self.conj;
        let spec = ContractSpec::new(&self.a, &self.out, &self.b, &self.sizes).expect("a valid spec transposes");
        spec.with_conj([ca ^ !cb, cb])
    }
}

impl std::fmt::Display for ContractSpec {
    /// `ab,bc->ac`; a conjugated operand is marked with `*` (`ab*,bc->ac`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let star = |f: &mut std::fmt::Formatter<'_>, c: bool| if c { f.write_str("*") } else { Ok(()) };
        fmt_labels(f, &self.a)?;
        star(f, self.conj[0])?;
        f.write_str(",")?;
        fmt_labels(f, &self.b)?;
        star(f, self.conj[1])?;
        f.write_str("->")?;
        fmt_labels(f, &self.out)
    }
}

impl std::fmt::Debug for ContractSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{self} {:?}", self.sizes)
    }
}

/// A one-operand einsum on numeric labels: permute, sum over axes, broadcast, diagonal.
///
/// ```
/// use einsum::UnarySpec;
/// let s = UnarySpec::sum_axes(&[2, 3, 4], &[1]).unwrap();
/// assert_eq!(s.out_shape(), vec![2, 4]);
/// assert_eq!(s.transpose().out_shape(), vec![2, 3, 4]);
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct UnarySpec {
    a: Labels,
    out: Labels,
    sizes: Box<[usize]>,
}

impl UnarySpec {
    /// A spec from label lists and sizes (renumbered like [`ContractSpec::new`]).
    pub fn new(a: &[u32], out: &[u32], sizes: &[usize]) -> EinsumResult<Self> {
        let (mut l, sizes) = canonical(&[a, out], sizes)?;
        let out = l.pop().expect("two lists");
        let a = l.pop().expect("two lists");
        let spec = UnarySpec { a, out, sizes };
        for shape in [spec.a_shape(), spec.out_shape()] {
            checked_len(&shape).ok_or_else(|| EinsumError::Shape(format!("shape {shape:?} overflows usize")))?;
        }
        Ok(spec)
    }

    /// Axes permuted: output axis `i` is input axis `perm[i]`.
    pub fn permute(shape: &[usize], perm: &[usize]) -> EinsumResult<Self> {
        let mut seen = vec![false; shape.len()];
        if perm.len() != shape.len() || perm.iter().any(|&p| p >= shape.len() || std::mem::replace(&mut seen[p], true))
        {
            return Err(EinsumError::Shape(format!("{perm:?} is not a permutation of {} axes", shape.len())));
        }
        let a: Vec<u32> = (0..shape.len() as u32).collect();
        let out: Vec<u32> = perm.iter().map(|&p| p as u32).collect();
        UnarySpec::new(&a, &out, shape)
    }

    /// The sum over `axes` (distinct, in range).
    pub fn sum_axes(shape: &[usize], axes: &[usize]) -> EinsumResult<Self> {
        let mut summed = vec![false; shape.len()];
        for &x in axes {
            if x >= shape.len() || std::mem::replace(&mut summed[x], true) {
                return Err(EinsumError::Shape(format!("bad axes {axes:?} to sum for shape {shape:?}")));
            }
        }
        let a: Vec<u32> = (0..shape.len() as u32).collect();
        let out: Vec<u32> = a.iter().copied().filter(|&i| !summed[i as usize]).collect();
        UnarySpec::new(&a, &out, shape)
    }

    /// Broadcast to `out_shape`: input axis `i` becomes output axis `axes[i]` (increasing),
    /// with equal sizes; the other output axes are new.
    pub fn broadcast(shape: &[usize], out_shape: &[usize], axes: &[usize]) -> EinsumResult<Self> {
        let ok = axes.len() == shape.len()
            && axes.windows(2).all(|w| w[0] < w[1])
            && axes.iter().zip(shape).all(|(&x, &d)| out_shape.get(x) == Some(&d));
        if !ok {
            return Err(EinsumError::Shape(format!(
                "cannot broadcast shape {shape:?} to {out_shape:?} along axes {axes:?}"
            )));
        }
        let out: Vec<u32> = (0..out_shape.len() as u32).collect();
        let a: Vec<u32> = axes.iter().map(|&x| x as u32).collect();
        UnarySpec::new(&a, &out, out_shape)
    }

    /// Labels of the operand.
    pub fn a_labels(&self) -> &[u32] {
        &self.a
    }
    /// Labels of the output.
    pub fn out_labels(&self) -> &[u32] {
        &self.out
    }
    /// Size of each label.
    pub fn sizes(&self) -> &[usize] {
        &self.sizes
    }
    /// The shape the operand must have.
    pub fn a_shape(&self) -> Vec<usize> {
        shape_of(&self.a, &self.sizes)
    }
    /// The output shape.
    pub fn out_shape(&self) -> Vec<usize> {
        shape_of(&self.out, &self.sizes)
    }
    /// The transpose (`out -> a`): sum and broadcast swap, a permutation inverts.
    pub fn transpose(&self) -> UnarySpec {
        UnarySpec::new(&self.out, &self.a, &self.sizes).expect("a valid spec transposes")
    }
    /// Multiply-adds of the loop (the product of all label sizes).
    pub fn multiply_adds(&self) -> u64 {
        work(&self.sizes)
    }
}

impl std::fmt::Display for UnarySpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        fmt_labels(f, &self.a)?;
        f.write_str("->")?;
        fmt_labels(f, &self.out)
    }
}

impl std::fmt::Debug for UnarySpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{self} {:?}", self.sizes)
    }
}

/// Loop order: the output's distinct labels in order, then every other label in `rest`.
fn loop_order(out: &[u32], rest: &[&[u32]]) -> SmallVec<[u32; 8]> {
    let mut order: SmallVec<[u32; 8]> = SmallVec::new();
    for &c in out.iter().chain(rest.iter().flat_map(|l| l.iter())) {
        if !order.contains(&c) {
            order.push(c);
        }
    }
    order
}

/// The direct loop's order: [`loop_order`], with the longest label moved innermost when
/// `loop_order`'s innermost one is short. The loop pays its index bookkeeping once per
/// pass of the innermost loop, so a short one (a contraction of seven under a batch label
/// of thousands) costs several times a long one; an innermost loop of
/// [`DIRECT_SHORT_LOOP`] or more stays, as it may be a sum kept in a register over
/// contiguous operands.
fn direct_order(out: &[u32], rest: &[&[u32]], sizes: &[usize]) -> SmallVec<[u32; 8]> {
    let mut order = loop_order(out, rest);
    let size = |c: u32| sizes[c as usize];
    if order.last().is_some_and(|&c| size(c) < DIRECT_SHORT_LOOP)
        && let Some(longest) = (0..order.len()).max_by_key(|&i| (size(order[i]), i))
    {
        let label = order.remove(longest);
        order.push(label);
    }
    order
}

/// Innermost loops shorter than this make [`direct_order`] move the longest label inside.
const DIRECT_SHORT_LOOP: usize = 16;

/// `out[po] += Σ a[pa]·b[pb]` over the multi-index space `sizes`, with per-label strides.
///
/// The innermost pass's form depends only on the innermost label's length and strides, so
/// it is chosen here, once, and each form runs under its own copy of the odometer
/// ([`outer_loop`]): chosen per pass, the dispatch cost small steps (passes of 1 to 8
/// elements) about as much as their multiply-adds. Passes of up to 8 index: there the
/// iterators' setup costs more than the bounds checks they save. `step_by` takes no
/// stride 0, so a broadcast operand is read once.
#[allow(clippy::too_many_arguments)]
fn direct_loop<T: Elem>(sizes: &[usize], a: &[T], sa: &[usize], b: &[T], sb: &[usize], out: &mut [T], so: &[usize]) {
    fn strided<T>(x: &[T], s: usize, m: usize) -> std::iter::Take<std::iter::StepBy<std::slice::Iter<'_, T>>> {
        x.iter().step_by(s.max(1)).take(m)
    }
    if sizes.contains(&0) {
        return;
    }
    let Some(last) = sizes.len().checked_sub(1) else {
        out[0] += a[0] * b[0];
        return;
    };
    let (m, ia, ib, io) = (sizes[last], sa[last], sb[last], so[last]);
    let at = (&sizes[..last], [sa, sb, so], m);
    match (io, ia, ib) {
        (0, _, _) if m <= 8 => outer_loop(at, |pa, pb, po| {
            let mut acc = T::zero();
            for i in 0..m {
                acc += a[pa + i * ia] * b[pb + i * ib];
            }
            out[po] += acc;
        }),
        _ if m <= 8 => outer_loop(at, |pa, pb, po| {
            for i in 0..m {
                out[po + i * io] += a[pa + i * ia] * b[pb + i * ib];
            }
        }),
        (0, 0, 0) => outer_loop(at, |pa, pb, po| out[po] += (0..m).fold(T::zero(), |acc, _| acc + a[pa] * b[pb])),
        (0, 0, _) => {
            outer_loop(at, |pa, pb, po| out[po] += strided(&b[pb..], ib, m).fold(T::zero(), |acc, &y| acc + a[pa] * y))
        }
        (0, _, 0) => {
            outer_loop(at, |pa, pb, po| out[po] += strided(&a[pa..], ia, m).fold(T::zero(), |acc, &x| acc + x * b[pb]))
        }
        (0, _, _) => outer_loop(at, |pa, pb, po| {
            out[po] +=
                strided(&a[pa..], ia, m).zip(strided(&b[pb..], ib, m)).fold(T::zero(), |acc, (&x, &y)| acc + x * y);
        }),
        (_, 0, 0) => {
            outer_loop(at, |pa, pb, po| out[po..].iter_mut().step_by(io).take(m).for_each(|o| *o += a[pa] * b[pb]))
        }
        (_, 0, _) => outer_loop(at, |pa, pb, po| {
            out[po..].iter_mut().step_by(io).zip(strided(&b[pb..], ib, m)).for_each(|(o, &y)| *o += a[pa] * y);
        }),
        (_, _, 0) => outer_loop(at, |pa, pb, po| {
            out[po..].iter_mut().step_by(io).zip(strided(&a[pa..], ia, m)).for_each(|(o, &x)| *o += x * b[pb]);
        }),
        _ => outer_loop(at, |pa, pb, po| {
            let (x, y) = (strided(&a[pa..], ia, m), strided(&b[pb..], ib, m));
            out[po..].iter_mut().step_by(io).zip(x).zip(y).for_each(|((o, &x), &y)| *o += x * y);
        }),
    }
}

/// The direct loop's labels but the innermost (`sizes`, with the strides of `a`, `b` and the
/// output, which may be longer): an odometer calling `pass(pa, pb, po)` at each position,
/// the last label fastest. Each pass is `m` multiply-adds; the stop flag is read every
/// [`crate::stop::DIRECT_STOP_CHECK`] of them (a whole number of passes, at least one).
#[inline(always)]
fn outer_loop((sizes, [sa, sb, so], m): (&[usize], [&[usize]; 3], usize), mut pass: impl FnMut(usize, usize, usize)) {
    let per_check = (crate::stop::DIRECT_STOP_CHECK / m).max(1);
    let mut until_check = per_check;
    // On the stack for up to 8 labels: a `SmallVec` cost a hundred instructions a call to
    // set up, more than a small step's multiply-adds.
    let (mut on_stack, mut on_heap) = ([0usize; 8], Vec::new());
    let idx: &mut [usize] = if sizes.len() <= 8 {
        &mut on_stack[..sizes.len()]
    } else {
        on_heap.resize(sizes.len(), 0);
        &mut on_heap
    };
    let (mut pa, mut pb, mut po) = (0usize, 0usize, 0usize);
    loop {
        until_check -= 1;
        if until_check == 0 {
            until_check = per_check;
            if crate::stop::requested() {
                return; // the evaluation is ending with an error; the output is discarded
            }
        }
        pass(pa, pb, po);
        let mut k = sizes.len();
        loop {
            if k == 0 {
                return;
            }
            k -= 1;
            idx[k] += 1;
            (pa, pb, po) = (pa + sa[k], pb + sb[k], po + so[k]);
            if idx[k] < sizes[k] {
                break;
            }
            (pa, pb, po) = (pa - sa[k] * sizes[k], pb - sb[k] * sizes[k], po - so[k] * sizes[k]);
            idx[k] = 0;
        }
    }
}

/// The direct kernel for one or two operands (`b = None` is the unary case).
fn direct<T: Elem>(sizes: &[usize], a: (&[T], &[u32]), b: Option<(&[T], &[u32])>, out_labels: &[u32]) -> Vec<T> {
    let distinct = |l: &[u32]| loop_order(l, &[]).len() == l.len();
    if b.is_none() && a.1.len() == out_labels.len() && distinct(a.1) && a.1.iter().all(|c| out_labels.contains(c)) {
        return permute(sizes, a.0, a.1, out_labels);
    }
    let one = [T::one()];
    let (b_data, b_labels): (&[T], &[u32]) = b.unwrap_or((&one, &[]));
    let order = direct_order(out_labels, &[a.1, b_labels], sizes);
    let loop_sizes: SmallVec<[usize; 8]> = order.iter().map(|&c| sizes[c as usize]).collect();
    let out_shape = shape_of(out_labels, sizes);
    let mut out = zeroed(out_shape.iter().product());
    let sa = loop_strides(a.1, &shape_of(a.1, sizes), &order);
    let sb = loop_strides(b_labels, &shape_of(b_labels, sizes), &order);
    let so = loop_strides(out_labels, &out_shape, &order);
    direct_loop(&loop_sizes, a.0, &sa, b_data, &sb, &mut out, &so);
    out
}

/// `data` (labels `labels`) as a contiguous tensor with labels `target` (distinct, a
/// subset of `labels`); other labels summed.
fn pack<T: Elem>(data: &[T], labels: &[u32], target: &[u32], sizes: &[usize]) -> Vec<T> {
    direct(sizes, (data, labels), None, target)
}

/// How the GEMM path runs a contraction: the labels looped over (batch labels, and others
/// moved out of the matrices so that the largest tensor needs no copy) and the orders of
/// the fused groups.
struct GemmPlan {
    looped: Group,
    left: Group,
    contracted: Group,
    right: Group,
}

impl GemmPlan {
    fn dims(&self, sizes: &[usize]) -> [usize; 4] {
        let p = |g: &[u32]| g.iter().map(|&c| sizes[c as usize]).product::<usize>();
        [p(&self.looped), p(&self.left), p(&self.right), p(&self.contracted)]
    }
}

/// Groups for a tensor with distinct labels `seq` to be read or written in place: a group
/// must be a run of consecutive axes, and one must end at the innermost axis (unit
/// stride). So the first group is the longest run of one role ending at the innermost
/// axis, the second the run of the other role (`x` or not `x`, batch labels excluded) with
/// the most elements; every other label is looped. `None` if the innermost label is a batch
/// label. Returns the extra looped labels and the `x` and `y` groups.
fn split(seq: &[u32], batch: &[u32], is_x: impl Fn(u32) -> bool, sizes: &[usize]) -> Option<(Group, Group, Group)> {
    let role = |c: u32| {
        if batch.contains(&c) {
            0
        } else if is_x(c) {
            1
        } else {
            2
        }
    };
    let &inner = seq.last()?;
    let r = role(inner);
    if r == 0 {
        return None;
    }
    let mut start = seq.len() - 1;
    while start > 0 && role(seq[start - 1]) == r {
        start -= 1;
    }
    let first: Group = seq[start..].iter().copied().collect();
    let mut second = Group::new();
    let mut best = 0;
    let mut i = 0;
    while i < start {
        let mut j = i;
        while j < start && role(seq[j]) == 3 - r {
            j += 1;
        }
        let elements: usize = seq[i..j].iter().map(|&c| sizes[c as usize]).product();
        if j > i && elements > best {
            best = elements;
            second = seq[i..j].iter().copied().collect();
        }
        i = j.max(i + 1);
    }
    let looped = seq.iter().copied().filter(|&c| role(c) != 0 && !first.contains(&c) && !second.contains(&c)).collect();
    Some(if r == 1 { (looped, first, second) } else { (looped, second, first) })
}

/// Plans the GEMM path. With `anchor`, the largest tensor that can be read or written in
/// place fixes the looped labels and its groups' orders; without, only batch labels are
/// looped and groups follow `a` (left), `b` (right) and the larger operand (contracted).
fn plan(spec: &ContractSpec, a_len: usize, b_len: usize, anchor: bool) -> GemmPlan {
    let sizes = spec.sizes();
    let has = |l: &[u32], c: u32| l.contains(&c);
    let distinct = |l: &[u32]| loop_order(l, &[]);
    let (ua, ub, uo) = (distinct(&spec.a), distinct(&spec.b), distinct(&spec.out));
    let batch: Group = uo.iter().copied().filter(|&c| has(&ua, c) && has(&ub, c)).collect();
    let role = |from: &[u32], f: &dyn Fn(u32) -> bool| -> Group { from.iter().copied().filter(|&c| f(c)).collect() };
    let is_left = |c: u32| has(&ua, c) && has(&uo, c) && !has(&ub, c);
    let is_right = |c: u32| has(&ub, c) && has(&uo, c) && !has(&ua, c);
    let is_contracted = |c: u32| has(&ua, c) && has(&ub, c) && !has(&uo, c);
    let out_len: usize = spec.out_shape().iter().product();
    let major = if a_len >= b_len { &ua } else { &ub };
    let default = GemmPlan {
        looped: batch.clone(),
        left: role(&ua, &is_left),
        contracted: role(major, &is_contracted),
        right: role(&ub, &is_right),
    };
    if !anchor {
        return default;
    }
    // A tensor can be read or written in place only if its labels are distinct and each
    // has a role (no label summed in one operand alone, no broadcast).
    let plain = |l: &[u32], u: &[u32], roles: &dyn Fn(u32) -> bool| l.len() == u.len() && u.iter().all(|&c| roles(c));
    let a_ok = plain(&spec.a, &ua, &|c| batch.contains(&c) || is_left(c) || is_contracted(c));
    let b_ok = plain(&spec.b, &ub, &|c| batch.contains(&c) || is_right(c) || is_contracted(c));
    let o_ok = plain(&spec.out, &uo, &|c| batch.contains(&c) || is_left(c) || is_right(c));
    let mut best = (default.cost(spec, a_len, b_len), default);
    for which in 0..3 {
        let r = match which {
            0 if a_ok => split(&spec.a, &batch, is_left, sizes).map(|(l, x, y)| {
                let right = if b_len >= out_len { role(&ub, &is_right) } else { role(&uo, &is_right) };
                (l, x, y, right)
            }),
            1 if b_ok => split(&spec.b, &batch, is_contracted, sizes).map(|(l, x, y)| {
                let left = if a_len >= out_len { role(&ua, &is_left) } else { role(&uo, &is_left) };
                (l, left, x, y)
            }),
            2 if o_ok => {
                split(&spec.out, &batch, is_left, sizes).map(|(l, x, y)| (l, x, role(major, &is_contracted), y))
            }
            _ => None,
        };
        if let Some((extra, g1, g2, g3)) = r {
            let mut looped = batch.clone();
            looped.extend(extra);
            // Groups without the looped labels, in the chosen orders.
            let keep = |g: Group| -> Group { g.into_iter().filter(|c| !looped.contains(c)).collect() };
            let (left, contracted, right) = match which {
                0 => (g1, g2, keep(g3)),
                1 => (keep(g1), g2, g3),
                _ => (g1, keep(g2), g3),
            };
            let p = GemmPlan { looped, left, contracted, right };
            let cost = p.cost(spec, a_len, b_len);
            if cost < best.0 {
                best = (cost, p);
            }
        }
    }
    best.1
}

impl GemmPlan {
    /// Estimated nanoseconds: copies of the tensors that cannot be used in place (about
    /// 2 ns per element), a fixed cost per GEMM call, one nanosecond per element of each
    /// call's output block (read and written by every call), and the multiply-adds at a
    /// rate that falls when a matrix dimension is small (100 GFLOP/s when all are large).
    fn cost(&self, spec: &ContractSpec, a_len: usize, b_len: usize) -> f64 {
        let sizes = spec.sizes();
        let [nl, m, n, k] = self.dims(sizes).map(|d| d as f64);
        let out_len = spec.out_shape().iter().product::<usize>() as f64;
        // Each matrix's strides as the loop passes them: a view's, or (`None`) a packed
        // copy's, row-major.
        let view = |labels: &[u32], rows: &[u32], cols: &[u32]| {
            matrix_view(labels, sizes, &self.looped, rows, cols).map(|v| v.strides)
        };
        let [sa, sb, sc] = [
            view(&spec.a, &self.left, &self.contracted),
            view(&spec.b, &self.contracted, &self.right),
            view(&spec.out, &self.left, &self.right),
        ];
        let copies = [(sa, a_len as f64), (sb, b_len as f64), (sc, 2.0 * out_len)]
            .iter()
            .map(|&(s, len)| if s.is_none() { len } else { 0.0 })
            .sum::<f64>();
        let small = m.min(n).min(k);
        let rate = 100.0 * small / (small + 16.0);
        // Every call reads and writes its block of `c` once: a few calls of a small `k`
        // over a large `c` are bound by that traffic, not by the multiply-adds.
        let base = 2.0 * copies + 300.0 * nl + nl * m * n + 2.0 * nl * m * n * k / rate;
        // Tiny products run in the inline kernel, which reads a gathered row (`b`'s
        // columns, or `a`'s rows for a column-major `c`, not contiguous) at a price per
        // multiply-add (`small_gemm::gather_ns`): the rates above rate a transposed view
        // like a plain one. Priced as gathers even where the GEMM path packs the operand
        // instead (`small_gemm::to_pack`): see `gather_ns`.
        let (sa, sb, sc) =
            (sa.unwrap_or([k as usize, 1]), sb.unwrap_or([n as usize, 1]), sc.unwrap_or([n as usize, 1]));
        base + gather_ns(self.dims(sizes), [sa, sb, sc], [a_len, b_len])
    }
}

/// The GEMM path for a plan (see the [module docs](self)).
fn gemm_path<T: Elem>(spec: &ContractSpec, a: &Tensor<T>, b: &Tensor<T>, p: &GemmPlan) -> Tensor<T> {
    let sizes = spec.sizes();
    let out_shape = spec.out_shape();
    let [nl, m, n, k] = p.dims(sizes);
    let out_len: usize = out_shape.iter().product();
    if nl == 0 || m == 0 || n == 0 || k == 0 {
        return Tensor::from_parts(&out_shape, zeroed(out_len));
    }
    // The loop's order: the plan's, or with a label of the result moved to the front when
    // that lets a pool's threads share the loop (`gemm_loop::chunk_lead`); the result is
    // then written in that order and permuted.
    let mut looped = p.looped.clone();
    let reordered = {
        let loop_sizes: SmallVec<[usize; 4]> = looped.iter().map(|&l| sizes[l as usize]).collect();
        let chunked_in_place = matrix_view(&spec.out, sizes, &looped, &p.left, &p.right)
            .is_some_and(|v| batch_chunks(&loop_sizes, &v, out_len, [m, n, k]).is_some());
        let in_c: SmallVec<[bool; 4]> = looped.iter().map(|c| spec.out.contains(c)).collect();
        match chunk_lead(&loop_sizes, &in_c, out_len, [m, n, k]).filter(|_| !chunked_in_place) {
            Some(lead) => {
                let l = looped.remove(lead);
                looped.insert(0, l);
                true
            }
            None => false,
        }
    };
    let looped = &looped[..];
    let cat = |l: &[u32], x: &[&[u32]]| -> Group {
        looped.iter().copied().filter(|c| l.contains(c)).chain(x.iter().flat_map(|g| g.iter().copied())).collect()
    };
    // Views without copies where the layouts allow, packed copies otherwise.
    fn operand<'t, T: Elem>(
        t: &'t Tensor<T>,
        labels: &[u32],
        sizes: &[usize],
        looped: &[u32],
        [rows, cols]: [&[u32]; 2],
        macs: usize,
    ) -> (Cow<'t, [T]>, MatrixView) {
        match matrix_view(labels, sizes, looped, rows, cols) {
            Some(v) => (Cow::Borrowed(t.data()), v),
            None => {
                let mut l: Group = looped.iter().copied().filter(|c| labels.contains(c)).collect();
                l.extend(rows.iter().chain(cols).copied());
                let v = matrix_view(&l, sizes, looped, rows, cols).expect("packed operands are views");
                // A permutation (no label summed) runs on the threads the GEMMs will.
                let threads = pack_threads(t.data().len(), macs);
                if threads > 1 && l.len() == labels.len() {
                    return (Cow::Owned(permute_on(sizes, t.data(), labels, &l, threads)), v);
                }
                (Cow::Owned(pack(t.data(), labels, &l, sizes)), v)
            }
        }
    }
    // A gathered operand of the inline kernel is packed once instead (`small_gemm::to_pack`),
    // `a` column-major (its left labels innermost).
    let packed = |t: &Tensor<T>, labels: &[u32], [rows, cols]: [&[u32]; 2], col: bool| {
        let order = if col { cat(labels, &[cols, rows]) } else { cat(labels, &[rows, cols]) };
        let v = matrix_view(&order, sizes, looped, rows, cols).expect("packed operands are views");
        (Cow::Owned(pack(t.data(), labels, &order, sizes)), v)
    };
    let macs = [nl, m, n, k].iter().fold(1usize, |w, &d| w.saturating_mul(d));
    let (mut a_data, mut a_view) = operand(a, &spec.a, sizes, looped, [&p.left, &p.contracted], macs);
    let (mut b_data, mut b_view) = operand(b, &spec.b, sizes, looped, [&p.contracted, &p.right], macs);
    // The result: the output itself when its layout allows, else a contiguous
    // `[looped labels of the output, left, right]` tensor permuted or expanded afterwards.
    let core = cat(&spec.out, &[&p.left, &p.right]);
    let (in_place, c_view) = match matrix_view(&spec.out, sizes, looped, &p.left, &p.right).filter(|_| !reordered) {
        Some(v) => (true, v),
        None => (false, matrix_view(&core, sizes, looped, &p.left, &p.right).expect("contiguous results are views")),
    };
    let lens = [a.data().len(), b.data().len()];
    match to_pack([nl, m, n, k], [a_view.strides, b_view.strides, c_view.strides], lens) {
        Some(Gathered::B) => (b_data, b_view) = packed(b, &spec.b, [&p.contracted, &p.right], false),
        Some(Gathered::A) => (a_data, a_view) = packed(a, &spec.a, [&p.left, &p.contracted], true),
        None => {}
    }
    let c_len = if in_place { out_len } else { shape_of(&core, sizes).iter().product() };
    // The GEMMs' blocks tile `c` (its labels are the looped ones it has, left and right),
    // so it needs no zeroing: a block is replaced on its first visit and accumulated into
    // on later ones, which happen only while a looped label absent from `c` (contracted)
    // moves on.
    let mut c = overwritten(c_len);
    let loop_sizes: SmallVec<[usize; 4]> = looped.iter().map(|&l| sizes[l as usize]).collect();
    let operands = [(&a_data[..], &a_view), (&b_data[..], &b_view)];
    let c_labels = if in_place { &spec.out[..] } else { &core[..] };
    let loops = (&loop_sizes[..], looped);
    spread_loop(spec.conj, [m, n, k], loops, operands, (&mut c, &c_view, c_labels), sizes, [&p.left, &p.right]);
    for data in [a_data, b_data] {
        if let Cow::Owned(v) = data {
            recycle(v);
        }
    }
    if in_place {
        Tensor::from_parts(&out_shape, c)
    } else {
        let out = direct(sizes, (&c, &core), None, &spec.out);
        recycle(c);
        Tensor::from_parts(&out_shape, out)
    }
}

/// `data`, conjugated if `conj` (and complex).
fn conjugated<T: Elem>(data: &[T], conj: bool) -> Cow<'_, [T]> {
    if conj && T::IS_COMPLEX { Cow::Owned(data.iter().map(|x| x.conj()).collect()) } else { Cow::Borrowed(data) }
}

fn check_shape<T: Elem>(what: &str, t: &Tensor<T>, labels: &[u32], sizes: &[usize], spec: &dyn std::fmt::Debug) {
    let ok = t.rank() == labels.len() && t.shape().iter().zip(labels).all(|(&d, &c)| d == sizes[c as usize]);
    assert!(
        ok,
        "{what} of shape {:?} given to `{spec:?}`, which needs {:?} (graphs must be built with matching shapes)",
        t.shape(),
        shape_of(labels, sizes)
    );
}

/// What [`contract`] runs for a spec, planned once.
enum KernelPlan {
    /// The direct loop: loop sizes and per-label strides of `a`, `b` and the output.
    Direct {
        sizes: SmallVec<[usize; 8]>,
        strides: [SmallVec<[usize; 8]>; 3],
        out_len: usize,
    },
    /// Each output element one product: no sum, no diagonal (`elementwise.rs`).
    Elementwise(ElementwisePlan),
    Gemm(GemmPlan),
    /// The direct loop over contiguous lanes of a long label (`lanes.rs`).
    Lanes(LanesPlan),
    /// A few output elements, long sums (`reduce.rs`).
    Reduce(ReducePlan),
    /// One dot product of contiguous runs per output element (`reduce.rs`).
    RowDot(RowDotPlan),
}

impl KernelPlan {
    fn direct(spec: &ContractSpec) -> Self {
        let mut order = direct_order(&spec.out, &[&spec.a, &spec.b], spec.sizes());
        // A label of size 1 moves no offset; the loop leaves it out rather than carry
        // through it after every pass (an MPS of bond dimension 1 has two per step).
        order.retain(|c| spec.sizes[*c as usize] != 1);
        let sizes = order.iter().map(|&c| spec.sizes[c as usize]).collect();
        let out_shape = spec.out_shape();
        let strides = [
            loop_strides(&spec.a, &spec.a_shape(), &order),
            loop_strides(&spec.b, &spec.b_shape(), &order),
            loop_strides(&spec.out, &out_shape, &order),
        ];
        KernelPlan::Direct { sizes, strides, out_len: out_shape.iter().product() }
    }

    fn new(spec: &ContractSpec, choice: KernelChoice) -> Self {
        // A few output elements over long sums: each operand read in place, the sums
        // formed on the pool's threads (`reduce.rs`).
        if choice == KernelChoice::Auto
            && let Some(p) = ReducePlan::new(&spec.a, &spec.b, &spec.out, &spec.sizes)
        {
            return KernelPlan::Reduce(p);
        }
        if choice == KernelChoice::Auto
            && let Some(p) = RowDotPlan::new(&spec.a, &spec.b, &spec.out, &spec.sizes)
        {
            return KernelPlan::RowDot(p);
        }
        Self::new_summing(spec, choice)
    }

    /// [`KernelPlan::new`] but for the reduction kernel.
    fn new_summing(spec: &ContractSpec, choice: KernelChoice) -> Self {
        let (a_len, b_len) = (spec.a_shape().iter().product(), spec.b_shape().iter().product());
        let work = |p: &GemmPlan| {
            let [_, m, n, k] = p.dims(spec.sizes());
            m.saturating_mul(n).saturating_mul(k)
        };
        // A contraction that sums nothing is element-wise, however large: a GEMM of `k = 1`
        // per loop entry or the accumulating direct loop would only add memory traffic.
        if choice == KernelChoice::Auto
            && let Some(p) = ElementwisePlan::new(&spec.a, &spec.b, &spec.out, &spec.sizes)
        {
            return KernelPlan::Elementwise(p);
        }
        match choice {
            KernelChoice::Direct => KernelPlan::direct(spec),
            KernelChoice::Gemm => KernelPlan::Gemm(plan(spec, a_len, b_len, true)),
            KernelChoice::GemmBatchLoop => KernelPlan::Gemm(plan(spec, a_len, b_len, false)),
            // Moving labels into the loop shrinks the GEMMs: keep that only if they stay big.
            KernelChoice::Auto => Some(plan(spec, a_len, b_len, true))
                .filter(|p| work(p) >= GEMM_MIN_WORK)
                .or_else(|| {
                    Some(plan(spec, a_len, b_len, false)).filter(|p| {
                        let [nl, m, n, _] = p.dims(spec.sizes());
                        let batched = nl >= 2 && m >= 2 && n >= 2 && work(p) >= BATCHED_GEMM_MIN_WORK;
                        batched || work(p) >= GEMM_MIN_WORK
                    })
                })
                .map_or_else(
                    || {
                        LanesPlan::new(&spec.a, &spec.b, &spec.out, &spec.sizes)
                            .map_or_else(|| KernelPlan::direct(spec), KernelPlan::Lanes)
                    },
                    KernelPlan::Gemm,
                ),
        }
    }

    fn run<T: Elem>(&self, spec: &ContractSpec, a: &Tensor<T>, b: &Tensor<T>) -> Tensor<T> {
        match self {
            KernelPlan::Direct { sizes, strides: [sa, sb, so], out_len } => {
                let mut out = zeroed(*out_len);
                let (da, db) = (conjugated(a.data(), spec.conj[0]), conjugated(b.data(), spec.conj[1]));
                direct_loop(sizes, &da, sa, &db, sb, &mut out, so);
                Tensor::from_parts(&spec.out_shape(), out)
            }
            KernelPlan::Elementwise(p) => Tensor::from_parts(&spec.out_shape(), p.run(a.data(), b.data(), spec.conj)),
            KernelPlan::Gemm(p) => gemm_path(spec, a, b, p),
            KernelPlan::Reduce(p) => Tensor::from_parts(&spec.out_shape(), p.run(a.data(), b.data(), spec.conj)),
            KernelPlan::RowDot(p) => Tensor::from_parts(&spec.out_shape(), p.run(a.data(), b.data(), spec.conj)),
            KernelPlan::Lanes(p) => {
                let (da, db) = (conjugated(a.data(), spec.conj[0]), conjugated(b.data(), spec.conj[1]));
                Tensor::from_parts(&spec.out_shape(), p.run(&spec.sizes, (&da, &spec.a), (&db, &spec.b), &spec.out))
            }
        }
    }
}

/// The kernels [`step_cost`] prices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PricedKernel {
    Gemm,
    Elementwise,
    Reduce,
}

/// The kernel [`contract`] runs for `spec` and its estimated cost, when it is one whose
/// cost depends on the label orders in a way the estimate models (the GEMM path,
/// `GemmPlan::cost`; the element-wise kernel, `ElementwisePlan::cost`; the reduction
/// kernel, `ReducePlan::cost`), else `None`: what `layout.rs` compares an intermediate's
/// label orders by.
pub(crate) fn step_cost(spec: &ContractSpec) -> Option<(PricedKernel, f64)> {
    let (a_len, b_len) = (spec.a_shape().iter().product::<usize>(), spec.b_shape().iter().product::<usize>());
    match KernelPlan::new(spec, KernelChoice::Auto) {
        KernelPlan::Gemm(p) => Some((PricedKernel::Gemm, p.cost(spec, a_len, b_len))),
        KernelPlan::Reduce(p) => Some((PricedKernel::Reduce, p.cost())),
        KernelPlan::RowDot(p) => Some((PricedKernel::Reduce, p.cost())),
        KernelPlan::Elementwise(p) => Some((PricedKernel::Elementwise, p.cost([a_len, b_len]))),
        KernelPlan::Direct { .. } | KernelPlan::Lanes(_) => None,
    }
}

/// Which kernel [`contract_using`] runs.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(not(test), allow(dead_code, reason = "the forced kernels are chosen only by the kernel tests"))]
pub enum KernelChoice {
    /// The element-wise kernel when nothing is summed and no label repeats in a tensor;
    /// else GEMM when `m·n·k ≥` [`GEMM_MIN_WORK`] (or [`BATCHED_GEMM_MIN_WORK`] for a
    /// batch), the direct loop otherwise.
    Auto,
    /// Always the direct loop.
    Direct,
    /// Always the GEMM path, planned to copy as little as possible (labels may be moved
    /// into the loop around the GEMMs).
    Gemm,
    /// Always the GEMM path, looping over batch labels only.
    GemmBatchLoop,
}

/// Evaluates a binary contraction, choosing the kernel by size.
///
/// # Panics
/// If the operand shapes are not the spec's (graphs built through this crate's builders
/// are shape-checked when built).
pub fn contract<T: Elem>(spec: &ContractSpec, a: &Tensor<T>, b: &Tensor<T>) -> Tensor<T> {
    contract_using(spec, a, b, KernelChoice::Auto)
}

/// Evaluates a binary contraction with a given kernel (the kernel tests force each one).
///
/// # Panics
/// As [`contract`].
pub fn contract_using<T: Elem>(spec: &ContractSpec, a: &Tensor<T>, b: &Tensor<T>, choice: KernelChoice) -> Tensor<T> {
    check_shape("operand a", a, &spec.a, &spec.sizes, spec);
    check_shape("operand b", b, &spec.b, &spec.sizes, spec);
    match choice {
        KernelChoice::Auto => spec.plan.get_or_init(|| Arc::new(KernelPlan::new(spec, choice))).run(spec, a, b),
        _ => KernelPlan::new(spec, choice).run(spec, a, b),
    }
}

/// Evaluates a one-operand einsum.
///
/// # Panics
/// If the operand shape is not the spec's.
pub fn unary<T: Elem>(spec: &UnarySpec, a: &Tensor<T>) -> Tensor<T> {
    check_shape("operand", a, &spec.a, &spec.sizes, spec);
    // Sums in the operand's order, broadcasts written once (`reduce::one_operand`).
    if let Some(out) = crate::reduce::one_operand(&spec.a, &spec.out, &spec.sizes, a.data()) {
        return Tensor::from_parts(&spec.out_shape(), out);
    }
    Tensor::from_parts(&spec.out_shape(), direct(spec.sizes(), (a.data(), &spec.a), None, &spec.out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::{ramp, reference_labels};

    #[test]
    fn canonical_labels_make_equal_specs() {
        let s1 = ContractSpec::new(&[5, 2], &[2, 7], &[5, 7], &[0, 0, 3, 0, 0, 2, 0, 4]).unwrap();
        let s2 = ContractSpec::new(&[0, 1], &[1, 2], &[0, 2], &[2, 3, 4]).unwrap();
        assert_eq!(s1, s2);
        assert_eq!(format!("{s1:?}"), "ab,bc->ac [2, 3, 4]");
        assert!(ContractSpec::new(&[0, 9], &[0], &[], &[2]).is_err());
    }

    #[test]
    fn gemm_path_matches_reference() {
        // 20·20·20 ≥ GEMM_MIN_WORK; permuted operands and output, a summed-alone label.
        let sizes = [20, 20, 20, 3, 2];
        let cases: [(&[u32], &[u32], &[u32]); 4] = [
            (&[0, 1], &[1, 2], &[0, 2]),
            (&[1, 0, 3], &[2, 3, 1], &[3, 2, 0]),
            (&[3, 0, 1, 4], &[3, 1, 2], &[3, 0, 2]),
            (&[0, 1], &[1, 2], &[2, 4, 0]),
        ];
        for (la, lb, lo) in cases {
            let spec = ContractSpec::new(la, lb, lo, &sizes).unwrap();
            let a = ramp(shape_of(la, &sizes));
            let b = ramp(shape_of(lb, &sizes));
            let got = contract(&spec, &a, &b);
            let want = reference_labels(&[(&a, la), (&b, lb)], lo, &sizes).unwrap();
            let err = got.max_abs_diff(&want).unwrap();
            assert!(err < 1e-11 * (1.0 + want.max_abs()), "{spec:?}: {err}");
        }
    }

    /// A short innermost loop gives its place to the longest label; a long one stays.
    #[test]
    fn a_raised_stop_flag_ends_the_direct_loop_and_the_gemm_loop_early() {
        use std::sync::atomic::AtomicBool;
        // Σ_ij a_ij b_ij over 2^23 terms: the direct loop reads the flag every 2^22.
        let n = 1 << 23;
        let (a, b) = (vec![1.0f64; n], vec![1.0f64; n]);
        let run = |stop: bool| {
            let mut out = [0.0];
            crate::stop::with_stop(Arc::new(AtomicBool::new(stop)), || {
                direct_loop(&[n / 16, 16], &a, &[16, 1], &b, &[16, 1], &mut out, &[0, 0])
            });
            out[0]
        };
        assert_eq!(run(false), n as f64);
        assert!(run(true) < n as f64, "the loop ignored the raised flag");
        // A GEMM loop writes nothing once the flag is up.
        let spec = ContractSpec::new(&[0, 1], &[1, 2], &[0, 2], &[64, 64, 64]).unwrap();
        let (x, y) = (ramp(vec![64, 64]), ramp(vec![64, 64]));
        let p = plan(&spec, 64 * 64, 64 * 64, true);
        let full = gemm_path(&spec, &x, &y, &p);
        let stopped = crate::stop::with_stop(Arc::new(AtomicBool::new(true)), || gemm_path(&spec, &x, &y, &p));
        assert_ne!(stopped.data(), full.data());
    }

    #[test]
    fn direct_order_moves_the_longest_label_inside_a_short_loop() {
        // `ab,cdba->acd` with a = 1996, b = 7: the summed b (7) would be innermost.
        let sizes = [1996, 7, 4, 4];
        assert_eq!(direct_order(&[0, 2, 3], &[&[0, 1], &[2, 3, 1, 0]], &sizes).as_slice(), [2, 3, 1, 0]);
        // A matrix-vector product summing 300 keeps its sum innermost.
        assert_eq!(direct_order(&[0], &[&[0, 1], &[1]], &[400, 300]).as_slice(), [0, 1]);
    }

    /// A contraction of four over a large output block is one GEMM on a packed operand, not
    /// many calls that each read and write the block (`lm_batch`'s `abcde,efbcg->adfg`).
    #[test]
    fn small_contractions_over_large_outputs_are_not_looped() {
        let sizes = [1996, 4, 4, 4, 4, 4, 4];
        let spec = ContractSpec::new(&[0, 1, 2, 3, 4], &[4, 5, 1, 2, 6], &[0, 3, 5, 6], &sizes).unwrap();
        let KernelPlan::Gemm(p) = KernelPlan::new(&spec, KernelChoice::Auto) else { panic!("a GEMM plan") };
        assert_eq!(p.dims(&sizes), [1, 1996 * 4, 16, 64], "{:?}", p.looped);
    }

    #[test]
    fn batches_of_small_gemms_take_the_gemm_path() {
        // 50 GEMMs of 4×4×4 (under GEMM_MIN_WORK, over BATCHED_GEMM_MIN_WORK), with operands
        // and output in batch-last layouts; matrix-vector batches stay in the direct loop.
        let sizes = [50, 4, 4, 4];
        type Case<'a> = (&'a [u32], &'a [u32], &'a [u32], bool);
        let cases: [Case; 3] = [
            (&[0, 1, 2], &[0, 2, 3], &[0, 1, 3], true),
            (&[1, 2, 0], &[3, 2, 0], &[3, 1, 0], true),
            (&[0, 2], &[0, 2, 3], &[0, 3], false),
        ];
        for (la, lb, lo, gemm) in cases {
            let spec = ContractSpec::new(la, lb, lo, &sizes).unwrap();
            let planned = KernelPlan::new(&spec, KernelChoice::Auto);
            assert_eq!(matches!(planned, KernelPlan::Gemm(_)), gemm, "{spec:?}");
            let (a, b) = (ramp(spec.a_shape()), ramp(spec.b_shape()));
            let got = contract(&spec, &a, &b);
            let want = reference_labels(&[(&a, la), (&b, lb)], lo, &sizes).unwrap();
            let err = got.max_abs_diff(&want).unwrap();
            assert!(err < 1e-12 * (1.0 + want.max_abs()), "{spec:?}: {err}");
        }
    }

    #[test]
    fn loops_over_a_middle_label_of_the_result_are_shared_by_a_pool() {
        // `lattice_8x8_bond4`'s `abcdefgh,ijfhklmabc->degijklm`, smaller: `b` is read in
        // place, so the GEMMs loop over `i j f h`, and `i`, `j` sit in the middle of the
        // result. In a pool of two the loop is led by one of them and the result permuted
        // (`gemm_loop::chunk_lead`); every output order below must give the reference and
        // the one-thread result bit for bit.
        let sizes = [4, 4, 8, 4, 4, 2, 2, 2, 2, 3, 4, 4, 4];
        let (la, lb): (&[u32], &[u32]) = (&[0, 1, 2, 3, 4, 5, 6, 7], &[8, 9, 5, 7, 10, 11, 12, 0, 1, 2]);
        let outs: [&[u32]; 4] = [
            &[3, 4, 6, 8, 9, 10, 11, 12],
            &[3, 8, 4, 6, 9, 10, 11, 12],
            &[10, 3, 4, 6, 8, 9, 11, 12],
            &[3, 4, 6, 10, 9, 8, 11, 12],
        ];
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        let mut reordered = 0;
        for lo in outs {
            let spec = ContractSpec::new(la, lb, lo, &sizes).unwrap();
            let (a, b) = (ramp(spec.a_shape()), ramp(spec.b_shape()));
            let one = contract(&spec, &a, &b);
            let two = pool.install(|| contract(&spec, &a, &b));
            assert_eq!(one.data(), two.data(), "{spec:?}: two threads must give the one-thread result");
            let want = reference_labels(&[(&a, la), (&b, lb)], lo, &sizes).unwrap();
            let err = two.max_abs_diff(&want).unwrap();
            assert!(err < 1e-11 * (1.0 + want.max_abs()), "{spec:?}: {err}");
            let KernelPlan::Gemm(p) = KernelPlan::new(&spec, KernelChoice::Auto) else { panic!("{spec:?}: not GEMM") };
            let [_, m, n, k] = p.dims(spec.sizes());
            let loop_sizes: Vec<usize> = p.looped.iter().map(|&l| spec.sizes()[l as usize]).collect();
            let in_c: Vec<bool> = p.looped.iter().map(|c| spec.out_labels().contains(c)).collect();
            let out_len = spec.out_shape().iter().product();
            let chunked = matrix_view(spec.out_labels(), spec.sizes(), &p.looped, &p.left, &p.right)
                .is_some_and(|v| pool.install(|| batch_chunks(&loop_sizes, &v, out_len, [m, n, k])).is_some());
            if !chunked && pool.install(|| chunk_lead(&loop_sizes, &in_c, out_len, [m, n, k])).is_some() {
                reordered += 1;
            }
        }
        assert!(reordered >= 3, "only {reordered} of the cases took the reordered loop");
    }

    #[test]
    fn outputs_overwrite_stale_recycled_buffers() {
        // GEMM outputs, packed operands and permuted results start from recycled buffers
        // without zeroing: poison the pool with NaNs and check that none survives. The
        // second case loops a contracted label around the GEMMs (the planner cannot keep
        // `a` in place otherwise), so later GEMMs accumulate into the first one's block.
        let sizes = [3, 64, 64, 64];
        let cases: [(&[u32], &[u32], &[u32]); 3] =
            [(&[1, 2], &[2, 3], &[3, 1]), (&[0, 1, 2], &[0, 2, 3], &[1, 3]), (&[0, 1, 2], &[3, 2, 0], &[3, 1])];
        // The pool is the process's: no other pool test empties it meanwhile.
        let _serial = crate::buffer::PoolTest::keeping_stale();
        for (la, lb, lo) in cases {
            let spec = ContractSpec::new(la, lb, lo, &sizes).unwrap();
            let (a, b) = (ramp(spec.a_shape()), ramp(spec.b_shape()));
            let want = reference_labels(&[(&a, la), (&b, lb)], lo, &sizes).unwrap();
            for choice in [KernelChoice::Auto, KernelChoice::Gemm, KernelChoice::GemmBatchLoop] {
                crate::buffer::release_buffers();
                for n in [64 * 64, 64 * 64, 3 * 64 * 64, 3 * 64 * 64] {
                    drop(Tensor::from_fn(vec![n], |_| f64::NAN).unwrap());
                }
                let got = contract_using(&spec, &a, &b, choice);
                // (`max_abs_diff` would skip NaNs.)
                assert!(got.data().iter().all(|x| x.is_finite()), "{spec:?} {choice:?}: a stale NaN survived");
                let err = got.max_abs_diff(&want).unwrap();
                assert!(err < 1e-11 * (1.0 + want.max_abs()), "{spec:?} {choice:?}: {err}");
            }
        }
        let spec = ContractSpec::new(&[0, 1, 2], &[0, 2, 3], &[1, 3], &sizes).unwrap();
        let p = plan(&spec, 3 * 64 * 64, 3 * 64 * 64, true);
        assert_eq!(p.looped.as_slice(), &[0], "the second case loops its contracted label");
        crate::buffer::release_buffers();
    }

    #[test]
    fn unary_cases() {
        let t = ramp(vec![2, 3]);
        let p = unary(&UnarySpec::permute(&[2, 3], &[1, 0]).unwrap(), &t);
        assert_eq!(p.get(&[2, 1]), t.get(&[1, 2]));
        let s = unary(&UnarySpec::sum_axes(&[2, 3], &[0]).unwrap(), &t);
        assert_eq!(s.get(&[2]), Some(t.get(&[0, 2]).unwrap() + t.get(&[1, 2]).unwrap()));
        let b = unary(&UnarySpec::broadcast(&[2, 3], &[2, 4, 3], &[0, 2]).unwrap(), &t);
        assert_eq!(b.get(&[1, 3, 2]), t.get(&[1, 2]));
        assert!(UnarySpec::permute(&[2, 3], &[0, 0]).is_err());
        assert!(UnarySpec::sum_axes(&[2, 3], &[2]).is_err());
        assert!(UnarySpec::broadcast(&[2, 3], &[3, 2], &[0, 1]).is_err());
    }
}
