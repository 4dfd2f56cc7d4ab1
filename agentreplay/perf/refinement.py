"""The refined roofline's parameters beyond :class:`~agentreplay.perf.catalog.Efficiency` (:class:`Refinement`;
what each one fixes: :mod:`agentreplay.perf.refined`). The values per GPU are data in ``catalog/roofline.toml``
(:func:`agentreplay.perf.loaders.load_refinement`)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Final

from agentreplay.perf.catalog import Efficiency


@dataclass(frozen=True, slots=True)
class Refinement:
    """Parameters of :class:`RefinedPerfModel` beyond :class:`Efficiency`; ``None`` = the Efficiency value it
    refines (named per field). Units in the names."""

    gemm_m_half_tokens: float = 0.0  #: tokens at which a GEMM reaches half of compute_efficiency
    elementwise_kernel_us: float | None = None  #: per elementwise kernel (None: kernel_overhead_us)
    elementwise_bandwidth_efficiency: float | None = None  #: (None: bandwidth_efficiency); may exceed 1 (L2)
    attn_kernel_us: float | None = None  #: per attention kernel, per layer (None: kernel_overhead_us)
    attn_prefill_kv_efficiency: float | None = None  #: prefix KV read in prefill (None: attn_decode_efficiency)
    attn_prefill_m_half_tokens: float = 0.0  #: chunk tokens at which prefill attention reaches half its efficiency
    attn_decode_seq_us: float = 0.0  #: per decoding sequence per layer
    attn_decode_fixed_us: float = 0.0  #: per layer, once per iteration with decoding sequences

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if v is None:
                continue
            if f.name.endswith("_efficiency") and not 0.0 < v <= 4.0:
                raise ValueError(f"Refinement.{f.name}={v!r} must be in (0, 4]")
            if v < 0.0:
                raise ValueError(f"Refinement.{f.name}={v!r} must be >= 0")


REFINEMENT_FIELDS: Final = tuple(f.name for f in fields(Refinement))
EFFICIENCY_FIELDS: Final = tuple(f.name for f in fields(Efficiency))
