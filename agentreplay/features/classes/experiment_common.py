"""What the two admission studies share (``agentreplay fleet admission``, ``agentreplay fleet priority``): a few
labelled variants of one closed-loop configuration, each a section override of it, on the trace as read (its
class column is the classes' source); a table from the variants' summaries, ``table.md`` (title and table),
``summary.json`` (the summaries without their bulky parts) and one figure of two panels.

Subclasses give the variants, the table (:meth:`ClassStudy.rows_of`) and the figure (:meth:`ClassStudy.draw`).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from agentreplay.experiment import Experiment, Run, View, about, about_of, over_seeds

if TYPE_CHECKING:
    import pandas as pd

    from agentreplay.experiment import Results
    from agentreplay.sim.config import SimConfig
    from agentreplay.sim.workload import Workload
    from agentreplay.trace.io import Trace

Variants = dict[str, dict[str, dict[str, Any]]]  #: label -> section -> field overrides
#: summary parts left out of summary.json (the footprint series is kept)
BULKY = frozenset({"cluster", "engine", "findings", "error_bands", "bytes_moved"})


def given(**sections: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The section overrides whose values were given (None: keep the base configuration's value)."""
    out = {k: {f: v for f, v in fields.items() if v is not None} for k, fields in sections.items()}
    return {k: v for k, v in out.items() if v}


def slim(summary: dict[str, Any]) -> dict[str, Any]:
    return {f: v for f, v in summary.items() if f not in BULKY}


def write_figure(path: Path, draw: Callable[[Any, Any, dict[str, pd.DataFrame]], Any], tables: Any, title: str) -> Path:
    from agentreplay.fleet.figures import save, subplots

    fig, axes = subplots(1, 2, figsize=(13, 4.8))
    draw(axes[0], axes[1], tables)
    fig.suptitle(title, fontsize=10)
    return save(fig, path)


class ClassStudy(Experiment):
    """Variants of one closed-loop base (module docstring); ``kind`` names the table, the figure and the files."""

    kind: ClassVar[str]
    head: ClassVar[list[str]]
    variants: ClassVar[Variants]

    @abstractmethod
    def base(self, base: SimConfig, p: Any) -> SimConfig:
        """The configuration every variant starts from."""

    @abstractmethod
    def title(self, base: SimConfig, p: Any, trace: Path) -> str:
        """The table's and the figure's title."""

    @abstractmethod
    def rows_of(self, runs: dict[str, Run]) -> dict[str, pd.DataFrame]:
        """The tables of one seed's runs."""

    @abstractmethod
    def text_rows(self, tables: dict[str, pd.DataFrame]) -> list[list[Any]]:
        """The table's rows as printed."""

    @abstractmethod
    def draw(self, left: Any, right: Any, tables: dict[str, pd.DataFrame]) -> Any:
        """The figure's two panels."""

    def workload(self, label: str, trace: Path, p: Any, seed: int) -> Trace | Workload:
        """The trace as read, so a run can read its class column."""
        from agentreplay.experiment.worker import cached_trace

        return cached_trace(trace)

    def configs(self, base: SimConfig, p: Any) -> dict[str, SimConfig]:
        start = self.base(base, p)
        out = {}
        for label, changes in self.variants.items():
            cfg = start
            for section, fields in changes.items():
                cfg = cfg.replace(**{section: {**fields}})
            out[label] = cfg
        return out

    def analyse(self, results: Results, p: Any) -> dict[str, pd.DataFrame]:
        import pandas as pd

        def tables_of(runs: dict[str, Run]) -> dict[str, pd.DataFrame]:
            tables = self.rows_of(runs)
            summaries = {label: slim(run.summary()) for label, run in runs.items()}
            tables["_summaries"] = pd.DataFrame(
                {"summary": list(summaries.values())}, index=pd.Index(list(summaries), name="variant")
            )
            return tables

        tables = over_seeds(results, tables_of)
        tables["_about"] = about(title=self.title(results.base, p, results.trace))
        return tables

    def render(self, tables: dict[str, pd.DataFrame], out: Path) -> list[Path]:
        import json

        from agentreplay.experiment.results import plain_json
        from agentreplay.experiment.tables import markdown

        title = about_of(tables)["title"]
        (out / "table.md").write_text(f"{title}\n\n" + markdown(self.head, self.text_rows(tables)))
        summaries = dict(zip(tables["_summaries"].index, tables["_summaries"]["summary"], strict=True))
        (out / "summary.json").write_text(json.dumps(plain_json(summaries), indent=1, sort_keys=True, default=str))
        png = write_figure(out / f"{self.kind}.png", self.draw, tables, title)
        return [out / "table.md", out / "summary.json", png]

    def views(self, tables: dict[str, pd.DataFrame]) -> list[View]:
        rows = [[str(v) for v in r] for r in self.text_rows(tables)]
        return [View(about_of(tables)["title"], self.head, rows, left=2)]


def rounded(value: Any, digits: int | None) -> Any:
    """A table cell: ``value`` rounded to ``digits`` (None: a count, an integer; its mean over seeds, when not
    one, to 1 digit); NaN as ``-``."""
    v = float(value)
    if v != v:
        return "-"
    if digits is None:
        return int(v) if v.is_integer() else round(v, 1)
    return round(v, digits)
