"""The engine's interface to a performance model (one Protocol for the axis), kept apart from the models.

:class:`IterationPricer` is ``runtime_checkable`` so a user's pricer can be checked with ``isinstance``; mypyc
cannot compile such a Protocol, so it lives in this small interpreted module while the models that implement it
(:mod:`agentreplay.perf.model`) may be compiled (see ``setup.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

#: A prefill item: (chunk_tokens, cached_prefix_tokens) or (chunk_tokens, cached_prefix_tokens, emits_token).
PrefillItem = tuple[int, int] | tuple[int, int, bool]


@runtime_checkable
class IterationPricer(Protocol):
    """What the engine needs from a performance model (the roofline model, or e.g. a measured table).

    ``decode_ctx`` holds one entry per decoding sequence. The simulator passes their real contexts only to a pricer
    whose ``needs_decode_contexts`` attribute is true; to any other it passes their sum as the first entry and
    zeros after it (the count and the sum are what such a pricer may read), which keeps a step O(1) in the number
    of decoding requests (:mod:`agentreplay.scheduler.cohort`).
    """

    def iteration_time_s(self, prefill: Sequence[PrefillItem], decode_ctx: Sequence[int]) -> float: ...
    def decode_coeffs(self, n_seqs: int) -> tuple[float, float]: ...
