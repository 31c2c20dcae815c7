//! numpy's einsum semantics against the plain reference: ellipses (anywhere in an operand
//! or the output, or summed), size-1 broadcasting of labels and of ellipsis axes, traces
//! and diagonals, implicit output, and paths whose steps contract one, two or more
//! operands; values with every path choice, gradients by exact differences and HVPs by
//! symmetry and central differences (`docs/SPEC.md` §7), real and complex; the errors.

use einsum::{ContractionPath, Einsum, Elem, PathChoice, Tensor, c64, reference_einsum};
use proptest::prelude::*;

use crate::network::{assert_close, tensor};

/// A random network in numpy's syntax with an explicit path of steps of 1..=3 operands.
#[derive(Clone, Debug)]
struct Net {
    expr: String,
    shapes: Vec<Vec<usize>>,
    path: Vec<Vec<usize>>,
}

fn net() -> impl Strategy<Value = Net> {
    (1usize..=4, 1u32..=5, 0usize..=2)
        .prop_flat_map(|(n, nl, er)| {
            (
                proptest::collection::vec(proptest::collection::vec(0..nl, 0..=3), n),
                proptest::collection::vec(1usize..=3, nl as usize),
                proptest::collection::vec(1usize..=3, er),
                proptest::collection::vec((any::<bool>(), 0usize..=2, 0usize..=3, any::<u8>()), n),
                (any::<bool>(), proptest::collection::vec(any::<bool>(), nl as usize), 0usize..=4, any::<bool>()),
                proptest::collection::vec(proptest::collection::vec(0usize..100, 1..=3), 0..=5),
            )
        })
        .prop_map(|(labels, sizes, ell, per_op, (explicit, keep, pos, with_ell), raw_path)| {
            let letter = |c: u32| char::from_u32('a' as u32 + c).unwrap();
            let er = ell.len();
            let mut terms = Vec::new();
            let mut shapes = Vec::new();
            for (l, &(has_ell, rank, at, mask)) in labels.iter().zip(&per_op) {
                // Bit c of the mask: label c is broadcast (size 1) in this operand; bits 5
                // and 6: the ellipsis axes.
                let named: Vec<usize> =
                    l.iter().map(|&c| if mask >> c & 1 == 1 { 1 } else { sizes[c as usize] }).collect();
                let mut term: String = l.iter().map(|&c| letter(c)).collect();
                let mut shape = named.clone();
                if has_ell {
                    let r = rank.min(er);
                    let at = at.min(l.len());
                    let dims: Vec<usize> =
                        (er - r..er).map(|d| if mask >> (5 + d) & 1 == 1 { 1 } else { ell[d] }).collect();
                    term.insert_str(term.char_indices().nth(at).map_or(term.len(), |(b, _)| b), "...");
                    shape.splice(at..at, dims);
                }
                terms.push(term);
                shapes.push(shape);
            }
            let any_ell = per_op.iter().any(|p| p.0);
            let mut present: Vec<u32> = labels.iter().flatten().copied().collect();
            present.sort_unstable();
            present.dedup();
            let mut expr = terms.join(",");
            if explicit {
                let mut out: Vec<String> =
                    present.iter().filter(|&&c| keep[c as usize]).map(|&c| letter(c).to_string()).collect();
                let turn = pos % out.len().max(1);
                out.rotate_left(turn);
                if any_ell && with_ell {
                    out.insert(pos % (out.len() + 1), "...".into());
                }
                expr = format!("{expr}->{}", out.concat());
            }
            // Steps on the shrinking list; whatever is left is contracted in one last step.
            let mut live = labels.len();
            let mut path = Vec::new();
            for raw in raw_path {
                if live == 1 {
                    break;
                }
                let mut step: Vec<usize> = Vec::new();
                for r in raw.into_iter().take(live) {
                    let mut p = r % live;
                    while step.contains(&p) {
                        p = (p + 1) % live;
                    }
                    step.push(p);
                }
                live -= step.len() - 1;
                path.push(step);
            }
            if live > 1 {
                path.push((0..live).rev().collect());
            }
            Net { expr, shapes, path }
        })
}

fn operands<T: Elem>(shapes: &[Vec<usize>], seed: u64) -> Vec<Tensor<T>> {
    shapes.iter().enumerate().map(|(i, s)| tensor(s.clone(), seed + i as u64)).collect()
}

fn refs<T: Elem>(v: &[Tensor<T>]) -> Vec<&Tensor<T>> {
    v.iter().collect()
}

fn check_values<T: Elem>(net: &Net) {
    let x = operands::<T>(&net.shapes, 0);
    let want = reference_einsum(&net.expr, &refs(&x)).unwrap_or_else(|e| panic!("{}: {e}", net.expr));
    let explicit = PathChoice::Explicit(ContractionPath::from_steps(net.path.clone()));
    for choice in [PathChoice::Greedy, explicit, PathChoice::Optimal, PathChoice::Dp, PathChoice::Auto] {
        let e = Einsum::<T>::new(&net.expr, &net.shapes, choice.clone())
            .unwrap_or_else(|e| panic!("{} {choice:?}: {e}", net.expr));
        assert_close(&e.eval(&refs(&x)).unwrap(), &want, &format!("{} {choice:?}", net.expr));
    }
}

fn add<T: Elem>(a: &Tensor<T>, b: &Tensor<T>, h: f64) -> Tensor<T> {
    let h = T::from_f64(h);
    a.zip_with(b, |x, y| x + h * y).unwrap()
}

fn close(a: f64, b: f64, scale: f64, what: &str) {
    assert!((a - b).abs() <= 1e-11 * (1.0 + scale), "{what}: {a:e} vs {b:e}");
}

/// ⟨c, f(x + tᵢ eᵢ) − f(x)⟩ = ⟨∇ᵢ, tᵢ⟩ exactly (f is linear in each operand); the HVP
/// against the five-point central difference of the gradient (exact: the gradient is a
/// polynomial of degree at most 3 along v) and ⟨w, H v⟩ = ⟨v, H w⟩.
fn check_derivatives<T: Elem>(net: &Net) {
    let path = PathChoice::Explicit(ContractionPath::from_steps(net.path.clone()));
    let e = Einsum::<T>::new(&net.expr, &net.shapes, path).unwrap();
    let x = operands::<T>(&net.shapes, 10);
    let n = x.len();
    let all: Vec<usize> = (0..n).collect();
    let f0 = e.eval(&refs(&x)).unwrap();
    let c = tensor::<T>(f0.shape().to_vec(), 99);
    let g = e.gradient(&all).unwrap().eval(&refs(&x), &c).unwrap();
    for i in 0..n {
        assert_eq!(g[i].shape(), x[i].shape(), "{}: gradient {i} has the operand's shape", net.expr);
        let t = tensor::<T>(x[i].shape().to_vec(), 50 + i as u64);
        let mut xp = x.clone();
        xp[i] = add(&x[i], &t, 1.0);
        let df = add(&e.eval(&refs(&xp)).unwrap(), &f0, -1.0);
        let (lhs, rhs) = (c.inner(&df).unwrap(), g[i].inner(&t).unwrap());
        close(lhs, rhs, c.norm() * df.norm() + g[i].norm() * t.norm(), &format!("{} gradient {i}", net.expr));
    }
    let grad = e.gradient(&all).unwrap();
    let hvp = e.hvp(&all).unwrap();
    let v = operands::<T>(&net.shapes, 70);
    let w = operands::<T>(&net.shapes, 80);
    let hv = hvp.eval(&refs(&x), &c, &refs(&v)).unwrap();
    let hw = hvp.eval(&refs(&x), &c, &refs(&w)).unwrap();
    let h = 0.1;
    let g_at = |s: f64| {
        let xs: Vec<Tensor<T>> = x.iter().zip(&v).map(|(a, b)| add(a, b, s * h)).collect();
        grad.eval(&refs(&xs), &c).unwrap()
    };
    let (g2, g1, gm1, gm2) = (g_at(2.0), g_at(1.0), g_at(-1.0), g_at(-2.0));
    for i in 0..n {
        let num = add(&add(&add(&g1[i], &gm1[i], -1.0), &g2[i], -0.125), &gm2[i], 0.125);
        let fd = num.map(|&z| z * T::from_f64(8.0 / (12.0 * h)));
        let err = fd.max_abs_diff(&hv[i]).unwrap();
        assert!(err <= 1e-10 * (1.0 + fd.max_abs()), "{}: HVP {i} differs from FD by {err:e}", net.expr);
    }
    let (a, b) = (0..n)
        .map(|i| (w[i].inner(&hv[i]).unwrap(), v[i].inner(&hw[i]).unwrap()))
        .fold((0.0, 0.0), |(s, t), (p, q)| (s + p, t + q));
    close(a, b, a.abs() + b.abs(), &format!("{}: HVP symmetry", net.expr));
}

/// Fixed cases numpy documents or users write, each with a path of steps of any length.
/// (expression, shapes, path).
type Case = (&'static str, &'static [&'static [usize]], &'static [&'static [usize]]);

const FIXED: &[Case] = &[
    ("...ij,...jk->...ik", &[&[4, 2, 3], &[3, 2]], &[&[0, 1]]),
    ("...ij,...jk", &[&[2, 1, 2, 3], &[3, 3, 2]], &[&[1, 0]]),
    ("ij...,jk...->ik...", &[&[2, 3, 4], &[3, 2, 1]], &[&[0, 1]]),
    ("...ii->...i", &[&[2, 3, 3]], &[&[0]]),
    ("i...i", &[&[3, 2, 3]], &[]),
    ("...->", &[&[2, 3]], &[&[0]]),
    ("a...,b...->ab", &[&[2, 3, 1], &[4, 1, 5]], &[&[0, 1]]),
    ("ij,ij->ij", &[&[1, 3], &[2, 1]], &[&[0, 1]]),
    ("ij,jk,kl->il", &[&[2, 3], &[1, 4], &[4, 2]], &[&[0, 1, 2]]),
    ("ab,bc,cd,de->ae", &[&[2, 3], &[3, 4], &[4, 2], &[2, 3]], &[&[3], &[1, 0, 2], &[0, 1]]),
    ("ii,ij,jk->k", &[&[3, 3], &[3, 2], &[2, 2]], &[&[2, 1, 0]]),
    ("...,...->...", &[&[], &[3]], &[&[1, 0]]),
    ("a->...a", &[&[2]], &[&[0]]),
];

fn fixed_nets() -> Vec<Net> {
    FIXED
        .iter()
        .map(|&(expr, shapes, path)| Net {
            expr: expr.to_string(),
            shapes: shapes.iter().map(|s| s.to_vec()).collect(),
            path: path.iter().map(|s| s.to_vec()).collect(),
        })
        .collect()
}

#[test]
fn fixed_cases_match_the_reference_with_derivatives() {
    for net in fixed_nets() {
        check_values::<f64>(&net);
        check_values::<c64>(&net);
        check_derivatives::<f64>(&net);
        check_derivatives::<c64>(&net);
    }
}

#[test]
fn numpy_results_by_hand() {
    // Broadcast batch: A (2,1,2,2) · B (3,2,2) → (2,3,2,2), each the product of its blocks.
    let a = tensor::<f64>(vec![2, 1, 2, 2], 1);
    let b = tensor::<f64>(vec![3, 2, 2], 2);
    let e = Einsum::<f64>::new("...ij,...jk->...ik", &[vec![2, 1, 2, 2], vec![3, 2, 2]], PathChoice::Greedy).unwrap();
    let r = e.eval(&[&a, &b]).unwrap();
    assert_eq!(r.shape(), &[2, 3, 2, 2]);
    for (p, q, i, k) in [(1, 2, 0, 1), (0, 1, 1, 0)] {
        let want: f64 = (0..2).map(|j| a.get(&[p, 0, i, j]).unwrap() * b.get(&[q, j, k]).unwrap()).sum();
        assert!((r.get(&[p, q, i, k]).unwrap() - want).abs() < 1e-14);
    }
    // A label of size 1 against size 3: the row is repeated, then summed (ij,j->i).
    let m = Tensor::new(vec![2, 1], vec![1.0, 2.0]).unwrap();
    let v = Tensor::new(vec![3], vec![1.0, 10.0, 100.0]).unwrap();
    let e = Einsum::<f64>::new("ij,j->i", &[vec![2, 1], vec![3]], PathChoice::Greedy).unwrap();
    assert_eq!(e.eval(&[&m, &v]).unwrap().data(), &[111.0, 222.0]);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn random_numpy_networks_match_the_reference(net in net()) {
        check_values::<f64>(&net);
        check_values::<c64>(&net);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn random_numpy_networks_have_exact_derivatives(net in net()) {
        check_derivatives::<f64>(&net);
        check_derivatives::<c64>(&net);
    }
}

/// Every bad input of the semantics gets an error value naming it (docs/TESTING.md's table).
#[test]
fn bad_inputs_are_errors() {
    let build = |x: &str, s: &[&[usize]], p: PathChoice| {
        let shapes: Vec<Vec<usize>> = s.iter().map(|s| s.to_vec()).collect();
        Einsum::<f64>::new(x, &shapes, p).err().map(|e| e.to_string()).unwrap_or_default()
    };
    let g = || PathChoice::Greedy;
    let steps =
        |s: &[&[usize]]| PathChoice::Explicit(ContractionPath::from_steps(s.iter().map(|s| s.to_vec()).collect()));
    let cases: Vec<(String, &str)> = vec![
        (build("...a...,a", &[&[2], &[2]], g()), "operand 0 has two ellipses"),
        (build("a..,a", &[&[2], &[2]], g()), "not part of an ellipsis"),
        (
            build("...i,...i", &[&[2, 3], &[4, 3]], g()),
            "ellipsis dimension 0 (of 1, aligned from the right) has size 2",
        ),
        (build("ij,jk", &[&[2, 3], &[4, 5]], g()), "label `j` has size 3 in operand 0"),
        (build("ii", &[&[1, 3]], g()), "label `i` is repeated in operand 0"),
        (build("ab...c", &[&[2, 3]], g()), "3 named labels besides its ellipsis"),
        (build("a,b,c", &[&[2], &[2], &[2]], steps(&[&[0, 1, 3]])), "step 0: position 3 is out of range"),
        (build("a,b,c", &[&[2], &[2], &[2]], steps(&[&[0, 0], &[0, 1]])), "step 0: names position 0 twice"),
        (build("a,b,c", &[&[2], &[2], &[2]], steps(&[&[], &[0, 1, 2]])), "step 0: names no operand"),
        (build("a,b,c", &[&[2], &[2], &[2]], steps(&[&[0], &[1, 2]])), "leaves 2 operands uncontracted"),
    ];
    for (got, want) in cases {
        assert!(got.contains(want), "expected `{want}` in `{got}`");
    }
}
