"""The import graph of ``agentreplay`` has no cycle: every ``import`` statement that runs counts, at module level or
inside a function (an import moved into a function to dodge a cycle is still a cycle). Imports under ``if
TYPE_CHECKING:`` (annotations only, never run) are left out of the package-wide graph but counted in the
simulator's core (engine, request, policy, kv, scheduler, router, perf, sim), which has no cycle even for types.
Layers, lowest first: engine, request, policy.registry, kv, scheduler, router, perf, sim, the rest."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import ROOT

PKG = ROOT / "agentreplay"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    """ids of the nodes inside ``if TYPE_CHECKING:`` blocks."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for stmt in node.body:
                out |= {id(n) for n in ast.walk(stmt)}
    return out


def imports(path: Path, modules: set[str], name: str | None = None, types: bool = True) -> set[str]:
    """The ``agentreplay`` modules ``path`` imports (``from a.b import c`` is ``a.b.c`` when that is a module,
    else ``a.b``); importing a module also runs its packages' ``__init__``, which the graph does not add (a
    package's ``__init__`` is a module of its own, with its own edges)."""
    name = name or module_name(path)
    is_pkg = path.name == "__init__.py"
    out: set[str] = set()
    tree = ast.parse(path.read_text())
    skip = set() if types else _type_checking_nodes(tree)
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
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


CORE = (
    "agentreplay.engine",
    "agentreplay.request",
    "agentreplay.policy",
    "agentreplay.kv",
    "agentreplay.scheduler",
    "agentreplay.router",
    "agentreplay.perf",
    "agentreplay.sim",
)


def graph(types: bool = False, only: tuple[str, ...] = ("agentreplay",)) -> dict[str, set[str]]:
    """Module -> the modules it imports (``types``: ``TYPE_CHECKING`` imports too), for modules under ``only``."""
    files = sorted(PKG.rglob("*.py"))
    modules = {module_name(f) for f in files}
    mine = {m for m in modules if any(m == p or m.startswith(p + ".") for p in only)}
    return {module_name(f): imports(f, modules, types=types) & mine for f in files if module_name(f) in mine}


def find_cycle(g: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``g`` as a path ``[a, b, ..., a]``, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(g.get(n, ())):
            if state.get(m) == 1:
                return [*stack[stack.index(m) :], m]
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


def test_the_core_has_no_import_cycle_even_for_types() -> None:
    g = graph(types=True, only=CORE)
    assert "agentreplay.scheduler.scheduler" in g and "agentreplay.cli.app" not in g
    cycle = find_cycle(g)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_type_checking_imports_are_told_apart(tmp_path: Path) -> None:
    f = tmp_path / "m.py"
    f.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from agentreplay.sim import run\n")
    assert imports(f, {"agentreplay.sim.run"}, "agentreplay.m", types=False) == set()
    assert imports(f, {"agentreplay.sim.run"}, "agentreplay.m", types=True) == {"agentreplay.sim.run"}


def test_the_engine_and_the_records_are_leaves() -> None:
    g = graph(types=True)
    assert g["agentreplay.engine"] == set()
    assert g["agentreplay.request"] <= {"agentreplay.kv.segment_pool"}
    assert g["agentreplay.policy.registry"] == set()
