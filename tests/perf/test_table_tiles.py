"""The measured-table pricer's GEMM-tile and tile-form shapes: tiles in the interpolation, the decode slope floored
at the DRAM stream and per batch size, the tile-form prefill attention, and mixed iterations priced as one
kernel."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest

from agentreplay.perf import (
    MeasuredTable,
    PerfModel,
    RefinedPerfModel,
    Refinement,
    TablePerfModel,
    load_model,
)
from agentreplay.perf.table import dram_key_s, pricer_from_names
from agentreplay.perf.tiles import makespan_blocks
from tests.perf.table_fixtures import EFF, REF, TOY, gpu, tile_gpu


def test_gemm_tiles_shape_the_interpolation() -> None:
    """A GEMM measured as the fallback's time at whole 64-token tiles: with tiles the table reproduces the held-out
    token counts exactly, without them it interpolates across the steps."""
    fb = RefinedPerfModel(gpu(), load_model("llama-3.1-8b"), refinement=REF)

    def tiled(n: float) -> float:
        return TablePerfModel._op_ref(fb, "gate_up_proj", -(-int(n) // 64) * 64)

    knots = [1, 48, 200, 700, 2000]
    table = MeasuredTable("tiles", "unit", "llama-3.1-8b", ops={"gate_up_proj": (knots, [tiled(n) for n in knots])})
    with_tiles, without = TablePerfModel(table, fb), TablePerfModel(table, fb, gemm_tile_tokens=1)
    layers, worst = fb.model.num_hidden_layers, 0.0
    for n in (20, 100, 130, 300, 450, 1000, 1500):
        want = layers * tiled(n)
        assert with_tiles.breakdown([(n, 0, False)], ())["gate_up_proj"] == pytest.approx(want, rel=1e-9), n
        worst = max(worst, abs(without.breakdown([(n, 0, False)], ())["gate_up_proj"] / want - 1))
    assert worst > 0.02
    sweep = [with_tiles.prefill_time_s(n) for n in range(1, 2500, 5)]
    assert all(a <= b for a, b in itertools.pairwise(sweep))
    with pytest.raises(ValueError, match="gemm_tile_tokens"):
        TablePerfModel(table, fb, gemm_tile_tokens=0)


def test_table_decode_slope_is_floored_at_the_dram_stream() -> None:
    """A per-key slope faster than the datasheet DRAM bandwidth (a profile whose KV stayed in L2 between
    repeats) is priced at the DRAM stream: 2 x 8 KV heads x 128 x 2 B = 4,096 B per key at 2,000 GB/s."""
    fb = RefinedPerfModel(gpu(), load_model("llama-3.1-8b"), refinement=REF)
    assert dram_key_s(fb) == pytest.approx(4096 / 2000e9, rel=1e-12)
    b, ctx = (np.array(v).ravel() for v in np.meshgrid([1, 4], [64, 1024, 8192]))
    slope = {1: 1e-9, 4: 3e-9}
    secs = [5e-6 + slope[x] * x * k for x, k in zip(b, ctx, strict=True)]
    pm = TablePerfModel(
        MeasuredTable("dec", "unit", "llama-3.1-8b", attention_decode=(b.tolist(), ctx.tolist(), secs)), fb
    )
    layers = fb.model.num_hidden_layers
    assert pm.decode_coeffs(1)[1] == pytest.approx(layers * 4096 / 2000e9, rel=1e-9)
    assert pm.decode_coeffs(4)[1] == pytest.approx(layers * 3e-9, rel=1e-6)
    fp8 = RefinedPerfModel(gpu(), load_model("llama-3.1-8b"), kv_dtype="fp8", refinement=REF)
    assert dram_key_s(fp8) == pytest.approx(2048 / 2000e9, rel=1e-12)  # one byte per KV element


def test_table_decode_slope_per_batch_size() -> None:
    fb = RefinedPerfModel(gpu(), load_model("llama-3.1-8b"), refinement=REF)
    b, ctx = (np.array(v).ravel() for v in np.meshgrid([1, 4, 16], [64, 1024, 8192]))
    slope = {1: 3e-9, 4: 4e-9, 16: 4.5e-9}  # all above the DRAM floor (4,096 B per key at 2,000 GB/s)
    secs = [5e-6 + 1e-6 * np.log2(x) + slope[x] * x * k for x, k in zip(b, ctx, strict=True)]
    pm = TablePerfModel(
        MeasuredTable("dec", "unit", "llama-3.1-8b", attention_decode=(b.tolist(), ctx.tolist(), secs)), fb
    )
    layers = fb.model.num_hidden_layers
    for x in (1, 4, 16):
        assert pm.decode_coeffs(x)[1] == pytest.approx(layers * slope[x], rel=1e-6)
    assert pm.decode_coeffs(2)[1] == pytest.approx(layers * 3.5e-9, rel=1e-6)  # linear in log batch size
    assert pm.decode_coeffs(64)[1] == pm.decode_coeffs(16)[1]  # held beyond the table
    a, c = pm.decode_coeffs(8)
    assert pm.iteration_time_s([], [100, 2000, 0, 7, 9, 11, 13, 5000]) == a + c * 7140
    assert pm.iteration_time_s([(30, 0)], [1000] * 8) == pytest.approx(
        sum(pm.breakdown([(30, 0)], [1000] * 8).values()), rel=1e-12
    )
    dec = [pm.decode_step_time_s(n, 4000) for n in range(1, 40)]
    assert all(x <= y for x, y in itertools.pairwise(dec))


def test_tile_form_prefill_attention_by_hand() -> None:
    """Prefill attention = layers x max(critical-path tiles x seconds per tile, the chunks' KV traffic), in the
    plain roofline and in the refined one (which only changes the FLOP form it replaces)."""
    from agentreplay.perf.tiles import makespan_tiles, tile_flops

    model = load_model("llama-3.1-8b")  # 32 heads of 128: 64 x 128 tiles, 80 KiB, one CTA per 100 KiB SM
    tile_s = tile_flops(128) / (400e12 / 4 * 0.5)
    for pm in (
        PerfModel(tile_gpu(sms=4, tile_eff=0.5), model),
        RefinedPerfModel(
            tile_gpu(sms=4, tile_eff=0.5),
            model,
            refinement=Refinement(gemm_m_half_tokens=96.0, attn_kernel_us=8.0, attn_decode_fixed_us=3.0),
        ),
    ):
        for chunks in ([(16, 0)], [(1000, 0)], [(2048, 4096)], [(300, 0), (20, 5000, False)]):
            span = makespan_tiles([c[:2] for c in chunks], 32, 4, 128)
            got = pm.breakdown(chunks, [])
            assert got["attention_prefill"] == pytest.approx(model.num_hidden_layers * span * tile_s, rel=1e-12)
            assert pm.iteration_time_s(chunks, []) == pytest.approx(sum(got.values()), rel=1e-12)
        assert pm.prefill_tiles() == (pytest.approx(tile_s, rel=1e-12), 4, 32)
        # one short chunk over a long cache: 32 CTAs of ceil(20,016 / 128) = 157 tiles on 4 slots = 8 rounds
        assert pm.breakdown([(16, 20_000)], [])["attention_prefill"] == pytest.approx(
            model.num_hidden_layers * 8 * 157 * tile_s, rel=1e-12
        )
    # the floor: on a GPU with almost no memory bandwidth the KV traffic of the FLOP form's memory term rules
    slow = dataclasses.replace(tile_gpu(sms=4, tile_eff=0.5), mem_bandwidth_gbps=0.001)
    flop = PerfModel(dataclasses.replace(slow, efficiency=EFF), model).breakdown([(16, 20_000)], [])
    assert PerfModel(slow, model).breakdown([(16, 20_000)], [])["attention_prefill"] == pytest.approx(
        flop["attention_prefill"], rel=1e-12
    )
    assert PerfModel(slow, model).decode_coeffs(3) == PerfModel(
        dataclasses.replace(slow, efficiency=EFF), model
    ).decode_coeffs(3)  # decode untouched
    assert PerfModel(gpu(), model).prefill_tiles() == (0.0, 1, 1)  # the FLOP form
    with pytest.raises(ValueError, match="sm_count"):
        PerfModel(
            dataclasses.replace(gpu(), efficiency=dataclasses.replace(EFF, attn_prefill_tile_efficiency=0.5)), model
        )


def test_decode_fixed_cost_only_when_decoding() -> None:
    base = RefinedPerfModel(gpu(), TOY, refinement=REF)
    fixed = RefinedPerfModel(gpu(), TOY, refinement=dataclasses.replace(REF, attn_decode_fixed_us=4.0))
    extra = TOY.num_hidden_layers * 4e-6
    assert fixed.iteration_time_s([], [10, 20]) == pytest.approx(base.iteration_time_s([], [10, 20]) + extra)
    assert fixed.iteration_time_s([(64, 0)], []) == pytest.approx(base.iteration_time_s([(64, 0)], []), rel=1e-12)
    assert fixed.decode_coeffs(3)[0] == pytest.approx(base.decode_coeffs(3)[0] + extra, rel=1e-12)


# ---- mixed iterations as one kernel --------------------------------------------------------------------------
def test_one_kernel_mixed_attention_by_hand() -> None:
    """Llama-3.1-8B at TP 8 (4 query heads, head_dim 128: 64 x 128 tiles) on 4 SMs of 100 KiB (one CTA each).
    Two decodes over 300 and 40 cached tokens (301 and 41 keys: 3 and 1 tiles) and a 64-token chunk over 100
    cached tokens (164 keys: 2 tiles) are blocks [3, 1, 2] per head, 12 CTAs on 4 slots. In dispatch order the
    slots' finish times go {3, 1, 2, 3} -> {2, 2, 3, 3} -> {2, 3, 3, 4} -> {3, 3, 4, 5} -> {3, 4, 4, 5} ->
    {4, 4, 5, 5} -> {4, 5, 5, 7} -> {5, 5, 5, 7} -> {5, 5, 7, 7}: 7 tile times."""
    model, g = load_model("llama-3.1-8b"), tile_gpu(sms=4, tile_eff=0.5)
    apart = RefinedPerfModel(g, model, tp=8, refinement=REF, mixed_attention="apart")
    one = RefinedPerfModel(g, model, tp=8, refinement=REF, mixed_attention="one_kernel")
    assert one.needs_decode_contexts and not apart.needs_decode_contexts
    assert makespan_blocks([3, 1, 2], 4, 4) == 7
    tile_s = one.prefill_tiles()[0]
    a, o = apart.breakdown([(64, 100)], [300, 40]), one.breakdown([(64, 100)], [300, 40])
    assert model.num_hidden_layers * 7 * tile_s > a["attention_prefill"]  # the kernel, not the chunk's KV floor
    assert o["attention_prefill"] == pytest.approx(model.num_hidden_layers * 7 * tile_s, rel=1e-12)
    assert o["attention_decode"] == 0.0
    assert {k: v for k, v in o.items() if not k.startswith("attention")} == {
        k: v for k, v in a.items() if not k.startswith("attention")
    }
    # without decodes, or without prefill, the two forms are the same iteration
    for prefill, ctx in (([(64, 100)], []), ([], [300, 40])):
        assert one.iteration_time_s(prefill, ctx) == apart.iteration_time_s(prefill, ctx)


def test_one_kernel_needs_the_tile_form_and_is_the_default() -> None:
    flop = PerfModel(tile_gpu(sms=4), load_model("llama-3.1-8b"), mixed_attention="one_kernel")
    assert not flop.needs_decode_contexts  # FLOP form: nothing to schedule, priced apart
    plain = PerfModel(tile_gpu(sms=4), load_model("llama-3.1-8b"), mixed_attention="apart")
    assert flop.iteration_time_s([(64, 100)], [300, 40]) == plain.iteration_time_s([(64, 100)], [300, 40])
    with pytest.raises(ValueError, match="mixed_attention='together'"):
        PerfModel(tile_gpu(sms=4), load_model("llama-3.1-8b"), mixed_attention="together")
    for kind in ("roofline", "refined", "table"):  # one kernel is the default
        assert pricer_from_names(kind, "rtx4090", "llama-3.1-8b").needs_decode_contexts
        assert not pricer_from_names(kind, "rtx4090", "llama-3.1-8b", mixed_attention="apart").needs_decode_contexts
    # the table's mixed iteration: the fallback's one kernel when it is longer than the measured parts
    table = pricer_from_names("table", "rtx4090", "llama-3.1-8b")
    apart = pricer_from_names("table", "rtx4090", "llama-3.1-8b", mixed_attention="apart")
    mixed = ([(32, 0)], [16384] + [0] * 15)
    got, parts = table.breakdown(*mixed), apart.breakdown(*mixed)
    assert got["attention_decode"] == 0.0
    assert got["attention_prefill"] == pytest.approx(
        max(
            table.fallback.breakdown(*mixed)["attention_prefill"],
            parts["attention_prefill"] + parts["attention_decode"],
        )
    )
    assert got["attention_prefill"] > parts["attention_prefill"] + parts["attention_decode"]


def test_one_kernel_prices_the_long_decode_not_the_context_sum() -> None:
    """Same decode context sum, one long decode instead of many short ones: apart prices both alike; one kernel
    prices the long decode's serial walk (a mixed shot's critical path)."""
    pm = RefinedPerfModel(
        tile_gpu(sms=128, tile_eff=0.7), load_model("llama-3.1-8b"), refinement=REF, mixed_attention="one_kernel"
    )
    apart = RefinedPerfModel(
        tile_gpu(sms=128, tile_eff=0.7), load_model("llama-3.1-8b"), refinement=REF, mixed_attention="apart"
    )
    even, skewed = [1024] * 16, [16384] + [0] * 15
    assert apart.iteration_time_s([(32, 0)], even) == pytest.approx(apart.iteration_time_s([(32, 0)], skewed))
    attn = [pm.breakdown([(32, 0)], c)["attention_prefill"] for c in (even, skewed)]
    # 129 tiles on the long decode's CTAs against about 37 when the same 4,640 tiles spread over 128 SMs
    assert attn[1] > 3 * attn[0]
