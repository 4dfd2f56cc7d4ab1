"""DP + EP pricing (agentreplay.perf.parallel): dispatch / combine on the link, the lockstep step, freed memory."""

from __future__ import annotations

from typing import get_args

import pytest

from agentreplay.perf import PerfModel, load_model
from agentreplay.perf.parallel import (
    All2AllBackend,
    DeploymentError,
    DPStepPricer,
    EPComm,
    batch_tokens,
    check_deployment,
    expert_weight_bytes_freed,
    lockstep,
)
from agentreplay.perf.speculative import SpeculativePricer
from agentreplay.sim.config import All2AllName


def _comm(backend: str = "allgather_reducescatter", dp: int = 2, tp: int = 1, layers: int = 1) -> EPComm:
    return EPComm(
        dp=dp,
        ep=dp * tp,
        hidden=4096,
        num_experts=8,
        top_k=2,
        layers=layers,
        bytes_per_s=1e11,
        latency_s=1e-5,
        backend=backend,
    )


def test_allgather_reducescatter_by_hand() -> None:
    # 2 ranks x 100 tokens: all-gather of 200 tokens of (4096 hidden + 8 logits) bf16 over a ring (1/2 of it
    # crosses the link) = 0.5 * 200 * 8208 / 1e11 = 8.208 us; reduce-scatter 0.5 * 200 * 8192 / 1e11 = 8.192 us;
    # plus two 10 us latencies.
    assert _comm().layer_s(100) == pytest.approx(2e-5 + 8.208e-6 + 8.192e-6, rel=1e-12)
    assert _comm(layers=48).step_s(100) == pytest.approx(48 * 3.64e-5, rel=1e-12)
    assert _comm(dp=1).layer_s(100) == 0.0


def test_all_to_all_by_hand() -> None:
    # EP group of 4 (dp 2 x tp 2), top-2: 3 * (1 - 0.75^2) = 1.3125 remote ranks per token;
    # one way: 100 * 1.3125 * 4096 * 2 / 1e11 = 10.752 us; dispatch + combine with 10 us latency each.
    c = _comm("deepep_low_latency", dp=2, tp=2)
    assert c.layer_s(100) == pytest.approx(2 * (1e-5 + 1.0752e-5), rel=1e-12)


class _Base:
    """Iteration = 10 ms + 2 ms per token, of which 1 ms per token is expert work (split over ep ranks)."""

    def iteration_time_s(self, prefill, decode) -> float:
        return 0.01 + 2e-3 * (sum(i[0] for i in prefill) + len(decode))

    def experts_time_s(self, tokens: int, ep: int = 1) -> float:
        return 1e-3 * tokens / ep


def test_lockstep_step_is_the_slowest_rank_with_padding() -> None:
    p = DPStepPricer(_Base(), _comm(layers=0))
    busy = ([(10, 0, True)], [5, 5])  # 12 tokens
    # padded group: 2 x 12 tokens, each rank's share of the experts = 24 / 2 * 1 ms = 12 ms
    # busy rank: 10 + 24 - 12 (own experts) + 12 = 34 ms; dummy rank (1 token at ctx 0): 10 + 2 - 1 + 12 = 23 ms
    assert p.rank_times_s([busy, None]) == pytest.approx([0.034, 0.023])
    assert p.step_time_s([busy, None]) == pytest.approx(0.034)
    assert batch_tokens(None) == 1 and batch_tokens(busy) == 12
    with pytest.raises(ValueError, match="DP group of 2"):
        p.step_time_s([busy])


def test_lockstep_step_under_speculation_by_hand() -> None:
    """k = 2 drafts: a decode runs 3 tokens through the experts, the padding and the dispatch; the dummy rank still
    runs one token of the target alone."""
    spec = SpeculativePricer(_Base(), 2)
    assert spec.experts_time_s(7) == _Base().experts_time_s(7)  # the target's hook, passed on
    p = DPStepPricer(spec, _comm(layers=0), decode_tokens=3)
    busy = ([(10, 0, True)], [5, 5])  # 10 + 2 x 3 = 16 tokens
    # busy rank: 10 + 2 x 16 (the target at 16 tokens) - 16 (own experts) + 16 (its share of 2 x 16) = 42 ms;
    # dummy rank: 10 + 2 x 1 - 1 + 16 = 27 ms
    assert p.rank_times_s([busy, None]) == pytest.approx([0.042, 0.027])
    assert batch_tokens(busy, 3) == 16
    with pytest.raises(ValueError, match="decode_tokens=0"):
        DPStepPricer(spec, _comm(), decode_tokens=0)


def test_experts_hook_matches_the_model_terms() -> None:
    m = PerfModel.from_names("h100-sxm", "qwen3-30b-a3b")
    for n in (1, 7, 300):
        b = m.breakdown([], [100] * n)
        assert m.experts_time_s(n, 1) == pytest.approx(b["gate_up_proj"] + b["act_fn"] + b["down_proj"], rel=1e-9)
    # spread over 2 ranks: half the token-expert pairs and at most half the weights each
    assert m.experts_time_s(600, 2) < m.experts_time_s(600, 1)
    assert PerfModel.from_names("h100-sxm", "llama-3.1-8b").experts_time_s(10, 2) == 0.0


def test_freed_expert_weights_by_hand() -> None:
    q = load_model("qwen3-30b-a3b")  # 48 layers, hidden 2048, 128 experts of width 768
    per_rank = 48 * 3 * 2048 * 768 * 128
    assert expert_weight_bytes_freed(q, "bf16", 1, 2) == (per_rank - per_rank // 2) * 2
    assert expert_weight_bytes_freed(q, "bf16", 1, 1) == 0
    assert expert_weight_bytes_freed(load_model("llama-3.1-8b"), "bf16", 1, 2) == 0


def test_invalid_deployments_name_the_field() -> None:
    dense, moe = load_model("llama-3.1-8b"), load_model("qwen3-30b-a3b")
    with pytest.raises(DeploymentError, match="ep = true needs a MoE model"):
        check_deployment(dense, 2, 1, True, "allgather_reducescatter")
    with pytest.raises(DeploymentError, match="dp = 1"):
        check_deployment(moe, 1, 2, True, "allgather_reducescatter")
    with pytest.raises(DeploymentError, match="all2all_backend = 'pplx'"):
        check_deployment(moe, 2, 1, True, "pplx")
    with pytest.raises(DeploymentError, match="not divisible"):
        check_deployment(moe, 3, 1, True, "allgather_reducescatter")
    check_deployment(moe, 2, 1, True, "deepep_high_throughput")
    assert lockstep(moe, 2) and not lockstep(dense, 2) and not lockstep(moe, 1)


def test_backends_agree_with_the_config_literal() -> None:
    assert get_args(All2AllBackend) == get_args(All2AllName)
