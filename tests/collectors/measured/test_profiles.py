"""GPU-profile collectors (LLMServingSim, Vidur, Splitwise): real data checked against independent reads, name
normalisers, broken files, and the atomic measured writer."""

from __future__ import annotations

import csv
import json
import math
from collections import Counter
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from collectors.measured.common import (
    PHASES,
    SCOPES,
    STATS,
    MeasuredError,
    MeasuredResult,
    normalize_gpu,
    normalize_model,
    write_measured,
)
from collectors.measured.llmservingsim_profile import LLMServingSimProfileCollector
from collectors.measured.registry import PROFILE_COLLECTORS
from collectors.measured.schema import TABLES
from collectors.measured.splitwise_profile import SplitwiseProfileCollector
from collectors.measured.vidur_profile import VidurProfileCollector
from tests.conftest import shared_path

LSS = ("measurements", "profiles-llmservingsim")
VIDUR = ("measurements", "profiles-vidur")
SPLITWISE = ("measurements", "profiles-splitwise")


def rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def n_lines(path: Path) -> int:
    with open(path, "rb") as f:
        return sum(1 for line in f if line.strip()) - 1  # minus the header


def one(df: pd.DataFrame, **eq) -> pd.Series:
    if "cell_id" in eq:
        df = df[df["cell_id"].to_numpy() == eq.pop("cell_id")]
    mask = pd.Series(True, index=df.index)
    for k, v in eq.items():
        mask &= df[k] == v
    hit = df[mask]
    assert len(hit) == 1, (eq, len(hit))
    return hit.iloc[0]


def check_common(result: MeasuredResult) -> None:
    cells, comp = result.tables["cells"], result.tables["component"]
    assert result.skips == []
    assert cells["cell_id"].is_unique
    assert set(comp["cell_id"]) == set(cells["cell_id"])  # every cell has rows, every row a cell
    assert (comp["seconds"] > 0).all() and comp["seconds"].map(math.isfinite).all()
    assert set(comp["scope"]) <= set(SCOPES) and set(comp["stat"]) <= set(STATS)
    assert set(comp["phase"].dropna()) <= set(PHASES)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("H100", "h100-sxm"),
        ("h100", "h100-sxm"),
        ("DGX-H100", "h100-sxm"),
        ("NVIDIA H100 80GB HBM3", "h100-sxm"),
        ("h100-80gb", "h100-sxm"),
        ("h100_dgx", "h100-sxm"),
        ("H100 PCIe", None),
        ("H100 NVL", None),
        ("a100", "a100-80gb"),
        ("DGX-A100", "a100-80gb"),
        ("a100-80gb", "a100-80gb"),
        ("A100-SXM4-40GB", "a100-40gb"),
        ("RTX3090", "rtx3090"),
        ("NVIDIA GeForce RTX 3090", "rtx3090"),
        ("RTX4090", "rtx4090"),
        ("RTXPRO6000", "rtxpro6000"),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "rtxpro6000"),
        ("RTX A6000", "a6000"),
        ("A6000", "a6000"),
        ("RTX 6000 Ada", "a6000-ada"),
        ("A6000 Ada", "a6000-ada"),
        ("a40", "a40"),
        ("a40_pairwise_nvlink", "a40"),
        ("L40S", "l40s"),
        ("RTX A4000", "a4000"),
        ("A5000", "a5000"),
        ("H200", "h200"),
        ("NVIDIA B200", "b200"),
        ("GH200", None),
        ("TPU-v6e-1", None),
        ("h100-80gb-pcap", None),
        ("MI300X", None),
        ("", None),
        (None, None),
    ],
)
def test_normalize_gpu(raw, expected) -> None:
    assert normalize_gpu(raw) == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("meta-llama/Llama-3.1-8B", "llama-3.1-8b"),
        ("meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b"),
        ("Llama-3.1-70B", "llama-3.1-70b"),
        ("meta-llama/Llama-3.1-70B-Instruct", "llama-3.1-70b"),
        ("llama2-70b", "llama-2-70b"),
        ("meta-llama/Llama-2-70b-hf", "llama-2-70b"),
        ("Llama-2-7b", "llama-2-7b"),
        ("meta-llama/Llama-2-7b-hf", "llama-2-7b"),
        ("Qwen/Qwen3-32B", "qwen3-32b"),
        ("Qwen3-30B-A3B", "qwen3-30b-a3b"),
        ("Qwen/Qwen3-30B-A3B-Instruct-2507", "qwen3-30b-a3b"),
        ("mistralai/Mixtral-8x7B-v0.1", "mixtral-8x7b"),
        ("Mixtral-8x7B", "mixtral-8x7b"),
        ("meta-llama/Meta-Llama-3-8B", "llama-3-8b"),
        ("llama-3.1-8b", "llama-3.1-8b"),
        ("codellama/CodeLlama-34b-Instruct-hf", "codellama-34b"),
        ("RedHatAI/Llama-4-Scout-17B-16E-Instruct-FP8-dynamic", "llama-4-scout-17b-16e"),
        ("Qwen/Qwen-72B", "qwen-72b"),
        ("microsoft/phi-2", "phi-2"),
        ("bloom-176b", "bloom-176b"),
        ("microsoft/Phi-mini-MoE-instruct", "phi-mini-moe-instruct"),
    ],
)
def test_normalize_model(raw, expected) -> None:
    assert normalize_model(raw) == expected


@pytest.fixture(scope="module")
def lss() -> MeasuredResult:
    return LLMServingSimProfileCollector().collect(shared_path(*LSS))


def test_llmservingsim_cells_match_the_folders(lss) -> None:
    root = shared_path(*LSS) / "profiler"
    v0 = Counter(p.parents[3].name for p in (root / "v0" / "perf_models").glob("*/*/*/tp*/layers.csv"))
    perf = Counter(p.parents[4].name for p in (root / "perf").glob("*/*/*/*/tp*/dense.csv"))
    assert v0 == {"RTX3090": 4, "H100": 8, "A6000": 4, "TPU-v6e-1": 1}
    assert perf == {"RTX4090": 1, "RTXPRO6000": 6}
    check_common(lss)
    cells = lss.tables["cells"]
    by = cells.groupby(["source", cells["gpu"].fillna("-")]).size().to_dict()
    assert by == {
        ("llmservingsim-v0", "rtx3090"): 4,
        ("llmservingsim-v0", "h100-sxm"): 8,
        ("llmservingsim-v0", "a6000"): 4,
        ("llmservingsim-v0", "-"): 1,
        ("llmservingsim-perf", "rtx4090"): 1,
        ("llmservingsim-perf", "rtxpro6000"): 6,
    }
    c = one(cells, cell_id="llmservingsim-v0/h100-sxm/llama-3.1-70b/tp4")
    assert (c["tp"], c["model"], c["gpu_raw"]) == (4, "llama-3.1-70b", "H100")
    c = one(cells, cell_id="llmservingsim-perf/rtxpro6000/qwen3-30b-a3b/bf16/tp2")
    assert (c["dtype"], c["engine"], c["engine_version"]) == ("bf16", "vllm", "0.19.0")
    assert json.loads(c["config_json"])["gpu"] == "NVIDIA RTX PRO 6000 Blackwell Server Edition"


def test_llmservingsim_row_counts_match_an_independent_read(lss) -> None:
    root = shared_path(*LSS) / "profiler"
    comp = lss.tables["component"]
    counts = comp.groupby("cell_id").size()
    expected_total, mixed = 0, 0
    for layers in sorted((root / "v0" / "perf_models").glob("*/*/*/tp*/")):
        expected_total += sum(n_lines(layers / f) for f in ("layers.csv", "attention.csv") if (layers / f).exists())
    for tp_dir in sorted((root / "perf").glob("*/*/*/*/tp*/")):
        expected_total += n_lines(tp_dir / "dense.csv") + n_lines(tp_dir / "per_sequence.csv")
        for r in rows(tp_dir / "attention.csv"):
            pure = r["n_decode"] == "0" or r["prefill_chunk"] == "0"
            expected_total += pure
            mixed += not pure
    assert len(comp) == expected_total == 641560
    assert f"{mixed} mixed prefill+decode attention shots" in lss.notes[0]
    tp4 = root / "v0/perf_models/H100/meta-llama/Llama-3.1-70B/tp4"
    assert (
        counts["llmservingsim-v0/h100-sxm/llama-3.1-70b/tp4"]
        == len(rows(tp4 / "layers.csv")) + len(rows(tp4 / "attention.csv"))
        == 30720 + 21603
    )


def test_llmservingsim_units_on_hand_checked_rows(lss) -> None:
    root = shared_path(*LSS) / "profiler"
    comp = lss.tables["component"]
    # v0 layers.csv: latency(ns), so 16243 ns = 16.243 us
    raw = next(
        r
        for r in rows(root / "v0/perf_models/H100/meta-llama/Llama-3.1-70B/tp4/layers.csv")
        if r["layer_name"] == "q_proj" and r["input"] == "1"
    )
    assert raw["latency(ns)"] == "16243"
    r = one(comp, cell_id="llmservingsim-v0/h100-sxm/llama-3.1-70b/tp4", op="q_proj", num_tokens=1)
    assert r["seconds"] == pytest.approx(16243e-9)
    assert (r["scope"], r["stat"], r["batch_size"]) == ("layer", "median", 1)
    lm = one(comp, cell_id="llmservingsim-v0/h100-sxm/llama-3.1-70b/tp4", op="lm_head", num_tokens=1)
    assert lm["scope"] == "model"
    # v0 attention.csv (Vidur layout): milliseconds; first row is a 32-token prefill chunk over 32 cached tokens
    first = rows(root / "v0/perf_models/H100/meta-llama/Llama-3.1-70B/tp4/attention.csv")[0]
    assert (first["is_prefill"], first["prefill_chunk_size"], first["kv_cache_size"]) == ("True", "32", "32")
    r = one(
        comp,
        cell_id="llmservingsim-v0/h100-sxm/llama-3.1-70b/tp4",
        op="attention",
        phase="prefill",
        num_tokens=32,
        context_tokens=32,
    )
    ms = float(first["time_stats.attn_prefill.median"])
    assert r["seconds"] == pytest.approx(ms / 1e3) == pytest.approx(5.312e-6)
    raw_attn = rows(root / "v0/perf_models/H100/meta-llama/Llama-3.1-70B/tp4/attention.csv")
    attn = comp[(comp["cell_id"] == "llmservingsim-v0/h100-sxm/llama-3.1-70b/tp4") & (comp["op"] == "attention")]
    assert attn["seconds"].tolist() == pytest.approx(
        [  # every row, in file order, ms -> s
            float(x["time_stats.attn_prefill.median" if x["is_prefill"] == "True" else "time_stats.attn_decode.median"])
            * 1e-3
            for x in raw_attn
        ]
    )
    i = next(i for i, x in enumerate(raw_attn) if x["is_prefill"] == "False" and x["batch_size"] == "8")
    dec = attn.iloc[i]
    assert (dec["phase"], dec["num_tokens"], dec["batch_size"]) == ("decode", 8, 8)
    assert dec["context_tokens"] == int(raw_attn[i]["kv_cache_size"])
    # TPU attention.csv: nanoseconds, p50 used as the median
    tpu = rows(root / "v0/perf_models/TPU-v6e-1/meta-llama/Llama-3.1-8B/tp1/attention.csv")[0]
    r = one(
        comp,
        cell_id="llmservingsim-v0/tpu-v6e-1/llama-3.1-8b/tp1",
        op="attention",
        phase="prefill",
        num_tokens=32,
        context_tokens=0,
    )
    assert r["seconds"] == pytest.approx(float(tpu["p50_ns"]) * 1e-9) == pytest.approx(7.1025e-6)
    # perf/: microseconds
    tp2 = root / "perf/RTXPRO6000/Qwen/Qwen3-30B-A3B-Instruct-2507/bf16/tp2"
    cid = "llmservingsim-perf/rtxpro6000/qwen3-30b-a3b/bf16/tp2"
    assert rows(tp2 / "dense.csv")[0] == {"layer": "embedding", "tokens": "1", "time_us": "2.76267"}
    r = one(comp, cell_id=cid, op="embedding", num_tokens=1)
    assert r["seconds"] == pytest.approx(2.76267e-6) and (r["scope"], r["stat"]) == ("model", "mean")
    assert rows(tp2 / "attention.csv")[0] == {
        "prefill_chunk": "0",
        "kv_prefill": "0",
        "n_decode": "1",
        "kv_decode": "16",
        "time_us": "7.58467",
    }
    r = one(comp, cell_id=cid, op="attention", phase="decode", batch_size=1, context_tokens=16)
    assert r["seconds"] == pytest.approx(7.58467e-6) and r["num_tokens"] == 1
    assert rows(tp2 / "per_sequence.csv")[0] == {"layer": "lm_head", "sequences": "1", "time_us": "216.053"}
    r = one(comp, cell_id=cid, op="lm_head", batch_size=1)
    assert r["seconds"] == pytest.approx(216.053e-6) and r["num_tokens"] == 1


@pytest.fixture(scope="module")
def vidur() -> MeasuredResult:
    return VidurProfileCollector().collect(shared_path(*VIDUR))


def test_vidur_cells_and_rows_match_an_independent_read(vidur) -> None:
    root = shared_path(*VIDUR) / "data" / "profiling"
    check_common(vidur)
    cells, comp = vidur.tables["cells"], vidur.tables["component"]
    compute_cells, compute_rows = Counter(), 0
    for f in sorted(root.glob("compute/*/*/*/mlp.csv")):
        data = rows(f)
        compute_cells[f.parents[2].name] += len({r["num_tensor_parallel_workers"] for r in data})
        n_ops = len({c.split(".")[1] for c in data[0] if c.startswith("time_stats.")})
        compute_rows += len(data) * n_ops
    network_cells, network_rows = Counter(), 0
    for f in sorted(root.glob("network/*/*.csv")):
        data = rows(f)
        network_cells[f.parent.name.split("_")[0]] += len({(r["num_workers"], r["devices_per_node"]) for r in data})
        network_rows += len(data)
    assert compute_cells == {"a100": 29, "a40": 21, "h100": 21}
    assert network_cells == {"a100": 13, "a40": 2, "h100": 9}
    is_net = cells["model"] == "none"
    assert cells[~is_net].groupby("gpu").size().to_dict() == {"a100-80gb": 29, "a40": 21, "h100-sxm": 21}
    assert cells[is_net].groupby("gpu").size().to_dict() == {"a100-80gb": 13, "a40": 2, "h100-sxm": 9}
    net_ids = set(cells.loc[is_net, "cell_id"])
    assert (~comp["cell_id"].isin(net_ids)).sum() == compute_rows
    assert comp["cell_id"].isin(net_ids).sum() == network_rows
    assert len(comp) == compute_rows + network_rows == 226491


def test_vidur_units_on_hand_checked_rows(vidur) -> None:
    root = shared_path(*VIDUR) / "data" / "profiling"
    comp = vidur.tables["component"]
    raw = next(
        r
        for r in rows(root / "compute/h100/meta-llama/Llama-2-70b-hf/mlp.csv")
        if r["num_tokens"] == "512" and r["num_tensor_parallel_workers"] == "4"
    )
    r = one(comp, cell_id="vidur/h100-sxm/llama-2-70b/tp4", op="mlp_up_proj", num_tokens=512)
    assert r["seconds"] == pytest.approx(float(raw["time_stats.mlp_up_proj.median"]) / 1000)  # ms -> s
    assert (r["scope"], r["stat"]) == ("layer", "median")
    assert one(comp, cell_id="vidur/h100-sxm/llama-2-70b/tp4", op="emb", num_tokens=512)["scope"] == "model"
    first = rows(root / "network/a100_dgx/all_reduce.csv")[0]
    assert (first["num_workers"], first["devices_per_node"], first["size"]) == ("2", "1", "2048")
    r = one(vidur.tables["component"], cell_id="vidur/network/a100_dgx/all_reduce/n2-pernode1", bytes=2048)
    assert r["seconds"] == pytest.approx(float(first["time_stats.all_reduce.median"]) / 1000) == pytest.approx(4.3e-5)
    assert (r["op"], r["scope"]) == ("all_reduce", "op")
    c = one(vidur.tables["cells"], cell_id="vidur/network/a100_dgx/all_reduce/n2-pernode1")
    assert (c["tp"], c["n_gpus"], c["gpu"], c["gpu_raw"]) == (2, 2, "a100-80gb", "a100_dgx")


@pytest.fixture(scope="module")
def splitwise() -> MeasuredResult:
    return SplitwiseProfileCollector().collect(shared_path(*SPLITWISE))


def test_splitwise_cells_rows_and_units(splitwise) -> None:
    data = rows(shared_path(*SPLITWISE) / "perf_model.csv")
    check_common(splitwise)
    cells, comp = splitwise.tables["cells"], splitwise.tables["component"]
    keys = {(r["hardware"], r["model"], r["tensor_parallel"]) for r in data}
    assert len(cells) == len(keys) == 12 and len(comp) == 2 * len(data) == 2520
    llama = cells[(cells["model"] == "llama-2-70b") & cells["gpu"].notna()]
    assert sorted(zip(llama["gpu"], llama["tp"], strict=True)) == [
        (g, t) for g in ("a100-80gb", "h100-sxm") for t in (2, 4, 8)
    ]
    assert cells.loc[cells["gpu_raw"] == "h100-80gb-pcap", "gpu"].isna().all()
    first = data[0]
    assert (first["hardware"], first["model"], first["tensor_parallel"]) == ("a100-80gb", "llama2-70b", "2")
    cid = "splitwise/a100-80gb/llama-2-70b/tp2"
    pre = comp[(comp["cell_id"] == cid) & (comp["op"] == "prefill_iteration")].iloc[0]
    dec = comp[(comp["cell_id"] == cid) & (comp["op"] == "decode_iteration")].iloc[0]
    assert pre["seconds"] == pytest.approx(float(first["prompt_time"]) / 1000) == pytest.approx(0.19625321915)
    assert dec["seconds"] == pytest.approx(float(first["token_time"]) / 1000) == pytest.approx(0.05487951194)
    assert (pre["num_tokens"], pre["batch_size"], pre["context_tokens"], pre["phase"]) == (512, 1, 0, "prefill")
    assert (dec["num_tokens"], dec["batch_size"], dec["context_tokens"], dec["phase"]) == (1, 1, 512, "decode")
    big = comp[(comp["cell_id"] == cid) & (comp["op"] == "prefill_iteration") & (comp["batch_size"] == 64)]
    assert (big["num_tokens"] == 512 * 64).all() and len(big) == 5


def test_detect_picks_each_format_only() -> None:
    folders = {"llmservingsim-profile": LSS, "vidur-profile": VIDUR, "splitwise-profile": SPLITWISE}
    for c in PROFILE_COLLECTORS:
        for name, parts in folders.items():
            assert c.detect(shared_path(*parts)) == (c.name == name), (c.name, name)
    assert len({c.name for c in PROFILE_COLLECTORS}) == 3


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


LAYERS_OK = "layer_name,input,kv_cache,tp_size,latency(ns)\nq_proj,1,0,1,1000\nlm_head,1,0,1,5000\n"


def test_llmservingsim_bad_files_are_skipped_and_siblings_ingested(tmp_path) -> None:
    v0 = tmp_path / "profiler" / "v0" / "perf_models" / "H100" / "meta-llama"
    write(v0 / "Llama-3.1-8B/tp1/layers.csv", LAYERS_OK)
    no_time = write(
        v0 / "Llama-3.1-8B/tp1/attention.csv", "prefill_chunk_size,kv_cache_size,batch_size,is_prefill\n32,0,1,True\n"
    )
    missing = write(v0 / "Llama-3.1-8B/tp2/layers.csv", "layer_name,input,kv_cache,latency(ns)\nq_proj,1,0,1000\n")
    negative = write(v0 / "Llama-3.1-70B/tp1/layers.csv", LAYERS_OK.replace("5000", "-5000"))
    truncated = write(v0 / "Llama-3.1-70B/tp2/layers.csv", LAYERS_OK[:-8])  # last line cut
    perf = tmp_path / "profiler" / "perf" / "RTX4090" / "meta-llama" / "Llama-3.1-8B" / "bf16"
    write(
        perf / "meta.yaml",
        "hardware: RTX4090\nmodel: meta-llama/Llama-3.1-8B\nvariant: bf16\n"
        "vllm_version: 0.19.0\nengine_effective:\n  block_size: 16\n",
    )
    write(perf / "tp1/dense.csv", "layer,tokens,time_us\nqkv_proj,1,10.5\n")
    text = write(perf / "tp1/attention.csv", "prefill_chunk,kv_prefill,n_decode,kv_decode,time_us\n0,0,1,16,abc\n")
    r = LLMServingSimProfileCollector().collect(tmp_path)
    reasons = {Path(s.path): s.reason for s in r.skips}
    assert set(reasons) == {no_time, missing, negative, truncated, text}
    assert "missing time columns" in reasons[no_time]
    assert "missing column(s) ['tp_size']" in reasons[missing]
    assert "non-positive" in reasons[negative] and "line 3" in reasons[negative]
    assert "missing value" in reasons[truncated]
    assert "non-numeric value 'abc'" in reasons[text]
    assert list(r.tables["cells"]["cell_id"]) == [
        "llmservingsim-perf/rtx4090/llama-3.1-8b/bf16/tp1",
        "llmservingsim-v0/h100-sxm/llama-3.1-8b/tp1",
    ]
    assert len(r.tables["component"]) == 3 and r.files_read == 2
    assert json.loads(r.tables["cells"]["config_json"].iloc[0])["engine_effective"] == {"block_size": "16"}


MLP_HEAD = (
    "time_stats.emb.median,time_stats.mlp_up_proj.mean,time_stats.mlp_up_proj.median,"
    "num_tokens,num_tensor_parallel_workers\n"
)


def test_vidur_bad_files_are_skipped_and_siblings_ingested(tmp_path) -> None:
    good = write(
        tmp_path / "compute/h100/meta-llama/Llama-2-7b-hf/mlp.csv",
        MLP_HEAD + "0.01,0.5,0.4,128,1\n0.02,0.9,0.8,256,2\n",
    )
    missing = write(
        tmp_path / "compute/a40/meta-llama/Llama-2-7b-hf/mlp.csv", "time_stats.emb.median,num_tokens\n0.01,128\n"
    )
    truncated = write(tmp_path / "compute/a100/meta-llama/Llama-2-7b-hf/mlp.csv", MLP_HEAD + "0.01,0.5")
    negative = write(
        tmp_path / "network/h100_dgx/all_reduce.csv",
        ",time_stats.all_reduce.median,rank,num_workers,size,collective,devices_per_node\n"
        "0,-0.01,0,8,2048,all_reduce,8\n",
    )
    net_ok = write(
        tmp_path / "network/h100_dgx/send_recv.csv",
        ",time_stats.send_recv.median,rank,num_workers,size,collective,devices_per_node\n0,0.01,0,2,4096,send_recv,1\n",
    )
    r = VidurProfileCollector().collect(tmp_path)
    reasons = {Path(s.path): s.reason for s in r.skips}
    assert set(reasons) == {missing, truncated, negative}
    assert "num_tensor_parallel_workers" in reasons[missing]
    assert "missing value" in reasons[truncated] and "non-positive" in reasons[negative]
    assert r.files_read == 2 and {good, net_ok}.isdisjoint(reasons)
    comp = r.tables["component"]
    assert sorted(r.tables["cells"]["cell_id"]) == [
        "vidur/h100-sxm/llama-2-7b/tp1",
        "vidur/h100-sxm/llama-2-7b/tp2",
        "vidur/network/h100_dgx/send_recv/n2-pernode1",
    ]
    up = one(comp, cell_id="vidur/h100-sxm/llama-2-7b/tp2", op="mlp_up_proj")
    assert up["seconds"] == pytest.approx(0.8e-3) and up["stat"] == "median"  # median preferred over mean
    assert one(comp, op="send_recv")["bytes"] == 4096


SW_HEAD = "model,hardware,prompt_size,batch_size,token_size,prompt_time,token_time,e2e_time,tensor_parallel\n"


def test_splitwise_bad_files_are_skipped_and_siblings_ingested(tmp_path) -> None:
    write(tmp_path / "a/perf_model.csv", SW_HEAD + "llama2-70b,a100-80gb,512,2,128,400.0,60.0,8000,4\n")
    truncated = write(tmp_path / "b/perf_model.csv", SW_HEAD + "llama2-70b,a100-80gb,512,2,128,400.0")
    missing = write(
        tmp_path / "c/perf_model.csv",
        SW_HEAD.replace("token_time,", "") + "llama2-70b,a100-80gb,512,2,128,400.0,8000,4\n",
    )
    negative = write(tmp_path / "d/perf_model.csv", SW_HEAD + "llama2-70b,h100-80gb,512,2,128,-1,60.0,8000,4\n")
    text = write(tmp_path / "e/perf_model.csv", SW_HEAD + "llama2-70b,h100-80gb,512,two,128,400,60.0,8000,4\n")
    r = SplitwiseProfileCollector().collect(tmp_path)
    reasons = {Path(s.path): s.reason for s in r.skips}
    assert set(reasons) == {truncated, missing, negative, text}
    assert "missing value" in reasons[truncated] and "token_time" in reasons[missing]
    assert "non-positive" in reasons[negative] and "'two'" in reasons[text]
    assert list(r.tables["cells"]["cell_id"]) == ["splitwise/a100-80gb/llama-2-70b/tp4"]
    pre = one(r.tables["component"], op="prefill_iteration")
    assert (pre["num_tokens"], pre["seconds"]) == (1024, pytest.approx(0.4))


def test_write_measured_round_trip_and_atomic_failure(tmp_path) -> None:
    src = tmp_path / "src"
    write(src / "profiler/v0/perf_models/H100/meta-llama/Llama-3.1-8B/tp1/layers.csv", LAYERS_OK)
    write(src / "perf_model.csv", SW_HEAD + "llama2-70b,h100-80gb,512,2,128,400.0,60.0,8000,4\n")
    a = LLMServingSimProfileCollector().collect(src)
    b = SplitwiseProfileCollector().collect(src)
    merged = {name: pd.concat([a.tables[name], b.tables[name]], ignore_index=True) for name in ("cells", "component")}
    out = tmp_path / "out"
    paths = write_measured(out, MeasuredResult(tables=merged))
    assert sorted(p.name for p in out.iterdir()) == ["cells.parquet", "component.parquet"]  # no temporaries left
    for name, path in paths.items():
        table = pq.read_table(path)
        assert table.schema.equals(TABLES[name], check_metadata=False)
        assert table.schema.metadata[b"agentreplay.table"] == name.encode()
        assert table.num_rows == len(merged[name])
    cells = pq.read_table(paths["cells"]).to_pandas()
    assert list(cells["cell_id"]) == [
        "llmservingsim-v0/h100-sxm/llama-3.1-8b/tp1",
        "splitwise/h100-sxm/llama-2-70b/tp4",
    ]
    assert cells["tp"].tolist() == [1, 4] and cells["workload"].isna().all()
    comp = pq.read_table(paths["component"]).to_pandas()
    assert comp["seconds"].tolist() == pytest.approx([1e-6, 5e-6, 0.4, 0.06])
    assert comp["bytes"].isna().all() and comp["num_tokens"].tolist() == [1, 1, 1024, 2]

    bad = {**merged, "component": merged["component"].assign(cell_id="no-such-cell")}
    with pytest.raises(MeasuredError, match="has no cells row"):
        write_measured(tmp_path / "bad", bad)
    nulls = {**merged, "component": merged["component"].assign(seconds=float("nan"))}
    with pytest.raises(MeasuredError, match=r"component\.seconds is null"):
        write_measured(tmp_path / "bad", nulls)
    with pytest.raises(MeasuredError, match="not in the measured schema"):
        write_measured(tmp_path / "bad", {**merged, "cells": merged["cells"].assign(extra=1)})
    assert not (tmp_path / "bad").exists() or not any((tmp_path / "bad").iterdir())
