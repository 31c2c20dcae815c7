//! Repository checks that keep the code's shape as `docs/ARCHITECTURE.md` describes it.
//!
//! Each check is a function over file contents that returns its findings as strings (an
//! empty list passes), so the checks are tested on small inputs here and run on the
//! repository by `tests/repo.rs`:
//! - [`missing_module_doc`]: every Rust file opens with a `//!` module doc;
//! - [`file_cycles`]: no cycle between the top-level modules of one crate, counting
//!   `crate::module` paths in code (comments, doc links and `#[cfg(test)]` tails aside);
//! - [`over_budget`]: no source file is longer than [`LINE_BUDGET`] lines;
//! - [`dead_links`]: every relative link of a markdown file names a file or folder that
//!   exists;
//! - [`outside_references`]: no text cites documents that are not in the repository (the
//!   specification's files, the guide's); `docs/SPEC.md` summarizes what the code uses.
//!
//! Complexity: linear in the bytes read; the cycle search is Tarjan's algorithm, iterative.

#![forbid(unsafe_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

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

/// The code of a file without comments and without its `#[cfg(test)]` tail.
fn code_of(text: &str) -> String {
    let code = match text.find("#[cfg(test)]") {
        Some(at) => &text[..at],
        None => text,
    };
    code.lines()
        .map(|l| match l.find("//") {
            Some(at) => &l[..at],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The top-level modules named by `crate::name` paths in `text`, `use crate::{a::x, b}`
/// groups included.
fn referenced_modules(text: &str) -> BTreeSet<String> {
    let code = code_of(text);
    let mut found = BTreeSet::new();
    let ident = |s: &str| s.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect::<String>();
    let mut rest = code.as_str();
    while let Some(at) = rest.find("crate::") {
        let after = &rest[at + "crate::".len()..];
        if let Some(group) = after.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let item = item.trim();
                if item.contains("::") {
                    found.insert(ident(item));
                }
            }
        } else {
            let name = ident(after);
            if after[name.len()..].starts_with("::") {
                found.insert(name);
            }
        }
        rest = after;
    }
    found
}

/// Cycles between the top-level modules of one crate, given each module's name and the
/// text of its files (a module in a folder passes the text of all its files). Each
/// finding lists one strongly connected set of modules and the edges inside it.
pub fn file_cycles(modules: &BTreeMap<String, String>) -> Vec<String> {
    let names: Vec<&String> = modules.keys().collect();
    let index: BTreeMap<&str, usize> = names.iter().enumerate().map(|(i, n)| (n.as_str(), i)).collect();
    let edges: Vec<Vec<usize>> = names
        .iter()
        .map(|n| {
            referenced_modules(&modules[*n])
                .iter()
                .filter_map(|r| index.get(r.as_str()).copied())
                .filter(|&j| names[j] != *n)
                .collect()
        })
        .collect();
    let names = &names;
    strongly_connected(&edges)
        .into_iter()
        .filter(|c| c.len() > 1)
        .map(|c| {
            let inside: BTreeSet<usize> = c.iter().copied().collect();
            let arrows: Vec<String> = c
                .iter()
                .flat_map(|&i| {
                    edges[i]
                        .iter()
                        .filter(|j| inside.contains(j))
                        .map(move |&j| format!("{} -> {}", names[i], names[j]))
                })
                .collect();
            format!("cycle between files: {}", arrows.join(", "))
        })
        .collect()
}

/// Tarjan's strongly connected components, iterative (an explicit stack of frames).
fn strongly_connected(edges: &[Vec<usize>]) -> Vec<Vec<usize>> {
    const NONE: usize = usize::MAX;
    let n = edges.len();
    let (mut index, mut low, mut on_stack) = (vec![NONE; n], vec![0; n], vec![false; n]);
    let (mut stack, mut components, mut next) = (Vec::new(), Vec::new(), 0);
    for root in 0..n {
        if index[root] != NONE {
            continue;
        }
        let mut frames = vec![(root, 0usize)];
        index[root] = next;
        low[root] = next;
        next += 1;
        stack.push(root);
        on_stack[root] = true;
        while let Some(&mut (v, ref mut e)) = frames.last_mut() {
            if let Some(&w) = edges[v].get(*e) {
                *e += 1;
                if index[w] == NONE {
                    index[w] = next;
                    low[w] = next;
                    next += 1;
                    stack.push(w);
                    on_stack[w] = true;
                    frames.push((w, 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(index[w]);
                }
                continue;
            }
            frames.pop();
            if let Some(&(parent, _)) = frames.last() {
                low[parent] = low[parent].min(low[v]);
            }
            if low[v] == index[v] {
                let mut component = Vec::new();
                while let Some(w) = stack.pop() {
                    on_stack[w] = false;
                    component.push(w);
                    if w == v {
                        break;
                    }
                }
                components.push(component);
            }
        }
    }
    components
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

/// Ways of citing documents that live outside the repository.
pub const OUTSIDE_REFERENCES: &[&str] =
    &["seed 00", "Seed 00", "AD-TESTING", "BENCHMARKS.md", "STYLE.md", "shared/seeds", "shared/guide", "document 00"];

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

    fn modules(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(n, t)| (n.to_string(), t.to_string())).collect()
    }

    #[test]
    fn a_cycle_through_a_use_group_is_found() {
        let found = file_cycles(&modules(&[
            ("a", "use crate::{b::B, c};\n"),
            ("b", "fn f() { crate::c::g() }\n"),
            ("c", "use crate::a::A;\n"),
        ]));
        assert_eq!(found.len(), 1, "{found:?}");
        for arrow in ["a -> b", "b -> c", "c -> a"] {
            assert!(found[0].contains(arrow), "{found:?}");
        }
    }

    #[test]
    fn comments_doc_links_and_tests_do_not_count() {
        let found = file_cycles(&modules(&[
            ("a", "use crate::b::B;\n"),
            (
                "b",
                "//! See [`A`](crate::a::A).\nfn f() {} // crate::a::x\n#[cfg(test)]\nmod tests { use crate::a::A; }\n",
            ),
        ]));
        assert!(found.is_empty(), "{found:?}");
    }

    #[test]
    fn a_long_chain_without_a_cycle_passes() {
        let pairs: Vec<(String, String)> =
            (0..10_000).map(|i| (format!("m{i:05}"), format!("use crate::m{:05}::X;\n", i + 1))).collect();
        let map: BTreeMap<String, String> = pairs.into_iter().collect();
        assert!(file_cycles(&map).is_empty());
    }

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
    fn dead_links_are_reported() {
        let here = Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md");
        let text = "[ok](Cargo.toml) [web](https://x.invalid/a) [anchor](#top) [gone](no-such-file.md#x)";
        assert_eq!(dead_links(&here, text), vec![format!("{}: dead link `no-such-file.md#x`", here.display())]);
    }
}
