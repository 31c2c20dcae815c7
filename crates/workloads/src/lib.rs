//! The workloads that the command line and the benches share: the scalar DAG shapes of
//! `docs/SPEC.md` §8.1 with their seeded inputs ([`Shape`], [`Workload`]), the einsum
//! networks of §8.2 and §8.3 with a per-step timer ([`einsum`]), and the small helpers both
//! need (counts with `1e6` spellings, bitwise comparison of values, the process's RSS).
//!
//! It sits beside `scalar` and `einsum` (it uses both) and below `cgx` and `benches`, so
//! that the shipped command line does not depend on the bench crate.

#![forbid(unsafe_code)]

use scalar::spec::GraphSpec;
use scalar::workloads::{self, Operands};

pub mod counter;
pub mod einsum;
pub mod partition;

/// Seed of every generated spec.
pub const SPEC_SEED: u64 = 1;
/// Seed of the input values.
pub const INPUT_SEED: u64 = 7;

/// The benchmark shapes.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Shape {
    /// Random DAG, operands from the 1024 most recent values, 30% repeats.
    Window,
    /// Random DAG, operands uniformly from all earlier values, 30% repeats.
    Uniform,
    /// A chain (depth = size).
    Chain,
    /// Layered, 100 deep (10^5 wide at 10^7 nodes; narrower for smaller sizes).
    LayeredWide,
    /// Layered, 1000 wide (10^4 deep at 10^7 nodes; shallower for smaller sizes).
    LayeredDeep,
}

impl Shape {
    /// Every shape, in report order.
    pub const ALL: [Shape; 5] = [Shape::Window, Shape::Uniform, Shape::Chain, Shape::LayeredWide, Shape::LayeredDeep];

    /// Short name, used in benchmark ids and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Shape::Window => "window",
            Shape::Uniform => "uniform",
            Shape::Chain => "chain",
            Shape::LayeredWide => "layered_wide",
            Shape::LayeredDeep => "layered_deep",
        }
    }

    /// Parses a name; `layered` means [`Shape::LayeredWide`], `-` and `_` are interchangeable.
    pub fn parse(s: &str) -> Option<Shape> {
        match s.replace('-', "_").as_str() {
            "layered" => Some(Shape::LayeredWide),
            other => Shape::ALL.into_iter().find(|sh| sh.name() == other),
        }
    }

    /// `(width, depth)` of a layered shape with about `n` nodes: 100 deep (wide shape) or
    /// 1000 wide (deep shape), the other dimension scaled so that `width * depth <= n`.
    pub fn layered_dims(self, n: usize) -> (usize, usize) {
        let n = n.max(1);
        match self {
            Shape::LayeredDeep => {
                let width = n.min(1000);
                (width, n / width)
            }
            _ => {
                let depth = n.min(100);
                (n / depth, depth)
            }
        }
    }

    /// The exact node count of [`Shape::spec`]`(n)`, without generating it.
    pub fn node_count(self, n: usize) -> usize {
        match self {
            Shape::LayeredWide | Shape::LayeredDeep => {
                let (w, d) = self.layered_dims(n);
                w * d
            }
            _ => n,
        }
    }

    /// The spec of this shape with about `n` nodes (exactly `n` except for layered shapes,
    /// which round down to a multiple of their fixed dimension) (`scalar::workloads`).
    pub fn spec(self, n: usize) -> GraphSpec {
        match self {
            Shape::Window => workloads::random_dag(n, Operands::Window(1024), 0.3, SPEC_SEED),
            Shape::Uniform => workloads::random_dag(n, Operands::Uniform, 0.3, SPEC_SEED),
            Shape::Chain => workloads::chain(n, SPEC_SEED),
            Shape::LayeredWide | Shape::LayeredDeep => {
                let (w, d) = self.layered_dims(n);
                workloads::layered(w, d, SPEC_SEED)
            }
        }
    }
}

/// A generated spec with its input values.
pub struct Workload {
    /// The shape it was generated from.
    pub shape: Shape,
    /// The spec (not deduplicated).
    pub spec: GraphSpec,
    /// One value per spec input.
    pub inputs: Vec<f64>,
}

impl Workload {
    /// Generates the workload of `shape` with about `n` nodes.
    pub fn new(shape: Shape, n: usize) -> Self {
        let spec = shape.spec(n);
        let inputs = workloads::inputs_for(&spec, INPUT_SEED);
        Workload { shape, spec, inputs }
    }

    /// Number of nodes of the spec: the throughput unit.
    pub fn nodes(&self) -> usize {
        self.spec.ops.len()
    }
}

/// Parses a count (a node count, a size, a number of rounds): digits with optional `_`
/// separators, or `MeN` (`1e6`, `1.4e8`: exact integer arithmetic, so `1.25e1` is no count).
pub fn parse_count(s: &str) -> Result<usize, String> {
    let t = s.replace('_', "");
    let parsed = match t.split_once(['e', 'E']) {
        Some((m, e)) => {
            let not_a_count = || format!("`{s}` is not a count");
            let (whole, frac) = m.split_once('.').unwrap_or((m, ""));
            let digits: usize = format!("{whole}{frac}").parse().map_err(|_| not_a_count())?;
            let e: u32 = e.parse().map_err(|_| not_a_count())?;
            let e = e.checked_sub(frac.len() as u32).ok_or_else(not_a_count)?;
            10usize.checked_pow(e).and_then(|p| p.checked_mul(digits))
        }
        None => t.parse().ok(),
    };
    match parsed {
        Some(0) => Err("the count must be at least 1".into()),
        Some(n) => Ok(n),
        None => Err(format!("`{s}` is not a count (try 1000000, 1_000_000 or 1e6)")),
    }
}

/// Bitwise equality, any NaN equal to any NaN.
pub fn same_values(a: &[f64], b: &[f64]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()))
}

/// Peak and current resident set size of this process (`VmHWM`, `VmRSS`), in bytes, if
/// `/proc/self/status` is readable.
pub fn memory_status() -> Option<(u64, u64)> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let field = |name: &str| -> Option<u64> {
        let line = status.lines().find(|l| l.starts_with(name))?;
        let kb: u64 = line[name.len()..].trim().trim_end_matches("kB").trim().parse().ok()?;
        Some(kb * 1024)
    };
    Some((field("VmHWM:")?, field("VmRSS:")?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_parse_exactly_or_not_at_all() {
        for (text, n) in
            [("1000000", 1_000_000), ("1_000", 1000), ("1e6", 1_000_000), ("1.4e8", 140_000_000), ("2.50e2", 250)]
        {
            assert_eq!(parse_count(text), Ok(n), "{text}");
        }
        for text in ["1.25e1", "0", "0e3", "1e30", "x", "1.e", "-1e3", "1.5"] {
            assert!(parse_count(text).is_err(), "{text}");
        }
    }

    #[test]
    fn same_values_tolerates_nan_only() {
        assert!(same_values(&[f64::NAN, 1.0], &[-f64::NAN, 1.0]));
        assert!(!same_values(&[0.0], &[-0.0]));
        assert!(!same_values(&[1.0], &[1.0, 2.0]));
    }

    #[test]
    fn shapes_and_sizes() {
        for shape in Shape::ALL {
            assert_eq!(Shape::parse(shape.name()), Some(shape));
        }
        assert_eq!(Shape::parse("layered"), Some(Shape::LayeredWide));
        assert_eq!(Shape::parse("layered-deep"), Some(Shape::LayeredDeep));
        assert_eq!(Shape::LayeredWide.layered_dims(10_000_000), (100_000, 100));
        assert_eq!(Shape::LayeredDeep.layered_dims(10_000_000), (1000, 10_000));
        assert_eq!(Shape::LayeredWide.layered_dims(10_000), (100, 100));
        assert_eq!(Shape::LayeredDeep.layered_dims(10_000), (1000, 10));
        for shape in Shape::ALL {
            for n in [1, 150, 2500] {
                assert_eq!(Workload::new(shape, n).nodes(), shape.node_count(n), "{shape:?} {n}");
            }
        }
    }
}
