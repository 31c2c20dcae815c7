//! The repository's own tidiness: the checks of the `tidy` crate run over every crate,
//! the benches, the examples, the fuzz targets and the markdown documents.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use tidy::{dead_links, file_cycles, files_under, missing_module_doc, outside_references, over_budget};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("the repository root")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The library crates (folders with a `src`), by their folder.
fn crate_sources(root: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = files_under(&root.join("crates"), "Cargo.toml")
        .into_iter()
        .chain([root.join("benches/Cargo.toml"), root.join("tools/tidy/Cargo.toml")])
        .filter_map(|toml| Some(toml.parent()?.join("src")))
        .filter(|src| src.is_dir())
        .collect();
    dirs.sort();
    dirs
}

#[test]
fn every_rust_file_has_a_module_doc() {
    let root = root();
    let mut findings = Vec::new();
    for dir in ["crates", "benches", "examples", "fuzz/fuzz_targets", "tools"] {
        for file in files_under(&root.join(dir), ".rs") {
            findings.extend(missing_module_doc(&file, &read(&file)));
        }
    }
    assert!(findings.is_empty(), "{}", findings.join("\n"));
}

#[test]
fn no_cycles_between_the_files_of_a_crate() {
    let mut findings = Vec::new();
    for src in crate_sources(&root()) {
        // One entry per top-level module: a file, or a folder's files together.
        let mut modules: BTreeMap<String, String> = BTreeMap::new();
        for file in files_under(&src, ".rs") {
            let rel = file.strip_prefix(&src).expect("under src");
            let top = rel.components().next().expect("a file").as_os_str().to_string_lossy();
            let name = top.trim_end_matches(".rs").to_string();
            if name == "lib" || name == "main" {
                continue;
            }
            modules.entry(name).or_default().push_str(&read(&file));
        }
        findings.extend(file_cycles(&modules).into_iter().map(|f| format!("{}: {f}", src.display())));
    }
    assert!(findings.is_empty(), "{}", findings.join("\n"));
}

#[test]
fn source_files_stay_within_the_line_budget() {
    let mut findings = Vec::new();
    for src in crate_sources(&root()) {
        for file in files_under(&src, ".rs") {
            findings.extend(over_budget(&file, &read(&file)));
        }
    }
    assert!(findings.is_empty(), "{}", findings.join("\n"));
}

#[test]
fn markdown_links_resolve() {
    let root = root();
    let mut docs = files_under(&root.join("docs"), ".md");
    docs.extend(files_under(&root.join("crates"), ".md"));
    docs.push(root.join("README.md"));
    let findings: Vec<String> = docs.iter().flat_map(|d| dead_links(d, &read(d))).collect();
    assert!(findings.is_empty(), "{}", findings.join("\n"));
}

#[test]
fn the_repository_cites_only_itself() {
    let root = root();
    let mut files = Vec::new();
    for (dir, suffix) in
        [("crates", ".rs"), ("benches", ".rs"), ("examples", ".rs"), ("fuzz/fuzz_targets", ".rs"), ("docs", ".md")]
    {
        files.extend(files_under(&root.join(dir), suffix));
    }
    files.extend(files_under(&root.join("benches"), ".py"));
    files.extend(files_under(&root.join("python"), ".py"));
    files.extend(["README.md", "justfile", ".ci/run"].map(|f| root.join(f)));
    let findings: Vec<String> =
        files.iter().filter(|f| f.exists()).flat_map(|f| outside_references(f, &read(f))).collect();
    assert!(findings.is_empty(), "{}", findings.join("\n"));
}
