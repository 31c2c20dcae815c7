//! A plain description of a scalar DAG, independent of `computegraph`, with a trivially
//! correct reference evaluator and a builder into `computegraph` fragments.
//!
//! Values are numbered: `0..inputs` are the inputs, then each node appends its
//! `output_count()` outputs in order. A node's arguments name earlier values only.

use std::sync::Arc;

use computegraph::{Graph, GraphBuilder, GraphOperation, GraphResult, KeyInterner, OperationRole, ValueKey, ValueRef};

use crate::{ScalarKey, ScalarOp};

/// A scalar DAG as flat columns: the engine-independent description that tests, benches
/// and fuzz targets generate, build into graphs and evaluate with a plain reference.
///
/// ```
/// use scalar::{spec::GraphSpec, ScalarOp};
/// use computegraph::{compile, materialize_merge, resolve, KeyInterner};
///
/// // f(x, y) = sin(x·y), values 0 and 1 are the inputs.
/// let mut spec = GraphSpec { inputs: 2, ..Default::default() };
/// let p = spec.push(ScalarOp::Mul, &[0, 1]);
/// let s = spec.push(ScalarOp::Sin, &[p]);
/// spec.outputs = vec![s];
/// assert_eq!(spec.eval_reference(&[2.0, 0.25]), vec![0.5f64.sin()]);
///
/// // The same function through the engine, built in two fragments.
/// let built = spec.build(&KeyInterner::new(), 2).unwrap();
/// let program = compile(&materialize_merge(&resolve(built.graphs.clone()), &built.outputs));
/// assert_eq!(program.eval(&mut (), &[&2.0, &0.25]), vec![0.5f64.sin()]);
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GraphSpec {
    /// Number of inputs (values `0..inputs`, keyed `ScalarKey::Var(i)`).
    pub inputs: u32,
    /// One operation per node.
    pub ops: Vec<ScalarOp>,
    /// The nodes' arguments back to back (`ops[i].input_count()` each).
    pub args: Vec<u32>,
    /// Output values.
    pub outputs: Vec<u32>,
    /// Memo that makes [`GraphSpec::value_count`] and [`GraphSpec::push`] `O(1)`; leave it
    /// at its default when writing a spec literal.
    pub count_cache: CountCache,
}

/// How many node outputs the first `ops` nodes of a spec produce (a memo; see
/// [`GraphSpec::value_count`]).
///
/// ```
/// use scalar::{spec::GraphSpec, ScalarOp};
///
/// let mut spec = GraphSpec { inputs: 1, ..Default::default() };
/// spec.push(ScalarOp::SinCos, &[0]); // two outputs
/// spec.ops.push(ScalarOp::Neg); // pushed directly: counted on the next call
/// spec.args.push(1);
/// assert_eq!(spec.value_count(), 4);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CountCache {
    ops: usize,
    values: usize,
}

/// A spec built into fragments: the graphs (last one first: it is the natural root) and
/// the output keys.
///
/// ```
/// use computegraph::{resolve, KeyInterner};
/// use scalar::workloads::chain;
///
/// let built = chain(1000, 1).build(&KeyInterner::new(), 3).unwrap();
/// assert_eq!(built.graphs.len(), 3);
/// // The last fragment reaches the others through its parents.
/// assert_eq!(resolve(vec![built.graphs.last().unwrap().clone()]).graphs().len(), 3);
/// ```
pub struct BuiltSpec {
    /// The fragments, in build order.
    pub graphs: Vec<Arc<Graph<ScalarOp>>>,
    /// The keys of the spec's outputs.
    pub outputs: Vec<ValueKey<ScalarOp>>,
}

impl GraphSpec {
    /// Total number of values (inputs plus node outputs).
    ///
    /// `O(1)` when nodes are added with [`GraphSpec::push`]; nodes pushed onto `ops`
    /// directly are counted on each call until the next `push`.
    pub fn value_count(&self) -> usize {
        let CountCache { ops, values } = self.count_cache;
        let ops = ops.min(self.ops.len());
        let values = if ops == self.count_cache.ops { values } else { 0 };
        let start = if ops == self.count_cache.ops { ops } else { 0 };
        self.inputs as usize + values + self.ops[start..].iter().map(|o| o.output_count()).sum::<usize>()
    }

    /// Appends a node; returns the index of its first output value.
    pub fn push(&mut self, op: ScalarOp, args: &[u32]) -> u32 {
        assert_eq!(args.len(), op.input_count());
        let first = self.value_count();
        self.ops.push(op);
        self.args.extend_from_slice(args);
        self.count_cache = CountCache { ops: self.ops.len(), values: first + op.output_count() - self.inputs as usize };
        first as u32
    }

    /// The reference semantics: evaluates every node in order.
    pub fn eval_reference(&self, inputs: &[f64]) -> Vec<f64> {
        assert_eq!(inputs.len(), self.inputs as usize);
        let mut values: Vec<f64> = inputs.to_vec();
        let mut a = 0;
        for op in &self.ops {
            let n = op.input_count();
            let args: Vec<f64> = self.args[a..a + n].iter().map(|&i| values[i as usize]).collect();
            a += n;
            values.extend(op.apply(&args));
        }
        self.outputs.iter().map(|&o| values[o as usize]).collect()
    }

    /// Builds the spec into `fragments` graphs (contiguous chunks of nodes) on `interner`.
    /// Later fragments reach earlier values through external keys and list every earlier
    /// fragment as a parent; they name inputs by `ValueKey::Input` without declaring them.
    pub fn build(&self, interner: &Arc<KeyInterner<ScalarOp>>, fragments: usize) -> GraphResult<BuiltSpec> {
        let fragments = fragments.max(1);
        let n = self.ops.len();
        let chunk = n.div_ceil(fragments).max(1);
        // For each spec value: (fragment, local id) where defined, plus its key once known.
        let mut home: Vec<(usize, computegraph::LocalValueId)> = Vec::with_capacity(self.value_count());
        let mut keys: Vec<Option<ValueKey<ScalarOp>>> = vec![None; self.value_count()];
        let mut graphs: Vec<Arc<Graph<ScalarOp>>> = Vec::new();
        let mut b = GraphBuilder::with_interner(Arc::clone(interner));
        for i in 0..self.inputs {
            let v = b.try_add_input(ScalarKey::var(i))?;
            home.push((0, v));
            keys[i as usize] = Some(ValueKey::Input(ScalarKey::var(i)));
        }
        let mut a = 0;
        let mut refs: Vec<ValueRef<ScalarOp>> = Vec::with_capacity(4);
        for (i, op) in self.ops.iter().enumerate() {
            let frag = i / chunk;
            if frag > graphs.len() {
                // Close the current fragment and start the next one.
                let done =
                    Arc::new(std::mem::replace(&mut b, GraphBuilder::with_interner(Arc::clone(interner))).try_build()?);
                for (v, &(f, l)) in home.iter().enumerate() {
                    if f == graphs.len() && keys[v].is_none() {
                        keys[v] = Some(done.try_global_key(l)?);
                    }
                }
                graphs.push(done);
                for g in &graphs {
                    b.try_add_parent(Arc::clone(g))?;
                }
            }
            let arity = op.input_count();
            refs.clear();
            for &arg in &self.args[a..a + arity] {
                let (f, l) = home[arg as usize];
                refs.push(if f == graphs.len() {
                    ValueRef::Local(l)
                } else {
                    ValueRef::External(keys[arg as usize].clone().expect("earlier fragments are keyed"))
                });
            }
            a += arity;
            let outs = b.try_add_operation_from(*op, &refs, &OperationRole::Primary)?;
            for o in outs {
                home.push((graphs.len(), computegraph::LocalValueId::new(o)));
            }
        }
        let last = graphs.len();
        let mut outputs_local = Vec::new();
        for &o in &self.outputs {
            let (f, l) = home[o as usize];
            if f == last {
                outputs_local.push(l);
            }
        }
        b.try_set_outputs(outputs_local)?;
        let done = Arc::new(b.try_build()?);
        for (v, &(f, l)) in home.iter().enumerate() {
            if f == last && keys[v].is_none() {
                keys[v] = Some(done.try_global_key(l)?);
            }
        }
        graphs.push(done);
        let outputs = self.outputs.iter().map(|&o| keys[o as usize].clone().expect("every value is keyed")).collect();
        Ok(BuiltSpec { graphs, outputs })
    }

    /// Builds the spec as one fragment, with no per-node allocation. This is the
    /// benchmark's build path.
    ///
    /// A builder numbers local values densely in the order they are added, so the spec's
    /// value `v` is local value `v`.
    pub fn build_single(&self, interner: &Arc<KeyInterner<ScalarOp>>) -> GraphResult<BuiltSpec> {
        use computegraph::LocalValueId;
        let mut b = GraphBuilder::with_interner(Arc::clone(interner));
        b.reserve(self.value_count(), self.ops.len(), self.args.len());
        for i in 0..self.inputs {
            b.try_add_input(ScalarKey::var(i))?;
        }
        let local = |x: u32| ValueRef::Local(LocalValueId::new(x as usize));
        let mut a = 0;
        // A long build stops when the caller's stop flag is raised (`computegraph::stop`).
        let mut poll = computegraph::stop::Poll::new();
        for op in &self.ops {
            poll.tick()?;
            let arity = op.input_count();
            let args = &self.args[a..a + arity];
            a += arity;
            let refs: [ValueRef<ScalarOp>; 2];
            let slice: &[ValueRef<ScalarOp>] = match *args {
                [] => &[],
                [x] => {
                    refs = [local(x), local(x)];
                    &refs[..1]
                }
                [x, y] => {
                    refs = [local(x), local(y)];
                    &refs[..]
                }
                _ => unreachable!("scalar operations take at most two inputs"),
            };
            b.try_add_operation_from(*op, slice, &OperationRole::Primary)?;
        }
        debug_assert_eq!(b.value_count(), self.value_count(), "local values are numbered densely");
        b.try_set_outputs(self.outputs.iter().map(|&o| LocalValueId::new(o as usize)).collect())?;
        let g = Arc::new(b.try_build()?);
        let outputs = self.outputs.iter().map(|&o| g.global_key(LocalValueId::new(o as usize))).collect();
        Ok(BuiltSpec { graphs: vec![g], outputs })
    }

    /// The spec with structurally equal nodes merged (hash-consing `(op, args)` with an
    /// Fx hash map): the interning baseline, and the node list the evaluation baselines run.
    pub fn dedup(&self) -> GraphSpec {
        use rustc_hash::FxHashMap;
        let mut out = GraphSpec { inputs: self.inputs, ..Default::default() };
        let mut remap: Vec<u32> = (0..self.inputs).collect();
        let mut memo: FxHashMap<(ScalarOp, [u32; 2]), u32> = FxHashMap::default();
        let mut a = 0;
        for op in &self.ops {
            let n = op.input_count();
            let mut args = [u32::MAX; 2];
            for (k, &x) in self.args[a..a + n].iter().enumerate() {
                args[k] = remap[x as usize];
            }
            a += n;
            let first = *memo.entry((*op, args)).or_insert_with(|| out.push(*op, &args[..n]));
            remap.extend((0..op.output_count() as u32).map(|s| first + s));
        }
        out.outputs = self.outputs.iter().map(|&o| remap[o as usize]).collect();
        out
    }
}

impl GraphSpec {
    /// Decodes arbitrary bytes into a valid spec (for fuzzing): the first byte picks 1 to 4
    /// inputs, then every two bytes add a node (operation, then operand choices drawn from
    /// the earlier values, most recent first), and the last values become the outputs.
    /// Every byte string decodes; equal bytes give equal specs.
    pub fn from_bytes(data: &[u8]) -> GraphSpec {
        let mut it = data.iter().copied();
        let inputs = 1 + it.next().unwrap_or(0) as u32 % 4;
        let mut spec = GraphSpec { inputs, ..Default::default() };
        while let (Some(o), Some(a)) = (it.next(), it.next()) {
            let op = match o % 16 {
                0..=3 => ScalarOp::Add,
                4..=7 => ScalarOp::Mul,
                8 | 9 => ScalarOp::Neg,
                10 => ScalarOp::Exp,
                11 => ScalarOp::Sin,
                12 => ScalarOp::Cos,
                13 => ScalarOp::SinCos,
                _ => ScalarOp::constant(f64::from(o >> 4) * 0.25 - 1.0),
            };
            let n = spec.value_count() as u32;
            let pick = |b: u8| n - 1 - (b as u32 % n.min(16));
            let args = [pick(a), pick(a.rotate_left(4) ^ o)];
            spec.push(op, &args[..op.input_count()]);
        }
        let n = spec.value_count() as u32;
        let outputs = 1 + data.len() as u32 % 3;
        spec.outputs = (0..outputs.min(n)).map(|k| n - 1 - k).collect();
        spec
    }
}
