"""How one inference-perf run's records become its deployment, workload, replayability and cells (the rules are
those of :mod:`collectors.measured.inference_perf`, whose collector gathers the records)."""

from __future__ import annotations

import math
import re
from typing import Any, Final

from collectors.base import BadInput
from collectors.measured.common import cell, normalize_gpu

SOURCE: Final = "inference-perf"
#: The campaign's launch template (campaign-config-notes.md, values.yaml): used where no file records a field.
TEMPLATE: Final = {
    "max_model_len": 4096,
    "max_num_batched_tokens": 2048,
    "max_num_seqs": 128,
    "gpu_mem_util": 0.9,
    "hardware": "H100",
    "engine_version": "0.15.1",
}
#: Workload presets by label (campaign-config-notes.md): stages, S / Q / O tokens.
PRESETS: Final = {
    "general": ([(8.0, 600.0), (20.0, 600.0)], (100, 447, 248)),
    "codegen": ([(5.0, 600.0), (10.0, 600.0)], (100, 466, 247)),
    "roleplay": ([(6.0, 1200.0)], (150, 600, 251)),
    "reasoning": ([(4.0, 1200.0)], (100, 934, 1448)),
    "general-lite": ([(2.5, 600.0), (6.0, 600.0)], (100, 447, 248)),
    "reasoning-lite": ([(1.0, 1200.0)], (100, 934, 1448)),
}
#: inference-perf's SharedPrefix defaults (num_groups = num_prompts_per_group = 10), what the 16 runs that record
#: their resolved profile ran while their profiles set the aliases num_unique_system_prompts / ..._per_system_prompt
RESOLVED_DEFAULT_GROUPS: Final = (10, 10)


def stage_key(stage: str | int) -> str:
    return "run" if stage == -1 else (f"stage{stage}" if isinstance(stage, int) else str(stage))


def _label(run: dict[str, Any]) -> str | None:
    names = [run["name"], *run["aliases"]]
    for n in names:  # the longest preset name in the run's name ("general-lite" before "general")
        for preset in sorted(PRESETS, key=len, reverse=True):
            if re.search(rf"-{re.escape(preset)}(?:-|$)", n):
                return preset
    return run.get("label") if isinstance(run.get("label"), str) else None


def resolve(run: dict[str, Any]) -> dict[str, Any]:
    """The run's deployment and workload with the source of every field, template / preset values as assumed."""
    assumed: dict[str, str] = {}
    label = _label(run)
    out: dict[str, Any] = {"label": label}
    for field in ("max_model_len", "max_num_batched_tokens", "max_num_seqs", "gpu_mem_util", "hardware"):
        v = run.get(field, run.get(f"table_{field}"))
        if v is None:
            v = TEMPLATE[field]
            assumed[field] = f"campaign launch template {v}"
        out[field] = v
    tp = run.get("tp", run.get("table_tp"))
    if tp is None or (isinstance(tp, float) and math.isnan(tp)):
        raise BadInput(f"run {run['name']}: tensor parallel size recorded nowhere")
    out["tp"] = int(tp)
    model = run.get("model_raw")
    if not isinstance(model, str):
        raise BadInput(f"run {run['name']}: model recorded nowhere")
    out["model_raw"] = model
    prec = run.get("precision", run.get("table_precision"))
    out["dtype"] = str(prec).lower() if isinstance(prec, str) else ("fp8" if "fp8" in model.lower() else None)
    if out["dtype"] is None:
        out["dtype"], assumed["dtype"] = "fp16", "not recorded: the checkpoint's float16 assumed"
    off = run.get("cpu_offload", run.get("table_cpu_offload"))
    out["cpu_offload"] = None if off is None or (isinstance(off, float) and math.isnan(off)) else bool(off)
    for field in ("total_kv_blocks", "cpu_kv_blocks"):
        v = run.get(field)
        out[field] = None if v is None or (isinstance(v, float) and math.isnan(v)) else int(v)
    stages, sp = run.get("stages"), run.get("shared_prefix")
    if stages is None or sp is None:
        if label not in PRESETS:
            raise BadInput(f"run {run['name']}: no workload recorded and no preset label in its name")
        pst, (s, q, o) = PRESETS[label]
        stages = stages or pst
        sp = sp or {
            "system_prompt_len": s,
            "question_len": q,
            "output_len": o,
            "num_groups": None,
            "num_prompts_per_group": None,
            "multi_turn_flag": False,
            "keys": "preset",
        }
        assumed["workload"] = f"preset {label!r} by the run's label (campaign-config-notes.md)"
    out["stages"] = [list(s) for s in stages]
    groups = (sp["num_groups"], sp["num_prompts_per_group"])
    if not run.get("groups_resolved"):
        how = "not in the profile" if None in groups else f"written as {groups[0]} x {groups[1]}"
        assumed["prompt_pool"] = (
            f"{RESOLVED_DEFAULT_GROUPS[0]} x {RESOLVED_DEFAULT_GROUPS[1]} single-turn prompts ({how}): what the "
            "16 runs that record their resolved profile ran (inference-perf ignored the alias keys and the "
            "multi-turn flag)"
        )
        groups = RESOLVED_DEFAULT_GROUPS
    out["shared_prefix"] = {**sp, "num_groups": int(groups[0]), "num_prompts_per_group": int(groups[1])}
    out["arrivals"] = run.get("arrivals") or "constant"
    out["workload_source"] = run.get("workload_source") or assumed.get("workload", "")
    out["assumed"] = assumed
    out["replayable"], out["not_replayable"] = _replayable(run)
    return out


def _replayable(run: dict[str, Any]) -> tuple[bool, str]:
    for stage, info in sorted((run.get("stage_info") or {}).items(), key=lambda kv: str(kv[0])):
        if info.get("failures"):
            return False, (
                f"overloaded: {info['failures']} of {info['failures'] + info['successes']} requests failed in "
                f"stage {stage} (aggregates cover survivors only)"
            )
        req, got = info.get("requested_rate"), info.get("achieved_rate")
        if req and got and got < 0.95 * req:
            return False, f"overloaded: stage {stage} achieved {got:.2f} of {req:.2f} requests/s"
    for stage, vals in run["measured"].items():
        ttft, e2e = vals.get("ttft_mean_s"), vals.get("e2e_mean_s")
        if ttft and e2e and ttft[0] > e2e[0] - ttft[0]:
            return False, (
                f"overloaded: stage {stage} mean TTFT {ttft[0]:.1f} s exceeds the decode time "
                f"{e2e[0] - ttft[0]:.1f} s (a queue growing through the stage; survivors' aggregates)"
            )
    return True, ""


def make_cell(cid: str, run: dict[str, Any], base: dict[str, Any], stage: str | int, m: dict[str, float]) -> dict:
    stages = base["stages"]
    if isinstance(stage, int) and stage >= len(stages):
        raise BadInput(f"{cid}: stage {stage} measured but the workload has {len(stages)} stage(s)")
    window = run["windows"].get(stage) if isinstance(stage, str) else None
    config = {
        "run": run["name"],
        "aliases": run["aliases"],
        "stage": stage if isinstance(stage, int) else -1,
        "window_requests": window,
        **{k: v for k, v in base.items() if k not in ("hardware", "model_raw")},
        "engine_version": TEMPLATE["engine_version"],
        "stage_info": (run.get("stage_info") or {}).get(stage),
        "sources": run["sources"],
        "paths": run["paths"],
        "metric_origin": sorted({v[1] for v in run["measured"][stage].values()}),
    }
    c = cell(
        cid,
        SOURCE,
        str(base["hardware"]),
        base["model_raw"],
        run["paths"][0],
        tp=base["tp"],
        dtype=base["dtype"],
        engine="vllm",
        engine_version=TEMPLATE["engine_version"],
        config=config,
        kind="end-to-end",
    )
    c["gpu"] = normalize_gpu(base["hardware"])
    sp = base["shared_prefix"]
    c["workload"] = (
        f"{base['label'] or 'shared-prefix'}: {sp['num_groups']}x{sp['num_prompts_per_group']} prompts of "
        f"{sp['system_prompt_len']}+{sp['question_len']} tok, {sp['output_len']} out"
    )
    if stage == -1:
        c["load"] = "whole run: " + ", ".join(f"{r:g}/s x {d:g} s" for r, d in stages)
    elif window:
        c["load"] = f"first {window} requests"
    else:
        r, d = stages[int(stage)]
        c["load"] = f"stage {stage}: {r:g} req/s x {d:g} s ({base['arrivals']})"
    c["_replayable"] = base["replayable"]
    return c
