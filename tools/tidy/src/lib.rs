//! Repository checks that keep the code's shape as `docs/ARCHITECTURE.md` describes it.
//!
//! Each check is a function over file contents that returns its findings as strings (an
//! empty list passes), so the checks are tested on small inputs here and run on the
//! repository by `tests/repo.rs`:
//! - [`missing_module_doc`]: every Rust file opens with a `//!` module doc;
//! - [`file_cycles`]: no cycle between any two files of one crate, following `crate::`,
//!   `super::` and submodule paths and `use` groups through re-exports (comments, doc
//!   links and `#[cfg(test)]` items aside; see the `cycles` module);
//! - [`over_budget`]: no source file is longer than [`LINE_BUDGET`] lines;
//! - [`dead_links`]: every relative link of a markdown file names a file or folder that
//!   exists;
//! - [`outside_references`]: no text cites documents or paths that are not in the
//!   repository (the specification's files, the guide's, a sibling `../shared` folder);
//!   `docs/SPEC.md` summarizes what the code uses;
//! - [`public_items`] and [`api_listing_mismatches`]: `docs/API.md` lists every public
//!   item of each library crate, and nothing else;
//! - [`parse_manifest`] and [`layer_violations`]: every dependency between the
//!   repository's packages points to a lower tier of `docs/ARCHITECTURE.md`'s *Layers*
//!   (dev-dependencies may point up, not to the top tier; see the `layers` module).
//!
//! Complexity: linear in the bytes read; the cycle search is Tarjan's algorithm, iterative.

#![forbid(unsafe_code)]

mod cycles;
mod layers;
mod surface;
mod text;

use std::path::{Path, PathBuf};

pub use cycles::file_cycles;
pub use layers::{DepKind, Manifest, layer_violations, parse_manifest};
pub use surface::{PublicItem, api_listing_mismatches, public_items};

/// Most lines a library source file may have; a longer one is split by concern.
pub const LINE_BUDGET: usize = 1200;

/// `Some(finding)` when `text` does not start with a `//!` module doc.
pub fn missing_module_doc(path: &Path, text: &str) -> Option<String> {
    (!text.trim_start_matches('\u{feff}').starts_with("//!"))
        .then(|| format!("{}: no `//!` module doc", path.display()))
}

/// `Some(finding)` when `text` has more than [`LINE_BUDGET`] lines.
pub fn over_budget(path: &Path, text: &str) -> Option<String> {
    let lines = text.lines().count();
    (lines > LINE_BUDGET).then(|| format!("{}: {lines} lines, over the budget of {LINE_BUDGET}", path.display()))
}

/// Relative links of the markdown file `path` (text `text`) whose target does not exist.
/// Links with a scheme (`https:`, `mailto:`) and pure anchors (`#section`) are not checked.
pub fn dead_links(path: &Path, text: &str) -> Vec<String> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut dead = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let end = after.find(')').unwrap_or(after.len());
        let target = after[..end].split_whitespace().next().unwrap_or("");
        let file = target.split('#').next().unwrap_or("");
        if !file.is_empty() && !file.contains(':') && !dir.join(file).exists() {
            dead.push(format!("{}: dead link `{target}`", path.display()));
        }
        rest = &after[end.min(after.len())..];
    }
    dead
}

/// Ways of citing documents or paths that live outside the repository: the
/// specification's and the guide's files, and the folders beside the repository (data
/// files are in the repository: the einsum instances in `crates/einsum/tests/data/`).
pub const OUTSIDE_REFERENCES: &[&str] = &[
    "seed 00",
    "Seed 00",
    "AD-TESTING",
    "BENCHMARKS.md",
    "STYLE.md",
    "shared/seeds",
    "shared/guide",
    "document 00",
    "../shared",
    "/work/",
    "~/shared",
];

/// Lines of `text` that cite a document outside the repository ([`OUTSIDE_REFERENCES`]).
pub fn outside_references(path: &Path, text: &str) -> Vec<String> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| OUTSIDE_REFERENCES.iter().any(|r| line.contains(r)))
        .map(|(i, line)| {
            format!("{}:{}: cites a document outside the repository: {}", path.display(), i + 1, line.trim())
        })
        .collect()
}

/// The files under `dir` (recursively) whose name ends in `suffix`, sorted; folders named
/// `target` or starting with `.` are skipped.
pub fn files_under(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if path.is_dir() {
                if name != "target" && !name.starts_with('.') {
                    pending.push(path);
                }
            } else if name.ends_with(suffix) {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_docs_and_budget() {
        assert!(missing_module_doc(Path::new("x.rs"), "//! Doc.\nfn f() {}").is_none());
        assert!(missing_module_doc(Path::new("x.rs"), "/// Item doc.\nfn f() {}").is_some());
        let long = "x\n".repeat(LINE_BUDGET + 1);
        assert!(over_budget(Path::new("x.rs"), &long).is_some());
        assert!(over_budget(Path::new("x.rs"), &long[2..]).is_none());
    }

    #[test]
    fn outside_references_are_reported_with_their_line() {
        let text = "//! Fine.\n//! As seed 000 §IV says.\n//! See `docs/SPEC.md` §4.4.\n";
        let found = outside_references(Path::new("x.rs"), text);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].starts_with("x.rs:2:"), "{found:?}");
    }

    #[test]
    fn paths_outside_the_repository_are_outside_references() {
        let text = "cargo run -- ../shared/data/einsum/a.json\nsee /work/shared/x\ncrates/einsum/tests/data/a.json\n~/shared/b\n";
        let lines: Vec<String> = outside_references(Path::new("x.md"), text)
            .iter()
            .map(|f| f.split(':').take(2).collect::<Vec<_>>().join(":"))
            .collect();
        assert_eq!(lines, ["x.md:1", "x.md:2", "x.md:4"]);
    }

    #[test]
    fn dead_links_are_reported() {
        let here = Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md");
        let text = "[ok](Cargo.toml) [web](https://x.invalid/a) [anchor](#top) [gone](no-such-file.md#x)";
        assert_eq!(dead_links(&here, text), vec![format!("{}: dead link `no-such-file.md#x`", here.display())]);
    }
}
