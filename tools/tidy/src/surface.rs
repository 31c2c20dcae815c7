//! The public surface check: `docs/API.md` lists exactly what each library crate exports.
//!
//! [`public_items`] reads a crate's surface from its source text: the items a crate root
//! declares `pub` at column 0 (`pub fn`, `pub struct`, `pub mod`, …), the names of its
//! `pub use` re-exports (`pub use x::{a, b as c}` gives `a` and `c`), the same inside
//! every `pub mod`'s file (as `module::name`), and `#[macro_export]` macros (as `name!`).
//! Items under `#[cfg(test)]`, `#[cfg(doctest)]` or `#[doc(hidden)]` are not surface; an
//! item under `#[cfg(feature = "f")]` carries its feature. [`api_listing_mismatches`]
//! compares them with the bullets under the crate's `## name` heading of the listing.

use std::collections::BTreeMap;

use crate::text::{code_of, ident, use_leaves};

/// One public item of a crate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PublicItem {
    /// Its path from the crate root: `Graph`, `eager::Recorder`, `define_id!`.
    pub path: String,
    /// The feature its declaration is gated on, if any.
    pub feature: Option<String>,
}

/// Keywords that may stand between `pub` and an item's kind.
const QUALIFIERS: &[&str] = &["unsafe", "async", "extern", "default", "\"C\"", "\"Rust\""];
/// The kinds of item a `pub` line declares.
const KINDS: &[&str] = &["fn", "struct", "enum", "trait", "type", "const", "static", "mod", "union", "macro"];

/// The public items of a crate, given its files by path relative to `src` (`lib.rs`,
/// `eager/mod.rs`), sorted by path.
pub fn public_items(files: &BTreeMap<String, String>) -> Vec<PublicItem> {
    let mut items = Vec::new();
    scan_module(files, "lib.rs", "", &mut items);
    for text in files.values() {
        let code = code_of(text);
        let mut exported = false;
        for line in code.lines().map(str::trim) {
            if line.starts_with("#[macro_export]") {
                exported = true;
            } else if let Some(rest) = line.strip_prefix("macro_rules!") {
                if exported {
                    items.push(PublicItem { path: format!("{}!", ident(rest.trim_start())), feature: None });
                }
                exported = false;
            } else if !line.starts_with("#[") && !line.is_empty() {
                exported = false;
            }
        }
    }
    items.sort_by(|a, b| a.path.cmp(&b.path));
    items
}

/// The folder a module file's submodules live in (`lib.rs` → ``, `a.rs` and `a/mod.rs` → `a/`).
fn folder_of(file: &str) -> String {
    match file.rsplit_once('/') {
        Some((dir, "mod.rs")) => format!("{dir}/"),
        _ if file == "lib.rs" || file == "main.rs" => String::new(),
        _ => format!("{}/", file.trim_end_matches(".rs")),
    }
}

/// Adds the public items declared at column 0 of `file` (module path `prefix`, `a::` or
/// empty), following its `pub mod`s into their files.
fn scan_module(files: &BTreeMap<String, String>, file: &str, prefix: &str, items: &mut Vec<PublicItem>) {
    let Some(text) = files.get(file) else { return };
    let code = code_of(text);
    let mut attrs: Vec<&str> = Vec::new();
    let mut lines = code.lines();
    while let Some(line) = lines.next() {
        if line.starts_with("#[") {
            attrs.push(line);
            continue;
        }
        let Some(rest) = line.strip_prefix("pub ") else {
            if !line.trim().is_empty() {
                attrs.clear();
            }
            continue;
        };
        let hidden =
            attrs.iter().any(|a| a.contains("cfg(test)") || a.contains("cfg(doctest)") || a.contains("doc(hidden)"));
        let feature = attrs.iter().filter(|a| a.contains("cfg")).find_map(|a| {
            let from = a.find("feature = \"")? + "feature = \"".len();
            Some(a[from..].split('"').next()?.to_string())
        });
        attrs.clear();
        if hidden {
            continue;
        }
        let item = |name: &str| PublicItem { path: format!("{prefix}{name}"), feature: feature.clone() };
        if let Some(tree) = rest.strip_prefix("use ") {
            let mut statement = tree.to_string();
            while !statement.contains(';') {
                let Some(next) = lines.next() else { break };
                statement.push_str(next);
            }
            items.extend(use_leaves(&statement).into_iter().filter(|(_, n)| n != "_").map(|(_, n)| item(&n)));
            continue;
        }
        let mut words = rest.split_whitespace().peekable();
        while let Some(word) = words.next() {
            let is_const_qualifier =
                word == "const" && words.peek().is_some_and(|n| *n == "fn" || QUALIFIERS.contains(n));
            if QUALIFIERS.contains(&word) || is_const_qualifier {
                continue;
            }
            if !KINDS.contains(&word) {
                break;
            }
            let mut next = words.next().unwrap_or("");
            if word == "static" && next == "mut" {
                next = words.next().unwrap_or("");
            }
            let name = ident(next);
            items.push(item(name));
            if word == "mod" && next.ends_with(';') {
                let folder = folder_of(file);
                let child = [format!("{folder}{name}.rs"), format!("{folder}{name}/mod.rs")]
                    .into_iter()
                    .find(|f| files.contains_key(f));
                if let Some(child) = child {
                    scan_module(files, &child, &format!("{prefix}{name}::"), items);
                }
            }
            break;
        }
    }
}

/// One bullet of the listing: `- `path` …: what it is for`.
struct Listed<'a> {
    line: usize,
    path: &'a str,
    text: &'a str,
}

/// The bullets under each `## crate` heading of `doc` (`### ` subheadings stay within it).
fn listing(doc: &str) -> BTreeMap<String, Vec<Listed<'_>>> {
    let mut sections: BTreeMap<String, Vec<Listed<'_>>> = BTreeMap::new();
    let mut current: Option<String> = None;
    for (i, line) in doc.lines().enumerate() {
        if let Some(heading) = line.strip_prefix("## ") {
            let name = heading.trim().trim_matches('`').to_string();
            sections.entry(name.clone()).or_default();
            current = Some(name);
        } else if let (Some(krate), Some(rest)) = (&current, line.strip_prefix("- `")) {
            if let Some((path, after)) = rest.split_once('`') {
                sections.entry(krate.clone()).or_default().push(Listed { line: i + 1, path, text: after });
            }
        }
    }
    sections
}

/// Where the listing `doc` (at `doc_name`) and the crate `krate`'s public `items`
/// disagree: an item not listed under `## krate`, a listed item that is not public, an
/// item listed twice, a bullet without a description, and a feature-gated item whose
/// bullet does not name its feature (``feature `f` ``).
pub fn api_listing_mismatches(doc_name: &str, doc: &str, krate: &str, items: &[PublicItem]) -> Vec<String> {
    let sections = listing(doc);
    let Some(listed) = sections.get(krate) else {
        return vec![format!("{doc_name}: no `## {krate}` section listing its public items")];
    };
    let mut findings = Vec::new();
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for l in listed {
        if let Some(first) = seen.insert(l.path, l.line) {
            findings
                .push(format!("{doc_name}:{}: `{}` is listed twice under {krate} (also line {first})", l.line, l.path));
        }
        match items.iter().find(|it| it.path == l.path) {
            None => findings.push(format!(
                "{doc_name}:{}: `{}` is listed under {krate} but {krate} does not export it",
                l.line, l.path
            )),
            Some(PublicItem { feature: Some(f), .. }) if !l.text.contains(&format!("feature `{f}`")) => findings
                .push(format!("{doc_name}:{}: `{}` is gated on a feature: say ``feature `{f}` ``", l.line, l.path)),
            Some(_) => {}
        }
        if !l.text.chars().any(char::is_alphabetic) {
            findings.push(format!("{doc_name}:{}: `{}` has no description", l.line, l.path));
        }
    }
    for it in items {
        if !seen.contains_key(it.path.as_str()) {
            findings.push(format!("{doc_name}: `{}` is public in {krate} but not listed under `## {krate}`", it.path));
        }
    }
    findings
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(n, t)| (n.to_string(), t.to_string())).collect()
    }

    fn paths(files: &BTreeMap<String, String>) -> Vec<String> {
        public_items(files).into_iter().map(|i| i.path).collect()
    }

    #[test]
    fn root_items_and_re_export_groups() {
        let lib = "//! Doc.\nmod a;\npub(crate) mod b;\npub use a::{A, B as Bee, c::{self, D}};\npub use b::{\n    E,\n    e,\n};\npub use x as _;\n\
                   pub fn f() {}\npub const fn g() {}\npub const N: usize = 1;\npub unsafe fn h() {}\npub static mut S: u8 = 0;\n\
                   pub struct T<X>(X);\npub(crate) fn hidden() {}\nimpl T<u8> {\n    pub fn method(&self) {}\n}\n";
        assert_eq!(paths(&files(&[("lib.rs", lib)])), ["A", "Bee", "D", "E", "N", "S", "T", "c", "e", "f", "g", "h"]);
    }

    #[test]
    fn public_modules_are_followed_into_their_files() {
        let f = files(&[
            ("lib.rs", "pub mod eager;\npub mod emit;\nmod private;\n"),
            ("eager/mod.rs", "mod rec;\npub use rec::{Recorder, Trace};\npub trait Executor {}\npub mod deep;\n"),
            ("eager/deep.rs", "pub enum Deep {}\n"),
            ("emit.rs", "pub fn linear() {}\nfn helper() {}\n"),
            ("private.rs", "pub fn not_surface() {}\n"),
        ]);
        assert_eq!(
            paths(&f),
            [
                "eager",
                "eager::Executor",
                "eager::Recorder",
                "eager::Trace",
                "eager::deep",
                "eager::deep::Deep",
                "emit",
                "emit::linear"
            ]
        );
    }

    #[test]
    fn features_tests_hidden_items_and_macros() {
        let f = files(&[
            (
                "lib.rs",
                "#[cfg(feature = \"testing\")]\npub mod testing;\n#[doc(hidden)]\npub mod __private {\n    pub use x::Y;\n}\n\
                 #[cfg(doctest)]\n#[doc = \"x\"]\npub struct Guide;\n#[cfg(test)]\npub fn helper() {}\n/// Doc.\n#[inline]\npub fn kept() {}\n",
            ),
            ("testing/mod.rs", "pub fn check() {}\n"),
            (
                "id.rs",
                "/// ```\n/// #[macro_export]\n/// macro_rules! not_this {}\n/// ```\n#[macro_export]\nmacro_rules! define_id {\n    () => {};\n}\nmacro_rules! local {}\n",
            ),
        ]);
        let items = public_items(&f);
        let got: Vec<(&str, Option<&str>)> = items.iter().map(|i| (i.path.as_str(), i.feature.as_deref())).collect();
        assert_eq!(got, [("define_id!", None), ("kept", None), ("testing", Some("testing")), ("testing::check", None)]);
    }

    #[test]
    fn the_listing_must_match_both_ways() {
        let items = [
            PublicItem { path: "Graph".into(), feature: None },
            PublicItem { path: "testing".into(), feature: Some("testing".into()) },
            PublicItem { path: "eager::Recorder".into(), feature: None },
        ];
        let good = "# API\n- `Other`: not a crate's item.\n## `tidu`\n- `Graph` (struct): a fragment.\n### `tidu::eager`\n\
                    - `eager::Recorder` (struct): records.\n- `testing` (module, feature `testing`): the checker.\n## other\n- `Gone`: x\n";
        assert_eq!(api_listing_mismatches("API.md", good, "tidu", &items), Vec::<String>::new());
        let bad =
            "## tidu\n- `Graph`\n- `Graph`: again.\n- `Gone` (fn): removed.\n- `testing` (module): the checker.\n";
        let found = api_listing_mismatches("API.md", bad, "tidu", &items);
        assert_eq!(found.len(), 5, "{found:#?}");
        for expected in [
            "API.md:2: `Graph` has no description",
            "API.md:3: `Graph` is listed twice",
            "API.md:4: `Gone` is listed under tidu but tidu does not export it",
            "API.md:5: `testing` is gated on a feature",
            "API.md: `eager::Recorder` is public in tidu but not listed",
        ] {
            assert!(found.iter().any(|f| f.starts_with(expected)), "{expected}: {found:#?}");
        }
        assert_eq!(api_listing_mismatches("API.md", good, "scalar", &items).len(), 1);
    }
}
