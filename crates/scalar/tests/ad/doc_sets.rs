//! The doc examples' stand-in agrees with this crate: `crates/tidu/doc/scalar_eager.rs`,
//! which tidu's eager doc examples declare as their `scalar` module, gives the gradients,
//! recorder counters and errors of the real `scalar::eager::Tape` on the same programs.
//! (The rules it declares, `crates/tidu/doc/scalar.rs`, are this crate's own source, so
//! every other test here covers them.)

use tidu::ADRuleError;
use tidu::eager::{EagerError, RecorderStats};

#[path = "../../../tidu/doc/scalar_eager.rs"]
#[allow(dead_code)]
mod doc;

/// Runs one program on a tape of module `$m` (the real `scalar` or the stand-in `doc`):
/// every operation kind, a replay (`sin` and `cos` need primal values nobody retained), a
/// leaf without gradient, a constant, and a second backward from an intermediate.
/// Returns the gradients of the two leaves, whether the third got one, and the counters.
macro_rules! program {
    ($m:ident, $a:expr, $b:expr) => {{
        use $m::ScalarOp as Op;
        use $m::eager::{ScalarExecutor, Tape};
        let mut tape = Tape::new();
        let mut exec = ScalarExecutor::new();
        let a = tape.leaf($a, true).unwrap();
        let b = tape.leaf($b, true).unwrap();
        let c = tape.leaf(0.4, false).unwrap();
        let one = |t: &mut Tape, op, args: &[&_]| t.apply(op, args).unwrap().remove(0);
        let s = one(&mut tape, Op::Sin, &[&a]);
        let co = one(&mut tape, Op::Cos, &[&b]);
        let e = one(&mut tape, Op::Exp, &[&s]);
        let n = one(&mut tape, Op::Neg, &[&co]);
        let ab = one(&mut tape, Op::Mul, &[&a, &b]);
        let sc = tape.apply(Op::SinCos, &[&ab]).unwrap();
        let m = one(&mut tape, Op::Mul, &[&e, &n]);
        let p = one(&mut tape, Op::Add, &[&m, &sc[0]]);
        let q = one(&mut tape, Op::Mul, &[&p, &sc[1]]);
        let r = one(&mut tape, Op::Add, &[&q, &c]);
        let k = one(&mut tape, Op::constant(1.5), &[]);
        let y = one(&mut tape, Op::Mul, &[&r, &k]);
        let g = tape.backward(&y, 1.0, &mut exec).unwrap();
        let h = tape.backward(&p, 2.0, &mut exec).unwrap();
        let grads = [&g, &h].map(|g| (*g[&a.key], *g[&b.key], g.contains_key(&c.key)));
        let stats: RecorderStats = tape.recorder().stats();
        // Errors: an operand from another tape, and the wrong number of operands.
        let foreign = Tape::new().apply(Op::Neg, &[&y]).err().unwrap();
        let arity = tape.apply(Op::Mul, &[&y]).err().unwrap();
        (grads, *y.value, stats, foreign, arity)
    }};
}

#[test]
fn the_doc_tape_matches_the_reference_tape() {
    for (x, w) in [(0.7, -1.3), (-2.0, 0.25), (1e-3, 3.0)] {
        let real = program!(scalar, x, w);
        let stand_in = program!(doc, x, w);
        assert_eq!(real.0, stand_in.0, "gradients at ({x}, {w})");
        assert_eq!(real.1, stand_in.1, "value at ({x}, {w})");
        assert_eq!(real.2, stand_in.2, "recorder counters");
        assert!(!real.0[0].2, "a leaf without gradient gets none");
        assert!(matches!(stand_in.3, ADRuleError::Eager(EagerError::ForeignTrace { input: 0 })), "{}", stand_in.3);
        assert_eq!(real.3, stand_in.3);
        assert_eq!(real.4, stand_in.4);
    }
}
