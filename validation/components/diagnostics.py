"""Diagnostics of what limits the measured-table pricer on held-out component points, computed from the measured
points themselves (report section "Limits of the table pricer").

**All-reduce across GPU counts.** The 4-GPU all-reduce validates; the 2- and 8-GPU curves (same sizes) calibrate.
Ring all-reduce structure (NCCL; bus bandwidth as in NVIDIA/nccl-tests ``doc/PERFORMANCE.md``: ``busBW = algBW *
2 (n - 1) / n`` with ``algBW = bytes / time``): one all-reduce of ``S`` bytes over ``n`` GPUs moves ``2 (n - 1) / n
* S`` bytes per GPU in ``2 (n - 1)`` steps, so ``t_n(S) = (n - 1) * lat(S) + 2 (n - 1) / n * S / busBW(S)``.
Predictions of the 4-GPU curve from the 2- and 8-GPU curves, per size (:func:`busbw_interp`,
:func:`ring_solve`), are compared with the pricers' global ring fit (one latency and one bus bandwidth per GPU,
the roofline's ``tp_comm``), and with two floors no model of the 2- and 8-GPU curves can beat because they are
fitted to the 4-GPU points themselves: the best constant per size band and the best non-decreasing curve.

**Decode attention in the linear form.** The simulator needs a decode-only iteration to cost ``A(n) + c(n) *
sum_ctx``; :func:`decode_linear_floor` fits ``a_b + c_b * b * ctx`` to *every* measured point of each batch size
(in-sample) and reports its error on the held-out points: what the form itself leaves, before any interpolation.
:func:`decode_beyond_dram` lists the batch sizes whose measured time grows with the context more slowly than
their KV cache can stream from DRAM at the datasheet bandwidth (the table prices those at the DRAM stream,
:func:`agentreplay.perf.table.dram_key_s`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Final

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike
from scipy.optimize import least_squares, nnls

from agentreplay.perf.interp import Grid, isotonic
from agentreplay.perf.table import ATTENTION_ROWS_IN_REFERENCE
from validation.calibration.calibrate import mape
from validation.components.profiles import in_table

SMALL_BYTES: Final = 1 << 20  #: all-reduce sizes below this are reported apart (the latency-bound regime)


def ring_share(n: float) -> float:
    """Bytes each GPU sends per byte reduced in a ring all-reduce over ``n`` GPUs: ``2 (n - 1) / n``."""
    return 2.0 * (n - 1.0) / n


def busbw_interp(nbytes: ArrayLike, t_a: ArrayLike, n_a: int, t_b: ArrayLike, n_b: int, n: int) -> np.ndarray:
    """Seconds of an ``n``-GPU all-reduce at each size from curves over ``n_a`` and ``n_b`` GPUs measured at the
    same sizes: the bus bandwidth ``ring_share(m) * S / t_m`` interpolated linearly in log m (log-log), the time
    ``ring_share(n) * S / busBW_n``. Exact when the bus bandwidth is a power law in the GPU count."""
    s, ta, tb = (np.asarray(v, dtype=float) for v in (nbytes, t_a, t_b))
    bw_a, bw_b = ring_share(n_a) * s / ta, ring_share(n_b) * s / tb
    w = np.log(n / n_a) / np.log(n_b / n_a)
    return ring_share(n) * s / np.exp(np.log(bw_a) + w * (np.log(bw_b) - np.log(bw_a)))


#: How :func:`ring_solve` weighs the two measurements of a size when no non-negative (latency, bandwidth) fits both.
RESIDUALS: Final = ("relative", "absolute", "log")


def ring_solve(
    nbytes: ArrayLike, t_a: ArrayLike, n_a: int, t_b: ArrayLike, n_b: int, n: int, residuals: str = "relative"
) -> np.ndarray:
    """Seconds of an ``n``-GPU all-reduce at each size from the ``n_a``- and ``n_b``-GPU times at that size, with
    ``t_m = (m - 1) * lat + ring_share(m) * S / busBW``: per size, ``(lat, 1 / busBW) >= 0`` solve the two
    measurements; where no non-negative pair fits both (:func:`ring_infeasible`), the least-squares pair under
    ``residuals`` (:data:`RESIDUALS`). Exact on ring data."""
    if residuals not in RESIDUALS:
        raise ValueError(f"residuals={residuals!r}; allowed: {list(RESIDUALS)}")
    s, ta, tb = (np.asarray(v, dtype=float) for v in (nbytes, t_a, t_b))
    out = np.empty(len(s))
    for i in range(len(s)):
        m = np.array([[n_a - 1.0, ring_share(n_a) * s[i]], [n_b - 1.0, ring_share(n_b) * s[i]]])
        t = np.array([ta[i], tb[i]])
        if residuals == "log":

            def resid(p: np.ndarray, m: np.ndarray = m, t: np.ndarray = t) -> np.ndarray:
                return np.log(m @ np.exp(p)) - np.log(t)

            x = np.exp(least_squares(resid, np.log([t[0] / 2, t[0] / (2 * m[0, 1])])).x)
        else:
            scale = t if residuals == "relative" else np.ones(2)
            x, _ = nnls(m / scale[:, None], t / scale)
        out[i] = (n - 1.0) * x[0] + ring_share(n) * s[i] * x[1]
    return out


def ring_infeasible(nbytes: ArrayLike, t_a: ArrayLike, n_a: int, t_b: ArrayLike, n_b: int) -> np.ndarray:
    """True at sizes where the exact per-size ring solution has a negative latency or bandwidth."""
    s, ta, tb = (np.asarray(v, dtype=float) for v in (nbytes, t_a, t_b))
    det = (n_a - 1.0) * ring_share(n_b) - (n_b - 1.0) * ring_share(n_a)  # times s
    lat = (ta * ring_share(n_b) - tb * ring_share(n_a)) / det
    inv_bw = ((n_a - 1.0) * tb - (n_b - 1.0) * ta) / (det * s)
    return (lat < 0) | (inv_bw < 0)


def mape_best_constant(measured: ArrayLike) -> tuple[float, float]:
    """``(c, MAPE %)`` of the constant minimising mean |c / m - 1|: the median of ``m`` weighted by ``1 / m``."""
    m = np.sort(np.asarray(measured, dtype=float))
    w = 1.0 / m
    c = float(m[np.searchsorted(np.cumsum(w), w.sum() / 2)])
    return c, mape(c / m - 1)


def allreduce_limits(
    allreduce: pd.DataFrame, priced: pd.DataFrame, n_val: int = 4, n_cal: tuple[int, int] = (2, 8)
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(MAPE table, shape table) of the ``n_val``-GPU all-reduce per GPU. ``allreduce``: rows of
    :func:`validation.components.profiles.allreduce_points` (+ gpu); ``priced``: the refined roofline's ``all_reduce_s``
    rows (``cell_id, bytes, measured, simulated``). MAPE per method for sizes below / from :data:`SMALL_BYTES`."""
    rows, shape = [], []
    for g, d in allreduce.groupby("gpu"):
        p = d.pivot_table(index="bytes", columns="tp", values="measured_s")
        if not {n_val, *n_cal} <= set(p.columns):
            continue
        p = p[[n_val, *n_cal]].dropna()
        s = p.index.to_numpy(dtype=float)
        t = p[n_val].to_numpy()
        ta, tb = p[n_cal[0]].to_numpy(), p[n_cal[1]].to_numpy()
        small = s < SMALL_BYTES
        pr = priced[priced["cell_id"].isin(d.loc[d["tp"] == n_val, "cell_id"])].set_index("bytes")["simulated"]
        preds = {
            "rooflines' ring fit (one latency, one bus bandwidth per GPU)": pr.reindex(p.index).to_numpy(),
            f"per size: bus bandwidth log-log in GPU count, from {n_cal[0]} and {n_cal[1]} GPUs": busbw_interp(
                s, ta, n_cal[0], tb, n_cal[1], n_val
            ),
            **{
                f"per size: ring latency + bandwidth from {n_cal[0]} and {n_cal[1]} GPUs ({r} residuals)": ring_solve(
                    s, ta, n_cal[0], tb, n_cal[1], n_val, r
                )
                for r in RESIDUALS
            },
            f"floor: best non-decreasing curve through the {n_val}-GPU points themselves": np.exp(isotonic(np.log(t))),
            f"floor: best constant below 1 MiB, fitted to the {n_val}-GPU points themselves": np.where(
                small, mape_best_constant(t[small])[0] if small.any() else np.nan, np.nan
            ),
        }
        for name, v in preds.items():
            rows.append(
                {
                    "gpu": g,
                    "method": name,
                    "< 1 MiB n": int(small.sum()),
                    "< 1 MiB MAPE %": mape(v[small] / t[small] - 1),
                    ">= 1 MiB n": int((~small).sum()),
                    ">= 1 MiB MAPE %": mape(v[~small] / t[~small] - 1),
                    "all MAPE %": mape(v / t - 1),
                }
            )
        drops = t[1:] / t[:-1] - 1
        bad = ring_infeasible(s, ta, n_cal[0], tb, n_cal[1])
        shape.append(
            {
                "gpu": g,
                f"{n_val}-GPU us below 1 MiB (min / median / max)": "{:.0f} / {:.0f} / {:.0f}".format(
                    *(np.percentile(t[small], [0, 50, 100]) * 1e6)
                ),
                f"{n_cal[0]}-GPU us below 1 MiB (min / median / max)": "{:.0f} / {:.0f} / {:.0f}".format(
                    *(np.percentile(ta[small], [0, 50, 100]) * 1e6)
                ),
                f"sizes below 1 MiB where {n_val} GPUs beat {n_cal[0]}": f"{int((t < ta)[small].sum())} "
                f"of {int(small.sum())}",
                "sizes without a non-negative ring solution": f"{int(bad.sum())} of {len(s)}",
                "next-size drops > 30%": int((drops < -0.3).sum()),
                "largest next-size drop %": float(drops.min() * 100),
            }
        )
    out = pd.DataFrame(rows)
    return out, pd.DataFrame(shape)


def decode_linear_floor(full: pd.DataFrame, table_ops: pd.DataFrame) -> pd.DataFrame:
    """Per GPU with decode-attention profiles: the table pricer's held-out decode MAPE (``table_ops``: its
    ``attention_decode`` rows with ``role`` and ``predicted_s``) next to the in-sample floor of the linear form:
    ``a_b + c_b * b * ctx`` fitted (relative least squares, ``a, c >= 0``) to all measured points of each batch
    size of the cell (``full``: op_points without subsampling), judged on the same held-out points."""
    rows = []
    val = table_ops[(table_ops["group"] == "attention_decode") & (table_ops["role"] == "fidelity")]
    for g, v in val.groupby("gpu"):
        floor = []
        for cid, vc in v.groupby("cell_id"):
            f = full[(full["cell_id"] == cid) & (full["group"] == "attention_decode")]
            coef = {}
            for b, fb in f.groupby("batch_size"):
                t = fb["measured_s"].to_numpy()
                m = np.c_[np.ones(len(fb)), b * fb["context_tokens"].to_numpy(dtype=float)]
                coef[b] = nnls(m / t[:, None], np.ones(len(t)))[0]
            a = np.array([coef[b][0] for b in vc["batch_size"]])
            c = np.array([coef[b][1] for b in vc["batch_size"]])
            pred = a + c * vc["batch_size"].to_numpy() * vc["context_tokens"].to_numpy()
            floor.append(np.abs(pred / vc["measured_s"].to_numpy() - 1))
        rows.append(
            {
                "gpu": g,
                "held-out points": len(v),
                "table pricer MAPE %": mape(v["predicted_s"] / v["measured_s"] - 1),
                "linear form fitted to every point of each batch size, MAPE %": mape(np.concatenate(floor)),
            }
        )
    return pd.DataFrame(rows)


def decode_beyond_dram(full: pd.DataFrame, dram_s: dict[str, float], peak_bps: dict[str, float]) -> pd.DataFrame:
    """Decode-attention rows of ``full`` (op_points without subsampling, with ``gpu``) whose growth with the
    context beats the datasheet memory bandwidth ``peak_bps[gpu]``: per (cell, batch size ``b``), the least-squares
    slope ``s`` of time against context over the contexts of at least 1/8 of the longest (where the KV read
    dominates), against the DRAM stream ``b * dram_s[cell_id]`` (seconds per key per layer at the datasheet
    bandwidth, :func:`agentreplay.perf.table.dram_key_s`: the floor the table applies). A curve that does not
    rise over that range (time not resolving the KV read, e.g. a small KV per rank) is no evidence either way and
    is left out. One row per flagged (cell, batch size)."""
    rows = []
    dec = full[full["group"] == "attention_decode"]
    for (cid, b), d in dec.groupby(["cell_id", "batch_size"]):
        d = d[d["context_tokens"] >= d["context_tokens"].max() / 8]
        if len(d) < 2 or cid not in dram_s:
            continue
        d = d.sort_values("context_tokens")
        t = d["measured_s"].to_numpy(dtype=float)
        slope = np.polyfit(d["context_tokens"].to_numpy(dtype=float), t, 1)[0]
        gpu = str(d["gpu"].iloc[0])
        if slope <= 0 or t[-1] <= t[0]:
            continue
        rate = peak_bps[gpu] * b * dram_s[cid] / slope
        if rate > peak_bps[gpu]:
            rows.append(
                {
                    "gpu": gpu,
                    "cell_id": cid,
                    "batch size": int(b),
                    "contexts": f"{d['context_tokens'].min():,} - {d['context_tokens'].max():,}",
                    "implied GB/s": rate / 1e9,
                    "datasheet GB/s": peak_bps[gpu] / 1e9,
                    "ratio": rate / peak_bps[gpu],
                }
            )
    return pd.DataFrame(rows)


def grid_rule_cv(full: pd.DataFrame, references: dict[str, Callable[[float, float], float]]) -> pd.DataFrame:
    """How the prefill-attention grid's rules predict the table's *own* points (the calibration side of the table
    protocol; no held-out point enters), per GPU: each inner token row held out and predicted from the other
    rows, between rows linear in log tokens or in log reference (``ATTENTION_ROWS_IN_REFERENCE`` of
    agentreplay.perf.table says which is in use, chosen by :func:`validation.protocol.crossval.table_cv`); the
    largest row held out and
    extrapolated from the rest, scaled by the reference (the rule in use) or as a power law in tokens through the
    two rows below it. ``full``: op_points without subsampling (with ``gpu``); ``references[cell_id]``: the
    cell's per-layer prefill-attention reference ``(tokens, context) -> seconds``."""
    errs: dict[tuple[str, str, str], list[float]] = {}
    pf = full[(full["group"] == "attention_prefill") & (full["probe"] == "attn_prefill")]
    for cid, f in pf.groupby("cell_id"):
        if cid not in references:
            continue
        ref, gpu = references[cid], str(f["gpu"].iloc[0])
        pts = f[in_table(f)]
        rows = np.unique(pts["num_tokens"])
        for k in range(1, len(rows)):
            rest, held = pts[pts["num_tokens"] != rows[k]], pts[pts["num_tokens"] == rows[k]]
            args = (rest["num_tokens"], rest["context_tokens"], rest["measured_s"], ref)
            ctx, meas = held["context_tokens"].to_numpy(dtype=float), held["measured_s"].to_numpy(dtype=float)
            n = float(rows[k])
            if k < len(rows) - 1:
                kind = "interpolate an inner token row"
                use = " (in use)" if ATTENTION_ROWS_IN_REFERENCE else ""
                rules = {
                    "log tokens" + ("" if use else " (in use)"): Grid(*args),
                    "log reference" + use: Grid(*args, reference_between_rows=True),
                }
                preds = {r: np.array([g.at(n, c, ref) for c in ctx]) for r, g in rules.items()}
            else:
                kind = "extrapolate the largest token row"
                g = Grid(*args)
                preds = {"reference-scaled (in use)": np.array([g.at(n, c, ref) for c in ctx])}
                if k >= 2:
                    lo, hi = float(rows[k - 2]), float(rows[k - 1])
                    t_lo = np.array([g.at(lo, c, ref) for c in ctx])
                    t_hi = np.array([g.at(hi, c, ref) for c in ctx])
                    preds["power law in tokens"] = t_hi * (n / hi) ** (np.log(t_hi / t_lo) / math.log(hi / lo))
            for r, pr in preds.items():
                errs.setdefault((gpu, kind, r), []).extend(np.abs(pr / meas - 1).tolist())
    return pd.DataFrame(
        [
            {"gpu": g, "held out": kind, "rule": r, "points": len(v), "MAPE %": 100 * float(np.mean(v))}
            for (g, kind, r), v in sorted(errs.items())
        ]
    )


def _chosen_elsewhere(rows: list[dict[str, Any]], gpu: str) -> str:
    """Which all-reduce method a choice made on the other GPUs' 4-GPU curves picks (lowest mean MAPE over them;
    the floors, fitted to the 4-GPU points, are not candidates), and what it gives on ``gpu``: a method choice
    that does not look at ``gpu``'s own validation points."""
    cands = [x for x in rows if not x["method"].startswith("floor") and np.isfinite(x["all MAPE %"])]
    others = {
        x["method"]: [y["all MAPE %"] for y in cands if y["method"] == x["method"] and y["gpu"] != gpu] for x in cands
    }
    others = {m: v for m, v in others.items() if v}
    if not others:
        return "The rooflines keep the global ring fit (no other GPU's 4-GPU curve to choose a method on)."
    best = min(others, key=lambda m: float(np.mean(others[m])))
    here = next(x["all MAPE %"] for x in cands if x["method"] == best and x["gpu"] == gpu)
    kept = "the global ring fit the rooflines use" if best.startswith("rooflines'") else f"'{best}'"
    return (
        f"Chosen on the other GPUs' 4-GPU curves instead of this one's (mean MAPE "
        f"{np.mean(others[best]):.1f}% there), the method is {kept}, {here:.1f}% here. The rooflines keep the "
        "global ring fit: the simulator's form (one latency and one bus bandwidth per GPU, defined at every TP "
        "degree), where the per-size forms need measured 2- and 8-GPU times at each size."
    )


def _flat(t: pd.DataFrame) -> pd.DataFrame:
    """Join a two-level column index into single ``"level 1: level 2"`` names."""
    t.columns = [f"{a}: {b}" for a, b in t.columns]
    return t


def limits_markdown(s: dict[str, Any], md: Callable[..., str]) -> str:
    """Report section: where the table's tunables were chosen (``s["protocol"]``) and what no
    interpolation of the table can fix (``s["table_limits"]``, from :func:`allreduce_limits` and
    :func:`decode_linear_floor`); ``md`` renders a DataFrame as a Markdown table."""
    lim = s.get("table_limits", {})
    out = []
    if s.get("protocol", {}).get("cv"):
        out += [
            "The table's two interpolation choices (GEMM tile, prefill-attention row rule) are chosen by "
            "cross-validation inside the calibration cells: section 'Constants and where they come from'.",
            "",
        ]
    if lim.get("grid_rules"):
        rules = pd.DataFrame(lim["grid_rules"]).pivot_table(index="gpu", columns=["held out", "rule"], values="MAPE %")
        out += [
            "The prefill-attention rules judged on the tables' own points instead (each inner token row, and the "
            "largest, held out of a table built from its other rows; no validation point is used). A held-out "
            "row's neighbours here are 4 grid rows apart; a validation point's are 2 apart (every other grid "
            "row is in the table), and a shipped table has every grid row. MAPE % per GPU:",
            "",
            md(_flat(rules.round(2)).reset_index(), ".2f"),
            "",
        ]
    if lim.get("allreduce"):
        out += [
            "4-GPU all-reduce (validation) from the 2- and 8-GPU curves (calibration), MAPE % by size band. The "
            "plain and refined rooflines use the ring fit of the first row (the table pricer instead "
            "interpolates the measured curve of the same GPU count, judged on its held-out sizes); the per-size "
            "ring forms use the structure "
            "t_n = (n - 1) lat + 2 (n - 1) / n * bytes / busBW (bus bandwidth as in nccl-tests "
            "doc/PERFORMANCE.md); the floors are fitted to the 4-GPU points themselves, so no model of the "
            "2- and 8-GPU curves can do better than them:",
            "",
            md(pd.DataFrame(lim["allreduce"]), ".1f"),
            "",
            "Shape of the measured curves (medians per size):",
            "",
            md(pd.DataFrame(lim["allreduce_shape"]), ".1f"),
            "",
        ]
        for r in lim["allreduce_shape"]:
            rows = [x for x in lim["allreduce"] if x["gpu"] == r["gpu"]]
            fit = next(x for x in rows if x["method"].startswith("rooflines'"))
            ring = [x["all MAPE %"] for x in rows if x["method"].startswith("per size: ring")]
            out.append(
                f"- {r['gpu']}: the exact per-size ring solution has a negative latency or bandwidth at "
                f"{r['sizes without a non-negative ring solution']} sizes, so the per-size ring prediction "
                f"depends on how the 2- and 8-GPU times are weighed ({min(ring):.1f}-{max(ring):.1f}% over "
                f"the three residual choices) while the global ring fit gives {fit['all MAPE %']:.1f}%; below "
                f"1 MiB the 4-GPU medians span {r['4-GPU us below 1 MiB (min / median / max)']} us, faster "
                f"than 2 GPUs at {r['sizes below 1 MiB where 4 GPUs beat 2']} sizes, with "
                f"{r['next-size drops > 30%']} drops of more than 30% to the next size "
                f"(largest {r['largest next-size drop %']:.0f}%). " + _chosen_elsewhere(lim["allreduce"], r["gpu"])
            )
        out.append("")
    if lim.get("decode_linear"):
        out += [
            "Decode attention: the simulator prices a decode-only iteration of n sequences as A(n) + c(n) * "
            "sum_ctx. The same form fitted to every measured point of each batch size (in-sample, not a "
            "prediction) is the best it can do on the held-out points:",
            "",
            md(pd.DataFrame(lim["decode_linear"])),
            "",
        ]
    for r in lim.get("decode_beyond_dram", []):
        out.append(
            f"- {r['gpu']}, batch {r['batch size']}: over contexts {r['contexts']} the measured time "
            f"grows as if the KV cache streamed at {r['implied GB/s']:,.0f} GB/s, {r['ratio']:.2f}x "
            f"the datasheet {r['datasheet GB/s']:,.0f} GB/s: the profile read it from L2, which a served "
            "model (every layer's weights stream between two reads of the same KV) does not; the table "
            "prices that slope at the DRAM stream instead."
        )
    return "\n".join(out).rstrip()
