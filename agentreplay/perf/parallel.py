"""Data + expert parallelism for MoE models as vLLM runs it: one lockstep step of a DP group, the MoE dispatch
and combine over the EP group priced on the link, and what EP frees in each rank's memory.

vLLM sources (0.32, the CPU build's copy; file and function):

- Which engines step together: ``vllm/v1/engine/core.py`` ``EngineCoreProc.run_engine_core`` starts a
  ``DPEngineCoreProc`` for a DP rank only when ``model_config.is_moe``; dense DP ranks "are completely
  independent, so treat like DP=1" (no lockstep, no pricing change here).
- Lockstep: ``DPEngineCoreProc.run_busy_loop`` runs ``execute_dummy_batch`` on a rank that scheduled nothing
  while any rank has unfinished requests (``engines_running``, refreshed by ``_has_global_unfinished_reqs``);
  ``gpu_worker.execute_dummy_batch`` is ``_dummy_run(uniform_decode_query_len=1)``, a one-token forward. The MoE
  layers' collectives make every rank wait for the slowest one, so one group step lasts as long as its slowest
  rank (:meth:`DPStepPricer.step_time_s`).
- DP padding: ``vllm/v1/worker/dp_utils.py`` ``coordinate_batch_across_dp`` pads every rank's token count to
  the maximum across the DP ranks when CUDA graphs are on (the default); the MoE layer then sees
  ``dp * max_tokens`` tokens in the group. Each rank's count is its CUDA-graph padded one where the pricer pads
  batches (``padded_tokens``, :mod:`agentreplay.perf.deploy`): ``GPUModelRunner`` pads to the capture size
  before the DP ranks agree on the maximum.
- Expert sharding: with ``--enable-expert-parallel`` the experts are split over the EP group of ``dp * tp``
  ranks (``E / (dp * tp)`` whole experts each); without it the MoE layer is tensor-parallel over the flattened
  ``dp * tp`` ranks (``FusedMoEParallelConfig.make``, ``vllm/model_executor/layers/fused_moe/config.py``).
  Either way one rank holds ``1 / dp`` of what a TP-only rank holds and computes ``1 / dp`` of the group's
  token-expert pairs: :meth:`agentreplay.perf.model.PerfModel.experts_time_s` with ``ep = dp``.
- Dispatch / combine: ``parallel_config.all2all_backend`` (``vllm/config/parallel.py``, default
  ``"allgather_reducescatter"``; ``"naive"`` and ``"pplx"`` fall back to it). ``AgRsAll2AllManager``
  (``vllm/distributed/device_communicators/all2all.py``): dispatch = ``all_gatherv`` of the hidden states and
  router logits over the DP group, combine = reduce-scatter of the expert outputs; each a ring over the link:
  ``latency + (n - 1) / n * bytes / bandwidth``. The all-to-all backends (DeepEP high-throughput /
  low-latency, FlashInfer NVLink two-sided) send each token only to the EP ranks holding its top-k experts:
  ``(ep - 1) * (1 - (1 - 1/ep) ** k)`` remote ranks per token in expectation under uniform routing, once to
  dispatch and once to combine.

The link is the GPU catalogue's ``interconnect_bw_gbps`` at ``allreduce_efficiency`` with
``allreduce_latency_us`` per collective, as the TP all-reduce uses (one node; a multi-node EP group is not
modelled). Not modelled: the coordinator's 100 ms stats staleness (see the ``vllm-dp`` router), micro-batching
(DBO), EPLB's redundant experts, and the padding of a short rank's dense layers (the max over ranks covers the
longest rank's dense work).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, get_args

from agentreplay.perf.catalog import ACT_BYTES, DTYPE_BYTES, Dtype, GpuSpec, ModelSpec
from agentreplay.perf.pricer import PrefillItem
from agentreplay.perf.speculative import SpeculativePricer

All2AllBackend = Literal[
    "allgather_reducescatter", "deepep_high_throughput", "deepep_low_latency", "flashinfer_nvlink_two_sided"
]
#: backends that send each token only to the ranks holding its experts (the rest gather every token)
ALL_TO_ALL: frozenset[str] = frozenset({"deepep_high_throughput", "deepep_low_latency", "flashinfer_nvlink_two_sided"})

#: one rank's batch of a lockstep step: (prefill items, decode contexts), or None for a rank that runs the dummy
Batch = tuple[Sequence[PrefillItem], Sequence[int]] | None


class DeploymentError(ValueError):
    """A DP / EP combination vLLM does not run, or that the simulator does not model; names field and value."""


def check_deployment(model: ModelSpec, dp: int, tp: int, ep: bool, backend: str) -> None:
    """Raise :class:`DeploymentError` for a DP / EP layout that vLLM rejects or the simulator does not model."""
    if backend not in get_args(All2AllBackend):
        raise DeploymentError(
            f"[hardware] all2all_backend = {backend!r} is not modelled; one of {list(get_args(All2AllBackend))}"
        )
    if ep and not model.is_moe:
        raise DeploymentError(f"[hardware] ep = true needs a MoE model; {model.name} is dense (num_experts = 0)")
    if ep and dp == 1:
        raise DeploymentError(
            f"[hardware] ep = true with dp = 1 (experts over the TP group only) is not modelled; "
            f"set dp >= 2 (vLLM --data-parallel-size) for {model.name}"
        )
    if model.is_moe and dp > 1 and model.num_experts % (dp * tp) and ep:
        raise DeploymentError(
            f"[hardware] ep = true: {model.name} has {model.num_experts} experts, not divisible "
            f"over an EP group of dp * tp = {dp * tp} ranks"
        )


def lockstep(model: ModelSpec, dp: int) -> bool:
    """True when the DP ranks step together: a MoE model with dp > 1 (``DPEngineCoreProc``)."""
    return dp > 1 and model.is_moe


def expert_weight_bytes_freed(model: ModelSpec, dtype: Dtype, tp: int, dp: int) -> int:
    """Bytes of expert weights a rank of a DP MoE group does not hold, compared with a TP-only rank (the memory
    model's :meth:`ModelSpec.weight_bytes`): the experts are spread over ``dp * tp`` ranks instead of ``tp``."""
    if not model.is_moe or dp == 1:
        return 0
    per_tp_rank = model.num_hidden_layers * 3 * model.hidden_size * model.mlp_width * model.num_experts // tp
    return (per_tp_rank - per_tp_rank // dp) * DTYPE_BYTES[dtype]


@dataclass(frozen=True, slots=True)
class EPComm:
    """MoE dispatch + combine of one step over the DP / EP group. Times in seconds."""

    dp: int  #: DP ranks (the all-gather group)
    ep: int  #: EP ranks (dp * tp)
    hidden: int  #: hidden size
    num_experts: int
    top_k: int
    layers: int  #: MoE layers
    bytes_per_s: float  #: effective link bandwidth per GPU, one direction
    latency_s: float  #: fixed cost per collective
    backend: str

    @classmethod
    def build(cls, gpu: GpuSpec, model: ModelSpec, dp: int, tp: int, backend: str) -> EPComm:
        eff = gpu.efficiency
        return cls(
            dp,
            dp * tp,
            model.hidden_size,
            model.num_experts,
            model.experts_per_token,
            model.num_hidden_layers,
            gpu.interconnect_bw_gbps * 1e9 * eff.allreduce_efficiency,
            eff.allreduce_latency_us * 1e-6,
            backend,
        )

    def layer_s(self, tokens_per_rank: int) -> float:
        """Dispatch + combine of one MoE layer when every rank holds ``tokens_per_rank`` tokens (padded)."""
        if self.dp <= 1 or tokens_per_rank <= 0:
            return 0.0
        if self.backend in ALL_TO_ALL:
            ep = self.ep
            remote = (ep - 1) * (1.0 - (1.0 - 1.0 / ep) ** self.top_k)  # distinct remote ranks per token
            one_way = tokens_per_rank * remote * self.hidden * ACT_BYTES / self.bytes_per_s
            return 2 * (self.latency_s + one_way)
        ring = (self.dp - 1) / self.dp
        total = self.dp * tokens_per_rank  # tokens gathered on every rank
        gather = ring * total * (self.hidden + self.num_experts) * ACT_BYTES / self.bytes_per_s  # + router logits
        scatter = ring * total * self.hidden * ACT_BYTES / self.bytes_per_s
        return 2 * self.latency_s + gather + scatter

    def step_s(self, tokens_per_rank: int) -> float:
        """Dispatch + combine of every MoE layer in one forward pass."""
        return self.layers * self.layer_s(tokens_per_rank)


def batch_tokens(batch: Batch, decode_tokens: int = 1) -> int:
    """Tokens a rank runs through the model in one step (the dummy batch: 1); a decode runs ``decode_tokens``
    (``1 + k`` under speculative decoding: its token and ``k`` drafts to verify)."""
    if batch is None:
        return 1
    prefill, decode = batch
    return sum(item[0] for item in prefill) + decode_tokens * len(decode)


class DPStepPricer:
    """Prices one lockstep step of a DP group of a MoE model (module docstring): every rank's own iteration
    (``base``, one rank's pricer) with its expert work replaced by its share of the group's padded tokens, plus
    the EP dispatch / combine; the step lasts as long as the slowest rank. ``base`` must provide
    ``experts_time_s`` (:class:`agentreplay.perf.model.PerfModel` and its subclasses do; a
    :class:`~agentreplay.perf.speculative.SpeculativePricer` over one passes its target's on).

    ``decode_tokens``: tokens a decoding sequence runs through the MoE layers and the dispatch (``1 + k`` when
    the ranks speculate with ``k`` drafts: vLLM verifies them in the same forward, and the DP padding and the
    all-gather see the scheduled tokens)."""

    def __init__(self, base: object, comm: EPComm, pad_to_max: bool = True, decode_tokens: int = 1) -> None:
        if not hasattr(base, "experts_time_s"):
            raise DeploymentError(
                f"{base!r}: DP of a MoE model needs a pricer with experts_time_s (roofline, refined or table)"
            )
        self.base = base
        self.comm = comm
        self.pad_to_max = pad_to_max  #: coordinate_batch_across_dp pads to the max (CUDA graphs on)
        if decode_tokens < 1:
            raise ValueError(f"DPStepPricer decode_tokens={decode_tokens} must be >= 1")
        self.decode_tokens = decode_tokens

    def rank_times_s(self, batches: Sequence[Batch]) -> list[float]:
        """Seconds each rank's part of the step takes (the dummy rank: a one-token decode at context 0)."""
        base, dp = self.base, self.comm.dp
        # tokens each rank's kernels run: after CUDA-graph padding where the pricer pads (agentreplay.perf.deploy;
        # a batch with prefill only when mixed batches run graphs), which the rank's own iteration price includes
        graphs = getattr(base, "padded_tokens", None)
        dt = self.decode_tokens
        tokens = [
            batch_tokens(b, dt) if graphs is None else graphs(batch_tokens(b, dt), b is None or not b[0])
            for b in batches
        ]
        pad = max(tokens)
        group = dp * pad if self.pad_to_max else sum(tokens)
        shared = base.experts_time_s(group, dp) + self.comm.step_s(pad)  # type: ignore[attr-defined]
        # the dummy batch is one token of the target alone (no drafts: _dummy_run(uniform_decode_query_len=1))
        dummy = base.target if isinstance(base, SpeculativePricer) else base
        out = []
        for b, n in zip(batches, tokens, strict=True):
            if b is None:
                own = dummy.iteration_time_s((), (0,)) - base.experts_time_s(n, 1)  # type: ignore[attr-defined]
            else:
                own = base.iteration_time_s(*b) - base.experts_time_s(n, 1)  # type: ignore[attr-defined]
            out.append(own + shared)
        return out

    def step_time_s(self, batches: Sequence[Batch]) -> float:
        """Seconds of one lockstep step: the slowest rank."""
        if len(batches) != self.comm.dp:
            raise ValueError(f"{len(batches)} batches for a DP group of {self.comm.dp} ranks")
        return max(self.rank_times_s(batches))
