"""Which tiling explains the measured prefill attention? A check of agentreplay.perf.tiles against the profiles.

Run from the project root:  python benchmarks/attention_tiles.py

For every LLMServingSim (perf format, vLLM FlashAttention backend) profile cell in ../shared/measurements, the
prefill-attention points (one chunk after a cached prefix, no decodes) are fitted with two constants,
``t = fixed + per_tile * makespan``, for several tilings: FlashAttention-2's split-KV kernel as vLLM runs it
(64 x 128 tiles at head_dim 128, one CTA per SM on these GPUs; agentreplay.perf.tiles), other tile shapes, two
CTAs per SM, and as a baseline ``t = fixed + per_flop * FLOPs``. Printed: MAPE % of each fit on all points of
the cell (in-sample: every form has the same two constants, so this compares shapes, it does not validate).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agentreplay.perf import GpuSpec, ModelSpec, load_gpu, load_model  # noqa: E402
from agentreplay.perf.tiles import makespan_tiles  # noqa: E402

PROFILES = ROOT.parent / "shared" / "measurements" / "profiles-llmservingsim" / "profiler" / "perf"
GPUS = {"RTX4090": "rtx4090", "RTXPRO6000": "rtxpro6000"}
MODELS = {"Llama-3.1-8B": "llama-3.1-8b", "Qwen3-32B": "qwen3-32b", "Qwen3-30B-A3B-Instruct-2507": "qwen3-30b-a3b"}
#: (label, (kBlockM, kBlockN) or None for the kernel's own, CTAs per SM)
FORMS = (
    ("FA2 split-KV 64x128, 1 CTA/SM (in use)", None, 1),
    ("64x64, 1 CTA/SM", (64, 64), 1),
    ("128x64, 1 CTA/SM", (128, 64), 1),
    ("128x128, 1 CTA/SM", (128, 128), 1),
    ("64x128, 2 CTAs/SM", None, 2),
)


def fit_line(t: np.ndarray, x: np.ndarray) -> tuple[float, np.ndarray]:
    """(MAPE %, [a, b]) of ``t ~ a + b x``, least squares on relative residuals."""
    a = np.c_[np.ones(len(x)), x] / t[:, None]
    coef, *_ = np.linalg.lstsq(a, np.ones(len(t)), rcond=None)
    return float(np.mean(np.abs(a @ coef - 1)) * 100), coef


def profile_cells(name: str = "attention.csv") -> Iterator[tuple[str, GpuSpec, ModelSpec, int, pd.DataFrame]]:
    """(cell label, GPU, model, TP, rows of the cell's ``name`` file) of every perf-format profile cell of a catalog
    GPU and model that has the file; exits with a message when none is found."""
    found = False
    for csv in sorted(PROFILES.glob(f"*/*/*/bf16/tp*/{name}")):
        gpu_dir, model_dir, tp = csv.parts[-6], csv.parts[-4], int(csv.parts[-2][2:])
        if gpu_dir in GPUS and model_dir in MODELS:
            found = True
            yield (
                f"{GPUS[gpu_dir]}/{MODELS[model_dir]}/tp{tp}",
                load_gpu(GPUS[gpu_dir]),
                load_model(MODELS[model_dir]),
                tp,
                pd.read_csv(csv),
            )
    if not found:
        sys.exit(f"no profile with {name} found under {PROFILES}")


def main() -> None:
    rows = []
    for label, gpu, model, tp, df in profile_cells():
        heads, d = model.num_attention_heads // tp, model.head_dim
        df = df[(df["n_decode"] == 0) & (df["prefill_chunk"] > 0)]
        t = df["time_us"].to_numpy(dtype=float)
        pts = list(zip(df["prefill_chunk"].astype(int), df["kv_prefill"].astype(int), strict=True))
        row = {
            "cell": label,
            "points": len(t),
            "FLOPs": fit_line(t, np.array([4.0 * c * (p + c / 2) * heads * d for c, p in pts]))[0],
        }
        for form, shape, per_sm in FORMS:
            span = [makespan_tiles([pt], heads, gpu.sm_count * per_sm, d, shape) for pt in pts]
            row[form] = fit_line(t, np.array(span, dtype=float))[0]
        rows.append(row)
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(pd.DataFrame(rows).round(2).to_string(index=False))


if __name__ == "__main__":
    main()
