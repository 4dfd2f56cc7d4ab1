"""A linear performance model whose iteration times are easy to compute by hand."""

from __future__ import annotations

from collections.abc import Sequence


class LinearPerf:
    """Iteration time = ``a + b * tokens`` (tokens = prefill chunk tokens + one per decode)."""

    def __init__(self, a: float = 0.01, b: float = 0.001) -> None:
        self.a, self.b = a, b

    def iteration_time_s(self, prefill: Sequence[tuple], decode_ctx: Sequence[int]) -> float:
        return self.a + self.b * (sum(item[0] for item in prefill) + len(decode_ctx))

    def decode_coeffs(self, n_seqs: int) -> tuple[float, float]:
        return self.a + self.b * n_seqs, 0.0
