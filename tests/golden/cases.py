"""The golden cases and the canonical digests of their outputs (shared by the test and ``regen``).

A case is one ``agentreplay simulate`` command line (run in process through the CLI, so the whole path from the
trace files to the written output folder is covered) on the first :data:`PROGRAMS` programs of the bundled
``datasets/swebench-verified`` trace: every preset of :mod:`agentreplay.policy.presets` on one small two-instance
cluster with a tight KV pool and the decision log on, plus a few cases for mechanisms no preset reaches (KV
migration between instances, a CXL tier, the step-by-step decode paths, one instance under preemption pressure, the
refined and table pricers with the deployment kernels, data + expert parallelism in lockstep).

Digest of an output folder (:func:`digest_run`):

- ``turns`` / ``programs`` / ``instances.parquet``: rows sorted by the table's keys (:data:`KEYS`), every column
  normalised (integers to int64, floats to float64, booleans to bool, anything else to its ``str``) and hashed
  column by column (SHA-256 of the values' bytes), with the row count and each column's normalised kind; a
  changed number changes its column's digest, and the failure names the table and column;
- ``summary.json``: kept whole (it is small and a diff reads well), minus :data:`SUMMARY_EXCLUDED`;
- ``config.toml`` and ``decisions.jsonl``: SHA-256 of the file's bytes (and the decision count).

Floats are hashed bit for bit: the simulator is deterministic and its outputs are promised byte-identical across
runs and across the compiled / pure-Python builds (``tests/sim/test_native.py``), so any change is a behaviour
change.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Final

import numpy as np
import pandas as pd

ROOT: Final = Path(__file__).resolve().parents[2]
DATASET: Final = ROOT / "datasets" / "swebench-verified"
EXPECTED: Final = Path(__file__).resolve().parent / "expected.json"
EXPECTED_VALIDATION: Final = Path(__file__).resolve().parent / "expected_validation.json"

#: Programs of the bundled trace replayed per case (the first ones, in trace order).
PROGRAMS: Final = 60

#: The cluster every preset runs on: two instances (the router matters), a pool tight enough for preemptions and
#: evictions, 16 programs in flight, every decision logged.
BASE: Final = [
    "--gpu",
    "h100-sxm",
    "--model",
    "llama-3.1-8b",
    "--instances",
    "2",
    "--concurrency",
    "16",
    "--num-gpu-blocks",
    "6000",
    "--max-programs",
    str(PROGRAMS),
    "--decision-log",
]

#: Cases beyond the presets: (extra CLI arguments, TOML configuration text or None). The configuration file is
#: read first, the preset and the options override it (``agentreplay.cli.config_build.build_config``).
EXTRA: Final[dict[str, tuple[list[str], str | None]]] = {
    # KV pulled from the previous instance over the fabric when affinity breaks (Continuum + migration)
    "migrate": (
        ["--preset", "continuum", "--instances", "3", "--inter-instance-gbps", "50"],
        "[router]\naffinity_max_outstanding = 6\n",
    ),
    # LMCache-style offload to a CXL tier behind DRAM
    "cxl": (["--preset", "lmcache-offload", "--dram-gib", "2", "--cxl-gib", "16"], None),
    # the step-by-step decode paths (no cohort, no fast-forward), infercept retention
    "stepwise": (["--preset", "infercept"], "[scheduler]\nfast_decode = false\nlazy_decode = false\n"),
    # one instance under preemption pressure, a TTL pin released on pressure, vLLM's max_model_len rejection
    "tight": (
        [
            "--preset",
            "agent-affinity",
            "--instances",
            "1",
            "--num-gpu-blocks",
            "3000",
            "--ttl",
            "20",
            "--max-model-len",
            "40000",
        ],
        None,
    ),
    # the refined roofline with vLLM's deployment kernels (CUDA-graph padding, custom all-reduce) on TP 2, fp8 KV
    "refined": (
        ["--preset", "autellix", "--perf", "refined", "--deployment-kernels", "--tp", "2", "--kv-cache-dtype", "fp8"],
        None,
    ),
    # the measured-table pricer (Vidur's H100 tables and all-reduce curves)
    "table": (["--preset", "sglang", "--perf", "table", "--tp", "2"], None),
    # data + expert parallelism: DP ranks stepping in lockstep (MoE), vLLM's DP balancer
    "dp-ep": (["--model", "qwen3-30b-a3b", "--instances", "1", "--dp", "2", "--ep", "--num-gpu-blocks", "12000"], None),
}

#: Sort keys of each output table (rows are compared in this order whatever order they were written in).
KEYS: Final = {"turns": ["program_id", "turn_idx"], "programs": ["program_id"], "instances": ["time_s", "instance"]}

#: summary.json fields left out of the digest, with the reason. Nothing in the summary reads the host clock or the
#: package version today; ``error_bands`` is read from the committed validation report (``--error-bands none``
#: makes it empty anyway), which the lead regenerates independently of the simulator.
SUMMARY_EXCLUDED: Final = {"error_bands": "read from the packaged validation report, not simulated"}

#: Files of an output folder that are not digested: the marker only says agentreplay wrote the folder.
FILES_EXCLUDED: Final = {".agentreplay-output": "output-folder marker (written_by / kind), no simulated value"}


def cases() -> dict[str, tuple[list[str], str | None]]:
    """Every case: ``preset:NAME`` for each preset, then :data:`EXTRA`."""
    from agentreplay.policy.presets import PRESETS

    out: dict[str, tuple[list[str], str | None]] = {f"preset:{p}": (["--preset", p], None) for p in sorted(PRESETS)}
    out.update(EXTRA)
    return out


def _column(s: pd.Series) -> tuple[str, str]:
    """(normalised kind, SHA-256) of one column's values."""
    if pd.api.types.is_bool_dtype(s):
        kind, data = "bool", s.to_numpy(dtype=bool).tobytes()
    elif pd.api.types.is_integer_dtype(s) and not s.isna().any():
        kind, data = "int", s.to_numpy(dtype=np.int64).tobytes()
    elif pd.api.types.is_float_dtype(s) or pd.api.types.is_integer_dtype(s):
        a = s.to_numpy(dtype=np.float64, na_value=np.nan)
        a = np.where(np.isnan(a), np.nan, a)  # one NaN bit pattern
        kind, data = "float", a.tobytes()
    else:
        kind, data = "str", "\x1f".join("\x00" if v is None else str(v) for v in s.tolist()).encode()
    return kind, hashlib.sha256(data).hexdigest()


def digest_table(df: pd.DataFrame, keys: list[str]) -> dict[str, Any]:
    """Rows, and per column (in name order) its normalised kind and values' digest, rows sorted by ``keys``."""
    df = df.sort_values(keys, kind="stable").reset_index(drop=True)
    return {"rows": len(df), "columns": {c: "{}:{}".format(*_column(df[c])) for c in sorted(df.columns)}}


def _strip(summary: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in summary.items() if k not in SUMMARY_EXCLUDED}


def digest_run(out: Path) -> dict[str, Any]:
    """The canonical digest of one ``simulate`` output folder (see the module docstring)."""
    files = {p.name for p in out.iterdir()} - set(FILES_EXCLUDED)
    d: dict[str, Any] = {"files": sorted(files)}
    for name, keys in KEYS.items():
        d[name] = digest_table(pd.read_parquet(out / f"{name}.parquet"), keys)
    d["summary"] = _strip(json.loads((out / "summary.json").read_text()))
    d["config.toml"] = hashlib.sha256((out / "config.toml").read_bytes()).hexdigest()
    if (out / "decisions.jsonl").exists():
        raw = (out / "decisions.jsonl").read_bytes()
        d["decisions.jsonl"] = {"lines": raw.count(b"\n"), "sha256": hashlib.sha256(raw).hexdigest()}
    return d


def run_case(name: str, work: Path) -> dict[str, Any]:
    """Run case ``name`` through the CLI into ``work / name`` and digest its output folder."""
    from typer.testing import CliRunner

    from agentreplay.cli import app

    args, toml = cases()[name]
    safe = name.replace(":", "-")
    work.mkdir(parents=True, exist_ok=True)
    cmd = [
        "simulate",
        "--trace",
        str(DATASET),
        "--out",
        str(work / safe),
        "--quiet",
        "--error-bands",
        "none",
        *BASE,
        *args,
    ]
    if toml is not None:
        (work / f"{safe}.toml").write_text(toml)
        cmd += ["--config", str(work / f"{safe}.toml")]
    res = CliRunner().invoke(app, cmd)
    if res.exit_code != 0:
        raise RuntimeError(f"golden case {name} failed ({' '.join(cmd)}): {res.output}{res.exception!r}")
    return {"command": [*BASE, *args], "config": toml, "digest": digest_run(work / safe)}


# ---------------------------------------------------------------------------------------------- validation
def validation_digest() -> dict[str, Any]:
    """Digests of the validation computations that take seconds, not minutes (needs ``../shared``): the component
    error rows of every profile cell (``validation.validate.component_rows``: the performance model against the
    measured operators, layers, Splitwise iterations and all-reduce curves) and the RTX 4090 vLLM run replayed
    with each end-to-end pricer (``validation.e2e.vllm.vllm_run``). The whole report is compared by regenerating
    ``reports/validation`` (``agentreplay validate --out reports/validation``) and diffing it."""
    from validation.calibration import calibrate as K
    from validation.catalog import PACKAGED
    from validation.e2e.common import E2E_PRICERS
    from validation.e2e.vllm import vllm_run
    from validation.measured import load
    from validation.validate import component_rows

    measured = load(None, defaults=True)
    tables = {n: measured.table(n) for n in ("cells", "component", "requests", "programs", "metrics")}
    comp, ops, skipped = component_rows(measured, PACKAGED, K.component_data(measured))
    out: dict[str, Any] = {
        # rows sorted by every input column (all but the computed ones)
        "component_errors": digest_table(comp, sorted(set(comp.columns) - {"simulated"})),
        "component_ops": digest_table(ops, sorted(set(ops.columns) - {"predicted_s", "rel_error"})),
        "skipped": sorted(map(list, skipped)),
    }
    cells = tables["cells"]
    for _, cell in cells[cells["source"] == "vllm-run"].sort_values("cell_id").iterrows():
        for pricer in E2E_PRICERS:
            rows, _ = vllm_run(cell, tables, PACKAGED, pricer)
            out[f"{cell['cell_id']} [{pricer}]"] = {r["metric"]: [r["measured"], r["simulated"]] for r in rows}
    return json.loads(json.dumps(out, default=str))
