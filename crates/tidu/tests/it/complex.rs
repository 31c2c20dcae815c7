//! The complex primitive set end to end: `jvp`, `vjp`, `grad` and `hvp` of complex
//! functions against closed forms, under the convention of `scalar::complex` (transposes
//! are adjoints for `⟨a, b⟩ = Re(conj(a)·b)`: `vjp(c) = conj(f'(z))·c` for holomorphic `f`,
//! and `grad L = ∂L/∂x + i·∂L/∂y` for real-valued `L`).

use std::collections::HashMap;
use std::sync::Arc;

use computegraph::{Graph, GraphBuilder, KeyInterner, LocalValueId, OperationRole, ValueRef, resolve};
use scalar::ScalarKey;
use scalar::complex::{Complex, ComplexOp};
use tidu::testing::{CheckKind, GraphCase, RuleCase, Tolerance, check_graph, check_rules};
use tidu::{DerivativeProgram, LinearizedGraph, grad, hvp, jvp, vjp};

fn z() -> ScalarKey {
    ScalarKey::var(0)
}
fn w() -> ScalarKey {
    ScalarKey::var(1)
}
const fn c(re: f64, im: f64) -> Complex {
    Complex::new(re, im)
}

/// A complex function under construction.
struct F {
    b: GraphBuilder<ComplexOp>,
}

impl F {
    fn new() -> Self {
        F { b: GraphBuilder::with_interner(KeyInterner::new()) }
    }
    fn input(&mut self, k: ScalarKey) -> LocalValueId {
        self.b.add_input(k)
    }
    fn op(&mut self, op: ComplexOp, args: &[LocalValueId]) -> LocalValueId {
        self.b.add_operation(op, args.iter().map(|&a| ValueRef::Local(a)).collect::<Vec<_>>(), OperationRole::Primary)
            [0]
    }
    fn done(self, out: LocalValueId) -> (Arc<Graph<ComplexOp>>, computegraph::ValueKey<ComplexOp>) {
        let g = Arc::new(self.b.build());
        let k = g.global_key(out);
        (g, k)
    }
}

/// Evaluates a derivative graph; `None` outputs are zeros. Unbound keys read `other`.
fn eval(lin: &LinearizedGraph<ComplexOp>, values: &HashMap<ScalarKey, Complex>, other: Complex) -> Vec<Complex> {
    let p = DerivativeProgram::new(lin).expect("compiles");
    let out = p.eval(&mut (), |k| values.get(k).or(Some(&other))).expect("bound");
    out.into_iter().map(|o| o.unwrap_or(Complex::ZERO)).collect()
}

fn assert_close(got: Complex, want: Complex, what: &str) {
    assert!((got - want).abs() <= 1e-13 * (1.0 + want.abs()), "{what}: got {got:?}, want {want:?}");
}

const POINTS: [Complex; 4] = [c(0.3, -0.8), c(-1.1, 0.4), c(0.0, 1.0), c(1.0, 0.0)];

#[test]
fn holomorphic_square_jvp_is_2z_t_and_vjp_is_conj_2z_c() {
    let mut f = F::new();
    let x = f.input(z());
    let y = f.op(ComplexOp::Mul, &[x, x]);
    let (g, out) = f.done(y);
    let view = resolve(vec![g]);
    let lin = jvp(&view, std::slice::from_ref(&out), &[z()]).unwrap();
    let tr = vjp(&view, std::slice::from_ref(&out), &[z()]).unwrap();
    let (t, ct) = (c(0.5, 1.5), c(-0.25, 2.0));
    for zv in POINTS {
        let v =
            HashMap::from([(z(), zv), (lin.tangent_inputs()[0].0.clone(), t), (tr.tangent_inputs()[0].0.clone(), ct)]);
        assert_close(eval(&lin, &v, Complex::ZERO)[0], c(2.0, 0.0) * zv * t, "J t");
        assert_close(eval(&tr, &v, Complex::ZERO)[0], (c(2.0, 0.0) * zv).conj() * ct, "Jᵀ c");
    }
}

#[test]
fn non_holomorphic_exp_times_conj() {
    // f(z) = exp(z)·conj(z): J t = exp(z)·conj(z)·t + exp(z)·conj(t),
    // Jᵀ c = conj(exp(z)·conj(z))·c + conj(conj(exp(z))·c) = z·conj(exp z)·c + exp(z)·conj(c).
    let mut f = F::new();
    let x = f.input(z());
    let e = f.op(ComplexOp::Exp, &[x]);
    let cz = f.op(ComplexOp::Conj, &[x]);
    let y = f.op(ComplexOp::Mul, &[e, cz]);
    let (g, out) = f.done(y);
    let view = resolve(vec![g]);
    let lin = jvp(&view, std::slice::from_ref(&out), &[z()]).unwrap();
    let tr = vjp(&view, std::slice::from_ref(&out), &[z()]).unwrap();
    let (t, ct) = (c(-0.7, 0.2), c(1.3, -0.6));
    for zv in POINTS {
        let v =
            HashMap::from([(z(), zv), (lin.tangent_inputs()[0].0.clone(), t), (tr.tangent_inputs()[0].0.clone(), ct)]);
        let ez = zv.exp();
        assert_close(eval(&lin, &v, Complex::ZERO)[0], ez * zv.conj() * t + ez * t.conj(), "J t");
        assert_close(eval(&tr, &v, Complex::ZERO)[0], zv * ez.conj() * ct + ez * ct.conj(), "Jᵀ c");
    }
}

#[test]
fn grad_of_modulus_squared_is_2z() {
    // L(z) = z·conj(z) = x² + y²: grad L = ∂L/∂x + i ∂L/∂y = 2z; J t = 2 Re(conj(z)·t).
    let mut f = F::new();
    let x = f.input(z());
    let cz = f.op(ComplexOp::Conj, &[x]);
    let y = f.op(ComplexOp::Mul, &[x, cz]);
    let (g, out) = f.done(y);
    let view = resolve(vec![g]);
    let gr = grad(&view, &out, &[z()]).unwrap();
    let lin = jvp(&view, std::slice::from_ref(&out), &[z()]).unwrap();
    let t = c(0.9, -0.3);
    for zv in POINTS {
        let v = HashMap::from([
            (z(), zv),
            (gr.tangent_inputs()[0].0.clone(), Complex::ONE),
            (lin.tangent_inputs()[0].0.clone(), t),
        ]);
        assert_close(eval(&gr, &v, Complex::ZERO)[0], zv.scale(2.0), "grad |z|²");
        assert_close(eval(&lin, &v, Complex::ZERO)[0], c(2.0 * zv.inner(t), 0.0), "J t");
    }
}

#[test]
fn grad_and_hvp_of_modulus_squared_of_exp() {
    // L(z) = |exp(z)|² = exp(z)·conj(exp(z)) = e^{2x}: grad = 2e^{2x};
    // the real Hessian is [[4e^{2x}, 0], [0, 0]], so H v = 4e^{2x}·Re(v).
    let mut f = F::new();
    let x = f.input(z());
    let e = f.op(ComplexOp::Exp, &[x]);
    let ce = f.op(ComplexOp::Conj, &[e]);
    let y = f.op(ComplexOp::Mul, &[e, ce]);
    let (g, out) = f.done(y);
    let view = resolve(vec![g]);
    let gr = grad(&view, &out, &[z()]).unwrap();
    let h = hvp(&view, &out, &[z()]).unwrap();
    let v = c(0.6, -1.4);
    for zv in POINTS {
        let e2x = (2.0 * zv.re).exp();
        let vals = HashMap::from([
            (z(), zv),
            (gr.tangent_inputs()[0].0.clone(), Complex::ONE),
            (h.tangent_inputs()[0].0.clone(), v),
        ]);
        assert_close(eval(&gr, &vals, Complex::ONE)[0], c(2.0 * e2x, 0.0), "grad");
        // Unbound keys (the gradient's seed inside the HVP program) read one.
        assert_close(eval(&h, &vals, Complex::ONE)[0], c(4.0 * e2x * v.re, 0.0), "H v");
    }
}

#[test]
fn hvp_of_modulus_squared_is_2v() {
    let mut f = F::new();
    let x = f.input(z());
    let cz = f.op(ComplexOp::Conj, &[x]);
    let y = f.op(ComplexOp::Mul, &[x, cz]);
    let (g, out) = f.done(y);
    let h = hvp(&resolve(vec![g]), &out, &[z()]).unwrap();
    let v = c(-0.4, 2.5);
    let vals = HashMap::from([(z(), c(0.3, 0.7)), (h.tangent_inputs()[0].0.clone(), v)]);
    assert_close(eval(&h, &vals, Complex::ONE)[0], v.scale(2.0), "H v");
}

#[test]
fn vjp_of_a_two_variable_function() {
    // f(z, w) = z·w + conj(z): Jᵀ c = (conj(w)·c + conj(c), conj(z)·c).
    let mut f = F::new();
    let x = f.input(z());
    let y = f.input(w());
    let p = f.op(ComplexOp::Mul, &[x, y]);
    let cz = f.op(ComplexOp::Conj, &[x]);
    let s = f.op(ComplexOp::Add, &[p, cz]);
    let (g, out) = f.done(s);
    let tr = vjp(&resolve(vec![g]), std::slice::from_ref(&out), &[z(), w()]).unwrap();
    let (zv, wv, ct) = (c(0.2, -1.0), c(1.5, 0.5), c(-0.3, 0.8));
    let vals = HashMap::from([(z(), zv), (w(), wv), (tr.tangent_inputs()[0].0.clone(), ct)]);
    let got = eval(&tr, &vals, Complex::ZERO);
    assert_close(got[0], wv.conj() * ct + ct.conj(), "∂/∂z");
    assert_close(got[1], zv.conj() * ct, "∂/∂w");
}

#[test]
fn holomorphic_chain_exp_of_z_squared() {
    // f(z) = exp(z²): f' = 2z·exp(z²); vjp(c) = conj(f')·c; the second derivative along
    // (t, s) is f''·t·s with f'' = (2 + 4z²)·exp(z²).
    let mut f = F::new();
    let x = f.input(z());
    let sq = f.op(ComplexOp::Mul, &[x, x]);
    let y = f.op(ComplexOp::Exp, &[sq]);
    let (g, out) = f.done(y);
    let view = resolve(vec![g.clone()]);
    let tr = vjp(&view, std::slice::from_ref(&out), &[z()]).unwrap();
    let lin = jvp(&view, std::slice::from_ref(&out), &[z()]).unwrap();
    let fof =
        jvp(&resolve(vec![lin.graph().clone()]), &[lin.tangent_output_keys()[0].clone().unwrap()], &[z()]).unwrap();
    let (t, s, ct) = (c(0.3, 0.4), c(-1.0, 0.5), c(0.7, -0.2));
    for zv in POINTS {
        let e = (zv * zv).exp();
        let vals = HashMap::from([
            (z(), zv),
            (tr.tangent_inputs()[0].0.clone(), ct),
            (lin.tangent_inputs()[0].0.clone(), t),
            (fof.tangent_inputs()[0].0.clone(), s),
        ]);
        assert_close(eval(&tr, &vals, Complex::ZERO)[0], (c(2.0, 0.0) * zv * e).conj() * ct, "vjp");
        let f2 = (c(2.0, 0.0) + c(4.0, 0.0) * zv * zv) * e;
        assert_close(eval(&fof, &vals, Complex::ZERO)[0], f2 * t * s, "FoF");
    }
    // And the whole function through the checker.
    let case = GraphCase::new("exp(z²)", vec![g], vec![out], vec![(z(), c(0.3, -0.8))]);
    check_graph(&case, Tolerance::F64).unwrap_or_else(|f| panic!("{f}"));
}

/// A one-operation set `t ↦ a·t` whose transpose follows JAX's convention (`c ↦ a·c`, no
/// conjugate) instead of ours: the checker must reject it.
mod jax_style {
    use computegraph::{EvaluableGraphOperation, GraphOperation, LocalValueId, OperationRole, Outputs, ValueKey};
    use scalar::ScalarKey;
    use scalar::complex::Complex;
    use tidu::{Primitive, PrimitiveBuilder, PrimitiveValue};

    /// `Scale(re, im)`: multiply by a constant; `Add` for accumulation.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub enum Jax {
        Add,
        Scale(u64, u64),
    }

    impl Jax {
        pub fn scale(a: Complex) -> Self {
            Jax::Scale(a.re.to_bits(), a.im.to_bits())
        }
    }

    impl GraphOperation for Jax {
        type Operand = Complex;
        type Context = ();
        type InputKey = ScalarKey;
        fn input_count(&self) -> usize {
            if *self == Jax::Add { 2 } else { 1 }
        }
        fn output_count(&self) -> usize {
            1
        }
    }

    impl EvaluableGraphOperation for Jax {
        fn eval_into(&self, _: &mut (), x: &[&Complex], out: &mut Outputs<'_, Complex>) {
            out.push(match *self {
                Jax::Add => *x[0] + *x[1],
                Jax::Scale(re, im) => Complex::new(f64::from_bits(re), f64::from_bits(im)) * *x[0],
            });
        }
    }

    impl Primitive for Jax {
        type ADContext = ();
        fn add() -> Self {
            Jax::Add
        }
        fn jvp_rule(
            &self,
            b: &mut impl PrimitiveBuilder<Self>,
            _: &[ValueKey<Self>],
            _: &[ValueKey<Self>],
            t: &[Option<LocalValueId>],
            _: &mut (),
        ) -> Vec<Option<LocalValueId>> {
            let lin = |n| OperationRole::Linearized { active_mask: vec![true; n] };
            vec![match (*self, t) {
                (Jax::Add, [Some(p), Some(q)]) => Some(
                    b.add_primitive(Jax::Add, vec![PrimitiveValue::Local(*p), PrimitiveValue::Local(*q)], lin(2))[0],
                ),
                (Jax::Add, [p, q]) => p.or(*q),
                (op, [Some(d)]) => Some(b.add_primitive(op, vec![PrimitiveValue::Local(*d)], lin(1))[0]),
                _ => None,
            }]
        }
        fn transpose_rule(
            &self,
            b: &mut impl PrimitiveBuilder<Self>,
            ct: &[Option<LocalValueId>],
            _: &[PrimitiveValue<Self>],
            role: &OperationRole,
            _: &mut (),
        ) -> Vec<Option<LocalValueId>> {
            let Some(c) = ct[0] else { return vec![None; self.input_count()] };
            match *self {
                Jax::Add => role.active_mask().unwrap().iter().map(|&a| a.then_some(c)).collect(),
                // JAX transposes `a·t` to `a·c`; the adjoint would be `conj(a)·c`.
                op => vec![Some(b.add_primitive(op, vec![PrimitiveValue::Local(c)], role.clone())[0])],
            }
        }
    }
}

#[test]
fn a_transpose_without_the_conjugate_violates_the_convention() {
    use jax_style::Jax;
    let case = |a: Complex| RuleCase::new(Jax::scale(a), vec![(z(), c(0.4, -0.9))]).multilinear();
    // A real factor is its own conjugate: the JAX transpose is right there.
    check_rules(&[case(c(2.0, 0.0))], Tolerance::F64).unwrap_or_else(|f| panic!("{f}"));
    // A complex factor: ⟨c, a·t⟩ ≠ ⟨a·c, t⟩.
    let f = check_rules(&[case(c(0.3, 1.2))], Tolerance::F64).unwrap_err();
    assert_eq!(f.check, CheckKind::Transpose, "{f}");
    assert!(f.case.contains("Scale"), "{f}");
}

#[test]
fn the_complex_rules_pass_the_checker_on_a_function_of_two_variables() {
    // f(z, w) = exp(z·conj(w)) + conj(z)·z, outputs f and z·w.
    let mut f = F::new();
    let x = f.input(z());
    let y = f.input(w());
    let cw = f.op(ComplexOp::Conj, &[y]);
    let p = f.op(ComplexOp::Mul, &[x, cw]);
    let e = f.op(ComplexOp::Exp, &[p]);
    let cz = f.op(ComplexOp::Conj, &[x]);
    let q = f.op(ComplexOp::Mul, &[cz, x]);
    let s = f.op(ComplexOp::Add, &[e, q]);
    let zw = f.op(ComplexOp::Mul, &[x, y]);
    let g = Arc::new(f.b.build());
    let case = GraphCase::new(
        "exp(z·conj(w)) + conj(z)·z, z·w",
        vec![g.clone()],
        vec![g.global_key(s), g.global_key(zw)],
        vec![(z(), c(0.3, -0.5)), (w(), c(-0.8, 0.6))],
    );
    check_graph(&case, Tolerance::F64).unwrap_or_else(|f| panic!("{f}"));
}
