//! The checks on one subject (a rule's one-operation graph, or a whole graph): the
//! transforms, their programs, and each numerical comparison of the module doc of
//! [`testing`](crate::testing), recorded in a [`CheckReport`] or stopped at the first
//! [`CheckFailure`].

use std::fmt;
use std::sync::Arc;

use computegraph::{
    CompiledProgram, EvaluableGraphOperation, Graph, GraphBuilder, GraphOperation, ValueKey, ValueRef, try_compile,
    try_materialize_merge, try_resolve,
};
use rustc_hash::FxHashMap;

use super::case::{CheckFailure, CheckKind, CheckOperand, CheckReport, CheckRng, Tolerance};
use crate::api::DerivativeProgram;
use crate::linearize::try_linearize;
use crate::linearized::LinearizedGraph;
use crate::primitive::Primitive;
use crate::transpose::try_linear_transpose;

type Env<Op> = FxHashMap<<Op as GraphOperation>::InputKey, <Op as GraphOperation>::Operand>;

/// One subject under check: a function of `x` given by `outputs` over `roots`.
pub(super) struct Run<'c, Op: GraphOperation> {
    pub(super) name: String,
    pub(super) tol: Tolerance,
    pub(super) directions: usize,
    pub(super) ctx: &'c mut Op::Context,
    pub(super) rng: CheckRng,
    pub(super) report: CheckReport,
    pub(super) roots: Vec<Arc<Graph<Op>>>,
    pub(super) outputs: Vec<ValueKey<Op>>,
    /// Every input, by key.
    pub(super) x: Vec<(Op::InputKey, Op::Operand)>,
    /// The active inputs (indices into `x`).
    pub(super) wrt: Vec<usize>,
    pub(super) multilinear: bool,
}

/// The transforms of one subject and their programs.
struct Derivatives<Op: GraphOperation> {
    lin: LinearizedGraph<Op>,
    lin_p: DerivativeProgram<Op>,
    tr: LinearizedGraph<Op>,
    tr_p: DerivativeProgram<Op>,
    /// Output indices of `lin`'s non-zero outputs (the seeds of `tr`, in order).
    lin_some: Vec<usize>,
}

impl<Op> Run<'_, Op>
where
    Op: Primitive + EvaluableGraphOperation,
    Op::Operand: CheckOperand,
{
    fn fail(&self, check: CheckKind, message: impl Into<String>) -> CheckFailure {
        CheckFailure { case: self.name.clone(), check, message: message.into() }
    }

    /// Passes if `err ≤ allowed` (a NaN fails), recording the ratio.
    fn compare(
        &mut self,
        check: CheckKind,
        err: f64,
        allowed: f64,
        what: impl FnOnce() -> String,
    ) -> Result<(), CheckFailure> {
        self.report.comparisons += 1;
        if err <= allowed {
            self.report.record(check, if allowed > 0.0 { err / allowed } else { 0.0 });
            Ok(())
        } else {
            Err(self.fail(check, format!("{}; |Δ| = {err:.3e} > allowed {allowed:.3e}", what())))
        }
    }

    fn wrt_keys(&self) -> Vec<Op::InputKey> {
        self.wrt.iter().map(|&i| self.x[i].0.clone()).collect()
    }

    fn inputs_text(&self) -> String {
        let v: Vec<String> = self.x.iter().map(|(k, v)| format!("{k:?} = {v:?}")).collect();
        v.join(", ")
    }

    /// The primal inputs.
    fn env(&self) -> Env<Op> {
        self.x.iter().cloned().collect()
    }

    /// `env` with the active inputs moved to `x + h·dir`.
    fn shifted(&self, env: &Env<Op>, h: f64, dir: &[Op::Operand]) -> Env<Op> {
        let mut e = env.clone();
        for (&i, d) in self.wrt.iter().zip(dir) {
            let (k, v) = &self.x[i];
            e.insert(k.clone(), v.add_scaled(h, d));
        }
        e
    }

    /// A random direction over the active inputs.
    fn direction(&mut self) -> Vec<Op::Operand> {
        let rng = &mut self.rng;
        self.wrt.iter().map(|&i| self.x[i].1.random_like(rng)).collect()
    }

    /// A direction that is random in active argument `k` only.
    fn direction_along(&mut self, k: usize) -> Vec<Op::Operand> {
        let rng = &mut self.rng;
        self.wrt
            .iter()
            .enumerate()
            .map(|(j, &i)| if j == k { self.x[i].1.random_like(rng) } else { self.x[i].1.scale(0.0) })
            .collect()
    }

    /// The directions of finite-difference checks and their step: random ones with the
    /// tolerance's step, or (multilinear) one per argument with step 1.
    fn fd_directions(&mut self) -> (f64, Vec<Vec<Op::Operand>>) {
        if self.multilinear {
            (1.0, (0..self.wrt.len()).map(|k| self.direction_along(k)).collect())
        } else {
            (self.tol.step, (0..self.directions).map(|_| self.direction()).collect())
        }
    }

    /// The allowed error of an identity that holds to round-off, for terms of total size `scale`.
    fn roundoff(&self, scale: f64) -> f64 {
        self.tol.exact_atol + self.tol.exact_rtol * scale
    }

    /// The allowed error of a finite difference `fd` (from values of norm `n_plus`,
    /// `n_minus`) against `got`.
    fn fd_allowed(&self, fd: f64, got: f64, n_plus: f64, n_minus: f64, h: f64) -> f64 {
        if self.multilinear {
            self.roundoff((n_plus + n_minus) / (2.0 * h) + got + fd)
        } else {
            self.tol.atol + self.tol.rtol * fd
        }
    }

    fn program(
        &self,
        lin: &LinearizedGraph<Op>,
        check: CheckKind,
        what: &str,
    ) -> Result<DerivativeProgram<Op>, CheckFailure> {
        DerivativeProgram::new(lin).map_err(|e| self.fail(check, format!("compiling the {what} failed: {e}")))
    }

    fn eval(
        &mut self,
        p: &DerivativeProgram<Op>,
        env: &Env<Op>,
        check: CheckKind,
        what: &str,
    ) -> Result<Vec<Option<Op::Operand>>, CheckFailure> {
        match p.eval(self.ctx, |k| env.get(k)) {
            Ok(v) => Ok(v),
            Err(e) => Err(self.fail(check, format!("evaluating the {what} failed: {e}"))),
        }
    }

    fn eval_primal(&mut self, p: &CompiledProgram<Op>, env: &Env<Op>) -> Result<Vec<Op::Operand>, CheckFailure> {
        match p.try_eval_by_key(self.ctx, |k| env.get(k)) {
            Ok(v) => Ok(v),
            Err(e) => Err(self.fail(CheckKind::Setup, format!("evaluating the primal failed: {e}"))),
        }
    }

    pub(super) fn run(&mut self, rule: Option<&Op>) -> Result<(), CheckFailure> {
        let view = try_resolve(self.roots.clone())
            .map_err(|e| self.fail(CheckKind::Setup, format!("resolving the primal failed: {e}")))?;
        let primal = try_materialize_merge(&view, &self.outputs)
            .and_then(|m| try_compile(&m))
            .map_err(|e| self.fail(CheckKind::Setup, format!("compiling the primal failed: {e}")))?;
        let env = self.env();
        let f0 = self.eval_primal(&primal, &env)?;

        let wrt = self.wrt_keys();
        let lin = try_linearize(&view, &self.outputs, &wrt)
            .map_err(|e| self.fail(CheckKind::Jvp, format!("linearize failed: {e}")))?;
        self.check_structure(&lin, "JVP")?;
        let lin_p = self.program(&lin, CheckKind::Jvp, "JVP")?;
        let lin_some = some_positions(lin.tangent_outputs());
        let tr = try_linear_transpose(&lin)
            .map_err(|e| self.fail(CheckKind::Transpose, format!("linear_transpose failed: {e}")))?;
        if tr.tangent_outputs().len() != self.wrt.len() {
            return Err(self.fail(
                CheckKind::Transpose,
                format!("the transpose has {} outputs for {} inputs", tr.tangent_outputs().len(), self.wrt.len()),
            ));
        }
        self.check_structure(&tr, "transpose")?;
        let tr_p = self.program(&tr, CheckKind::Transpose, "transpose")?;
        let d = Derivatives { lin, lin_p, tr, tr_p, lin_some };

        self.check_jvp(&primal, &env, &d)?;
        self.check_linearity(&env, &f0, &d)?;
        self.check_transpose(&env, &f0, &d)?;
        if let Some(op) = rule {
            self.check_zeros(op, &view, &env, &d)?;
        }
        self.check_second_order(&env, &f0, &d)
    }

    /// (e), structural: only `Linearized` operations, masks consistent.
    fn check_structure(&self, lin: &LinearizedGraph<Op>, what: &str) -> Result<(), CheckFailure> {
        lin.check_linear().map_err(|e| self.fail(CheckKind::Linearity, format!("the {what} graph: {e}")))
    }

    /// (a) `J t` against central differences.
    fn check_jvp(
        &mut self,
        primal: &CompiledProgram<Op>,
        env: &Env<Op>,
        d: &Derivatives<Op>,
    ) -> Result<(), CheckFailure> {
        let (h, dirs) = self.fd_directions();
        for t in dirs {
            let mut e = env.clone();
            bind(&mut e, d.lin.tangent_inputs().iter().map(|(k, _)| k), &t);
            let jt = self.eval(&d.lin_p, &e, CheckKind::Jvp, "JVP")?;
            let fp = self.eval_primal(primal, &self.shifted(env, h, &t))?;
            let fm = self.eval_primal(primal, &self.shifted(env, -h, &t))?;
            for (j, got) in jt.iter().enumerate() {
                let fd = fp[j].add_scaled(-1.0, &fm[j]).scale(0.5 / h);
                let err = dist_opt(got.as_ref(), Some(&fd));
                let allowed = self.fd_allowed(fd.norm(), norm_opt(got.as_ref()), fp[j].norm(), fm[j].norm(), h);
                let inputs = self.inputs_text();
                self.compare(CheckKind::Jvp, err, allowed, || {
                    format!(
                        "output {j}: J·t = {} but the central difference (step {h:e}) is {fd:?}; inputs {inputs}, \
                         direction {t:?}",
                        show(got.as_ref())
                    )
                })?;
            }
        }
        Ok(())
    }

    /// (e), numerical: `L(αt + βs) = αLt + βLs` for the JVP and the transpose.
    fn check_linearity(&mut self, env: &Env<Op>, f0: &[Op::Operand], d: &Derivatives<Op>) -> Result<(), CheckFailure> {
        let (alpha, beta) = (self.rng.uniform(-2.0, 2.0), self.rng.uniform(-2.0, 2.0));
        let (t1, t2) = (self.direction(), self.direction());
        let t3: Vec<Op::Operand> = t1.iter().zip(&t2).map(|(a, b)| a.scale(alpha).add_scaled(beta, b)).collect();
        let keys: Vec<Op::InputKey> = d.lin.tangent_inputs().iter().map(|(k, _)| k.clone()).collect();
        let mut outs = Vec::new();
        for t in [&t1, &t2, &t3] {
            let mut e = env.clone();
            bind(&mut e, keys.iter(), t);
            outs.push(self.eval(&d.lin_p, &e, CheckKind::Linearity, "JVP")?);
        }
        self.compare_combination("JVP", &outs, alpha, beta)?;

        let seeds: Vec<Op::InputKey> = d.tr.tangent_inputs().iter().map(|(k, _)| k.clone()).collect();
        let c1: Vec<Op::Operand> = d.lin_some.iter().map(|&j| f0[j].random_like(&mut self.rng)).collect();
        let c2: Vec<Op::Operand> = d.lin_some.iter().map(|&j| f0[j].random_like(&mut self.rng)).collect();
        let c3: Vec<Op::Operand> = c1.iter().zip(&c2).map(|(a, b)| a.scale(alpha).add_scaled(beta, b)).collect();
        let mut outs = Vec::new();
        for c in [&c1, &c2, &c3] {
            let mut e = env.clone();
            bind(&mut e, seeds.iter(), c);
            outs.push(self.eval(&d.tr_p, &e, CheckKind::Linearity, "transpose")?);
        }
        self.compare_combination("transpose", &outs, alpha, beta)
    }

    /// `outs[2] = α·outs[0] + β·outs[1]`, componentwise.
    fn compare_combination(
        &mut self,
        what: &str,
        outs: &[Vec<Option<Op::Operand>>],
        alpha: f64,
        beta: f64,
    ) -> Result<(), CheckFailure> {
        for (j, ((a, b), c)) in outs[0].iter().zip(&outs[1]).zip(&outs[2]).enumerate() {
            let (a, b, c) = (a.as_ref(), b.as_ref(), c.as_ref());
            let want = match (a, b) {
                (Some(a), Some(b)) => Some(a.scale(alpha).add_scaled(beta, b)),
                (Some(a), None) => Some(a.scale(alpha)),
                (None, Some(b)) => Some(b.scale(beta)),
                (None, None) => None,
            };
            let err = dist_opt(c, want.as_ref());
            let allowed = self.roundoff(alpha.abs() * norm_opt(a) + beta.abs() * norm_opt(b) + norm_opt(c));
            let inputs = self.inputs_text();
            self.compare(CheckKind::Linearity, err, allowed, || {
                format!(
                    "{what} output {j}: L(αt + βs) = {} but αLt + βLs = {} (α = {alpha}, β = {beta}); inputs {inputs}",
                    show(c),
                    show(want.as_ref())
                )
            })?;
        }
        Ok(())
    }

    /// (b) `⟨c, L t⟩ = ⟨Lᵀ c, t⟩`, and `(Lᵀ)ᵀ = L`.
    fn check_transpose(&mut self, env: &Env<Op>, f0: &[Op::Operand], d: &Derivatives<Op>) -> Result<(), CheckFailure> {
        let tt = try_linear_transpose(&d.tr)
            .map_err(|e| self.fail(CheckKind::Transpose, format!("transposing the transpose failed: {e}")))?;
        self.check_structure(&tt, "transpose of the transpose")?;
        let tt_p = self.program(&tt, CheckKind::Transpose, "transpose of the transpose")?;
        let tr_some = some_positions(d.tr.tangent_outputs());
        for _ in 0..self.directions {
            let t = self.direction();
            let c: Vec<Op::Operand> = d.lin_some.iter().map(|&j| f0[j].random_like(&mut self.rng)).collect();
            let mut e = env.clone();
            bind(&mut e, d.lin.tangent_inputs().iter().map(|(k, _)| k), &t);
            bind(&mut e, d.tr.tangent_inputs().iter().map(|(k, _)| k), &c);
            let lt = self.eval(&d.lin_p, &e, CheckKind::Transpose, "JVP")?;
            let tc = self.eval(&d.tr_p, &e, CheckKind::Transpose, "transpose")?;
            let lt_some: Vec<Option<Op::Operand>> = d.lin_some.iter().map(|&j| lt[j].clone()).collect();
            let (lhs, s1) = dot(c.iter().map(Some), lt_some.iter().map(Option::as_ref));
            let (rhs, s2) = dot(tc.iter().map(Option::as_ref), t.iter().map(Some));
            let allowed = self.roundoff(s1 + s2);
            let inputs = self.inputs_text();
            self.compare(CheckKind::Transpose, (lhs - rhs).abs(), allowed, || {
                format!(
                    "⟨c, L t⟩ = {lhs:e} but ⟨Lᵀ c, t⟩ = {rhs:e}; inputs {inputs}, t = {t:?}, c = {c:?}, L t = {}, \
                     Lᵀ c = {}",
                    show_all(&lt),
                    show_all(&tc)
                )
            })?;

            // (Lᵀ)ᵀ t = L t, on L's non-zero outputs.
            let mut e2 = env.clone();
            let t_seeds: Vec<Op::Operand> = tr_some.iter().map(|&i| t[i].clone()).collect();
            bind(&mut e2, tt.tangent_inputs().iter().map(|(k, _)| k), &t_seeds);
            let ttt = self.eval(&tt_p, &e2, CheckKind::Transpose, "transpose of the transpose")?;
            for (k, &j) in d.lin_some.iter().enumerate() {
                let got = ttt.get(k).and_then(Option::as_ref);
                let err = dist_opt(got, lt[j].as_ref());
                let allowed = self.roundoff(norm_opt(got) + norm_opt(lt[j].as_ref()));
                let inputs = self.inputs_text();
                self.compare(CheckKind::Transpose, err, allowed, || {
                    format!(
                        "output {j}: (Lᵀ)ᵀ t = {} but L t = {}; inputs {inputs}, t = {t:?}",
                        show(got),
                        show(lt[j].as_ref())
                    )
                })?;
            }
        }
        Ok(())
    }

    /// (d) Symbolic zeros of one rule.
    fn check_zeros(
        &mut self,
        op: &Op,
        view: &computegraph::ResolvedView<Op>,
        env: &Env<Op>,
        d: &Derivatives<Op>,
    ) -> Result<(), CheckFailure> {
        const Z: CheckKind = CheckKind::SymbolicZeros;
        // The rule called with every tangent `None` emits nothing and returns `None`s.
        let g = &self.roots[0];
        let mut b = GraphBuilder::with_interner(Arc::clone(g.interner()));
        b.try_add_parent(Arc::clone(g)).map_err(|e| self.fail(CheckKind::Setup, e.to_string()))?;
        let xs: Vec<ValueKey<Op>> = g.inputs().iter().map(|&v| g.global_key(v)).collect();
        let nones = vec![None; xs.len()];
        let got = op
            .try_jvp_rule(&mut b, &xs, &self.outputs, &nones, &mut Op::ADContext::default())
            .map_err(|e| self.fail(Z, format!("the JVP rule called with every tangent None failed: {e}")))?;
        if got.iter().any(Option::is_some) || got.len() != self.outputs.len() || b.operation_count() > 0 {
            return Err(self.fail(
                Z,
                format!(
                    "the JVP rule called with every tangent None returned {got:?} and emitted {} operations; \
                     expected {} Nones and no operation",
                    b.operation_count(),
                    self.outputs.len()
                ),
            ));
        }

        let dead = dead_operations(&d.lin);
        if !dead.is_empty() {
            return Err(self.fail(Z, format!("the JVP emits operations that reach no tangent output: {dead:?}")));
        }
        let dead = dead_operations(&d.tr);
        if !dead.is_empty() {
            return Err(self.fail(Z, format!("the transpose emits operations that reach no cotangent: {dead:?}")));
        }

        // One input inactive at a time.
        let full_ops = d.lin.as_graph().operation_count();
        for k in 0..self.wrt.len() {
            let sub: Vec<usize> = (0..self.wrt.len()).filter(|&j| j != k).collect();
            let sub_keys: Vec<Op::InputKey> = sub.iter().map(|&j| self.x[self.wrt[j]].0.clone()).collect();
            let inactive = format!("{:?}", self.x[self.wrt[k]].0);
            let lin = try_linearize(view, &self.outputs, &sub_keys)
                .map_err(|e| self.fail(Z, format!("linearize with {inactive} inactive failed: {e}")))?;
            lin.check_linear()
                .map_err(|e| self.fail(Z, format!("with {inactive} inactive the JVP graph is not linear: {e}")))?;
            let ops = lin.as_graph().operation_count();
            if sub.is_empty() && (ops > 0 || lin.tangent_outputs().iter().any(Option::is_some)) {
                return Err(self.fail(
                    Z,
                    format!(
                        "with every input inactive the JVP graph has {ops} operations and outputs {:?}; \
                         expected no operation and only symbolic zeros",
                        lin.tangent_outputs()
                    ),
                ));
            }
            if ops > full_ops {
                return Err(self.fail(
                    Z,
                    format!(
                        "with {inactive} inactive the JVP emits {ops} operations, more than {full_ops} with it active"
                    ),
                ));
            }
            let dead = dead_operations(&lin);
            if !dead.is_empty() {
                return Err(self.fail(
                    Z,
                    format!("with {inactive} inactive the JVP emits operations that reach no output: {dead:?}"),
                ));
            }
            for (j, (a, f)) in lin.tangent_outputs().iter().zip(d.lin.tangent_outputs()).enumerate() {
                if a.is_some() && f.is_none() {
                    return Err(self.fail(
                        Z,
                        format!(
                            "with {inactive} inactive output {j} has a tangent, but with all inputs active it is zero"
                        ),
                    ));
                }
            }
            let p = self.program(&lin, Z, "JVP with an inactive input")?;
            let mut t = self.direction();
            t[k] = t[k].scale(0.0);
            let t_sub: Vec<Op::Operand> = sub.iter().map(|&j| t[j].clone()).collect();
            let mut e = env.clone();
            bind(&mut e, d.lin.tangent_inputs().iter().map(|(k, _)| k), &t);
            bind(&mut e, lin.tangent_inputs().iter().map(|(k, _)| k), &t_sub);
            let full = self.eval(&d.lin_p, &e, Z, "JVP")?;
            let part = self.eval(&p, &e, Z, "JVP with an inactive input")?;
            for j in 0..full.len() {
                let (a, f) = (part[j].as_ref(), full[j].as_ref());
                let err = dist_opt(a, f);
                let allowed = self.roundoff(norm_opt(a) + norm_opt(f));
                self.compare(Z, err, allowed, || {
                    format!(
                        "output {j}: with {inactive} inactive the JVP is {} but with a zero direction on it {}",
                        show(a),
                        show(f)
                    )
                })?;
            }
        }

        // Seeding one output of a multi-output operation at a time.
        if self.outputs.len() > 1 {
            for &j in &d.lin_some {
                let lin = try_linearize(view, std::slice::from_ref(&self.outputs[j]), &self.wrt_keys())
                    .map_err(|e| self.fail(Z, format!("linearize of output {j} alone failed: {e}")))?;
                let tr = try_linear_transpose(&lin)
                    .map_err(|e| self.fail(Z, format!("transpose with only output {j} seeded failed: {e}")))?;
                let dead = dead_operations(&tr);
                if !dead.is_empty() {
                    return Err(self.fail(
                        Z,
                        format!(
                            "with only output {j} seeded the transpose emits operations that reach nothing: {dead:?}"
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// (c) All four nestings and HVP symmetry.
    fn check_second_order(
        &mut self,
        env: &Env<Op>,
        f0: &[Op::Operand],
        d: &Derivatives<Op>,
    ) -> Result<(), CheckFailure> {
        const S: CheckKind = CheckKind::SecondOrder;
        let wrt = self.wrt_keys();
        let n = self.wrt.len();
        let m = self.outputs.len();
        let fail = |run: &Self, what: &str, e: &dyn fmt::Display| run.fail(S, format!("{what} failed: {e}"));

        // FoF: linearize J t again in x (direction s).
        let lkeys: Vec<ValueKey<Op>> = d.lin.tangent_output_keys().into_iter().flatten().collect();
        let lview = try_resolve(vec![d.lin.graph().clone()]).map_err(|e| fail(self, "resolving the JVP", &e))?;
        let fof = try_linearize(&lview, &lkeys, &wrt).map_err(|e| fail(self, "forward over forward", &e))?;
        self.check_structure(&fof, "forward-over-forward")?;
        // FoR: linearize Jᵀ c in x (direction s).
        let tr_some = some_positions(d.tr.tangent_outputs());
        let tkeys: Vec<ValueKey<Op>> = d.tr.tangent_output_keys().into_iter().flatten().collect();
        let tview = try_resolve(vec![d.tr.graph().clone()]).map_err(|e| fail(self, "resolving the transpose", &e))?;
        let for_ = try_linearize(&tview, &tkeys, &wrt).map_err(|e| fail(self, "forward over reverse", &e))?;
        self.check_structure(&for_, "forward-over-reverse")?;
        // RoF and RoR: transpose those (linear in s).
        let rof = try_linear_transpose(&fof).map_err(|e| fail(self, "reverse over forward", &e))?;
        self.check_structure(&rof, "reverse-over-forward")?;
        let ror = try_linear_transpose(&for_).map_err(|e| fail(self, "reverse over reverse", &e))?;
        self.check_structure(&ror, "reverse-over-reverse")?;
        let fof_p = self.program(&fof, S, "forward-over-forward")?;
        let for_p = self.program(&for_, S, "forward-over-reverse")?;
        let rof_p = self.program(&rof, S, "reverse-over-forward")?;
        let ror_p = self.program(&ror, S, "reverse-over-reverse")?;
        let fof_some = some_positions(fof.tangent_outputs()); // indices into lkeys
        let for_some = some_positions(for_.tangent_outputs()); // indices into tkeys

        let (h, s_dirs) = self.fd_directions();
        for s in s_dirs {
            let t = self.direction();
            let c: Vec<Op::Operand> = f0.iter().map(|y| y.random_like(&mut self.rng)).collect();
            let mut e = env.clone();
            bind(&mut e, d.lin.tangent_inputs().iter().map(|(k, _)| k), &t);
            let c_some: Vec<Op::Operand> = d.lin_some.iter().map(|&j| c[j].clone()).collect();
            bind(&mut e, d.tr.tangent_inputs().iter().map(|(k, _)| k), &c_some);
            bind(&mut e, fof.tangent_inputs().iter().map(|(k, _)| k), &s);
            bind(&mut e, for_.tangent_inputs().iter().map(|(k, _)| k), &s);
            let rof_seeds: Vec<Op::Operand> = fof_some.iter().map(|&q| c[d.lin_some[q]].clone()).collect();
            bind(&mut e, rof.tangent_inputs().iter().map(|(k, _)| k), &rof_seeds);
            let ror_seeds: Vec<Op::Operand> = for_some.iter().map(|&q| t[tr_some[q]].clone()).collect();
            bind(&mut e, ror.tangent_inputs().iter().map(|(k, _)| k), &ror_seeds);

            // FoF(t, s) per output; FoR(s) per input; RoF(t), RoR(t) per input.
            let fof_v = spread(m, &d.lin_some, self.eval(&fof_p, &e, S, "forward-over-forward")?);
            let for_v = spread(n, &tr_some, self.eval(&for_p, &e, S, "forward-over-reverse")?);
            let rof_v = self.eval(&rof_p, &e, S, "reverse-over-forward")?;
            let ror_v = self.eval(&ror_p, &e, S, "reverse-over-reverse")?;
            let mut e_t = e.clone();
            bind(&mut e_t, for_.tangent_inputs().iter().map(|(k, _)| k), &t);
            let for_t = spread(n, &tr_some, self.eval(&for_p, &e_t, S, "forward-over-reverse")?);

            // One number four ways: ⟨c, FoF⟩ = ⟨FoR(s), t⟩ = ⟨RoF, s⟩ = ⟨RoR, s⟩.
            let (v_fof, s_fof) = dot(c.iter().map(Some), fof_v.iter().map(Option::as_ref));
            let (v_for, s_for) = dot(for_v.iter().map(Option::as_ref), t.iter().map(Some));
            let (v_rof, s_rof) = dot(rof_v.iter().map(Option::as_ref), s.iter().map(Some));
            let (v_ror, s_ror) = dot(ror_v.iter().map(Option::as_ref), s.iter().map(Some));
            let inputs = self.inputs_text();
            for (name, v, sc) in [("⟨FoR(s), t⟩", v_for, s_for), ("⟨RoF, s⟩", v_rof, s_rof), ("⟨RoR, s⟩", v_ror, s_ror)]
            {
                let allowed = self.roundoff(sc + s_fof);
                self.compare(S, (v - v_fof).abs(), allowed, || {
                    format!(
                        "⟨c, FoF(t, s)⟩ = {v_fof:e} but {name} = {v:e}; inputs {inputs}, t = {t:?}, s = {s:?}, c = {c:?}"
                    )
                })?;
            }
            // H_c t three ways: FoR(t) = RoF(t) = RoR(t), to round-off relative to the
            // size of the vectors.
            let size: f64 = (0..n)
                .map(|i| norm_opt(rof_v[i].as_ref()) + norm_opt(ror_v[i].as_ref()) + norm_opt(for_t[i].as_ref()))
                .sum();
            for i in 0..n {
                for (name, v) in [("RoF", rof_v[i].as_ref()), ("RoR", ror_v[i].as_ref())] {
                    let w = for_t[i].as_ref();
                    let allowed = self.roundoff(size);
                    self.compare(S, dist_opt(v, w), allowed, || {
                        format!(
                            "input {i}: FoR(t) = {} but {name}(t) = {}; inputs {inputs}, t = {t:?}",
                            show(w),
                            show(v)
                        )
                    })?;
                }
            }

            // Against central differences of the first derivatives along s.
            let (ep, em) = (self.shifted(&e, h, &s), self.shifted(&e, -h, &s));
            let (jp, jm) = (self.eval(&d.lin_p, &ep, S, "JVP")?, self.eval(&d.lin_p, &em, S, "JVP")?);
            for j in 0..m {
                let fd = fd_opt(jp[j].as_ref(), jm[j].as_ref(), h);
                let got = fof_v[j].as_ref();
                let allowed = self.fd_allowed(
                    norm_opt(fd.as_ref()),
                    norm_opt(got),
                    norm_opt(jp[j].as_ref()),
                    norm_opt(jm[j].as_ref()),
                    h,
                );
                self.compare(S, dist_opt(got, fd.as_ref()), allowed, || {
                    format!(
                        "output {j}: FoF(t, s) = {} but the central difference of J·t along s (step {h:e}) is {}; \
                         inputs {inputs}, t = {t:?}, s = {s:?}",
                        show(got),
                        show(fd.as_ref())
                    )
                })?;
            }
            let (tp, tm) = (self.eval(&d.tr_p, &ep, S, "transpose")?, self.eval(&d.tr_p, &em, S, "transpose")?);
            for i in 0..n {
                let fd = fd_opt(tp[i].as_ref(), tm[i].as_ref(), h);
                let got = for_v[i].as_ref();
                let allowed = self.fd_allowed(
                    norm_opt(fd.as_ref()),
                    norm_opt(got),
                    norm_opt(tp[i].as_ref()),
                    norm_opt(tm[i].as_ref()),
                    h,
                );
                self.compare(S, dist_opt(got, fd.as_ref()), allowed, || {
                    format!(
                        "input {i}: FoR(s) = {} but the central difference of Jᵀ·c along s (step {h:e}) is {}; \
                         inputs {inputs}, s = {s:?}, c = {c:?}",
                        show(got),
                        show(fd.as_ref())
                    )
                })?;
            }

            // HVP symmetry: ⟨t, H_c s⟩ = ⟨s, H_c t⟩.
            let (a, sa) = dot(t.iter().map(Some), for_v.iter().map(Option::as_ref));
            let (b, sb) = dot(s.iter().map(Some), for_t.iter().map(Option::as_ref));
            let allowed = self.roundoff(sa + sb);
            self.compare(CheckKind::HvpSymmetry, (a - b).abs(), allowed, || {
                format!("⟨t, H s⟩ = {a:e} but ⟨s, H t⟩ = {b:e}; inputs {inputs}, t = {t:?}, s = {s:?}, c = {c:?}")
            })?;
        }
        Ok(())
    }
}

/// Binds `keys[i] → values[i]`.
fn bind<'k, K: Clone + std::hash::Hash + Eq + 'k, V: Clone>(
    env: &mut FxHashMap<K, V>,
    keys: impl Iterator<Item = &'k K>,
    values: &[V],
) {
    for (k, v) in keys.zip(values) {
        env.insert(k.clone(), v.clone());
    }
}

/// Indices of the `Some` entries.
fn some_positions<T>(v: &[Option<T>]) -> Vec<usize> {
    v.iter().enumerate().filter(|(_, x)| x.is_some()).map(|(i, _)| i).collect()
}

/// A vector of length `n` with `values[k]` at `positions[k]` and `None` elsewhere.
fn spread<T>(n: usize, positions: &[usize], values: Vec<Option<T>>) -> Vec<Option<T>> {
    let mut out: Vec<Option<T>> = (0..n).map(|_| None).collect();
    for (&p, v) in positions.iter().zip(values) {
        out[p] = v;
    }
    out
}

/// `Σ ⟨a_i, b_i⟩` (`None` is zero) and its scale `Σ ‖a_i‖·‖b_i‖`.
fn dot<'a, T: CheckOperand + 'a>(
    a: impl Iterator<Item = Option<&'a T>>,
    b: impl Iterator<Item = Option<&'a T>>,
) -> (f64, f64) {
    let (mut sum, mut scale) = (0.0, 0.0);
    for (x, y) in a.zip(b) {
        if let (Some(x), Some(y)) = (x, y) {
            sum += x.inner(y);
            scale += x.norm() * y.norm();
        }
    }
    (sum, scale)
}

fn norm_opt<T: CheckOperand>(a: Option<&T>) -> f64 {
    a.map_or(0.0, CheckOperand::norm)
}

fn dist_opt<T: CheckOperand>(a: Option<&T>, b: Option<&T>) -> f64 {
    match (a, b) {
        (Some(a), Some(b)) => a.distance(b),
        (Some(a), None) | (None, Some(a)) => a.norm(),
        (None, None) => 0.0,
    }
}

/// `(p - m) / 2h`, `None` being zero.
fn fd_opt<T: CheckOperand>(p: Option<&T>, m: Option<&T>, h: f64) -> Option<T> {
    match (p, m) {
        (Some(p), Some(m)) => Some(p.add_scaled(-1.0, m).scale(0.5 / h)),
        (Some(p), None) => Some(p.scale(0.5 / h)),
        (None, Some(m)) => Some(m.scale(-0.5 / h)),
        (None, None) => None,
    }
}

fn show<T: fmt::Debug>(a: Option<&T>) -> String {
    a.map_or_else(|| "0 (symbolic zero)".to_string(), |a| format!("{a:?}"))
}

fn show_all<T: fmt::Debug>(v: &[Option<T>]) -> String {
    let parts: Vec<String> =
        v.iter().map(|a| a.as_ref().map_or_else(|| "0".to_string(), |a| format!("{a:?}"))).collect();
    format!("[{}]", parts.join(", "))
}

/// Operations of a linear graph that no output of the map depends on.
fn dead_operations<Op: GraphOperation>(lin: &LinearizedGraph<Op>) -> Vec<String> {
    let g = lin.as_graph();
    let mut needed = vec![false; g.value_count()];
    for v in lin.tangent_outputs().iter().flatten() {
        needed[v.index()] = true;
    }
    let mut dead = Vec::new();
    for op in g.operations().rev() {
        if op.outputs().any(|v| needed[v.index()]) {
            for r in op.inputs() {
                if let ValueRef::Local(v) = r {
                    needed[v.index()] = true;
                }
            }
        } else {
            dead.push(format!("{:?} {}", op.operation(), op.role()));
        }
    }
    dead
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rng_is_deterministic_and_in_range() {
        let (mut a, mut b) = (CheckRng::new(3), CheckRng::new(3));
        for _ in 0..100 {
            let x = a.uniform(-1.0, 1.0);
            assert_eq!(x, b.uniform(-1.0, 1.0));
            assert!((-1.0..1.0).contains(&x));
        }
    }

    #[test]
    fn f64_operand_ops() {
        assert_eq!(1.5f64.add_scaled(2.0, &0.25), 2.0);
        assert_eq!(1.5f64.scale(-2.0), -3.0);
        assert_eq!((-3.0f64).norm(), 3.0);
        assert_eq!(dist_opt(Some(&1.0), None), 1.0);
        assert_eq!(fd_opt(Some(&3.0), Some(&1.0), 0.5), Some(2.0));
        assert_eq!(dot([Some(&2.0), None].into_iter(), [Some(&-3.0), Some(&1.0)].into_iter()), (-6.0, 6.0));
    }

    #[test]
    fn failure_message_names_case_and_check() {
        let f = CheckFailure { case: "sin(x0 = 1.0)".into(), check: CheckKind::Jvp, message: "output 0".into() };
        assert_eq!(f.to_string(), "JVP vs finite differences check failed for `sin(x0 = 1.0)`: output 0");
    }
}
