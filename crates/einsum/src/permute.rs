//! Permutation copies: a tensor's elements rearranged to another axis order, the kernels'
//! most common data movement (GEMM operands packed, results permuted afterwards, unary
//! transposes).
//!
//! [`permute`] fuses axes that move together, then copies contiguous runs (short ones
//! gathered into longer rows) or transposes blocks of grouped short axes in square tiles,
//! so reads and writes both use whole cache lines; outputs of [`PAR_PERMUTE_MIN_ELEMENTS`]
//! or more are cut into chunks over the current rayon pool's threads.
//!
//! Invariants: `labels` are distinct and `out` is a permutation of them; every output
//! element is written exactly once (outputs come unzeroed from the buffer pool). Cost:
//! `O(len)` element moves plus offset tables of one entry per element of a block (a block
//! holds [`BLOCK`] elements or somewhat more: its last axis may overshoot, except in a
//! gathered row, which stays under [`MAX_GATHERED_ROW`]).

use smallvec::SmallVec;

use crate::buffer::overwritten;
use crate::elem::Elem;
use crate::tensor::row_major_strides;

/// A list of labels (or of fused groups).
pub(crate) type Group = SmallVec<[u32; 8]>;

/// The sizes of `labels`' axes.
pub(crate) fn shape_of(labels: &[u32], sizes: &[usize]) -> Vec<usize> {
    labels.iter().map(|&c| sizes[c as usize]).collect()
}

/// Per-loop-label strides of a tensor whose axes carry `labels`: the sum of the strides
/// of its axes with that label (0 if it has none).
pub(crate) fn loop_strides(labels: &[u32], shape: &[usize], order: &[u32]) -> SmallVec<[usize; 8]> {
    let strides = row_major_strides(shape);
    order.iter().map(|&l| labels.iter().zip(&strides).filter(|&(&c, _)| c == l).map(|(_, &s)| s).sum()).collect()
}

/// Side of the square tiles of [`permute`].
const TILE: usize = 32;

/// The same permutation on fewer, longer axes: axes of size 1 dropped, and every run of
/// labels consecutive (in order) in both `labels` and `out` fused into one label. Returns
/// the fused sizes, source labels and output labels (`0..k` in output order).
pub(crate) fn fuse_axes(sizes: &[usize], labels: &[u32], out: &[u32]) -> (SmallVec<[usize; 8]>, Group, Group) {
    let keep = |l: &[u32]| -> Group { l.iter().copied().filter(|&c| sizes[c as usize] != 1).collect() };
    let (labels, out) = (keep(labels), keep(out));
    let pos = |c: u32| labels.iter().position(|&l| l == c).expect("a permutation");
    // Fused label of each output axis, and the fused sizes.
    let (mut fused_sizes, mut group_of): (SmallVec<[usize; 8]>, Group) = (SmallVec::new(), Group::new());
    for (i, &c) in out.iter().enumerate() {
        if i > 0 && pos(c) == pos(out[i - 1]) + 1 {
            *fused_sizes.last_mut().expect("a group is open") *= sizes[c as usize];
        } else {
            fused_sizes.push(sizes[c as usize]);
        }
        group_of.push(fused_sizes.len() as u32 - 1);
    }
    // The source lists the groups in the order of their first labels.
    let mut src: Group = Group::new();
    for &c in &labels {
        let g = group_of[out.iter().position(|&o| o == c).expect("a permutation")];
        if src.last() != Some(&g) {
            src.push(g);
        }
    }
    let out = (0..fused_sizes.len() as u32).collect();
    (fused_sizes, src, out)
}

/// The least number of elements [`permute`] gathers into each side of its tiles: short
/// innermost axes are grouped with their neighbours until a side holds this many.
const BLOCK: usize = 32;

/// Contiguous runs of at least this many elements are copied as slices; shorter ones are
/// gathered element by element into longer rows, which costs less than a slice copy and a
/// step of the outer loop per run.
const SHORT_RUN: usize = 8;

/// The longest row (and offset table) a gather of short runs builds.
const MAX_GATHERED_ROW: usize = 4 * BLOCK;

/// Outputs of at least this many elements are permuted by the threads of the current
/// rayon pool, when called inside one of more than one thread (outside any pool, as in
/// [`crate::Einsum::eval`], one thread).
pub(crate) const PAR_PERMUTE_MIN_ELEMENTS: usize = 1 << 20;

/// A permutation copy of `src` (distinct labels `labels`) to labels `out` (a permutation of
/// them). Axes are fused first ([`fuse_axes`]), so small axes that move together become one
/// long one. When both innermost axes carry the same label, contiguous runs are copied: a
/// run of [`SHORT_RUN`] elements or more as a slice, shorter runs gathered with the
/// output's next axes into rows, until a row holds [`BLOCK`] elements, would exceed
/// [`MAX_GATHERED_ROW`] or the axes run out (one step of the outer loop per row, not per
/// run).
/// Otherwise the copy is a transpose of `O × S` blocks: `O`, the output's innermost axes,
/// and `S`, the source's innermost axes (disjoint from `O`), each taken until it holds
/// [`BLOCK`] elements. For each value of the other axes, the output holds an `S × O`
/// block whose rows are contiguous, and the source the transposed `O × S` block (its rows
/// contiguous too, unless an axis inside them was left out of `S`); it is copied in square
/// tiles of [`TILE`], so reads and writes both use whole cache lines however short the axes
/// (a network's axes are often of size 2 to 10).
///
/// In parallel, the output is cut into contiguous chunks along its leading axes (which then
/// stay out of `S`), one task per chunk.
pub(crate) fn permute<T: Elem>(sizes: &[usize], src: &[T], labels: &[u32], out: &[u32]) -> Vec<T> {
    let len: usize = labels.iter().map(|&c| sizes[c as usize]).product();
    let threads = if len >= PAR_PERMUTE_MIN_ELEMENTS && rayon::current_thread_index().is_some() {
        rayon::current_num_threads()
    } else {
        1
    };
    permute_on(sizes, src, labels, out, threads)
}

/// [`permute`] with its output cut into chunks for `threads` threads (one chunk: `1`).
pub(crate) fn permute_on<T: Elem>(sizes: &[usize], src: &[T], labels: &[u32], out: &[u32], threads: usize) -> Vec<T> {
    let (sizes, labels, out) = fuse_axes(sizes, labels, out);
    let (sizes, labels, out) = (&sizes[..], &labels[..], &out[..]);
    let out_shape = shape_of(out, sizes);
    let len: usize = out_shape.iter().product();
    // Every element is written once.
    let mut dst = overwritten(len);
    if len == 0 {
        return dst;
    }
    let Some(o) = out.len().checked_sub(1) else {
        dst[0] = src[0];
        return dst;
    };
    // After fusing, the output's labels are `0..k` in order: label `c` is output axis `c`.
    let so = row_major_strides(&out_shape);
    let ss = loop_strides(labels, &shape_of(labels, sizes), out);
    // The leading axes `0..lead` are split over threads, one chunk per index; never the
    // innermost axis of either side, so that `S` and `O` are not empty.
    let src_inner = *labels.last().expect("not empty") as usize;
    let (mut lead, mut chunks) = (0, 1);
    while threads > 1 && lead < o.min(src_inner) && chunks < 4 * threads {
        chunks *= sizes[lead];
        lead += 1;
    }
    // The block axes: `S` from the source's innermost outwards, then `O` from the output's.
    let (mut s_axes, mut ns) = (SmallVec::<[usize; 8]>::new(), 1usize);
    if src_inner != o {
        for c in labels.iter().rev().map(|&c| c as usize).filter(|&c| c >= lead) {
            if c == o || ns >= BLOCK {
                break;
            }
            s_axes.push(c);
            ns *= sizes[c];
        }
    }
    let (mut o_axes, mut no) = (SmallVec::<[usize; 8]>::new(), 1usize);
    // The most elements `O` may hold beyond its first axis: a transpose block is not capped;
    // a shared innermost axis of `SHORT_RUN` or more is copied run by run (`O` is that axis);
    // a shorter one is gathered with the output's next axes, up to `MAX_GATHERED_ROW`.
    let cap = match s_axes.is_empty() {
        false => usize::MAX,
        true if sizes[o] >= SHORT_RUN => sizes[o],
        true => MAX_GATHERED_ROW,
    };
    for c in (lead..out.len()).rev() {
        if s_axes.contains(&c) || no >= BLOCK || (!o_axes.is_empty() && no.saturating_mul(sizes[c]) > cap) {
            break;
        }
        o_axes.push(c);
        no *= sizes[c];
    }
    // Offsets inside a block, per position of `O` or `S`, in the source or the output.
    let offsets = |axes: &[usize], strides: &[usize]| -> Vec<usize> {
        let mut table = vec![0usize];
        for &c in axes {
            // `axes` runs innermost first: each one repeats the table so far per index.
            let inner = table.len();
            for i in 1..sizes[c] {
                for t in 0..inner {
                    table.push(table[t] + i * strides[c]);
                }
            }
        }
        table
    };
    let (src_o, src_s, dst_s) = (offsets(&o_axes, &ss), offsets(&s_axes, &ss), offsets(&s_axes, &so));
    // Odometer over the axes in no block and not split. When rows are copied or gathered
    // (no transpose block), the innermost of them runs in a plain loop inside each step of
    // the odometer: a row of a dozen elements (a network's typical shared innermost axis)
    // costs little more than its copy, and a step of the odometer per row cost as much again.
    let mut outer: SmallVec<[usize; 8]> =
        (lead..out.len()).filter(|c| !s_axes.contains(c) && !o_axes.contains(c)).collect();
    let rows_axis = if s_axes.is_empty() { outer.pop() } else { None };
    let (n_rows, [rows_so, rows_ss]) = rows_axis.map_or((1, [0, 0]), |c| (sizes[c], [so[c], ss[c]]));
    // Elements one step of the odometer below writes.
    let per_step = if s_axes.is_empty() { n_rows * no } else { ns * no };
    let chunk = |dst: &mut [T], mut ps: usize| {
        let mut idx: SmallVec<[usize; 8]> = SmallVec::from_elem(0, outer.len());
        let mut po = 0usize;
        // Elements written since the stop flag was last read.
        let mut unchecked = 0usize;
        loop {
            unchecked += per_step;
            if unchecked >= crate::stop::COPY_CHECK_ELEMENTS {
                unchecked = 0;
                if crate::stop::requested() {
                    return; // the evaluation is ending with an error; the output is discarded
                }
            }
            if o_axes.len() == 1 && s_axes.is_empty() {
                for r in 0..n_rows {
                    let (d, s) = (po + r * rows_so, ps + r * rows_ss);
                    dst[d..d + no].copy_from_slice(&src[s..s + no]);
                }
            } else if s_axes.is_empty() {
                // Runs of the shared innermost axis, gathered into one output row.
                for r in 0..n_rows {
                    let (d, s) = (po + r * rows_so, ps + r * rows_ss);
                    for (x, &off) in dst[d..d + no].iter_mut().zip(&src_o) {
                        *x = src[s + off];
                    }
                }
            } else {
                for sb in (0..ns).step_by(TILE) {
                    for ob in (0..no).step_by(TILE) {
                        let oe = (ob + TILE).min(no);
                        let rows = dst_s.iter().zip(&src_s).take((sb + TILE).min(ns)).skip(sb);
                        for (&d, &s) in rows {
                            let row = &mut dst[po + d + ob..po + d + oe];
                            for (x, &off) in row.iter_mut().zip(&src_o[ob..oe]) {
                                *x = src[ps + off + s];
                            }
                        }
                    }
                }
            }
            let mut x = outer.len();
            loop {
                if x == 0 {
                    return;
                }
                x -= 1;
                let ax = outer[x];
                idx[x] += 1;
                po += so[ax];
                ps += ss[ax];
                if idx[x] < sizes[ax] {
                    break;
                }
                po -= so[ax] * sizes[ax];
                ps -= ss[ax] * sizes[ax];
                idx[x] = 0;
            }
        }
    };
    if lead == 0 {
        chunk(&mut dst, 0);
    } else {
        use rayon::prelude::*;
        // Chunk `i`'s source offset: `i` spelled in the leading axes' sizes.
        let base = |mut i: usize| {
            (0..lead).rev().fold(0, |acc, c| {
                let x = i % sizes[c];
                i /= sizes[c];
                acc + x * ss[c]
            })
        };
        dst.par_chunks_mut(so[lead - 1]).enumerate().for_each(|(i, d)| chunk(d, base(i)));
    }
    dst
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;

    use super::*;
    use crate::kernel::{UnarySpec, unary};
    use crate::reference::{ramp, reference_labels};

    #[test]
    fn permutes_fuse_axes_and_match_the_reference() {
        // Runs that move together (fused), axes of size 1 (dropped), short and long rows.
        let cases: [(&[usize], &[usize]); 9] = [
            (&[50, 4, 4, 4], &[0, 3, 1, 2]),
            // A short innermost axis shared by both sides, gathered into rows with the
            // output's next axes (a GEMM operand packed in `lm_batch`).
            (&[4, 4, 50, 4, 4], &[2, 0, 3, 1, 4]),
            // The same with a long axis next in the output: the gathered row stops short.
            (&[3000, 2, 4], &[1, 0, 2]),
            (&[4, 4, 4, 50], &[3, 0, 1, 2]),
            (&[30, 1, 40], &[2, 1, 0]),
            (&[1, 1], &[1, 0]),
            (&[20, 3, 70, 2], &[2, 0, 1, 3]),
            (&[9, 65, 3], &[1, 2, 0]),
            // Short axes in another order on both sides (a MERA step's output).
            (&[4, 3, 4, 5, 4, 4, 4, 3, 4], &[7, 1, 6, 5, 4, 8, 3, 2, 0]),
        ];
        for (shape, perm) in cases {
            let spec = UnarySpec::permute(shape, perm).unwrap();
            let t = ramp(shape.to_vec());
            let got = unary(&spec, &t);
            let want = reference_labels(&[(&t, spec.a_labels())], spec.out_labels(), spec.sizes()).unwrap();
            assert_eq!(got, want, "{spec:?}");
        }
        let (sizes, src, out) = fuse_axes(&[50, 4, 4, 4], &[0, 1, 2, 3], &[0, 3, 1, 2]);
        assert_eq!((&sizes[..], &src[..], &out[..]), (&[50, 4, 16][..], &[0, 2, 1][..], &[0, 1, 2][..]));
    }

    proptest::proptest! {
        /// Any permutation of any shape (short axes, as in networks, and axes of size 1)
        /// equals the reference, whatever blocks `permute` groups, on one thread or cut into
        /// chunks for three.
        #[test]
        fn permutes_match_the_reference(
            shape in proptest::collection::vec(1usize..12, 0..7),
            keys in proptest::collection::vec(0u32..1000, 7),
        ) {
            let mut perm: Vec<usize> = (0..shape.len()).collect();
            perm.sort_by_key(|&i| keys[i]);
            let spec = UnarySpec::permute(&shape, &perm).unwrap();
            let t = ramp(shape.clone());
            let got = unary(&spec, &t);
            let want = reference_labels(&[(&t, spec.a_labels())], spec.out_labels(), spec.sizes()).unwrap();
            let chunked = permute_on(spec.sizes(), t.data(), spec.a_labels(), spec.out_labels(), 3);
            proptest::prop_assert_eq!(&chunked[..], want.data(), "{:?} in chunks", spec);
            proptest::prop_assert_eq!(got, want, "{:?}", spec);
        }
    }

    /// Cut into chunks for several threads (run on rayon's global pool), a permutation
    /// equals the one-thread copy, whichever side's innermost axis leads.
    #[test]
    fn permutes_in_chunks_match_one_thread() {
        let cases: [(&[usize], &[usize]); 5] = [
            (&[4, 3, 4, 5, 4, 4, 4, 3, 4], &[7, 1, 6, 5, 4, 8, 3, 2, 0]),
            (&[3, 50, 7], &[2, 0, 1]),
            (&[5, 6, 7], &[1, 2, 0]),
            (&[2, 3, 4, 5], &[0, 1, 3, 2]),
            (&[6, 1, 9], &[2, 1, 0]),
        ];
        for (shape, perm) in cases {
            let spec = UnarySpec::permute(shape, perm).unwrap();
            let t = ramp(shape.to_vec());
            let one = permute_on(spec.sizes(), t.data(), spec.a_labels(), spec.out_labels(), 1);
            for threads in [2, 3, 8] {
                let many = permute_on(spec.sizes(), t.data(), spec.a_labels(), spec.out_labels(), threads);
                assert_eq!(many, one, "{spec:?} on {threads} threads");
            }
            let want = reference_labels(&[(&t, spec.a_labels())], spec.out_labels(), spec.sizes()).unwrap();
            assert_eq!(one, want.data(), "{spec:?}");
        }
    }

    /// A permutation copy of more than `COPY_CHECK_ELEMENTS` elements ends early once the
    /// stop flag is up (the rest of its output is left as allocated), and is whole with
    /// the flag down. Both layouts are tried: rows copied, and a transpose in tiles.
    #[test]
    fn a_long_permutation_stops_inside_the_copy() {
        let n = 4 * crate::stop::COPY_CHECK_ELEMENTS;
        let src: Vec<f64> = (1..=n).map(|x| x as f64).collect();
        // `abc->bac`: rows of `c` copied; `ab->ba`: a transpose.
        for (sizes, labels, out) in [
            (&[64, 64, n / 4096][..], &[0, 1, 2][..], &[1, 0, 2][..]),
            (&[2048, n / 2048][..], &[0, 1][..], &[1, 0][..]),
        ] {
            let run = |up: bool| {
                crate::stop::with_stop(Arc::new(AtomicBool::new(up)), || permute_on(sizes, &src, labels, out, 1))
            };
            let whole = run(false);
            // Every element of `src` is non-zero, so a whole copy has no zero; and the sum
            // of the copy is the sum of the source (exact: integers below 2^53).
            assert!(whole.iter().all(|&x| x != 0.0));
            assert_eq!(whole.iter().sum::<f64>(), src.iter().sum::<f64>());
            // Stopped: the first check comes after `COPY_CHECK_ELEMENTS` elements, so most
            // of the output is never written (a fresh buffer is zeros).
            let stopped = run(true);
            let written = stopped.iter().filter(|&&x| x != 0.0).count();
            assert!(written < n / 2, "{written} of {n} elements written after the stop");
        }
    }
}
