"""The kernels each priced operator launches: the classes whose fixed costs the refined roofline calibrates
(:mod:`agentreplay.perf.refined`) and the operators a measured table may tabulate (:mod:`agentreplay.perf.measured`,
:mod:`agentreplay.perf.table_model`). Operator names are :data:`agentreplay.perf.model.OPERATORS`."""

from __future__ import annotations

from typing import Final

#: Kernel classes each operator launches (per layer, or per forward for :data:`PER_FORWARD`).
KERNELS: Final[dict[str, tuple[str, ...]]] = {
    "embedding": ("elementwise",),
    "layernorm": ("elementwise", "elementwise"),
    "qkv_proj": ("gemm",),
    "rotary_emb": ("elementwise",),
    "attention_prefill": ("attention",),
    "attention_decode": ("attention",),
    "o_proj": ("gemm",),
    "moe_router": ("gemm", "elementwise"),
    "gate_up_proj": ("gemm",),
    "act_fn": ("elementwise",),
    "down_proj": ("gemm",),
    "final_layernorm": ("elementwise",),
    "lm_head": ("gemm",),
    "sampler": ("elementwise",),
}
PER_FORWARD: Final = frozenset(("embedding", "final_layernorm", "lm_head", "sampler"))
EMITTING: Final = frozenset(("lm_head", "sampler"))  #: priced by the number of sequences that emit a token
#: Operators that are one GEMM over the tokens (sequences for the LM head), whose time steps with CTA tiles.
GEMM_OPS: Final = frozenset(op for op, k in KERNELS.items() if k == ("gemm",))
