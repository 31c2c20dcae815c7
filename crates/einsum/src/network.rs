//! Contraction graphs: [`Einsum`] turns an expression, operand shapes and a pairwise path
//! into a `computegraph` graph of [`TensorOp`]s, compiles it once
//! (resolve → materialize_merge → compile) and evaluates it any number of times;
//! [`EinsumCache`] reuses compiled expressions; [`Einsum::gradient`] and [`Einsum::hvp`]
//! build derivative programs with `tidu`.
//!
//! Graph shape: one input per operand (key [`TensorKey::Var`]`(i)`), one `contract` per
//! path step, and a final `unary` only when a single operand needs reordering or reducing.
//! Each step keeps the labels still needed (by a remaining operand or the output) in the
//! order batch, left, right (see [`crate::kernel`]), so the GEMM result needs no permute,
//! unless another order that its GEMM also writes in place spares the consuming step a
//! packing copy (`layout.rs` chooses it, by the kernel planner's estimates); the last step
//! produces the output's labels in the output's order.
//!
//! Labels are renumbered per step ([`ContractSpec`] is canonical), so the same network
//! spelled with other letters builds the same keys and shares compiled programs.
//!
//! Memory: while following the path, the build counts the bytes of every operand, step
//! result and output, alone and alive together, in checked arithmetic, against the
//! [`EinsumOptions`]' [`MemoryLimit`] (by default the one policy of `memory.rs`: half the
//! machine, at most 8 GiB); [`Einsum::gradient`] and
//! [`Einsum::hvp`] count the reverse pass. Nothing an evaluation allocates for tensors has
//! escaped the count (ADR 0011).

use std::sync::{Arc, Mutex, OnceLock};

use computegraph::{
    CompileCache, CompiledProgram, EvalState, Graph, GraphBuilder, MaterializedGraph, OperationRole, ValueKey, ValueRef,
};
use rustc_hash::FxHashMap;
use tidu::DerivativeProgram;

use crate::elem::Elem;
use crate::error::{EinsumError, EinsumResult};
use crate::kernel::{ContractSpec, UnarySpec};
use crate::layout::{Consumer, result_order, step_output};
use crate::memory::MemoryLimit;
use crate::op::{TensorKey, TensorOp};
use crate::path::{ContractionPath, PathChoice};
use crate::plan::Plan;
use crate::scan::RangeScan;
use crate::subscripts::Subscripts;
use crate::tensor::Tensor;
use crate::threads::{PoolUse, Step};

/// Options of [`Einsum::with_options`]; `EinsumOptions::default()` is what [`Einsum::new`]
/// uses.
///
/// ```
/// use einsum::{Einsum, EinsumError, EinsumOptions, MemoryLimit, PathChoice};
///
/// // An outer product of two 2^20-vectors would be an 8 TiB result: an error, not an abort.
/// let big = [vec![1 << 20], vec![1 << 20]];
/// let e = Einsum::<f64>::new("i,j->ij", &big, PathChoice::Greedy).err().unwrap();
/// assert!(matches!(e, EinsumError::Memory { .. }));
/// assert!(e.to_string().contains("the output"), "{e}");
///
/// // A smaller budget, set per network: 1 KiB is too little for two 8x8 matrices.
/// let small = EinsumOptions::default().memory_limit(MemoryLimit::Bytes(1024));
/// let shapes = [vec![8, 8], vec![8, 8]];
/// assert!(Einsum::<f64>::with_options("ij,jk->ik", &shapes, PathChoice::Greedy, &small).is_err());
/// assert!(Einsum::<f64>::new("ij,jk->ik", &shapes, PathChoice::Greedy).is_ok());
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EinsumOptions {
    memory_limit: MemoryLimit,
}

impl EinsumOptions {
    /// The budget for the tensors of the contraction (default [`MemoryLimit::default`],
    /// half the machine, at most 8 GiB), checked when the network is built and again by
    /// [`Einsum::gradient`].
    /// `Einsum` contracts whole tensors and refuses a network over the budget;
    /// [`SlicedEinsum`](crate::SlicedEinsum) with the same options and
    /// `Slicing::Memory` chooses labels to slice so that it fits, and contracts (and
    /// differentiates) it slice by slice.
    pub fn memory_limit(mut self, limit: MemoryLimit) -> Self {
        self.memory_limit = limit;
        self
    }

    /// The memory limit set.
    pub fn limit(&self) -> MemoryLimit {
        self.memory_limit
    }
}

/// The running memory check of a network: the operands (held by the caller throughout)
/// plus the intermediates alive at each step, in checked arithmetic.
struct Budget {
    limit: MemoryLimit,
    elem: usize,
    /// Bytes alive now; `None` once past 2^64.
    live: Option<u64>,
    /// The largest `live` seen (the estimated peak).
    peak: Option<u64>,
}

impl Budget {
    fn new(limit: MemoryLimit, elem: usize) -> Self {
        Budget { limit, elem, live: Some(0), peak: Some(0) }
    }

    fn error(&self, what: String, bytes: Option<u64>) -> EinsumError {
        let limit = match self.limit {
            MemoryLimit::Bytes(b) => Some(b),
            MemoryLimit::Unlimited => None,
        };
        EinsumError::Memory { what, bytes, limit }
    }

    /// Checks one tensor of `shape` alone, then with what is alive, and keeps it alive.
    fn alloc(&mut self, shape: &[usize], what: impl Fn() -> String) -> EinsumResult<Option<u64>> {
        let bytes = crate::memory::tensor_bytes(shape, self.elem);
        if !self.limit.allows(bytes) {
            return Err(self.error(format!("{} of shape {shape:?}", what()), bytes));
        }
        let live = self.live.zip(bytes).and_then(|(a, b)| a.checked_add(b));
        if !self.limit.allows(live) {
            return Err(self.error(format!("{} of shape {shape:?}, with the tensors alive beside it,", what()), live));
        }
        self.live = live;
        self.peak = self.peak.zip(live).map(|(p, l)| p.max(l));
        Ok(bytes)
    }

    fn free(&mut self, bytes: Option<u64>) {
        self.live = self.live.zip(bytes).map(|(a, b)| a.saturating_sub(b));
    }
}

/// A compiled contraction network for fixed shapes.
///
/// The path is followed as given, except that a run of small element-wise factors it
/// multiplies into one large intermediate in turn is multiplied together first
/// ([`Plan::with_factors_merged`]): fewer passes and multiply-adds, the same result to
/// rounding.
///
/// ```
/// use einsum::{Einsum, PathChoice, Tensor};
///
/// let e = Einsum::<f64>::new("ij,jk,kl->il", &[vec![2, 3], vec![3, 4], vec![4, 2]], PathChoice::Greedy).unwrap();
/// let ones = |s: &[usize]| Tensor::from_fn(s.to_vec(), |_| 1.0).unwrap();
/// let (a, b, c) = (ones(&[2, 3]), ones(&[3, 4]), ones(&[4, 2]));
/// let r = e.eval(&[&a, &b, &c]).unwrap();
/// assert_eq!(r.shape(), &[2, 2]);
/// assert_eq!(r.get(&[0, 1]), Some(12.0));
/// assert!(e.eval(&[&a, &b]).is_err());
/// ```
pub struct Einsum<T: Elem> {
    plan: Plan,
    graph: Arc<Graph<TensorOp<T>>>,
    output: ValueKey<TensorOp<T>>,
    output_shape: Vec<usize>,
    program: Arc<CompiledProgram<TensorOp<T>>>,
    multiply_adds: f64,
    options: EinsumOptions,
    /// Estimated peak bytes of the tensors of one evaluation (operands included).
    peak_bytes: u64,
    /// Bytes of every intermediate of the path, the output included.
    intermediate_bytes: u64,
    /// The program's steps as [`Einsum::eval_parallel`] weighs them (`threads.rs`).
    steps: Box<[Step]>,
}

impl<T: Elem> Einsum<T> {
    /// Plans ([`Plan::new`]: parses, checks shapes and path), checks memory (the default
    /// limit, [`MemoryLimit::default`]), builds and compiles.
    pub fn new(expression: &str, shapes: &[Vec<usize>], path: PathChoice) -> EinsumResult<Self> {
        Self::with_options(expression, shapes, path, &EinsumOptions::default())
    }

    /// As [`Einsum::new`], with options (a memory limit).
    pub fn with_options(
        expression: &str,
        shapes: &[Vec<usize>],
        path: PathChoice,
        options: &EinsumOptions,
    ) -> EinsumResult<Self> {
        Self::build(Plan::new(expression, shapes, path, options.memory_limit)?, None)
    }

    /// As [`Einsum::new`], compiling through `cache` (equal graphs share one program).
    pub fn with_cache(
        expression: &str,
        shapes: &[Vec<usize>],
        path: PathChoice,
        cache: &CompileCache<TensorOp<T>>,
    ) -> EinsumResult<Self> {
        Self::build(Plan::new(expression, shapes, path, MemoryLimit::default())?, Some(cache))
    }

    /// Builds and compiles a plan, checking its tensors against the plan's memory budget.
    pub fn from_plan(plan: Plan) -> EinsumResult<Self> {
        Self::build(plan, None)
    }

    /// [`Einsum::from_plan`], compiling through `cache`.
    pub fn from_plan_with_cache(plan: Plan, cache: &CompileCache<TensorOp<T>>) -> EinsumResult<Self> {
        Self::build(plan, Some(cache))
    }

    fn build(plan: Plan, cache: Option<&CompileCache<TensorOp<T>>>) -> EinsumResult<Self> {
        // Small factors multiplied together before they meet a large intermediate: one pass
        // over it instead of one per factor (`merge.rs`).
        let plan = plan.with_factors_merged().unwrap_or(plan);
        let options = EinsumOptions::default().memory_limit(plan.memory_limit());
        let net = plan.network();
        let (inputs, output, sizes) = (&net.inputs, &net.output, &net.sizes);
        let mut budget = Budget::new(options.memory_limit, std::mem::size_of::<T>());
        for (i, s) in plan.shapes().iter().enumerate() {
            budget.alloc(s, || format!("operand {i}"))?;
        }
        let followed = plan.followed();
        let n_inputs = inputs.len();
        let mut intermediate_bytes = Some(0u64);
        let mut b = GraphBuilder::<TensorOp<T>>::new();
        // Per path operand (inputs, then step results): its value and its labels in the
        // graph's layout (the follower's labels, ordered for the consuming step, `layout.rs`).
        let mut values: Vec<(computegraph::LocalValueId, Vec<u32>)> = Vec::with_capacity(2 * n_inputs);
        for (i, l) in inputs.iter().enumerate() {
            values.push((b.try_add_input(TensorKey::var(i as u32))?, l.clone()));
        }
        let mut multiply_adds = 0.0;
        // The sums done first (a one-operand einsum each), before any pairwise step; their
        // results stay alive until a step consumes them.
        let mut summed_bytes: Vec<Option<u64>> = vec![Some(0); n_inputs];
        for (i, kept) in plan.reduced_inputs().iter().enumerate().filter(|&(i, _)| plan.summed_first(i)) {
            let shape: Vec<usize> = kept.iter().map(|&c| sizes[c as usize]).collect();
            let bytes = budget.alloc(&shape, || format!("operand {i} summed over the labels only it holds"))?;
            intermediate_bytes = intermediate_bytes.zip(bytes).and_then(|(a, b)| a.checked_add(b));
            summed_bytes[i] = bytes;
            let spec = UnarySpec::new(&inputs[i], kept, sizes)?;
            multiply_adds += spec.multiply_adds() as f64;
            let v =
                b.try_add_operation(TensorOp::unary(spec), vec![ValueRef::Local(values[i].0)], OperationRole::Primary)?
                    [0];
            values[i] = (v, kept.clone());
        }
        // Bytes of each step's result.
        let mut result_bytes: Vec<Option<u64>> = Vec::with_capacity(n_inputs);
        let steps = followed.steps();
        // Per step: the step that consumes its result and the result's position there, so
        // that the result is laid out for that step (`layout.rs`).
        let mut consumer_of: Vec<Option<(usize, usize)>> = vec![None; steps.len()];
        for (c, step) in steps.iter().enumerate() {
            for (position, &o) in step.operands.iter().enumerate() {
                if let Some(r) = followed.step_of(o) {
                    consumer_of[r] = Some((c, position));
                }
            }
        }
        for (s, step) in steps.iter().enumerate() {
            let ([si, sj], [i, j]) = (step.operands, step.positions);
            let (va, la) = (values[si.index()].0, std::mem::take(&mut values[si.index()].1));
            let (vb, lb) = (values[sj.index()].0, std::mem::take(&mut values[sj.index()].1));
            let last = s + 1 == steps.len();
            let kept = if last {
                output.clone()
            } else {
                let needed = followed.labels(step.result);
                let default = step_output(&la, &lb, |c| needed.contains(&c));
                match consumer_of[s] {
                    Some((c, position)) => {
                        let next = &steps[c];
                        let other = next.operands[1 - position];
                        // The other operand's layout: its value's when built already (an
                        // input or an earlier result), else the follower's order.
                        let other_labels = match followed.step_of(other) {
                            Some(r) if r > s => followed.labels(other),
                            _ => &values[other.index()].1[..],
                        };
                        let kept_next = followed.labels(next.result);
                        let consumer = Consumer {
                            position,
                            other: other_labels,
                            output: (c + 1 == steps.len()).then_some(&output[..]),
                            needed: &|l| kept_next.contains(&l),
                        };
                        result_order([&la, &lb], default, &consumer, sizes)?
                    }
                    None => default,
                }
            };
            let shape: Vec<usize> = kept.iter().map(|&c| sizes[c as usize]).collect();
            let bytes = budget.alloc(&shape, || {
                let what = if last { "the output" } else { "the intermediate" };
                format!("{what} of step {s} of the path (operands {i} and {j} of {})", n_inputs - s)
            })?;
            intermediate_bytes = intermediate_bytes.zip(bytes).and_then(|(a, b)| a.checked_add(b));
            for operand in step.operands {
                match followed.step_of(operand) {
                    Some(r) => budget.free(result_bytes[r]),
                    None => budget.free(summed_bytes[operand.index()]),
                }
            }
            result_bytes.push(bytes);
            let spec = ContractSpec::new(&la, &lb, &kept, sizes)?;
            multiply_adds += spec.multiply_adds() as f64;
            let v = b.try_add_operation(
                TensorOp::contract(spec),
                vec![ValueRef::Local(va), ValueRef::Local(vb)],
                OperationRole::Primary,
            )?[0];
            values.push((v, kept));
        }
        let last = followed.last().index();
        let (mut result, labels) = (values[last].0, std::mem::take(&mut values[last].1));
        if followed.final_reduction().is_some() {
            let shape: Vec<usize> = output.iter().map(|&c| sizes[c as usize]).collect();
            let bytes = budget.alloc(&shape, || "the output (a reordering or reduction of one operand)".to_string())?;
            intermediate_bytes = intermediate_bytes.zip(bytes).and_then(|(a, b)| a.checked_add(b));
            let spec = UnarySpec::new(&labels, output, sizes)?;
            multiply_adds += spec.multiply_adds() as f64;
            result =
                b.try_add_operation(TensorOp::unary(spec), vec![ValueRef::Local(result)], OperationRole::Primary)?[0];
        }
        b.try_set_outputs(vec![result])?;
        let graph = Arc::new(b.try_build()?);
        let output_key = graph.try_global_key(result)?;
        let view = computegraph::try_resolve(vec![graph.clone()])?;
        let outputs = std::slice::from_ref(&output_key);
        let program = match cache {
            Some(c) => c.get_or_compile(&view, outputs)?,
            None => Arc::new(computegraph::try_compile(&computegraph::try_materialize_merge(&view, outputs)?)?),
        };
        let output_shape = plan.output_shape();
        drop(followed);
        let steps = crate::threads::graph_steps(&graph);
        Ok(Einsum {
            plan,
            graph,
            output: output_key,
            output_shape,
            program,
            multiply_adds,
            options,
            // Both are below the limit (or the limit is off) when the checks passed.
            peak_bytes: budget.peak.unwrap_or(u64::MAX),
            intermediate_bytes: intermediate_bytes.unwrap_or(u64::MAX),
            steps,
        })
    }

    /// Evaluates on operands of the shapes given at construction: on the calling thread,
    /// or, when called inside a rayon pool of several threads (`pool.install(|| e.eval(..))`,
    /// as a sliced contraction's slices are when their caller runs in one), on that pool's
    /// threads as [`Einsum::eval_parallel`] runs, where the estimated cost says they pay.
    pub fn eval(&self, operands: &[&Tensor<T>]) -> EinsumResult<Tensor<T>> {
        self.eval_with(&mut EvalState::new(), operands)
    }

    /// [`Einsum::eval`] reusing `state`'s allocations (on one thread; in the caller's pool,
    /// when that pays, without them).
    pub fn eval_with(&self, state: &mut EvalState<Tensor<T>>, operands: &[&Tensor<T>]) -> EinsumResult<Tensor<T>> {
        if self.pool_use(crate::elem::caller_pool_threads()) == PoolUse::Pool {
            return self.eval_in_pool(None, operands);
        }
        self.eval_here(state, operands)
    }

    /// [`Einsum::eval_with`] on the calling thread, whatever pool it runs in (its kernels
    /// still split there).
    fn eval_here(&self, state: &mut EvalState<Tensor<T>>, operands: &[&Tensor<T>]) -> EinsumResult<Tensor<T>> {
        self.check_operands(operands)?;
        let _evaluation = crate::buffer::begin_evaluation();
        let inputs = self.program.bind_inputs(|k| match k {
            TensorKey::Var(i) => operands.get(*i as usize).copied(),
            TensorKey::Tangent(_) => None,
        })?;
        let mut out = self.program.eval_with(state, &mut (), &inputs)?;
        // A stopped run holds placeholders (`stop.rs`).
        crate::stop::check()?;
        Ok(out.pop().expect("one output"))
    }

    /// [`Einsum::eval`] on every thread of `pool` (or of the current rayon pool, the
    /// global one outside any pool), with two kinds of parallelism: independent steps run
    /// in parallel (computegraph's evaluator, driven by the operations' cost hints: by
    /// dependency when the steps are costly, a step starting when its operands are
    /// ready), and a step whose GEMM has at least `2^20` multiply-adds splits that GEMM
    /// (and permutations of `2^20` elements or more and element-wise products of `2^17`
    /// their copies) over the pool's threads, which an idle thread then helps with. Smaller
    /// steps stay on one thread, so they do not pay for forking.
    ///
    /// Cost decides whether the pool is entered at all (`threads.rs`): a program of less
    /// than about 2 ms of work, or whose steps form a chain with no step large enough to
    /// split, runs exactly as [`Einsum::eval`] does, on the calling thread, so it is never
    /// slower for the pool. The result is the one-thread result bit for bit wherever the
    /// kernels keep the order of sums (every kernel does; see `docs/PERFORMANCE.md`).
    pub fn eval_parallel(&self, pool: Option<&rayon::ThreadPool>, operands: &[&Tensor<T>]) -> EinsumResult<Tensor<T>> {
        match self.pool_use(pool_threads(pool)) {
            PoolUse::OneThread => self.eval_here(&mut EvalState::new(), operands),
            PoolUse::Kernels => in_pool(pool, || self.eval_here(&mut EvalState::new(), operands)),
            PoolUse::Pool => self.eval_in_pool(pool, operands),
        }
    }

    /// How [`Self::eval_parallel`] uses a pool of `threads` threads.
    pub(crate) fn pool_use(&self, threads: usize) -> PoolUse {
        crate::threads::choose(&self.steps, threads)
    }

    /// Whether an evaluation inside a pool of `threads` threads would use more than the
    /// calling thread (the estimated cost's choice, `threads.rs`). A caller that would hand
    /// the call to a pool (`pool.install`) asks first: when this is `false` the call runs
    /// the same instructions on the calling thread, without the hand-off to a sleeping
    /// worker and back, which costs more than a sub-millisecond call gains.
    pub fn uses_threads(&self, threads: usize) -> bool {
        self.pool_use(threads) != PoolUse::OneThread
    }

    /// [`Einsum::eval_parallel`] without the choice: always in the pool.
    pub(crate) fn eval_in_pool(
        &self,
        pool: Option<&rayon::ThreadPool>,
        operands: &[&Tensor<T>],
    ) -> EinsumResult<Tensor<T>> {
        self.check_operands(operands)?;
        let _evaluation = crate::buffer::begin_evaluation();
        let inputs = self.program.bind_inputs(|k| match k {
            TensorKey::Var(i) => operands.get(*i as usize).copied(),
            TensorKey::Tangent(_) => None,
        })?;
        // Inside the pool, so that the kernels see its threads even when the evaluator
        // finds no level worth splitting and runs in order.
        let run = || self.program.try_eval_parallel(pool, &mut (), &inputs);
        let mut out = in_pool(pool, run)?;
        crate::stop::check()?;
        Ok(out.pop().expect("one output"))
    }

    fn check_operands(&self, operands: &[&Tensor<T>]) -> EinsumResult<()> {
        check_operand_shapes(&self.plan.name_display(), self.plan.shapes(), operands)
    }

    /// The plan it was built from.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }
    /// The parsed subscripts (`None` for a plan made from a numbered network).
    pub fn subscripts(&self) -> Option<&Subscripts> {
        self.plan.subscripts()
    }
    /// The operand shapes.
    pub fn shapes(&self) -> &[Vec<usize>] {
        self.plan.shapes()
    }
    /// The path used: the explicit one as given (steps of any length), or the one a search
    /// found. The graph follows its pairwise lowering ([`ContractionPath::pairwise`]), whose
    /// step numbers memory errors name.
    pub fn path(&self) -> &ContractionPath {
        self.plan.path()
    }
    /// The graph (one fragment; inputs `TensorKey::Var(i)`).
    pub fn graph(&self) -> &Arc<Graph<TensorOp<T>>> {
        &self.graph
    }
    /// The key of the result.
    pub fn output_key(&self) -> &ValueKey<TensorOp<T>> {
        &self.output
    }
    /// The result's shape.
    pub fn output_shape(&self) -> &[usize] {
        &self.output_shape
    }
    /// The compiled program.
    pub fn program(&self) -> &Arc<CompiledProgram<TensorOp<T>>> {
        &self.program
    }
    /// Multiply-adds of the direct loops of all steps (a flop count of the path, /2).
    pub fn multiply_adds(&self) -> f64 {
        self.multiply_adds
    }
    /// The options it was built with.
    pub fn options(&self) -> &EinsumOptions {
        &self.options
    }
    /// The estimated peak bytes of the tensors of one evaluation: the operands and the
    /// intermediates alive together (kernel scratch aside). Checked against the memory
    /// limit when the network was built.
    pub fn peak_bytes(&self) -> u64 {
        self.peak_bytes
    }

    /// Checks the tensors of a reverse pass against the limit: the forward intermediates
    /// (kept for the backward pass), the cotangent of each, the operands and one gradient
    /// per `wrt` operand, and the tensors of `made` (what a reverse pass adds to them), all
    /// counted alive together (an upper bound).
    pub(crate) fn check_reverse(&self, what: &str, wrt: &[usize], made: &[Vec<usize>]) -> EinsumResult<()> {
        self.check_reverse_beside(what, wrt, made, 0)
    }

    /// [`Self::check_reverse`] with `beside` more bytes alive throughout (another
    /// network's tensors evaluated in the same program, `closed_sum.rs`).
    pub(crate) fn check_reverse_beside(
        &self,
        what: &str,
        wrt: &[usize],
        made: &[Vec<usize>],
        beside: u64,
    ) -> EinsumResult<()> {
        let mut budget = Budget::new(self.options.memory_limit, std::mem::size_of::<T>());
        let peak = self.peak_bytes.checked_add(beside);
        budget.live = peak;
        let all = self.intermediate_bytes.checked_mul(2).zip(peak).and_then(|(b, p)| b.checked_add(p));
        if !budget.limit.allows(all) {
            return Err(budget.error(
                format!("{what} of `{}` (the forward intermediates and their cotangents)", short(&self.plan.name())),
                all,
            ));
        }
        budget.live = all;
        for &i in wrt {
            budget.alloc(&self.plan.shapes()[i], || format!("{what}: the gradient of operand {i}"))?;
        }
        // Each summed operand and, in the reverse pass, its cotangent, of the same shape.
        for shape in made {
            budget.alloc(shape, || format!("{what}: an operand of the last step summed"))?;
            budget.alloc(shape, || format!("{what}: the cotangent of an operand of the last step summed"))?;
        }
        Ok(())
    }

    pub(crate) fn wrt_keys(&self, wrt: &[usize]) -> EinsumResult<Vec<TensorKey>> {
        let mut seen = vec![false; self.plan.shapes().len()];
        wrt.iter()
            .map(|&i| match seen.get_mut(i) {
                Some(s) if !*s => {
                    *s = true;
                    Ok(TensorKey::var(i as u32))
                }
                Some(_) => Err(EinsumError::Shape(format!("operand {i} is listed twice in `wrt`"))),
                None => Err(EinsumError::Shape(format!(
                    "cannot differentiate with respect to operand {i}: there are {}",
                    self.plan.shapes().len()
                ))),
            })
            .collect()
    }

    /// The reverse-mode derivative (vector-Jacobian product) with respect to the operands
    /// `wrt`: evaluate it with a cotangent of the output's shape (a scalar `1` for the
    /// gradient of a scalar result). Complex: the adjoint for `Re(conj(a)·b)`.
    pub fn gradient(&self, wrt: &[usize]) -> EinsumResult<EinsumGradient<T>> {
        let keys = self.wrt_keys(wrt)?;
        self.check_reverse("the gradient", wrt, &[])?;
        self.reverse(&keys, wrt, vec![self.graph.clone()], &self.output, self.output_shape.clone())
    }

    /// The reverse pass of `f` (a value of `graphs`, whose first is the forward graph)
    /// with respect to `keys` (the `wrt` operands'), seeded by a cotangent of
    /// `cotangent_shape`, with the contraction's value as output 0 of its `with_value`
    /// program.
    fn reverse(
        &self,
        keys: &[TensorKey],
        wrt: &[usize],
        graphs: Vec<Arc<Graph<TensorOp<T>>>>,
        f: &ValueKey<TensorOp<T>>,
        cotangent_shape: Vec<usize>,
    ) -> EinsumResult<EinsumGradient<T>> {
        let reverse = self.reverse_graph(keys, graphs, f)?;
        self.compile_reverse(reverse, wrt, cotangent_shape)
    }

    /// [`Self::reverse`]'s transform and rewrites, before anything is compiled: the
    /// program with this network's value as output 0, then the gradients of `f`.
    pub(crate) fn reverse_graph(
        &self,
        keys: &[TensorKey],
        graphs: Vec<Arc<Graph<TensorOp<T>>>>,
        f: &ValueKey<TensorOp<T>>,
    ) -> EinsumResult<ReverseGraph<T>> {
        let view = computegraph::try_resolve(graphs.clone())?;
        let g = tidu::vjp(&view, std::slice::from_ref(f), keys)?;
        let seed = g.tangent_inputs().first().map(|(k, _)| k.clone());
        // The same reverse pass with the value as output 0, so one run gives both (the
        // program above may skip forward steps that only the value needs).
        let grad_keys = g.tangent_output_keys();
        let mut keys = vec![self.output.clone()];
        keys.extend(grad_keys.iter().flatten().cloned());
        let mut graphs = graphs;
        graphs.push(g.graph().clone());
        let both = computegraph::try_resolve(graphs)?;
        let merged = computegraph::try_materialize_merge(&both, &keys)?;
        // Gradients through an expansion contracted in their cheapest order (`reassoc.rs`).
        let merged = crate::reassoc::reassociate(&merged)?.unwrap_or(merged);
        // Each memory-bound step's two gradients in one pass (`fuse.rs`).
        let merged = crate::fuse::fuse_pairs(&merged)?.unwrap_or(merged);
        let mut next = 1..;
        let value_positions = grad_keys.iter().map(|k| k.as_ref().map(|_| next.next().expect("unbounded"))).collect();
        Ok(ReverseGraph { g, seed, merged, value_positions })
    }

    /// Compiles what [`Self::reverse_graph`] made into the [`EinsumGradient`] of the
    /// operands `wrt`, taking a cotangent of `cotangent_shape`.
    pub(crate) fn compile_reverse(
        &self,
        reverse: ReverseGraph<T>,
        wrt: &[usize],
        cotangent_shape: Vec<usize>,
    ) -> EinsumResult<EinsumGradient<T>> {
        let ReverseGraph { g, seed, merged, value_positions } = reverse;
        let multiply_adds = merged.operations().map(|op| op_multiply_adds(op.operation())).sum();
        let with_value = computegraph::try_compile(&merged)?;
        let steps = crate::threads::materialized_steps(&merged);
        let merged = Arc::new(merged);
        let mut einsum = self.meta();
        einsum.cotangent_shape = cotangent_shape;
        Ok(EinsumGradient {
            program: DerivativeProgram::new(&g)?,
            with_value,
            value_positions,
            multiply_adds,
            seed,
            wrt: wrt.to_vec(),
            einsum,
            steps,
            merged,
            ranged: OnceLock::new(),
        })
    }

    /// Hessian-vector products of `x ↦ ⟨c, f(x)⟩` with respect to the operands `wrt`
    /// (forward over reverse): evaluate with the cotangent `c` and one direction per `wrt`.
    pub fn hvp(&self, wrt: &[usize]) -> EinsumResult<EinsumHvp<T>> {
        let keys = self.wrt_keys(wrt)?;
        self.check_reverse("the Hessian-vector product", wrt, &[])?;
        let view = computegraph::try_resolve(vec![self.graph.clone()])?;
        let g = tidu::grad(&view, &self.output, &keys)?;
        let seed = g.tangent_inputs().first().map(|(k, _)| k.clone());
        let gkeys: Vec<ValueKey<TensorOp<T>>> = g.tangent_output_keys().into_iter().flatten().collect();
        let hv = tidu::jvp(&computegraph::try_resolve(vec![g.graph().clone()])?, &gkeys, &keys)?;
        let directions = hv.tangent_inputs().iter().map(|(k, _)| k.clone()).collect();
        // Re-align with `wrt`: a symbolic-zero gradient entry has a zero HVP.
        let mut it = 0..;
        let positions = g.tangent_outputs().iter().map(|o| o.map(|_| it.next().expect("unbounded"))).collect();
        Ok(EinsumHvp {
            program: DerivativeProgram::new(&hv)?,
            seed,
            directions,
            positions,
            wrt: wrt.to_vec(),
            einsum: self.meta(),
        })
    }

    fn meta(&self) -> Meta {
        Meta { shapes: self.plan.shapes().to_vec(), cotangent_shape: self.output_shape.clone(), name: self.plan.name() }
    }
}

/// The multiply-adds of one operation as [`Einsum::multiply_adds`] counts them: a
/// contraction's or one-operand einsum's loop; element-wise operations (the cotangents'
/// sums) are not counted.
fn op_multiply_adds<T: Elem>(op: &TensorOp<T>) -> f64 {
    match op {
        TensorOp::Contract(s) => s.multiply_adds() as f64,
        TensorOp::Unary(s) => s.multiply_adds() as f64,
        TensorOp::ContractPair(p) => p.multiply_adds() as f64,
        TensorOp::Add | TensorOp::Neg | TensorOp::Conj | TensorOp::Scale(_) | TensorOp::Range => 0.0,
    }
}

/// An expression for a message: at most 60 characters.
fn short(s: &str) -> String {
    if s.chars().count() <= 60 { s.to_string() } else { format!("{}…", s.chars().take(60).collect::<String>()) }
}

/// A reverse pass transformed and rewritten, not yet compiled ([`Einsum::reverse_graph`]).
pub(crate) struct ReverseGraph<T: Elem> {
    g: tidu::LinearizedGraph<TensorOp<T>>,
    seed: Option<TensorKey>,
    /// The value-and-gradient program's graph.
    pub(crate) merged: MaterializedGraph<TensorOp<T>>,
    value_positions: Vec<Option<usize>>,
}

/// What derivative programs need to check and shape their arguments.
struct Meta {
    shapes: Vec<Vec<usize>>,
    /// The output's shape, or `[]` for [`Einsum::gradient_of_sum`]'s scalar cotangent.
    cotangent_shape: Vec<usize>,
    name: String,
}

impl Meta {
    fn check(&self, what: &str, t: &[&Tensor<impl Elem>], shapes: &[&[usize]]) -> EinsumResult<()> {
        if t.len() != shapes.len() {
            return Err(EinsumError::Shape(format!(
                "{what} of `{}`: {} tensors given, {} expected",
                self.name,
                t.len(),
                shapes.len()
            )));
        }
        for (i, (t, s)) in t.iter().zip(shapes).enumerate() {
            if t.shape() != *s {
                return Err(EinsumError::Shape(format!(
                    "{what} {i} of `{}` has shape {:?}, expected {s:?}",
                    self.name,
                    t.shape()
                )));
            }
        }
        Ok(())
    }
}

fn zeros_like<T: Elem>(shape: &[usize]) -> EinsumResult<Tensor<T>> {
    Tensor::zeros(shape.to_vec())
}

/// A compiled vector-Jacobian product of an [`Einsum`] ([`Einsum::gradient`]).
///
/// ```
/// use einsum::{Einsum, PathChoice, Tensor};
///
/// // f(A, x) = A·x; the cotangent c gives ∂⟨c, f⟩/∂x = Aᵀc.
/// let e = Einsum::<f64>::new("ij,j->i", &[vec![2, 2], vec![2]], PathChoice::Greedy).unwrap();
/// let a = Tensor::new(vec![2, 2], vec![1.0, 2.0, 3.0, 4.0]).unwrap();
/// let x = Tensor::new(vec![2], vec![1.0, 1.0]).unwrap();
/// let c = Tensor::new(vec![2], vec![1.0, 0.0]).unwrap();
/// let g = e.gradient(&[1]).unwrap();
/// let dx = &g.eval(&[&a, &x], &c).unwrap()[0];
/// assert_eq!((dx.get(&[0]), dx.get(&[1])), (Some(1.0), Some(2.0)));
///
/// // The value and the gradient in one run.
/// let (y, grads) = g.eval_with_value(&[&a, &x], &c).unwrap();
/// assert_eq!(y.data(), &[3.0, 7.0]);
/// assert_eq!(grads[0].data(), dx.data());
/// ```
pub struct EinsumGradient<T: Elem> {
    program: DerivativeProgram<TensorOp<T>>,
    /// The reverse pass with the contraction's value as output 0 ([`Self::eval_with_value`]).
    with_value: CompiledProgram<TensorOp<T>>,
    /// For each `wrt` operand, its gradient's position among `with_value`'s outputs
    /// (`None`: a symbolic zero).
    value_positions: Vec<Option<usize>>,
    /// Multiply-adds of `with_value`.
    multiply_adds: f64,
    seed: Option<TensorKey>,
    wrt: Vec<usize>,
    einsum: Meta,
    /// `with_value`'s steps as [`Self::eval_with_value_parallel`] weighs them (`threads.rs`).
    steps: Box<[Step]>,
    /// `with_value`'s graph, from which [`Self::eval_with_value_and_range`] makes its program.
    merged: Arc<MaterializedGraph<TensorOp<T>>>,
    /// `with_value` with each output's range read right after its last write
    /// (`ranged.rs`) and its steps, made on the first [`Self::eval_with_value_and_range`].
    ranged: OnceLock<RangedProgram<T>>,
}

impl<T: Elem> EinsumGradient<T> {
    /// The compiled derivative program (its text dump lists every instruction).
    pub fn program(&self) -> &CompiledProgram<TensorOp<T>> {
        self.program.program()
    }

    /// The shape of the cotangent the evaluations take: the output's, or `[]` (a scalar
    /// `c`) for [`Einsum::gradient_of_sum`].
    pub fn cotangent_shape(&self) -> &[usize] {
        &self.einsum.cotangent_shape
    }

    /// Multiply-adds of one [`Self::eval_with_value`] (value and gradients), counted as
    /// [`Einsum::multiply_adds`] counts the forward pass.
    pub fn multiply_adds(&self) -> f64 {
        self.multiply_adds
    }

    /// `Jᵀ c`: one tensor per `wrt` operand (zeros where the output does not depend on it).
    /// Inside a rayon pool of several threads, on its threads as
    /// [`Self::eval_with_value_parallel`] runs (the value, which the reverse pass computes
    /// anyway, is dropped), where the estimated cost says they pay.
    pub fn eval(&self, operands: &[&Tensor<T>], cotangent: &Tensor<T>) -> EinsumResult<Vec<Tensor<T>>> {
        if self.pool_use(crate::elem::caller_pool_threads()) == PoolUse::Pool {
            return Ok(self.eval_with_value_in_pool(None, operands, cotangent)?.1);
        }
        let m = &self.einsum;
        let shapes: Vec<&[usize]> = m.shapes.iter().map(Vec::as_slice).collect();
        m.check("operand", operands, &shapes)?;
        m.check("cotangent", &[cotangent], &[&m.cotangent_shape])?;
        let _evaluation = crate::buffer::begin_evaluation();
        let out = self.program.eval(&mut (), |k| match k {
            TensorKey::Var(i) => operands.get(*i as usize).copied(),
            k if Some(k) == self.seed.as_ref() => Some(cotangent),
            TensorKey::Tangent(_) => None,
        })?;
        crate::stop::check()?;
        out.into_iter().zip(&self.wrt).map(|(g, &i)| g.map_or_else(|| zeros_like(&m.shapes[i]), Ok)).collect()
    }

    /// `(f(x), Jᵀ c)` in one run: the forward steps run once for both, where
    /// [`Einsum::eval`] then [`Self::eval`] would run them twice. On the calling thread,
    /// or inside a rayon pool of several threads on its threads, as [`Einsum::eval`].
    pub fn eval_with_value(
        &self,
        operands: &[&Tensor<T>],
        cotangent: &Tensor<T>,
    ) -> EinsumResult<(Tensor<T>, Vec<Tensor<T>>)> {
        let (value, grads, _) = self.value_and_grads(&self.with_value, operands, cotangent, |inputs| {
            run_where_it_pays(&self.with_value, &self.steps, inputs)
        })?;
        Ok((value, grads))
    }

    /// [`Self::eval_with_value`] on the calling thread, whatever pool it runs in.
    fn eval_with_value_here(
        &self,
        operands: &[&Tensor<T>],
        cotangent: &Tensor<T>,
    ) -> EinsumResult<(Tensor<T>, Vec<Tensor<T>>)> {
        let (value, grads, _) = self.value_and_grads(&self.with_value, operands, cotangent, |inputs| {
            self.with_value.try_eval(&mut (), inputs)
        })?;
        Ok((value, grads))
    }

    /// [`Self::eval_with_value`] on every thread of `pool` (or of the current rayon pool),
    /// as [`Einsum::eval_parallel`] runs the forward pass: independent steps at once and
    /// large kernels split, when the estimated cost says the pool pays (`threads.rs`), on
    /// the calling thread as [`Self::eval_with_value`] otherwise.
    pub fn eval_with_value_parallel(
        &self,
        pool: Option<&rayon::ThreadPool>,
        operands: &[&Tensor<T>],
        cotangent: &Tensor<T>,
    ) -> EinsumResult<(Tensor<T>, Vec<Tensor<T>>)> {
        match self.pool_use(pool_threads(pool)) {
            PoolUse::OneThread => self.eval_with_value_here(operands, cotangent),
            PoolUse::Kernels => in_pool(pool, || self.eval_with_value_here(operands, cotangent)),
            PoolUse::Pool => self.eval_with_value_in_pool(pool, operands, cotangent),
        }
    }

    /// [`Self::eval_with_value_parallel`] without the choice: always in the pool.
    pub(crate) fn eval_with_value_in_pool(
        &self,
        pool: Option<&rayon::ThreadPool>,
        operands: &[&Tensor<T>],
        cotangent: &Tensor<T>,
    ) -> EinsumResult<(Tensor<T>, Vec<Tensor<T>>)> {
        let (value, grads, _) = self.value_and_grads(&self.with_value, operands, cotangent, |inputs| {
            in_pool(pool, || self.with_value.try_eval_parallel(pool, &mut (), inputs))
        })?;
        Ok((value, grads))
    }

    /// [`Self::eval_with_value`], and the range of the value and of each gradient, in that
    /// order ([`RangeScan`]: `strip_exponent`'s test), each read right after the step
    /// that wrote it, while it is in the cache of the thread that wrote it (`ranged.rs`).
    /// Read after the run instead, a large gradient comes back from memory. Runs as
    /// [`Self::eval_with_value`] runs: on the calling thread, or inside a rayon pool of
    /// several threads on its threads where the estimated cost says they pay.
    ///
    /// ```
    /// use einsum::{Einsum, PathChoice, Tensor};
    ///
    /// let e = Einsum::<f64>::new("ij,jk->", &[vec![2, 2], vec![2, 2]], PathChoice::Greedy).unwrap();
    /// let a = Tensor::new(vec![2, 2], vec![1.0, 2.0, 3.0, 1e308]).unwrap();
    /// let b = Tensor::new(vec![2, 2], vec![1.0, 1.0, 1.0, 1.0]).unwrap();
    /// let g = e.gradient(&[0, 1]).unwrap();
    /// let (value, grads, ranges) = g.eval_with_value_and_range(&[&a, &b], &Tensor::scalar(1.0)).unwrap();
    /// assert_eq!(ranges.len(), 1 + grads.len());
    /// assert_eq!(grads[0].data(), &[2.0; 4]); // the gradient in `a`
    /// assert_eq!((ranges[1].largest(), ranges[1].left_range()), (2.0, false));
    /// assert_eq!(ranges[2].largest(), 1e308); // the one in `b` holds a's largest entry
    /// assert_eq!(ranges[0].not_finite(), !value.data()[0].is_finite());
    /// ```
    #[allow(clippy::type_complexity)] // written out: an alias would hide it in the docs
    pub fn eval_with_value_and_range(
        &self,
        operands: &[&Tensor<T>],
        cotangent: &Tensor<T>,
    ) -> EinsumResult<(Tensor<T>, Vec<Tensor<T>>, Vec<RangeScan>)> {
        // Made on first use and kept only once made: an error (a stop, say) is returned
        // and the next call tries again.
        let (program, steps) = match self.ranged.get() {
            Some(r) => r,
            None => {
                let graph = crate::ranged::with_ranges(&self.merged)?;
                let program = computegraph::try_compile(&graph)?;
                self.ranged.get_or_init(|| (program, crate::threads::materialized_steps(&graph)))
            }
        };
        let (value, grads, rest) =
            self.value_and_grads(program, operands, cotangent, |inputs| run_where_it_pays(program, steps, inputs))?;
        // `rest`: the ranges of the value and of the gradients present, in output order.
        let present: Vec<RangeScan> = rest
            .iter()
            .map(|t| crate::scan::scan_of(t).expect("the ranged program's extra outputs are ranges"))
            .collect();
        assert_eq!(present.len(), 1 + self.value_positions.iter().flatten().count(), "one range per output");
        // A symbolic zero's gradient is zeros: in range, as `EMPTY` says.
        let ranges = std::iter::once(present[0])
            .chain(self.value_positions.iter().map(|p| p.map_or(RangeScan::EMPTY, |p| present[p])))
            .collect();
        Ok((value, grads, ranges))
    }

    /// How [`Self::eval_with_value_parallel`] uses a pool of `threads` threads.
    pub(crate) fn pool_use(&self, threads: usize) -> PoolUse {
        crate::threads::choose(&self.steps, threads)
    }

    /// Whether an evaluation (gradients, with or without the value) inside a pool of
    /// `threads` threads would use more than the calling thread, as
    /// [`Einsum::uses_threads`].
    pub fn uses_threads(&self, threads: usize) -> bool {
        self.pool_use(threads) != PoolUse::OneThread
    }

    /// Checks the arguments, binds them to `program`'s inputs (`with_value`, or a program
    /// with `with_value`'s outputs first), runs it by `run`, and splits its outputs into
    /// the value, one gradient per `wrt` operand, and the outputs after `with_value`'s.
    fn value_and_grads(
        &self,
        program: &CompiledProgram<TensorOp<T>>,
        operands: &[&Tensor<T>],
        cotangent: &Tensor<T>,
        run: impl FnOnce(&[&Tensor<T>]) -> computegraph::GraphResult<Vec<Tensor<T>>>,
    ) -> EinsumResult<ValueGradsRest<T>> {
        let m = &self.einsum;
        let shapes: Vec<&[usize]> = m.shapes.iter().map(Vec::as_slice).collect();
        m.check("operand", operands, &shapes)?;
        m.check("cotangent", &[cotangent], &[&m.cotangent_shape])?;
        let _evaluation = crate::buffer::begin_evaluation();
        let inputs = program.bind_inputs(|k| match k {
            TensorKey::Var(i) => operands.get(*i as usize).copied(),
            k if Some(k) == self.seed.as_ref() => Some(cotangent),
            TensorKey::Tangent(_) => None,
        })?;
        let mut out: Vec<Option<Tensor<T>>> = run(&inputs)?.into_iter().map(Some).collect();
        crate::stop::check()?;
        let value = out[0].take().expect("the value is output 0");
        let grads = self
            .value_positions
            .iter()
            .zip(&self.wrt)
            .map(|(p, &i)| p.and_then(|p| out[p].take()).map_or_else(|| zeros_like(&m.shapes[i]), Ok))
            .collect::<EinsumResult<_>>()?;
        let present = 1 + self.value_positions.iter().flatten().count();
        Ok((value, grads, out.into_iter().skip(present).flatten().collect()))
    }
}

/// A program with each output's range after the outputs (`ranged.rs`), and its steps.
type RangedProgram<T> = (CompiledProgram<TensorOp<T>>, Box<[Step]>);

/// The value, the gradients, and a program's outputs beyond them.
type ValueGradsRest<T> = (Tensor<T>, Vec<Tensor<T>>, Vec<Tensor<T>>);

/// `program` on `inputs`: inside a rayon pool of several threads on its threads where its
/// `steps`' estimated cost says they pay (`threads.rs`), on the calling thread otherwise.
fn run_where_it_pays<T: Elem>(
    program: &CompiledProgram<TensorOp<T>>,
    steps: &[Step],
    inputs: &[&Tensor<T>],
) -> computegraph::GraphResult<Vec<Tensor<T>>> {
    match crate::threads::choose(steps, crate::elem::caller_pool_threads()) {
        PoolUse::Pool => in_pool(None, || program.try_eval_parallel(None, &mut (), inputs)),
        _ => program.try_eval(&mut (), inputs),
    }
}

/// The number of threads `pool` (or, without one, the current rayon pool) has.
fn pool_threads(pool: Option<&rayon::ThreadPool>) -> usize {
    pool.map_or_else(rayon::current_num_threads, rayon::ThreadPool::current_num_threads)
}

/// `run` inside `pool`, or inside the current rayon pool (the global one outside any), so
/// that the kernels see its threads.
fn in_pool<R: Send>(pool: Option<&rayon::ThreadPool>, run: impl FnOnce() -> R + Send) -> R {
    // The caller's stop flag reaches the pool's threads (`stop.rs`).
    crate::stop::shared_with_pool(|| match pool {
        Some(pool) => pool.install(run),
        None if rayon::current_thread_index().is_some() => run(),
        None => rayon::scope(|_| run()),
    })
}

/// A compiled Hessian-vector product of an [`Einsum`] ([`Einsum::hvp`]).
///
/// ```
/// use einsum::{Einsum, PathChoice, Tensor};
///
/// // f(x) = xᵀ·M·x has Hessian M + Mᵀ.
/// let e = Einsum::<f64>::new("i,ij,j->", &[vec![2], vec![2, 2], vec![2]], PathChoice::Greedy).unwrap();
/// let m = Tensor::new(vec![2, 2], vec![1.0, 2.0, 0.0, 3.0]).unwrap();
/// let x = Tensor::new(vec![2], vec![0.5, -1.0]).unwrap();
/// let v = Tensor::new(vec![2], vec![1.0, 0.0]).unwrap();
/// // Both x operands vary together only if they are one variable; here, H of operand 0 alone
/// // is zero (f is linear in it), and the cross terms are what the product computes.
/// let h = e.hvp(&[0, 2]).unwrap();
/// let hv = h.eval(&[&x, &m, &x], &Tensor::scalar(1.0), &[&v, &v]).unwrap();
/// // H·(v, v) = ((M·v), (Mᵀ·v)): the derivative of operand 0's gradient M·x₂ along x₂ = v.
/// assert_eq!((hv[0].get(&[0]), hv[0].get(&[1])), (Some(1.0), Some(0.0)));
/// assert_eq!((hv[1].get(&[0]), hv[1].get(&[1])), (Some(1.0), Some(2.0)));
/// ```
pub struct EinsumHvp<T: Elem> {
    program: DerivativeProgram<TensorOp<T>>,
    seed: Option<TensorKey>,
    directions: Vec<TensorKey>,
    positions: Vec<Option<usize>>,
    wrt: Vec<usize>,
    einsum: Meta,
}

impl<T: Elem> EinsumHvp<T> {
    /// `H_c v` for `H_c` the Hessian of `x ↦ ⟨c, f(x)⟩` in the `wrt` operands and `v` one
    /// direction per `wrt` operand; one tensor per `wrt` operand.
    pub fn eval(
        &self,
        operands: &[&Tensor<T>],
        cotangent: &Tensor<T>,
        directions: &[&Tensor<T>],
    ) -> EinsumResult<Vec<Tensor<T>>> {
        let m = &self.einsum;
        let shapes: Vec<&[usize]> = m.shapes.iter().map(Vec::as_slice).collect();
        m.check("operand", operands, &shapes)?;
        m.check("cotangent", &[cotangent], &[&m.cotangent_shape])?;
        let _evaluation = crate::buffer::begin_evaluation();
        let dshapes: Vec<&[usize]> = self.wrt.iter().map(|&i| shapes[i]).collect();
        m.check("direction", directions, &dshapes)?;
        let out = self.program.eval(&mut (), |k| match k {
            TensorKey::Var(i) => operands.get(*i as usize).copied(),
            k if Some(k) == self.seed.as_ref() => Some(cotangent),
            k => self.directions.iter().position(|d| d == k).map(|p| directions[p]),
        })?;
        crate::stop::check()?;
        let mut out: Vec<Option<Tensor<T>>> = out;
        self.positions
            .iter()
            .zip(&self.wrt)
            .map(|(p, &i)| match p.and_then(|p| out[p].take()) {
                Some(t) => Ok(t),
                None => zeros_like(&m.shapes[i]),
            })
            .collect()
    }
}

/// What [`EinsumCache`] keys compiled expressions by.
type ExpressionKey = (String, Vec<Vec<usize>>, PathChoice);

/// Compiled expressions by (expression, shapes, path), sharing one [`CompileCache`] so that
/// structurally equal networks (the same expression with other letters) share a program.
///
/// ```
/// use einsum::{EinsumCache, PathChoice};
/// let cache = EinsumCache::<f64>::new(64);
/// let shapes = vec![vec![2, 3], vec![3, 4]];
/// let a = cache.get("ij,jk->ik", &shapes, PathChoice::Greedy).unwrap();
/// let b = cache.get("ij,jk->ik", &shapes, PathChoice::Greedy).unwrap();
/// let c = cache.get("xy,yz->xz", &shapes, PathChoice::Greedy).unwrap();
/// assert!(std::sync::Arc::ptr_eq(&a, &b));
/// assert!(std::sync::Arc::ptr_eq(a.program(), c.program()));
/// ```
pub struct EinsumCache<T: Elem> {
    capacity: usize,
    programs: CompileCache<TensorOp<T>>,
    expressions: Mutex<Expressions<T>>,
}

/// The expressions of an [`EinsumCache`], with their insertion order for eviction.
struct Expressions<T: Elem> {
    map: FxHashMap<ExpressionKey, Arc<Einsum<T>>>,
    order: std::collections::VecDeque<ExpressionKey>,
}

impl<T: Elem> EinsumCache<T> {
    /// A cache holding at most `capacity` compiled programs and `capacity` expressions
    /// (the oldest expression is dropped first; programs are evicted least recently used).
    pub fn new(capacity: usize) -> Self {
        let expressions = Expressions { map: FxHashMap::default(), order: Default::default() };
        EinsumCache {
            capacity: capacity.max(1),
            programs: CompileCache::new(capacity),
            expressions: Mutex::new(expressions),
        }
    }

    /// The compiled expression, built on first use.
    pub fn get(&self, expression: &str, shapes: &[Vec<usize>], path: PathChoice) -> EinsumResult<Arc<Einsum<T>>> {
        let key = (expression.to_string(), shapes.to_vec(), path);
        let lock = || self.expressions.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = lock().map.get(&key) {
            return Ok(Arc::clone(e));
        }
        let e = Arc::new(Einsum::with_cache(expression, shapes, key.2.clone(), &self.programs)?);
        let mut x = lock();
        if let Some(e) = x.map.get(&key) {
            return Ok(Arc::clone(e));
        }
        while x.map.len() >= self.capacity {
            let Some(old) = x.order.pop_front() else { break };
            x.map.remove(&old);
        }
        x.order.push_back(key.clone());
        x.map.insert(key, Arc::clone(&e));
        Ok(e)
    }

    /// Compiled expressions held now.
    pub fn len(&self) -> usize {
        self.expressions.lock().unwrap_or_else(|e| e.into_inner()).map.len()
    }

    /// Whether no expression is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Statistics of the shared program cache.
    pub fn program_stats(&self) -> computegraph::CacheStats {
        self.programs.stats()
    }
}

/// Checks that `operands` are as many as `shapes` and of those shapes, naming the
/// expression and the first operand that is not.
pub(crate) fn check_operand_shapes<T: Elem>(
    expression: &impl std::fmt::Display,
    shapes: &[Vec<usize>],
    operands: &[&Tensor<T>],
) -> EinsumResult<()> {
    if operands.len() != shapes.len() {
        return Err(EinsumError::Shape(format!(
            "`{expression}` takes {} operands but {} were given",
            shapes.len(),
            operands.len()
        )));
    }
    for (i, (t, s)) in operands.iter().zip(shapes).enumerate() {
        if t.shape() != s.as_slice() {
            return Err(EinsumError::Shape(format!(
                "operand {i} of `{expression}` has shape {:?} but the expression was built for {s:?}",
                t.shape()
            )));
        }
    }
    Ok(())
}
