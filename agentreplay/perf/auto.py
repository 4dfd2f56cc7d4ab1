"""Which iteration pricer a command-line run uses, and why (``summary.json`` ``pricer``).

``--perf`` wins; else the ``--config`` file's ``[hardware] perf``; else ``auto``
(:func:`agentreplay.perf.registry.choose_pricer`, DESIGN §5 "Profiled deployments"): the measured-table pricer
where a deployment profile of exactly the run's GPU, model, dtype, KV dtype and TP is shipped, else the roofline.
One kind prices every instance of a run (``[hardware] perf``): a cluster whose instance groups are not all
profiled runs on the roofline, and the record says which groups were.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from agentreplay.perf.registry import AUTO, choose_pricer


def perf_in_file(config: Path | None) -> bool:
    """True when the configuration file sets ``[hardware] perf`` (an unreadable file is reported by its loader)."""
    if config is None:
        return False
    try:
        with open(config, "rb") as fh:
            return "perf" in tomllib.load(fh).get("hardware", {})
    except (OSError, tomllib.TOMLDecodeError):
        return False


def auto_record(cfg: Any) -> dict[str, Any]:
    """``auto`` over the instance groups of the run ``cfg`` (a :class:`agentreplay.sim.config.SimConfig`): the
    record of :func:`resolve`; ``table`` when every group has a deployment profile."""
    from agentreplay.perf.deploy import kv_cache_dtype
    from agentreplay.sim.run import cluster_hardware

    hw = cluster_hardware(cfg)
    kv = kv_cache_dtype(hw.kv_cache_dtype)
    picks = {
        (gpu, tp, dtype): choose_pricer(gpu, hw.model, dtype, tp, kv_dtype=kv)
        for gpu, tp, dtype in dict.fromkeys(hw.instance_specs())
    }
    if len(picks) == 1:
        (only,) = picks.values()
        return {"requested": AUTO, **only.as_dict()}
    kinds = {p.kind for p in picks.values()}
    kind = "table" if kinds == {"table"} else "roofline"
    groups = "; ".join(f"{g} TP{t} {d}: {p.kind} ({p.reason})" for (g, t, d), p in picks.items())
    why = "every instance group has a deployment profile" if kind == "table" else "not every group is profiled"
    return {"requested": AUTO, "kind": kind, "reason": f"{why} (one pricer per run): {groups}", "table": None}


def resolve(cfg: Any, requested: str | None, config: Path | None) -> tuple[Any, dict[str, Any]]:
    """``(cfg with [hardware] perf set to the kind that runs, record)``; ``requested``: the ``--perf`` option
    (None: not given). The record: ``requested``, ``kind``, ``reason`` and, for ``auto``, the ``table`` key and
    ``source`` cell it prices from (None with the roofline)."""
    if requested is not None and requested != AUTO:
        return cfg, {"requested": requested, "kind": requested, "reason": "--perf"}
    if requested is None and perf_in_file(config):
        kind = cfg.hardware.perf
        return cfg, {"requested": kind, "kind": kind, "reason": f"[hardware] perf in {config}"}
    record = auto_record(cfg)
    return cfg.replace(hardware={"perf": record["kind"]}), record
