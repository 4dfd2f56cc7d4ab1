"""The unit an instance schedules: one turn (LLM call) of one program."""

from __future__ import annotations

from dataclasses import dataclass

from agentreplay.kv.segment_pool import Segment


@dataclass(slots=True, eq=False)
class Request:
    """One turn in flight. Token accounting follows vLLM v1's ``Request``:

    - the request's token stream is ``prompt + generated`` tokens; ``computed`` of them have KV in the cache;
    - an iteration that brings ``computed`` to ``prompt + generated`` emits one token (``generated += 1``): the
      prefill's last chunk emits the first token, each decode step computes the previous token and emits one;
    - it finishes when ``generated == target_out``; preemption by recompute resets ``computed`` to 0 and keeps
      ``generated`` (vLLM ``Scheduler._preempt_request``), so re-admission recomputes prompt + output so far.
    """

    turn: int  #: global turn index in the workload
    program: int
    turn_idx: int
    prompt: int  #: input tokens
    target_out: int  #: output tokens to generate (>= 1)
    reuse: int  #: tokens of the prompt equal to the program's previous context (trace ``reused_tokens``)
    pfx: Segment | None  #: shared system-prefix segment on this instance
    prog: Segment  #: this program's history segment on this instance
    base: int  #: full blocks of the shared prefix (the program segment starts at this block)
    release_s: float
    instance: int = -1
    computed: int = 0
    generated: int = 0
    partial: int = 0  #: 1 when the request holds a partially filled (uncacheable) last block
    admitted: bool = False  #: admitted at least once (the trace-reuse bound applies to the first admission only)
    first_sched_s: float = -1.0
    first_token_s: float = -1.0
    finish_s: float = -1.0
    cached_tokens: int = 0  #: prompt tokens served from the HBM prefix cache at first admission
    cached_prefix_tokens: int = 0  #: ... of which in the cross-program shared prefix
    recomputed_tokens: int = 0  #: tokens computed again after preemptions
    preemptions: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt + self.generated

    @property
    def is_decoding(self) -> bool:
        """True when the next iteration computes exactly the last emitted token."""
        return self.generated > 0 and self.computed == self.prompt + self.generated - 1
