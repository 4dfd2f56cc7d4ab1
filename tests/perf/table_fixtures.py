"""Shared inputs of the table-pricer tests (tests/perf/test_table.py, tests/perf/test_table_tiles.py): the
efficiency and refinement, toy GPUs, and a synthetic measured table that agrees with its own roofline."""

from __future__ import annotations

import dataclasses

import numpy as np

from agentreplay.perf import (
    Efficiency,
    GpuSpec,
    MeasuredTable,
    PerfModel,
    Refinement,
    TablePerfModel,
    load_model,
)

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
REF = Refinement(
    gemm_m_half_tokens=96.0,
    elementwise_kernel_us=2.0,
    elementwise_bandwidth_efficiency=1.5,
    attn_kernel_us=8.0,
    attn_prefill_kv_efficiency=0.2,
    attn_prefill_m_half_tokens=50.0,
    attn_decode_seq_us=0.3,
)
TOY = load_model("toy")
TOKENS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
ITERATIONS = [([(100, 0)], []), ([(2048, 512), (7, 0, False)], [10, 500]), ([], [0, 1, 4000]), ([(1, 0)], [3])]


def gpu(tp_link: float = 100.0) -> GpuSpec:
    return GpuSpec(
        name="unit",
        display_name="unit",
        architecture="hopper",
        memory_gib=80.0,
        usable_memory_gib=80.0,
        mem_bandwidth_gbps=2000.0,
        bf16_tflops=500.0,
        fp8_tflops=1000.0,
        interconnect="nvlink",
        interconnect_bw_gbps=tp_link,
        efficiency=EFF,
    )


def tile_gpu(sms: int = 4, smem_kib: float = 100.0, arch: str = "ada", tile_eff: float = 0.0) -> GpuSpec:
    """An Ada-like GPU with an SM count; ``tile_eff`` > 0 turns on the tile form of prefill attention."""
    return GpuSpec(
        name="tiles",
        display_name="tiles",
        architecture=arch,
        memory_gib=80.0,  # type: ignore[arg-type]
        usable_memory_gib=80.0,
        mem_bandwidth_gbps=2000.0,
        bf16_tflops=400.0,
        fp8_tflops=0.0,
        interconnect="pcie",
        interconnect_bw_gbps=32.0,
        sm_count=sms,
        smem_per_sm_kib=smem_kib,
        efficiency=dataclasses.replace(EFF, attn_prefill_tile_efficiency=tile_eff),
    )


def synthetic_table(pm: PerfModel, tp: int = 1) -> MeasuredTable:
    """Per-layer seconds of a one-layer copy of ``pm``'s own roofline (+ launches), so table and model agree."""
    ops = {}
    for op in (
        "layernorm",
        "qkv_proj",
        "rotary_emb",
        "o_proj",
        "gate_up_proj",
        "act_fn",
        "down_proj",
        "embedding",
        "final_layernorm",
        "lm_head",
        "sampler",
    ):
        ops[op] = (list(TOKENS), [TablePerfModel._op_ref(pm, op, n) * 1.1 for n in TOKENS])
    pf_n, pf_c = (np.array(v).ravel() for v in np.meshgrid([16, 64, 256, 1024], [0, 128, 2048, 8192]))
    pf_s = [TablePerfModel._pf_ref(pm, n, c) * 0.9 for n, c in zip(pf_n, pf_c, strict=True)]
    dec_b, dec_c = (np.array(v).ravel() for v in np.meshgrid([1, 8, 64], [16, 1024, 8192]))
    dec_s = 4e-6 + 1e-6 * np.log2(dec_b) + 3e-9 * dec_b * dec_c  # exactly linear in b * ctx per batch size
    return MeasuredTable(
        "synthetic",
        "unit",
        pm.model.name,
        tp,
        ops=ops,
        attention_prefill=(pf_n.tolist(), pf_c.tolist(), pf_s),
        attention_decode=(dec_b.tolist(), dec_c.tolist(), dec_s.tolist()),
    )
