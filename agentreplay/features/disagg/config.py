"""``[disagg]``: disaggregated prefill / decode pools (the mechanism is :mod:`agentreplay.features.disagg.disagg`).

Off by default (``enabled = false``): the cluster is then ``[hardware]``'s colocated instances and nothing here is
read. On, the cluster is ``prefill_instances`` prefill instances followed by ``decode_instances`` decode
instances (instance indices in that order), each pool with its own GPU and TP (default: ``[hardware]``'s).

The KV-transfer link (``link``) is priced per receiving instance, as NIXL / Mooncake move each TP rank's shard over
that rank's own NIC (vLLM ``NixlConnector``: one transfer per worker; Mooncake FAST'25 §3: RDMA between the
prefill and decode pools):

- ``"rdma"``: 50 GB/s per GPU (a 400 Gb/s ConnectX-7 NIC per GPU, as in DGX H100 / Mooncake's 8 x 400 Gb/s
  nodes) times the receiving instance's TP;
- ``"nvlink"``: the GPU catalogue's ``interconnect_bw_gbps`` times TP (both pools inside one NVLink domain);
- ``"custom"``: ``link_gbps`` GB/s per instance.

Each transfer also pays ``link_latency_us`` once; concurrent transfers into one instance share its link
(:class:`agentreplay.kv.tiers.Link`, processor sharing).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, get_args

from agentreplay.sim.config_checks import check

DisaggLink = Literal["rdma", "nvlink", "custom"]
#: where a session's KV lives across tool gaps: on its decode instance (the next turn's prefill pulls the
#: cached prefix from there), or nowhere in particular (prefill instances keep their own prefix cache)
SessionHome = Literal["decode", "none"]
#: which instance's token the client sees first: the decode instance's (vLLM's NIXL proxy,
#: ``tests/v1/kv_connector/nixl_integration/toy_proxy_server.py`` ``_handle_completions``: the prefill's one-token
#: response is read for its ``kv_transfer_params`` and the decode instance's stream is forwarded) or the prefill
#: instance's (DistServe OSDI'24 §3; LMCache's ``examples/disagg_prefill/.../disagg_proxy_server.py`` with
#: ``ret_first_tok``: the proxy sends the prefill's token first, and the decode instance continues from prompt +
#: that token with ``max_tokens - 1``)
FirstToken = Literal["decode", "prefill"]

RDMA_GBPS_PER_GPU = 50.0  #: 400 Gb/s ConnectX-7, one per GPU (DGX H100; Mooncake FAST'25 testbed 8 x 400 Gb/s)


def _check(cond: bool, name: str, value: Any, allowed: str) -> None:
    check(cond, "disagg", name, value, allowed)


@dataclass(frozen=True, slots=True)
class DisaggConfig:
    """Disaggregated prefill / decode (DistServe OSDI'24 §3-4; Mooncake FAST'25; vLLM disaggregated prefill)."""

    enabled: bool = False
    prefill_instances: int = 1  #: instances that only prefill (vLLM ``kv_role = "kv_producer"``)
    decode_instances: int = 1  #: instances that decode (``kv_role = "kv_consumer"``)
    prefill_gpu: str = ""  #: GPU of the prefill pool; "" = ``[hardware] gpu``
    prefill_tp: int = 0  #: TP of a prefill instance; 0 = ``[hardware] tp``
    decode_gpu: str = ""  #: GPU of the decode pool; "" = ``[hardware] gpu``
    decode_tp: int = 0  #: TP of a decode instance; 0 = ``[hardware] tp``
    link: DisaggLink = "rdma"  #: KV-transfer link (see the module docstring)
    link_gbps: float = 0.0  #: ``link = "custom"``: GB/s into one instance
    link_latency_us: float = 10.0  #: per-transfer setup latency, microseconds
    session_home: SessionHome = "decode"
    first_token: FirstToken = "decode"
    prefill_router: str = ""  #: router over the prefill pool; "" = ``[router] policy``
    decode_router: str = "session-affinity"  #: router over the decode pool (its parameters from ``[router]``)

    def __post_init__(self) -> None:
        from agentreplay.router.policies import ROUTERS

        _check(isinstance(self.enabled, bool), "enabled", self.enabled, "true or false")
        for name in ("prefill_instances", "decode_instances"):
            v = getattr(self, name)
            _check(isinstance(v, int) and v >= 1, name, v, "an integer >= 1")
        for name in ("prefill_tp", "decode_tp"):
            v = getattr(self, name)
            _check(v in (0, 1, 2, 4, 8, 16), name, v, "0 (the [hardware] tp) or 1, 2, 4, 8, 16")
        _check(self.link in get_args(DisaggLink), "link", self.link, f"one of {list(get_args(DisaggLink))}")
        _check(self.link_gbps >= 0, "link_gbps", self.link_gbps, ">= 0")
        _check(self.link != "custom" or self.link_gbps > 0, "link_gbps", self.link_gbps, '> 0 with link = "custom"')
        _check(self.link_latency_us >= 0, "link_latency_us", self.link_latency_us, ">= 0")
        hs = get_args(SessionHome)
        _check(self.session_home in hs, "session_home", self.session_home, f"one of {list(hs)}")
        ft = get_args(FirstToken)
        _check(self.first_token in ft, "first_token", self.first_token, f"one of {list(ft)}")
        for name in ("prefill_router", "decode_router"):
            v = getattr(self, name)
            ok = v in ROUTERS or (name == "prefill_router" and v == "")
            _check(ok, name, v, f"one of {list(ROUTERS.names())}" + (' or ""' if name == "prefill_router" else ""))


#: the config section this feature owns (agentreplay.features.registry)
CONFIG: dict[str, type] = {"disagg": DisaggConfig}
