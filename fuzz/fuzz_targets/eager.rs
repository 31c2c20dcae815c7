//! Eager record/backward sequences agree with graph-mode gradients: a graph decoded from
//! the input runs on the reference frontend (`scalar::eager::Tape`), one tape node per
//! operation or in composite nodes of up to four operations (outputs retained or replayed),
//! with some inputs not requiring a gradient; `try_backward` must match `vjp`.
#![no_main]

use std::collections::HashMap;
use std::sync::Arc;

use computegraph::{GraphBuilder, GraphOperation, KeyInterner, OperationRole, ValueRef, resolve};
use libfuzzer_sys::fuzz_target;
use scalar::eager::{ScalarExecutor, Tape, Var};
use scalar::spec::GraphSpec;
use scalar::{ScalarKey, ScalarOp};
use tidu::{DerivativeProgram, vjp};

/// Runs ops `lo..hi` of `spec` as one composite node; appends their outputs to `vars`.
fn composite(
    tape: &mut Tape,
    spec: &GraphSpec,
    starts: &[usize],
    lo: usize,
    hi: usize,
    vars: &mut Vec<Var>,
    retain: bool,
) {
    let first = vars.len() as u32; // values below this come from outside the segment
    let mut b = GraphBuilder::with_interner(Arc::clone(tape.interner()));
    let mut local = HashMap::new();
    let mut args: Vec<Var> = Vec::new();
    let mut outputs = Vec::new();
    let mut next = first;
    for k in lo..hi {
        let op = spec.ops[k];
        let operands: Vec<ValueRef<ScalarOp>> = spec.args[starts[k]..starts[k] + op.input_count()]
            .iter()
            .map(|&a| {
                let v = *local.entry(a).or_insert_with(|| {
                    args.push(vars[a as usize].clone());
                    b.add_input(ScalarKey::var(args.len() as u32 - 1))
                });
                ValueRef::Local(v)
            })
            .collect();
        for out in b.add_operation(op, operands, OperationRole::Primary) {
            local.insert(next, out);
            outputs.push(out);
            next += 1;
        }
    }
    b.set_outputs(outputs);
    let graph = Arc::new(b.build());
    let arg_refs: Vec<&Var> = args.iter().collect();
    vars.extend(tape.apply_graph(&graph, &arg_refs, retain).expect("composite records"));
}

fuzz_target!(|data: &[u8]| {
    let spec = GraphSpec::from_bytes(data);
    if spec.ops.len() > 40 {
        return;
    }
    let control = data.first().copied().unwrap_or(0);
    let requires_grad: Vec<bool> = (0..spec.inputs).map(|i| (control >> 2) & (1 << i) == 0).collect();
    let segment = 1 + (control >> 6) as usize; // ops per node; 1 = one node per operation
    let retain = data.len() % 2 == 0;
    let x: Vec<f64> = (0..spec.inputs).map(|i| 0.4 + 0.3 * i as f64).collect();
    let mut all = spec.clone();
    all.outputs = (0..spec.value_count() as u32).collect();
    if !all.eval_reference(&x).iter().all(|v| v.is_finite() && v.abs() < 1e3) {
        return;
    }

    // Eager.
    let mut tape = Tape::new();
    let leaves: Vec<Var> = x.iter().zip(&requires_grad).map(|(&v, &r)| tape.leaf(v, r).unwrap()).collect();
    let mut vars = leaves.clone();
    let mut starts = Vec::with_capacity(spec.ops.len());
    let mut at = 0;
    for op in &spec.ops {
        starts.push(at);
        at += op.input_count();
    }
    let mut k = 0;
    while k < spec.ops.len() {
        let hi = (k + segment).min(spec.ops.len());
        if segment == 1 {
            let op = spec.ops[k];
            let args: Vec<&Var> =
                spec.args[starts[k]..starts[k] + op.input_count()].iter().map(|&a| &vars[a as usize]).collect();
            let outs = tape.apply(op, &args).expect("op records");
            vars.extend(outs);
        } else {
            composite(&mut tape, &spec, &starts, k, hi, &mut vars, retain);
        }
        k = hi;
    }
    let mut y = vars[spec.outputs[0] as usize].clone();
    for &o in &spec.outputs[1..] {
        y = tape.apply(ScalarOp::Add, &[&y, &vars[o as usize]]).expect("add records").remove(0);
    }
    let grads = tape.backward(&y, 1.0, &mut ScalarExecutor::new()).expect("backward runs");

    // Graph mode.
    let built = spec.build(&KeyInterner::new(), 1).expect("valid specs build");
    let wrt: Vec<ScalarKey> = (0..spec.inputs).filter(|&i| requires_grad[i as usize]).map(ScalarKey::var).collect();
    let lin = vjp(&resolve(built.graphs), &built.outputs, &wrt).expect("rules exist");
    let mut values: HashMap<ScalarKey, f64> = (0..spec.inputs).map(|i| (ScalarKey::var(i), x[i as usize])).collect();
    for (key, _) in lin.tangent_inputs() {
        values.insert(key.clone(), 1.0);
    }
    let want = DerivativeProgram::new(&lin).unwrap().eval(&mut (), |k| values.get(k)).unwrap();

    for (key, w) in wrt.iter().zip(&want) {
        let ScalarKey::Var(i) = key else { unreachable!() };
        let w = w.unwrap_or(0.0);
        let got = grads.get(&leaves[*i as usize].key).map_or(0.0, |g| **g);
        if w.is_finite() && w.abs() < 1e6 {
            assert!((got - w).abs() <= 1e-7 * (1.0 + w.abs()), "input {i}: eager {got}, graph mode {w}");
        }
    }
    // (An output that is itself a leaf gets the seed back, whatever its `requires_grad`:
    // `try_backward` is given no more than its key and trace.)
    for (leaf, r) in leaves.iter().zip(&requires_grad).filter(|_| y.trace.is_some()) {
        assert!(*r || !grads.contains_key(&leaf.key), "a leaf without requires_grad got a gradient");
    }
});
