//! The one cost model of a contraction: labels held by one operand alone are summed out of
//! it first ([`sums_first`]), then the pairwise steps of a path run over what is left; a
//! plan's cost is the loops of those sums, of every pairwise step and of a final
//! reduction, in multiply-adds. [`crate::Plan::multiply_adds`],
//! [`crate::search::path_cost`] and [`crate::Einsum::multiply_adds`] all count this way.
//!
//! Invariants: [`sums_first`] leaves a network of one operand as it is (its final
//! reduction does the same in one step), and sums an operand only for a label of size > 1
//! that it alone holds (a broadcast axis of size 1 alone saves nothing); an operand it
//! sums keeps its distinct labels that another operand or the output holds, in order.
//!
//! Complexity: linear in the labels, plus the follower's walk for [`path_cost`].

use crate::error::EinsumResult;
use crate::path::{ContractionPath, FollowedPath, distinct};

/// The labels each operand keeps after the sums done first, and which operands have one
/// (see the module docs): none for a network of one operand, whose final reduction does
/// the same in one step.
pub(crate) fn sums_first(inputs: &[Vec<u32>], output: &[u32], sizes: &[usize]) -> (Vec<Vec<u32>>, Vec<bool>) {
    if inputs.len() < 2 {
        return (inputs.to_vec(), vec![false; inputs.len()]);
    }
    // Per label: the operands holding it (1, 2 meaning "two or more") and the output.
    let mut holders = vec![0u8; sizes.len()];
    for l in inputs {
        for c in distinct(l) {
            let h = &mut holders[c as usize];
            *h = (*h + 1).min(2);
        }
    }
    for &c in output {
        holders[c as usize] = 2;
    }
    let own = |c: u32| holders[c as usize] == 1;
    let mut reduced = Vec::with_capacity(inputs.len());
    let mut summed = Vec::with_capacity(inputs.len());
    for l in inputs {
        // Only a label of size > 1 makes the sum worth a step; once it is made, it drops
        // the operand's own labels of size 1 too.
        if l.iter().any(|&c| own(c) && sizes[c as usize] > 1) {
            reduced.push(distinct(l).into_iter().filter(|&c| !own(c)).collect());
            summed.push(true);
        } else {
            reduced.push(l.clone());
            summed.push(false);
        }
    }
    (reduced, summed)
}

/// The cost model (module docs) of a walk over the reduced network.
pub(crate) fn cost(inputs: &[Vec<u32>], summed_first: &[bool], followed: &FollowedPath<'_>, sizes: &[usize]) -> f64 {
    let size = |l: &[u32]| l.iter().map(|&c| sizes[c as usize] as f64).product::<f64>();
    let mut total = 0.0;
    for (l, _) in inputs.iter().zip(summed_first).filter(|(_, s)| **s) {
        total += size(&distinct(l));
    }
    for step in followed.steps() {
        total += size(&followed.loops(step));
    }
    if let Some((_, loops)) = followed.final_reduction() {
        total += size(&loops);
    }
    total
}

/// [`crate::search::path_cost`]: the sums first, then `path` followed over what they
/// leave.
pub(crate) fn path_cost(
    inputs: &[Vec<u32>],
    output: &[u32],
    sizes: &[usize],
    path: &ContractionPath,
) -> EinsumResult<f64> {
    let (reduced, summed) = sums_first(inputs, output, sizes);
    let followed = FollowedPath::new(&reduced, output, path)?;
    Ok(cost(inputs, &summed, &followed, sizes))
}
