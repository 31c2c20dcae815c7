//! Element-wise products whose output permutes the large operand, written in tiles as a
//! transpose is ([`run_tiles`]): what `elementwise.rs` runs for short rows that gather.
//!
//! Why: a product such as queens' `abcdefghijkl,dlejfi->bhdefijlacgk` has output rows of
//! three elements (the output's innermost axis is not the large operand's), so the
//! row-by-row loop paid a row's set-up per three elements and read three far-apart places
//! of the large operand per row, a cache line each, whose other elements the rows that
//! use them reached only much later. Here, as in `permute.rs`'s transpose, a block pairs
//! the output's innermost axes `O` with the large operand's innermost axes `S` (those not
//! in `O`): for each position of `S` the block's output is a contiguous run over `O`, and
//! the large operand's lines that a tile of the block reads serve all of the tile's rows
//! while they are in the first-level cache. The small operand is read through the same
//! offsets (it stays in the first caches), or once per run when `O` broadcasts it.
//!
//! Input: the fused loop of an `ElementwisePlan` (axis sizes in the output's order and each
//! tensor's strides per axis, the output's row-major), the operands and the output.
//! Output invariant: every element is written once, `f(a[..], b[..])` of the same elements
//! as any other order would take, so the result does not depend on the tiles or threads.
//! Threads take chunks of the output along its leading axes, which stay out of the blocks.
//!
//! Cost: `O(|out|)` products; offset tables of `|O| + |S|` entries per tensor.

use smallvec::SmallVec;

use crate::elem::Elem;
use crate::scan::{RangeScan, SliceScan};

/// Each side of a block holds at least this many elements (or all its axes allow).
const BLOCK: usize = 32;

/// Side of the square tiles a block is walked in: a tile's lines of the large operand
/// (its rows along `S`, one or two lines per position of `O`) stay in the first-level cache.
const TILE: usize = 32;

/// Chunks of the output (along its leading axes) hold at most this many elements unless the
/// axes run out, so that the scan of a chunk right after it is written reads it from the
/// second-level cache, and the threads have several chunks each.
const CHUNK_ELEMENTS: usize = 1 << 15;

/// The loop of an element-wise product: per axis (in the output's order) its size and the
/// strides of `a`, `b` and the output.
pub(crate) struct Loop<'p> {
    /// The size of each axis.
    pub(crate) sizes: &'p [usize],
    /// The strides of `a`, `b` and the output per axis (0 where a tensor lacks it).
    pub(crate) strides: [&'p [usize]; 3],
}

/// Per position of a block side, the offsets in `a`, `b` and the output.
#[derive(Default)]
struct Side {
    a: Vec<usize>,
    b: Vec<usize>,
    out: Vec<usize>,
}

impl Side {
    /// The offsets of every position of `axes` (innermost first), in row-major order.
    fn of(l: &Loop<'_>, axes: &[usize]) -> Side {
        let mut side = Side { a: vec![0], b: vec![0], out: vec![0] };
        for &c in axes.iter() {
            let inner = side.a.len();
            for i in 1..l.sizes[c] {
                for t in 0..inner {
                    side.a.push(side.a[t] + i * l.strides[0][c]);
                    side.b.push(side.b[t] + i * l.strides[1][c]);
                    side.out.push(side.out[t] + i * l.strides[2][c]);
                }
            }
        }
        side
    }
}

/// Writes `out[i] = f(a[..], b[..])` for every element of the loop `l` in blocks of the
/// output's and the large operand's innermost axes (module docs), the output's chunks over
/// `threads` threads of the current rayon pool (one: in place), each chunk scanned with
/// `scan` right after it is written.
pub(crate) fn run_tiles<T: Elem, F: Fn(T, T) -> T + Sync>(
    l: &Loop<'_>,
    (a, b): (&[T], &[T]),
    out: &mut [T],
    f: &F,
    threads: usize,
    scan: Option<SliceScan<T>>,
) -> RangeScan {
    let k = l.sizes.len();
    let len = out.len();
    // The leading axes `0..lead` cut the output into chunks; never the innermost axis.
    let (mut lead, mut chunks) = (0, 1usize);
    while lead + 1 < k && (chunks < 4 * threads || len / chunks > CHUNK_ELEMENTS) {
        chunks *= l.sizes[lead];
        lead += 1;
    }
    // `O`: the output's innermost axes, contiguous in the output.
    let (mut o_axes, mut no) = (SmallVec::<[usize; 8]>::new(), 1usize);
    for c in (lead..k).rev() {
        if no >= BLOCK {
            break;
        }
        o_axes.push(c);
        no *= l.sizes[c];
    }
    // `S`: the large operand's innermost axes of the rest, its smallest strides first.
    let big = if a.len() >= b.len() { 0 } else { 1 };
    let mut rest: SmallVec<[usize; 8]> = (lead..k).filter(|c| !o_axes.contains(c)).collect();
    rest.sort_by_key(|&c| l.strides[big][c]);
    let (mut s_axes, mut ns) = (SmallVec::<[usize; 8]>::new(), 1usize);
    for &c in &rest {
        if ns >= BLOCK || l.strides[big][c] == 0 {
            break;
        }
        s_axes.push(c);
        ns *= l.sizes[c];
    }
    let (o, s) = (Side::of(l, &o_axes), Side::of(l, &s_axes));
    debug_assert!(o.out.iter().enumerate().all(|(i, &x)| i == x), "O is the output's innermost run");
    // The odometer over the axes in neither side nor the chunks', innermost last.
    let outer: SmallVec<[usize; 8]> = (lead..k).filter(|c| !o_axes.contains(c) && !s_axes.contains(c)).collect();
    let chunk_len = len / chunks;
    let chunk = |i: usize, dst: &mut [T]| -> RangeScan {
        // Chunk `i`'s offsets in `a` and `b`: `i` spelled in the leading axes' sizes.
        let (mut pa, mut pb, mut r) = (0usize, 0usize, i);
        for c in (0..lead).rev() {
            let x = r % l.sizes[c];
            r /= l.sizes[c];
            pa += x * l.strides[0][c];
            pb += x * l.strides[1][c];
        }
        blocks(l, &outer, (&o, &s), (a, pa), (b, pb), dst, f);
        scan.map_or(RangeScan::EMPTY, |scan| scan(dst))
    };
    if threads > 1 && chunks > 1 {
        use rayon::prelude::*;
        out.par_chunks_mut(chunk_len)
            .enumerate()
            .map(|(i, d)| chunk(i, d))
            .reduce(|| RangeScan::EMPTY, RangeScan::merge)
    } else {
        out.chunks_mut(chunk_len).enumerate().fold(RangeScan::EMPTY, |acc, (i, d)| acc.merge(chunk(i, d)))
    }
}

/// One chunk of [`run_tiles`]: every block of the odometer over `outer`, from offsets `pa`
/// and `pb` of `a` and `b`, into `dst`.
fn blocks<T: Elem, F: Fn(T, T) -> T>(
    l: &Loop<'_>,
    outer: &[usize],
    (o, s): (&Side, &Side),
    (a, mut pa): (&[T], usize),
    (b, mut pb): (&[T], usize),
    dst: &mut [T],
    f: &F,
) {
    let (no, ns) = (o.a.len(), s.a.len());
    // Which operand `O` broadcasts: its value is then one per run.
    let (a_along, b_along) = (o.a.iter().any(|&x| x != 0), o.b.iter().any(|&x| x != 0));
    // Whether `a` is read in order along `O`: its rows are then slices.
    let a_runs = o.a.iter().enumerate().all(|(i, &x)| i == x);
    let mut idx: SmallVec<[usize; 8]> = SmallVec::from_elem(0, outer.len());
    let mut po = 0usize;
    loop {
        if crate::stop::requested() {
            return; // the evaluation is ending with an error; the output is discarded
        }
        for s0 in (0..ns).step_by(TILE) {
            let s1 = (s0 + TILE).min(ns);
            for o0 in (0..no).step_by(TILE) {
                let o1 = (o0 + TILE).min(no);
                let (oa, ob) = (&o.a[o0..o1], &o.b[o0..o1]);
                for j in s0..s1 {
                    let (qa, qb, qo) = (pa + s.a[j], pb + s.b[j], po + s.out[j]);
                    let row = &mut dst[qo + o0..qo + o1];
                    match (a_along, b_along) {
                        (true, false) if a_runs => {
                            let y = b[qb];
                            row.iter_mut().zip(&a[qa + o0..qa + o1]).for_each(|(x, &v)| *x = f(v, y));
                        }
                        (true, false) => {
                            let y = b[qb];
                            row.iter_mut().zip(oa).for_each(|(x, &da)| *x = f(a[qa + da], y));
                        }
                        (false, true) => {
                            let v = a[qa];
                            row.iter_mut().zip(ob).for_each(|(x, &db)| *x = f(v, b[qb + db]));
                        }
                        _ => row.iter_mut().zip(oa).zip(ob).for_each(|((x, &da), &db)| *x = f(a[qa + da], b[qb + db])),
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
            pa += l.strides[0][ax];
            pb += l.strides[1][ax];
            po += l.strides[2][ax];
            if idx[x] < l.sizes[ax] {
                break;
            }
            pa -= l.strides[0][ax] * l.sizes[ax];
            pb -= l.strides[1][ax] * l.sizes[ax];
            po -= l.strides[2][ax] * l.sizes[ax];
            idx[x] = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// Row-major strides of the axes `order` (a subset of `0..sizes.len()`, outermost
    /// first), per axis (0 for the others).
    fn strides_of(order: &[usize], sizes: &[usize]) -> Vec<usize> {
        let mut strides = vec![0; sizes.len()];
        let mut s = 1;
        for &c in order.iter().rev() {
            strides[c] = s;
            s *= sizes[c];
        }
        strides
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(96))]

        /// Loops of up to six axes of 1 to 5 (one of them long now and then), the large
        /// operand any permutation of them and the small one any of them in any order, on
        /// one thread and on a pool's two: every element the product of the elements a
        /// plain walk of the loop pairs (the model), bit for bit, and the chunks' scans
        /// merged into the scan of the whole.
        #[test]
        fn blocks_equal_a_plain_walk(
            sizes in proptest::collection::vec(1usize..=5, 1..=6),
            long in proptest::option::of(40usize..80),
            big in Just((0..6).collect::<Vec<usize>>()).prop_shuffle(),
            small in proptest::sample::subsequence((0..6).collect::<Vec<usize>>(), 0..=6).prop_shuffle(),
            swap in any::<bool>(),
        ) {
            let mut sizes = sizes;
            if let Some(n) = long {
                sizes[0] = n;
            }
            let k = sizes.len();
            let big: Vec<usize> = big.into_iter().filter(|&c| c < k).collect();
            let small: Vec<usize> = small.into_iter().filter(|&c| c < k).collect();
            let len: usize = sizes.iter().product();
            let (sb, ss) = (strides_of(&big, &sizes), strides_of(&small, &sizes));
            let so = strides_of(&(0..k).collect::<Vec<_>>(), &sizes);
            let small_len: usize = small.iter().map(|&c| sizes[c]).product();
            let large: Vec<f64> = (0..len).map(|i| 0.5 + i as f64).collect();
            let little: Vec<f64> = (0..small_len).map(|i| 3.0 - 0.25 * i as f64).collect();
            let (a, b, sa, sbb) = if swap { (&little, &large, &ss, &sb) } else { (&large, &little, &sb, &ss) };
            let l = Loop { sizes: &sizes, strides: [sa, sbb, &so] };
            let f = |x: f64, y: f64| x * y;
            // The model: each output element from its index, axis by axis.
            let want: Vec<f64> = (0..len)
                .map(|e| {
                    let (mut rest, mut pa, mut pb) = (e, 0, 0);
                    for c in (0..k).rev() {
                        let x = rest % sizes[c];
                        rest /= sizes[c];
                        pa += x * l.strides[0][c];
                        pb += x * l.strides[1][c];
                    }
                    f(a[pa], b[pb])
                })
                .collect();
            let scan: SliceScan<f64> = crate::scan::slice_scan::<f64>();
            let mut one = vec![f64::NAN; len];
            let s1 = run_tiles(&l, (a, b), &mut one, &f, 1, Some(scan));
            prop_assert_eq!(&one, &want);
            let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().expect("a pool");
            let mut two = vec![f64::NAN; len];
            let s2 = pool.install(|| run_tiles(&l, (a, b), &mut two, &f, 2, Some(scan)));
            prop_assert_eq!(&two, &want);
            prop_assert_eq!(s1, scan(&want));
            prop_assert_eq!(s2, s1);
        }
    }
}
