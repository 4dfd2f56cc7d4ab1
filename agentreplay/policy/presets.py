"""Presets: configuration bundles that match published serving systems (``--preset NAME``).

A preset sets the router, queue order, victim and retention fields (and a host tier where the system needs
one and the configuration has none); everything else (hardware, workload, tools) stays as configured.

============== ================= ============= =============== ============ =====================================
preset         router            queue         victim          retention    source
============== ================= ============= =============== ============ =====================================
vllm           least-loaded      fcfs          most-recent     lru          vLLM v1 defaults + a load balancer
sglang         cache-aware       fcfs          most-recent     lru          SGLang router + radix cache (LRU)
autellix       autellix          plas          lowest-priority lru          Autellix (arXiv 2502.13965)
continuum      session-affinity  continuum     most-recent     continuum    Continuum (arXiv 2511.02230)
infercept      least-loaded      fcfs          most-recent     infercept    InferCept (ICML 2024), host DRAM
lmcache-offload least-loaded     fcfs          most-recent     offload      vLLM + LMCache CPU offload
agent-affinity session-affinity  fcfs          most-recent     ttl          sticky sessions + static TTL pin
thunderagent   session-affinity  fcfs          most-recent     lru          ThunderAgent (arXiv 2602.13692)
============== ================= ============= =============== ============ =====================================

``thunderagent`` also sets the admission policy (``[admission] policy = "thunderagent"``,
:mod:`agentreplay.router.thunderagent`): vLLM backends behind ThunderAgent's program-aware scheduler, which keeps
each program on the backend it was assigned to (``Program.backend_url``: a sticky, session-affine placement) and
pauses / resumes whole programs against the KV capacity (arXiv 2602.13692 §4), as the released router does
(github.com/ThunderAgent-org/ThunderAgent ``ThunderAgent/scheduler/router.py``,
:mod:`agentreplay.router.thunderagent_released`; ``[admission] thunder_variant``, default ``"released"``, is left
as configured).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentreplay.policy.registry import did_you_mean

if TYPE_CHECKING:  # PRESETS is listed by --help, which needs no configuration class
    from agentreplay.sim.config import SimConfig

#: Host DRAM given to presets that need a host tier when the configuration has none, GiB per instance.
DEFAULT_HOST_DRAM_GIB = 256.0

PRESETS: dict[str, dict[str, dict[str, Any]]] = {
    "vllm": {
        "router": {"policy": "least-loaded"},
        "policy": {"queue": "fcfs", "victim": "most-recent", "retention": "lru"},
    },
    "sglang": {
        "router": {"policy": "cache-aware"},
        "policy": {"queue": "fcfs", "victim": "most-recent", "retention": "lru"},
    },
    "autellix": {
        "router": {"policy": "autellix"},
        "policy": {"queue": "plas", "victim": "lowest-priority", "retention": "lru"},
    },
    "continuum": {
        "router": {"policy": "session-affinity"},
        "policy": {"queue": "continuum", "victim": "most-recent", "retention": "continuum"},
    },
    "infercept": {
        "router": {"policy": "least-loaded"},
        "policy": {"queue": "fcfs", "victim": "most-recent", "retention": "infercept"},
    },
    "lmcache-offload": {
        "router": {"policy": "least-loaded"},
        "policy": {"queue": "fcfs", "victim": "most-recent", "retention": "offload"},
    },
    "agent-affinity": {
        "router": {"policy": "session-affinity"},
        "policy": {"queue": "fcfs", "victim": "most-recent", "retention": "ttl"},
    },
    "thunderagent": {
        "router": {"policy": "session-affinity"},
        "policy": {"queue": "fcfs", "victim": "most-recent", "retention": "lru"},
        "admission": {"policy": "thunderagent"},
    },
}
NEEDS_HOST_TIER = frozenset({"infercept", "lmcache-offload"})


def apply_preset(cfg: SimConfig, name: str) -> SimConfig:
    """``cfg`` with preset ``name`` applied (unknown names fail listing the known ones)."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}{did_you_mean(name, PRESETS)}; known: {', '.join(PRESETS)}")
    out = cfg.replace(**PRESETS[name])
    if name in NEEDS_HOST_TIER and cfg.tiers.dram_gib == 0 and cfg.tiers.cxl_gib == 0:
        out = out.replace(tiers={"dram_gib": DEFAULT_HOST_DRAM_GIB})
    return out
