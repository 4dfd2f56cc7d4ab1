"""Measured component profiles mapped onto the performance model's operators, and the model's prediction of them.

Each source names its operators its own way; :data:`GROUPS` maps them onto :data:`agentreplay.perf.OPERATORS`.
A *group* is what the model prices as one operator: e.g. HF ``q_proj + k_proj + v_proj`` (three kernels) is the
model's fused ``qkv_proj``. For every group the table gives the source operators summed, ``mult`` = how many
times the measured quantity occurs per decoder layer (vLLM's ``layernorm`` row is the per-call mean of the two
norms of a layer, so 2) and ``probe`` = which iteration the model prices it in.

Model prediction of one measured occurrence (``PerfModel.breakdown`` of a one-layer copy of the model, so
per-layer operators come out per layer):

    predicted = breakdown[group] / mult + launches * kernel_overhead_us

where ``launches`` = number of source operators summed (each is one timed kernel region). Probes:
``tokens`` = one prefill chunk of ``num_tokens`` tokens, ``seqs`` = ``num_tokens`` one-token sequences that each
emit a token (lm_head, sampler; also the HF lm_head, which runs on every input token), ``attn_prefill`` = one
chunk of ``num_tokens`` over ``context_tokens`` cached tokens, ``attn_decode`` = ``batch_size`` decodes over
``context_tokens`` each. Whole-model Splitwise iterations use ``PerfModel.iteration_time_s`` of the full model;
all-reduce rows use the model's TP all-reduce term (``tp_comm`` of a one-layer model / its 3 collectives).

Units: seconds everywhere, tokens, bytes.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

import numpy as np
import pandas as pd

from agentreplay.perf import (
    DTYPE_BYTES,
    GpuSpec,
    ModelSpec,
    list_models,
    load_gpu,
    load_model,
)
from agentreplay.perf.table import (
    AllReduceTable,
    MeasuredTable,
)


@dataclass(frozen=True, slots=True)
class Group:
    group: str  #: model operator (agentreplay.perf.OPERATORS)
    ops: tuple[str, ...]  #: source operators summed (all must be present at the point)
    mult: int = 1  #: occurrences of the measured quantity per decoder layer
    probe: str = "tokens"  #: tokens | seqs
    per_layer: bool = True  #: part of one decoder layer (else once per forward)


_LIN = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")
GROUPS: Final[dict[str, tuple[Group, ...]]] = {
    "llmservingsim-perf": (
        Group("embedding", ("embedding",), per_layer=False),
        Group("layernorm", ("layernorm",), mult=2),
        *(Group(g, (g,)) for g in _LIN),
        Group("rotary_emb", ("rotary_emb",)),
        Group("act_fn", ("act_fn",)),
        Group("final_layernorm", ("final_layernorm",), per_layer=False),
        Group("lm_head", ("lm_head",), probe="seqs", per_layer=False),
        Group("sampler", ("sampler",), probe="seqs", per_layer=False),
    ),
    "llmservingsim-v0": (
        Group("embedding", ("embedding",), per_layer=False),
        Group("layernorm", ("input_layernorm", "post_layernorm")),
        Group("qkv_proj", ("q_proj", "k_proj", "v_proj")),
        Group("rotary_emb", ("rope",)),
        Group("attention_prefill", ("attn",)),
        Group("o_proj", ("o_proj",)),
        Group("gate_up_proj", ("gate_proj", "up_proj")),
        Group("act_fn", ("act_fn",)),
        Group("down_proj", ("down_proj",)),
        Group("final_layernorm", ("final_layernorm",), per_layer=False),
        Group("lm_head", ("lm_head",), probe="seqs", per_layer=False),  # HF: lm_head over every input token
    ),
    "vidur": (
        Group("embedding", ("emb",), per_layer=False),
        Group("layernorm", ("input_layernorm", "post_attention_layernorm", "add")),
        Group("qkv_proj", ("attn_pre_proj",)),
        Group("rotary_emb", ("attn_rope",)),
        Group("o_proj", ("attn_post_proj",)),
        Group("gate_up_proj", ("mlp_up_proj",)),
        Group("act_fn", ("mlp_act",)),
        Group("down_proj", ("mlp_down_proj",)),
    ),
}
#: Qwen3's per-head q/k RMSNorm is priced inside the model's rotary_emb term.
EXTRA_INTO: Final = {("llmservingsim-perf", "qk_norm"): "rotary_emb"}
#: Source operators deliberately not compared, with the reason (shown in the report).
NOT_MAPPED: Final = {
    "expert.w1": "HF Mixtral expert loop: per-expert token counts not recorded",
    "expert.w2": "HF Mixtral expert loop: per-expert token counts not recorded",
    "expert.w3": "HF Mixtral expert loop: per-expert token counts not recorded",
    "gate": "MoE router of the HF expert loop (compared only together with the experts)",
}
#: Measured curves not compared, with the reason.
NOT_COMPARED: Final = {
    ("llmservingsim-v0", "decode"): "v0 attention.csv decode rows: read as batch_size sequences each over "
    "kv_cache_size tokens (collector docs), the fastest row would read its KV cache at {ratio:.1f}x the GPU's "
    "memory bandwidth; the context semantics are ambiguous",
}
#: Points per cell and curve kept after deterministic subsampling (log-spaced over the measured range).
MAX_POINTS: Final = 24
#: Token counts per cell kept for measured tables (:func:`table_from_points`); attention grids are kept whole.
TABLE_POINTS: Final = 64


def source_of(cell_id: str) -> str:
    return cell_id.split("/", 1)[0]


def subsample(values: Iterable[int], k: int = MAX_POINTS) -> list[int]:
    """At most ``k`` of the distinct ``values``: the ones nearest a log-spaced grid over their range (always the
    smallest and the largest). Deterministic."""
    v = np.unique(np.asarray(list(values), dtype=np.int64))
    if len(v) <= k:
        return v.tolist()
    grid = np.geomspace(max(v[0], 1), v[-1], k)
    idx = np.unique(np.abs(np.log(np.maximum(v, 1))[None, :] - np.log(grid)[:, None]).argmin(axis=1))
    return v[idx].tolist()


# ---------------------------------------------------------------------------------------------- model specs
_CATALOG_ALIASES: Final = {"llama-3-8b": "llama-3.1-8b", "llama-3-70b": "llama-3.1-70b"}


def model_spec(cell: pd.Series) -> tuple[ModelSpec | None, str]:
    """The model of a measured cell: the catalog entry, else the shapes the source recorded (Vidur), else None
    with the reason. Llama-3 8B/70B share Llama-3.1's shapes."""
    name = _CATALOG_ALIASES.get(str(cell["model"]), str(cell["model"]))
    if name in list_models():
        return load_model(name), "catalog"
    cfg = json.loads(cell["config_json"]) if isinstance(cell.get("config_json"), str) else {}
    need = ("n_embd", "n_expanded_embd", "n_head", "n_kv_head", "vocab_size")
    if all(k in cfg for k in need):
        if not cfg.get("use_gated_mlp", True):
            return None, "non-gated MLP (the model prices gate+up SwiGLU MLPs)"
        h, heads = int(cfg["n_embd"]), int(cfg["n_head"])
        return ModelSpec(
            name=str(cell["model"]),
            hf_repo=str(cfg.get("model_raw", "")),
            model_type="llama",
            hidden_size=h,
            num_hidden_layers=1,
            num_attention_heads=heads,
            num_key_value_heads=int(cfg["n_kv_head"]),
            head_dim=h // heads,
            intermediate_size=int(cfg["n_expanded_embd"]),
            vocab_size=int(cfg["vocab_size"]),
            max_position_embeddings=4096,
            tie_word_embeddings=False,
        ), "source shapes"
    return None, "model not in the catalog and no shapes recorded"


def one_layer(spec: ModelSpec) -> ModelSpec:
    return dataclasses.replace(spec, num_hidden_layers=1)


# ---------------------------------------------------------------------------------------------- op points
def op_points(
    cells: pd.DataFrame, comp: pd.DataFrame, max_points: int = MAX_POINTS, max_attention: int | None = None
) -> tuple[pd.DataFrame, list[tuple[str, str]]]:
    """Per-operator-group measured times of the LLMServingSim and Vidur profile cells (one row per cell, group
    and operating point), subsampled to ``max_points`` token counts per cell and ``max_attention`` (default
    ``2 * max_points``) points per attention curve; and the (cell_id, reason) of cells left out."""
    max_attention = 2 * max_points if max_attention is None else max_attention
    rows, skipped = [], []
    comp = comp[comp["cell_id"].isin(cells["cell_id"])]
    by_cell = dict(tuple(comp.groupby("cell_id", sort=False)))
    for _, cell in cells.iterrows():
        src = source_of(cell["cell_id"])
        cid = cell["cell_id"]
        if src not in GROUPS or cid not in by_cell or str(cell["model"]) == "none":
            continue
        if cell["gpu"] is None or (isinstance(cell["gpu"], float) and np.isnan(cell["gpu"])):
            skipped.append((cid, f"GPU {cell['gpu_raw']!r} not in the catalog"))
            continue
        spec, why = model_spec(cell)
        if spec is None:
            skipped.append((cid, why))
            continue
        c = by_cell[cid]
        dense = c[c["op"] != "attention"]
        table = dense.groupby(["op", "num_tokens"])["seconds"].median().unstack(0)
        keep = subsample(table.index, max_points)
        table = table.loc[keep]
        for (s, extra), into in EXTRA_INTO.items():
            if s == src and extra in table.columns:
                table[into] = table[into] + table[extra]
        for g in GROUPS[src]:
            if not all(op in table.columns for op in g.ops):
                continue
            launches = len(g.ops) + sum(
                1 for (s, e), i in EXTRA_INTO.items() if s == src and i == g.group and e in table.columns
            )
            vals = table[list(g.ops)].sum(axis=1, min_count=len(g.ops)).dropna()
            for n, sec in vals.items():
                rows.append((cid, g.group, g.probe, int(n), 1, 0, float(sec), g.mult, launches, g.per_layer))
        att = c[c["op"] == "attention"]
        for phase, a in att.groupby("phase"):
            if (src, phase) in NOT_COMPARED:
                kv_bytes = spec.kv_bytes_per_token("bf16", int(cell["tp"])) / spec.num_hidden_layers
                implied = (a["batch_size"] * a["context_tokens"] * kv_bytes / a["seconds"]).max()
                ratio = float(implied) / (load_gpu(str(cell["gpu"])).mem_bandwidth_gbps * 1e9)
                skipped.append((f"{cid} attention {phase}", NOT_COMPARED[(src, phase)].format(ratio=ratio)))
                continue
            a = a.groupby(["num_tokens", "batch_size", "context_tokens"])["seconds"].median().reset_index()
            a = a.sort_values(["num_tokens", "context_tokens"], kind="stable").reset_index(drop=True)
            if len(a) > max_attention:
                a = a.iloc[np.unique(np.linspace(0, len(a) - 1, max_attention).round().astype(int))]
            probe = "attn_prefill" if phase == "prefill" else "attn_decode"
            for r in a.itertuples(index=False):
                rows.append(
                    (
                        cid,
                        f"attention_{phase}",
                        probe,
                        int(r.num_tokens),
                        int(r.batch_size),
                        int(r.context_tokens),
                        float(r.seconds),
                        1,
                        1,
                        True,
                    )
                )
    cols = [
        "cell_id",
        "group",
        "probe",
        "num_tokens",
        "batch_size",
        "context_tokens",
        "measured_s",
        "mult",
        "launches",
        "per_layer",
    ]
    df = pd.DataFrame(rows, columns=cols)
    df["point_id"] = (
        df["cell_id"]
        + "|"
        + df["group"]
        + "|"
        + df["num_tokens"].astype(str)
        + "|"
        + df["batch_size"].astype(str)
        + "|"
        + df["context_tokens"].astype(str)
    )
    return df, skipped


def iteration_floor_s(
    spec: ModelSpec, gpu: GpuSpec, group: str, tokens: float, tp: int = 1, dtype: str = "bf16"
) -> float:
    """The least time a whole-model iteration can take at ``gpu``'s datasheet peaks over ``tp`` GPUs: a prefill
    of ``tokens`` tokens (``group`` ``prefill_iteration``) the FLOPs of its linear layers without embedding and
    LM head (2 per parameter per token) at the dense GEMM peak; a decode step (``decode_iteration``) the same
    weights read once at the memory bandwidth (16-bit weights; fp8 weights 8-bit)."""
    weights = spec.param_count() - 2 * spec.vocab_size * spec.hidden_size
    if group == "prefill_iteration":
        return 2.0 * weights * tokens / (tp * gpu.gemm_peak_tflops(dtype) * 1e12)  # type: ignore[arg-type]
    if group == "decode_iteration":
        return weights * DTYPE_BYTES[dtype] / (tp * gpu.mem_bandwidth_gbps * 1e9)
    raise ValueError(f"unknown iteration group {group!r}")


def below_floor(
    it: pd.DataFrame, specs: dict[str, ModelSpec], gpus: dict[str, GpuSpec]
) -> tuple[np.ndarray, list[tuple[str, str]]]:
    """Rows of :func:`iteration_points` (with ``gpu`` and ``tp``) measured faster than :func:`iteration_floor_s`
    allows, so not one iteration of the recorded shape (e.g. a Splitwise prefill whose batch did not fit and
    was split, its ``e2e_time`` many times the next smaller batch's); the mask and a (row, reason) per such
    row."""
    bad = np.zeros(len(it), dtype=bool)
    why: list[tuple[str, str]] = []
    for k, r in enumerate(it.itertuples(index=False)):
        floor = iteration_floor_s(specs[r.cell_id], gpus[r.gpu], r.group, float(r.num_tokens), int(r.tp))
        if r.measured_s < floor:
            bad[k] = True
            why.append(
                (
                    f"{r.cell_id} {r.group} {r.num_tokens} tokens, batch {r.batch_size}",
                    f"measured {r.measured_s * 1e3:.0f} ms, {floor / r.measured_s:.1f}x faster than the "
                    f"datasheet peaks allow ({floor * 1e3:.0f} ms): not one iteration of that shape",
                )
            )
    return bad, why


def iteration_points(comp: pd.DataFrame, cell_ids: Iterable[str]) -> pd.DataFrame:
    """Whole-model Splitwise iterations: the median of the repeats per operating point."""
    c = comp[comp["cell_id"].isin(list(cell_ids)) & comp["op"].isin(["prefill_iteration", "decode_iteration"])]
    g = c.groupby(["cell_id", "op", "num_tokens", "batch_size", "context_tokens"])["seconds"].median()
    out = g.reset_index().rename(columns={"op": "group", "seconds": "measured_s"})
    out["probe"] = out["group"]
    return out


def allreduce_points(cells: pd.DataFrame, comp: pd.DataFrame, max_points: int = MAX_POINTS) -> pd.DataFrame:
    """Vidur all-reduce profiles of single-node NVSwitch (DGX) topologies: the ones the model's TP all-reduce
    describes (multi-node and pairwise-bridge topologies are left out); the median per size at ``max_points``
    log-spaced sizes (:func:`subsample`)."""
    rows = []
    for _, cell in cells.iterrows():
        cfg = json.loads(cell["config_json"]) if isinstance(cell["config_json"], str) else {}
        if cfg.get("collective") != "all_reduce" or not str(cfg.get("topology", "")).endswith("_dgx"):
            continue
        if cfg.get("devices_per_node") != cfg.get("num_workers"):
            continue
        c = comp[comp["cell_id"] == cell["cell_id"]]
        g = c.groupby("bytes")["seconds"].median()
        g = g.loc[subsample(g.index, max_points)]
        rows.extend(
            (cell["cell_id"], "all_reduce", "all_reduce", int(cfg["num_workers"]), int(b), float(s))
            for b, s in g.items()
        )
    df = pd.DataFrame(rows, columns=["cell_id", "group", "probe", "tp", "bytes", "measured_s"])
    df["point_id"] = df["cell_id"] + "|all_reduce|" + df["bytes"].astype(str)
    return df


# ---------------------------------------------------------------------------------------------- measured tables
def table_from_points(points: pd.DataFrame, name: str, gpu: str, model: str, tp: int) -> MeasuredTable:
    """A :class:`MeasuredTable` from :func:`op_points` rows of one cell: per-layer operator time = measured x
    ``mult`` (the whole operator, as the model prices it); the HF layer-level ``attn`` rows (probe ``tokens``)
    are prefill attention at context 0, used only when the cell has no attention profile (the two disagree
    where both exist: the module time includes more than the attention kernel)."""
    points = table_points(points)
    dense = points[~points["group"].str.startswith("attention")]
    ops = {g: (d["num_tokens"].tolist(), (d["measured_s"] * d["mult"]).tolist()) for g, d in dense.groupby("group")}
    pf = points[points["group"] == "attention_prefill"]
    dec = points[points["group"] == "attention_decode"]
    return MeasuredTable(
        name=name,
        gpu=gpu,
        model=model,
        tp=tp,
        ops=ops,
        attention_prefill=(pf["num_tokens"].tolist(), pf["context_tokens"].tolist(), pf["measured_s"].tolist())
        if len(pf)
        else None,
        attention_decode=(dec["batch_size"].tolist(), dec["context_tokens"].tolist(), dec["measured_s"].tolist())
        if len(dec)
        else None,
    )


def allreduce_table(points: pd.DataFrame) -> AllReduceTable:
    """An :class:`AllReduceTable` from the :func:`allreduce_points` rows of one cell (one GPU, one GPU count)."""
    if points["cell_id"].nunique() != 1:
        raise ValueError(f"an all-reduce table comes from one cell, got {sorted(points['cell_id'].unique())}")
    d = points.sort_values("bytes")
    return AllReduceTable(
        name=str(d["cell_id"].iloc[0]),
        gpu=str(d["gpu"].iloc[0]),
        tp=int(d["tp"].iloc[0]),
        nbytes=d["bytes"].astype(int).tolist(),
        seconds=d["measured_s"].astype(float).tolist(),
    )


def table_points(points: pd.DataFrame) -> pd.DataFrame:
    """The rows of one cell :func:`table_from_points` uses: all, except the layer-level attention rows where the
    cell has an attention profile."""
    pf = points["group"] == "attention_prefill"
    if (pf & (points["probe"] == "attn_prefill")).any():
        return points[~(pf & (points["probe"] == "tokens"))]
    return points


def _even_rank(values: pd.Series) -> np.ndarray:
    ranks = {v: i for i, v in enumerate(sorted(set(values)))}
    return np.array([ranks[v] % 2 == 0 for v in values], dtype=bool)


def in_table(points: pd.DataFrame) -> np.ndarray:
    """The table-protocol split of :func:`op_points` rows: True for the rows a held-out-size table is built from.
    Dense curves (cell x group): every other token count (even rank among the curve's token counts, so the
    smallest is in). Attention curves: points whose token (decode: batch) count and context both have an even
    rank among the curve's values (a grid with every other row and column)."""
    keep = np.zeros(len(points), dtype=bool)
    for (_, group), idx in points.groupby(["cell_id", "group"], sort=False).indices.items():
        d = points.iloc[idx]
        if group == "attention_decode":
            keep[idx] = _even_rank(d["batch_size"]) & _even_rank(d["context_tokens"])
        elif group == "attention_prefill":
            keep[idx] = _even_rank(d["num_tokens"]) & _even_rank(d["context_tokens"])
        else:
            keep[idx] = _even_rank(d["num_tokens"])
    return keep


def allreduce_in_table(points: pd.DataFrame) -> np.ndarray:
    """The table-protocol split of :func:`allreduce_points` rows, as :func:`in_table` splits a dense curve: True
    for every other size of each cell (even rank, so the smallest is in)."""
    keep = np.zeros(len(points), dtype=bool)
    for _, idx in points.groupby("cell_id", sort=False).indices.items():
        keep[idx] = _even_rank(points["bytes"].iloc[idx])
    return keep


def point_keys(points: pd.DataFrame) -> pd.Series:
    """Operating point of a row within its cell (group, probe and coordinates)."""
    return (
        points["group"]
        + "|"
        + points["probe"]
        + "|"
        + points["num_tokens"].astype(str)
        + "|"
        + points["batch_size"].astype(str)
        + "|"
        + points["context_tokens"].astype(str)
    )
