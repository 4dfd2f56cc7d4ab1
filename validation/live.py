"""The live-engine cell group: simulator vs a real engine driven with the same trajectories.

``benchmarks/vllm_cpu/validate.py`` runs a real vLLM (CPU build), replays a subset of the bundled SWE-bench
Verified programs against it with ``agentreplay drive``, simulates the same cell with the engine's block count,
limits, admission rule and a pricer fitted on the engine's own profile, and writes the comparison as JSON
(``{"cell": ..., "engine": ..., "comparison": {"rows": {metric: {"real", "sim", "err"}}}}``). This module turns
such files into rows of the validation report (source ``live-<engine>``, role validation), so every number in the
report still comes from data: the committed ``reports/live/*.json`` are those runs' outputs.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

#: metrics of the comparison JSON that are rows of the report (``turns`` is a consistency check, not a metric)
METRICS = ("jct_mean_s", "jct_p50_s", "jct_p90_s", "ttft_mean_s", "tpot_mean_s", "makespan_s", "cached_tokens",
           "preemptions")


def rows(paths: list[Path]) -> pd.DataFrame:
    """Error rows (validation module columns) from live comparison JSON files; unreadable files raise."""
    out = []
    for p in paths:
        try:
            data = json.loads(Path(p).read_text())
            cell, engine, comp = data["cell"], data["engine"], data["comparison"]["rows"]
        except (OSError, ValueError, KeyError) as exc:
            raise ValueError(f"{p}: not a live comparison file ({exc})") from exc
        cell_id = (f"live-vllm-cpu/{data.get('preset', 'cell')}/{cell['programs']}prog-x{cell['concurrency']}"
                   f"-tok{cell['token_scale']}-blocks{cell['num_gpu_blocks']}")
        note = (f"vLLM {engine.get('version', '?')} CPU build, tiny dummy Llama; {cell['programs']} programs, tokens "
                f"x{cell['token_scale']}, tool gaps x{cell['tool_scale']}, {cell['concurrency']} in flight, "
                f"{cell['num_gpu_blocks']} blocks of {cell['block_size']}, reserve_full_isl="
                f"{cell.get('reserve_full_isl', True)}")
        for metric in METRICS:
            if metric in comp and comp[metric]["real"]:
                out.append({"source": "live-vllm-cpu", "cell_id": cell_id, "gpu": "cpu", "model": "tiny-llama",
                            "dtype": "bf16", "tp": 1, "metric": metric, "measured": float(comp[metric]["real"]),
                            "simulated": float(comp[metric]["sim"]), "role": "validation", "note": note})
    return pd.DataFrame(out)


def default_paths() -> list[Path]:
    """``reports/live/*.json`` under the working directory, if any."""
    d = Path("reports") / "live"
    return sorted(d.glob("*.json")) if d.is_dir() else []
