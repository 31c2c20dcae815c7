//! Text dumps of each phase against expectations written by hand from the documented
//! format (`v1 = add v0, v0`, slots reused last-freed-first), and DOT output checked
//! by a small parser: one edge per operand and per graph output, both ends declared.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use computegraph::{
    Graph, GraphBuilder, GraphOperation, OperationRole, OperationRole::Primary, ValueKey, ValueRef::External,
    ValueRef::Local, compile, materialize_merge, resolve,
};
use scalar::{ScalarKey, ScalarOp};

use crate::support::{assert_same, fresh};

/// `x0, x1; v2 = add v0, v1; v3, v4 = sincos v2; v5 = mul v4, v0; v6 = const 2.5`,
/// outputs `v5, v3` (the constant is dead).
fn sample() -> (Arc<Graph<ScalarOp>>, Vec<ValueKey<ScalarOp>>) {
    let mut b = GraphBuilder::with_interner(fresh());
    let x = b.add_input(ScalarKey::var(0));
    let y = b.add_input(ScalarKey::var(1));
    let s = b.add_operation(ScalarOp::Add, vec![Local(x), Local(y)], Primary)[0];
    let sc = b.add_operation(ScalarOp::SinCos, vec![Local(s)], Primary);
    let m = b.add_operation(ScalarOp::Mul, vec![Local(sc[1]), Local(x)], Primary)[0];
    b.add_operation(ScalarOp::constant(2.5), vec![], Primary);
    b.set_outputs(vec![m, sc[0]]);
    let g = Arc::new(b.build());
    let outputs = g.outputs().iter().map(|&v| g.global_key(v)).collect();
    (g, outputs)
}

#[test]
fn text_dumps_of_every_phase() {
    let (g, outputs) = sample();
    assert_eq!(
        g.to_string(),
        "graph: 2 inputs, 4 operations, 0 parents
  v0 = input x0
  v1 = input x1
  v2 = add v0, v1
  v3, v4 = sincos v2
  v5 = mul v4, v0
  v6 = const 2.5
  outputs: v5, v3
"
    );
    // Post-order from the first output: x0, x1, add, sincos, mul; the constant is dead.
    let m = materialize_merge(&resolve(vec![g]), &outputs);
    assert_eq!(
        m.to_string(),
        "materialized: 2 inputs, 3 operations
  mv0 = input x0
  mv1 = input x1
  mv2 = add mv0, mv1
  mv3, mv4 = sincos mv2
  mv5 = mul mv4, mv0
  outputs: mv5, mv3
"
    );
    // Slots: x0→s0, x1→s1; add→s2 frees s1; sincos→s1 (reused), s3, frees s2;
    // mul→s2 (reused) frees s3 and s0. Output slots s2 (mul) and s1 (sin).
    let p = compile(&m);
    assert_eq!(
        p.to_string(),
        "program: 3 instructions, 4 slots
  s0 = input x0
  s1 = input x1
  s2 = add s0, s1
  s1, s3 = sincos s2
  s2 = mul s3, s0
  outputs: s2, s1
"
    );
    let (a, b) = (0.25f64, 0.5f64);
    assert_same(&p.eval(&mut (), &[&a, &b]), &[(a + b).cos() * a, (a + b).sin()]);
}

/// Slots are reused last-freed-first: `add` frees s0 then s1, so `neg` gets s1.
#[test]
fn program_dump_reuses_the_last_freed_slot() {
    let mut b = GraphBuilder::with_interner(fresh());
    let x = b.add_input(ScalarKey::var(0));
    let y = b.add_input(ScalarKey::var(1));
    let s = b.add_operation(ScalarOp::Add, vec![Local(x), Local(y)], Primary)[0];
    let n = b.add_operation(ScalarOp::Neg, vec![Local(s)], Primary)[0];
    let g = Arc::new(b.build());
    let p = compile(&materialize_merge(&resolve(vec![g.clone()]), &[g.global_key(n)]));
    assert_eq!(
        p.to_string(),
        "program: 2 instructions, 3 slots
  s0 = input x0
  s1 = input x1
  s2 = add s0, s1
  s1 = neg s2
  outputs: s1
"
    );
    assert_same(&p.eval(&mut (), &[&1.0, &2.0]), &[-3.0]);
}

/// A linear operation reading an external key of a parent fragment.
#[test]
fn text_dumps_with_linear_role_and_external_key() {
    let interner = fresh();
    let mut a = GraphBuilder::with_interner(interner.clone());
    let x = a.add_input(ScalarKey::var(0));
    let s = a.add_operation(ScalarOp::Sin, vec![Local(x)], Primary)[0];
    a.set_outputs(vec![s]);
    let a = Arc::new(a.build());
    let sin_key = a.global_key(s);

    let mut b = GraphBuilder::with_interner(interner);
    b.add_parent(a.clone());
    let t = b.add_input(ScalarKey::var(1));
    let role = OperationRole::Linearized { active_mask: vec![false, true] };
    let m = b.add_operation(ScalarOp::Mul, vec![External(sin_key.clone()), Local(t)], role)[0];
    b.set_outputs(vec![m]);
    let b = Arc::new(b.build());
    assert_eq!(
        b.to_string(),
        format!(
            "graph: 1 inputs, 1 operations, 1 parents
  v0 = input x1
  v1 = mul [linear[fa]] @{sin_key:?}, v0
  outputs: v1
"
        )
    );
    let flat = materialize_merge(&resolve(vec![b.clone()]), &[b.global_key(m)]);
    assert_eq!(
        flat.to_string(),
        "materialized: 2 inputs, 2 operations
  mv0 = input x0
  mv1 = input x1
  mv2 = sin mv0
  mv3 = mul [linear[fa]] mv2, mv1
  outputs: mv3
"
    );
    let p = compile(&flat);
    assert_eq!(
        p.to_string(),
        "program: 2 instructions, 3 slots
  s0 = input x0
  s1 = input x1
  s2 = sin s0
  s0 = mul s2, s1
  outputs: s0
"
    );
    assert_same(&p.eval(&mut (), &[&0.5, &3.0]), &[0.5f64.sin() * 3.0]);
}

/// A parsed DOT graph: node name → label, and edges as (source, target) names.
struct Dot {
    labels: HashMap<String, String>,
    edges: Vec<(String, String)>,
}

impl Dot {
    /// Edges as (source label, target label), sorted.
    fn labelled_edges(&self) -> Vec<(String, String)> {
        let mut e: Vec<_> = self.edges.iter().map(|(a, b)| (self.labels[a].clone(), self.labels[b].clone())).collect();
        e.sort();
        e
    }
}

/// Reads the value of `label="..."`, undoing `\"` and `\\`.
fn label_of(attrs: &str) -> Option<String> {
    let start = attrs.find("label=\"")? + "label=\"".len();
    let mut out = String::new();
    let mut chars = attrs[start..].chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => return Some(out),
            '\\' => match chars.next()? {
                c @ ('"' | '\\') => out.push(c),
                c => {
                    out.push('\\');
                    out.push(c);
                }
            },
            c => out.push(c),
        }
    }
    panic!("unterminated label in {attrs:?}");
}

/// A plausibility parser for the DOT we emit: header, footer, `;`-terminated statements,
/// balanced quotes, every edge end declared as a node.
fn parse_dot(dot: &str) -> Dot {
    let lines: Vec<&str> = dot.lines().collect();
    assert!(lines.len() >= 2, "{dot}");
    assert!(lines[0].starts_with("digraph ") && lines[0].ends_with('{'), "header: {:?}", lines[0]);
    assert_eq!(*lines.last().unwrap(), "}", "footer");
    let mut labels = HashMap::new();
    let mut edges = Vec::new();
    for line in &lines[1..lines.len() - 1] {
        let line = line.trim();
        assert!(line.ends_with(';'), "statement without `;`: {line:?}");
        let unescaped_quotes = line.replace("\\\\", "").replace("\\\"", "").matches('"').count();
        assert_eq!(unescaped_quotes % 2, 0, "unbalanced quotes: {line:?}");
        if let Some((src, rest)) = line.split_once(" -> ") {
            let dst = rest.split([' ', ';', '[']).next().unwrap();
            edges.push((src.to_string(), dst.to_string()));
        } else if let Some((name, attrs)) = line.split_once(" [") {
            if !matches!(name, "node" | "edge" | "graph") {
                let label = label_of(attrs).unwrap_or_else(|| panic!("node without label: {line:?}"));
                assert!(labels.insert(name.to_string(), label).is_none(), "node {name} declared twice");
            }
        } else {
            assert!(line.contains('='), "unexpected statement {line:?}");
        }
    }
    for (a, b) in &edges {
        assert!(labels.contains_key(a) && labels.contains_key(b), "edge {a} -> {b} has an undeclared end");
    }
    Dot { labels, edges }
}

fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut v: Vec<_> = p.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect();
    v.sort();
    v
}

#[test]
fn dot_of_every_phase_has_one_edge_per_operand_and_output() {
    let (g, outputs) = sample();
    // Operands: add 2, sincos 1, mul 2, const 0; plus 2 graph outputs.
    let expected = pairs(&[
        ("x0", "add"),
        ("x1", "add"),
        ("add", "sincos"),
        ("sincos", "mul"),
        ("x0", "mul"),
        ("mul", "out 0"),
        ("sincos", "out 1"),
    ]);
    let dot = g.to_dot();
    assert_eq!(dot.matches("->").count(), 7);
    let parsed = parse_dot(&dot);
    assert_eq!(parsed.labelled_edges(), expected);
    assert!(parsed.labels.values().any(|l| l == "const 2.5"), "the dead constant is still a node of the fragment");

    let m = materialize_merge(&resolve(vec![g]), &outputs);
    let dot = m.to_dot();
    assert_eq!(dot.matches("->").count(), 7);
    let parsed = parse_dot(&dot);
    assert_eq!(parsed.labelled_edges(), expected);
    assert!(parsed.labels.values().all(|l| !l.starts_with("const")), "materialize dropped the dead constant");

    let dot = compile(&m).to_dot();
    assert_eq!(dot.matches("->").count(), 7);
    assert_eq!(parse_dot(&dot).labelled_edges(), expected);
}

#[test]
fn dot_marks_external_operands_and_linear_roles() {
    let interner = fresh();
    let mut a = GraphBuilder::with_interner(interner.clone());
    let x = a.add_input(ScalarKey::var(0));
    let e = a.add_operation(ScalarOp::Exp, vec![Local(x)], Primary)[0];
    let a = Arc::new(a.build());
    let mut b = GraphBuilder::with_interner(interner);
    let n = b.add_operation(ScalarOp::Neg, vec![External(a.global_key(e))], OperationRole::all_active(1))[0];
    b.set_outputs(vec![n]);
    let b = b.build();
    let dot = b.to_dot();
    let parsed = parse_dot(&dot);
    assert_eq!(parsed.edges.len(), 2);
    let ext = format!("{:?}", a.global_key(e));
    assert!(parsed.labels.values().any(|l| *l == ext), "external operand node labelled {ext}: {dot}");
    assert!(dot.contains("dashed"), "externals are dashed boxes: {dot}");
    assert!(parsed.labels.values().any(|l| l.starts_with("neg") && l.contains("linear[a]")), "{dot}");
    // The role is on a second line: DOT's `\n` escape, not an escaped backslash.
    assert!(dot.contains(r#"label="neg\nlinear[a]""#), "{dot}");
}

/// The DOT module doc says operand edges are "labelled with the output slot when an
/// operation has several outputs": reading (cos, sin) and (sin, cos) of one `sincos`
/// must then give different DOT.
#[test]
fn dot_edges_from_multi_output_operations_name_the_output_slot() {
    let interner = fresh();
    let build = |swap: bool| {
        let mut b = GraphBuilder::with_interner(interner.clone());
        let x = b.add_input(ScalarKey::var(0));
        let sc = b.add_operation(ScalarOp::SinCos, vec![Local(x)], Primary);
        let (l, r) = if swap { (sc[1], sc[0]) } else { (sc[0], sc[1]) };
        let m = b.add_operation(ScalarOp::Mul, vec![Local(l), Local(r)], Primary)[0];
        b.set_outputs(vec![m]);
        let g = Arc::new(b.build());
        let key = g.global_key(m);
        (g, key)
    };
    let ((g1, k1), (g2, k2)) = (build(false), build(true));
    assert_ne!(k1, k2);
    assert_ne!(g1.to_string(), g2.to_string(), "the text dumps differ (v2, v3 vs v3, v2)");
    assert_ne!(g1.to_dot(), g2.to_dot(), "fragment DOT loses which sincos output each operand reads");
    let m1 = materialize_merge(&resolve(vec![g1]), &[k1]);
    let m2 = materialize_merge(&resolve(vec![g2]), &[k2]);
    assert_ne!(m1.to_dot(), m2.to_dot(), "materialized DOT loses which sincos output each operand reads");
}

/// An operation label and an input key that need escaping in DOT.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Quoted;

impl GraphOperation for Quoted {
    type Operand = f64;
    type Context = ();
    type InputKey = &'static str;
    fn input_count(&self) -> usize {
        1
    }
    fn output_count(&self) -> usize {
        1
    }
    fn fmt_label(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(r#"say "hi" \ bye"#)
    }
}

#[test]
fn dot_escapes_labels() {
    let mut b = GraphBuilder::with_interner(computegraph::KeyInterner::<Quoted>::new());
    let x = b.add_input(r#"in"put"#);
    let y = b.add_operation(Quoted, vec![Local(x)], Primary)[0];
    b.set_outputs(vec![y]);
    let g = Arc::new(b.build());
    let m = materialize_merge(&resolve(vec![g.clone()]), &[g.global_key(y)]);
    for dot in [g.to_dot(), m.to_dot(), compile(&m).to_dot()] {
        let parsed = parse_dot(&dot);
        let mut labels: Vec<_> = parsed.labels.values().cloned().collect();
        labels.sort();
        assert_eq!(labels, vec![r#""in\"put""#.to_string(), "out 0".into(), r#"say "hi" \ bye"#.into()], "{dot}");
    }
    assert_eq!(g.to_string().lines().nth(2).unwrap(), r#"  v1 = say "hi" \ bye v0"#);
}
