//! Plans that never take the long way round: labels held by one operand alone are summed
//! out of it first, so `ij,kl->` is two sums and a product, three disconnected operands
//! reduced to a label of the first are three sums, and `a,bcd,efg->` costs what its sums
//! cost; the plan made from the numbered network equals the one made from the string; a
//! sliced plan is the plan with labels dropped.

use einsum::search::path_cost;
use einsum::{ContractionPath, Einsum, MemoryLimit, PathChoice, Plan, SlicedEinsum, Slicing, Tensor};

use crate::network::tensor;

fn sum(t: &Tensor<f64>) -> f64 {
    t.data().iter().sum()
}

#[test]
fn an_outer_product_summed_away_is_two_sums() {
    let n = 300;
    let shapes = vec![vec![n, n], vec![n, n]];
    let e = Einsum::<f64>::new("ij,kl->", &shapes, PathChoice::Greedy).unwrap();
    // n² + n² for the sums, 1 for the product of two scalars (the outer product was n⁴).
    assert_eq!(e.multiply_adds(), (2 * n * n + 1) as f64);
    let (a, b) = (tensor::<f64>(shapes[0].clone(), 1), tensor::<f64>(shapes[1].clone(), 2));
    // The work bound above is the test (the n⁴ loop would be 8.1·10^9 multiply-adds).
    let got = e.eval(&[&a, &b]).unwrap();
    let want = sum(&a) * sum(&b);
    assert!((got.data()[0] - want).abs() <= 1e-9 * want.abs().max(1.0), "{} vs {want}", got.data()[0]);
}

#[test]
fn disconnected_operands_are_summed_before_they_meet() {
    // labs[:20], labs[20:40], labs[40:60] -> labs[0], every label of size 2.
    let labels: Vec<char> = (0..60).map(|k| char::from_u32(0x100 + k).unwrap()).collect();
    let part = |r: std::ops::Range<usize>| labels[r].iter().collect::<String>();
    let expr = format!("{},{},{}->{}", part(0..20), part(20..40), part(40..60), labels[0]);
    let shapes = vec![vec![2; 20]; 3];
    let e = Einsum::<f64>::new(&expr, &shapes, PathChoice::Auto).unwrap();
    // Three sums of 2^20 loops; the two scalars first (1), then with the 2-vector (2).
    assert_eq!(e.multiply_adds(), (3 * (1 << 20) + 1 + 2) as f64);
    let ops: Vec<Tensor<f64>> = (0..3).map(|i| tensor(shapes[i].clone(), 7 + i as u64)).collect();
    // The work bound above is the test of the order (a timing bound would fail on a loaded
    // machine, not on a wrong plan).
    let got = e.eval(&[&ops[0], &ops[1], &ops[2]]).unwrap();
    // The first operand's halves by its first axis, times the sums of the others.
    let half = 1 << 19;
    let (d0, others) = (ops[0].data(), sum(&ops[1]) * sum(&ops[2]));
    for (x, want) in got.data().iter().zip([d0[..half].iter().sum::<f64>(), d0[half..].iter().sum::<f64>()]) {
        let want = want * others;
        assert!((x - want).abs() <= 1e-9 * want.abs().max(1.0), "{x} vs {want}");
    }
}

#[test]
fn sums_first_cost_no_more_than_any_path_without_them() {
    // a,bcd,efg-> of sizes 2..: every label is held by one operand alone.
    let inputs = vec![vec![0], vec![1, 2, 3], vec![4, 5, 6]];
    let sizes = vec![2, 3, 4, 2, 3, 2, 2];
    let plan = Plan::from_network(inputs.clone(), vec![], sizes.clone(), PathChoice::Dp, MemoryLimit::Unlimited);
    let plan = plan.unwrap();
    // The three sums (2 + 24 + 12), then two products of scalars.
    assert_eq!(plan.multiply_adds(), 2.0 + 24.0 + 12.0 + 2.0);
    // Every pairwise path of the network taken as it is (no sums first) costs more: the
    // cheapest contracts `a` with `efg` (24 loops), then with `bcd` (24).
    for steps in [vec![[0, 1], [0, 1]], vec![[0, 2], [0, 1]], vec![[1, 2], [0, 1]]] {
        let walked = einsum::FollowedPath::new(&inputs, &[], &ContractionPath::new(steps)).unwrap();
        let loops: f64 = walked
            .steps()
            .iter()
            .map(|s| walked.loops(s).iter().map(|&c| sizes[c as usize] as f64).product::<f64>())
            .sum();
        assert!(plan.multiply_adds() < loops, "{loops}");
    }
    // The search's cost model counts the sums too.
    assert_eq!(path_cost(&inputs, &[], &sizes, plan.path()).unwrap(), plan.multiply_adds());
}

#[test]
fn a_numbered_network_plans_as_its_expression() {
    let shapes = vec![vec![2, 3, 4], vec![4, 5], vec![5, 2, 6]];
    let choices = [PathChoice::Greedy, PathChoice::Optimal, PathChoice::Auto];
    for choice in choices {
        let s = Plan::new("abc,cd,dae->be", &shapes, choice.clone(), MemoryLimit::Unlimited).unwrap();
        let net = s.network().clone();
        let n = Plan::from_network(net.inputs, net.output, net.sizes, choice, MemoryLimit::Unlimited).unwrap();
        assert_eq!((n.path(), n.steps(), n.multiply_adds()), (s.path(), s.steps(), s.multiply_adds()));
        assert_eq!(n.reduced_inputs(), s.reduced_inputs());
        let (a, b) = (Einsum::<f64>::from_plan(s).unwrap(), Einsum::<f64>::from_plan(n).unwrap());
        let ops: Vec<Tensor<f64>> = shapes.iter().enumerate().map(|(i, s)| tensor(s.clone(), i as u64)).collect();
        let refs: Vec<&Tensor<f64>> = ops.iter().collect();
        assert_eq!(a.eval(&refs).unwrap().data(), b.eval(&refs).unwrap().data());
    }
    // Bad numbered networks are errors, not panics.
    let bad = |i: Vec<Vec<u32>>, o: Vec<u32>| {
        Plan::from_network(i, o, vec![2, 2], PathChoice::Greedy, MemoryLimit::Unlimited)
    };
    assert!(bad(vec![vec![0, 2]], vec![]).is_err());
    assert!(bad(vec![vec![0, 1]], vec![0, 0]).is_err());
    assert!(bad(vec![vec![0]], vec![1]).is_err());
}

#[test]
fn a_sliced_plan_drops_labels_and_keeps_the_path() {
    let shapes = vec![vec![3, 4], vec![4, 5], vec![5, 3]];
    let plan = Plan::new("ab,bc,cd->ad", &shapes, PathChoice::Greedy, MemoryLimit::Unlimited).unwrap();
    let sliced = plan.slice(&[1]).unwrap();
    assert_eq!(sliced.path(), plan.path());
    assert_eq!(sliced.shapes(), &[vec![3], vec![5], vec![5, 3]]);
    assert_eq!(sliced.subscripts().unwrap().to_string(), "a,c,cd->ad");
    assert!(plan.slice(&[9]).is_err());
    // Sliced on `b` (summed) and `a` (in the output), slice by slice: the whole result.
    let ops: Vec<Tensor<f64>> = shapes.iter().enumerate().map(|(i, s)| tensor(s.clone(), 3 + i as u64)).collect();
    let refs: Vec<&Tensor<f64>> = ops.iter().collect();
    let whole = Einsum::<f64>::from_plan(plan.clone()).unwrap().eval(&refs).unwrap();
    let s = SlicedEinsum::<f64>::from_plan(plan, &Slicing::Labels(vec!['b', 'a'])).unwrap();
    assert_eq!((s.plan().n_slices(), s.slice_einsum().plan().sliced()), (12, &[1, 0][..]));
    assert!(s.eval(&refs).unwrap().max_abs_diff(&whole).unwrap() < 1e-12);
}

#[test]
fn a_plan_serializes_and_comes_back_checked() {
    let plans = [
        Plan::new("ab,bc,cd->ad", &[vec![3, 4], vec![4, 5], vec![5, 3]], PathChoice::Auto, MemoryLimit::Unlimited),
        Plan::new("...ij,jk->...ik", &[vec![2, 1, 3], vec![3, 4]], PathChoice::Greedy, MemoryLimit::Bytes(1 << 20)),
        Plan::new("ij,ij->", &[vec![1, 3], vec![2, 3]], PathChoice::Optimal, MemoryLimit::default()),
        Plan::from_network(
            vec![vec![0, 1], vec![1, 2], vec![3]],
            vec![0],
            vec![2, 3, 4, 5],
            PathChoice::Dp,
            MemoryLimit::Unlimited,
        ),
    ];
    for plan in plans {
        let plan = plan.unwrap();
        let back: Plan = serde_json::from_str(&serde_json::to_string(&plan).unwrap()).unwrap();
        assert_eq!(back, plan);
        let data = |p: &Plan| serde_json::to_value(p).unwrap();
        // A sliced plan too, when it has a label to drop.
        if let Some(&c) = plan.network().output.first() {
            let sliced = plan.slice(&[c]).unwrap();
            assert_eq!(serde_json::from_value::<Plan>(data(&sliced)).unwrap(), sliced);
        }
        // Tampered data is an error, never a panic.
        for (field, value) in [
            ("path", serde_json::json!([[0, 9]])),
            ("sizes", serde_json::json!([])),
            ("shapes", serde_json::json!([[7, 7, 7]])),
            ("sliced", serde_json::json!([99])),
            ("names", serde_json::json!(["a"])),
            ("subscripts", serde_json::json!([[["a"]], [], [9], null])),
        ] {
            let mut v = data(&plan);
            v[field] = value;
            assert!(serde_json::from_value::<Plan>(v).is_err(), "{field}");
        }
    }
}
