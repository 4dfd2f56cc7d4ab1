"""GPU-seconds per turn: each request's token share of every engine iteration it ran in.

An iteration (one engine step, :class:`agentreplay.sim.instance.Instance`) lasts ``dt`` seconds on an instance of
``G`` GPUs (its tensor-parallel degree: every rank of a TP group runs every step; vLLM
``vllm/v1/executor/multiproc_executor.py`` ``MultiprocExecutor`` drives one worker per GPU in lockstep). Its
``dt * G`` GPU-seconds are split over the step's scheduled tokens (vLLM ``SchedulerOutput.num_scheduled_tokens``):
a prefill chunk of ``n`` tokens is charged ``n / T`` of them and a decode ``1 / T``, where ``T`` is the sum of
the step's scheduled tokens. A preempted request keeps what it was charged (the recompute is its cost too).

Cost: O(1) per decode step of the decode cohort (:mod:`agentreplay.scheduler.cohort`). Cohort members get the
same share ``dt * G / T`` each step, so the cohort keeps their running sum ``gpu_acc`` and a member adds
``gpu_acc`` at leaving minus ``gpu_acc`` at joining. A fast-forwarded run of ``k`` decode steps of ``n`` members
(nothing else in the batch) adds ``(t_k - t_0) * G / n``: the closed form of its per-step shares. Prefill chunks
and decodes outside the cohort are charged directly, O(items) per step, as the step itself already costs.

Lockstep DP groups (:mod:`agentreplay.features.dp`): each rank that scheduled work is charged its own tokens of the
group step over the group step's duration; a rank running vLLM's dummy batch is idle here (no request to charge,
and it counts no busy time either).

Invariant (tested): the sum of ``gpu_s`` over all turns equals the sum over instances of busy seconds x GPUs.
"""

from __future__ import annotations

from agentreplay.scheduler.cohort import DecodeCohort
from agentreplay.scheduler.plan import StepPlan


def charge_step(plan: StepPlan, gpu_s: float, cohort: DecodeCohort) -> None:
    """Split ``gpu_s`` GPU-seconds of one single step over its scheduled tokens (module docstring); the
    cohort's share goes to its counter. Call before the step is applied (before members leave the cohort)."""
    tokens = plan.cohort + len(plan.decode)
    for _, n, _ in plan.prefill:
        tokens += n
    per = gpu_s / tokens
    for r, n, _ in plan.prefill:
        r.gpu_s += n * per
    for r in plan.decode:
        r.gpu_s += per
    if plan.cohort:
        cohort.gpu_acc += per


def charge_run(cohort: DecodeCohort, gpu_s: float, members: int) -> None:
    """A fast-forwarded run of decode steps of ``members`` cohort members lasting ``gpu_s`` GPU-seconds in all:
    every step's share is ``dt_i * G / members``, so the run adds their sum."""
    cohort.gpu_acc += gpu_s / members
