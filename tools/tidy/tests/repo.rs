//! The repository's own tidiness: the checks of the `tidy` crate run over every crate,
//! the benches, the examples, the fuzz targets and the markdown documents, and
//! `docs/API.md` against the library crates' public items.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use tidy::{
    api_listing_mismatches, dead_links, file_cycles, files_under, layer_violations, missing_module_doc,
    outside_references, over_budget, parse_manifest, public_items,
};

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

/// The files of the crate whose sources are `src`, by their path relative to `src`
/// (`/`-separated). Binaries under `src/bin` are crates of their own and left out.
fn crate_files(src: &Path) -> BTreeMap<String, String> {
    files_under(src, ".rs")
        .into_iter()
        .map(|file| {
            let rel = file.strip_prefix(src).expect("under src");
            let rel: Vec<String> = rel.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
            (rel.join("/"), read(&file))
        })
        .filter(|(rel, _)| !rel.starts_with("bin/"))
        .collect()
}

#[test]
fn no_cycles_between_the_files_of_a_crate() {
    let root = root();
    let mut findings = Vec::new();
    for src in crate_sources(&root) {
        for finding in file_cycles(&crate_files(&src)) {
            findings.push(format!("{}: {finding}", src.display()));
        }
    }
    assert!(findings.is_empty(), "{}", findings.join("\n"));
}

/// The tiers of `docs/ARCHITECTURE.md` (*Layers*), by package name: 0 the engine, 4 the
/// programs nothing builds on.
const TIERS: &[(&str, u8)] = &[
    ("computegraph", 0),
    ("tidu", 1),
    ("scalar", 2),
    ("einsum", 2),
    ("spec-user", 2),
    ("workloads", 3),
    ("cgx", 4),
    ("benches", 4),
    ("examples", 4),
    ("computegraph-fuzz", 4),
    ("cgx-python", 4),
    ("tidy", 4),
];

/// Every manifest of the repository (the workspace's, `fuzz/` and `python/`): normal and
/// build dependencies point to a lower tier; dev-dependencies (computegraph's and tidu's on
/// `scalar`, for their integration and doc tests) anywhere below the top tier.
#[test]
fn dependencies_point_down_the_layers() {
    let root = root();
    let mut findings = Vec::new();
    let mut packages = 0;
    for toml in files_under(&root, "Cargo.toml") {
        let manifest = parse_manifest(&read(&toml));
        if manifest.package.is_empty() {
            continue; // the workspace's root manifest
        }
        packages += 1;
        let path = toml.strip_prefix(&root).unwrap_or(&toml).display().to_string();
        findings.extend(layer_violations(&path, &manifest, TIERS));
    }
    assert!(findings.is_empty(), "{}", findings.join("\n"));
    // Every tier's package was read (a moved manifest would otherwise go unchecked).
    assert_eq!(packages, TIERS.len());
}

/// `docs/API.md` lists every public item of each library crate (a `crates/NAME` folder
/// with a `src/lib.rs`) under `## NAME`, and nothing that is not one.
#[test]
fn the_api_listing_matches_the_public_items() {
    let root = root();
    let doc = read(&root.join("docs/API.md"));
    let mut findings = Vec::new();
    for lib in files_under(&root.join("crates"), "lib.rs") {
        let src = lib.parent().expect("src");
        if src.file_name().is_none_or(|n| n != "src") {
            continue;
        }
        let name = src.parent().and_then(Path::file_name).expect("a crate folder").to_string_lossy();
        findings.extend(api_listing_mismatches("docs/API.md", &doc, &name, &public_items(&crate_files(src))));
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
    for (dir, suffix) in [
        ("crates", ".rs"),
        ("crates", ".md"),
        ("crates", ".py"),
        ("benches", ".rs"),
        ("examples", ".rs"),
        ("fuzz/fuzz_targets", ".rs"),
        ("docs", ".md"),
        ("benches", ".py"),
        ("python", ".py"),
        ("python/src", ".rs"),
    ] {
        files.extend(files_under(&root.join(dir), suffix));
    }
    files.extend(files_under(&root, "Cargo.toml"));
    files.extend(["README.md", "justfile", ".ci/run", "python/pyproject.toml"].map(|f| root.join(f)));
    let findings: Vec<String> =
        files.iter().filter(|f| f.exists()).flat_map(|file| outside_references(file, &read(file))).collect();
    assert!(findings.is_empty(), "{}", findings.join("\n"));
}
