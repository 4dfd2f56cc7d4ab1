"""The refined roofline and the measured-table pricer: reduction to PerfModel, exact reproduction of table points,
monotone interpolation, the exact decode form, TP transfer, and the packaged tables."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentreplay.perf import (
    GpuSpec,
    IterationPricer,
    MeasuredTable,
    PerfModel,
    RefinedPerfModel,
    Refinement,
    TablePerfModel,
    load_gpu,
    load_model,
)
from agentreplay.perf.deploy import default_cudagraph_sizes
from agentreplay.perf.interp import Curve, fit_decode, isotonic
from agentreplay.perf.table import load_refinement, load_tables, pricer_from_names
from tests.perf.table_fixtures import EFF, ITERATIONS, REF, TOKENS, TOY, gpu, synthetic_table, tile_gpu


@pytest.mark.parametrize("model", ["toy", "llama-3.1-8b", "qwen3-30b-a3b"])
def test_refined_without_refinement_is_the_roofline(model: str) -> None:
    base = PerfModel(gpu(), load_model(model), tp=2)
    plain = RefinedPerfModel(gpu(), load_model(model), tp=2)
    for prefill, ctx in ITERATIONS:
        assert plain.iteration_time_s(prefill, ctx) == pytest.approx(base.iteration_time_s(prefill, ctx), rel=1e-12)
    assert plain.decode_coeffs(7) == pytest.approx(base.decode_coeffs(7), rel=1e-12)


def test_gemm_saturation_by_hand() -> None:
    """Compute-bound GEMM (ample bandwidth): time = 2 K N (M + M_half) / (peak * eff)."""
    g = GpuSpec(
        name="u",
        display_name="u",
        architecture="hopper",
        memory_gib=1.0,
        usable_memory_gib=1.0,
        mem_bandwidth_gbps=1e9,
        bf16_tflops=1.0,
        fp8_tflops=0.0,
        interconnect="nvlink",
        interconnect_bw_gbps=1.0,
        efficiency=EFF,
    )
    pm = RefinedPerfModel(g, TOY, refinement=Refinement(gemm_m_half_tokens=100.0))
    m = 300
    got = pm.breakdown([(m, 0)], [])["gate_up_proj"]
    assert got == pytest.approx(2 * TOY.num_hidden_layers * 64 * 256 * (m + 100) / (1e12 * 0.7), rel=1e-9)


def test_refined_kernel_costs_by_class() -> None:
    pm = RefinedPerfModel(gpu(), TOY, refinement=Refinement(elementwise_kernel_us=1.0, attn_kernel_us=10.0))
    # per layer: 4 GEMMs x 3 us + 4 elementwise x 1 us + 1 attention x 10 us; embedding + final norm: 2 x 1 us;
    # an emitting iteration adds the LM head (GEMM, 3 us) and the sampler (1 us).
    want = (TOY.num_hidden_layers * (4 * 3 + 4 * 1 + 10) + 2 + 3 + 1) * 1e-6
    assert pm.breakdown([(5, 0)], [])["kernel_overhead"] == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("form", ["flop", "tile"])
@settings(max_examples=40, deadline=None)
@given(
    chunk=st.integers(1, 4096),
    prefix=st.integers(0, 50_000),
    extra=st.integers(1, 2048),
    ctxs=st.lists(st.integers(0, 20_000), max_size=20),
    more=st.integers(1, 5000),
)
def test_refined_more_work_is_never_cheaper(
    form: str, chunk: int, prefix: int, extra: int, ctxs: list[int], more: int
) -> None:
    if form == "flop":
        pm = RefinedPerfModel(gpu(), load_model("llama-3.1-8b"), tp=2, refinement=REF)
    else:  # FlashAttention-2 tile form of prefill attention, and a decode fixed cost
        pm = RefinedPerfModel(
            tile_gpu(sms=128, tile_eff=0.7),
            load_model("llama-3.1-8b"),
            tp=2,
            refinement=dataclasses.replace(REF, attn_decode_fixed_us=3.0),
        )
    base = pm.iteration_time_s([(chunk, prefix)], ctxs)
    assert pm.iteration_time_s([(chunk + extra, prefix)], ctxs) >= base
    assert pm.iteration_time_s([(chunk, prefix + extra)], ctxs) >= base
    assert pm.iteration_time_s([(chunk, prefix)], [*ctxs, more]) >= base
    a, c = pm.decode_coeffs(len(ctxs))
    assert pm.iteration_time_s([], ctxs) == pytest.approx(a + c * sum(ctxs), rel=1e-12)


def test_isotonic_and_curve() -> None:
    assert isotonic(np.array([1.0, 2.0, 3.0])).tolist() == [1.0, 2.0, 3.0]
    assert isotonic(np.array([1.0, 3.0, 2.0, 4.0])).tolist() == [1.0, 2.5, 2.5, 4.0]
    c = Curve([1, 10, 100], [1e-5, 2e-5, 8e-5])
    assert c(10) == pytest.approx(2e-5, rel=1e-12)
    assert c(np.sqrt(10)) == pytest.approx(np.sqrt(1e-5 * 2e-5), rel=1e-12)  # linear in log-log
    ref = lambda x: 3.0 * x  # noqa: E731
    assert c.at(200, ref) == pytest.approx(8e-5 * 2, rel=1e-12)  # anchored at the edge, scaled by the reference


def test_fit_decode_recovers_linear_data() -> None:
    b, ctx = np.meshgrid([1, 4, 16, 64], [16, 256, 4096])
    a = {1: 5e-6, 4: 7e-6, 16: 9e-6, 64: 2e-5}
    t = np.array([a[x] for x in b.ravel()]) + 3e-9 * b.ravel() * ctx.ravel()
    bs, got_a, got_c = fit_decode(b.ravel(), ctx.ravel(), t)
    assert bs.tolist() == [1, 4, 16, 64]
    assert got_a == pytest.approx([a[x] for x in bs], rel=1e-9)
    assert got_c == pytest.approx(3e-9, rel=1e-9)


@pytest.fixture(scope="module")
def table_pm() -> TablePerfModel:
    fb = RefinedPerfModel(gpu(), load_model("llama-3.1-8b"), refinement=REF)
    return TablePerfModel(synthetic_table(fb), fb)


def test_table_is_an_iteration_pricer(table_pm: TablePerfModel) -> None:
    assert isinstance(table_pm, IterationPricer)
    assert table_pm.iteration_time_s([], []) == 0.0


def test_table_reproduces_its_points(table_pm: TablePerfModel) -> None:
    t, n_layers = table_pm.table, table_pm.model.num_hidden_layers
    for op, (xs, secs) in t.ops.items():
        per = 1 if op in ("embedding", "final_layernorm", "lm_head", "sampler") else n_layers
        for x, s in zip(xs, secs, strict=True):
            bd = (
                table_pm.breakdown((), [0] * x)
                if op in ("lm_head", "sampler")
                else table_pm.breakdown([(x, 0, False)], ())
            )
            assert bd[op] == pytest.approx(per * s, rel=1e-12), (op, x)
    n, c, s = t.attention_prefill  # type: ignore[misc]
    for a, b, v in zip(n, c, s, strict=True):
        got = table_pm.breakdown([(int(a), int(b), False)], ())["attention_prefill"]
        assert got == pytest.approx(n_layers * v, rel=1e-12), (a, b)
    b, ctx, s = t.attention_decode  # type: ignore[misc]
    for x, k, v in zip(b, ctx, s, strict=True):
        got = table_pm.breakdown((), [int(k)] * int(x))["attention_decode"]
        assert got == pytest.approx(n_layers * v, rel=1e-9), (x, k)  # exactly linear data: NNLS is exact


def test_table_covers_and_drops_covered_launches(table_pm: TablePerfModel) -> None:
    assert table_pm.covers("qkv_proj") and table_pm.covers("attention_decode") and not table_pm.covers("tp_comm")
    assert table_pm.breakdown([(100, 0)], [5])["kernel_overhead"] == pytest.approx(0.0, abs=1e-15)


def test_table_interpolates_monotonically(table_pm: TablePerfModel) -> None:
    sweep = [table_pm.iteration_time_s([(n, 0)], ()) for n in range(1, 3000, 3)]  # across and beyond the table
    assert all(a <= b for a, b in itertools.pairwise(sweep))
    for n in (10, 100, 700, 5000):
        ctx = [table_pm.iteration_time_s([(n, c)], ()) for c in range(0, 20_000, 97)]
        assert all(a <= b for a, b in itertools.pairwise(ctx)), n
    for c in (0, 50, 3000, 12_000):
        tok = [table_pm.iteration_time_s([(n, c)], ()) for n in range(1, 2500, 7)]
        assert all(a <= b for a, b in itertools.pairwise(tok)), c
    dec = [table_pm.decode_step_time_s(b, 512) for b in range(1, 200)]
    assert all(a <= b for a, b in itertools.pairwise(dec))


@settings(max_examples=60, deadline=None)
@given(ctxs=st.lists(st.integers(0, 50_000), min_size=1, max_size=300))
def test_table_decode_is_exactly_a_plus_c_sum(table_pm: TablePerfModel, ctxs: list[int]) -> None:
    a, c = table_pm.decode_coeffs(len(ctxs))
    t = table_pm.iteration_time_s([], ctxs)
    assert t == a + c * sum(ctxs) == table_pm.decode_only_time_s(len(ctxs), sum(ctxs))
    assert sum(table_pm.breakdown([], ctxs).values()) == pytest.approx(t, rel=1e-9)


def test_table_breakdown_sums_to_iteration(table_pm: TablePerfModel) -> None:
    for prefill, ctx in ITERATIONS:
        assert sum(table_pm.breakdown(prefill, ctx).values()) == pytest.approx(
            table_pm.iteration_time_s(prefill, ctx), rel=1e-12
        )


def test_table_extrapolation_is_continuous(table_pm: TablePerfModel) -> None:
    edge = table_pm.breakdown([(1024, 0, False)], ())["gate_up_proj"]
    beyond = table_pm.breakdown([(1025, 0, False)], ())["gate_up_proj"]
    assert edge <= beyond <= edge * 1.01


def test_table_transfer_to_other_tp() -> None:
    src = RefinedPerfModel(gpu(), load_model("llama-3.1-8b"), tp=1, refinement=REF)
    dst = RefinedPerfModel(gpu(), load_model("llama-3.1-8b"), tp=2, refinement=REF)
    moved = TablePerfModel(synthetic_table(src), dst, src)
    for n in TOKENS:  # the table was 1.1 x the source's roofline: the transfer gives 1.1 x the target's
        want = 1.1 * TablePerfModel._op_ref(dst, "gate_up_proj", n) * 32
        assert moved.breakdown([(n, 0, False)], ())["gate_up_proj"] == pytest.approx(want, rel=1e-9)
    assert moved.breakdown([(100, 0)], [])["tp_comm"] > 0
    a, c = moved.decode_coeffs(8)
    assert moved.iteration_time_s([], [100] * 8) == a + c * 800


def test_packaged_tables_and_refinements() -> None:
    tables = load_tables()
    assert "rtx4090/llama-3.1-8b/tp1" in tables
    pm = TablePerfModel.from_names("rtx4090", "llama-3.1-8b")
    assert pm.covers("gate_up_proj") and pm.covers("attention_prefill") and pm.covers("attention_decode")
    assert 0.0 < pm.prefill_time_s(1000) < pm.prefill_time_s(2000)
    moved = TablePerfModel.from_names("rtx4090", "llama-3.1-8b", tp=2)  # only TP=1 measured: scaled
    assert moved.tp == 2 and moved.prefill_time_s(2000) < pm.prefill_time_s(2000)
    with pytest.raises(ValueError, match="no measured table"):
        TablePerfModel.from_names("b200", "llama-3.1-8b")
    eff, ref = load_refinement(load_gpu("rtx4090"))
    assert ref.gemm_m_half_tokens > 0 and eff != load_gpu("rtx4090").efficiency


def test_unknown_refinement_key(tmp_path) -> None:
    p = tmp_path / "roofline.toml"
    p.write_text('[gpu."rtx4090"]\nnot_a_parameter = 1.0\n')
    with pytest.raises(ValueError, match="not_a_parameter"):
        load_refinement(load_gpu("rtx4090"), p)
    with pytest.raises(ValueError, match="must be"):
        Refinement(attn_decode_seq_us=-1.0)


def test_irregular_prefill_grid_reproduces_points_and_is_monotone() -> None:
    """LLMServingSim v0 measures prefill attention only where context >= tokens: a triangle, not a grid."""
    fb = RefinedPerfModel(gpu(), TOY, refinement=REF)
    pts = [(n, c) for n in (32, 64, 128, 256) for c in (32, 64, 128, 256, 512, 1024) if c >= n]
    secs = [TablePerfModel._pf_ref(fb, n, c) * (1.0 + 0.2 * (n >= 64)) for n, c in pts]  # a step between rows
    pm = TablePerfModel(
        MeasuredTable("tri", "unit", "toy", attention_prefill=([n for n, _ in pts], [c for _, c in pts], secs)), fb
    )
    for (n, c), s in zip(pts, secs, strict=True):
        assert pm.breakdown([(n, c, False)], ())["attention_prefill"] == pytest.approx(2 * s, rel=1e-12)
    for c in (40, 300, 2000):
        tok = [pm.breakdown([(n, c, False)], ())["attention_prefill"] for n in range(8, 600, 5)]
        assert all(a <= b for a, b in itertools.pairwise(tok)), c


def test_simulation_with_the_table_pricer_fast_equals_slow() -> None:
    from agentreplay.sim import SimConfig, simulate
    from tests.factories import make_trace
    from tests.sim.test_properties import assert_same_replay

    trace = make_trace([[(800, 50, 0.5), (1500, 30, None)], [(300, 80, None)], [(2000, 20, 0.1), (2600, 40, None)]])
    pm = TablePerfModel.from_names("rtx4090", "llama-3.1-8b")
    cfg = SimConfig().replace(hardware={"gpu": "rtx4090"}, workload={"concurrency": 3})
    fast = simulate(trace, cfg, perf=pm)
    slow = simulate(trace, cfg.replace(scheduler={"fast_decode": False}), perf=pm)
    assert_same_replay(fast.turns, slow.turns)
    assert fast.summary["engine"]["events"] < slow.summary["engine"]["events"]


def test_pricer_from_names() -> None:
    from agentreplay.perf.table import PRICER_KINDS

    kinds = {k: pricer_from_names(k, "rtx4090", "llama-3.1-8b") for k in PRICER_KINDS}
    assert type(kinds["roofline"]) is PerfModel
    assert isinstance(kinds["refined"], RefinedPerfModel) and isinstance(kinds["table"], TablePerfModel)
    # cudagraph_sizes=None: a deployment's pricer pads batches to vLLM's default CUDA-graph sizes; the default ()
    # is eager, as PerfModel's default (and a simulation without [hardware] deployment_kernels)
    sizes = default_cudagraph_sizes(load_gpu("rtx4090"))
    graphs = PerfModel.from_names("rtx4090", "llama-3.1-8b", cudagraph_sizes=sizes)
    deployed = pricer_from_names("roofline", "rtx4090", "llama-3.1-8b", cudagraph_sizes=None)
    assert deployed.iteration_time_s([(100, 0)], [5]) == graphs.iteration_time_s([(100, 0)], [5])
    eager = kinds["roofline"]
    assert eager.iteration_time_s([(100, 0)], [5]) == PerfModel.from_names("rtx4090", "llama-3.1-8b").iteration_time_s(
        [(100, 0)], [5]
    )
    assert graphs.iteration_time_s([(100, 0)], [5]) > eager.iteration_time_s([(100, 0)], [5])  # 101 -> 104 tokens
    with pytest.raises(ValueError, match="allowed"):
        pricer_from_names("magic", "rtx4090", "llama-3.1-8b")
