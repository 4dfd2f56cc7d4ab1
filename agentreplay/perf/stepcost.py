"""The per-iteration engine cost beyond the kernels, as an explicit, fittable function of the batch.

Every engine step of vLLM v1 spends host time that no kernel profile shows: ``Scheduler.schedule`` and
``update_from_output`` (``vllm/v1/core/sched/scheduler.py``), input preparation (``GPUModelRunner._prepare_inputs``
and ``_update_states``, ``vllm/v1/worker/gpu_model_runner.py``: per-request bookkeeping, block tables, positions),
sampling bookkeeping (``vllm/v1/sample/sampler.py``) and output processing (``OutputProcessor.process_outputs``,
``vllm/v1/engine/output_processor.py``: detokenisation per request). Its form here:

    step_cost_s(seqs) = fixed_ms * 1e-3 + per_seq_us * 1e-6 * seqs

with ``seqs`` the sequences scheduled in the step (prefill chunks + decodes). The roofline
(:class:`agentreplay.perf.model.PerfModel`) prices it as its ``framework_overhead`` operator from the GPU
catalogue's ``framework_overhead_ms`` and ``per_seq_overhead_us`` (``catalog/gpus.toml``); this module names the
two parameters, computes the term, and swaps them into an :class:`~agentreplay.perf.catalog.Efficiency` so that
``agentreplay calibrate --measured ... --calibration ...`` (:mod:`validation.e2e.fit`) can fit them end to end.
A per-token term (input preparation scales with tokens too) and CUDA-graph padding to capture sizes are not in
the form yet: the measured runs we have do not separate them from the per-sequence term.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Final

from agentreplay.perf.catalog import Efficiency

#: The :class:`Efficiency` fields the step cost is made of, in :class:`StepCost` order.
PARAMS: Final = ("framework_overhead_ms", "per_seq_overhead_us")


@dataclass(frozen=True, slots=True)
class StepCost:
    """Host cost of one engine step: ``fixed_ms`` per step plus ``per_seq_us`` per scheduled sequence."""

    fixed_ms: float  #: per step, milliseconds (Efficiency.framework_overhead_ms)
    per_seq_us: float  #: per scheduled sequence per step, microseconds (Efficiency.per_seq_overhead_us)

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if not v >= 0.0:
                raise ValueError(f"StepCost.{f.name}={v!r} must be >= 0")

    def time_s(self, seqs: int) -> float:
        """Seconds of one step with ``seqs`` scheduled sequences (0 sequences: no step, 0 s is not used)."""
        return self.fixed_ms * 1e-3 + seqs * self.per_seq_us * 1e-6

    @classmethod
    def of(cls, eff: Efficiency) -> StepCost:
        """The step cost an efficiency table prices."""
        return cls(eff.framework_overhead_ms, eff.per_seq_overhead_us)

    def apply(self, eff: Efficiency) -> Efficiency:
        """``eff`` with this step cost in place of its own."""
        return dataclasses.replace(eff, framework_overhead_ms=self.fixed_ms, per_seq_overhead_us=self.per_seq_us)

    def as_dict(self) -> dict[str, float]:
        return dict(zip(PARAMS, (self.fixed_ms, self.per_seq_us), strict=True))


def overlapped(eff: Efficiency) -> Efficiency:
    """``eff`` as vLLM's async scheduling runs it: no host step cost on the critical path.

    With ``--async-scheduling`` (``SchedulerConfig.async_scheduling``) the engine core schedules step N + 1 and
    prepares its inputs while step N runs on the GPU, and processes step N's outputs while N + 1 runs
    (``EngineCore.step_with_batch_queue``, ``vllm/v1/engine/core.py``; the model runner's async output copy in
    ``GPUModelRunner``), so the per-step and per-sequence host work of :class:`StepCost` is hidden whenever it is
    shorter than the GPU step, which is the case for the batches it is priced on (sub-millisecond against steps of
    several milliseconds)."""
    return StepCost(0.0, 0.0).apply(eff)
