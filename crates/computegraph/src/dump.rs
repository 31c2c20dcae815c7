//! Text dumps (`v3 = mul v1, v2`) and Graphviz DOT export of every phase.
//!
//! Text format, one line per entity, for snapshot tests and debugging:
//! - [`Graph`]: `v0 = input Var(0)`, `v2 = mul v0, @ok1.0` (`@` marks an external key),
//!   linear operations carry their mask: `v3 = mul [linear[fa]] @ok0.0, v1`;
//! - [`MaterializedGraph`]: the same with materialized ids;
//! - [`CompiledProgram`](crate::CompiledProgram): `s2 = mul s0, s1` over slots (its dumps
//!   are in `compiled.rs`, beside the type).
//!
//! DOT: one node per input and operation, one edge per operand, labelled with the operand
//! position; an edge leaving an operation with several outputs is labelled `slot→position`.

use std::fmt::{self, Write};

use crate::graph::{Graph, InputRef};
use crate::materialize::MaterializedGraph;
use crate::operation::{GraphOperation, Label};

impl<Op: GraphOperation> fmt::Display for Graph<Op> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "graph: {} inputs, {} operations, {} parents",
            self.inputs.len(),
            self.operation_count(),
            self.parents.len()
        )?;
        for (&v, k) in self.inputs.iter().zip(&self.input_keys) {
            writeln!(f, "  {v:?} = input {k:?}")?;
        }
        for op in self.operations() {
            let outs: Vec<String> = op.outputs().map(|v| format!("{v:?}")).collect();
            write!(f, "  {} = {}", outs.join(", "), Label(op.operation()))?;
            if op.role().is_linearized() {
                write!(f, " [{}]", op.role())?;
            }
            for (i, r) in self.op_input_refs(op.id()).enumerate() {
                f.write_str(if i == 0 { " " } else { ", " })?;
                match r {
                    InputRef::Local(v) => write!(f, "{v:?}")?,
                    InputRef::External(e) => write!(f, "@{:?}", self.externals[e as usize])?,
                }
            }
            writeln!(f)?;
        }
        let outs: Vec<String> = self.outputs.iter().map(|v| format!("{v:?}")).collect();
        writeln!(f, "  outputs: {}", outs.join(", "))
    }
}

impl<Op: GraphOperation> fmt::Display for MaterializedGraph<Op> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "materialized: {} inputs, ", self.inputs.len())?;
        if !self.externals.is_empty() {
            write!(f, "{} external values, ", self.externals.len())?;
        }
        writeln!(f, "{} operations", self.operation_count())?;
        for (&v, k) in self.inputs.iter().zip(&self.input_keys) {
            writeln!(f, "  {v:?} = input {k:?}")?;
        }
        for (&v, k) in self.externals.iter().zip(&self.external_keys) {
            writeln!(f, "  {v:?} = external {k:?}")?;
        }
        for op in self.op_key.ids() {
            f.write_str("  ")?;
            self.fmt_operation(f, op)?;
            writeln!(f)?;
        }
        let outs: Vec<String> = self.outputs.iter().map(|v| format!("{v:?}")).collect();
        writeln!(f, "  outputs: {}", outs.join(", "))
    }
}

/// An operand edge's label: the operand position, preceded by the producer's output slot
/// when the producer has several outputs.
fn edge_label(slot: Option<u8>, operand: usize) -> String {
    match slot {
        Some(s) => format!("{s}→{operand}"),
        None => operand.to_string(),
    }
}

pub(crate) fn escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

/// A DOT label for an operation: its name, and on a second line its role if linearized.
/// Each part is escaped on its own, so the line break stays DOT's `\n`.
fn op_label<Op: GraphOperation>(op: &Op, role: &crate::OperationRole) -> String {
    let mut label = escape(&Label(op).to_string());
    if role.is_linearized() {
        let _ = write!(label, "\\n{}", escape(&role.to_string()));
    }
    label
}

impl<Op: GraphOperation> Graph<Op> {
    /// This graph in Graphviz DOT. External operands appear as dashed boxes.
    pub fn to_dot(&self) -> String {
        let mut s = String::from("digraph graph_fragment {\n  rankdir=TB;\n  node [fontname=\"monospace\"];\n");
        for (&v, k) in self.inputs.iter().zip(&self.input_keys) {
            let _ = writeln!(s, "  {v:?} [shape=ellipse, label=\"{}\"];", escape(&format!("{k:?}")));
        }
        for (i, k) in self.externals.iter().enumerate() {
            let _ = writeln!(s, "  ext{i} [shape=box, style=dashed, label=\"{}\"];", escape(&format!("{k:?}")));
        }
        for op in self.operations() {
            let name = format!("{:?}", op.id());
            let _ = writeln!(s, "  {name} [shape=box, label=\"{}\"];", op_label(op.operation(), op.role()));
            for (j, r) in self.op_input_refs(op.id()).enumerate() {
                let (src, slot) = match r {
                    InputRef::Local(v) => self.dot_source(v),
                    InputRef::External(e) => (format!("ext{e}"), None),
                };
                let _ = writeln!(s, "  {src} -> {name} [label=\"{}\"];", edge_label(slot, j));
            }
        }
        for (i, v) in self.outputs.iter().enumerate() {
            let (src, slot) = self.dot_source(*v);
            let label = slot.map_or(String::new(), |s| format!(" [label=\"{s}\"]"));
            let _ = writeln!(s, "  out{i} [shape=plaintext, label=\"out {i}\"];\n  {src} -> out{i}{label};");
        }
        s.push_str("}\n");
        s
    }

    /// The DOT node that produces `v`, and its output slot if that node has several outputs.
    fn dot_source(&self, v: crate::LocalValueId) -> (String, Option<u8>) {
        match self.local_def(v) {
            crate::graph::LocalDef::Input(_) => (format!("{v:?}"), None),
            crate::graph::LocalDef::Output(op, slot) => {
                (format!("{op:?}"), (self.op(op).output_count() > 1).then_some(slot))
            }
        }
    }
}

impl<Op: GraphOperation> MaterializedGraph<Op> {
    /// This graph in Graphviz DOT.
    pub fn to_dot(&self) -> String {
        let mut s = String::from("digraph materialized {\n  rankdir=TB;\n  node [fontname=\"monospace\"];\n");
        for (&v, k) in self.inputs.iter().zip(&self.input_keys) {
            let _ = writeln!(s, "  {v:?} [shape=ellipse, label=\"{}\"];", escape(&format!("{k:?}")));
        }
        for (&v, k) in self.externals.iter().zip(&self.external_keys) {
            let _ = writeln!(s, "  {v:?} [shape=ellipse, style=dashed, label=\"{}\"];", escape(&format!("{k:?}")));
        }
        let source = |v: crate::ValueId| match self.def(v) {
            crate::materialize::MatDef::Input(_) | crate::materialize::MatDef::External(_) => (format!("{v:?}"), None),
            crate::materialize::MatDef::Output(op, slot) => {
                (format!("{op:?}"), (self.op(op).output_count() > 1).then_some(slot))
            }
        };
        for op in self.operations() {
            let name = format!("{:?}", op.id());
            let _ = writeln!(s, "  {name} [shape=box, label=\"{}\"];", op_label(op.operation(), op.role()));
            for (j, &v) in op.inputs().iter().enumerate() {
                let (src, slot) = source(v);
                let _ = writeln!(s, "  {src} -> {name} [label=\"{}\"];", edge_label(slot, j));
            }
        }
        for (i, &v) in self.outputs.iter().enumerate() {
            let (src, slot) = source(v);
            let label = slot.map_or(String::new(), |s| format!(" [label=\"{s}\"]"));
            let _ = writeln!(s, "  out{i} [shape=plaintext, label=\"out {i}\"];\n  {src} -> out{i}{label};");
        }
        s.push_str("}\n");
        s
    }
}
