//! Einsum workloads shared by the criterion bench (`benches/einsum.rs`) and `cgx bench mps`:
//!
//! - [`mps`]: `docs/SPEC.md` §8.2, the inner product `⟨ψ|ψ⟩` of a matrix product state
//!   with `n` sites, physical dimension 2 and bond dimension `χ`, contracted along the
//!   zipper path (`A₀·B₀`, then the running environment with the next remaining operand);
//!   [`StepTimes::measure`] times it per contraction step, beside the kernels alone.
//! - [`instance`]: `docs/SPEC.md` §8.3, the Einsum Benchmark instances bundled with the
//!   einsum crate (`einsum::BUNDLED_DIR`, listed by [`Instance::bundled_names`]), with
//!   seeded operands, on their `opt_flops` paths.
//!
//! The MPS network is defined once here; `benches/scripts/compare_einsum.py` builds the
//! same one (same operand order, shapes and path) for numpy + opt_einsum.

use std::time::Instant;

use computegraph::{EvalState, ValueRef};
use einsum::{ContractionPath, Einsum, EinsumGradient, Instance, PathChoice, Tensor};

/// A contraction network with its path and operands.
pub struct Network {
    /// A short name (`mps_n100_chi8`, or the instance's).
    pub name: String,
    /// The einsum expression.
    pub expression: String,
    /// Operand shapes.
    pub shapes: Vec<Vec<usize>>,
    /// The pairwise path (opt_einsum's format).
    pub path: ContractionPath,
    /// Operand values.
    pub operands: Vec<Tensor<f64>>,
}

impl Network {
    /// Builds and compiles the network.
    pub fn einsum(&self) -> Einsum<f64> {
        Einsum::new(&self.expression, &self.shapes, PathChoice::Explicit(self.path.clone()))
            .unwrap_or_else(|e| panic!("{}: {e}", self.name))
    }

    /// The operands as the evaluator takes them.
    pub fn refs(&self) -> Vec<&Tensor<f64>> {
        self.operands.iter().collect()
    }
}

/// `n` distinct labels: characters that are not syntax, whitespace or controls (from
/// U+0100, so that any number of them fits).
pub fn labels(n: usize) -> Vec<char> {
    (0x100u32..).filter_map(char::from_u32).filter(|c| !c.is_whitespace() && !c.is_control()).take(n).collect()
}

/// The MPS inner product of `docs/SPEC.md` §8.2. Operands alternate ket
/// `A_i(a_i, p_i, a_{i+1})` and bra `B_i(b_i, p_i, b_{i+1})` (the end sites drop their outer
/// bond), so operand `2i` is `A_i` and `2i + 1` is `B_i`; entries are positive and scaled so
/// the result stays near 1.
///
/// # Panics
/// If `sites < 2` or `chi == 0`.
pub fn mps(sites: usize, chi: usize) -> Network {
    assert!(sites >= 2 && chi >= 1, "an MPS needs two sites and a bond dimension");
    let l = labels(3 * sites + 3);
    let p = |i: usize| l[2 * sites + 2 + i];
    let mut terms = Vec::new();
    let mut shapes = Vec::new();
    for i in 0..sites {
        for offset in [0, sites + 1] {
            let bond = |i: usize| l[offset + i];
            let mut t = String::new();
            let mut s = Vec::new();
            if i > 0 {
                t.push(bond(i));
                s.push(chi);
            }
            t.push(p(i));
            s.push(2);
            if i + 1 < sites {
                t.push(bond(i + 1));
                s.push(chi);
            }
            terms.push(t);
            shapes.push(s);
        }
    }
    // Zipper: A0·B0, then the environment (last in the list) with the first remaining operand.
    let mut steps = vec![[0, 1]];
    for k in 0..2 * (sites - 1) {
        steps.push([0, 2 * sites - 2 - k]);
    }
    let operands = shapes
        .iter()
        .map(|s: &Vec<usize>| {
            // Entries c·(1 + 0.01·Σ index), with c making the transfer matrix's row sums
            // about 1, so that ⟨ψ|ψ⟩ stays near 1 for any number of sites.
            let mean: f64 = s.iter().map(|&d| (d - 1) as f64 / 2.0).sum();
            let c = 1.0 / ((1.0 + 0.01 * mean) * (s.iter().product::<usize>() as f64).sqrt());
            Tensor::from_fn(s.clone(), |i| c * (1.0 + 0.01 * i.iter().sum::<usize>() as f64)).expect("valid shape")
        })
        .collect();
    Network {
        name: format!("mps_n{sites}_chi{chi}"),
        expression: terms.join(",") + "->",
        shapes,
        path: ContractionPath::new(steps),
        operands,
    }
}

/// A bundled instance of `docs/SPEC.md` §8.3 (one of [`Instance::bundled_names`]) with
/// seeded operands, on its `opt_flops` path.
///
/// # Panics
/// If the instance file is missing or malformed (they are part of the repository).
pub fn instance(name: &str) -> Network {
    let inst = Instance::bundled(name).unwrap_or_else(|e| panic!("{e}"));
    let path = inst.opt_flops.clone().unwrap_or_else(|| panic!("{name} has no opt_flops path"));
    let operands = inst.random_operands::<f64>(42).unwrap_or_else(|e| panic!("{name}: {e}"));
    Network { name: inst.name, expression: inst.format_string, shapes: inst.shapes, path, operands }
}

/// The gradient of a network's result with respect to every operand, and its cotangent
/// (ones of the result's shape).
pub fn gradient(e: &Einsum<f64>) -> (EinsumGradient<f64>, Tensor<f64>) {
    let all: Vec<usize> = (0..e.shapes().len()).collect();
    let g = e.gradient(&all).expect("a contraction network has a gradient");
    let ones = Tensor::from_fn(e.output_shape().to_vec(), |_| 1.0).expect("valid shape");
    (g, ones)
}

/// Per-step times of one network (microseconds): the whole evaluation, and the sum of its
/// contractions run one by one on their recorded inputs without the engine (the kernels).
#[derive(Copy, Clone, Debug)]
pub struct StepTimes {
    /// Contraction steps (instructions of the compiled program).
    pub steps: usize,
    /// Evaluation time per step: best over rounds of the mean over `reps` evaluations.
    pub per_step_us: f64,
    /// Kernel time per step, measured the same way.
    pub kernel_per_step_us: f64,
}

impl StepTimes {
    /// Evaluation minus kernel time, per step (the engine's overhead).
    pub fn overhead_us(&self) -> f64 {
        self.per_step_us - self.kernel_per_step_us
    }

    /// Measures `net`: `rounds` rounds of about `work` steps each (at least 3 evaluations
    /// per round), alternating the whole evaluation and the kernels alone.
    pub fn measure(net: &Network, rounds: usize, work: usize) -> StepTimes {
        let e = net.einsum();
        let refs = net.refs();
        let steps = e.program().instruction_count().max(1);
        let reps = (work / steps).clamp(3, 1000);
        let kernels = Kernels::new(&e, &net.operands);
        let mut state = EvalState::new();
        e.eval_with(&mut state, &refs).expect("evaluates");
        let (mut eval, mut kernel) = (f64::INFINITY, f64::INFINITY);
        for _ in 0..rounds.max(1) {
            let t = Instant::now();
            for _ in 0..reps {
                std::hint::black_box(e.eval_with(&mut state, &refs).expect("evaluates"));
            }
            eval = eval.min(t.elapsed().as_secs_f64() / reps as f64);
            let t = Instant::now();
            for _ in 0..reps {
                kernels.run();
            }
            kernel = kernel.min(t.elapsed().as_secs_f64() / reps as f64);
        }
        StepTimes { steps, per_step_us: eval * 1e6 / steps as f64, kernel_per_step_us: kernel * 1e6 / steps as f64 }
    }
}

/// Every operation of a network's graph with its recorded inputs: the kernels alone, as a
/// baseline without the engine (no slots, no dispatch, no operand lookups).
pub struct Kernels {
    steps: Vec<(einsum::TensorOp<f64>, Vec<Tensor<f64>>)>,
}

impl Kernels {
    /// Records each operation's inputs by evaluating the graph once in program order.
    pub fn new(e: &Einsum<f64>, operands: &[Tensor<f64>]) -> Self {
        let g = e.graph();
        let mut vals: Vec<Option<Tensor<f64>>> = vec![None; g.value_count()];
        for (i, &v) in g.inputs().iter().enumerate() {
            vals[v.index()] = Some(operands[i].clone());
        }
        let mut steps = Vec::new();
        for op in g.operations() {
            let ins: Vec<Tensor<f64>> = op
                .inputs()
                .map(|r| match r {
                    ValueRef::Local(v) => vals[v.index()].clone().expect("topological order"),
                    ValueRef::External(_) => unreachable!("an einsum graph is one fragment"),
                })
                .collect();
            let refs: Vec<&Tensor<f64>> = ins.iter().collect();
            vals[op.outputs().next().expect("one output").index()] = Some(op.operation().apply(&refs));
            steps.push((op.operation().clone(), ins));
        }
        Kernels { steps }
    }

    /// Runs every kernel once, dropping each result.
    pub fn run(&self) {
        for (op, ins) in &self.steps {
            let out = match ins.as_slice() {
                [a] => op.apply(&[a]),
                [a, b] => op.apply(&[a, b]),
                _ => unreachable!("tensor operations take one or two operands"),
            };
            std::hint::black_box(out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mps_is_the_norm_of_a_product_state() {
        let net = mps(4, 2);
        assert_eq!(net.operands.len(), 8);
        assert_eq!(net.path.steps().len(), 7);
        let r = net.einsum().eval(&net.refs()).unwrap();
        let want = einsum::reference_einsum(&net.expression, &net.refs()).unwrap();
        assert!((r.data()[0] - want.data()[0]).abs() < 1e-12 * want.data()[0].abs());
        let big = mps(1000, 8);
        let norm = big.einsum().eval(&big.refs()).unwrap().data()[0];
        assert!((0.3..3.0).contains(&norm), "⟨ψ|ψ⟩ = {norm}");
        let t = StepTimes::measure(&net, 1, 10);
        assert_eq!(t.steps, 7);
        assert!(t.per_step_us > 0.0 && t.kernel_per_step_us > 0.0);
    }

    #[test]
    fn instances_load_with_their_paths() {
        let net = instance("bin_matmul_256");
        assert_eq!(net.path.steps().len(), 1);
        let e = net.einsum();
        let (g, ones) = gradient(&e);
        let grads = g.eval(&net.refs(), &ones).unwrap();
        assert_eq!(grads.len(), 2);
    }
}
