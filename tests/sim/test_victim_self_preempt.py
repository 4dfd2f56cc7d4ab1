"""A victim policy other than vLLM's may preempt the very request it is scheduling while later ones still run
(``Scheduler.unstall``): the step is empty, the instance schedules again at once, nothing is stuck."""

from __future__ import annotations

import pytest

from agentreplay.sim import SimConfig, simulate
from tests.factories import make_trace
from tests.sim.fakes import LinearPerf


def test_self_preemption_with_others_running_schedules_again() -> None:
    """8 blocks of 16 tokens; LinearPerf (0.01 + 0.001 x tokens per iteration). X (40 in, 40 out) and A (60, 40)
    are admitted at 0 (3 + 4 blocks, 1 free); their prefill (100 tokens) ends at 0.11. Decode steps of both cost
    0.012: A takes the free block at its 64th token (step 5), X needs one at its 48th (step 9, starting at
    0.11 + 8 x 0.012 = 0.206): no block, and ``age-aware`` picks the shortest running context, X itself (49 vs
    69 tokens). The step is empty with A still running; A then decodes alone, its 31 remaining tokens at 0.011:
    done 0.547 (its two new blocks evict two of X's three cached blocks). X re-admits with one block cached:
    prefill 49 - 16 = 33 tokens (0.043, token 10 at 0.590), 30 decodes: done 0.920. Before the fix the empty
    step raised "cannot be admitted into an empty engine"."""
    cfg = SimConfig().replace(cache={"num_gpu_blocks": 8}, workload={"concurrency": 2}, policy={"victim": "age-aware"})
    res = simulate(make_trace([[(40, 40, None)], [(60, 40, None)]]), cfg, perf=LinearPerf())
    assert res.turns["finish_s"].tolist() == pytest.approx([0.920, 0.547])
    assert res.turns["preemptions"].tolist() == [1, 0]
