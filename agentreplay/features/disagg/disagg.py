"""Disaggregated prefill / decode: a prefill pool, a decode pool, and the KV transfer between them.

What is modelled, and where it comes from:

- **Two pools** (DistServe OSDI'24 §3: prefill and decode instances; Mooncake FAST'25 §3: prefill pool, decode
  pool). Both are ordinary :class:`~agentreplay.sim.instance.Instance` s (the same vLLM v1 scheduler and KV
  manager); the pool sizes, GPUs and TPs come from ``[disagg]`` (:mod:`agentreplay.features.disagg.config`).
- **Prefill** (vLLM's NIXL proxy, ``tests/v1/kv_connector/nixl_integration/toy_proxy_server.py``
  ``send_request_to_service``: the request goes to a prefill instance with ``max_tokens = 1``): a
  released turn is routed over the prefill pool (``prefill_router``) and runs there as a request with one output
  token (:meth:`Disagg.prepare` sets ``target_out = 1``). Its cached prefix is a local prefix-cache hit, plus, with
  ``session_home = "decode"``, the blocks the session's decode instance still caches, pulled over the prefill
  instance's link (Mooncake §3: the KV cache pool serves prefixes to prefill nodes); the pull reuses the
  residency's remote load (:meth:`agentreplay.kv.residency.Residency.external_hit` with ``migrate_from`` = the
  decode instance), so it is counted in the turns' ``reloaded_remote_tokens``.
- **Hand-off** (vLLM ``NixlConnector``, ``vllm/distributed/kv_transfer/kv_connector/v1/nixl/pull_scheduler.py``
  ``get_num_new_matched_tokens``: a ``do_remote_prefill`` request pulls every prompt token the decode instance does
  not already cache; ``request_finished`` keeps the prefill-side blocks until the pull is done): when the prefill
  finishes, the turn is routed over the decode pool (``decode_router``, session affinity by default) and waits there,
  FIFO, until the decode instance can allocate slots for its prompt (vLLM ``Scheduler.schedule``: the connector's
  external tokens get their slots at admission, ``allocate_slots(num_external_computed_tokens)``; no room, no
  admission). Then the prompt's blocks beyond the decode instance's own prefix-cache hit move over the decode
  instance's link (``blocks x block bytes / bandwidth + latency``, shared by concurrent transfers); the request
  waits meanwhile (vLLM ``RequestStatus.WAITING_FOR_REMOTE_KVS``).
- **Decode** (``vllm/v1/core/sched/scheduler.py`` ``_update_waiting_for_remote_kv``: when the load is done a full
  prompt hit is cut back by one token, ``num_computed_tokens = num_tokens - 1``, so the next token can be sampled):
  the decode instance computes the last prompt token, emits the first output token and decodes the rest; the
  decode request holds its KV through the tool gap under the retention policy, where the next turn's prefill finds
  it (``session_home = "decode"``).
- **TTFT** is the first token the client sees. ``first_token = "decode"`` (default): vLLM's proxy reads the prefill's
  one-token response only for its ``kv_transfer_params`` and streams the decode instance's response to the client
  (``toy_proxy_server.py`` ``_handle_completions``), so the turn's ``first_token_s`` is the decode instance's first
  token. ``first_token = "prefill"`` (DistServe §3; LMCache's disaggregated proxy with ``ret_first_tok``): the
  prefill's token reaches the client first and the decode instance continues from prompt + that token for the
  other ``output - 1`` tokens. The prefill instance's token time is reported either way (``prefill_ttft_s``).

The turn's row (turns table) keeps the prefill instance in ``instance`` and the prefill's cached / reloaded
tokens; its first token and finish are the decode side's; preemptions and recomputed tokens add up both sides.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np

from agentreplay.engine import Engine
from agentreplay.features.disagg.config import RDMA_GBPS_PER_GPU, DisaggConfig
from agentreplay.kv.manager import held_blocks
from agentreplay.kv.segment_pool import SegmentPool
from agentreplay.kv.tiers import Link
from agentreplay.perf import load_gpu
from agentreplay.request import ProgramInfo, Request
from agentreplay.router.policies import ROUTERS, Router
from agentreplay.sim.config import HardwareConfig
from agentreplay.sim.errors import ConfigError
from agentreplay.sim.instance import Instance


def disagg_hardware(dc: DisaggConfig, hw: HardwareConfig) -> HardwareConfig:
    """``[hardware]`` with the two pools as groups: prefill instances first, then decode instances."""
    if hw.dp > 1 or hw.groups:
        raise ConfigError(
            f"[disagg] enabled = true needs a plain [hardware] (dp = 1, no groups): got dp = {hw.dp}, "
            f"groups = {list(hw.groups)}; set the pools with [disagg] prefill_* / decode_*"
        )
    pg, pt = dc.prefill_gpu or hw.gpu, dc.prefill_tp or hw.tp
    dg, dt = dc.decode_gpu or hw.gpu, dc.decode_tp or hw.tp
    groups = (f"{pg}:{pt}:{dc.prefill_instances}", f"{dg}:{dt}:{dc.decode_instances}")
    return dataclasses.replace(hw, groups=groups)


def link_gbps(dc: DisaggConfig, gpu_name: str, tp: int) -> float:
    """Bandwidth into one instance of ``tp`` x ``gpu_name``, GB/s (the links: module docstring of
    :mod:`agentreplay.features.disagg.config`)."""
    if dc.link == "custom":
        return dc.link_gbps
    if dc.link == "nvlink":
        return load_gpu(gpu_name).interconnect_bw_gbps * tp
    return RDMA_GBPS_PER_GPU * tp


def _pct(a: list[float], q: float) -> float:
    return float(np.percentile(a, q)) if a else float("nan")


class Disagg:
    """The hand-off between the pools. ``instances`` is the whole cluster (prefill pool first); ``deliver`` gets
    a finished turn (the prefill request, completed with the decode side's figures)."""

    def __init__(
        self,
        cfg: DisaggConfig,
        engine: Engine,
        links: Sequence[Link],
        block_bytes: int,
        router_cfg: Any,
        deliver: Callable[[Request], None],
    ) -> None:
        self.cfg = cfg
        self.engine = engine
        self.n_prefill = cfg.prefill_instances
        self.instances: list[Instance] = []
        self.prefill: list[Instance] = []
        self.decode: list[Instance] = []
        self.links = list(links)  #: one per instance, into it (same indices)
        self.block_bytes = block_bytes
        self.router: Router = ROUTERS.build(cfg.decode_router, router_cfg)
        self.deliver = deliver
        self.pull_home = cfg.session_home == "decode"
        #: the client's first token is the prefill's: the decode side continues from prompt + that token
        self.shift = 1 if cfg.first_token == "prefill" else 0
        self._out: dict[int, int] = {}  #: turn -> output tokens (the prefill request runs with 1)
        self._prefill_req: dict[int, Request] = {}  #: turn -> its prefill request, until the decode side ends
        self._dinfo: dict[int, ProgramInfo] = {}  #: program -> its decode-side info (home = decode-pool index)
        self._pending: list[deque[Request]] = []
        self._handoff_s: dict[int, float] = {}
        self._xfer_start: dict[int, float] = {}
        self._xfer: dict[int, Any] = {}  #: turn -> its KV transfer in flight (cancelled if the receiver fails)
        #: watchers of the pools (replica failures, :meth:`watch`): told when a side finishes a call, and asked
        #: whether an instance will recover when every decode instance is down (an error if none will)
        self._side_done: tuple[Callable[[Request], None], ...] = ()
        self._pool_down: tuple[Callable[[str], None], ...] = ()
        self._held: list[Request] = []  #: hand-offs waiting for a decode instance to be up (every one is down)
        self._retry_at: dict[int, int] = {}  #: turn -> prefill instance that computed the prompt of a failed call
        # ---- metrics ----
        self.handoffs = 0
        self.kv_bytes_transferred = 0  #: prefill -> decode, the prompt blocks the decode instance did not cache
        self.transfer_s: list[float] = []  #: per turn, slots allocated -> KV arrived
        self.admit_wait_s: list[float] = []  #: per turn, prefill done -> decode slots allocated
        self.prefill_ttft_s: list[float] = []  #: per turn, release -> the prefill instance's token
        self.decode_local_hit_tokens = 0

    def watch(self, on_side_done: Callable[[Request], None], on_pool_down: Callable[[str], None]) -> None:
        """A mechanism that changes which instances are up (:mod:`agentreplay.features.failover`) watches the pools:
        ``on_side_done`` gets the prefill or decode request of each side that finishes a call, ``on_pool_down``
        is called (with what is down) when a hand-off finds every decode instance down."""
        self._side_done += (on_side_done,)
        self._pool_down += (on_pool_down,)

    def attach(self, instances: Sequence[Instance]) -> None:
        """The cluster, once built (prefill pool first)."""
        self.instances = list(instances)
        self.prefill = self.instances[: self.n_prefill]
        self.decode = self.instances[self.n_prefill :]
        self._pending = [deque() for _ in self.decode]

    def idle(self) -> bool:
        """Nothing in flight between the pools and no program's decode-side state left (checked at the end of a
        run)."""
        return not self._prefill_req and not self._out and not any(self._pending) and not self._held and not self._dinfo

    # ---- prefill side --------------------------------------------------------------------------------------
    def prepare(self, r: Request) -> None:
        """A turn routed to a prefill instance (orchestrator hook, before submission): it runs with one output
        token; with ``session_home = "decode"`` it may pull its cached prefix from the session's decode instance. A
        client's retry of a call a failure aborted (:mod:`agentreplay.features.failover`) keeps the call's output
        length recorded the first time."""
        self._out.setdefault(r.turn, r.target_out)
        r.target_out = 1
        if self._retry_at and self._retry_at.pop(r.turn, -1) == r.info.home:
            # a call whose decode side failed, retried on the prefill instance that computed its prompt: its blocks
            # there are this prompt's (vLLM's block hashes find them), not only the trace's reuse of the last turn
            r.reuse = r.prompt
        if self.pull_home:
            info = self._dinfo.get(r.program)
            if info is not None and info.home >= 0:
                r.migrate_from = self.n_prefill + info.home

    def remote(self, r: Request) -> tuple[SegmentPool, Link] | None:
        """Residency hook of a prefill instance: the pool a ``migrate_from`` pull reads and the link it comes
        over (the requesting prefill instance's). A prefill router's own move (session affinity with
        ``inter_instance_gbps``) reads another prefill instance the same way."""
        src = self.instances[r.migrate_from]
        src.sync_pool()  # its decode run's block use so far, as step by step
        return src.pool, self.links[r.instance]

    def on_prefill_done(self, r: Request) -> None:
        """The prefill instance produced the token: route the turn over the decode pool and queue it there."""
        now = self.engine.now
        for watcher in self._side_done:
            watcher(r)
        self.prefill_ttft_s.append(r.first_token_s - r.release_s)
        info = self._dinfo.get(r.program)
        if info is None:
            info = self._dinfo[r.program] = ProgramInfo(r.info.arrival_s)
        out = self._out.pop(r.turn) - self.shift
        if out == 0:  # (first_token = "prefill") a one-token call is done at the prefill instance
            if r.last:
                del self._dinfo[r.program]
            self.deliver(r)
            return
        self.handoffs += 1
        d = Request(
            turn=r.turn,
            program=r.program,
            turn_idx=r.turn_idx,
            prompt=r.prompt + self.shift,
            target_out=out,
            reuse=r.prompt + self.shift,
            pfx=None,
            prog=self.decode[0].pool.segment(("prog", r.program), 0),  # (replaced once routed)
            base=0,
            release_s=r.release_s,
            info=info,
            tool_class=r.tool_class,
            last=r.last,
            next_gap_s=r.next_gap_s,
        )
        self._prefill_req[r.turn] = r
        self._handoff_s[r.turn] = now
        self._hand_off(d)

    def _hand_off(self, d: Request) -> None:
        """Route a hand-off over the decode pool and queue it there; held while every decode instance is down."""
        if not any(inst.up for inst in self.decode):
            for watcher in self._pool_down:
                watcher("every decode instance")
            self._held.append(d)
            return
        j = self.router.pick(d, self.decode, self.engine.now)
        d.migrate_from = -1  # a decode-pool move carries nothing: the hand-off brings the KV
        d.info.home = j
        d.prog = self.decode[j].pool.segment(("prog", d.program), 0)  # the whole context: no shared segment
        self._pending[j].append(d)
        self._admit(j)

    def resume_held(self) -> None:
        """A decode instance is up again: hand the held hand-offs over, in the order they were held."""
        held, self._held = self._held, []
        for d in held:
            self._hand_off(d)

    # ---- decode side ---------------------------------------------------------------------------------------
    def _admit(self, j: int) -> None:
        """Give waiting hand-offs their slots on decode instance ``j``, FIFO, while blocks allow, and start their
        transfers."""
        inst = self.decode[j]
        kv = inst.sched.kv
        bs = kv.bs
        q = self._pending[j]
        if q:
            # a decode run in flight counted on the free blocks: allocate its steps so far first (the
            # submission below then ends the run after the step in progress, as for any arrival)
            inst.sync_pool()
        while q:
            d = q[0]
            hit = kv.get_computed_blocks(d)
            local = hit.prog_hit
            need = held_blocks(d.prompt - 1, 0, bs)  # slots of the loaded tokens (the last one is recomputed)
            new = max(0, need - local)
            if not kv.can_allocate(new, hit.evictable, d.program):
                return  # FCFS: the head waits for blocks, and so do those behind it
            q.popleft()
            kv.allocate_slots(d, hit, new)
            now = self.engine.now
            self.admit_wait_s.append(now - self._handoff_s.pop(d.turn))
            d.admitted = True
            d.cached_tokens = local * bs
            self.decode_local_hit_tokens += local * bs
            d.computed = local * bs
            d.held = d.loading = True
            nbytes = max(0, held_blocks(d.prompt - self.shift, 0, bs) - local) * self.block_bytes  # the prefill's KV
            self.kv_bytes_transferred += nbytes
            self._xfer_start[d.turn] = now
            self._xfer[d.turn] = self.links[inst.index].start(nbytes, partial(self._arrived, d, inst))
            inst.submit(d)

    def _arrived(self, d: Request, inst: Instance) -> None:
        del self._xfer[d.turn]
        self.transfer_s.append(self.engine.now - self._xfer_start.pop(d.turn))
        d.computed = d.prompt - 1
        d.loading = False
        assert inst.residency is not None
        inst.residency.on_ready()  # the instance's wake (Instance._wake), as a tier load's arrival

    def on_decode_done(self, d: Request) -> None:
        """The decode instance finished the turn: complete its prefill request and hand it on."""
        r = self._prefill_req.pop(d.turn)
        r.target_out = d.target_out + self.shift
        r.generated = d.generated + self.shift
        if not self.shift:
            r.first_token_s = d.first_token_s
        r.finish_s = d.finish_s
        r.preemptions += d.preemptions
        r.recomputed_tokens += d.recomputed_tokens
        self.deliver(r)
        self._admit(d.instance - self.n_prefill)
        for watcher in self._side_done:
            watcher(d)
        if d.last:  # (a finished program's decode-side state goes: a streamed day holds live programs only)
            del self._dinfo[d.program]

    # ---- failures (agentreplay.features.failover) -------------------------------------------------------------
    def abort_decode(self, i: int, aborted: Sequence[Request]) -> list[tuple[Request, Request]]:
        """Decode instance ``i`` (cluster index) failed: its aborted decode requests (``aborted``, from
        :meth:`Instance.reset`) and then the hand-offs queued for it fail at the client, as vLLM's proxy sees the
        decode side's error (``toy_proxy_server.py`` streams the decode response), so each call is retried whole
        by the client: a new prefill, then a new hand-off. Their KV transfers in flight stop. Returns ``(decode
        request, the call's prefill request)`` per call, the latter to retry; the call's output length is kept
        for the retry's :meth:`prepare`."""
        j = i - self.n_prefill
        queued = list(self._pending[j])
        self._pending[j].clear()
        out: list[tuple[Request, Request]] = []
        for d in (*aborted, *queued):
            t = self._xfer.pop(d.turn, None)
            if t is not None:
                self.links[i].cancel(t)
                self._xfer_start.pop(d.turn, None)
            self._handoff_s.pop(d.turn, None)
            self._out[d.turn] = d.target_out + self.shift
            r = self._prefill_req.pop(d.turn)
            self._retry_at[d.turn] = r.instance
            out.append((d, r))
        return out

    def queued_calls(self, i: int) -> Sequence[Request]:
        """Hand-offs queued for decode instance ``i`` (cluster index), not admitted yet."""
        return self._pending[i - self.n_prefill]

    def decode_homed(self, i: int) -> list[int]:
        """Programs whose decode home is decode instance ``i`` (cluster index)."""
        j = i - self.n_prefill
        return [p for p, info in self._dinfo.items() if info.home == j]

    # ---- report ----------------------------------------------------------------------------------------------
    def summary(self, makespan_s: float) -> dict[str, Any]:
        """The mechanism's figures for ``summary.json`` (``disagg``)."""
        cfg = self.cfg
        span = makespan_s if makespan_s > 0 else float("nan")
        busy_p = sum(i.stats.busy_s for i in self.prefill)
        busy_d = sum(i.stats.busy_s for i in self.decode)
        pulled = sum(self.links[i.index].bytes_moved for i in self.prefill)
        return {
            "prefill_instances": len(self.prefill),
            "decode_instances": len(self.decode),
            "session_home": cfg.session_home,
            "link": cfg.link,
            "link_gbps_per_instance": [lk.bytes_per_s / 1e9 for lk in self.links],
            "handoffs": self.handoffs,
            "kv_bytes_transferred": self.kv_bytes_transferred,
            "kv_bytes_pulled": pulled,
            "decode_local_hit_tokens": self.decode_local_hit_tokens,
            "transfer_s": {
                "mean": float(np.mean(self.transfer_s)) if self.transfer_s else float("nan"),
                "p50": _pct(self.transfer_s, 50),
                "p99": _pct(self.transfer_s, 99),
            },
            "decode_admit_wait_s": {"p50": _pct(self.admit_wait_s, 50), "p99": _pct(self.admit_wait_s, 99)},
            "prefill_ttft_s": {
                "p50": _pct(self.prefill_ttft_s, 50),
                "p90": _pct(self.prefill_ttft_s, 90),
                "p99": _pct(self.prefill_ttft_s, 99),
            },
            "utilisation": {
                "prefill": busy_p / (len(self.prefill) * span),
                "decode": busy_d / (len(self.decode) * span),
            },
        }
