"""The imports of ``validation`` and ``collectors`` make no cycle: every import that runs counts, at module level or
inside a function (an import moved into a function to dodge a cycle is still a cycle); imports under ``if
TYPE_CHECKING:`` never run and are left out. Edges into and out of ``agentreplay`` count, so a cycle through the
simulator's package is found too (``agentreplay``'s own graph: ``tests/test_import_graph.py``). Read with
:mod:`ast`, nothing is imported. And every collector module is reached through :mod:`collectors.registry`."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("agentreplay", "validation", "collectors")
CHECKED = ("validation", "collectors")


def modules(root: Path = ROOT) -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for f in sorted((root / pkg).rglob("*.py")):
            parts = f.relative_to(root).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return out


def _type_checking(tree: ast.AST) -> set[int]:
    return {
        id(n)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for stmt in node.body
        for n in ast.walk(stmt)
    }


def imports(path: Path, name: str, mods: dict[str, Path]) -> set[str]:
    """First-party modules ``path`` imports anywhere (``from a.b import c`` is ``a.b.c`` when that is a module)."""
    is_pkg = path.name == "__init__.py"
    tree = ast.parse(path.read_text(), str(path))
    skip = _type_checking(tree)
    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = name.split(".") if is_pkg else name.split(".")[:-1]
                base = ".".join(pkg[: len(pkg) - node.level + 1] + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
        else:
            continue
        out |= {t for t in targets if t in mods and t != name}
    return out


def graph(mods: dict[str, Path]) -> dict[str, set[str]]:
    return {m: imports(f, m, mods) for m, f in mods.items()}


def cycle_through(g: dict[str, set[str]], start: str) -> list[str] | None:
    """A path ``[start, ..., start]`` in ``g``, or None."""
    parent: dict[str, str] = {}
    todo = [start]
    while todo:
        x = todo.pop()
        for y in sorted(g.get(x, ())):
            if y == start:
                path = [x]
                while path[-1] != start:
                    path.append(parent[path[-1]])
                return [start, *reversed(path[:-1]), start] if x != start else [start, start]
            if y not in parent:
                parent[y] = x
                todo.append(y)
    return None


def test_validation_and_collectors_import_no_cycle() -> None:
    g = graph(modules())
    found = {m: c for m in g if m.split(".")[0] in CHECKED and (c := cycle_through(g, m)) is not None}
    assert not found, "import cycles: " + "; ".join(" -> ".join(c) for c in found.values())


def test_a_cycle_is_found() -> None:
    """The check can fail: a lazy import that closes a cycle is one."""
    assert cycle_through({"p.a": {"p.b"}, "p.b": {"p.c"}, "p.c": {"p.a"}}, "p.a") == ["p.a", "p.b", "p.c", "p.a"]
    assert cycle_through({"p.a": {"p.b"}, "p.b": set()}, "p.a") is None


def test_every_collector_module_is_registered() -> None:
    """Every module of collectors/ defining a ``*Collector`` class is registered through collectors.registry."""
    from collectors.registry import formats

    registered = {type(c).__module__ for c in formats().values()}
    defining = set()
    for m, f in modules().items():
        if m.startswith("collectors.") and m.count(".") == 1:
            tree = ast.parse(f.read_text())
            if any(
                isinstance(n, ast.ClassDef) and n.name.endswith("Collector") and n.name != "Collector"
                for n in tree.body
            ):
                defining.add(m)
    assert registered == defining
