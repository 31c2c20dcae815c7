//! Software prefetching: the hint itself, and when passes over operands should use it.
//!
//! Build, materialize, compile and sequential evaluation read, for each operand, an entry
//! of a value-indexed column (a key, a new id, a read count and slot, a slot).
//! When operands sit near their readers (a chain, a window DAG, narrow layers) those
//! entries are in the cache. When they come from anywhere in a graph much larger than the
//! cache, each read is a miss and the pass waits on memory once per operand; prefetching
//! the entries of the operation a few steps ahead overlaps those misses. On local graphs
//! the prefetch finds its lines cached and only costs instructions (a chain's compile
//! about 20% slower), so a pass asks [`FarOperands`] whether its operands are far enough
//! apart to pay for it.
//!
//! Nothing here affects results: a prefetch is a hint that never faults, and the
//! decision only chooses whether hints are issued.

/// A read prefetch of the cache line holding `p` (a no-op off x86_64 and under Miri).
/// `p` need not be valid: the hint is never dereferenced.
#[inline(always)]
pub(crate) fn prefetch_read<T>(p: *const T) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: `prefetcht0` is a hint: it never faults and has no architectural effect, so
    // any address is fine. It is `unsafe` only because it is a
    // `#[target_feature(enable = "sse")]` intrinsic, and SSE is part of the x86_64 baseline.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p as *const i8);
    }
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    let _ = p;
}

/// A read prefetch of `column[i]`, for any `i` (out of range included: the address is
/// computed with wrapping arithmetic and never dereferenced).
#[inline(always)]
pub(crate) fn prefetch_entry<T>(column: &[T], i: usize) {
    prefetch_read(column.as_ptr().wrapping_add(i));
}

/// An operand is far from its reader when more than this many values lie between them:
/// half a MiB of a column of 8-byte entries, half of this machine's L2, so its entry is
/// likely a miss.
const FAR: usize = 1 << 16;

/// Counts far operands, to decide whether a pass should prefetch: it should when more
/// than a quarter of the operands it has seen are far. Graph inputs, which every part of
/// a graph may read and which therefore stay cached, do not count as far.
///
/// A pass that knows all its operands beforehand decides once; one that meets them as it
/// goes decides again every [`FarOperands::BLOCK`] operands, or on a sample of operations
/// every few thousand (the builder's interning, whose loop is short enough that counting
/// every operand shows), so that a graph whose parts differ gets the prefetch where it pays.
pub(crate) struct FarOperands {
    /// Values below this are graph inputs.
    inputs: usize,
    seen: usize,
    far: usize,
}

impl FarOperands {
    /// Operands per decision for passes that decide as they go.
    pub(crate) const BLOCK: usize = 4096;

    /// A counter for a graph whose values below `inputs` are its inputs.
    pub(crate) fn new(inputs: usize) -> Self {
        FarOperands { inputs, seen: 0, far: 0 }
    }

    /// Notes that value `operand` is read by an operation whose first output is value
    /// `reader`.
    #[inline(always)]
    pub(crate) fn note(&mut self, operand: usize, reader: usize) {
        self.seen += 1;
        self.far += usize::from(self.is_far(operand, self.bound(reader)));
    }

    /// What [`Self::is_far`] compares an operand of the operation whose first output is
    /// value `reader` with: taken once per reader, for a pass that counts its operands
    /// itself ([`Self::add`]).
    #[inline(always)]
    pub(crate) fn bound(&self, reader: usize) -> usize {
        reader.saturating_sub(FAR.saturating_add(self.inputs))
    }

    /// Whether value `operand` is far from a reader whose [`Self::bound`] is `bound`: not a
    /// graph input (`operand >= inputs`) and more than [`FAR`] values before the reader
    /// (`operand + FAR < reader`), in one unsigned comparison (an operand below `inputs`
    /// wraps past every bound, and a reader within `FAR + inputs` of the start has none).
    #[inline(always)]
    pub(crate) fn is_far(&self, operand: usize, bound: usize) -> bool {
        operand.wrapping_sub(self.inputs) < bound
    }

    /// Notes `seen` operands, `far` of them far ([`Self::is_far`]), counted by the caller.
    #[inline(always)]
    pub(crate) fn add(&mut self, seen: usize, far: usize) {
        self.seen += seen;
        self.far += far;
    }

    /// Whether [`Self::BLOCK`] operands have been noted since the last decision.
    #[inline(always)]
    pub(crate) fn block_full(&self) -> bool {
        self.seen >= Self::BLOCK
    }

    /// Whether to prefetch, judging by the operands noted since the last decision; starts
    /// counting afresh.
    pub(crate) fn decide(&mut self) -> bool {
        let prefetch = self.far * 4 > self.seen;
        (self.seen, self.far) = (0, 0);
        prefetch
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The one comparison against a reader's bound is the definition: not an input,
        /// and more than `FAR` values before the reader; near the ends of `usize` too.
        #[test]
        fn one_comparison_is_not_an_input_and_far_before_the_reader(
            inputs in prop_oneof![0usize..4, Just(usize::MAX - 2)],
            operand in prop_oneof![0usize..3 * FAR, usize::MAX - 3..=usize::MAX],
            reader in prop_oneof![0usize..3 * FAR, usize::MAX - 3..=usize::MAX],
        ) {
            let f = FarOperands::new(inputs);
            let far = operand >= inputs && operand.saturating_add(FAR) < reader;
            prop_assert_eq!(f.is_far(operand, f.bound(reader)), far);
        }
    }

    #[test]
    fn prefetches_when_more_than_a_quarter_of_operands_are_far() {
        let mut f = FarOperands::new(1);
        // Reader at value 10^6, one input (value 0).
        let reader = 1_000_000;
        f.note(reader - 1, reader); // near
        f.note(0, reader); // an input: never far
        f.note(reader - 10, reader); // near
        f.note(5, reader); // far
        assert!(!f.decide(), "exactly a quarter is not more than a quarter");
        f.note(5, reader);
        f.note(reader - FAR - 1, reader); // just far
        f.note(reader - FAR, reader); // just near
        assert!(f.decide());
        assert!(!f.decide(), "a decision starts counting afresh");
        for _ in 0..FarOperands::BLOCK - 1 {
            f.note(0, reader);
        }
        assert!(!f.block_full());
        f.note(0, reader);
        assert!(f.block_full());
    }
}
