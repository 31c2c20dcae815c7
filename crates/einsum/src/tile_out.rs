//! A permuted GEMM result written in tiles: the loop of GEMMs runs a few values of its
//! leading looped label at a time into a small scratch tile, and each tile is copied to
//! its place in the output right away, while it is still in the first-level cache.
//!
//! Why: when the output's layout is no batch of matrices (`abcde,afgde->bfacg`: the batch
//! label `a` in the middle of the output), the GEMM path computed the whole result
//! contiguously and then permuted it: a second tensor of the output's size written, read
//! back from the second-level cache or beyond, and given back. In tiles, that tensor
//! never exists, and only the output's own lines are written.
//!
//! Applies when the output's labels are those of the contiguous result in another order
//! (no diagonal, no broadcast), the result's leading axis is the loop's leading label (so
//! that a chunk of its values is a contiguous block of the result, as the parallel loop's
//! chunks are: `gemm_loop::batch_chunks`), and one value's block is at most a tile. The
//! loop runs on the calling thread; the parallel loop keeps the whole-result path.
//!
//! Invariants: every output element is written exactly once (the output comes unzeroed
//! from the pool); the tile's values are those the whole-result path computed for the same
//! block, by the same GEMM calls. Cost: the GEMMs' work, plus one copy of each output
//! element from the tile and a few dozen operations of planning per tile.

use smallvec::SmallVec;

use crate::buffer::{overwritten, recycle};
use crate::elem::Elem;
use crate::gemm_loop::{MatrixView, gemm_loop};
use crate::tensor::row_major_strides;

/// Elements of a tile (64 KiB of `f64`): the GEMMs of a chunk write it and the copy reads
/// it back while it is in the second-level cache, together with the operands' blocks.
const TILE_ELEMENTS: usize = 8192;

/// The contraction's GEMM loop (as `kernel::gemm_path` would run it on this thread) with
/// its contiguous result, of labels `core` (leading label first), written to an output of
/// labels `out` in tiles; `None` when the tiles do not apply (the module doc), and the
/// caller runs the loop whole.
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm_in_tiles<T: Elem>(
    conj: [bool; 2],
    mnk: [usize; 3],
    loop_sizes: &[usize],
    operands: [(&[T], &MatrixView); 2],
    c_view: &MatrixView,
    (core, out): (&[u32], &[u32]),
    sizes: &[usize],
) -> Option<Vec<T>> {
    let &lead = loop_sizes.first()?;
    let c_len: usize = core.iter().map(|&c| sizes[c as usize]).product();
    let step = *c_view.looped.first()?;
    let distinct = out.iter().enumerate().all(|(i, c)| !out[..i].contains(c));
    // The lead label leads `core` (its stride spans the rest), so a chunk is contiguous.
    let leads = step > 0 && step.saturating_mul(lead) == c_len;
    if !leads || lead < 2 || step > TILE_ELEMENTS / 2 || out.len() != core.len() || !distinct {
        return None;
    }
    if !core.iter().all(|c| out.contains(c)) {
        return None;
    }
    let per = (TILE_ELEMENTS / step).min(lead);
    let shape: SmallVec<[usize; 8]> = core.iter().map(|&c| sizes[c as usize]).collect();
    let out_shape: SmallVec<[usize; 8]> = out.iter().map(|&c| sizes[c as usize]).collect();
    let out_strides = row_major_strides(&out_shape);
    // Each axis of `core`: its size, its stride in the tile (row-major, so the leading
    // axis's is `step` whatever the chunk's length) and in the output.
    let src = row_major_strides(&shape);
    let axes: SmallVec<[Axis; 8]> = core
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let at = out.iter().position(|o| o == c).expect("out is a permutation of core");
            Axis { size: shape[i], src: src[i], dst: out_strides[at] }
        })
        .collect();
    let mut result = overwritten::<T>(c_len);
    let mut tile = overwritten::<T>(per * step);
    let [(_, a_view), (_, b_view)] = operands;
    let mut ls: SmallVec<[usize; 4]> = loop_sizes.into();
    let mut first = 0;
    while first < lead {
        let len = per.min(lead - first);
        ls[0] = len;
        let at = [first * a_view.looped[0], first * b_view.looped[0]];
        gemm_loop(conj, mnk, &ls, operands, at, &mut tile[..len * step], c_view);
        let mut chunk = axes.clone();
        chunk[0].size = len;
        scatter(&chunk, &tile[..len * step], &mut result[first * axes[0].dst..]);
        first += len;
    }
    recycle(tile);
    #[cfg(test)]
    TILED.with(|t| t.set(t.get() + 1));
    Some(result)
}

#[cfg(test)]
thread_local! {
    /// Results this thread wrote in tiles: so that the tests know the tiles ran.
    static TILED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// One axis of a copy: its length and its strides in the source and the destination.
#[derive(Copy, Clone, Debug, PartialEq)]
struct Axis {
    size: usize,
    src: usize,
    dst: usize,
}

/// `dst[Σ i·dst] = src[Σ i·src]` over every index of `axes` (which address distinct
/// destination elements). The destination is written in its own order (axes by
/// decreasing destination stride, the last ones innermost), so its lines fill one after
/// the other; the source is a tile in the cache, read in whatever order that takes.
fn scatter<T: Copy>(axes: &[Axis], src: &[T], dst: &mut [T]) {
    let mut order: SmallVec<[Axis; 8]> = axes.iter().copied().filter(|a| a.size != 1).collect();
    if order.iter().any(|a| a.size == 0) {
        return;
    }
    order.sort_by_key(|a| std::cmp::Reverse(a.dst));
    // Fuse an axis into the one outside it where both strides continue it.
    let mut fused: SmallVec<[Axis; 8]> = SmallVec::new();
    for a in order {
        match fused.last_mut() {
            Some(o) if o.src == a.src * a.size && o.dst == a.dst * a.size => {
                *o = Axis { size: o.size * a.size, src: a.src, dst: a.dst };
            }
            _ => fused.push(a),
        }
    }
    while fused.len() < 2 {
        fused.insert(0, Axis { size: 1, src: 0, dst: 0 });
    }
    let (outer, inner) = fused.split_at(fused.len() - 2);
    let [mid, last] = [inner[0], inner[1]];
    // The odometer over the outer axes; the two innermost run as plain loops.
    let mut idx: SmallVec<[usize; 8]> = SmallVec::from_elem(0, outer.len());
    let (mut ps, mut pd) = (0usize, 0usize);
    loop {
        for j in 0..mid.size {
            let (s, d) = (ps + j * mid.src, pd + j * mid.dst);
            if last.src == 1 && last.dst == 1 {
                dst[d..d + last.size].copy_from_slice(&src[s..s + last.size]);
            } else {
                for i in 0..last.size {
                    dst[d + i * last.dst] = src[s + i * last.src];
                }
            }
        }
        // Next outer index, innermost first.
        let mut ax = outer.len();
        loop {
            if ax == 0 {
                return;
            }
            ax -= 1;
            idx[ax] += 1;
            ps += outer[ax].src;
            pd += outer[ax].dst;
            if idx[ax] < outer[ax].size {
                break;
            }
            ps -= outer[ax].src * outer[ax].size;
            pd -= outer[ax].dst * outer[ax].size;
            idx[ax] = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::{ContractSpec, KernelChoice, contract_using};
    use crate::reference::{ramp, ramp_from, reference_labels};
    use crate::rng::Rng;
    use crate::tensor::Tensor;

    /// `v` in a random order.
    fn shuffled(v: &[u32], rng: &mut Rng) -> Vec<u32> {
        let mut v = v.to_vec();
        for i in (1..v.len()).rev() {
            v.swap(i, rng.below(i + 1));
        }
        v
    }

    /// Batched GEMMs with random layouts (a batch label, up to two left, right and
    /// contracted labels each, every tensor's axes in a random order, the batch's size 1 to
    /// 40), on the GEMM path, from a pool poisoned with NaNs: the result equals the
    /// reference to rounding, and one thread's equals two threads' (which compute the whole
    /// result, not in tiles) bit for bit. The tiles must have run in at least a quarter of
    /// the cases, and on `lm_batch`'s `abcde,afgde->bfacg` (its batch label in the middle
    /// of the output).
    #[test]
    fn gemms_written_in_tiles_match_the_reference_and_two_threads() {
        let _serial = crate::buffer::PoolTest::keeping_stale();
        let two = rayon::ThreadPoolBuilder::new().num_threads(2).build().expect("a pool of two threads");
        // Each case: `a`'s, `b`'s and the output's labels, and the labels' sizes.
        type Case = (Vec<u32>, Vec<u32>, Vec<u32>, Vec<usize>);
        let mut cases: Vec<Case> =
            vec![(vec![0, 1, 2, 3, 4], vec![0, 5, 6, 3, 4], vec![1, 5, 0, 2, 6], vec![60, 4, 4, 4, 4, 4, 4])];
        for trial in 0..60 {
            let mut rng = Rng::for_trial(42, trial);
            // Labels: 0 the batch, then left, right and contracted ones.
            let [nl, nr, nc] = [1 + rng.below(2), 1 + rng.below(2), 1 + rng.below(2)];
            let left: Vec<u32> = (1..=nl as u32).collect();
            let right: Vec<u32> = (1 + nl as u32..=(nl + nr) as u32).collect();
            let contracted: Vec<u32> = (1 + (nl + nr) as u32..=(nl + nr + nc) as u32).collect();
            let mut sizes = vec![1 + rng.below(40)];
            sizes.extend((0..nl + nr + nc).map(|_| 1 + rng.below(6)));
            let cat = |parts: &[&[u32]]| parts.concat();
            let a = shuffled(&cat(&[&[0], &left, &contracted]), &mut rng);
            let b = shuffled(&cat(&[&[0], &contracted, &right]), &mut rng);
            let out = shuffled(&cat(&[&[0], &left, &right]), &mut rng);
            cases.push((a, b, out, sizes));
        }
        let before = TILED.with(|t| t.get());
        let mut lm_tiled = false;
        for (i, (la, lb, lo, sizes)) in cases.iter().enumerate() {
            let spec = ContractSpec::new(la, lb, lo, sizes).expect("a valid spec");
            let (a, b) = (ramp(spec.a_shape()), ramp_from(spec.b_shape(), 7.0));
            let want = reference_labels(&[(&a, la), (&b, lb)], lo, sizes).expect("the reference");
            crate::buffer::release_buffers();
            let n: usize = spec.out_shape().iter().product();
            for _ in 0..2 {
                drop(Tensor::from_fn(vec![n], |_| f64::NAN).expect("a poisoned buffer"));
            }
            let tiled = TILED.with(|t| t.get());
            let got = contract_using(&spec, &a, &b, KernelChoice::Gemm);
            lm_tiled |= i == 0 && TILED.with(|t| t.get()) > tiled;
            assert!(got.data().iter().all(|x| x.is_finite()), "{spec:?}: a stale NaN survived");
            let err = got.max_abs_diff(&want).expect("same shapes");
            assert!(err < 1e-12 * (1.0 + want.max_abs()), "{spec:?}: {err}");
            let on_two = two.install(|| contract_using(&spec, &a, &b, KernelChoice::Gemm));
            let bits = |t: &Tensor<f64>| t.data().iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&on_two), "{spec:?}: one thread against two");
        }
        crate::buffer::release_buffers();
        let ran = TILED.with(|t| t.get()) - before;
        assert!(lm_tiled, "lm_batch's step was not written in tiles");
        assert!(4 * ran >= cases.len(), "tiles ran in only {ran} of {} cases", cases.len());
    }

    /// The copy against a direct index computation, on random shapes and permutations
    /// (sizes 0 to 5, up to six axes).
    #[test]
    fn scatter_puts_each_element_where_its_index_says() {
        for trial in 0..300 {
            let mut rng = Rng::for_trial(41, trial);
            let rank = rng.below(7);
            let shape: Vec<usize> = (0..rank).map(|_| rng.below(6)).collect();
            let mut perm: Vec<usize> = (0..rank).collect();
            for i in (1..rank).rev() {
                perm.swap(i, rng.below(i + 1));
            }
            let out_shape: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
            let (src_strides, out_strides) = (row_major_strides(&shape), row_major_strides(&out_shape));
            let len: usize = shape.iter().product();
            let axes: Vec<Axis> = (0..rank)
                .map(|i| {
                    let at = perm.iter().position(|&p| p == i).expect("a permutation");
                    Axis { size: shape[i], src: src_strides[i], dst: out_strides[at] }
                })
                .collect();
            let src: Vec<f64> = (0..len).map(|i| i as f64 + 0.5).collect();
            let mut got = vec![f64::NAN; len];
            scatter(&axes, &src, &mut got);
            // The reference: every source index, its destination offset computed apart.
            let mut want = vec![f64::NAN; len];
            for (flat, &x) in src.iter().enumerate() {
                let mut rest = flat;
                let mut d = 0;
                for a in axes.iter() {
                    let i = rest / a.src.max(1);
                    rest -= i * a.src;
                    d += i * a.dst;
                }
                want[d] = x;
            }
            assert_eq!(
                got.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                want.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                "shape {shape:?}, permutation {perm:?}"
            );
        }
    }
}
