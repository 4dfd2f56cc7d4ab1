"""Speculative decoding on a trace: JCT by drafter, acceptance rate and load (``agentreplay fleet spec``).

Variants: every case of :func:`default_cases` (off; n-gram and draft model at each acceptance rate; n-gram with
per-tool-class rates) at every load (closed loop). Compute first (:func:`rows_of`, :func:`batch_curve`: plain
data), draw second (:func:`plot_speedup`, :func:`plot_jct`, :func:`draw`), render third (:func:`markdown`).
Semantics: :mod:`agentreplay.features.speculation.speculative`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from agentreplay.experiment import Experiment, Run, View, about, about_of, over_seeds, param
from agentreplay.experiment.params import check, command_line
from agentreplay.experiment.tables import markdown as md_table

if TYPE_CHECKING:
    import pandas as pd

    from agentreplay.experiment import Results
    from agentreplay.sim.config import SimConfig

#: decode batches and contexts the speed-up curves are priced at
BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
CONTEXTS = (16_000, 1_000)

#: Per-tool-class acceptance used by the ``per-class`` case: ILLUSTRATIVE, not measured (no acceptance trace of
#: this workload exists): edits echo file text and tool-call syntax (low entropy, n-gram lookup hits), reads and
#: searches quote paths and code, test / build commands are freer text.
ILLUSTRATIVE_BY_CLASS: dict[str, float] = {
    "edit": 0.8,
    "vcs": 0.7,
    "submit": 0.7,
    "read": 0.6,
    "search": 0.6,
    "test": 0.5,
    "build": 0.5,
    "other": 0.5,
}


@dataclass(frozen=True)
class Case:
    """One speculation setting: a label and its ``[speculative]`` fields (empty: off)."""

    label: str
    spec: dict[str, Any] = field(default_factory=dict)


def default_cases(k: int, rates: Sequence[float], draft_model: str) -> list[Case]:
    """Off; n-gram at each rate; the draft model at each rate; n-gram with :data:`ILLUSTRATIVE_BY_CLASS`."""
    cases = [Case("none")]
    cases += [Case(f"ngram a={a:g}", {"method": "ngram", "num_speculative_tokens": k, "acceptance": a}) for a in rates]
    cases += [
        Case(
            f"draft {draft_model} a={a:g}",
            {"method": "draft_model", "num_speculative_tokens": k, "acceptance": a, "draft_model": draft_model},
        )
        for a in rates
    ]
    cases.append(
        Case(
            "ngram per-class",
            {
                "method": "ngram",
                "num_speculative_tokens": k,
                "acceptance": 0.5,
                "acceptance_by_tool_class": dict(ILLUSTRATIVE_BY_CLASS),
            },
        )
    )
    return cases


def batch_curve(
    cfg: SimConfig,
    k: int,
    rates: Sequence[float],
    draft_model: str,
    batches: Sequence[int],
    contexts: Sequence[int],
) -> list[dict[str, Any]]:
    """Decode speed-up of speculation per batch size and context on the configured target, priced without
    simulation: a plain step of ``n`` sequences at ``ctx`` tokens each emits ``n`` tokens; a verification step
    emits ``n E(a, k)`` on average. Speed-up = plain step / (verification step / E); below 1 speculation costs.
    Long contexts make decode KV-bound, which the k + 1 queries share (one KV pass), so speculation pays to
    larger batches there (as MagicDec, Chen et al. 2024, argues for long-context serving)."""
    from agentreplay.features.speculation.speculative import draft_pricer, expected_tokens
    from agentreplay.perf.speculative import SpeculativePricer
    from agentreplay.perf.table import pricer_from_names

    hw = cfg.hardware
    target = pricer_from_names("roofline", hw.gpu, hw.model, hw.dtype, hw.tp, mixed_attention=hw.mixed_attention)
    drafters: dict[str, Any] = {
        "ngram": None,
        f"draft {draft_model}": draft_pricer(
            cfg.replace(speculative={"method": "draft_model", "draft_model": draft_model}), (hw.gpu, hw.tp, hw.dtype)
        ),
    }
    rows = []
    for label, drafter in drafters.items():
        pricer = SpeculativePricer(target, k, drafter)
        for a in rates:
            e = expected_tokens(a, k)
            for ctx in contexts:
                for n in batches:
                    a0, c0 = target.decode_coeffs(n)
                    a1, c1 = pricer.decode_coeffs(n)
                    plain = a0 + c0 * n * ctx
                    spec = a1 + c1 * n * ctx
                    rows.append(
                        {"drafter": label, "acceptance": a, "ctx": ctx, "batch": n, "speedup": plain / (spec / e)}
                    )
    return rows


def crossover(curve: list[dict[str, Any]]) -> dict[str, int | None]:
    """Per (drafter, acceptance, context): the smallest batch where speculation costs (speed-up < 1), None if
    never in the batches priced."""
    out: dict[str, int | None] = {}
    for r in curve:
        key = f"{r['drafter']} a={r['acceptance']:g}, {r['ctx']:,}-token contexts"
        out.setdefault(key, None)
        if out[key] is None and r["speedup"] < 1.0:
            out[key] = r["batch"]
    return out


def plot_speedup(ax: Any, curve: list[dict[str, Any]], ctx: int) -> Any:
    keys = sorted({(r["drafter"], r["acceptance"]) for r in curve})
    for drafter, a in keys:
        pts = [
            (r["batch"], r["speedup"])
            for r in curve
            if r["drafter"] == drafter and r["acceptance"] == a and r["ctx"] == ctx
        ]
        ax.plot(*zip(*pts, strict=True), "-" if drafter == "ngram" else "--", label=f"{drafter}, a={a:g}")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("decode batch (sequences)")
    ax.set_ylabel("decode speed-up (tokens/s vs no speculation)")
    ax.set_title(f"where speculation pays: {ctx:,}-token contexts")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return ax


def plot_jct(ax: Any, rows: list[dict[str, Any]]) -> Any:
    """JCT p50 (bars) and p90 (ticks) of each case relative to no speculation at the same load."""
    import numpy as np

    loads = sorted({r["load"] for r in rows})
    cases = [c for c in dict.fromkeys(r["case"] for r in rows) if c != "none"]
    width = 0.8 / max(len(cases), 1)
    x = np.arange(len(loads))

    def rel(load: int, case: str, q: str) -> float:
        ref = next(r[q] for r in rows if r["load"] == load and r["case"] == "none")
        return 100.0 * (next(r[q] for r in rows if r["load"] == load and r["case"] == case) / ref - 1.0)

    for i, c in enumerate(cases):
        ax.bar(x + i * width, [rel(ld, c, "jct_p50_s") for ld in loads], width, label=c)
        ax.plot(x + i * width, [rel(ld, c, "jct_p90_s") for ld in loads], "k_", ms=8)
    ax.axhline(0.0, color="k", lw=0.8)
    ax.set_xticks(x + 0.4 - width / 2, [f"{ld} in flight" for ld in loads])
    ax.set_ylabel("JCT change vs no speculation, % (bars p50, ticks p90)")
    ax.set_title("JCT on the trace")
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=7)
    return ax


def draw(rows: list[dict[str, Any]], curve: list[dict[str, Any]], path: Path) -> Path:
    from agentreplay.fleet.figures import save, subplots

    contexts = sorted({r["ctx"] for r in curve}, reverse=True)
    fig, axes = subplots(1, 1 + len(contexts), figsize=(6.5 * (1 + len(contexts)), 4.8))
    plot_jct(axes[0], rows)
    for ax, ctx in zip(axes[1:], contexts, strict=True):
        plot_speedup(ax, curve, ctx)
    return save(fig, path)


HEAD = ["load", "case", "JCT p50 s", "JCT p90 s", "JCT p99 s", "p50 vs none", "TPOT p50 ms", "TTFT p50 s"]
HEAD += ["TTFT p90 s", "out tok/s", "mean running", "tokens/step", "re-prefill bound"]


def table_rows(rows: list[dict[str, Any]]) -> list[list[str]]:
    return [
        [
            str(r["load"]),
            r["case"],
            f"{r['jct_p50_s']:,.1f}",
            f"{r['jct_p90_s']:,.1f}",
            f"{r['jct_p99_s']:,.1f}",
            f"{r['jct_p50_change']:+.1%}",
            f"{r['tpot_p50_s'] * 1e3:,.1f}",
            f"{r['ttft_p50_s']:,.2f}",
            f"{r['ttft_p90_s']:,.2f}",
            f"{r['output_tokens_per_s']:,.0f}",
            f"{r['mean_running']:,.1f}",
            f"{r['tokens_per_step']:.2f}",
            f"{r['reprefill_share']:.2%}",
        ]
        for r in rows
    ]


def cross_lines(cross: dict[str, Any]) -> list[str]:
    return [f"- {k}: {'never in the range' if v is None else v}" for k, v in cross.items()]


def markdown(title: str, rows: list[dict[str, Any]], cross: dict[str, Any], notes: Sequence[str]) -> str:
    lines = [
        "",
        f"Smallest decode batch where speculation costs (priced steps, figure right; up to {BATCHES[-1]}):",
        "",
    ]
    lines += cross_lines(cross)
    lines += ["", *notes, ""]
    return f"# {title}\n\n" + md_table(HEAD, table_rows(rows)) + "\n".join(lines)


@dataclass(frozen=True, slots=True)
class SpecParams:
    programs: int | None = param(None, "First N programs of the trace.", none="all")
    loads: tuple[int, ...] = param((4, 64), "Programs in flight (closed loop), comma-separated.")
    k: int = param(3, "Draft tokens per step (num_speculative_tokens).")
    acceptance: tuple[float, ...] = param((0.5, 0.8), "Acceptance rates to compare, comma-separated.")
    draft_model: str = param("llama-3.1-8b", "Draft model catalog name (TP as the target's).")

    def __post_init__(self) -> None:
        check(self.programs is None or self.programs >= 1, "--programs", self.programs, "an integer >= 1")
        check(bool(self.loads) and min(self.loads) >= 1, "--loads", self.loads, "integers >= 1")
        check(len(set(self.loads)) == len(self.loads), "--loads", self.loads, "each load once")
        check(self.k >= 1, "--k", self.k, "an integer >= 1")
        check(all(0 <= a < 1 for a in self.acceptance), "--acceptance", self.acceptance, "rates in [0, 1)")
        check(len(set(self.acceptance)) == len(self.acceptance), "--acceptance", self.acceptance, "each rate once")


def rows_of(runs: dict[str, Run], p: SpecParams, cases: list[Case]) -> pd.DataFrame:
    """One row per (load, case), with the JCT p50 change against the first case (off) at the same load."""
    import pandas as pd

    rows: list[dict[str, Any]] = []
    for load in p.loads:
        ref: float | None = None
        for case in cases:
            run = runs[Spec.label(load, case)]
            s = run.summary()
            inst = run.table("instances")
            sp = s.get("speculative", {})
            p50 = s["jct_s"]["p50"]
            ref = p50 if ref is None else ref
            rows.append(
                {
                    "load": load,
                    "case": case.label,
                    "jct_p50_s": p50,
                    "jct_p90_s": s["jct_s"]["p90"],
                    "jct_p99_s": s["jct_s"]["p99"],
                    "jct_p50_change": p50 / ref - 1.0,
                    "tpot_p50_s": s["tpot_s"]["p50"],
                    "ttft_p50_s": s["ttft_s"]["p50"],
                    "ttft_p90_s": s["ttft_s"]["p90"],
                    "output_tokens_per_s": s["throughput_output_tokens_per_s"],
                    "mean_running": float(inst["running"].mean()) if len(inst) else float("nan"),
                    "tokens_per_step": sp.get("tokens_per_step", 1.0),
                    "reprefilled_tokens_bound": sp.get("reprefilled_tokens_bound", 0),
                    "reprefill_share": sp.get("reprefilled_tokens_bound", 0) / max(s["input_tokens"], 1),
                }
            )
    return pd.DataFrame(rows).set_index(["load", "case"])


def _data(tables: dict[str, pd.DataFrame]) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    from agentreplay.experiment.tables import flat

    cross = tables["spec_crossover"]
    import pandas as pd

    costs = {k: None if pd.isna(v) else int(v) for k, v in zip(cross["curve"], cross["costs_from_batch"], strict=True)}
    return flat(tables["spec"]).to_dict("records"), tables["spec_speedup"].to_dict("records"), costs


class Spec(Experiment):
    name = "spec"
    summary = "Speculative decoding: JCT for n-gram and draft-model drafters at two acceptance rates."
    description = (
        "Each case is a closed-loop replay at each load; a per-tool-class case uses illustrative rates "
        "(ILLUSTRATIVE_BY_CLASS of agentreplay.features.speculation.experiment). The figure adds the decode "
        "speed-up per batch size from the priced steps, which shows the batch where speculation stops paying. "
        "Writes spec.md and spec.png."
    )
    example = "agentreplay fleet spec --programs 200 --loads 4,64"
    Params = SpecParams
    hardware = MappingProxyType({"gpu": "h100-sxm", "model": "llama-3.1-70b", "tp": 4})
    outputs = ("spec.md", "spec.png")

    @staticmethod
    def label(load: int, case: Case) -> str:
        return f"load {load}: {case.label}"

    def configs(self, base: SimConfig, p: SpecParams) -> dict[str, SimConfig]:
        base = base.replace(workload={"max_programs": p.programs})
        return {
            self.label(load, case): base.replace(workload={"concurrency": load}, speculative=case.spec)
            for load in p.loads
            for case in default_cases(p.k, p.acceptance, p.draft_model)
        }

    def analyse(self, results: Results, p: SpecParams) -> dict[str, pd.DataFrame]:
        import pandas as pd

        cases = default_cases(p.k, p.acceptance, p.draft_model)
        tables = over_seeds(results, lambda runs: {"spec": rows_of(runs, p, cases)})
        cfg = results.base.replace(workload={"max_programs": p.programs})
        curve = batch_curve(cfg, p.k, p.acceptance, p.draft_model, BATCHES, CONTEXTS)
        cross = crossover(curve)
        tables["spec_speedup"] = pd.DataFrame(curve)
        tables["spec_crossover"] = pd.DataFrame(
            {"curve": list(cross), "costs_from_batch": pd.array(list(cross.values()), dtype="Int64")}
        )
        hw = results.base.hardware
        title = f"speculative decoding, k={p.k}: {hw.model} TP{hw.tp} on {hw.gpu}, {results.trace.name}" + (
            f" (first {p.programs} programs)" if p.programs else ""
        )
        notes = [
            "Expected-value model (agentreplay.features.speculation.speculative): ceil((out - 1) / E) verification "
            "steps per turn, E = (1 - a^(k+1)) / (1 - a); steps priced as the verification batch plus the drafter; "
            "each decode takes 1 + k of the step's token budget (vLLM), so prompts beside a speculating batch get "
            "smaller chunks. Per-class rates are illustrative, not measured. 'mean running' is the mean decode batch "
            "sampled once a second. 're-prefill bound': the accepted tokens beyond one per step that the KV cache does "
            "not hold (the model's approximation), as a share of prompt tokens: at most that much extra prefill. "
            "Speed-up curves: every sequence at 16,000 (the trace's median prompt is ~14,000) or 1,000 tokens.",
            *([f"Mean over seeds {', '.join(map(str, results.seeds))}."] if len(results.seeds) > 1 else []),
            f"Command: {command_line(p, self.name)}",
        ]
        tables["_about"] = about(title=title, notes=notes)
        return tables

    def render(self, tables: dict[str, pd.DataFrame], out: Path) -> list[Path]:
        a = about_of(tables)
        rows, curve, cross = _data(tables)
        (out / "spec.md").write_text(markdown(a["title"], rows, cross, a["notes"]))
        return [out / "spec.md", draw(rows, curve, out / "spec.png")]

    def views(self, tables: dict[str, pd.DataFrame]) -> list[View]:
        a = about_of(tables)
        rows, _, cross = _data(tables)
        lines = [
            f"{k}: costs from a decode batch of {n if n is not None else f'none up to {BATCHES[-1]}'}"
            for k, n in cross.items()
        ]
        return [View(a["title"], HEAD, table_rows(rows), notes=lines, left=2)]


EXPERIMENT = Spec()
