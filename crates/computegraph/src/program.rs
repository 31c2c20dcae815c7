//! The slot program's encoding, shared by [`compile`](crate::compile)'s program and the
//! parallel schedule (`schedule.rs`): packed instruction words over an argument pool of
//! slot numbers, the "no slot" marker, and which output reads move their value out.
//!
//! Invariants: an [`Instr`] names `n_in` operand slots followed by `n_out` output slots,
//! contiguous in its pool from `start`; the output move flags mark exactly the last
//! mention of each output slot ([`SlotProgram::check_output_moves`]). Nothing here
//! allocates slots or orders instructions: that is `compile.rs` and `schedule.rs`.

use std::fmt;

/// The slots of a program: the argument pool its instructions index (operand slots then
/// output slots, per [`Instr`]), the slot of each input and of each output, which output
/// reads move their value out, and the number of slots. The sequential program and the
/// parallel schedule each have one, in the same layout.
#[derive(Clone, Debug, Default)]
pub(crate) struct SlotProgram {
    pub(crate) args: Vec<u32>,
    /// The slot of each input, [`NO_SLOT`] for an input that no instruction reads.
    pub(crate) input_slots: Vec<u32>,
    pub(crate) output_slots: Vec<u32>,
    /// Whether output `i` may move its value out of the slot (last mention of that slot).
    pub(crate) output_move: Vec<bool>,
    pub(crate) slot_count: usize,
}

/// "No slot": an input that no instruction reads.
pub(crate) const NO_SLOT: u32 = u32::MAX;

/// Where an instruction's slot arguments sit in the argument pool: `n_in` input slots
/// followed by `n_out` output slots, starting at `start`.
///
/// Packed in one `u64` (`start` in the low 32 bits, then `n_in`, then `n_out`, 16 bits
/// each) so that the evaluation loop reads an instruction with one load: the sequential
/// loop is bound by loads, and three field loads per instruction cost it about 10%.
#[derive(Copy, Clone, PartialEq, Eq)]
pub(crate) struct Instr(u64);

impl Instr {
    #[inline]
    pub(crate) fn new(start: u32, n_in: u16, n_out: u16) -> Instr {
        Instr(start as u64 | (n_in as u64) << 32 | (n_out as u64) << 48)
    }

    /// Index of the first operand slot in the argument pool.
    #[inline(always)]
    pub(crate) fn start(self) -> usize {
        self.0 as u32 as usize
    }

    /// Number of operand slots.
    #[inline(always)]
    pub(crate) fn n_in(self) -> usize {
        (self.0 >> 32) as u16 as usize
    }

    /// Number of output slots.
    #[inline(always)]
    pub(crate) fn n_out(self) -> usize {
        (self.0 >> 48) as usize
    }

    /// One past the last argument (operands and outputs) in the argument pool.
    #[inline]
    pub(crate) fn end(self) -> usize {
        self.start() + self.n_in() + self.n_out()
    }

    /// The instruction's operand and output slots in `args` (the program's pool, or a
    /// schedule's, which has the same layout).
    ///
    /// # Panics
    /// If the range runs past `args`.
    #[inline]
    pub(crate) fn slots(self, args: &[u32]) -> (&[u32], &[u32]) {
        let (start, mid) = (self.start(), self.start() + self.n_in());
        (&args[start..mid], &args[mid..mid + self.n_out()])
    }

    /// [`Self::slots`] without bounds checks, for the evaluators' loops.
    ///
    /// # Safety
    /// The range lies in `args`: `CompiledProgram::verify` checks it for the program's
    /// pool, `Schedule::check_levels` for a schedule's.
    #[inline(always)]
    pub(crate) unsafe fn slots_unchecked(self, args: &[u32]) -> (&[u32], &[u32]) {
        let (start, mid) = (self.start(), self.start() + self.n_in());
        // SAFETY: in range, by the caller's guarantee.
        unsafe { (args.get_unchecked(start..mid), args.get_unchecked(mid..mid + self.n_out())) }
    }
}

impl fmt::Debug for Instr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Instr")
            .field("start", &self.start())
            .field("n_in", &self.n_in())
            .field("n_out", &self.n_out())
            .finish()
    }
}

/// Per output, whether it is its slot's last mention, so that taking the outputs may move
/// that value out (the earlier mentions clone it).
pub(crate) fn output_moves(output_slots: &[u32]) -> Vec<bool> {
    let mut output_move = vec![false; output_slots.len()];
    let mut seen = rustc_hash::FxHashSet::default();
    for (i, s) in output_slots.iter().enumerate().rev() {
        output_move[i] = seen.insert(*s);
    }
    output_move
}

impl SlotProgram {
    /// Checks that `output_move` marks exactly the last mention of each output slot, so
    /// that taking the outputs moves each value out once and clones it before (the
    /// evaluators rely on it), and that every output slot is below `slot_count`.
    /// `O(outputs + slots)`.
    pub(crate) fn check_output_moves(&self) -> Result<(), String> {
        let (output_slots, output_move) = (&self.output_slots, &self.output_move);
        if output_move.len() != output_slots.len() {
            return Err("output move flags and output slots differ in length".into());
        }
        let mut seen = bitvec::vec::BitVec::<usize>::repeat(false, self.slot_count);
        for (i, (&s, &mv)) in output_slots.iter().zip(output_move).enumerate().rev() {
            let Some(mut seen_s) = seen.get_mut(s as usize) else {
                return Err(format!("output {i}'s slot s{s} is out of range"));
            };
            if mv == *seen_s {
                return Err(format!("output {i} (slot s{s}) is not moved out exactly at its slot's last mention"));
            }
            *seen_s = true;
        }
        Ok(())
    }
}
