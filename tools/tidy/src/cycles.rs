//! The cycle check: no cycle between any two files of one crate.
//!
//! Each file is a module: `lib.rs` and `main.rs` the crate root, `a.rs` and `a/mod.rs` the
//! module `a`, `a/b.rs` the module `a::b`. A file depends on the file of every module its
//! code names:
//! - `crate::a::…` paths, `use crate::a;` and `use crate::{a, b::C}` groups;
//! - `super::` paths (`super::super::` too) and `self::` paths, resolved from the file's
//!   own module;
//! - paths through the file's submodules (`recorder::Node` in `eager/mod.rs`).
//!
//! A path leads to the deepest module file it names; where the next name is one that
//! module re-exports (`pub use b::C;`), it leads on to the module that defines it, so
//! `use crate::C` depends on `b.rs`, not on `lib.rs`. Declaring a submodule (`mod b;`)
//! and re-exporting its items are not dependencies (a facade points at nothing), unless
//! the file's own code uses a name it re-exports. Comments, doc links and `#[cfg(test)]`
//! items do not count.

use std::collections::{BTreeMap, BTreeSet};

use crate::text::{code_of, has_word, ident, is_ident_char, path_at, use_leaves};

/// A module's path from the crate root (empty for the root).
type ModPath = Vec<String>;

/// The module a file (path relative to `src`, `/`-separated) defines.
fn module_of(file: &str) -> ModPath {
    let stem = file.strip_suffix(".rs").unwrap_or(file);
    let mut parts: ModPath = stem.split('/').map(String::from).collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    if parts.len() == 1 && (parts[0] == "lib" || parts[0] == "main") {
        parts.clear();
    }
    parts
}

/// What one file's code names.
#[derive(Default)]
struct Scan {
    /// The crate paths written in the file's code, re-exports aside.
    named: Vec<ModPath>,
    /// The names the file re-exports and the crate paths they stand for.
    reexports: BTreeMap<String, ModPath>,
    /// The `#[macro_export]` macros it defines (they are named from the crate root).
    macros: Vec<String>,
}

/// `path` as written in the file of module `here` (`crate::a::B`, `super::B`,
/// `child::B`), from the crate root; `None` for another crate's path.
fn absolute(path: &[String], here: &ModPath, modules: &BTreeSet<ModPath>) -> Option<ModPath> {
    let first = path.first()?;
    let abs: ModPath = match first.as_str() {
        "crate" => path[1..].to_vec(),
        "self" => here.iter().chain(&path[1..]).cloned().collect(),
        "super" => {
            let ups = path.iter().take_while(|s| *s == "super").count();
            here[..here.len().saturating_sub(ups)].iter().chain(&path[ups..]).cloned().collect()
        }
        _ => {
            let child: ModPath = here.iter().chain([first]).cloned().collect();
            if !modules.contains(&child) {
                return None;
            }
            here.iter().chain(path).cloned().collect()
        }
    };
    Some(abs)
}

/// Whether a trimmed line starts a re-export (`pub use`, `pub(crate) use`, …).
fn starts_reexport(line: &str) -> Option<&str> {
    let rest = line.strip_prefix("pub")?;
    let rest = match rest.strip_prefix('(') {
        Some(r) => &r[r.find(')')? + 1..],
        None => rest,
    };
    rest.strip_prefix(" use ")
}

/// Whether a trimmed line declares a submodule or is an attribute: text that names no
/// item for the re-export check.
fn is_declaration(line: &str) -> bool {
    let l = line.trim_start_matches("pub(crate) ").trim_start_matches("pub ");
    line.starts_with('#') || (l.starts_with("mod ") && l.ends_with(';'))
}

/// Scans the file of module `here`.
fn scan(text: &str, here: &ModPath, modules: &BTreeSet<ModPath>) -> Scan {
    let code = code_of(text);
    let mut out = Scan::default();
    let mut rest = String::with_capacity(code.len());
    let mut lines = code.lines();
    let mut exported = false;
    while let Some(line) = lines.next() {
        let trimmed = line.trim();
        if let Some(name) = trimmed.strip_prefix("macro_rules!").filter(|_| exported) {
            out.macros.push(ident(name.trim_start()).to_string());
        }
        exported = trimmed.starts_with("#[macro_export]") || (exported && trimmed.starts_with("#["));
        if let Some(tree) = starts_reexport(trimmed) {
            let mut statement = tree.to_string();
            while !statement.contains(';') {
                let Some(next) = lines.next() else { break };
                statement.push_str(next);
            }
            for (path, name) in use_leaves(&statement) {
                if let Some(abs) = absolute(&path, here, modules).filter(|_| name != "_" && name != "*") {
                    out.reexports.insert(name, abs);
                }
            }
        } else if !is_declaration(trimmed) {
            rest.push_str(line);
            rest.push('\n');
        }
    }
    let mut k = 0;
    while let Some(c) = rest[k..].chars().next() {
        let before = rest[..k].chars().next_back();
        if !is_ident_char(c) || before.is_some_and(|b| is_ident_char(b) || b == ':') {
            k += c.len_utf8();
            continue;
        }
        let name = ident(&rest[k..]);
        let after = &rest[k + name.len()..];
        let child = || modules.contains(&here.iter().cloned().chain([name.to_string()]).collect::<ModPath>());
        let tail = after.strip_prefix("::").filter(|_| matches!(name, "crate" | "super" | "self") || child());
        for (path, _) in tail.map(|t| use_leaves(&format!("{name}::{}", path_at(t)))).unwrap_or_default() {
            out.named.extend(absolute(&path, here, modules));
        }
        k += name.len();
    }
    for (name, abs) in &out.reexports {
        if has_word(&rest, name) {
            out.named.push(abs.clone());
        }
    }
    out
}

/// The crate's modules and what each file names.
struct Crate {
    modules: BTreeSet<ModPath>,
    scans: BTreeMap<ModPath, Scan>,
    /// Each `#[macro_export]` macro and the module that defines it.
    macros: BTreeMap<String, ModPath>,
}

impl Crate {
    /// The module whose file defines what `path` (from the crate root) names.
    fn resolve(&self, path: &[String], depth: usize) -> ModPath {
        let mut here = ModPath::new();
        for (i, name) in path.iter().enumerate() {
            let mut next = here.clone();
            next.push(name.clone());
            if self.modules.contains(&next) {
                here = next;
                continue;
            }
            if let Some(source) = self.scans.get(&here).and_then(|s| s.reexports.get(name)).filter(|_| depth < 16) {
                let onward: Vec<String> = source.iter().chain(&path[i + 1..]).cloned().collect();
                return self.resolve(&onward, depth + 1);
            }
            if let Some(module) = self.macros.get(name).filter(|_| here.is_empty()) {
                return module.clone();
            }
            break;
        }
        here
    }
}

/// Cycles between the files of one crate, given each file's path relative to `src`
/// (`lib.rs`, `eager/mod.rs`, `eager/recorder.rs`) and its text. Each finding lists one
/// strongly connected set of files and the dependencies inside it.
pub fn file_cycles(files: &BTreeMap<String, String>) -> Vec<String> {
    let names: Vec<&String> = files.keys().collect();
    let module_paths: Vec<ModPath> = names.iter().map(|f| module_of(f)).collect();
    let modules: BTreeSet<ModPath> = module_paths.iter().cloned().collect();
    let index: BTreeMap<&ModPath, usize> = module_paths.iter().enumerate().map(|(i, m)| (m, i)).collect();
    let scans: BTreeMap<ModPath, Scan> =
        names.iter().zip(&module_paths).map(|(f, m)| (m.clone(), scan(&files[*f], m, &modules))).collect();
    let macros = scans.iter().flat_map(|(m, s)| s.macros.iter().map(move |name| (name.clone(), m.clone()))).collect();
    let krate = Crate { modules, scans, macros };
    let edges: Vec<Vec<usize>> = module_paths
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let targets: BTreeSet<usize> = krate.scans[m]
                .named
                .iter()
                .filter_map(|p| index.get(&krate.resolve(p, 0)).copied())
                .filter(|&j| j != i)
                .collect();
            targets.into_iter().collect()
        })
        .collect();
    let names = &names;
    strongly_connected(&edges)
        .into_iter()
        .filter(|c| c.len() > 1)
        .map(|mut c| {
            c.sort_unstable();
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

#[cfg(test)]
mod tests {
    use super::*;

    fn cycles(pairs: &[(&str, &str)]) -> Vec<String> {
        file_cycles(&pairs.iter().map(|(n, t)| (n.to_string(), t.to_string())).collect())
    }

    /// Asserts exactly one cycle, containing each arrow of `arrows`.
    fn assert_cycle(found: &[String], arrows: &[&str]) {
        assert_eq!(found.len(), 1, "{found:?}");
        for arrow in arrows {
            assert!(found[0].contains(arrow), "{arrow} not in {found:?}");
        }
    }

    #[test]
    fn crate_paths_in_code() {
        let found = cycles(&[
            ("lib.rs", "mod a;\nmod b;\n"),
            ("a.rs", "fn f() { crate::b::g() }\n"),
            ("b.rs", "fn g() -> crate::a::A { todo!() }\n"),
        ]);
        assert_cycle(&found, &["a.rs -> b.rs", "b.rs -> a.rs"]);
    }

    #[test]
    fn use_of_a_module_itself() {
        let found = cycles(&[("a.rs", "use crate::b;\nfn f() { b::g() }\n"), ("b.rs", "use crate::a;\n")]);
        assert_cycle(&found, &["a.rs -> b.rs", "b.rs -> a.rs"]);
    }

    #[test]
    fn use_groups_with_modules_and_items() {
        let a = ("a.rs", "use crate::{b::B, c};\n");
        let b = ("b.rs", "use crate::{\n    c::{self, C},\n};\n");
        assert!(cycles(&[a, b, ("c.rs", "use crate::{d};\n"), ("d.rs", "")]).is_empty());
        let found = cycles(&[a, b, ("c.rs", "use crate::{d, a};\n"), ("d.rs", "")]);
        assert_cycle(&found, &["a.rs -> b.rs", "a.rs -> c.rs", "b.rs -> c.rs", "c.rs -> a.rs"]);
    }

    #[test]
    fn super_paths_between_sibling_files() {
        let found = cycles(&[
            ("testing/mod.rs", "mod case;\nmod run;\n"),
            ("testing/run.rs", "use super::case::{Check, Tolerance};\n"),
            ("testing/case.rs", "fn f() { super::run::go() }\n"),
        ]);
        assert_cycle(&found, &["testing/case.rs -> testing/run.rs", "testing/run.rs -> testing/case.rs"]);
    }

    #[test]
    fn super_super_and_self_paths() {
        let found = cycles(&[
            ("a/b/c.rs", "use super::super::d::D;\n"),
            ("a/d.rs", "fn f() { self::g(); crate::a::b::c::h() }\n"),
            ("a/mod.rs", "mod b;\nmod d;\n"),
            ("a/b/mod.rs", "mod c;\n"),
        ]);
        assert_cycle(&found, &["a/b/c.rs -> a/d.rs", "a/d.rs -> a/b/c.rs"]);
    }

    #[test]
    fn a_folder_module_and_its_submodule_files() {
        // mod.rs uses its child by a relative path; the child reads the parent by `super`.
        let found = cycles(&[
            ("eager/mod.rs", "mod recorder;\npub struct Input;\nfn f(n: recorder::Node) {}\n"),
            ("eager/recorder.rs", "use super::Input;\npub struct Node;\n"),
        ]);
        assert_cycle(&found, &["eager/mod.rs -> eager/recorder.rs", "eager/recorder.rs -> eager/mod.rs"]);
    }

    #[test]
    fn a_submodule_file_and_a_top_level_file() {
        let found = cycles(&[
            ("api.rs", "use crate::testing::case::Case;\n"),
            ("testing/mod.rs", "mod case;\n"),
            ("testing/case.rs", "use crate::api::grad;\n"),
        ]);
        assert_cycle(&found, &["api.rs -> testing/case.rs", "testing/case.rs -> api.rs"]);
    }

    #[test]
    fn re_exports_lead_to_the_defining_file() {
        // `crate::B` is `b.rs`'s, not `lib.rs`'s: the two files need each other.
        let lib = "mod a;\nmod b;\npub use a::A;\npub use b::{B as Bee, C};\n";
        let found = cycles(&[
            ("lib.rs", lib),
            ("a.rs", "use crate::Bee;\npub struct A;\n"),
            ("b.rs", "use crate::A;\npub struct B;\n"),
        ]);
        assert_cycle(&found, &["a.rs -> b.rs", "b.rs -> a.rs"]);
    }

    #[test]
    fn exported_macros_lead_to_their_file() {
        let id = "#[macro_export]\nmacro_rules! define_id {\n    () => {};\n}\nfn f() { crate::graph::g() }\n";
        let found =
            cycles(&[("lib.rs", "mod graph;\nmod id;\n"), ("id.rs", id), ("graph.rs", "crate::define_id!();\n")]);
        assert_cycle(&found, &["graph.rs -> id.rs", "id.rs -> graph.rs"]);
    }

    #[test]
    fn a_facade_is_no_dependency_unless_it_uses_what_it_re_exports() {
        let facade = "mod recorder;\npub use recorder::Trace;\npub struct Input;\n";
        let child = ("eager/recorder.rs", "use super::Input;\npub struct Trace;\n");
        assert!(cycles(&[("eager/mod.rs", facade), child]).is_empty());
        let user = "mod recorder;\npub use recorder::Trace;\npub struct Input { t: Trace }\n";
        assert_cycle(&cycles(&[("eager/mod.rs", user), child]), &["eager/mod.rs -> eager/recorder.rs"]);
        // The root re-exports every module's items: modules naming `crate::X` do not loop.
        let lib = "mod a;\nmod b;\npub use a::A;\npub use b::B;\n";
        assert!(
            cycles(&[("lib.rs", lib), ("a.rs", "use crate::B;\npub struct A;\n"), ("b.rs", "pub struct B;\n")])
                .is_empty()
        );
    }

    #[test]
    fn comments_doc_links_tests_and_other_crates_do_not_count() {
        let found = cycles(&[
            ("a.rs", "use crate::b::B;\n"),
            (
                "b.rs",
                "//! See [`A`](crate::a::A).\nfn f() {} // crate::a::x\nuse other::a::A;\nfn g() { my_crate::a::f() }\n#[cfg(test)]\nmod tests { use crate::a::A; }\n",
            ),
        ]);
        assert!(found.is_empty(), "{found:?}");
        // A test-only line in the middle does not hide what follows it.
        let found = cycles(&[("a.rs", "use crate::b::B;\n"), ("b.rs", "#[cfg(test)]\nmod cases;\nuse crate::a::A;\n")]);
        assert_cycle(&found, &["b.rs -> a.rs"]);
    }

    #[test]
    fn a_long_chain_without_a_cycle_passes() {
        let files: BTreeMap<String, String> =
            (0..10_000).map(|i| (format!("m{i:05}.rs"), format!("use crate::m{:05}::X;\n", i + 1))).collect();
        assert!(file_cycles(&files).is_empty());
    }
}
