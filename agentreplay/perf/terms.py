"""The operator terms of one priced iteration: their names (:data:`OPERATORS`), the unboxed 17-float tuple a
compiled :class:`agentreplay.perf.model.PerfModel` returns them in (:data:`Terms`), the fixed-order sums that turn
them into seconds, and the roofline cost of one operator.

The model and the pricers built on it (:mod:`agentreplay.perf.refined`, :mod:`agentreplay.perf.table_model`)
share these definitions; compiled with the model (``setup.py`` HOT), so the terms pass between the two unboxed.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["OPERATORS", "Terms", "cost", "seq_sum", "terms_of", "total"]

#: Operator names of :meth:`agentreplay.perf.model.PerfModel.breakdown`, in pricing order (names follow
#: LLMServingSim's profiles).
OPERATORS: tuple[str, ...] = (
    "embedding",
    "layernorm",
    "qkv_proj",
    "rotary_emb",
    "attention_prefill",
    "attention_decode",
    "o_proj",
    "moe_router",
    "gate_up_proj",
    "act_fn",
    "down_proj",
    "final_layernorm",
    "lm_head",
    "sampler",
    "tp_comm",
    "kernel_overhead",
    "framework_overhead",
)

#: One float per operator of :data:`OPERATORS` (17). Written out so that, compiled, ``PerfModel._terms``
#: returns the seconds unboxed (a C struct) instead of a tuple of 17 Python floats built every step.
# fmt: off
Terms = tuple[float, float, float, float, float, float, float, float, float,
              float, float, float, float, float, float, float, float]
# fmt: on


def terms_of(values: Sequence[float]) -> Terms:
    """The :data:`Terms` of 17 per-operator values (e.g. a list a subclass adjusted)."""
    if len(values) != len(OPERATORS):
        raise ValueError(f"{len(values)} operator terms; need {len(OPERATORS)} (OPERATORS)")
    v = values
    return (v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9], v[10], v[11], v[12], v[13], v[14], v[15], v[16])


def total(t: Terms) -> float:
    """Seconds of an iteration: its terms added one by one in operator order, from 0.0 (what ``sum`` did on
    Python 3.11; 3.12's ``sum`` compensates rounding, so every price goes through here or :func:`seq_sum`)."""
    acc = 0.0 + t[0] + t[1] + t[2] + t[3] + t[4] + t[5] + t[6] + t[7] + t[8]  # (left to right)
    return acc + t[9] + t[10] + t[11] + t[12] + t[13] + t[14] + t[15] + t[16]


def seq_sum(values: Sequence[float]) -> float:
    """:func:`total` of a sequence of terms (the same additions in the same order)."""
    acc = 0.0
    for v in values:
        acc += v
    return acc


def cost(op: tuple[float, float, float], tokens: int) -> float:
    """Seconds of one operator over ``tokens`` tokens, compute- or memory-bound, whichever is longer (the
    roofline); ``op`` is a GEMM's ``(compute seconds per token, weight-read seconds, activation seconds per
    token)`` (:data:`agentreplay.perf.coefficients.Gemm`)."""
    flop_s, weight_s, act_s = op
    return max(tokens * flop_s, weight_s + tokens * act_s)
