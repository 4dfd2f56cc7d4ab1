"""One turn alone on an instance, priced by a pricer: the service-time definition that the uncontended JCT
(:mod:`agentreplay.fleet.uncontended`) and the in-run deadline estimates
(:mod:`agentreplay.features.classes.classes`) share.

Chunked prefill of the uncached tokens (vLLM v1: chunks of at most ``max_num_batched_tokens``), one iteration per
chunk priced as ``iteration_time_s([(chunk, cached_so_far, emits)], ())``, the last chunk emitting the first
output token; then ``output - 1`` batch-1 decode steps, step ``j`` with ``prompt + j`` tokens in the KV cache,
each ``a + c * ctx`` with ``(a, c) = decode_coeffs(1)`` (the form the engine prices decode-only steps in,
:class:`agentreplay.perf.pricer.IterationPricer`), summed in closed form.
"""

from __future__ import annotations

from typing import Any


def turn_service_s(pricer: Any, chunk_tokens: int, prompt: int, cached: int, output: int) -> tuple[float, float]:
    """``(prefill_s, decode_s)`` of one turn of ``prompt`` tokens (``cached`` of them in the prefix cache) and
    ``output`` output tokens, alone on an instance priced by ``pricer`` (module docstring)."""
    prefill_s = 0.0
    done = cached
    while done < prompt:
        n = min(chunk_tokens, prompt - done)
        prefill_s += pricer.iteration_time_s([(n, done, done + n == prompt)], ())
        done += n
    steps = max(output - 1, 0)
    a, c = pricer.decode_coeffs(1)  # a decode-only step of one sequence costs a + c * ctx
    return prefill_s, steps * a + c * (steps * prompt + steps * (steps - 1) // 2)
