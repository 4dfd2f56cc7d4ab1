"""Mixed prefill + decode attention: how far is pricing the two parts apart from the measured one-kernel time?

Run from the project root:  python benchmarks/attention_mixed.py [--vllm-run]

vLLM's FlashAttention backend runs one varlen kernel per layer for the whole batch, chunked prefills and decodes
together; with a prefill in the batch the longest query is longer than one token, so FlashAttention-2 neither
packs the decodes' GQA heads nor splits their KV (agentreplay.perf.tiles): each decoding sequence becomes one
64-row query block per head that walks its whole context. The LLMServingSim profiles measure these mixed shots
(one chunk over a cached prefix plus n decodes over one context each), which the collector does not ingest (a
component row has one context). For every perf-format profile cell this prints, over its mixed shots:

- ``additive``: the measured pure-prefill time of the chunk plus the measured pure-decode time of the decodes,
  what pricing prefill and decode attention apart gives at best (the table pricer does this): MAPE and mean
  signed error %;
- ``one kernel``: ``t = fixed + per_tile * makespan`` of all CTAs of the shot (decodes first, then the chunk,
  per head; agentreplay.perf.tiles list scheduling), two constants fitted on the cell's mixed shots (in-sample):
  MAPE %, and the constants;
- out of sample, with the shipped catalog (parameters fitted on pure prefill and decode calibration points
  only, never on a mixed shot): the refined roofline as the simulator prices a mixed iteration today (prefill
  and decode attention apart, one launch), and the same one-kernel critical path with the refined roofline's
  own launch cost and tile time: MAPE and mean signed error %.

The same profiles' ``skew.csv`` holds shots whose decodes do not share one context: ``n`` decodes, ``nb`` of them
over ``kv_big`` cached tokens and the rest over ``kvs``, with (regime ``mixed``) or without (``pure``) a prefill
chunk of ``pc`` tokens over ``kp`` cached ones; ``t_skew_us`` is the measured time. A second table prices a
deterministic subsample of each cell's mixed shots (none of them used by any fit) with the shipped catalog, apart
and as one kernel as above, and shows how often the measured time sits near the longest decode (the profiler's
``alpha`` = (t_skew - t_mean) / (t_max - t_mean), against uniform batches at the mean and at the big context):
pricing the decodes by their summed context (apart) cannot produce that.

With ``--vllm-run`` it then replays the RTX 4090 vLLM run (validation.e2e) with the default and the refined
roofline, each with mixed attention priced as that one kernel (``[hardware] mixed_attention = "one_kernel"``,
the simulator's default) and apart, and prints the mean TTFT, TPOT, E2E and throughput errors of the four.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agentreplay.perf.model import MIXED_ATTENTION  # noqa: E402
from agentreplay.perf.table import RefinedPerfModel  # noqa: E402
from agentreplay.perf.tiles import block_tiles, ctas_per_sm, makespan_blocks  # noqa: E402
from benchmarks.attention_tiles import fit_line, profile_cells  # noqa: E402


def _errors(label: str, predicted_us: np.ndarray, measured_us: np.ndarray) -> dict[str, float]:
    err = predicted_us / measured_us - 1
    return {f"{label} MAPE %": float(np.mean(np.abs(err)) * 100), f"{label} signed %": float(np.mean(err) * 100)}


def vllm_run() -> None:
    """The RTX 4090 vLLM run with both rooflines, mixed attention priced apart and as one kernel."""
    from validation.catalog import PACKAGED
    from validation.e2e.vllm import vllm_run
    from validation.measured import load

    tables = load(kinds=("end-to-end",)).tables
    cells = tables["cells"]
    cell = cells[cells["source"] == "vllm-run"].iloc[0]
    metrics = ("ttft_mean_s", "tpot_mean_s", "e2e_mean_s", "throughput_output_tok_s")
    for kind in ("roofline", "refined"):
        for mixed in MIXED_ATTENTION:
            rows, _ = vllm_run(cell, tables, PACKAGED, pricer=f"{kind}:{mixed}")  # e2e.common.E2E_PRICERS naming
            print(
                f"RTX 4090 vLLM run, {kind}, mixed attention {mixed}: "
                + ", ".join(
                    f"{r['metric']} {100 * (r['simulated'] / r['measured'] - 1):+.1f}%"
                    for r in rows
                    if r["metric"] in metrics
                )
            )


#: Mixed skew shots priced per cell (every k-th row, k chosen to give about this many).
SKEW_SHOTS = 400


def attention_us(pm: RefinedPerfModel, prefill: list[tuple[int, int]], ctx: list[int]) -> float:
    """One layer's attention of a shot as ``pm`` prices it inside an iteration (prefill and decode terms, one
    launch), in microseconds: apart or as one kernel, as ``pm`` was built."""
    bd = pm.breakdown(prefill, ctx)
    return (
        (bd["attention_prefill"] + bd["attention_decode"]) / pm.model.num_hidden_layers + pm.launch["attention"]
    ) * 1e6


def pricers(gpu: str, model: str, tp: int) -> tuple[RefinedPerfModel, RefinedPerfModel]:
    """The shipped refined roofline with mixed attention apart and as one kernel (the simulator's default)."""
    return tuple(
        RefinedPerfModel.from_names(gpu, model, tp=tp, mixed_attention=m)  # type: ignore[return-value]
        for m in ("apart", "one_kernel")
    )


def skew_scale(skew: pd.DataFrame, grid: pd.DataFrame) -> tuple[float, int]:
    """(median, count) of ``t_max_us`` / the attention grid's time of the same shot: each uniform reference batch
    of ``skew.csv`` (all ``n`` decodes over ``kv_big``, the same prefill) that is also a point of
    ``attention.csv``. The two files time a shot on different scales; this ratio, not an assumption, puts them on
    one."""
    g = grid.groupby(["prefill_chunk", "kv_prefill", "n_decode", "kv_decode"])["time_us"].median()
    keys = list(skew[["pc", "kp", "n", "kv_big"]].astype(int).itertuples(index=False, name=None))
    ref = np.array([g.get(k, np.nan) for k in keys], dtype=float)
    ratio = skew["t_max_us"].to_numpy(dtype=float) / ref
    ratio = ratio[np.isfinite(ratio)]
    return float(np.median(ratio)), len(ratio)


def skew_check() -> None:
    """Heterogeneous mixed shots (``skew.csv``), out of sample with the shipped refined roofline."""
    rows = []
    grids = {label: df for label, *_, df in profile_cells()}
    for label, gpu, model, tp, df in profile_cells("skew.csv"):
        scale, matched = skew_scale(df, grids[label])
        mix = df[(df["regime"] == "mixed") & (df["pc"] > 0)]
        mix = mix.iloc[:: max(1, len(mix) // SKEW_SHOTS)]
        pm_apart, pm_one = pricers(gpu.name, model.name, tp)
        t = mix["t_skew_us"].to_numpy(dtype=float) / scale
        apart, one = [], []
        for n, nb, kvs, big, pc, kp in (
            mix[["n", "nb", "kvs", "kv_big", "pc", "kp"]].astype(int).itertuples(index=False)
        ):
            ctx = [big] * nb + [kvs] * (n - nb)
            apart.append(attention_us(pm_apart, [(pc, kp)], ctx))
            one.append(attention_us(pm_one, [(pc, kp)], ctx))
        alpha = mix["alpha"].to_numpy(dtype=float)
        rows.append(
            {
                "cell": label,
                "mixed shots": len(df[df["regime"] == "mixed"]),
                "priced": len(t),
                "scale (matched)": f"{scale:.3f} ({matched})",
                "alpha > 0.5 %": float(np.mean(alpha > 0.5) * 100),
            }
            | _errors("refined, apart", np.array(apart), t)
            | _errors("refined, one kernel", np.array(one), t)
        )
    with pd.option_context("display.width", 250, "display.max_columns", 20):
        print(pd.DataFrame(rows).round(2).to_string(index=False))


def main() -> None:
    rows = []
    for label, gpu, model, tp, df in profile_cells():
        heads, d = model.num_attention_heads // tp, model.head_dim
        slots = gpu.sm_count * ctas_per_sm(gpu.smem_per_sm_kib, d)
        pre = df[(df["n_decode"] == 0) & (df["prefill_chunk"] > 0)].set_index(["prefill_chunk", "kv_prefill"])
        dec = df[(df["prefill_chunk"] == 0) & (df["n_decode"] > 0)].set_index(["n_decode", "kv_decode"])
        mix = df[(df["prefill_chunk"] > 0) & (df["n_decode"] > 0)]
        t = mix["time_us"].to_numpy(dtype=float)
        shots = list(mix[["prefill_chunk", "kv_prefill", "n_decode", "kv_decode"]].astype(int).itertuples(index=False))
        add = np.array(
            [pre["time_us"].get((c, p), np.nan) + dec["time_us"].get((n, k), np.nan) for c, p, n, k in shots]
        )
        span = np.array(
            [makespan_blocks(block_tiles(1, k, d) * n + block_tiles(c, p, d), heads, slots) for c, p, n, k in shots],
            dtype=float,
        )
        pm_apart, pm_one = pricers(gpu.name, model.name, tp)
        apart = np.array([attention_us(pm_apart, [(c, p)], [k] * n) for c, p, n, k in shots])
        one = np.array([attention_us(pm_one, [(c, p)], [k] * n) for c, p, n, k in shots])
        in_sample, coef = fit_line(t, span)
        ok = np.isfinite(add)
        rows.append(
            {"cell": label, "mixed shots": len(t)}
            | _errors("additive", add[ok], t[ok])
            | {"one kernel MAPE %": in_sample, "fixed us": coef[0], "us per tile": coef[1]}
            | _errors("refined, apart", apart, t)
            | _errors("refined, one kernel", one, t)
        )
    with pd.option_context("display.width", 250, "display.max_columns", 20):
        print(pd.DataFrame(rows).round(2).to_string(index=False))


if __name__ == "__main__":
    main()
    skew_check()
    if "--vllm-run" in sys.argv[1:]:
        vllm_run()
