"""Counts the private names one module of a Python package takes from another.

A private name is one that starts with ``_`` and is not a dunder. A module *takes* one
when it imports it (``from .other import _name``) or reads it as an attribute of another
module of the package that it imported (``other._name``, ``from . import other`` first).
Importing a private submodule (``from . import _core``) is not counted: a package's
modules are its own business; reaching into a module's namespace for a name it did not
mean to export is what is counted. Private methods of classes (``obj._plan()``) are not
seen: the count is of module-level names, found statically.

Usage (from the repository root)::

    python python/tools/private_names.py python/cgx [python/tests ...]

The first argument is the package; further directories (tests, say) are read as modules
outside it that import the package absolutely (``from cgx import _einsum``). Prints one
line per (importer, source, name), then the number of such triples and, separately, of
those whose importer is inside the package. Exit status 0.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _modules(package: Path) -> dict[str, Path]:
    """Dotted module names of the package (``cgx``, ``cgx.graph``, ``cgx.distributed``,
    ...) with their files."""
    root = package.name
    found = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join([root, *parts])] = path
    return found


def _extensions(modules: dict[str, Path], trees: dict[str, ast.AST]) -> set[str]:
    """Submodules without a ``.py`` file (a compiled extension such as ``cgx._core``, which
    a source tree may not hold): names that a package's ``__init__`` imports with ``from .
    import name`` and binds in no other way."""
    found = set()
    for name, path in modules.items():
        if path.name != "__init__.py":
            continue
        relative, other = set(), set()
        for node in ast.walk(trees[name]):
            if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module is None:
                relative.update(a.asname or a.name for a in node.names)
            elif isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.ImportFrom, ast.Import)):
                names = [node.name] if isinstance(node, (ast.FunctionDef, ast.ClassDef)) else [a.asname or a.name for a in node.names]
                other.update(names)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                other.add(node.id)
        found.update(f"{name}.{n}" for n in relative - other if f"{name}.{n}" not in modules)
    return found


def _resolve(importer: str, is_package: bool, module: str | None, level: int) -> str:
    """The absolute name of ``from <'.' * level><module> import ...`` inside ``importer``."""
    if level == 0:
        return module or ""
    base = importer.split(".")
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def takes(importer: str, is_package: bool, tree: ast.AST, modules: set[str]) -> set[tuple[str, str, str]]:
    """The (importer, source, name) triples of the private names ``importer`` takes."""
    bound: dict[str, str] = {}  # local name -> module of the package it is bound to
    found: set[tuple[str, str, str]] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in modules:
                    if alias.asname:
                        bound[alias.asname] = alias.name
                    else:  # `import cgx.ray` binds `cgx`
                        top = alias.name.split(".")[0]
                        bound[top] = top
        elif isinstance(node, ast.ImportFrom):
            source = _resolve(importer, is_package, node.module, node.level)
            if source not in modules:
                continue
            for alias in node.names:
                full = f"{source}.{alias.name}"
                if full in modules:
                    bound[alias.asname or alias.name] = full
                elif _is_private(alias.name) and source != importer:
                    found.add((importer, source, alias.name))
    # `a.b._c`: follow attribute chains from a bound module through submodules.
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        chain = []
        value: ast.AST = node
        while isinstance(value, ast.Attribute):
            chain.append(value.attr)
            value = value.value
        if not isinstance(value, ast.Name) or value.id not in bound:
            continue
        source = bound[value.id]
        for attr in reversed(chain):
            if f"{source}.{attr}" in modules:
                source = f"{source}.{attr}"
                continue
            if _is_private(attr) and source != importer:
                found.add((importer, source, attr))
            break
    return found


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
        return 2
    package = Path(argv[0])
    modules = _modules(package)
    trees = {name: ast.parse(path.read_text(encoding="utf-8"), str(path)) for name, path in modules.items()}
    names = set(modules) | _extensions(modules, trees)
    triples: set[tuple[str, str, str]] = set()
    for name, path in modules.items():
        triples |= takes(name, path.name == "__init__.py", trees[name], names)
    inside = len(triples)
    for extra in argv[1:]:
        for path in sorted(Path(extra).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
            triples |= takes(f"{Path(extra).name}/{path.stem}", False, tree, names)
    for importer, source, attr in sorted(triples):
        print(f"{importer} <- {source}.{attr}")
    print(f"{len(triples)} private names taken across modules ({inside} inside {package.name}, {len(triples) - inside} by {', '.join(argv[1:]) or 'nothing else'})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
