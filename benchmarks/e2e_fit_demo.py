"""Synthetic "measured" vLLM runs with a known per-step engine cost, for ``agentreplay calibrate --calibration``.

    python benchmarks/e2e_fit_demo.py OUT_DIR [--fixed-ms 4.0] [--per-seq-us 80]

Writes one ``vllm-run`` folder per cell (``requests.jsonl`` + ``meta.json``), made by the simulator with the given
step cost in place of the catalogue's: Llama-3.1-8B on one H100 at 2, 8 and 20 req/s, and Qwen3-30B-A3B on two
H100s with data + expert parallelism (dp 2, EP) at 8 req/s. Then, e.g.::

    agentreplay calibrate --measured OUT_DIR --calibration '*/llama-3.1-8b/tp1/2rps' \
        --calibration '*/llama-3.1-8b/tp1/20rps'

fits on two cells and prints the error of the two held out; the fitted values should be the ones given here.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from agentreplay.perf import PerfModel, load_gpu, load_model
from agentreplay.perf.stepcost import StepCost
from agentreplay.sim.config import SimConfig
from agentreplay.sim.run import simulate
from validation.e2e.common import single_turn_trace
from validation.e2e.fit import write_vllm_run

CELLS = (
    ("llama-3.1-8b", "meta-llama/Llama-3.1-8B-Instruct", 2, 1, False),
    ("llama-3.1-8b", "meta-llama/Llama-3.1-8B-Instruct", 8, 1, False),
    ("llama-3.1-8b", "meta-llama/Llama-3.1-8B-Instruct", 20, 1, False),
    ("qwen3-30b-a3b", "Qwen/Qwen3-30B-A3B", 8, 2, True),
)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--fixed-ms", type=float, default=4.0)
    ap.add_argument("--per-seq-us", type=float, default=80.0)
    ap.add_argument("--requests", type=int, default=60)
    args = ap.parse_args()
    truth = StepCost(args.fixed_ms, args.per_seq_us)
    gpu = load_gpu("h100-sxm")
    n = args.requests
    for model, hf, rate, dp, ep in CELLS:
        rng = np.random.default_rng(rate)
        trace = single_turn_trace(
            [f"q{i}" for i in range(n)], np.arange(n) / rate, rng.integers(50, 1500, n), rng.integers(20, 300, n), model
        )
        cfg = SimConfig().replace(
            hardware={"gpu": "h100-sxm", "model": model, "dp": dp, "ep": ep},
            cache={"num_gpu_blocks": 3000},
            scheduler={"max_num_seqs": 256, "max_num_batched_tokens": 2048},
            router={"policy": "vllm-dp" if dp > 1 else "least-loaded"},
            workload={"arrival": "trace"},
        )
        perf = PerfModel(gpu, load_model(model), efficiency=truth.apply(gpu.efficiency))
        res = simulate(trace, cfg, perf=perf)
        d = write_vllm_run(
            args.out / f"{model}-dp{dp}-{rate}rps",
            res,
            "NVIDIA H100 80GB HBM3",
            hf,
            dataset_path=f"sharegpt-sps{rate}.jsonl",
        )
        print(f"wrote {d}: {n} requests, true step cost {truth.as_dict()}")


if __name__ == "__main__":
    main()
