//! Batches of strided matrices and the loop of GEMMs over them (the GEMM path of
//! `kernel.rs`, after its planner has chosen the looped labels and the groups).
//!
//! A [`MatrixView`] sees a tensor as `looped × rows × cols` without copying, when its
//! row and column groups are runs of consecutive axes and one of them has unit stride
//! ([`matrix_view`]). [`gemm_loop`] runs one GEMM per entry of the loop over the looped
//! labels (inline for tiny products, `small_gemm.rs`; faer otherwise), accumulating where
//! a looped label is absent from `c`, and cuts one large GEMM into blocks between reads of
//! the stop flag. Inside a pool a GEMM of `PAR_GEMM_MIN_MACS` or more is cut over its
//! threads ([`split_cut`]); [`batch_chunks`], [`chunk_lead`], [`outer_cut`] and
//! [`splits_each`] say how a loop of smaller ones is spread.
//! Before a GEMM of some size, its operands are read once in storage order ([`warm_parts`];
//! on a pool's threads, each reads the part of the split operand it will multiply), so
//! that faer's strided reads of an operand it does not pack find it in the cache (twice
//! where faer reads it in place, [`strided_along_k`]).
//!
//! Invariants: every element of `c`'s blocks is written by the first GEMM that reaches it
//! and accumulated into by later ones; nothing else of `c` is touched. Cost: the GEMMs'
//! `nl·m·n·k` multiply-adds and one or two reads per cache line of each warmed operand; no
//! allocation beyond faer's own packing.

use smallvec::SmallVec;

use crate::elem::{Cut, Elem, PAR_GEMM_MIN_MACS, Strided, StridedMut, gemm_cut_into, split_block};
use crate::small_gemm::{SMALL_GEMM_MAX_MACS, SMALL_N, small_gemm};
use crate::thin_gemm::{THIN_MAX, thin_gemm};

/// An operand seen as a batch of matrices without copying: per looped label its stride
/// (0 if the tensor lacks the label), and the strides of the fused row and column groups.
pub(crate) struct MatrixView {
    pub(crate) looped: SmallVec<[usize; 4]>,
    pub(crate) strides: [usize; 2],
}

/// The view of a tensor with `labels` as `looped × rows × cols`, if its labels are
/// distinct, are exactly those of `rows`, `cols` and (some of) `looped`, each of `rows` and
/// `cols` is a run of consecutive axes in the group's order, and one of the two fused
/// strides is 1 (or its dimension is 1).
pub(crate) fn matrix_view(
    labels: &[u32],
    sizes: &[usize],
    looped: &[u32],
    rows: &[u32],
    cols: &[u32],
) -> Option<MatrixView> {
    let present = looped.iter().filter(|c| labels.contains(c)).count();
    let distinct = labels.iter().enumerate().all(|(i, c)| !labels[..i].contains(c));
    if labels.len() != present + rows.len() + cols.len() || !distinct {
        return None;
    }
    // Row-major strides computed where needed, with no allocation: the GEMM path asks for
    // three views per call, and the layout search for several per candidate order.
    let stride = |p: usize| labels[p + 1..].iter().map(|&c| sizes[c as usize]).product::<usize>();
    let axis = |c: u32| labels.iter().position(|&l| l == c);
    let group = |g: &[u32]| -> Option<usize> {
        let Some(&first) = g.first() else { return Some(0) };
        let p = axis(first)?;
        (labels.get(p..p + g.len())? == g).then(|| stride(p + g.len() - 1))
    };
    let fused = [group(rows)?, group(cols)?];
    let looped = looped.iter().map(|&c| axis(c).map_or(0, stride)).collect();
    let prod = |g: &[u32]| g.iter().map(|&c| sizes[c as usize]).product::<usize>();
    crate::elem::layout(prod(rows), prod(cols), fused)?;
    Some(MatrixView { looped, strides: fused })
}

/// Values of the leading looped label per chunk when the loop of GEMMs is spread over the
/// current pool's threads, or `None` to run it on this thread.
///
/// Cost decides between splitting each GEMM and splitting the loop: a GEMM of at least
/// `PAR_GEMM_MIN_MACS` multiply-adds splits by itself (`elem.rs`); a loop of smaller ones
/// (a batch of `d = 12` or `64³` products) would otherwise run on one thread however many
/// there are, so it is cut into chunks of its leading label once the whole loop holds that
/// much work. Only when that label is also `c`'s leading axis, so that chunks write
/// disjoint, contiguous blocks of `c` (and a looped contracted label, which adds into the
/// same block, can never be split).
pub(crate) fn batch_chunks(
    loop_sizes: &[usize],
    c_view: &MatrixView,
    c_len: usize,
    [m, n, k]: [usize; 3],
) -> Option<usize> {
    let per_call = m.saturating_mul(n).saturating_mul(k);
    let &lead = loop_sizes.first()?;
    let calls: usize = loop_sizes.iter().product();
    let leads_c = c_view.looped[0] > 0 && c_view.looped[0].saturating_mul(lead) == c_len;
    if !leads_c || lead < 2 || per_call >= PAR_GEMM_MIN_MACS || calls.saturating_mul(per_call) < PAR_GEMM_MIN_MACS {
        return None;
    }
    let threads = crate::elem::caller_pool_threads();
    (threads > 1).then(|| lead.div_ceil(4 * threads))
}

/// For a loop of GEMMs that [`batch_chunks`] cannot spread because `c`'s leading axis is
/// not its leading looped label: the position in the loop of a label `c` has (`in_c`),
/// the largest, which the GEMM path may move to the front of the loop and of a
/// contiguous `c` written in that order, so that the loop is cut into chunks of it, and
/// then permute into the result's order. `None` outside a pool of several threads, when
/// `c` has no looped label, when a GEMM splits by itself or the loop holds too little
/// work, and when the permutation back would cost a visible share of it (fewer than
/// [`REORDERED_MIN_MACS_PER_ELEMENT`] multiply-adds per element of `c`).
///
/// Why: a GEMM path that reads its largest operand in place may loop over labels that
/// `c` holds in the middle of its axes: `lattice_8x8_bond4`'s `abcdefgh,ijfhklmabc->
/// degijklm` runs 256 GEMMs of `64³` looped over `i j f h`, and its 4 ms stayed on one
/// thread of two.
pub(crate) fn chunk_lead(loop_sizes: &[usize], in_c: &[bool], c_len: usize, [m, n, k]: [usize; 3]) -> Option<usize> {
    let per_call = m.saturating_mul(n).saturating_mul(k);
    let macs = loop_sizes.iter().fold(per_call, |w, &s| w.saturating_mul(s));
    let threads = crate::elem::caller_pool_threads();
    if threads < 2
        || per_call >= PAR_GEMM_MIN_MACS
        || macs < PAR_GEMM_MIN_MACS
        || macs < c_len.saturating_mul(REORDERED_MIN_MACS_PER_ELEMENT)
    {
        return None;
    }
    // The largest looped label of `c` (the first of equals), of at least two values.
    let mut best: Option<usize> = None;
    for (i, (&s, &held)) in loop_sizes.iter().zip(in_c).enumerate() {
        if held && s >= 2 && best.is_none_or(|b| s > loop_sizes[b]) {
            best = Some(i);
        }
    }
    best
}

/// Runs the loop of GEMMs of [`gemm_loop`] over the whole of `c` (labels `c_labels`, in
/// order): on the current pool's threads in chunks of its leading looped label where
/// [`batch_chunks`] cuts it, in chunks of `c`'s outermost axes where [`outer_cut`] does,
/// else on this thread. `looped` are the loop's labels (sizes `loop_sizes`), `groups` the
/// labels of the row and column groups.
pub(crate) fn spread_loop<T: Elem>(
    conj: [bool; 2],
    [m, n, k]: [usize; 3],
    (loop_sizes, looped): (&[usize], &[u32]),
    operands: [(&[T], &MatrixView); 2],
    (c, c_view, c_labels): (&mut [T], &MatrixView, &[u32]),
    sizes: &[usize],
    groups: [&[u32]; 2],
) {
    let [(_, a_view), (_, b_view)] = operands;
    if let Some(per) = batch_chunks(loop_sizes, c_view, c.len(), [m, n, k]) {
        use rayon::prelude::*;
        // Chunks of the leading looped label, which leads `c` too: disjoint blocks of
        // `c`, each a loop of its own over the GEMMs of its values.
        let step = c_view.looped[0];
        c.par_chunks_mut(per * step).enumerate().for_each(|(j, block)| {
            let first = j * per;
            let mut ls: SmallVec<[usize; 4]> = loop_sizes.into();
            ls[0] = per.min(loop_sizes[0] - first);
            let at = [first * a_view.looped[0], first * b_view.looped[0]];
            gemm_loop(conj, [m, n, k], &ls, operands, at, (block, c_view), PAR_GEMM_MIN_MACS);
        });
        return;
    }
    match outer_cut(c_labels, sizes, looped, groups, [m, n, k]) {
        Some(cut) => cut.run(conj, [m, n, k], loop_sizes, operands, c, c_view),
        None => {
            let each = splits_each(loop_sizes, [m, n, k]);
            #[cfg(test)]
            tests::SPLIT_EACH.set(tests::SPLIT_EACH.get() + usize::from(each));
            let from = if each { LOOP_SPLIT_MIN_MACS } else { PAR_GEMM_MIN_MACS };
            gemm_loop(conj, [m, n, k], loop_sizes, operands, [0, 0], (c, c_view), from)
        }
    }
}

/// For a loop of GEMMs inside a pool of several threads that no chunking spreads
/// ([`batch_chunks`], [`chunk_lead`], [`outer_cut`]): whether each GEMM is cut over the
/// pool ([`split_cut`]) from [`LOOP_SPLIT_MIN_MACS`] multiply-adds instead of
/// `PAR_GEMM_MIN_MACS`. Only when the loop holds `PAR_GEMM_MIN_MACS`, each GEMM at least
/// [`LOOP_SPLIT_MIN_MACS`] and less than `PAR_GEMM_MIN_MACS` (it would split anyway),
/// neither side is one, and the longer side has [`LOOP_SPLIT_MIN_SIDE`] per thread. The
/// lower floor is passed to [`gemm_loop`] for this loop's GEMMs only, never through state
/// that other work on the thread would see (a thread waiting in a join runs other jobs).
///
/// Why: `gm_queens_5x5_3`'s `ab,cdaefghijklmn->bcdefghijklmn` loops 9 GEMMs of
/// `3 × 59049 × 3` whose result leads with the row label `b`: no chunk of the loop or of
/// `c`'s outer axes keeps the GEMM's kernel, so the step ran on one thread of two; the
/// GEMMs' long side can be cut.
fn splits_each(loop_sizes: &[usize], [m, n, k]: [usize; 3]) -> bool {
    let per_call = m.saturating_mul(n).saturating_mul(k);
    let calls = loop_sizes.iter().product::<usize>();
    let threads = crate::elem::caller_pool_threads();
    threads > 1
        && (LOOP_SPLIT_MIN_MACS..PAR_GEMM_MIN_MACS).contains(&per_call)
        && calls.saturating_mul(per_call) >= PAR_GEMM_MIN_MACS
        && m.min(n) > 1
        && m.max(n) >= LOOP_SPLIT_MIN_SIDE * threads
}

/// The multiply-adds from which [`splits_each`] cuts a GEMM of a loop: a block of a
/// two-way cut is still far more work than the fork and join.
const LOOP_SPLIT_MIN_MACS: usize = 1 << 18;

/// The fewest rows or columns per thread of the longer side for [`splits_each`]: blocks
/// stay wide panels for faer's micro-kernels.
const LOOP_SPLIT_MIN_SIDE: usize = 64;

/// What one of `c`'s outermost axes fixes in a chunk of an [`OuterCut`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fixed {
    /// A looped label, by its position in the loop.
    Loop(usize),
    /// A label of the row group: each of its values is this many rows.
    Rows(usize),
    /// A label of the column group: each of its values is this many columns.
    Cols(usize),
}

/// A loop of GEMMs cut into chunks by `c`'s outermost axes ([`outer_cut`]): a chunk is one
/// value of those axes, a contiguous block of `c`, and runs the loop with the looped labels
/// among them fixed and the rows or columns they select.
#[derive(Debug)]
pub(crate) struct OuterCut {
    /// The outermost axes of `c`, outermost first: what each fixes, and its size.
    axes: SmallVec<[(Fixed, usize); 4]>,
    /// Elements of `c` per chunk (the product of its other axes).
    block: usize,
}

/// For a loop of GEMMs inside a pool of several threads that neither [`batch_chunks`]
/// nor [`chunk_lead`] spreads: `c`'s outermost axes (labels `c_labels` in `c`'s order),
/// as many as make [`OUTER_CUT_CHUNKS_PER_THREAD`] chunks per thread, when each is a
/// looped label or a label of the row (`rows`) or column (`cols`) group; `None` outside a
/// pool, when a GEMM splits by itself, when the loop holds less than `PAR_GEMM_MIN_MACS`,
/// when `c`'s outermost axis is none of those, and when a cut GEMM would change kernel
/// (`small_gemm.rs`'s, `thin_gemm.rs`'s or faer's matrix-vector product for a single row
/// or column, instead of the whole GEMM's, which sum in other orders).
///
/// Why: a loop whose result leads with a row label cannot be cut by a looped label in
/// place, and when it holds few multiply-adds per element of `c` the permutation back of
/// [`chunk_lead`] costs more than the second thread saves. Each chunk's GEMMs keep their
/// order and their sums (a looped label that `c` lacks is never fixed), so the result is
/// the one-thread one bit for bit (tested). A row label that is the whole row group (as
/// `gm_queens_5x5_3`'s `b` in `ab,cdeafghijklmn->bcdefghijklmn`, GEMMs of `3 × 19683 × 3`)
/// would be cut to single rows, which faer sums as a matrix-vector product: not cut.
pub(crate) fn outer_cut(
    c_labels: &[u32],
    sizes: &[usize],
    looped: &[u32],
    [rows, cols]: [&[u32]; 2],
    [m, n, k]: [usize; 3],
) -> Option<OuterCut> {
    let per_call = m.saturating_mul(n).saturating_mul(k);
    let calls = looped.iter().fold(1usize, |w, &l| w.saturating_mul(sizes[l as usize]));
    let threads = crate::elem::caller_pool_threads();
    if threads < 2 || per_call >= PAR_GEMM_MIN_MACS || calls.saturating_mul(per_call) < PAR_GEMM_MIN_MACS {
        return None;
    }
    let want = OUTER_CUT_CHUNKS_PER_THREAD * threads;
    let (mut m1, mut n1, mut chunks) = (m, n, 1usize);
    let mut axes: SmallVec<[(Fixed, usize); 4]> = SmallVec::new();
    for &l in c_labels {
        if chunks >= want {
            break;
        }
        let size = sizes[l as usize];
        // `c`'s row and column groups are runs of its axes in the groups' orders, so an
        // axis of a group met here is the group's next label.
        let fixed = if let Some(x) = looped.iter().position(|&c| c == l) {
            Fixed::Loop(x)
        } else if rows.contains(&l) {
            m1 /= size;
            Fixed::Rows(m1)
        } else if cols.contains(&l) {
            n1 /= size;
            Fixed::Cols(n1)
        } else {
            break;
        };
        axes.push((fixed, size));
        chunks = chunks.saturating_mul(size);
    }
    let c_len = c_labels.iter().fold(1usize, |w, &l| w.saturating_mul(sizes[l as usize]));
    (chunks >= 2 && same_kernel([m, n, k], [m1, n1])).then(|| OuterCut { axes, block: c_len / chunks })
}

/// Whether a block of `m1 × n1` of a GEMM of `[m, n, k]` (a chunk of an [`OuterCut`], a
/// block of a [`Cut`]) runs in the kernel the whole GEMM runs in: inline or not
/// (`small_gemm.rs`, up to `SMALL_GEMM_MAX_MACS`, which is also where faer's nano-GEMM
/// ends), inline by the same `small_gemm` kernel (which depends on whether a side fits
/// `SMALL_N`), `thin_gemm.rs`'s or not, and one row or column (faer's matrix-vector
/// product) only where the whole is one. Kernels sum in orders of their own, so a cut
/// that changed one would change the result's bits. Past the inline size `SMALL_N` does
/// not choose a kernel: faer's blocked GEMM sums each element along `k` in the same order
/// whatever its rows and columns (a `40 × 9` GEMM cut into 24 rows and 16 equals the
/// whole bit for bit: `cut_gemms_equal_the_whole_bit_for_bit`).
fn same_kernel([m, n, k]: [usize; 3], [m1, n1]: [usize; 2]) -> bool {
    let inline = |[m, n, k]: [usize; 3]| m.saturating_mul(n).saturating_mul(k) <= SMALL_GEMM_MAX_MACS;
    let thin = |[m, n]: [usize; 2]| m <= THIN_MAX && n <= THIN_MAX;
    let small = |d: usize| d <= SMALL_N;
    let whole_inline = inline([m, n, k]);
    inline([m1, n1, k]) == whole_inline
        && thin([m1, n1]) == thin([m, n])
        && (m1 == 1) == (m == 1)
        && (n1 == 1) == (n == 1)
        && (!whole_inline || (small(m1) == small(m) && small(n1) == small(n)))
}

/// The chunks per thread [`outer_cut`] aims at, so that uneven chunks (three rows over
/// two threads) even out.
const OUTER_CUT_CHUNKS_PER_THREAD: usize = 4;

impl OuterCut {
    /// Runs the loop of GEMMs of [`gemm_loop`] (its arguments, `c` from its start) chunk by
    /// chunk on the current pool's threads.
    pub(crate) fn run<T: Elem>(
        &self,
        conj: [bool; 2],
        [m, n, k]: [usize; 3],
        loop_sizes: &[usize],
        [(a_data, a_view), (b_data, b_view)]: [(&[T], &MatrixView); 2],
        c: &mut [T],
        c_view: &MatrixView,
    ) {
        use rayon::prelude::*;
        let fixed: SmallVec<[bool; 4]> =
            (0..loop_sizes.len()).map(|x| self.axes.iter().any(|&(f, _)| f == Fixed::Loop(x))).collect();
        let free = |v: &[usize]| -> SmallVec<[usize; 4]> {
            v.iter().zip(&fixed).filter(|&(_, &f)| !f).map(|(&s, _)| s).collect()
        };
        let view = |v: &MatrixView| MatrixView { looped: free(&v.looped), strides: v.strides };
        let (av, bv, cv) = (view(a_view), view(b_view), view(c_view));
        let sizes = free(loop_sizes);
        let (mut m1, mut n1) = (m, n);
        for &(f, _) in &self.axes {
            match f {
                Fixed::Rows(r) => m1 = r,
                Fixed::Cols(c) => n1 = c,
                Fixed::Loop(_) => {}
            }
        }
        c.par_chunks_mut(self.block).enumerate().for_each(|(j, block)| {
            // The chunk's value of each axis (row-major over them, the last innermost).
            let (mut pa, mut pb, mut rest) = (0usize, 0usize, j);
            for &(f, size) in self.axes.iter().rev() {
                let v = rest % size;
                rest /= size;
                match f {
                    Fixed::Loop(x) => {
                        pa += v * a_view.looped[x];
                        pb += v * b_view.looped[x];
                    }
                    Fixed::Rows(r) => pa += v * r * a_view.strides[0],
                    Fixed::Cols(c) => pb += v * c * b_view.strides[1],
                }
            }
            let operands = [(a_data, &av), (b_data, &bv)];
            gemm_loop(conj, [m1, n1, k], &sizes, operands, [pa, pb], (block, &cv), PAR_GEMM_MIN_MACS);
        });
    }
}

/// The multiply-adds per element of `c` from which [`chunk_lead`] reorders a loop: the
/// permutation back reads and writes each element once (a few nanoseconds), against
/// about a hundredth of a nanosecond per multiply-add halved by the second thread.
const REORDERED_MIN_MACS_PER_ELEMENT: usize = 256;

/// Runs the GEMMs of the loop over `loop_sizes`, `a` and `b` read from offsets `at`, into
/// `c` (the block of the loop's first entry); inside a pool, a GEMM of `split_from`
/// multiply-adds or more is cut over its threads ([`split_parts`], [`split_cut`]).
pub(crate) fn gemm_loop<T: Elem>(
    conj: [bool; 2],
    [m, n, k]: [usize; 3],
    loop_sizes: &[usize],
    [(a_data, a_view), (b_data, b_view)]: [(&[T], &MatrixView); 2],
    [mut pa, mut pb]: [usize; 2],
    (c, c_view): (&mut [T], &MatrixView),
    split_from: usize,
) {
    let nl: usize = loop_sizes.iter().product();
    let mut idx: SmallVec<[usize; 4]> = SmallVec::from_elem(0, loop_sizes.len());
    let mut pc = 0usize;
    // How many looped labels absent from `c` are past their first index.
    let mut revisits = 0usize;
    // One large GEMM runs in blocks, so that the stop flag is read between them. faer packs
    // its left operand whole in every call, and takes `b` as that operand when `c` is
    // row-major (it computes `cᵀ = bᵀ·aᵀ`): blocks cut `b`'s columns then, `a`'s rows
    // otherwise, so that the packed operand is cut, not packed again per block (MERA's
    // 990 × 2187 × 4620 step packed its `b` in each of 19 row blocks: 660 ms against 513).
    let cols = c_view.strides[1] == 1 && n > 1;
    let (len, per) = if cols { (n, m.saturating_mul(k)) } else { (m, n.saturating_mul(k)) };
    let block = block_len(per, if cols { m } else { n });
    // Each element of `a` takes part in `n` multiply-adds, of `b` in `m`.
    let large = [m, n, k].iter().product::<usize>() >= WARM_MIN_MACS;
    let warm = [large && n < WARM_MAX_REUSE, large && m < WARM_MAX_REUSE];
    // The operand a split GEMM cuts (`a`'s rows or `b`'s columns, [`split_cut`]) is read
    // ahead in the same parts on the same threads ([`warm_parts`]).
    let macs = |d: [usize; 3]| d.iter().fold(1usize, |w, &x| w.saturating_mul(x));
    let cut_parts = |dims: [usize; 3]| split_cut(dims, split_parts(macs(dims), split_from));
    let whole = cut_parts([m, n, k]);
    let twice = [strided_along_k(a_view.strides[1]), strided_along_k(b_view.strides[0])];
    for _ in 0..nl {
        if warm[0] {
            let cut = whole.filter(|c| !c.cols).map_or(1, |c| c.parts);
            warm_parts(&a_data[pa..], [m, k], a_view.strides, cut, twice[0]);
        }
        if warm[1] {
            // `b`'s columns are the rows of its transpose.
            let cut = whole.filter(|c| c.cols).map_or(1, |c| c.parts);
            let [rs, cs] = b_view.strides;
            warm_parts(&b_data[pb..], [n, k], [cs, rs], cut, twice[1]);
        }
        let mut at = if thin(
            conj,
            [m, n, k],
            [(a_data, a_view, pa), (b_data, b_view, pb)],
            (&mut c[pc..], c_view),
            revisits > 0,
        ) {
            len
        } else {
            0
        };
        while at < len {
            if crate::stop::requested() {
                return; // the evaluation is ending with an error; `c` is discarded
            }
            let part = block.min(len - at);
            let (dims, oa, ob, oc) = if cols {
                ([m, part, k], 0, at * b_view.strides[1], at * c_view.strides[1])
            } else {
                ([part, n, k], at * a_view.strides[0], 0, at * c_view.strides[0])
            };
            let a = Strided(&a_data[pa + oa..], a_view.strides);
            let b = Strided(&b_data[pb + ob..], b_view.strides);
            let (cat, ct) = (pc + oc, c_view.strides);
            // Tiny products run inline; faer's dispatch would cost more than they do.
            if !small_gemm(dims, a, b, StridedMut(&mut c[cat..], ct), conj, revisits > 0) {
                let cut = if part == len { whole } else { cut_parts(dims) };
                gemm_cut_into(dims, a, b, StridedMut(&mut c[cat..], ct), conj, revisits > 0, cut);
            }
            at += part;
        }
        for x in (0..loop_sizes.len()).rev() {
            if c_view.looped[x] == 0 && idx[x] == 0 {
                revisits += 1;
            }
            idx[x] += 1;
            pa += a_view.looped[x];
            pb += b_view.looped[x];
            pc += c_view.looped[x];
            if idx[x] < loop_sizes[x] {
                break;
            }
            pa -= a_view.looped[x] * loop_sizes[x];
            pb -= b_view.looped[x] * loop_sizes[x];
            pc -= c_view.looped[x] * loop_sizes[x];
            idx[x] = 0;
            if c_view.looped[x] == 0 {
                revisits -= 1;
            }
        }
    }
}

/// The rows or columns of one block of a large GEMM ([`gemm_loop`]), each of `per`
/// multiply-adds and `written` elements of `c`: about [`block_macs`] multiply-adds, and
/// about a stop check's worth of `c` at most (a product over a short `k`, an outer
/// product, is little arithmetic over a large output, whose fresh pages can take longer
/// to fault in than Ctrl-C may wait) but, for that bound, never fewer than `SMALL_N`: a
/// block of one row or column runs as faer's matrix-vector product, which reads the other
/// operand whole again for each block. At least one row or column.
fn block_len(per: usize, written: usize) -> usize {
    let by_writes = (crate::stop::COPY_CHECK_ELEMENTS / written.max(1)).max(SMALL_N);
    (block_macs() / per.max(1)).min(by_writes).max(1)
}

/// Whether a warmed operand whose stride along the contracted dimension is `stride` is
/// read ahead twice when the first pass found it out of the cache ([`again_if_cold`]).
/// Why: faer packs an operand that is contiguous along `k`, streaming it, but reads one
/// that is not in place, a cache line per `k` and row block, and after one pass in
/// storage order such an operand was still not where those reads found it (the matrix
/// chain's `ab,ac->bc` steps); a packed operand does not repay the second pass
/// (`docs/PERFORMANCE.md`, *The matrix chain's one-thread forward: its in-place operands
/// read ahead twice*).
fn strided_along_k(stride: usize) -> bool {
    stride != 1
}

/// Multiply-adds of one GEMM from which its operands are fetched into the cache in
/// storage order before it runs ([`warm_parts`]).
const WARM_MIN_MACS: usize = 1 << 18;

/// An operand is read ahead only when each of its elements takes part in fewer
/// multiply-adds than this (the other side of the GEMM is thin): then the GEMM's time is
/// mostly its reads of that operand. Over more, the multiply-adds hide the reads' latency
/// and reading ahead an operand already cached only costs: a batch of 32 GEMMs of `64³`
/// took 0.27 ms against 0.25, `bin_matmul_256` 2% longer.
const WARM_MAX_REUSE: usize = 64;

/// The most bytes of one operand [`warm_parts`] reads ahead: twice a core's L2 cache (2 MiB
/// here). A larger operand is not kept whole by the cache while the GEMM runs, and its
/// GEMM is long enough that faer's own packing streams it (on the matrix chain, caps of
/// 2, 4 and 100 MB gave the same times; 1 MB left its 1.5 to 2 MB inputs cold).
const WARM_MAX_BYTES: usize = 4 << 20;

/// How many threads a GEMM of `macs` multiply-adds is cut over: the current pool's from
/// `from` on (inside a pool; `PAR_GEMM_MIN_MACS`, or less for a loop that [`splits_each`]),
/// else one.
fn split_parts(macs: usize, from: usize) -> usize {
    if macs >= from { crate::elem::caller_pool_threads() } else { 1 }
}

/// How a GEMM of `[m, n, k]` is cut over `parts` threads (fewer if that is what keeps the
/// kernel): its longer side first (columns when `n ≥ m`), else its other side, in blocks
/// of [`split_block`]'s sizes, the first cut whose blocks all hold rows (columns) and each
/// run the whole GEMM's kernel ([`same_kernel`]); `None` (one thread) when there is none.
///
/// Why: `split_block` rounds blocks up to faer's panels, so a short side can leave a
/// block of one column (`2 × 9 × k`: 8 and 1), which faer runs as a matrix-vector product
/// summing in another order, or no second block at all.
fn split_cut([m, n, k]: [usize; 3], parts: usize) -> Option<Cut> {
    let sides = if n >= m { [true, false] } else { [false, true] };
    (2..=parts).rev().flat_map(|p| sides.map(|cols| Cut { cols, parts: p })).find(|&Cut { cols, parts }| {
        let len = if cols { n } else { m };
        cuts(len, parts).iter().all(|&(r0, r1)| {
            let block = if cols { [m, r1 - r0] } else { [r1 - r0, n] };
            r1 > r0 && same_kernel([m, n, k], block)
        })
    })
}

/// The threads on which the GEMM path packs an operand of `len` elements for GEMMs of
/// `macs` multiply-adds in all: the current pool's when they hold `PAR_GEMM_MIN_MACS` or
/// more ([`split_parts`]: one such GEMM splits over the pool, and a loop of smaller ones
/// is spread where [`batch_chunks`] or [`chunk_lead`] can) and the copy holds at least
/// [`PAR_PACK_MIN_ELEMENTS`]; else one. A copy is exact, so the split changes no value.
///
/// Why: `permute.rs` splits only copies of `2^20` elements or more, and an operand of
/// fewer packed on one thread while the GEMM after it ran on two left the second thread
/// idle for that time: `rrg_60_d3_bond3_seed1`'s `abcdefghij,klmchenjopbi->adfgklmnop`
/// (one GEMM of `81 × 729 × 729`, `b`'s `3^12` elements packed) spent more of its time
/// in that copy than in any of faer's micro-kernels.
pub(crate) fn pack_threads(len: usize, macs: usize) -> usize {
    if len >= PAR_PACK_MIN_ELEMENTS { split_parts(macs, PAR_GEMM_MIN_MACS) } else { 1 }
}

/// The fewest elements [`pack_threads`] packs on several threads: a copy of this many
/// takes some 50 µs, several times what handing half of it to another thread costs.
const PAR_PACK_MIN_ELEMENTS: usize = 1 << 15;

/// The row ranges `elem.rs`'s split GEMM gives its `parts` blocks of an `r`-row side: each
/// block but the last `rest / left` rows rounded up to a multiple of 8, in order.
fn cuts(r: usize, parts: usize) -> SmallVec<[(usize, usize); 4]> {
    let mut out = SmallVec::new();
    let mut at = 0;
    for left in (1..=parts.max(1)).rev() {
        let h = split_block(r - at, left);
        out.push((at, at + h));
        at += h;
    }
    out
}

/// Reads an `r × c` matrix with strides `s` ahead of a GEMM that reads it, once per cache
/// line (again with `twice` if the first pass was slow: [`again_if_cold`]), its rows cut
/// into `parts` ranges as the GEMM's split cuts them ([`cuts`]), each read by the pool's
/// thread that will multiply it (rayon gives the blocks of both
/// parallel loops out alike: the first on the calling thread, the next to the thread that
/// steals it). Why: faer reads an operand it does not pack along its other dimension, a
/// few cache lines per row with rows thousands of bytes apart, which the hardware
/// prefetcher does not follow; an operand that is not in the cache (a network's input,
/// read once per evaluation) then costs a memory latency per line. The matrix chain's
/// steps of `480 × 404 × 21` took 0.74 ms in the program against 0.19 ms hot. Read by one
/// thread, the read-ahead stayed on one core while the GEMM split over two: the chain's
/// forward on two threads spent as long reading its 72 MB of inputs as on one.
fn warm_parts<T: Elem>(data: &[T], [r, c]: [usize; 2], [rs, cs]: [usize; 2], parts: usize, twice: bool) {
    if r == 0 || c == 0 {
        return;
    }
    let span = ((r - 1) * rs + (c - 1) * cs + 1).min(data.len());
    if size_of_val(&data[..span]) > WARM_MAX_BYTES {
        return;
    }
    if parts < 2 {
        // The whole span, as one thread always read it.
        return again_if_cold(twice, size_of_val(&data[..span]), || read_lines(&data[..span]));
    }
    use rayon::prelude::*;
    let ranges = cuts(r, parts);
    ranges.into_par_iter().for_each(|rows| {
        let bytes = (rows.1 - rows.0) * c * size_of::<T>();
        again_if_cold(twice, bytes, || warm_rows(&data[..span], [rows.0, rows.1], c, [rs, cs]));
    });
}

/// Runs `read` (a pass over `bytes` of an operand), and with `twice` ([`strided_along_k`])
/// runs it again if the first pass was slower than [`CACHED_BYTES_PER_NS`]: an operand
/// the pass found in the cache (an intermediate just written, as in
/// `lm_batch_likelihood_brackets_4_4d`'s loops of GEMMs, which a second pass made slower)
/// needs no second pass. The decision reads the clock; the result does not depend on it
/// (reads only).
fn again_if_cold(twice: bool, bytes: usize, read: impl Fn()) {
    if !twice {
        read();
        return;
    }
    let start = std::time::Instant::now();
    read();
    if (start.elapsed().as_nanos() as f64) * CACHED_BYTES_PER_NS > bytes as f64 {
        read();
    }
}

/// The rate above which a pass of [`warm_parts`] is taken to have found its operand in
/// the cache: about twice what a pass over memory reached here, several times less than
/// a pass over the L2 cache (the rates are in the same section).
const CACHED_BYTES_PER_NS: f64 = 24.0;

/// Reads rows `r0..r1` (all `c` columns, strides `[rs, cs]`) of the matrix at the start
/// of `data`, one element per cache line, in storage order: each column's run of those
/// rows when the rows are contiguous and a run fills a cache line, the rows' whole span
/// otherwise.
fn warm_rows<T: Elem>(data: &[T], rows: [usize; 2], c: usize, strides: [usize; 2]) {
    let line = (64 / std::mem::size_of::<T>()).max(1);
    row_runs(data.len(), rows, c, strides, line, |lo, hi| read_lines(&data[lo..hi]));
}

/// The index ranges [`warm_rows`] reads (of a slice of `len` elements, `line` elements a
/// cache line), in storage order, each passed to `run`.
fn row_runs(
    len: usize,
    [r0, r1]: [usize; 2],
    c: usize,
    [rs, cs]: [usize; 2],
    line: usize,
    mut run: impl FnMut(usize, usize),
) {
    if r0 >= r1 || c == 0 {
        return;
    }
    let mut emit = |lo: usize, hi: usize| {
        let (lo, hi) = (lo.min(len), hi.min(len));
        if lo < hi {
            run(lo, hi);
        }
    };
    if rs == 1 && c > 1 && r1 - r0 >= line {
        for j in 0..c {
            emit(j * cs + r0, j * cs + r1);
        }
    } else {
        emit(r0 * rs, (r1 - 1) * rs + (c - 1) * cs + 1);
    }
}

/// One read per cache line of `data` and of its last element, in order: the loads are
/// independent, so the core keeps many in flight and the hardware prefetcher follows the
/// stream (a prefetch instruction would need `unsafe`, which this crate forbids).
fn read_lines<T: Elem>(data: &[T]) {
    let per_line = (64 / std::mem::size_of::<T>()).max(1);
    let seen = data.iter().step_by(per_line).chain(data.last()).fold(0u64, |h, x| h ^ x.to_bits()[0]);
    std::hint::black_box(seen);
}

/// Runs one GEMM of the loop in `thin_gemm.rs` when it is a few rows and columns summed
/// over a long `k` with both operands contiguous along `k`, and says whether it did. Such a
/// product is not cut into blocks (its output is a few elements): the kernel reads the stop
/// flag between its chunks, and forms them on the pool's threads.
fn thin<T: Elem>(
    conj: [bool; 2],
    [m, n, k]: [usize; 3],
    [(a, va, pa), (b, vb, pb)]: [(&[T], &MatrixView, usize); 2],
    (c, vc): (&mut [T], &MatrixView),
    accumulate: bool,
) -> bool {
    m.saturating_mul(n).saturating_mul(k) > SMALL_GEMM_MAX_MACS
        && thin_gemm(
            [m, n, k],
            Strided(&a[pa..], va.strides),
            Strided(&b[pb..], vb.strides),
            StridedMut(c, vc.strides),
            conj,
            accumulate,
        )
}

/// The multiply-adds of one block of a large GEMM: [`crate::stop::GEMM_BLOCK_MACS`], or
/// in tests a small figure that cuts small products into blocks.
fn block_macs() -> usize {
    #[cfg(test)]
    if let Some(b) = tests::BLOCK_MACS.get() {
        return b;
    }
    crate::stop::GEMM_BLOCK_MACS
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use proptest::prelude::*;

    use super::*;
    use crate::elem::c64;

    thread_local! {
        /// This thread's block size for [`block_macs`], when set.
        pub(super) static BLOCK_MACS: Cell<Option<usize>> = const { Cell::new(None) };
        /// The loops this thread ran with each GEMM cut one by one ([`splits_each`]).
        pub(super) static SPLIT_EACH: Cell<usize> = const { Cell::new(0) };
    }

    fn values(n: usize, seed: f64) -> Vec<c64> {
        (0..n).map(|i| c64::new((i as f64 * 0.7 + seed).sin(), (i as f64 * 0.3 - seed).cos())).collect()
    }

    /// `gemm_loop` over two entries of `[m, n, k]` in `layout` (bits: `a`, `b`, `c`
    /// row-major, conjugate `a`, conjugate `b`) with GEMMs cut into blocks of `block`
    /// multiply-adds, against a triple loop over both entries.
    fn check_loop(m: usize, n: usize, k: usize, layout: u32, block: usize) -> Result<(), TestCaseError> {
        let (ra, rb, rc) = (layout & 1 == 1, layout & 2 == 2, layout & 4 == 4);
        let conj = [layout & 8 == 8, layout & 16 == 16];
        let (a, b) = (values(2 * m * k, 0.1), values(2 * k * n, 0.9));
        let view = |row_major: bool, r: usize, c: usize, step: usize| MatrixView {
            looped: SmallVec::from_elem(step, 1),
            strides: if row_major { [c, 1] } else { [1, r] },
        };
        let (va, vb) = (view(ra, m, k, m * k), view(rb, k, n, k * n));
        let vc = view(rc, m, n, 0);
        let mut c = vec![c64::new(f64::NAN, 0.0); m * n];
        BLOCK_MACS.set(Some(block));
        gemm_loop(conj, [m, n, k], &[2], [(&a, &va), (&b, &vb)], [0, 0], (&mut c, &vc), PAR_GEMM_MIN_MACS);
        BLOCK_MACS.set(None);
        let op = |x: c64, on: bool| if on { Elem::conj(x) } else { x };
        for i in 0..m {
            for j in 0..n {
                let mut want = c64::zero();
                for e in 0..2 {
                    for l in 0..k {
                        let x = a[e * m * k + i * va.strides[0] + l * va.strides[1]];
                        let y = b[e * k * n + l * vb.strides[0] + j * vb.strides[1]];
                        want += op(x, conj[0]) * op(y, conj[1]);
                    }
                }
                let got = c[i * vc.strides[0] + j * vc.strides[1]];
                prop_assert!((got - want).norm() < 1e-12 * (1.0 + want.norm()), "({i}, {j}): {got} vs {want}");
            }
        }
        Ok(())
    }

    /// GEMMs of at least `WARM_MIN_MACS` multiply-adds with both sides thinner than
    /// `WARM_MAX_REUSE`, whose operands are read ahead (`warm_parts`), the second entry's
    /// ending where their slices end: in every layout, whole and in blocks, equal a triple
    /// loop.
    #[test]
    fn warmed_gemm_loops_match_a_triple_loop() {
        let [m, n, k] = [62, 63, 70];
        assert!(m * n * k >= WARM_MIN_MACS && m.max(n) < WARM_MAX_REUSE);
        for layout in 0..32 {
            for block in [usize::MAX, 40_000] {
                check_loop(m, n, k, layout, block).unwrap();
            }
        }
    }

    /// Warmed GEMM loops large enough to split, the cut operand read ahead in parts on a
    /// pool of two threads (`a`'s rows for `n < m`, `b`'s columns otherwise): in every
    /// layout, equal a triple loop.
    #[test]
    fn warmed_split_gemm_loops_match_a_triple_loop() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().expect("a pool");
        for [m, n, k] in [[130, 40, 210], [40, 130, 210]] {
            assert!(m * n * k >= PAR_GEMM_MIN_MACS && m.min(n) < WARM_MAX_REUSE);
            assert_eq!(pool.install(|| split_parts(m * n * k, PAR_GEMM_MIN_MACS)), 2);
            for layout in [0, 3, 4, 7, 25] {
                pool.install(|| check_loop(m, n, k, layout, usize::MAX)).unwrap();
            }
        }
    }

    /// The second read-ahead pass runs only for an operand read in place (`twice`) whose
    /// first pass ran slower than the cache's rate: a pass of a millisecond over one byte
    /// is read again, a pass over `2^60` bytes (faster than any memory) is not, and
    /// without `twice` nothing is read again.
    #[test]
    fn a_second_read_ahead_only_after_a_slow_first_pass() {
        let passes = |twice: bool, bytes: usize, pause: u64| {
            let n = Cell::new(0);
            again_if_cold(twice, bytes, || {
                n.set(n.get() + 1);
                std::thread::sleep(std::time::Duration::from_millis(pause));
            });
            n.get()
        };
        assert_eq!(passes(true, 1, 1), 2);
        assert_eq!(passes(true, 1 << 60, 0), 1);
        assert_eq!(passes(false, 1, 1), 1);
        assert!(strided_along_k(3) && !strided_along_k(1));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// The parts of a split operand's read-ahead follow `elem.rs`'s cut (each part but
        /// the last a multiple of 8 rows, the rows in order, none left out), and their runs
        /// cover every element of those rows, row- or column-major, with or without gaps
        /// between rows or columns.
        #[test]
        fn read_ahead_parts_cover_the_rows_they_cut(
            r in 1usize..90, c in 1usize..40, pad in 0usize..5, col_major in proptest::bool::ANY, parts in 1usize..5,
        ) {
            let strides = if col_major { [1, r + pad] } else { [c + pad, 1] };
            let len = (r - 1) * strides[0] + (c - 1) * strides[1] + 1;
            let cut = cuts(r, parts);
            prop_assert_eq!(cut.len(), parts);
            prop_assert_eq!(cut[0].0, 0);
            prop_assert_eq!(cut[parts - 1].1, r);
            let mut start = 0;
            for (left, &(r0, r1)) in (1..=parts).rev().zip(&cut) {
                prop_assert_eq!(r0, start);
                if left > 1 {
                    prop_assert_eq!(r1 - r0, ((r - r0) / left).next_multiple_of(8).min(r - r0));
                }
                start = r1;
                let mut seen = vec![false; len];
                row_runs(len, [r0, r1], c, strides, 8, |lo, hi| seen[lo..hi].iter_mut().for_each(|s| *s = true));
                for i in r0..r1 {
                    for j in 0..c {
                        prop_assert!(seen[i * strides[0] + j * strides[1]], "({i}, {j}) of rows {r0}..{r1}");
                    }
                }
            }
        }

        /// A loop of two GEMMs over a label absent from `c` (the second accumulates), each
        /// cut into blocks (rows of `a`, or columns of `b` for a row-major `c`) that run
        /// inline or, over 4096 multiply-adds, in faer; in every layout of `a`, `b` and
        /// `c`, conjugated or not: equals a triple loop over both entries.
        #[test]
        fn blocked_gemm_loops_match_a_triple_loop(
            m in 1usize..40, n in 1usize..40, k in 1usize..40, layout in 0u32..32, block in 1usize..20000,
        ) {
            check_loop(m, n, k, layout, block)?;
        }
    }

    /// `gm_queens_5x5_3`'s loop in small (`ab,cdeafg->bcdefg`, looped over `c d e`, the
    /// result leading with the row label `b`): cut by `b` and `c` on two threads, by
    /// nothing on one.
    #[test]
    fn a_loop_whose_result_leads_with_a_row_label_is_cut_by_its_outer_axes() {
        let sizes = [3, 3, 4, 4, 4, 48, 48];
        let args = ([1u32, 2, 3, 4, 5, 6], [2u32, 3, 4], [3, 48 * 48, 3]);
        let cut = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("a pool");
            pool.install(|| outer_cut(&args.0, &sizes, &args.1, [&[1], &[5, 6]], args.2))
        };
        assert!(cut(1).is_none());
        // Three rows cut to one would make faer's GEMM a matrix-vector product.
        assert!(cut(2).is_none());
        // Rows of two labels, 3 × 17: the outer one cut leaves GEMMs of 17 rows.
        let sizes = [3, 3, 4, 4, 4, 48, 48, 17];
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().expect("a pool");
        let two = pool
            .install(|| outer_cut(&[1, 2, 7, 3, 4, 5, 6], &sizes, &[2, 3, 4], [&[1, 7], &[5, 6]], [51, 48 * 48, 3]))
            .expect("a cut");
        assert_eq!(two.axes.as_slice(), &[(Fixed::Rows(17), 3), (Fixed::Loop(0), 4)]);
        assert_eq!(two.block, 17 * 4 * 4 * 48 * 48);
    }

    /// The contraction of `la, lb -> lo` over ramps, on one thread and in a pool of two
    /// (`probe` sees the pool first), with the reference result.
    #[allow(clippy::type_complexity)]
    fn on_one_and_two_threads(
        [la, lb, lo]: [&[u32]; 3],
        sizes: &[usize],
        probe: impl FnOnce(&rayon::ThreadPool),
    ) -> (crate::kernel::ContractSpec, crate::Tensor<f64>, crate::Tensor<f64>, crate::Tensor<f64>) {
        use crate::kernel::{ContractSpec, contract};
        use crate::reference::{ramp, reference_labels};
        let spec = ContractSpec::new(la, lb, lo, sizes).expect("a valid spec");
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().expect("a pool");
        probe(&pool);
        let (a, b) = (ramp(spec.a_shape()), ramp(spec.b_shape()));
        let one = contract(&spec, &a, &b);
        let two = pool.install(|| contract(&spec, &a, &b));
        let want = reference_labels(&[(&a, la), (&b, lb)], lo, sizes).expect("a reference");
        (spec, one, two, want)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]

        /// Loops of small GEMMs (rows `x`, summed `s`, and `b`'s other labels `l0 l1 l2 y0
        /// y1`, which the planner loops over or fuses into columns) with the labels of `b`
        /// and the result in random orders, so that the result often leads with a row,
        /// column or looped label ([`outer_cut`]): two threads give the one-thread result
        /// bit for bit, and both the reference to rounding.
        #[test]
        fn loops_cut_by_the_results_outer_axes_give_the_one_thread_result(
            la in Just(vec![0u32, 1]).prop_shuffle(),
            lb in Just(vec![1u32, 2, 3, 4, 5, 6]).prop_shuffle(),
            lo in Just(vec![0u32, 2, 3, 4, 5, 6]).prop_shuffle(),
            x in 1usize..6, s in 1usize..5, l in (2usize..6, 2usize..6, 2usize..6), y in (16usize..48, 16usize..48),
        ) {
            let sizes = [x, s, l.0, l.1, l.2, y.0, y.1];
            let (spec, one, two, want) = on_one_and_two_threads([&la, &lb, &lo], &sizes, |_| ());
            prop_assert_eq!(one.data(), two.data());
            let err = two.max_abs_diff(&want).expect("equal shapes");
            prop_assert!(err < 1e-10 * (1.0 + want.max_abs()), "{:?}: {}", spec, err);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(8))]

        /// Queens' loops at their size (`ab,cdaefg->bcdefg`: 9 GEMMs of `x × n × s`, the
        /// result leading with the row label, columns `e f g` of 20 to 60 each), `b`'s and
        /// the result's labels in random orders, so that some loops are cut GEMM by GEMM
        /// ([`splits_each`]) and others chunked: two threads give the one-thread result
        /// bit for bit, and both the reference to rounding.
        #[test]
        fn loops_of_gemms_split_one_by_one_give_the_one_thread_result(
            lb in Just(vec![1u32, 2, 3, 4, 5, 6]).prop_shuffle(),
            lo in Just(vec![0u32, 2, 3, 4, 5, 6]).prop_shuffle(),
            x in 2usize..5, s in 2usize..4, y in (20usize..60, 20usize..60, 20usize..60),
        ) {
            let sizes = [x, s, 3, 3, y.0, y.1, y.2];
            let (spec, one, two, want) = on_one_and_two_threads([&[0, 1], &lb, &lo], &sizes, |_| ());
            prop_assert_eq!(one.data(), two.data());
            let err = two.max_abs_diff(&want).expect("equal shapes");
            prop_assert!(err < 1e-10 * (1.0 + want.max_abs()), "{:?}: {}", spec, err);
        }

        /// Lone GEMMs of `PAR_GEMM_MIN_MACS` or more with short sides (`x × y` outputs of
        /// 2 to 23 each over a long `k`), which a cut by [`split_block`]'s sizes alone
        /// would leave with a block of one row or column or of `small_gemm`'s width, the
        /// labels of both operands and the result in random orders: two threads give the
        /// one-thread result bit for bit, and both the reference to rounding.
        #[test]
        fn gemms_with_short_sides_give_the_one_thread_result(
            la in Just(vec![0u32, 1]).prop_shuffle(),
            lb in Just(vec![1u32, 2]).prop_shuffle(),
            lo in Just(vec![0u32, 2]).prop_shuffle(),
            x in 2usize..24, y in 2usize..24, extra in 0usize..40,
        ) {
            let k = PAR_GEMM_MIN_MACS.div_ceil(x * y) + extra;
            let (spec, one, two, want) = on_one_and_two_threads([&la, &lb, &lo], &[x, k, y], |_| ());
            prop_assert_eq!(one.data(), two.data());
            let err = two.max_abs_diff(&want).expect("equal shapes");
            prop_assert!(err < 1e-10 * (1.0 + want.max_abs()), "{:?}: {}", spec, err);
        }
    }

    /// Queens' loop in the order of its step (`ab,cdaefg->bcdefg`) with `x = s = 3` and
    /// columns of `39³`: 9 GEMMs of `3 × 59319 × 3`, which no chunking spreads, reach
    /// [`splits_each`] and are cut one by one on two threads (counted on the thread that
    /// runs the contraction), giving the one-thread result bit for bit.
    #[test]
    fn queens_loop_reaches_the_cut_one_by_one() {
        use crate::kernel::{ContractSpec, contract};
        use crate::reference::{ramp, reference_labels};
        let (la, lb, lo): (&[u32], &[u32], &[u32]) = (&[0, 1], &[2, 3, 1, 4, 5, 6], &[0, 2, 3, 4, 5, 6]);
        let sizes = [3, 3, 3, 3, 39, 39, 39];
        let spec = ContractSpec::new(la, lb, lo, &sizes).expect("a valid spec");
        let (a, b) = (ramp(spec.a_shape()), ramp(spec.b_shape()));
        let one = contract(&spec, &a, &b);
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().expect("a pool");
        let (two, cut) = pool.install(|| {
            SPLIT_EACH.set(0);
            let two = contract(&spec, &a, &b);
            (two, SPLIT_EACH.get())
        });
        assert_eq!(cut, 1, "the loop is cut GEMM by GEMM");
        assert_eq!(one.data(), two.data());
        let want = reference_labels(&[(&a, la), (&b, lb)], lo, &sizes).expect("a reference");
        assert!(two.max_abs_diff(&want).expect("equal shapes") < 1e-10 * (1.0 + want.max_abs()));
    }

    /// A block of a large GEMM holds about `block_macs` multiply-adds, and at most a stop
    /// check's worth of `c`'s elements unless that would leave fewer than `SMALL_N` rows
    /// or columns (a matrix-vector product per row); never none.
    #[test]
    fn gemm_blocks_keep_small_gemms_width() {
        let macs = crate::stop::GEMM_BLOCK_MACS;
        let writes = crate::stop::COPY_CHECK_ELEMENTS;
        assert_eq!(block_len(1 << 20, 1), macs >> 20);
        assert_eq!(block_len(1, 1 << 10), writes >> 10);
        assert_eq!(block_len(1, writes + 1), SMALL_N);
        assert_eq!(block_len(1, writes << 3), SMALL_N);
        assert_eq!(block_len(macs, writes << 3), 1);
        assert_eq!(block_len(macs << 1, 1), 1);
    }

    /// The loop of queens' `ab,cdaefghijklmn->bcdefghijklmn` in small: 9 GEMMs of
    /// `3 × 30000 × 3`, cut one by one on two threads only, and by their columns.
    #[test]
    fn a_loop_no_chunk_spreads_splits_each_gemm() {
        let dims = [3, 30_000, 3];
        assert!(!splits_each(&[3, 3], dims));
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().expect("a pool");
        assert!(pool.install(|| splits_each(&[3, 3], dims)));
        // One row, a GEMM that splits by itself, a loop too small: not cut one by one.
        assert!(!pool.install(|| splits_each(&[3, 3], [1, 90_000, 3])));
        assert!(!pool.install(|| splits_each(&[3, 3], [3, 270_000, 3])));
        assert!(!pool.install(|| splits_each(&[1], dims)));
        // The lower floor holds only where it is passed.
        assert_eq!(pool.install(|| split_parts(1 << 18, LOOP_SPLIT_MIN_MACS)), 2);
        assert_eq!(pool.install(|| split_parts(1 << 18, PAR_GEMM_MIN_MACS)), 1);
        assert_eq!(split_parts(1 << 18, LOOP_SPLIT_MIN_MACS), 1);
        assert_eq!(split_cut(dims, 2), Some(Cut { cols: true, parts: 2 }));
    }

    /// Cuts that would change a block's kernel are not made: `2 × 9` (8 columns and 1, or
    /// 2 rows and none); `40 × 9` is cut into 24 rows and 16 (`small_gemm`'s width, which
    /// past its inline size chooses no kernel); a tall product is cut by its rows, and on
    /// four threads a side too short for four blocks in [`split_block`]'s sizes is cut in
    /// fewer.
    #[test]
    fn cuts_that_change_a_blocks_kernel_are_not_made() {
        assert_eq!(split_cut([2, 9, 1 << 17], 2), None);
        assert_eq!(split_cut([9, 2, 1 << 17], 2), None);
        assert_eq!(split_cut([40, 9, 1 << 12], 2), Some(Cut { cols: false, parts: 2 }));
        // Inline, the width picks `small_gemm`'s kernel: `16 × 2` of `8³`-sized blocks.
        assert!(!same_kernel([17, 2, 64], [16, 2]) && same_kernel([17, 2, 200], [16, 2]));
        assert_eq!(split_cut([256, 9, 1 << 12], 2), Some(Cut { cols: false, parts: 2 }));
        assert_eq!(split_cut([256, 256, 256], 1), None);
        assert_eq!(split_cut([3, 60, 1 << 12], 4), Some(Cut { cols: true, parts: 4 }));
        assert_eq!(split_cut([3, 24, 1 << 12], 4), Some(Cut { cols: true, parts: 3 }));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(500))]

        /// Every cut [`split_cut`] makes has nonempty blocks of [`split_block`]'s sizes that
        /// run the whole GEMM's kernel, on no more threads than given, and is the first of
        /// the candidates in the rule's order that does: the most blocks, then the longer
        /// side (columns when `n ≥ m`) before the other. No cut is refused where a
        /// candidate would have kept every block's kernel.
        #[test]
        fn gemm_cuts_keep_every_blocks_kernel(m in 1usize..200, n in 1usize..200, k in 1usize..64, parts in 1usize..6) {
            let keeps = |cols: bool, p: usize| {
                let len = if cols { n } else { m };
                cuts(len, p).iter().all(|&(r0, r1)| {
                    r1 > r0 && same_kernel([m, n, k], if cols { [m, r1 - r0] } else { [r1 - r0, n] })
                })
            };
            let mut order = Vec::new();
            for p in (2..=parts).rev() {
                order.push((n >= m, p));
                order.push((n < m, p));
            }
            let first = order.iter().find(|&&(cols, p)| keeps(cols, p)).map(|&(cols, parts)| Cut { cols, parts });
            prop_assert_eq!(split_cut([m, n, k], parts), first);
        }
    }

    /// `c = a·b` of `[m, n, k]` in `layout` (bits as in [`check_loop`]) for element type
    /// `T`: on this thread, and cut by [`split_cut`] over `pool` (when it cuts).
    #[allow(clippy::type_complexity)]
    fn whole_and_cut<T: Elem>(
        pool: &rayon::ThreadPool,
        [m, n, k]: [usize; 3],
        layout: u32,
        value: impl Fn(usize, f64) -> T,
    ) -> (Vec<T>, Option<Vec<T>>, [[usize; 2]; 3], [Vec<T>; 2]) {
        let (ra, rb, rc) = (layout & 1 == 1, layout & 2 == 2, layout & 4 == 4);
        let conj = [layout & 8 == 8, layout & 16 == 16];
        let a: Vec<T> = (0..m * k).map(|i| value(i, 0.1)).collect();
        let b: Vec<T> = (0..k * n).map(|i| value(i, 0.9)).collect();
        let sa = if ra { [k, 1] } else { [1, m] };
        let sb = if rb { [n, 1] } else { [1, k] };
        let sc = if rc { [n, 1] } else { [1, m] };
        let run = |cut: Option<Cut>| {
            let mut c = vec![T::zero(); m * n];
            gemm_cut_into([m, n, k], Strided(&a, sa), Strided(&b, sb), StridedMut(&mut c, sc), conj, false, cut);
            c
        };
        let whole = run(None);
        let cut = split_cut([m, n, k], 2).map(|cut| pool.install(|| run(Some(cut))));
        (whole, cut, [sa, sb, sc], [a, b])
    }

    /// `40 × 9` over a long `k`, which the rule now cuts into 24 rows and 16: in every
    /// layout the cut GEMM equals the whole bit for bit.
    #[test]
    fn a_gemm_cut_past_small_gemms_width_equals_the_whole() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().expect("a pool");
        for layout in 0..32 {
            let (whole, cut, ..) = whole_and_cut(&pool, [40, 9, 4100], layout, |i, seed| (i as f64 * 0.7 + seed).sin());
            let cut = cut.expect("a cut");
            assert!(whole.iter().zip(&cut).all(|(x, y)| x.to_bits() == y.to_bits()), "layout {layout}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(60))]

        /// A GEMM cut over a pool of two threads as [`split_cut`] cuts it, sides around the
        /// kernels' edges (one row or column, `small_gemm`'s width, faer's panels, a `k`
        /// past faer's depth block of 512), in every layout, `f64` and complex: equals the
        /// uncut GEMM bit for bit, and a triple loop to rounding.
        #[test]
        fn cut_gemms_equal_the_whole_bit_for_bit(
            m in 1usize..120, n in 1usize..120, k in 1usize..700, layout in 0u32..32,
        ) {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().expect("a pool");
            let real = |i: usize, seed: f64| (i as f64 * 0.7 + seed).sin();
            let (whole, cut, [sa, sb, sc], [a, b]) = whole_and_cut(&pool, [m, n, k], layout, real);
            if let Some(cut) = cut {
                prop_assert!(whole.iter().zip(&cut).all(|(x, y)| x.to_bits() == y.to_bits()));
            }
            for i in 0..m {
                for j in 0..n {
                    let want: f64 = (0..k).map(|l| a[i * sa[0] + l * sa[1]] * b[l * sb[0] + j * sb[1]]).sum();
                    let got = whole[i * sc[0] + j * sc[1]];
                    prop_assert!((got - want).abs() < 1e-12 * (1.0 + want.abs()) * k as f64, "({}, {})", i, j);
                }
            }
            let (whole, cut, ..) = whole_and_cut(&pool, [m, n, k], layout, |i, seed| c64::new(real(i, seed), real(i, -seed)));
            if let Some(cut) = cut {
                prop_assert!(whole.iter().zip(&cut).all(|(x, y)| x.to_bits() == y.to_bits()));
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(6))]

        /// One GEMM of `256 × 256 × 128` whose operands' and result's labels come in any
        /// order, so that an operand of `2^15` elements is often packed by a permutation,
        /// on the pool's threads inside a pool ([`pack_threads`]): two threads give the
        /// one-thread result bit for bit, and both the reference to rounding.
        #[test]
        fn operands_packed_on_a_pool_give_the_one_thread_result(
            la in Just(vec![0u32, 1, 2, 3]).prop_shuffle(),
            lb in Just(vec![1u32, 2, 3, 4, 5, 6, 7]).prop_shuffle(),
            lo in Just(vec![0u32, 4, 5, 6, 7]).prop_shuffle(),
        ) {
            let sizes = [256, 8, 4, 4, 4, 4, 4, 4];
            let mut packers = 0;
            let (spec, one, two, want) =
                on_one_and_two_threads([&la, &lb, &lo], &sizes, |pool| packers = pool.install(|| pack_threads(1 << 15, 256 * 256 * 128)));
            prop_assert_eq!(packers, 2);
            prop_assert_eq!(one.data(), two.data());
            let err = two.max_abs_diff(&want).expect("equal shapes");
            prop_assert!(err < 1e-10 * (1.0 + want.max_abs()), "{:?}: {}", spec, err);
        }
    }
}
