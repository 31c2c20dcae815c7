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
