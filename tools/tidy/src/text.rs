//! Text helpers the scanners share: a file's code without comments and test code, Rust
//! identifiers, the path written after a `crate::`, and the leaves of a `use` tree.
//!
//! These are text scans, not a parser: they assume rustfmt's layout (items of a file at
//! column 0, one statement per line or a `{ … }` group spread over lines).

/// Whether `c` can be part of a Rust identifier.
pub(crate) fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The identifier `s` starts with (empty when it starts with something else).
pub(crate) fn ident(s: &str) -> &str {
    let end = s.find(|c: char| !is_ident_char(c)).unwrap_or(s.len());
    &s[..end]
}

/// Whether `word` occurs in `text` as a whole identifier.
pub(crate) fn has_word(text: &str, word: &str) -> bool {
    text.match_indices(word).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + word.len()..].chars().next();
        !before.is_some_and(is_ident_char) && !after.is_some_and(is_ident_char)
    })
}

/// The net count of `{` over `}` in `line`.
fn brace_depth(line: &str) -> i64 {
    line.chars().map(|c| (c == '{') as i64 - (c == '}') as i64).sum()
}

/// The code of a file without `//` comments (doc comments included) and without its
/// test-only items: each item under `#[cfg(test)]` is dropped up to its `;` or the brace
/// that closes it (a `mod tests { … }`, a `mod cases;`, a test helper in an `impl`).
pub(crate) fn code_of(text: &str) -> String {
    let lines: Vec<&str> = text
        .lines()
        .map(|l| match l.find("//") {
            Some(at) => &l[..at],
            None => l,
        })
        .collect();
    let mut kept = Vec::with_capacity(lines.len());
    let mut i = 0;
    while i < lines.len() {
        let Some(rest) = lines[i].trim_start().strip_prefix("#[cfg(test)]") else {
            kept.push(lines[i]);
            i += 1;
            continue;
        };
        // The item: the rest of this line, or the next line that is not an attribute.
        let mut j = i;
        let mut first = rest;
        while first.trim().is_empty() || first.trim_start().starts_with("#[") {
            j += 1;
            match lines.get(j) {
                Some(l) => first = l,
                None => break,
            }
        }
        // Skip through the item's `;` or its closing brace.
        let mut depth = 0;
        let mut opened = false;
        while j < lines.len() {
            let l = if j == i { rest } else { lines[j] };
            depth += brace_depth(l);
            opened |= l.contains('{');
            j += 1;
            if (opened && depth <= 0) || (!opened && l.trim_end().ends_with(';')) {
                break;
            }
        }
        i = j;
    }
    kept.join("\n")
}

/// The path written at the start of `s` (just after a `crate::`): identifiers joined by
/// `::`, ending in an identifier or in a `{ … }` group taken whole.
pub(crate) fn path_at(s: &str) -> &str {
    let mut end = 0;
    loop {
        let rest = &s[end..];
        if rest.starts_with('{') {
            let mut depth = 0;
            for (k, c) in rest.char_indices() {
                depth += (c == '{') as i64 - (c == '}') as i64;
                if depth == 0 {
                    return &s[..end + k + 1];
                }
            }
            return s;
        }
        let name = ident(rest);
        if name.is_empty() && !rest.starts_with('*') {
            return &s[..end];
        }
        end += name.len().max(rest.starts_with('*') as usize);
        if s[end..].starts_with("::") {
            end += 2;
        } else {
            return &s[..end];
        }
    }
}

/// Splits `s` at the commas outside braces.
fn split_top(s: &str) -> Vec<&str> {
    let (mut parts, mut depth, mut from) = (Vec::new(), 0i64, 0);
    for (k, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&s[from..k]);
                from = k + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[from..]);
    parts
}

/// The leaves of a `use` tree (`a::{b::C, d as e, self, f::*}`), each as its full path
/// and the name it is known by (`C`, `e`, `a`, `*`).
pub(crate) fn use_leaves(tree: &str) -> Vec<(Vec<String>, String)> {
    let mut out = Vec::new();
    leaves_into(&[], tree, &mut out);
    out
}

fn leaves_into(prefix: &[String], tree: &str, out: &mut Vec<(Vec<String>, String)>) {
    let tree = tree.trim().trim_end_matches(';').trim();
    let segments = |p: &str| -> Vec<String> {
        prefix.iter().cloned().chain(p.split("::").map(str::trim).filter(|s| !s.is_empty()).map(String::from)).collect()
    };
    if let Some(open) = tree.find('{') {
        let path = segments(&tree[..open]);
        let close = tree.rfind('}').filter(|&c| c > open).unwrap_or(tree.len());
        for part in split_top(&tree[open + 1..close]) {
            match part.trim() {
                "" => {}
                "self" => {
                    if let Some(last) = path.last() {
                        out.push((path.clone(), last.clone()));
                    }
                }
                part => leaves_into(&path, part, out),
            }
        }
        return;
    }
    let (path, alias) = match tree.split_once(" as ") {
        Some((p, a)) => (p, Some(a.trim().to_string())),
        None => (tree, None),
    };
    let path = segments(path);
    if let Some(name) = alias.or_else(|| path.last().cloned()) {
        out.push((path, name));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaves(tree: &str) -> Vec<String> {
        use_leaves(tree).into_iter().map(|(p, n)| format!("{} as {n}", p.join("::"))).collect()
    }

    #[test]
    fn use_trees_give_their_leaves() {
        assert_eq!(leaves("a::B"), ["a::B as B"]);
        assert_eq!(
            leaves("a::{b::C, d as e, self, f::{g, h::*}}"),
            ["a::b::C as C", "a::d as e", "a as a", "a::f::g as g", "a::f::h::* as *"]
        );
        assert_eq!(leaves("{\n    x::Y,\n    z,\n};"), ["x::Y as Y", "z as z"]);
    }

    #[test]
    fn paths_end_where_the_path_ends() {
        assert_eq!(path_at("a::b::f(x)"), "a::b::f");
        assert_eq!(path_at("{a::X, b::{c, d}};\nfn f() {}"), "{a::X, b::{c, d}}");
        assert_eq!(path_at("a::*;"), "a::*");
        assert_eq!(path_at("A<T>"), "A");
    }

    #[test]
    fn test_items_are_dropped_up_to_their_end() {
        let text = "a\n#[cfg(test)]\nmod cases;\nb\n    #[cfg(test)]\n    fn len() {\n        0\n    }\nc // d\n#[cfg(test)] mod x;\ne\n#[cfg(test)]\n#[path = \"p.rs\"]\nmod y;\nf\n#[cfg(test)]\nmod tests {\n    g\n}\n";
        assert_eq!(code_of(text).split_whitespace().collect::<Vec<_>>(), ["a", "b", "c", "e", "f"]);
    }

    #[test]
    fn whole_words_only() {
        assert!(has_word("let t: Trace<Op>", "Trace"));
        assert!(!has_word("let t: TraceId", "Trace"));
        assert!(!has_word("my_Trace", "Trace"));
    }
}
