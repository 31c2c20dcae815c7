//! Seeded networks that nobody tuned a finder for: random regular graphs, lattices and
//! matrix chains, as numbered networks (labels `0..sizes.len()`) ready for the path
//! searches ([`crate::search`], [`crate::hyper`]). The examples that compare the finders
//! (`hyper`, `scale`, `auto_small`) and the tests draw their networks here, so a figure in
//! `docs/PERFORMANCE.md` names a network that anyone can rebuild from its seed.
//!
//! Each generator draws from the crate's one seeded stream (SplitMix64), so a seed gives
//! the same network on every machine. Bad arguments (an odd number of edge ends, a degree
//! the graph cannot have, a size that overflows) are errors, checked before anything is
//! allocated.
//!
//! ```
//! use einsum::generate::{lattice, random_regular};
//! use einsum::search::{auto, path_cost};
//!
//! let net = random_regular(20, 3, 7)?;
//! assert_eq!(net.inputs.len(), 20);
//! assert!(net.inputs.iter().all(|legs| legs.len() == 3));
//! let path = auto(&net.inputs, &net.output, &net.sizes);
//! assert!(path_cost(&net.inputs, &net.output, &net.sizes, &path)? > 0.0);
//!
//! let grid = lattice(&[4, 4], 2..=3, 1)?;
//! assert_eq!(grid.sizes.len(), 24);
//! # Ok::<(), einsum::EinsumError>(())
//! ```

use std::ops::RangeInclusive;

use crate::rng::Rng;
use crate::{EinsumError, EinsumResult};

/// A numbered network: the labels of each operand, the output's labels and the size of
/// each label.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Network {
    /// The labels of each operand.
    pub inputs: Vec<Vec<u32>>,
    /// The output's labels (empty for a scalar).
    pub output: Vec<u32>,
    /// The size of each label.
    pub sizes: Vec<usize>,
}

/// The most draws [`random_regular`] makes before it reports that it found no simple graph
/// (the pairing model's chance of a simple graph falls as `exp(-(d² - 1) / 4)`: about 1 in
/// 7 for degree 3, 1 in 40 for degree 4, 1 in 400 for degree 5).
pub const REGULAR_DRAWS: u32 = 10_000;

/// The most labels or operands a generated network may have: its labels are `u32`.
const MAX_ITEMS: usize = u32::MAX as usize;

fn bad(message: String) -> EinsumError {
    EinsumError::Search(message)
}

/// A random `degree`-regular graph on `n` vertices, one operand per vertex and one label
/// of size 2 per edge, scalar output: the pairing model (every vertex gets `degree` edge
/// ends, shuffled and paired), drawn again until the graph has no loop and no double edge.
///
/// ```
/// use einsum::generate::random_regular;
/// let a = random_regular(60, 4, 1)?;
/// assert_eq!(a, random_regular(60, 4, 1)?);
/// assert!(random_regular(5, 3, 1).is_err()); // 15 edge ends cannot pair up
/// # Ok::<(), einsum::EinsumError>(())
/// ```
pub fn random_regular(n: usize, degree: usize, seed: u64) -> EinsumResult<Network> {
    let ends = n
        .checked_mul(degree)
        .filter(|&e| e <= MAX_ITEMS)
        .ok_or_else(|| bad(format!("{n} vertices of degree {degree} are too many")))?;
    if degree == 0 || degree >= n || ends % 2 == 1 {
        return Err(bad(format!(
            "no simple {degree}-regular graph on {n} vertices: the degree must be 1 to n - 1 and n·degree even"
        )));
    }
    let mut s = Rng::new(seed);
    let mut stubs: Vec<u32> = Vec::with_capacity(ends);
    let mut edges: Vec<(u32, u32)> = Vec::with_capacity(ends / 2);
    for _ in 0..REGULAR_DRAWS {
        stubs.clear();
        stubs.extend((0..n as u32).flat_map(|v| std::iter::repeat_n(v, degree)));
        for i in (1..stubs.len()).rev() {
            stubs.swap(i, s.below(i + 1));
        }
        edges.clear();
        edges.extend(stubs.chunks(2).map(|p| (p[0].min(p[1]), p[0].max(p[1]))));
        edges.sort_unstable();
        if edges.windows(2).any(|w| w[0] == w[1]) || edges.iter().any(|e| e.0 == e.1) {
            continue;
        }
        let mut inputs = vec![Vec::with_capacity(degree); n];
        for (c, &(a, b)) in edges.iter().enumerate() {
            inputs[a as usize].push(c as u32);
            inputs[b as usize].push(c as u32);
        }
        return Ok(Network { inputs, output: Vec::new(), sizes: vec![2; edges.len()] });
    }
    Err(bad(format!("no simple {degree}-regular graph on {n} vertices in {REGULAR_DRAWS} draws of the pairing model")))
}

/// A lattice with the given side lengths (`[12, 12]`, `[5, 5, 5]`), one operand per site and
/// one label per bond between neighbours, each bond's size drawn uniformly from `bonds`;
/// scalar output.
///
/// ```
/// use einsum::generate::lattice;
/// let grid = lattice(&[3, 3, 3], 2..=2, 0)?;
/// assert_eq!((grid.inputs.len(), grid.sizes.len()), (27, 54));
/// assert!(lattice(&[3, 0], 2..=2, 0).is_err());
/// # Ok::<(), einsum::EinsumError>(())
/// ```
pub fn lattice(dims: &[usize], bonds: RangeInclusive<usize>, seed: u64) -> EinsumResult<Network> {
    let (lo, hi) = (*bonds.start(), *bonds.end());
    if lo == 0 || lo > hi {
        return Err(bad(format!("bond sizes {lo}..={hi}: they must be at least 1, the range not empty")));
    }
    if dims.is_empty() || dims.contains(&0) {
        return Err(bad(format!("lattice sides {dims:?}: there must be at least one, none of them 0")));
    }
    let n = dims
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .filter(|&n| n.checked_mul(dims.len()).is_some_and(|b| b <= MAX_ITEMS))
        .ok_or_else(|| bad(format!("a lattice of sides {dims:?} is too large")))?;
    let mut s = Rng::new(seed);
    let mut inputs = vec![Vec::new(); n];
    let mut sizes = Vec::new();
    for v in 0..n {
        let mut stride = 1;
        for &len in dims.iter().rev() {
            if (v / stride) % len + 1 < len {
                let c = sizes.len() as u32;
                sizes.push(lo + s.below(hi - lo + 1));
                inputs[v].push(c);
                inputs[v + stride].push(c);
            }
            stride *= len;
        }
    }
    Ok(Network { inputs, output: Vec::new(), sizes })
}

/// A chain of `n` matrices, operand `i` holding labels `i` and `i + 1`, the sizes drawn
/// uniformly from `sizes`, open at both ends (output `[0, n]`).
///
/// ```
/// use einsum::generate::chain;
/// let c = chain(5, 2..=40, 3)?;
/// assert_eq!((c.inputs[4].clone(), c.output.clone()), (vec![4, 5], vec![0, 5]));
/// # Ok::<(), einsum::EinsumError>(())
/// ```
pub fn chain(n: usize, sizes: RangeInclusive<usize>, seed: u64) -> EinsumResult<Network> {
    let (lo, hi) = (*sizes.start(), *sizes.end());
    if lo == 0 || lo > hi {
        return Err(bad(format!("sizes {lo}..={hi}: they must be at least 1, the range not empty")));
    }
    if n == 0 || n >= MAX_ITEMS {
        return Err(bad(format!("a chain of {n} matrices: there must be 1 to 2^32 - 2")));
    }
    let mut s = Rng::new(seed);
    let inputs = (0..n as u32).map(|i| vec![i, i + 1]).collect();
    let sizes = (0..=n).map(|_| lo + s.below(hi - lo + 1)).collect();
    Ok(Network { inputs, output: vec![0, n as u32], sizes })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Every vertex has `degree` distinct neighbours, every label joins two vertices.
        #[test]
        fn regular_graphs_are_simple_and_regular(n in 4usize..80, d in 1usize..5, seed in any::<u64>()) {
            prop_assume!(d < n && (n * d) % 2 == 0);
            let net = random_regular(n, d, seed).unwrap();
            let mut holders = vec![Vec::new(); net.sizes.len()];
            for (v, legs) in net.inputs.iter().enumerate() {
                prop_assert_eq!(legs.len(), d);
                for &c in legs {
                    holders[c as usize].push(v);
                }
            }
            let mut pairs: Vec<(usize, usize)> = holders.iter().map(|h| (h[0], h[1])).collect();
            prop_assert!(holders.iter().all(|h| h.len() == 2 && h[0] != h[1]));
            pairs.sort_unstable();
            pairs.dedup();
            prop_assert_eq!(pairs.len(), n * d / 2);
        }

        /// Each site has one bond per neighbour, and the bond sizes stay in their range.
        #[test]
        fn lattices_join_neighbours(dims in proptest::collection::vec(1usize..6, 1..4), seed in any::<u64>()) {
            let net = lattice(&dims, 2..=3, seed).unwrap();
            let bonds: usize = (0..dims.len()).map(|k| dims.iter().enumerate().map(|(j, &d)| if j == k { d - 1 } else { d }).product::<usize>()).sum();
            prop_assert_eq!(net.sizes.len(), bonds);
            prop_assert!(net.sizes.iter().all(|&s| (2..=3).contains(&s)));
            let legs: usize = net.inputs.iter().map(Vec::len).sum();
            prop_assert_eq!(legs, 2 * bonds);
        }
    }

    #[test]
    fn impossible_networks_are_errors() {
        assert!(random_regular(7, 3, 0).is_err());
        assert!(random_regular(3, 3, 0).is_err());
        assert!(random_regular(usize::MAX, 3, 0).is_err());
        assert!(lattice(&[], 2..=2, 0).is_err());
        assert!(lattice(&[usize::MAX, 4], 2..=2, 0).is_err());
        #[allow(clippy::reversed_empty_ranges)]
        let empty = 3..=2;
        assert!(lattice(&[2, 2], empty, 0).is_err());
        assert!(chain(0, 2..=4, 0).is_err());
        assert!(chain(3, 0..=4, 0).is_err());
    }
}
