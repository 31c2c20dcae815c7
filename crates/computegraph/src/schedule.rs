//! `schedule`: the level schedule and level-aware slot assignment of parallel evaluation.
//!
//! Input: a sequential slot program (the columns `compile` built: instructions, their
//! arguments, input and output slots) and a cost per instruction. The program runs this
//! pass on first parallel use and keeps the result. The sequential program
//! is only read; its slot reuse is not safe for level order, so this pass assigns its own
//! slots. Output: a [`Schedule`], run by [`CompiledProgram::eval_parallel`](crate::CompiledProgram::eval_parallel).
//!
//! Invariants of the output (checked by `CompiledProgram::verify_parallel_against`):
//! - an instruction's level is 1 + the largest level of the producers of its operands
//!   (inputs are level 0, so an instruction without operands is level 1); `order` lists the
//!   instructions by increasing level, in program order within a level (a counting sort),
//!   and `level_start` holds the level boundaries in `order`;
//! - `args` has the layout of the sequential argument pool (same `Instr` ranges) with
//!   slots of this schedule: a value's slot is released only after the whole level that
//!   holds its last reader, and outputs of a level never take a slot released in that
//!   level, so within a level no slot is written twice, and no written slot is read;
//! - the instructions of one level may therefore run in any order or concurrently, reading
//!   the slots as they stood when the level began.
//!
//! **The level invariant, on which the evaluator's `unsafe` rests:** within one level, every
//! slot written is written by exactly one output of one instruction, and no slot written
//! in the level is read in it; every slot is below `slot_count`. The parallel evaluator
//! lets the chunks of a level write their output slots concurrently through a raw
//! pointer (`eval.rs`, ADR 0005), which is data-race free exactly when this holds. It is
//! not left to the correctness of the slot assignment alone: [`Schedule::check_levels`],
//! a direct check of the invariant, runs on every schedule when it is built, in release
//! builds too, and a schedule that fails it is an error, never evaluated.
//!
//! Complexity: `O(instructions + arguments + slots)`, no allocation per level.

use crate::compile::{Instr, NO_SLOT};
use crate::error::{GraphError, GraphResult};

/// The level schedule of a program (see the module doc).
#[derive(Clone, Debug, Default)]
pub(crate) struct Schedule {
    /// Instruction indices by increasing level.
    pub(crate) order: Vec<u32>,
    /// `order[level_start[l]..level_start[l + 1]]` is level `l + 1`.
    pub(crate) level_start: Vec<u32>,
    /// `cost_prefix[k]` is the summed cost of `order[..k]`.
    pub(crate) cost_prefix: Vec<u64>,
    /// Argument pool in the layout of the sequential one, with this schedule's slots.
    pub(crate) args: Vec<u32>,
    pub(crate) input_slots: Vec<u32>,
    pub(crate) output_slots: Vec<u32>,
    pub(crate) output_move: Vec<bool>,
    pub(crate) slot_count: usize,
    /// Whether at least half of the cost is in levels that parallel evaluation splits
    /// (two instructions or more, cost `PAR_LEVEL_MIN_COST` or more).
    pub(crate) worth_parallel: bool,
}

impl Schedule {
    /// Number of levels.
    pub(crate) fn level_count(&self) -> usize {
        self.level_start.len().saturating_sub(1)
    }

    /// The positions in `order` of level index `l` (level `l + 1`).
    #[inline]
    pub(crate) fn level(&self, l: usize) -> std::ops::Range<usize> {
        self.level_start[l] as usize..self.level_start[l + 1] as usize
    }

    /// Whether level index `l` is split into chunks by parallel evaluation: it has two
    /// instructions or more and costs at least [`PAR_LEVEL_MIN_COST`](crate::PAR_LEVEL_MIN_COST).
    #[inline]
    pub(crate) fn is_split(&self, range: &std::ops::Range<usize>) -> bool {
        range.len() > 1 && self.cost(range) >= crate::eval::PAR_LEVEL_MIN_COST
    }

    /// The summed cost of `order[range]`.
    #[inline]
    pub(crate) fn cost(&self, range: &std::ops::Range<usize>) -> u64 {
        self.cost_prefix[range.end] - self.cost_prefix[range.start]
    }

    /// Checks the level invariant of the module doc against the program's instruction
    /// records: level boundaries within `order`, instructions and argument ranges in
    /// bounds, every slot below `slot_count`, within each level every written slot
    /// written once and not read, and every read slot written before (an input, or an
    /// output of an earlier level); one input slot per program input (`n_inputs`), every
    /// output slot written by the end, and each output moved out only at its slot's last
    /// mention. This is the guarantee behind the evaluator's concurrent, unchecked slot
    /// accesses and its unchecked output takes, so it runs whenever a schedule is built.
    /// `O(levels + arguments + slots + outputs)`, one allocation.
    pub(crate) fn check_levels(&self, instrs: &[Instr], n_inputs: usize) -> GraphResult<()> {
        let bad = |message: String| GraphError::Invalid { phase: "parallel schedule", message };
        let n = instrs.len();
        if self.input_slots.len() != n_inputs {
            return Err(bad(format!("{} input slots for {n_inputs} inputs", self.input_slots.len())));
        }
        if self.order.len() != n
            || self.cost_prefix.len() != n + 1
            || self.level_start.first().is_some_and(|&s| s != 0)
            || self.level_start.last().is_some_and(|&e| e as usize != n)
            || (self.level_start.is_empty() && n != 0)
            || self.level_start.windows(2).any(|w| w[0] > w[1])
        {
            return Err(bad("level boundaries do not cover the instructions in order".into()));
        }
        let in_range = |s: u32| (s as usize) < self.slot_count;
        if let Some(&s) = self.input_slots.iter().chain(&self.output_slots).find(|&&s| s != NO_SLOT && !in_range(s)) {
            return Err(bad(format!("input or output slot s{s} out of range")));
        }
        // `stamp[s]` is 1 + the index of the last level that wrote `s`, `INPUT` for an
        // input slot not written since, 0 for a slot never written.
        const INPUT: u32 = u32::MAX;
        let mut stamp: Vec<u32> = vec![0; self.slot_count];
        for &s in &self.input_slots {
            if s != NO_SLOT {
                stamp[s as usize] = INPUT;
            }
        }
        for l in 0..self.level_count() {
            let mark = l as u32 + 1;
            let level = &self.order[self.level(l)];
            for &i in level {
                let Some(&instr) = instrs.get(i as usize) else {
                    return Err(bad(format!("order names instruction {i}, out of range")));
                };
                let mid = instr.start() + instr.n_in();
                let Some(outs) = self.args.get(mid..mid + instr.n_out()) else {
                    return Err(bad(format!("instruction {i}'s arguments are out of range")));
                };
                for &s in outs {
                    if !in_range(s) || stamp[s as usize] == mark {
                        return Err(bad(format!("level {mark} writes slot s{s} twice, or it is out of range")));
                    }
                    stamp[s as usize] = mark;
                }
            }
            for &i in level {
                for &s in instrs[i as usize].slots(&self.args).0 {
                    if !in_range(s) || stamp[s as usize] == mark || stamp[s as usize] == 0 {
                        return Err(bad(format!(
                            "level {mark} reads slot s{s}, which it writes, which nothing wrote before, \
                             or which is out of range"
                        )));
                    }
                }
            }
        }
        if let Some(s) = self.output_slots.iter().find(|&&s| s == NO_SLOT || stamp[s as usize] == 0) {
            return Err(bad(format!("output slot s{s} is never written")));
        }
        crate::compile::check_output_moves(&self.output_slots, &self.output_move, self.slot_count).map_err(bad)
    }

    /// Bytes held by the schedule's columns.
    pub(crate) fn heap_bytes(&self) -> usize {
        (self.order.capacity()
            + self.level_start.capacity()
            + self.args.capacity()
            + self.input_slots.capacity()
            + self.output_slots.capacity())
            * 4
            + self.cost_prefix.capacity() * 8
            + self.output_move.capacity()
    }
}

/// Computes the level schedule of a sequential program. `cost[i]` is instruction `i`'s cost.
pub(crate) fn schedule(
    instrs: &[Instr],
    args: &[u32],
    input_slots: &[u32],
    output_slots: &[u32],
    slot_count: usize,
    cost: &[u64],
) -> GraphResult<Schedule> {
    const UNREAD: u32 = u32::MAX;
    const KEEP: u32 = u32::MAX - 1;
    let exhausted = |space| GraphError::IdSpaceExhausted { space };
    let n = instrs.len();
    // Value numbering by simulating the sequential program: inputs are 0..n_inputs, then
    // each instruction output in program order. `arg_value[p]` names the value at
    // argument position `p`; `value_level[v]` is the value's level.
    let n_outputs: usize = instrs.iter().map(|i| i.n_out()).sum();
    let n_values = input_slots.len() + n_outputs;
    if n_values >= KEEP as usize {
        return Err(exhausted("value"));
    }
    let mut arg_value: Vec<u32> = vec![0; args.len()];
    let mut value_level: Vec<u32> = vec![0; n_values];
    let mut slot_value: Vec<u32> = vec![UNREAD; slot_count];
    for (j, &s) in input_slots.iter().enumerate() {
        if s != NO_SLOT {
            slot_value[s as usize] = j as u32;
        }
    }
    let mut instr_level: Vec<u32> = Vec::with_capacity(n);
    let mut next_value = input_slots.len() as u32;
    let mut max_level = 0u32;
    for &instr in instrs {
        let (start, mid, n_out) = (instr.start(), instr.start() + instr.n_in(), instr.n_out());
        let mut l = 0;
        for p in start..mid {
            let v = slot_value[args[p] as usize];
            arg_value[p] = v;
            l = l.max(value_level[v as usize]);
        }
        let l = l + 1;
        for p in mid..mid + n_out {
            arg_value[p] = next_value;
            value_level[next_value as usize] = l;
            slot_value[args[p] as usize] = next_value;
            next_value += 1;
        }
        instr_level.push(l);
        max_level = max_level.max(l);
    }
    let output_values: Vec<u32> = output_slots.iter().map(|&s| slot_value[s as usize]).collect();
    drop(slot_value);

    // Counting sort of the instructions by level (1..=levels).
    let levels = max_level as usize;
    let mut level_start: Vec<u32> = vec![0; levels + 1];
    for &l in &instr_level {
        level_start[l as usize] += 1; // count of level l at index l, shifted below
    }
    for l in 1..=levels {
        level_start[l] += level_start[l - 1];
    }
    // level_start[l] is now the end of level l, i.e. the start of level l + 1.
    // Scatter in program order (the cost goes along, so the prefix sum is sequential).
    let mut fill: Vec<u32> = level_start.clone();
    let mut order: Vec<u32> = vec![0; n];
    let mut cost_prefix: Vec<u64> = vec![0; n + 1];
    for (i, &l) in instr_level.iter().enumerate() {
        let at = &mut fill[l as usize - 1];
        order[*at as usize] = i as u32;
        cost_prefix[*at as usize + 1] = cost[i];
        *at += 1;
    }
    let mut acc = 0u64;
    for c in &mut cost_prefix[1..] {
        acc = acc.saturating_add(*c);
        *c = acc;
    }

    // Last level reading each value; outputs are kept, values nobody reads are released
    // after the level that writes them.
    let mut last_level: Vec<u32> = vec![UNREAD; n_values];
    for (i, &instr) in instrs.iter().enumerate() {
        for &v in instr.slots(&arg_value).0 {
            let ll = &mut last_level[v as usize];
            *ll = if *ll == UNREAD { instr_level[i] } else { (*ll).max(instr_level[i]) };
        }
    }
    for &v in &output_values {
        last_level[v as usize] = KEEP;
    }
    let n_inputs = input_slots.len();
    for v in n_inputs..n_values {
        if last_level[v] == UNREAD {
            last_level[v] = value_level[v];
        }
    }

    // Two more counting sorts, so that slot assignment walks compact lists in level
    // order: the values each level writes (`defs`), and those it releases (`releases`).
    let (def_start, defs) = bucket(levels, (n_inputs..n_values).map(|v| (value_level[v], v as u32)));
    let (release_start, releases) = bucket(
        levels,
        (0..n_values).filter(|&v| last_level[v] != UNREAD && last_level[v] != KEEP).map(|v| (last_level[v], v as u32)),
    );
    drop(last_level);

    // Level-aware slot assignment: a LIFO free list that only receives slots after the
    // level that released them has taken all its output slots.
    let mut free: Vec<u32> = Vec::new();
    let mut next_slot = 0u32;
    let mut take = |free: &mut Vec<u32>| -> GraphResult<u32> {
        if let Some(s) = free.pop() {
            return Ok(s);
        }
        if next_slot >= NO_SLOT - 1 {
            return Err(exhausted("slot"));
        }
        next_slot += 1;
        Ok(next_slot - 1)
    };
    let mut slot_of: Vec<u32> = vec![NO_SLOT; n_values];
    let mut par_input_slots = Vec::with_capacity(n_inputs);
    for (j, &s) in input_slots.iter().enumerate() {
        // An input has a sequential slot exactly when it is read or is an output.
        let slot = if s == NO_SLOT { NO_SLOT } else { take(&mut free)? };
        slot_of[j] = slot;
        par_input_slots.push(slot);
    }
    for l in 0..levels {
        for &v in &defs[def_start[l] as usize..def_start[l + 1] as usize] {
            slot_of[v as usize] = take(&mut free)?;
        }
        for &v in &releases[release_start[l] as usize..release_start[l + 1] as usize] {
            free.push(slot_of[v as usize]);
        }
    }
    let par_args: Vec<u32> = arg_value.iter().map(|&v| slot_of[v as usize]).collect();
    let par_output_slots: Vec<u32> = output_values.iter().map(|&v| slot_of[v as usize]).collect();
    let output_move = crate::compile::output_moves(&par_output_slots);
    let mut sched = Schedule {
        order,
        level_start,
        cost_prefix,
        args: par_args,
        input_slots: par_input_slots,
        output_slots: par_output_slots,
        output_move,
        slot_count: next_slot as usize,
        worth_parallel: false,
    };
    let parallel_cost: u64 = (0..levels)
        .map(|l| sched.level(l))
        .filter(|r| sched.is_split(r))
        .map(|r| sched.cost(&r))
        .fold(0u64, u64::saturating_add);
    sched.worth_parallel = parallel_cost > 0 && parallel_cost >= acc / 2;
    sched.check_levels(instrs, input_slots.len())?;
    Ok(sched)
}

/// Counting sort of `(level, value)` pairs with levels in `1..=levels`: returns the bucket
/// starts (bucket `l - 1` is `items[start[l - 1]..start[l]]`) and the values, in input
/// order within a bucket.
fn bucket<I>(levels: usize, pairs: I) -> (Vec<u32>, Vec<u32>)
where
    I: Iterator<Item = (u32, u32)> + Clone,
{
    let mut start: Vec<u32> = vec![0; levels + 1];
    for (l, _) in pairs.clone() {
        start[l as usize] += 1;
    }
    for l in 1..=levels {
        start[l] += start[l - 1];
    }
    let mut fill = start.clone();
    let mut items: Vec<u32> = vec![0; start[levels] as usize];
    for (l, v) in pairs {
        let at = &mut fill[l as usize - 1];
        items[*at as usize] = v;
        *at += 1;
    }
    (start, items)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn instr(start: u32, n_in: u16, n_out: u16) -> Instr {
        Instr::new(start, n_in, n_out)
    }

    /// `a` in s0, `b` in s1; i0 = f(a) -> s2 (frees s0); i1 = g(b) -> s0, reusing s0 in
    /// the same level as i0, which is fine sequentially; i2 = h(s2, s0) -> s1.
    #[test]
    fn same_level_release_is_not_reused_in_the_level() {
        let instrs = [instr(0, 1, 1), instr(2, 1, 1), instr(4, 2, 1)];
        let args = [0, 2, 1, 0, 2, 0, 1];
        let s = schedule(&instrs, &args, &[0, 1], &[1], 3, &[1, 2, 3]).unwrap();
        assert_eq!(s.order, [0, 1, 2]);
        assert_eq!(s.level_start, [0, 2, 3]);
        assert_eq!(s.level_count(), 2);
        assert_eq!(s.cost_prefix, [0, 1, 3, 6]);
        assert_eq!(s.input_slots, [0, 1]);
        // Level 1 writes two fresh slots; level 2 reuses a slot released after level 1.
        assert_eq!(s.args, [0, 2, 1, 3, 2, 3, 1]);
        assert_eq!(s.output_slots, [1]);
        assert_eq!(s.slot_count, 4);
    }

    /// `check_levels` accepts the schedule built for a program and rejects one whose
    /// level writes a slot twice, or reads a slot it writes.
    #[test]
    fn check_levels_rejects_conflicting_slots() {
        let instrs = [instr(0, 1, 1), instr(2, 1, 1), instr(4, 2, 1)];
        let args = [0, 2, 1, 0, 2, 0, 1];
        let good = schedule(&instrs, &args, &[0, 1], &[1], 3, &[1, 2, 3]).unwrap();
        assert!(good.check_levels(&instrs, good.input_slots.len()).is_ok());
        // Level 1 is i0 (s0 -> s2) and i1 (s1 -> s3).
        let mut twice = good.clone();
        twice.args[3] = 2; // i1 writes s2 too
        let mut read_written = good.clone();
        read_written.args[2] = 2; // i1 reads s2, which i0 writes
        let mut out_of_range = good.clone();
        out_of_range.args[1] = 9;
        let mut unwritten = good.clone();
        unwritten.input_slots[1] = NO_SLOT; // i1 reads s1, which no input fills now
        for bad in [twice, read_written, out_of_range, unwritten] {
            match bad.check_levels(&instrs, bad.input_slots.len()) {
                Err(GraphError::Invalid { phase, .. }) => assert_eq!(phase, "parallel schedule"),
                other => panic!("expected Invalid, got {other:?}"),
            }
        }
        // What the evaluator's output takes rely on: one input slot per input, output slots
        // written, each moved out once at its last mention.
        let mut no_slot_output = good.clone();
        no_slot_output.output_slots[0] = NO_SLOT;
        let mut unwritten_output = good.clone();
        unwritten_output.slot_count += 1;
        unwritten_output.output_slots[0] = good.slot_count as u32; // in range, never written
        let mut moved_twice = good.clone();
        moved_twice.output_slots.push(good.output_slots[0]);
        moved_twice.output_move = vec![true, true];
        let mut never_moved = good.clone();
        never_moved.output_move[0] = false;
        let mut short_moves = good.clone();
        short_moves.output_move.clear();
        let cases = [
            (no_slot_output, 2),
            (unwritten_output, 2),
            (moved_twice, 2),
            (never_moved, 2),
            (short_moves, 2),
            (good.clone(), 3), // one input slot too few
        ];
        for (bad, inputs) in cases {
            match bad.check_levels(&instrs, inputs) {
                Err(GraphError::Invalid { phase, message }) => {
                    assert_eq!(phase, "parallel schedule", "{message}")
                }
                other => panic!("expected Invalid, got {other:?} for {bad:?}"),
            }
        }
        let mut moved_at_last = good.clone();
        moved_at_last.output_slots.push(good.output_slots[0]);
        moved_at_last.output_move = vec![false, true];
        assert!(moved_at_last.check_levels(&instrs, 2).is_ok(), "clone first, move at the last mention");
    }

    /// Levels are not program order: a chain interleaved with independent nodes.
    #[test]
    fn counting_sort_groups_levels_in_program_order() {
        // x in s0; i0 = f(x) -> s1; i1 = f(s1) -> s2; i2 = f(x) -> s3; i3 = () -> s4.
        let instrs = [instr(0, 1, 1), instr(2, 1, 1), instr(4, 1, 1), instr(6, 0, 1)];
        let args = [0, 1, 1, 2, 0, 3, 4];
        let s = schedule(&instrs, &args, &[0], &[2, 3, 4], 5, &[1; 4]).unwrap();
        assert_eq!(s.order, [0, 2, 3, 1]);
        assert_eq!(s.level_start, [0, 3, 4]);
    }
}
