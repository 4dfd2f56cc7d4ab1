"""The fleet and experiment figures draw on figures of their own: no backend switch, nothing left in pyplot's
registry."""

from __future__ import annotations

import ast
from pathlib import Path

from agentreplay.fleet.figures import subplots

PKG = Path(__file__).resolve().parents[2] / "agentreplay"
#: the modules that draw: the task report's, the experiment runner's, every experiment's
DRAWING = [
    *sorted((PKG / "fleet").glob("*.py")),
    *sorted((PKG / "experiment").glob("*.py")),
    *sorted(PKG.glob("features/*/experiment*.py")),
]


def test_subplots_makes_a_figure_of_its_own(tmp_path: Path) -> None:
    import matplotlib.pyplot as plt

    before = plt.get_fignums()
    fig, axes = subplots(1, 2, figsize=(4, 2), sharey=True)
    axes[0].plot([0, 1], [1, 2])
    fig.savefig(tmp_path / "f.png")
    assert (tmp_path / "f.png").stat().st_size > 0
    assert plt.get_fignums() == before and len(axes) == 2


def test_no_drawing_module_uses_pyplot_or_switches_the_backend() -> None:
    assert len(DRAWING) > 20
    for path in DRAWING:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
                assert not any("pyplot" in n for n in names), path.name
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "use":
                assert getattr(node.func.value, "id", "") != "matplotlib", path.name
