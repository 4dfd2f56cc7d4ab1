"""The import graph of ``agentreplay`` has no cycle: every ``import`` statement of every module counts, at module
level or inside a function (an import moved into a function to dodge a cycle is still a cycle), under
``TYPE_CHECKING`` too. Layers, lowest first: engine, request, policy.registry, kv, scheduler, router, perf, sim,
the rest (trace, sweep, cli, ...)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import ROOT

PKG = ROOT / "agentreplay"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, modules: set[str], name: str | None = None) -> set[str]:
    """The ``agentreplay`` modules ``path`` imports (``from a.b import c`` is ``a.b.c`` when that is a module,
    else ``a.b``); importing a module also runs its packages' ``__init__``, which the graph does not add (a
    package's ``__init__`` is a module of its own, with its own edges)."""
    name = name or module_name(path)
    is_pkg = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")[: len(name.split(".")) - node.level + (1 if is_pkg else 0)]
                mod = ".".join([*base, node.module] if node.module else base)
            else:
                mod = node.module or ""
            targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in modules else mod for a in node.names]
        else:
            continue
        out |= {t for t in targets if t in modules and t != name}
    return out


def graph() -> dict[str, set[str]]:
    files = sorted(PKG.rglob("*.py"))
    modules = {module_name(f) for f in files}
    return {module_name(f): imports(f, modules) for f in files}


def find_cycle(g: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``g`` as a path ``[a, b, ..., a]``, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(g.get(n, ())):
            if state.get(m) == 1:
                return [*stack[stack.index(m):], m]
            if m not in state and (c := visit(m)) is not None:
                return c
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(g):
        if n not in state and (c := visit(n)) is not None:
            return c
    return None


def test_find_cycle_finds_one() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_the_graph_sees_function_level_imports(tmp_path: Path) -> None:
    f = tmp_path / "m.py"
    f.write_text("def f():\n    from agentreplay.sim import run\n")
    assert imports(f, {"agentreplay.sim.run", "agentreplay.sim"}, "agentreplay.m") == {"agentreplay.sim.run"}


def test_agentreplay_has_no_import_cycle() -> None:
    g = graph()
    assert "agentreplay.sim.run" in g and "agentreplay.engine" in g
    cycle = find_cycle(g)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_engine_and_the_records_are_leaves() -> None:
    g = graph()
    assert g["agentreplay.engine"] == set()
    assert g["agentreplay.request"] <= {"agentreplay.kv.segment_pool"}
    assert g["agentreplay.policy.registry"] == set()
