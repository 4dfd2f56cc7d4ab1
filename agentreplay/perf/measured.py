"""Measured profiles as data: the per-layer operator table of one (GPU, model, TP, dtype) cell
(:class:`MeasuredTable`) and the all-reduce curve of one GPU at one TP degree (:class:`AllReduceTable`), with the
keys they are stored under in ``catalog/tables.toml`` (read by :mod:`agentreplay.perf.loaders`, priced by
:class:`agentreplay.perf.table_model.TablePerfModel`). Seconds; token counts are tokens; sizes are bytes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from agentreplay.perf.kernels import KERNELS


@dataclass(frozen=True)
class MeasuredTable:
    """The measured profile of one (GPU, model, TP, dtype) cell, per layer (see the module docstring).

    ``ops``: operator -> (tokens, seconds); ``attention_prefill``: (tokens, context, seconds);
    ``attention_decode``: (batch, context, seconds)."""

    name: str
    gpu: str
    model: str
    tp: int = 1
    dtype: str = "bf16"
    ops: Mapping[str, tuple[Sequence[int], Sequence[float]]] = field(default_factory=dict)
    attention_prefill: tuple[Sequence[int], Sequence[int], Sequence[float]] | None = None
    attention_decode: tuple[Sequence[int], Sequence[int], Sequence[float]] | None = None

    def __post_init__(self) -> None:
        bad = set(self.ops) - (set(KERNELS) - {"attention_prefill", "attention_decode", "moe_router"})
        if bad:
            raise ValueError(f"table {self.name}: operators {sorted(bad)} cannot be tabulated by tokens")


def table_key(gpu: str, model: str, tp: int) -> str:
    return f"{gpu}/{model}/tp{tp}"


@dataclass(frozen=True)
class AllReduceTable:
    """Measured seconds of one all-reduce over ``tp`` GPUs of ``gpu`` (one node) against the bytes reduced."""

    name: str
    gpu: str
    tp: int
    nbytes: Sequence[int]
    seconds: Sequence[float]

    def __post_init__(self) -> None:
        if self.tp < 2:
            raise ValueError(f"all-reduce table {self.name}: tp={self.tp} must be >= 2")
        if not len(self.nbytes) or len(self.nbytes) != len(self.seconds):
            raise ValueError(
                f"all-reduce table {self.name}: needs as many bytes as seconds, at least one point "
                f"({len(self.nbytes)} bytes, {len(self.seconds)} seconds)"
            )
        bad = [(b, t) for b, t in zip(self.nbytes, self.seconds, strict=True) if not (b > 0 and t > 0)]
        if bad:
            raise ValueError(f"all-reduce table {self.name}: bytes and seconds must be > 0, got {bad[:3]}")


def allreduce_key(gpu: str, tp: int) -> str:
    return f"{gpu}/tp{tp}"
