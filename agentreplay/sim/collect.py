"""A finished run's outputs (:func:`collect`): the tables (the kernel's three, then each mechanism's), the summary
(the kernel's figures with each mechanism's sections) and the notes on it that every caller gets, the Python API
as the command line: saturation / reuse findings (:mod:`agentreplay.sim.diagnose`) and the error bands of the
headline figures (:mod:`agentreplay.bands`).

Summary layout (its in-memory key order, what ``simulate --json`` prints; ``summary.json`` sorts its keys): the
run's figures (:func:`agentreplay.sim.metrics.summarize`), ``policy``, ``rejected``, the mechanisms' sections of
:data:`~agentreplay.features.registry.SUMMARY_EARLY`, the request view of a one-turn trace, the cluster's figures
(affinity, fan-out, bytes moved, pins, ``cluster``, ``engine``), the mechanisms' other sections (those of
:data:`~agentreplay.features.registry.SUMMARY_LATE` in its order, then any other in registry order), ``findings``
and ``error_bands``. A section of a mechanism that is off is absent.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from agentreplay.features.mechanism import Cluster, Mechanism, View
from agentreplay.features.registry import SUMMARY_EARLY, SUMMARY_LATE
from agentreplay.perf.deploy import kv_cache_dtype
from agentreplay.sim import tables
from agentreplay.sim.admission import Rejections
from agentreplay.sim.metrics import summarize
from agentreplay.sim.result import SimResult
from agentreplay.sim.workload import Workload


def collect(
    cluster: Cluster,
    mechanisms: Sequence[tuple[str, Mechanism]],
    rejections: Rejections,
    decisions: list[dict[str, Any]] | None,
    trace: Workload,
    error_bands: str | os.PathLike[str] = "packaged",
    with_findings: bool = True,
) -> SimResult:
    """The result of the run of ``cluster`` (over): ``trace`` is the trace as compiled, before ``max_programs``
    (the findings compare the run with what it could reuse), ``error_bands`` the error-band file, ``"packaged"``
    or ``"none"`` (:func:`error_band_dict`); ``with_findings`` False leaves the findings out (a sweep cell, whose
    result columns hold figures only)."""
    rec, sink, orch = cluster.recorder, cluster.sink, cluster.orch
    migrations = [0 if info is None else info.affinity_breaks for info in orch.infos] if sink is None else []
    result = SimResult(rec, migrations, {}, cluster.cfg, decisions)
    if sink is not None:
        sink.close(rec.sample_rows)

    def program_column(name: str) -> np.ndarray:
        """A column of the programs table in program order: from the files written, or in memory."""
        if sink is not None:
            return sink.program_column(name)
        programs = result.columns("programs")
        assert programs is not None
        return np.asarray(programs[name])

    view = View(cluster, program_column)
    for _, m in mechanisms:
        for name, table in m.tables(view).items():
            if sink is not None:
                sink.add_table(name, table)
            else:
                result.extra[name] = table
    sections: dict[str, Any] = {}
    for name, m in mechanisms:
        for key, value in m.summary(view).items():
            if key in sections:
                raise ValueError(f"mechanism {name!r}: summary section {key!r} is another mechanism's")
            sections[key] = value
    summary = result.summary
    if sink is not None:
        summary.update(sink.summary())
    else:
        turns, programs = result.columns("turns"), result.columns("programs")
        assert turns is not None and programs is not None
        summary.update(summarize(tables.FrameView(turns), tables.FrameView(programs)))
    pc = cluster.cfg.policy
    summary["policy"] = {
        "router": cluster.cfg.router.policy,
        "queue": pc.queue,
        "victim": pc.victim,
        "retention": pc.retention,
    }
    summary["rejected"] = rejections.summary()
    summary.update({k: sections.pop(k) for k in SUMMARY_EARLY if k in sections})
    if cluster.workload.single_turn:
        request_view(summary)
    summary.update(cluster_figures(cluster, program_column))
    summary.update({k: sections.pop(k) for k in SUMMARY_LATE if k in sections})
    summary.update(sections)
    if sink is None and with_findings:  # (the findings read every turn)
        summary["findings"] = findings(result, trace)
    summary["error_bands"] = error_band_dict(summary, error_bands)
    return result


def request_view(summary: dict[str, Any]) -> None:
    """A request-level trace (every program one request): name the figures per request, as serving benchmarks do
    (vLLM ``benchmark_serving``: E2E latency, TTFT, TPOT per request, request throughput). For one request E2E =
    finish - arrival = the program's JCT; the program keys stay for tools that read them."""
    summary["unit"] = "request"
    summary["requests"] = summary["programs"]
    summary["e2e_s"] = summary["jct_s"]
    summary["throughput_requests_per_s"] = summary["throughput_programs_per_s"]


def cluster_figures(cluster: Cluster, program_column: Any) -> dict[str, Any]:
    """The kernel's figures of the run: affinity breaks, fan-out workflows, KV bytes moved, pins, the cluster as
    built (with its DP deployment when ``dp > 1``) and the engine's counters."""
    orch, links, instances, hw = cluster.orch, cluster.links, cluster.instances, cluster.hardware
    out: dict[str, Any] = {"affinity_breaks": orch.affinity_breaks}
    if orch.fan is not None:  # fan-out workflows (absent otherwise: other summaries keep their exact form)
        out["fanout"] = orch.fan.summary(program_column("arrival_s"))
    out["bytes_moved"] = {link.name: link.bytes_moved for link in links}
    out["bytes_moved_total"] = sum(link.bytes_moved for link in links)
    out["pinned_block_s"] = sum(inst.residency.pinned_block_s for inst in instances if inst.residency)
    out["unpins_on_pressure"] = sum(inst.residency.unpins_on_pressure for inst in instances if inst.residency)
    specs, plans, plan = cluster.specs, cluster.plans, cluster.plans[0]
    out["cluster"] = {
        "instances": len(specs),
        "gpu": specs[0][0],
        "model": hw.model,
        "dtype": specs[0][2],
        "tp": specs[0][1],
        "num_gpu_blocks": plan.num_gpu_blocks,
        "kv_blocks_from": plan.kv_source,
        "max_num_seqs": plan.max_num_seqs,
        "max_num_batched_tokens": plan.max_num_batched_tokens,
        "groups": list(hw.groups),
        "kv_cache_dtype": kv_cache_dtype(hw.kv_cache_dtype),
        "per_instance": [
            {"gpu": g, "tp": t, "dtype": d, "num_gpu_blocks": p.num_gpu_blocks}
            for (g, t, d), p in zip(specs, plans, strict=True)
        ],
    }
    if hw.dp > 1:  # (absent otherwise: summaries of other deployments keep their exact form)
        lockstep = any(inst.lockstep is not None for inst in instances)
        out["cluster"].update({"dp": hw.dp, "ep": hw.ep, "all2all_backend": hw.all2all_backend, "lockstep": lockstep})
    out["engine"] = {
        "events": cluster.engine.events_processed,
        "iterations": sum(i.stats.iterations for i in instances),
        "decode_runs": sum(i.stats.decode_runs for i in instances),
        "busy_s_per_instance": [i.stats.busy_s for i in instances],
    }
    return out


def error_band_dict(summary: dict[str, Any], source: str | os.PathLike[str]) -> dict[str, Any]:
    """The headline figures' error bands (:mod:`agentreplay.bands`) as summary data: from the packaged validation
    report (``"packaged"``), an ``error_bands.json`` path, or none (``"none"``: {})."""
    from agentreplay.bands import bands_for, load_residuals

    if str(source) == "none":
        return {}
    res = load_residuals(None if str(source) == "packaged" else Path(source))
    return {
        k: {
            "mape_pct": round(b.mape_pct, 2),
            "mean_signed_pct": round(b.mean_signed_pct, 2),
            "n_cells": b.n_cells,
            "level": b.level,
            "text": b.text() if b.comparable else f"no comparable cell; nearest {b.error_text()}",
            "cells": b.named(),
            "comparable": b.comparable,
        }
        for k, b in bands_for(summary, res).items()
    }


def findings(result: SimResult, trace: Workload) -> list[dict[str, Any]]:
    """Saturation / reuse findings of a run (:mod:`agentreplay.sim.diagnose`), as summary data; ``trace``: the trace
    as compiled (:class:`agentreplay.sim.workload.Workload`)."""
    from agentreplay.sim.diagnose import diagnose, reusable_tokens

    turns = result.columns("turns")
    reusable = reusable_tokens(trace.trace_turns(), turns, result.config.workload.reuse_scale)
    return [f.as_dict() for f in diagnose(result.summary, turns, reusable)]
