"""Measured all-reduce tables in the table pricer: reproduction of measured points, interpolation and anchoring in
the roofline's shape, the exact decode form, input checks, the tables.toml round trip and the packaged curves."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from agentreplay.perf import AllReduceTable, Efficiency, GpuSpec, MeasuredTable, PerfModel, TablePerfModel, load_model
from agentreplay.perf.table import load_allreduce_tables, pricer_from_names

EFF = Efficiency(
    compute_efficiency=0.7,
    bandwidth_efficiency=0.8,
    attn_prefill_efficiency=0.5,
    attn_decode_efficiency=0.7,
    allreduce_efficiency=0.8,
    allreduce_latency_us=10.0,
    kernel_overhead_us=3.0,
    framework_overhead_ms=0.5,
    per_seq_overhead_us=1.0,
)
TOY = load_model("toy")
GPU = GpuSpec(
    name="unit",
    display_name="unit",
    architecture="hopper",
    memory_gib=80.0,
    usable_memory_gib=80.0,
    mem_bandwidth_gbps=2000.0,
    bf16_tflops=500.0,
    fp8_tflops=1000.0,
    interconnect="nvlink",
    interconnect_bw_gbps=100.0,
    efficiency=EFF,
    p2p=False,
)  # no P2P: vLLM all-reduces with NCCL
PER_TOKEN = TOY.hidden_size * 2  # bf16 hidden state
NBYTES = [PER_TOKEN * t for t in (1, 8, 64, 512)]
SECONDS = [20e-6, 22e-6, 40e-6, 150e-6]


def table(tp: int = 4, gpu: str = "unit") -> AllReduceTable:
    return AllReduceTable(name="net/unit", gpu=gpu, tp=tp, nbytes=NBYTES, seconds=SECONDS)


def pricer(tp: int = 4, **kw: object) -> TablePerfModel:
    fb = PerfModel(GPU, TOY, tp=tp)
    return TablePerfModel(MeasuredTable(name="empty", gpu="unit", model=TOY.name, tp=tp), fb, **kw)  # type: ignore


def comm(pm: TablePerfModel, tokens: int) -> float:
    return pm.breakdown([(tokens, 0, False)], ())["tp_comm"]


def test_roofline_allreduce_by_hand() -> None:
    pm = PerfModel(GPU, TOY, tp=4)
    link = 100e9 * 0.8
    assert pm.allreduce_time_s(1e6) == pytest.approx(10e-6 + 2 * 3 / 4 * 1e6 / link, rel=1e-12)
    assert pm.allreduces_per_forward == 2 * TOY.num_hidden_layers + 1
    assert pm.allreduce_bytes_per_token == PER_TOKEN
    # the forward's collectives are its all-reduces (no logits gather without an emitting sequence)
    assert pm.breakdown([(64, 0, False)], ())["tp_comm"] == pytest.approx(
        pm.allreduces_per_forward * pm.allreduce_time_s(64 * PER_TOKEN), rel=1e-12
    )
    one = PerfModel(GPU, TOY, tp=1)
    assert one.allreduce_time_s(1e6) == 0.0 and one.allreduces_per_forward == 0


def test_table_reproduces_the_measured_points() -> None:
    pm = pricer(all_reduce=table())
    n = pm.fallback.allreduces_per_forward
    for b, s in zip(NBYTES, SECONDS, strict=True):
        assert comm(pm, b // PER_TOKEN) == pytest.approx(n * s, rel=1e-9)
    assert pm.covers("tp_comm") and not pricer().covers("tp_comm")


def test_between_and_beyond_the_points() -> None:
    pm = pricer(all_reduce=table())
    fb = pm.fallback
    n = fb.allreduces_per_forward
    mid = comm(pm, 200) / n  # between 64 and 512 tokens
    assert SECONDS[2] < mid < SECONDS[3]
    values = [comm(pm, t) for t in range(1, 2000, 37)]
    assert values == sorted(values)  # non-decreasing in the bytes
    # beyond the largest size: the edge value scaled by the roofline's all-reduce time
    big = 4096 * PER_TOKEN
    assert comm(pm, 4096) / n == pytest.approx(
        SECONDS[3] * fb.allreduce_time_s(big) / fb.allreduce_time_s(NBYTES[3]), rel=1e-9
    )


def test_logits_gather_stays_the_fallbacks() -> None:
    pm = pricer(all_reduce=table())
    fb = pm.fallback
    emit = pm.breakdown([(64, 0)], ())["tp_comm"] - comm(pm, 64)
    assert emit == pytest.approx(
        fb.breakdown([(64, 0)], ())["tp_comm"] - fb.breakdown([(64, 0, False)], ())["tp_comm"], rel=1e-9
    )
    assert emit > 0


def test_decode_form_and_breakdown_sum_with_the_table() -> None:
    pm = pricer(all_reduce=table())
    ctx = [100, 2000, 7]
    a, c = pm.decode_coeffs(len(ctx))
    assert pm.iteration_time_s([], ctx) == pytest.approx(a + c * sum(ctx), rel=1e-12)
    assert sum(pm.breakdown([], ctx).values()) == pytest.approx(pm.iteration_time_s([], ctx), rel=1e-9)
    prefill = [(300, 50)]
    assert sum(pm.breakdown(prefill, ctx).values()) == pytest.approx(pm.iteration_time_s(prefill, ctx), rel=1e-9)
    # the measured curve is slower than the roofline's at 8 tokens' worth: the table prices it so
    assert pm.iteration_time_s([], [0] * 8) > pricer().iteration_time_s([], [0] * 8)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"tp": 1}, "tp=1 must be >= 2"),
        ({"nbytes": [1, 2]}, "as many bytes as seconds"),
        ({"nbytes": []}, "as many bytes as seconds"),
        ({"seconds": [1e-5, 0.0, 1e-5, 1e-5]}, "must be > 0"),
    ],
)
def test_table_input_errors_name_the_table(kw: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        dataclasses.replace(table(), **kw)


def test_table_of_another_gpu_or_tp_is_refused() -> None:
    with pytest.raises(ValueError, match="net/unit is for unit over 8 GPUs, the pricer for unit at TP=4"):
        pricer(all_reduce=table(tp=8))
    with pytest.raises(ValueError, match="is for other over 4 GPUs"):
        pricer(all_reduce=table(gpu="other"))


def test_tables_toml_round_trip_and_errors(tmp_path: Path) -> None:
    from validation.calibration.calibrate import write_tables
    from validation.catalog import Catalog

    dst = tmp_path / "tables.toml"
    write_tables({}, Catalog.create(dst.parent), {"unit/tp4": table()})
    got = load_allreduce_tables(dst)["unit/tp4"]
    assert (got.gpu, got.tp, list(got.nbytes)) == ("unit", 4, NBYTES)
    assert list(got.seconds) == pytest.approx(SECONDS, rel=1e-4)
    bad = tmp_path / "bad.toml"
    bad.write_text('[allreduce."unit/tp4"]\ngpu = "unit"\ntp = 4\nbytes = [128, 256]\nseconds = [1e-5]\n')
    with pytest.raises(ValueError, match=r'bad.toml: \[allreduce."unit/tp4"\]: .*as many bytes as seconds'):
        load_allreduce_tables(bad)
    assert load_allreduce_tables(tmp_path / "missing.toml") == {}


def test_packaged_curves_reach_the_table_pricer() -> None:
    """calibrate ships Vidur's single-node all-reduce curves of the calibration GPU counts (2 and 8; the 4-GPU
    curve validates, validation.protocol); the table pricer of a TP>1 cell on that GPU uses the curve of its GPU
    count where shipped, a TP=1 or TP=4 one has none, and the rooflines never use it."""
    shipped = load_allreduce_tables()
    assert {"a100-80gb/tp2", "a100-80gb/tp8", "h100-sxm/tp8"} <= set(shipped)
    assert not {"a100-80gb/tp4", "h100-sxm/tp4"} & set(shipped)
    tp4 = pricer_from_names("table", "a100-80gb", "llama-2-70b", tp=4)
    assert isinstance(tp4, TablePerfModel) and tp4.all_reduce is None
    tp8 = pricer_from_names("table", "a100-80gb", "llama-2-70b", tp=8)
    assert isinstance(tp8, TablePerfModel) and tp8.all_reduce == shipped["a100-80gb/tp8"]
    t = shipped["a100-80gb/tp8"]
    n = tp8.fallback.allreduces_per_forward
    per_token = tp8.fallback.allreduce_bytes_per_token
    # a size NCCL carries in vLLM (the curve measured NCCL; smaller messages take vLLM's custom all-reduce)
    b = next(
        x for x in t.nbytes if x % per_token == 0 and x // per_token > 1 and not tp8.fallback.uses_custom_allreduce(x)
    )
    i = list(t.nbytes).index(b)
    # a measured size is reproduced up to the isotonic pooling of the curve (never below its running maximum)
    got = tp8.breakdown([(b // per_token, 0, False)], ())["tp_comm"] / n
    assert min(t.seconds[: i + 1]) <= got <= max(t.seconds[i:]) * (1 + 1e-9)
    tp1 = pricer_from_names("table", "a100-80gb", "llama-2-70b", tp=1)
    assert isinstance(tp1, TablePerfModel) and tp1.all_reduce is None
