"""``PerfModel.mixed_time_s``: a mixed step priced from the decodes' count and sum, the same number bit for bit
as ``iteration_time_s`` with the list the simulator used to build (agentreplay.perf.model.mixed_pricer)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentreplay.perf.catalog import load_gpu, load_model
from agentreplay.perf.model import PerfModel, mixed_pricer
from agentreplay.perf.refined import RefinedPerfModel

_H100 = load_gpu("h100-sxm")
_PER_SEQ = dataclasses.replace(_H100.efficiency, per_seq_overhead_us=3.0)  # every term that counts sequences

MODELS = {
    "roofline 8B per-seq cost": PerfModel(
        _H100, load_model("llama-3.1-8b"), efficiency=_PER_SEQ, mixed_attention="apart"
    ),
    "roofline 8B": PerfModel.from_names("h100-sxm", "llama-3.1-8b", mixed_attention="apart"),
    "refined 8B graphs": RefinedPerfModel.from_names(
        "h100-sxm", "llama-3.1-8b", mixed_attention="apart", cudagraph_sizes=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
    ),
    "refined MoE TP2": RefinedPerfModel.from_names("h100-sxm", "qwen3-30b-a3b", tp=2, mixed_attention="apart"),
}

items = st.lists(
    st.tuples(st.integers(1, 8192), st.integers(0, 100_000), st.booleans()),
    min_size=0,
    max_size=4,
)


@pytest.mark.parametrize("name", list(MODELS))
@settings(max_examples=150, deadline=None)
@given(prefill=items, n_dec=st.integers(0, 256), sum_ctx=st.integers(0, 10**8))
def test_mixed_time_equals_iteration_time_with_the_sum_first(name, prefill, n_dec, sum_ctx) -> None:
    pm = MODELS[name]
    if n_dec == 0:
        sum_ctx = 0
    price = mixed_pricer(pm)
    assert price is not None
    ctx = [sum_ctx] + [0] * (n_dec - 1) if n_dec else []
    assert price(prefill, n_dec, sum_ctx) == pm.iteration_time_s(prefill, ctx)  # exact


def test_no_fast_price_where_contexts_matter_or_a_subclass_prices_otherwise() -> None:
    one_kernel = PerfModel.from_names("h100-sxm", "llama-3.1-8b", mixed_attention="one_kernel")
    if one_kernel.needs_decode_contexts:
        assert mixed_pricer(one_kernel) is None

    class Doubled(PerfModel):  # a user's model: its own iteration price
        def iteration_time_s(self, prefill, decode_ctx):
            return 2 * super().iteration_time_s(prefill, decode_ctx)

    assert mixed_pricer(Doubled.from_names("h100-sxm", "llama-3.1-8b", mixed_attention="apart")) is None
    assert mixed_pricer(object()) is None
