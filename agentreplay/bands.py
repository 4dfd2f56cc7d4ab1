"""Error bands for the figures ``simulate`` prints, from the validation residuals of comparable cells.

A band answers "how far off has the simulator been on measured runs like this one?": for a headline metric of a
simulation (JCT, TTFT, TPOT, throughput) it is the mean absolute error of that metric family over the validation
cells of the same GPU class and model class (:func:`gpu_class`, :func:`model_class`), e.g. ``JCT mean 466 s (+-12%,
14 comparable cells)``. Where no validation cell is comparable at that level, the band widens, in order, to the
same model class on any GPU, the same GPU class with any model, then every cell, and says which level it used;
with no residuals at all there is no band (never a made-up one).

The residuals come from ``agentreplay validate`` (``error_bands.json`` in its output folder, built by
:mod:`validation.report.bands` from the judged end-to-end rows of validation cells only, stand-in workloads
excluded); the packaged copy (``agentreplay/perf/catalog/error_bands.json``) is the one of the committed validation
report.
A simulated metric maps onto the measured metric families that measure the same thing (:data:`FAMILIES`):
a program's JCT onto request E2E latency and agent JCT, TPOT onto TPOT and LLMPerf's ITL.

:func:`closest` is the band a decision (``agentreplay plan``) carries: the comparable cells (same GPU class,
model class and pricing regime) when there are any, else the nearest wider level, marked as not comparable;
either way the band names its cells (:attr:`Band.cells`, :meth:`Band.named`) and keeps the signed mean error
(``+``: the simulator was high). A residual record may carry ``regime`` (``profiled``: priced from a deployment
profile of exactly that deployment; ``unprofiled``: the roofline); a record without it matches either regime.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from agentreplay.perf import load_model

PACKAGED: Final = Path(__file__).resolve().parent / "perf" / "catalog" / "error_bands.json"
SCHEMA_VERSION: Final = 1
#: simulated headline metric -> the measured metric families (metric name without its statistic) it is judged by
FAMILIES: Final = {
    "jct_s": ("e2e", "jct"),
    "ttft_s": ("ttft",),
    "tpot_s": ("tpot", "itl"),
    "throughput": ("throughput_output_tok_s",),
}
#: a dense model up to this many parameters is "dense-small" (8B class); above, "dense-large" (30-70B class)
DENSE_SMALL_MAX_PARAMS: Final = 15e9
_DATACENTER: Final = frozenset(("a100-40gb", "a100-80gb", "h100-sxm", "h200", "b200"))


def gpu_class(gpu: str) -> str:
    """``datacenter`` (HBM, NVLink: A100, H100, H200, B200) or ``workstation`` (GDDR, PCIe: RTX 3090 / 4090,
    A6000, A40, L40S, RTX PRO 6000); ``cpu`` for the live CPU engine cell."""
    if gpu == "cpu":
        return "cpu"
    return "datacenter" if gpu in _DATACENTER else "workstation"


def model_class(model: str) -> str:
    """``moe``, ``dense-small`` (<= 15 B parameters) or ``dense-large``; ``other`` for a model not in the
    catalogue (e.g. the live cell's tiny dummy model)."""
    try:
        spec = load_model(model)
    except (KeyError, ValueError):
        return "other"
    if spec.is_moe:
        return "moe"
    return "dense-small" if spec.param_count() <= DENSE_SMALL_MAX_PARAMS else "dense-large"


@dataclass(frozen=True, slots=True)
class Band:
    """Mean absolute error (%) of ``n_cells`` comparable validation cells, and at which level they matched."""

    mape_pct: float
    mean_signed_pct: float  #: signed mean error, %: > 0 the simulator was high on these cells
    n_cells: int
    level: str  #: "GPU and model class", "model class", "GPU class" or "all cells"
    cells: tuple[str, ...] = ()  #: the cells, grouped: "source gpu model (n)" (:func:`closest` fills it)
    comparable: bool = True  #: False: no cell of the same GPU class, model class and regime; these are nearest
    regime_recorded: bool = True  #: False: some of these cells do not record their pricing regime

    def text(self) -> str:
        return f"+-{self.mape_pct:.0f}%, {self.n_cells} comparable cell{'s' if self.n_cells != 1 else ''}" + (
            "" if self.level == "GPU and model class" else f" ({self.level})"
        )

    def named(self, most: int = 3) -> str:
        """The cells by source, GPU and model, the largest groups first: ``llmperf rtx3090 llama-3.1-8b (15),
        ...``."""
        shown = ", ".join(self.cells[:most])
        return shown + (f" and {len(self.cells) - most} more group(s)" if len(self.cells) > most else "")

    def error_text(self) -> str:
        """How these cells err: sign and size (``simulator high by 176% on average, |error| 176%``)."""
        side = "high" if self.mean_signed_pct > 0 else "low"
        return f"simulator {side} by {abs(self.mean_signed_pct):.0f}% on average (|error| {self.mape_pct:.0f}%)"


def load_residuals(path: str | Path | None = None) -> list[dict[str, Any]]:
    """The residual records of an ``error_bands.json`` (default: the packaged one); [] when there is none."""
    p = Path(path) if path is not None else PACKAGED
    if not p.exists():
        if path is not None:
            raise ValueError(f"{p}: error-band file not found")
        return []
    try:
        data = json.loads(p.read_text())
        if data.get("schema_version") != SCHEMA_VERSION:
            raise ValueError(f"schema_version {data.get('schema_version')!r}, expected {SCHEMA_VERSION}")
        recs = data["residuals"]
        for i, r in enumerate(recs):
            for key, typ in (
                ("cell_id", str),
                ("gpu_class", str),
                ("model_class", str),
                ("family", str),
                ("error_pct", float | int),
            ):
                if not isinstance(r.get(key), typ):
                    raise ValueError(f"residuals[{i}].{key} = {r.get(key)!r}")
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"{p}: not an error-band file ({exc})") from None
    return list(recs)


def band(residuals: list[dict[str, Any]], metric: str, gpu: str, model: str) -> Band | None:
    """The band of a simulated ``metric`` (a key of :data:`FAMILIES`) on ``gpu`` / ``model``, or None."""
    fams = FAMILIES[metric]
    rows = [r for r in residuals if r["family"] in fams]
    g, m = gpu_class(gpu), model_class(model)
    for level, keep in (
        ("GPU and model class", lambda r: r["gpu_class"] == g and r["model_class"] == m),
        ("model class", lambda r: r["model_class"] == m),
        ("GPU class", lambda r: r["gpu_class"] == g),
        ("all cells", lambda r: True),
    ):
        sel = [r for r in rows if keep(r)]
        if sel:
            errs = [float(r["error_pct"]) for r in sel]
            return Band(
                sum(abs(e) for e in errs) / len(errs), sum(errs) / len(errs), len({r["cell_id"] for r in sel}), level
            )
    return None


def closest(
    residuals: list[dict[str, Any]], metric: str, gpu: str, model: str, regime: str | None = None
) -> Band | None:
    """The band of a simulated ``metric`` on ``gpu`` / ``model`` priced in ``regime`` (``profiled`` or
    ``unprofiled``; None: any), with its cells named: the comparable cells (same GPU class, model class and
    regime) when any exist, else those of the nearest wider level (model class, GPU class, every cell; any
    regime) with ``comparable`` False. None without residuals of the metric's families."""
    fams = FAMILIES[metric]
    rows = [r for r in residuals if r["family"] in fams]
    g, m = gpu_class(gpu), model_class(model)
    levels = (
        ("GPU and model class", lambda r: r["gpu_class"] == g and r["model_class"] == m and _regime_ok(r, regime)),
        ("model class", lambda r: r["model_class"] == m),
        ("GPU class", lambda r: r["gpu_class"] == g),
        ("all cells", lambda r: True),
    )
    for i, (level, keep) in enumerate(levels):
        sel = [r for r in rows if keep(r)]
        if sel:
            errs = [float(r["error_pct"]) for r in sel]
            return Band(
                sum(abs(e) for e in errs) / len(errs),
                sum(errs) / len(errs),
                len({r["cell_id"] for r in sel}),
                level,
                _groups(sel),
                comparable=i == 0,
                regime_recorded=all("regime" in r for r in sel),
            )
    return None


def _regime_ok(record: dict[str, Any], regime: str | None) -> bool:
    return regime is None or record.get("regime") in (None, regime)


def _groups(records: list[dict[str, Any]]) -> tuple[str, ...]:
    """Distinct cells grouped by source, GPU and model, largest group first (ties by name)."""
    cells: dict[str, set[str]] = {}
    for r in records:
        key = " ".join(str(r[k]) for k in ("source", "gpu", "model") if r.get(k)) or str(r["cell_id"])
        cells.setdefault(key, set()).add(str(r["cell_id"]))
    return tuple(f"{k} ({len(v)})" for k, v in sorted(cells.items(), key=lambda kv: (-len(kv[1]), kv[0])))


def bands_for(summary: dict[str, Any], residuals: list[dict[str, Any]]) -> dict[str, Band]:
    """Bands of a simulation's headline metrics (:func:`closest`: the cells named, in the run's pricing regime,
    ``profiled`` when ``summary['pricer']`` says a deployment profile priced it); {} without residuals, and for a
    heterogeneous cluster whose GPUs are of different classes (no comparable cell exists for such a mix)."""
    c = summary.get("cluster", {})
    gpus = sorted({str(x["gpu"]) for x in c.get("per_instance", [])} or {str(c.get("gpu"))})
    model = str(c.get("model"))
    if len({gpu_class(g) for g in gpus}) != 1 or not residuals:
        return {}
    gpu = gpus[0]
    regime = "profiled" if (summary.get("pricer") or {}).get("kind") == "table" else "unprofiled"
    out = {}
    for metric in FAMILIES:
        b = closest(residuals, metric, gpu, model, regime)
        if b is not None:
            out[metric] = b
    return out
