//! The `cgx` binary as a user runs it: exit codes, one-line errors, machine-readable output.

use std::process::{Command, Output};

fn cgx(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cgx")).args(args).output().expect("cgx runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn usage_mistakes_exit_2_with_a_message_and_no_backtrace() {
    for args in [&["bench", "dag", "--nodes", "0"][..], &["bench", "dag", "--shape", "star"], &["frobnicate"]] {
        let o = cgx(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let e = stderr(&o);
        assert!(e.starts_with("error:"), "{args:?}: {e}");
        assert!(!e.contains("panicked") && !e.contains("backtrace"), "{e}");
    }
}

#[test]
fn run_failures_are_one_line_with_exit_1() {
    let o = cgx(&["dot", "primal", "-o", "/nonexistent-dir/graph.dot"]);
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o);
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(e.starts_with("cgx: error: cannot write /nonexistent-dir/graph.dot"), "{e}");
}

#[test]
fn bench_dag_json_is_one_object_and_the_run_checks_itself() {
    let o = cgx(&["bench", "dag", "--shape", "chain", "--nodes", "3e3", "--threads", "2", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8(o.stdout).unwrap();
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(out.starts_with("{\"shape\":\"chain\",\"nodes\":3000,\"threads\":2,"), "{out}");
    assert!(out.contains("\"matches_reference\":true"), "{out}");
}

#[test]
fn dot_writes_graphviz_to_stdout() {
    let o = cgx(&["dot", "transposed"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8(o.stdout).unwrap();
    assert!(out.starts_with("digraph") && out.contains("add"), "{out}");
}

#[test]
fn completions_are_generated() {
    let o = cgx(&["completions", "bash"]);
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stdout).contains("cgx"));
}

#[test]
fn einsum_runs_an_expression_and_rejects_bad_ones_in_one_line() {
    let o = cgx(&["einsum", "ab,bc->ac", "--shapes", "2x3,3x4", "--grad"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8(o.stdout).unwrap();
    assert!(out.contains("result shape [2, 4]") && out.contains("GFLOP/s"), "{out}");
    for args in
        [&["einsum", "ab,bc->ac", "--shapes", "2x3,4x4"][..], &["einsum", "ab,bc->ac"], &["einsum", "missing.json"]]
    {
        let o = cgx(args);
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        let e = stderr(&o);
        assert!(e.starts_with("cgx: error:") && e.lines().count() == 1, "{args:?}: {e}");
    }
}

/// The fixtures made by numpy (`tests/data/make_npy_fixtures.py`).
fn data(name: &str) -> String {
    concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/").to_string() + name
}

/// A fresh path in a per-process temporary directory.
fn tmp(name: &str) -> String {
    let dir = std::env::temp_dir().join(format!("cgx-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name).display().to_string()
}

/// An `.npy` as (shape, interleaved re/im values): real files give im = 0.
fn load(path: &str) -> (Vec<usize>, Vec<[f64; 2]>) {
    let f = || std::fs::File::open(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    use ndarray_npy::ReadNpyExt;
    match ndarray::ArrayD::<f64>::read_npy(f()) {
        Ok(a) => (a.shape().to_vec(), a.iter().map(|&x| [x, 0.0]).collect()),
        Err(_) => {
            let a = ndarray::ArrayD::<einsum::c64>::read_npy(f()).unwrap();
            (a.shape().to_vec(), a.iter().map(|z| [z.re, z.im]).collect())
        }
    }
}

/// The arrays of an `.npz` by name, in `arr_0, arr_1, …` order.
fn load_npz(path: &str) -> Vec<(Vec<usize>, Vec<[f64; 2]>)> {
    let mut npz = ndarray_npy::NpzReader::new(std::fs::File::open(path).unwrap()).unwrap();
    let n = npz.len();
    (0..n)
        .map(|i| {
            let name = format!("arr_{i}");
            match npz.by_name::<ndarray::OwnedRepr<f64>, ndarray::IxDyn>(&name) {
                Ok(a) => (a.shape().to_vec(), a.iter().map(|&x| [x, 0.0]).collect()),
                Err(_) => {
                    let a = npz.by_name::<ndarray::OwnedRepr<einsum::c64>, ndarray::IxDyn>(&name).unwrap();
                    (a.shape().to_vec(), a.iter().map(|z| [z.re, z.im]).collect())
                }
            }
        })
        .collect()
}

/// `got` equals `want` (numpy's) to 1e-12 relative to the largest entry of `want`.
fn assert_close(got: &(Vec<usize>, Vec<[f64; 2]>), want: &(Vec<usize>, Vec<[f64; 2]>), what: &str) {
    assert_eq!(got.0, want.0, "{what}: shape");
    let scale = want.1.iter().map(|[re, im]| re.hypot(*im)).fold(f64::MIN_POSITIVE, f64::max);
    for (k, (g, w)) in got.1.iter().zip(&want.1).enumerate() {
        let err = (g[0] - w[0]).hypot(g[1] - w[1]);
        assert!(err <= 1e-12 * scale, "{what}: entry {k}: {g:?} vs numpy's {w:?}");
    }
}

#[test]
fn einsum_on_npy_files_matches_numpy_result_and_gradients() {
    let (out, grads) = (tmp("mm_out.npy"), tmp("mm_grads.npz"));
    let (a, b) = (data("mm_a.npy"), data("mm_b.npy"));
    let o = cgx(&["einsum", "ij,jk->ik", &a, &b, "-o", &out, "--grad", "--grad-out", &grads]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_close(&load(&out), &load(&data("mm_out.npy")), "result");
    let (got, want) = (load_npz(&grads), load_npz(&data("mm_grads.npz")));
    assert_eq!(got.len(), 2);
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_close(g, w, &format!("gradient {i} (ones)"));
    }
    // A cotangent seeds the reverse pass instead of ones.
    let o = cgx(&["einsum", "ij,jk->ik", &a, &b, "--grad", "--cotangent", &data("mm_cot.npy"), "--grad-out", &grads]);
    assert!(o.status.success(), "{}", stderr(&o));
    for (i, (g, w)) in load_npz(&grads).iter().zip(&load_npz(&data("mm_grads_cot.npz"))).enumerate() {
        assert_close(g, w, &format!("gradient {i} (cotangent)"));
    }
}

#[test]
fn hessian_vector_products_sliced_and_not_match_numpy() {
    // f(A, B) = A·B is bilinear: along the directions (A, B) themselves, the HVP of ⟨C, f⟩
    // is (C·Bᵀ, Aᵀ·C), the gradient for the cotangent C, which numpy gave.
    let (a, b, c) = (data("mm_a.npy"), data("mm_b.npy"), data("mm_cot.npy"));
    let want = load_npz(&data("mm_grads_cot.npz"));
    for (i, sliced) in [None, Some("j,i"), Some("k")].into_iter().enumerate() {
        let out = tmp(&format!("mm_hvp_{i}.npz"));
        let mut args = vec!["einsum", "ij,jk->ik", &a, &b, "--hvp", "--cotangent", &c, "--hvp-out", &out, "--json"];
        args.extend(["--directions", &a, "--directions", &b]);
        if let Some(labels) = sliced {
            args.extend(["--sliced-inds", labels]);
        }
        let o = cgx(&args);
        assert!(o.status.success(), "{sliced:?}: {}", stderr(&o));
        let json = String::from_utf8(o.stdout).unwrap();
        assert!(json.contains("\"hvp_check\":") && !json.contains("\"hvp_check\":null"), "{json}");
        let got = load_npz(&out);
        assert_eq!(got.len(), 2);
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_close(g, w, &format!("{sliced:?}: product {k}"));
        }
    }
    let o = cgx(&["einsum", "ij,jk->ik", &a, &b, "--hvp", "--cotangent", &c, "--directions", &a]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("--directions gives 1 arrays but the network has 2 operands"), "{}", stderr(&o));
}

#[test]
fn ellipses_broadcast_as_numpy_does_with_their_gradients() {
    let (out, grads) = (tmp("bc_out.npy"), tmp("bc_grads.npz"));
    let (a, b) = (data("bc_a.npy"), data("bc_b.npy"));
    for path in ["greedy", "optimal", "[(1, 0)]"] {
        let args = ["einsum", "...ij,...jk->...ik", &a, &b, "--path", path, "-o", &out, "--grad", "--grad-out", &grads];
        let o = cgx(&args);
        assert!(o.status.success(), "{path}: {}", stderr(&o));
        assert_close(&load(&out), &load(&data("bc_out.npy")), "broadcast result");
        for (i, (g, w)) in load_npz(&grads).iter().zip(&load_npz(&data("bc_grads.npz"))).enumerate() {
            assert_close(g, w, &format!("{path}: gradient {i}"));
        }
    }
}

#[test]
fn einsum_reads_one_npz_in_savez_order_with_fortran_arrays_and_traces() {
    let out = tmp("chain_out.npy");
    let o = cgx(&["einsum", "ij,jjk,kl->il", &data("chain.npz"), "-o", &out]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_close(&load(&out), &load(&data("chain_out.npy")), "chain result");
}

#[test]
fn complex128_files_run_as_complex() {
    let (out, grads) = (tmp("cz_out.npy"), tmp("cz_grads.npz"));
    let o = cgx(&[
        "einsum",
        "ij,j->i",
        &data("cz_a.npy"),
        &data("cz_x.npy"),
        "-o",
        &out,
        "--grad",
        "--grad-out",
        &grads,
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("\"dtype\":\"complex128\""));
    assert_close(&load(&out), &load(&data("cz_out.npy")), "complex result");
    for (i, (g, w)) in load_npz(&grads).iter().zip(&load_npz(&data("cz_grads.npz"))).enumerate() {
        assert_close(g, w, &format!("complex gradient {i}"));
    }
    // Real operands run as float64; a real operand beside a complex one is widened, as
    // numpy's einsum does.
    let o = cgx(&["einsum", "ij,jk->ik", &data("mm_a.npy"), &data("mm_b.npy"), "--json"]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("\"dtype\":\"float64\""));
    let o = cgx(&["einsum", "ij,jk->ik", &data("cz_a.npy"), &data("mm_a.npy"), "--json"]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("\"dtype\":\"complex128\""), "{}", stderr(&o));
}

#[test]
fn unsupported_dtypes_are_errors_naming_the_dtype_and_the_file() {
    for (file, dtype) in [("f32.npy", "'<f4' (float32)"), ("i64.npy", "'<i8' (int64)")] {
        let o = cgx(&["einsum", "ij,jk->ik", &data("mm_a.npy"), &data(file)]);
        assert_eq!(o.status.code(), Some(1), "{file}");
        let e = stderr(&o);
        assert!(e.contains(file) && e.contains(dtype) && e.lines().count() == 1, "{e}");
    }
    let inst = tmp("f32_instance.json");
    std::fs::write(&inst, r#"{"format_string": "ij,jk->ik", "shapes": [[2, 3], [3, 4]], "dtype": "float32"}"#).unwrap();
    let e = stderr(&cgx(&["einsum", &inst]));
    assert!(e.contains("f32_instance.json") && e.contains("dtype `float32` is not supported"), "{e}");
}

#[test]
fn a_complex128_instance_runs_as_complex() {
    let inst = tmp("c_instance.json");
    std::fs::write(
        &inst,
        r#"{"name": "c", "format_string": "ij,jk->ik", "shapes": [[2, 3], [3, 4]], "dtype": "complex128"}"#,
    )
    .unwrap();
    let o = cgx(&["einsum", &inst, "--path", "greedy", "--grad", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("\"dtype\":\"complex128\""), "{out}");
    // Seeded complex operands have both parts in [0.5, 1.5) · scale: the imaginary checksum is not 0.
    assert!(!out.contains("\"checksum_imag\":0,"), "{out}");
}

#[test]
fn over_the_memory_limit_the_network_is_sliced_with_the_same_result() {
    // Σ_ab (A·Bᵀ)_ab (C·Dᵀ)_ab: the intermediate A·Bᵀ (512 KiB) is over a 64 KiB limit, the
    // operands (4 KiB each) are not.
    // The path makes A·Bᵀ and C·Dᵀ (greedy would contract i and j first).
    let shapes = ["ai,bi,aj,bj->", "--shapes", "256x2,256x2,256x2,256x2", "--path", "[(0,1),(0,1),(0,1)]"];
    let run = |extra: &[&str]| {
        let mut args = vec!["einsum"];
        args.extend_from_slice(&shapes);
        args.extend_from_slice(extra);
        let o = cgx(&args);
        assert!(o.status.success(), "{extra:?}: {}", stderr(&o));
        String::from_utf8(o.stdout).unwrap()
    };
    let (plain, sliced) = (tmp("plain.npy"), tmp("sliced.npy"));
    let out = run(&["--json", "--grad", "-o", &plain]);
    assert!(out.contains("\"sliced_inds\":[],\"n_slices\":1,\"slicing_overhead\":1"), "{out}");
    let out = run(&["--json", "--grad", "--memory-limit", "64KiB", "-o", &sliced]);
    assert!(out.contains("\"n_slices\":256") && out.contains("\"gradient_check\":"), "{out}");
    // The reverse pass's estimate is reported, and the slicing made it fit the limit.
    let gradient_peak: u64 = out
        .split("\"gradient_peak_bytes\":")
        .nth(1)
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no gradient_peak_bytes in {out}"));
    assert!(gradient_peak > 0 && gradient_peak <= 64 << 10, "{out}");
    assert!(out.contains("\"sliced_inds\":[\"a\"]") || out.contains("\"sliced_inds\":[\"b\"]"), "{out}");
    let (want, got) = (load(&plain), load(&sliced));
    assert_eq!(want.0, got.0);
    assert!((want.1[0][0] - got.1[0][0]).abs() <= 1e-12 * want.1[0][0].abs(), "{want:?} vs {got:?}");
    // Explicit labels, shown with the path; bad ones.
    let out = run(&["--sliced-inds", "j,a", "--show-path"]);
    assert!(out.contains("sliced on j,a (512 slices), overhead"), "{out}");
    let mut args = vec!["einsum"];
    args.extend_from_slice(&shapes);
    for (extra, code, want) in [
        (&["--sliced-inds", "z"][..], 1, "cannot slice label `z`"),
        (&["--sliced-inds", "ab"], 2, "`ab` is not a label"),
        (&["--sliced-inds", "a", "--memory-limit", "20KiB"], 1, "one slice of `ai,bi,aj,bj->` sliced on `a`"),
    ] {
        let o = cgx(&[&args[..], extra].concat());
        assert_eq!(o.status.code(), Some(code), "{extra:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(want), "{extra:?}: {}", stderr(&o));
    }
}

#[test]
fn a_checkpointed_gradient_fits_the_limit_unsliced_with_the_plain_gradients() {
    // A chain whose four 128x128 intermediates (128 KiB each) sit between 128x4 operands:
    // the forward pass holds one at a time, the plain reverse pass all of them.
    let shapes = [
        "aA,bA,bB,cB,cC,dC,dD,eD,e,a->",
        "--shapes",
        "128x4,128x4,128x4,128x4,128x4,128x4,128x4,128x4,128,128",
        "--path",
        "[(0,1),(0,8),(0,7),(0,6),(0,5),(0,4),(0,3),(0,2),(0,1)]",
        "--grad",
        "--json",
    ];
    let run = |extra: &[&str]| cgx(&[&["einsum"][..], &shapes, extra].concat());
    let (plain, checkpointed) = (tmp("plain_grads.npz"), tmp("checkpointed_grads.npz"));
    let o = run(&["--memory-limit", "none", "--grad-out", &plain]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = run(&["--checkpoint", "--memory-limit", "600KiB", "--grad-out", &checkpointed]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8(o.stdout).unwrap();
    // Unsliced, some intermediates recomputed, the plan's peak within the limit.
    assert_eq!(json_field(&out, "n_slices"), Some(1.0), "{out}");
    let [k, n] = kept_of(&out);
    assert!(k < n, "nothing recomputed: {out}");
    let peak = json_field(&out, "gradient_peak_bytes").unwrap_or_else(|| panic!("{out}"));
    assert!(peak > 0.0 && peak <= f64::from(600 << 10), "{out}");
    let check = json_field(&out, "gradient_check").unwrap_or_else(|| panic!("{out}"));
    assert!(check <= 1e-12, "{out}");
    let (want, got) = (load_npz(&plain), load_npz(&checkpointed));
    assert_eq!(want.len(), 10);
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_close(g, w, &format!("gradient {i}"));
    }
    // A limit the recomputation cannot meet, one the forward pass alone cannot meet, and
    // --checkpoint without --grad.
    for (extra, code, want) in [
        (&["--checkpoint", "--memory-limit", "400KiB"][..], 1, "with every intermediate recomputed needs"),
        (&["--checkpoint", "--memory-limit", "64KiB"], 1, "does not fit the memory limit of 64 KiB unsliced"),
    ] {
        let o = run(extra);
        assert_eq!(o.status.code(), Some(code), "{extra:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(want), "{extra:?}: {}", stderr(&o));
    }
    let o = cgx(&["einsum", "ij,jk->ik", "--shapes", "2x2,2x2", "--checkpoint"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

/// The report's `"checkpoint_kept":[k,n]`.
fn kept_of(out: &str) -> [usize; 2] {
    let pair = out.split("\"checkpoint_kept\":[").nth(1).and_then(|r| r.split(']').next());
    let v: Vec<usize> = pair.unwrap_or_else(|| panic!("{out}")).split(',').filter_map(|x| x.parse().ok()).collect();
    assert_eq!(v.len(), 2, "{out}");
    [v[0], v[1]]
}

#[test]
fn paths_are_shown_and_taken_explicitly() {
    let o = cgx(&["einsum", "ij,jk,kl->il", "--shapes", "2x3,3x4,4x5", "--path", "[(1, 2), (0, 1)]", "--show-path"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("path: [(1, 2), (0, 1)]"));
    let o = cgx(&["einsum", "ij,jk,kl->il", "--shapes", "2x3,3x4,4x5", "--path", "[[0,1],[0,1]]", "--json"]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("\"path\":[[0,1],[0,1]]"));
    // Steps of one and of three operands, and the searches.
    for path in ["[(0,1,2)]", "[(2,),(1,0),(0,1)]", "optimal", "dp", "random-greedy", "auto"] {
        let o = cgx(&["einsum", "ij,jk,kl->il", "--shapes", "2x3,3x4,4x5", "--path", path, "--show-path"]);
        assert!(o.status.success(), "{path}: {}", stderr(&o));
    }
    let o = cgx(&["einsum", "ij,jk,kl->il", "--shapes", "2x3,3x4,4x5", "--path", "[(0,1,2)]", "--show-path"]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("path: [(0, 1, 2)]"));
    for (path, want) in [
        ("[(0,1),(0,2)]", "out of range"),
        ("[(0,1,3)]", "position 3 is out of range"),
        ("[(0,0),(0,1)]", "names position 0 twice"),
        ("[(),(0,1,2)]", "names no operand"),
        ("[(0,1)", "not a path"),
        ("opt-flops", "no stored OptFlops path"),
        ("fastest", "is not a path"),
    ] {
        let o = cgx(&["einsum", "ij,jk,kl->il", "--shapes", "2x3,3x4,4x5", "--path", path]);
        assert_ne!(o.status.code(), Some(0), "{path}");
        assert!(stderr(&o).contains(want), "{path}: {}", stderr(&o));
    }
}

#[test]
fn one_evaluation_by_default_and_best_of_n_on_request() {
    let run = |extra: &[&str]| {
        let mut args = vec!["einsum", "ij,jk->ik", "--shapes", "8x8,8x8", "--json"];
        args.extend_from_slice(extra);
        String::from_utf8(cgx(&args).stdout).unwrap()
    };
    let once = run(&[]);
    assert!(once.contains("\"repeat\":1") && once.contains("\"name\":\"eval (1 thread)\""), "{once}");
    let best = run(&["--repeat", "3"]);
    assert!(best.contains("\"repeat\":3") && best.contains("eval (best of 3, 1 thread)"), "{best}");
    assert_eq!(cgx(&["einsum", "ij->", "--shapes", "2x2", "--repeat", "0"]).status.code(), Some(2));
}

#[test]
fn grad_outputs_need_grad_and_help_says_what_the_seed_is() {
    assert_eq!(cgx(&["einsum", "ij->", "--shapes", "2x2", "--grad-out", "g.npz"]).status.code(), Some(2));
    let (a, b) = (data("mm_a.npy"), data("mm_b.npy"));
    for (cotangent, want) in [
        ("mm_a.npy", "mm_a.npy: the cotangent has shape [3, 4] but the output has shape [3, 2]"),
        ("cz_x.npy", "cz_x.npy: a complex128 cotangent for a float64 contraction"),
    ] {
        let o = cgx(&["einsum", "ij,jk->ik", &a, &b, "--grad", "--cotangent", &data(cotangent)]);
        assert_eq!(o.status.code(), Some(1), "{cotangent}");
        assert!(stderr(&o).contains(want) && stderr(&o).lines().count() == 1, "{}", stderr(&o));
    }
    let help = String::from_utf8(cgx(&["einsum", "--help"]).stdout).unwrap();
    assert!(help.contains("gradient of sum(output)") && help.contains("--cotangent"), "{help}");
}

#[test]
fn sizes_beyond_the_memory_limit_fail_with_exit_1_not_an_abort() {
    let inst = tmp("huge_instance.json");
    std::fs::write(&inst, r#"{"name": "huge", "format_string": "ij->", "shapes": [[1048576, 1048576]], "paths": {"opt_flops": {"path": []}}}"#).unwrap();
    for (args, want) in [
        (&["einsum", "i->", "--shapes", "1099511627776"][..], "operand 0 of shape [1099511627776] needs 8 TiB"),
        (&["einsum", "ij->", "--shapes", "1048576x1048576"], "operand 0 of shape [1048576, 1048576] needs 8 TiB"),
        (
            &["einsum", "i,j->ij", "--shapes", "1048576,1048576"],
            "the output of `i,j->ij` of shape [1048576, 1048576], held whole",
        ),
        (&["einsum", &inst], "operand 0 of shape [1048576, 1048576] needs 8 TiB"),
        (&["einsum", "i->", &data("huge_header.npy")], "huge_header.npy holds an array of shape [1099511627776]"),
        (&["einsum", "ij,jk->ik", "--shapes", "64x64,64x64", "--memory-limit", "1KiB"], "over the limit of 1 KiB"),
        (
            &["einsum", "ij,jk->ik", "--shapes", "64x64,64x64", "--grad", "--memory-limit", "100000"],
            "the gradient of `ij,jk->ik`",
        ),
        (&["bench", "dag", "--nodes", "1e10"], "a DAG of 10000000000 operations needs about 2.3 TiB"),
        (&["bench", "dag", "--nodes", "1e10", "--memory-limit", "none"], "does not fit one graph"),
        (&["bench", "dag", "--nodes", "1e8", "--memory-limit", "1GiB"], "needs about 23.8 GiB"),
    ] {
        let o = cgx(args);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", stderr(&o));
        let e = stderr(&o);
        assert!(e.starts_with("cgx: error:") && e.lines().count() == 1 && e.contains(want), "{args:?}: {e}");
    }
    // The limit can be raised or lifted, and a bad one is a usage error.
    let o = cgx(&["einsum", "ij,jk->ik", "--shapes", "64x64,64x64", "--grad", "--memory-limit", "none"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = cgx(&["einsum", "ij,jk->ik", "--shapes", "64x64,64x64", "--memory-limit", "1MiB", "--json"]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("\"memory_limit\":1048576"), "{}", stderr(&o));
    assert_eq!(cgx(&["einsum", "ij->", "--shapes", "2x2", "--memory-limit", "2 parsecs"]).status.code(), Some(2));
    assert_eq!(cgx(&["bench", "dag", "--memory-limit", "lots"]).status.code(), Some(2));
}

#[test]
fn under_ulimit_v_the_default_limit_follows_the_address_space() {
    // 4 GB of address space: the default limit becomes 2 GB, so a 3.2 GB result is refused
    // by the check (exit 1) instead of failing in the allocator (abort, exit 134).
    let script =
        format!("ulimit -v 4000000 && exec {} einsum i,j-\\>ij --shapes 20000,20000", env!("CARGO_BIN_EXE_cgx"));
    let o = Command::new("sh").args(["-c", &script]).output().expect("sh runs");
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(e.contains("the output of `i,j->ij`") && e.contains("over the limit of 1.9 GiB"), "{e}");
}

/// A ring of `n` matrices of bond 3 with a chord, as an expression and its shapes.
fn ring(n: usize) -> (String, String) {
    let letters: Vec<char> = ('a'..='z').chain('A'..='Z').collect();
    let mut terms: Vec<String> = (0..n).map(|i| format!("{}{}", letters[i], letters[(i + 1) % n])).collect();
    terms[0].push(letters[n]);
    terms[n / 2].push(letters[n]);
    let shapes: Vec<String> = terms.iter().map(|t| vec!["3"; t.len()].join("x")).collect();
    (terms.join(",") + "->", shapes.join(","))
}

#[test]
fn einsum_path_hyper_reports_its_search_and_draws_the_tree() {
    let (eq, shapes) = ring(16);
    let file = tmp("tree.svg");
    let o = cgx(&["einsum", &eq, "--shapes", &shapes, "--path", "hyper", "--max-trials", "8", "--plot", &file]);
    assert!(o.status.success(), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(e.contains("hyper: 8 trials"), "{e}");
    let svg = std::fs::read_to_string(&file).unwrap();
    // One circle per pairwise step, one square per operand.
    assert_eq!(svg.matches("<circle").count(), 15, "{svg}");
    assert!(svg.contains("16 operands, 15 steps"));
    // The budget options belong to --path hyper.
    let o = cgx(&["einsum", &eq, "--shapes", &shapes, "--max-time", "1"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("--path hyper"));
}

#[cfg(unix)]
#[test]
fn ctrl_c_ends_a_hyper_search_with_its_best_path_and_the_run_goes_on() {
    let (eq, shapes) = ring(40);
    let child = Command::new(env!("CARGO_BIN_EXE_cgx"))
        .args(["einsum", &eq, "--shapes", &shapes, "--path", "hyper", "--max-time", "120"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("cgx runs");
    // Let the search start, then send SIGINT as a terminal's Ctrl-C would.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let sent = Command::new("kill").args(["-INT", &child.id().to_string()]).status().expect("kill runs");
    assert!(sent.success());
    let o = child.wait_with_output().expect("cgx ends");
    let e = stderr(&o);
    assert!(o.status.success(), "{e}");
    assert!(e.contains("interrupted (Ctrl-C)"), "{e}");
    assert!(String::from_utf8_lossy(&o.stdout).contains("contraction steps"));
}

#[test]
fn a_path_cache_makes_the_second_run_search_nothing() {
    let (eq, shapes) = ring(20);
    let dir = tmp("path-cache");
    let run =
        || cgx(&["einsum", &eq, "--shapes", &shapes, "--path", "hyper", "--max-trials", "4", "--path-cache", &dir]);
    let first = run();
    assert!(first.status.success(), "{}", stderr(&first));
    assert!(stderr(&first).contains("hyper: 4 trials"), "{}", stderr(&first));
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
    let second = run();
    assert!(second.status.success(), "{}", stderr(&second));
    assert!(stderr(&second).contains("no search") && !stderr(&second).contains("trials"), "{}", stderr(&second));
    // The same contraction either way.
    let checksum =
        |o: &Output| String::from_utf8_lossy(&o.stdout).lines().find(|l| l.contains("checksum")).map(str::to_owned);
    assert_eq!(checksum(&first), checksum(&second));
}

/// The number after `"key":` in a JSON text.
fn json_field(text: &str, key: &str) -> Option<f64> {
    let at = text.find(&format!("\"{key}\":"))? + key.len() + 3;
    let end = text[at..].find([',', '}']).map_or(text.len(), |e| at + e);
    text[at..end].parse().ok()
}

#[test]
fn strip_exponent_gives_the_mantissa_and_exponent_of_numpys_result_and_gradients() {
    let (out, grads) = (tmp("se_out.npy"), tmp("se_grads.npz"));
    let (a, b) = (data("mm_a.npy"), data("mm_b.npy"));
    let args =
        ["einsum", "ij,jk->ik", &a, &b, "-o", &out, "--grad", "--grad-out", &grads, "--strip-exponent", "--json"];
    let o = cgx(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    let e = json_field(&text, "exponent").unwrap_or_else(|| panic!("{text}"));
    let (shape, m) = load(&out);
    let value = (shape, m.iter().map(|[re, im]| [re * 10f64.powf(e), im * 10f64.powf(e)]).collect());
    assert_close(&value, &load(&data("mm_out.npy")), "scaled result");
    // The gradients' mantissas, then their exponents.
    let got = load_npz(&grads);
    let want = load_npz(&data("mm_grads.npz"));
    assert_eq!(got.len(), want.len() + 1);
    let exponents = &got[want.len()].1;
    for (i, w) in want.iter().enumerate() {
        let s = 10f64.powf(exponents[i][0]);
        let g = (got[i].0.clone(), got[i].1.iter().map(|[re, im]| [re * s, im * s]).collect());
        assert_close(&g, w, &format!("scaled gradient {i}"));
    }
}

#[test]
fn strip_exponent_reports_a_result_past_the_range_of_f64() {
    // A chain of 400 random 8x8 matrices with entries in [0.5, 1.5): about 10^360.
    let labels: Vec<char> = (0..401).map(|i| char::from_u32(0x100 + i).unwrap()).collect();
    let terms: Vec<String> = (0..400).map(|i| format!("{}{}", labels[i], labels[i + 1])).collect();
    let expr = format!("{}->{}{}", terms.join(","), labels[0], labels[400]);
    let shapes = vec!["8x8"; 400].join(",");
    let o = cgx(&["einsum", &expr, "--shapes", &shapes, "--grad", "--strip-exponent", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(text.contains("\"checksum\":null"), "the plain result overflows: {text}");
    let e = json_field(&text, "exponent").unwrap();
    assert!(e > 308.0, "{e}");
    assert!(json_field(&text, "gradient_check").unwrap() < 1e-12, "{text}");
    // Without the flag the plain result left the range, so the scaled run happens anyway.
    let o = cgx(&["einsum", &expr, "--shapes", &shapes, "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let plain = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(json_field(&plain, "exponent"), Some(e), "{plain}");
    // A result in range reports no scaled run.
    let o = cgx(&["einsum", "ab,bc->ac", "--shapes", "2x3,3x4", "--json"]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("\"scaled\":null"));
}
