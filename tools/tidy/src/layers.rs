//! The layer check: every dependency between the repository's packages points down.
//!
//! `docs/ARCHITECTURE.md` (*Layers*) puts each package on a tier. A manifest's normal and
//! build dependencies on the repository's packages must sit on a lower tier. A
//! dev-dependency may point up: Cargo builds it against the package's library as built
//! without `cfg(test)`, which is what integration tests and doc tests link (the engine's
//! and tidu's tests use the reference set, `scalar`, that way). It may not point to the top
//! tier, where the binaries and benches are, which nothing builds on.
//!
//! Manifests are read line by line, which is enough for the forms this repository writes:
//! `name = …`, `name.workspace = true`, `[dependencies.name]` and
//! `[target.'cfg(…)'.dependencies]` sections.

/// What a dependency is for, by the section that declares it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DepKind {
    /// `[dependencies]`: the library and every target.
    Normal,
    /// `[build-dependencies]`: the build script.
    Build,
    /// `[dev-dependencies]`: tests, examples, benches and doc tests.
    Dev,
}

/// A manifest's package name and the dependencies it declares.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Manifest {
    /// `[package] name`; empty for a workspace root without a package.
    pub package: String,
    /// Every dependency by name, with the section it is declared in.
    pub dependencies: Vec<(String, DepKind)>,
}

/// The dependency kind a section header (`dependencies`, `target.'…'.dev-dependencies`,
/// `dependencies.name`) declares, and the one dependency it names when it is a table of
/// its own.
fn section(header: &str) -> Option<(DepKind, Option<&str>)> {
    // A `target.'cfg(…)'.` prefix changes nothing here: the cfg may quote dots.
    let rest = match header.strip_prefix("target.") {
        Some(t) => {
            let end = t.rfind("dependencies")?;
            let start = t[..end].rfind('.').map_or(0, |d| d + 1);
            &t[start..]
        }
        None => header,
    };
    let (kind_name, named) = match rest.split_once('.') {
        Some((k, n)) => (k, Some(n.trim_matches('"'))),
        None => (rest, None),
    };
    let kind = match kind_name {
        "dependencies" => DepKind::Normal,
        "build-dependencies" => DepKind::Build,
        "dev-dependencies" => DepKind::Dev,
        _ => return None,
    };
    Some((kind, named))
}

/// The package name and dependencies of the manifest `text`.
pub fn parse_manifest(text: &str) -> Manifest {
    let mut manifest = Manifest::default();
    // `None`: a section that declares no dependencies; `in_package`: `[package]`.
    let mut current: Option<DepKind> = None;
    let mut in_package = false;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        if let Some(header) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            in_package = header == "package";
            current = None;
            match section(header) {
                Some((kind, Some(name))) => manifest.dependencies.push((name.to_string(), kind)),
                Some((kind, None)) => current = Some(kind),
                None => {}
            }
            continue;
        }
        let Some((key, value)) = line.split_once('=') else { continue };
        let key = key.trim();
        if in_package && key == "name" {
            manifest.package = value.trim().trim_matches('"').to_string();
        } else if let Some(kind) = current {
            // `name.workspace = true` declares `name`.
            let name = key.split('.').next().unwrap_or(key).trim_matches('"');
            manifest.dependencies.push((name.to_string(), kind));
        }
    }
    manifest
}

/// The dependencies of `manifest` (read from `path`) that break the layers: a normal or
/// build dependency on a package of the same or a higher tier, a dev-dependency on a
/// package of the top tier, or a package on no tier. `tiers` gives every package of the
/// repository its tier (0 the lowest); names it does not list are outside packages.
pub fn layer_violations(path: &str, manifest: &Manifest, tiers: &[(&str, u8)]) -> Vec<String> {
    let tier = |name: &str| tiers.iter().find(|(n, _)| *n == name).map(|&(_, t)| t);
    let top = tiers.iter().map(|&(_, t)| t).max().unwrap_or(0);
    let Some(own) = tier(&manifest.package) else {
        return vec![format!("{path}: package `{}` is on no tier", manifest.package)];
    };
    let mut found = Vec::new();
    for (name, kind) in &manifest.dependencies {
        let Some(theirs) = tier(name) else { continue };
        let bad = match kind {
            DepKind::Normal | DepKind::Build => theirs >= own,
            DepKind::Dev => theirs == top,
        };
        if bad {
            found.push(format!(
                "{path}: `{}` (tier {own}) has a {kind:?} dependency on `{name}` (tier {theirs})",
                manifest.package
            ));
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    const MANIFEST: &str = r#"[package]
name = "mid"
version.workspace = true

[dependencies]
low.workspace = true
outside = { version = "1", features = ["x"] }

[target.'cfg(target_os = "linux")'.dependencies]
libc = "0.2"

[dev-dependencies]
high = { path = "../high" }
# a comment = not a dependency

[dependencies.table]
version = "1"

[lints]
workspace = true
"#;

    #[test]
    fn a_manifest_is_read_by_section() {
        let m = parse_manifest(MANIFEST);
        assert_eq!(m.package, "mid");
        let deps: Vec<(&str, DepKind)> = m.dependencies.iter().map(|(n, k)| (n.as_str(), *k)).collect();
        assert_eq!(
            deps,
            [
                ("low", DepKind::Normal),
                ("outside", DepKind::Normal),
                ("libc", DepKind::Normal),
                ("high", DepKind::Dev),
                ("table", DepKind::Normal),
            ]
        );
    }

    #[test]
    fn dependencies_point_down_and_dev_dependencies_below_the_top() {
        let tiers = [("low", 0), ("mid", 1), ("high", 2), ("bin", 3)];
        let m = parse_manifest(MANIFEST);
        assert!(layer_violations("m", &m, &tiers).is_empty());
        // The same tier, a higher one, a build dependency up, a dev-dependency on the top tier.
        let bad = "[package]\nname = \"mid\"\n[dependencies]\nmid2 = \"1\"\nhigh = \"1\"\n\
                   [build-dependencies]\nhigh = \"1\"\n[dev-dependencies]\nbin = \"1\"\n";
        let tiers = [("low", 0), ("mid", 1), ("mid2", 1), ("high", 2), ("bin", 3)];
        let found = layer_violations("m", &parse_manifest(bad), &tiers);
        assert_eq!(found.len(), 4, "{found:?}");
        assert!(found[0].contains("Normal dependency on `mid2`"), "{found:?}");
        assert!(found[3].contains("Dev dependency on `bin`"), "{found:?}");
        // A package the tiers do not list.
        assert_eq!(layer_violations("m", &parse_manifest("[package]\nname = \"new\"\n"), &tiers).len(), 1);
    }
}
