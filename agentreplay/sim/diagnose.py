"""Plain-language findings about a finished simulation: saturation and collapsed prefix reuse.

Computed from the run's outputs (summary and turns; frames or column dicts), outside the compiled simulator. The
thresholds are conventions for when a figure deserves a sentence in the summary, not fitted constants:

- **Queueing dominates TTFT** when the mean time a call waits before its first scheduled iteration is at least
  :data:`QUEUE_SHARE_OF_TTFT` of the mean TTFT *and* at least :data:`MIN_QUEUED_S` seconds (so a fast run whose
  few milliseconds of TTFT are mostly wait is not called saturated). The cluster then cannot keep up with the
  arrivals (closed loop: with the programs in flight); TTFT and JCT measure the queue, not the engine.
- **Prefix reuse collapses** when the run serves from the HBM prefix cache less than :data:`HIT_RATE_SHARE` of
  what the trace says its follow-up turns could reuse (``reused_tokens``: the previous turn's context, scaled by
  ``workload.reuse_scale``), provided that reusable share is at least :data:`MIN_REUSABLE_SHARE` of the prompt
  tokens. The finding gives the figures that say why: the share of follow-up turns the router sent to another
  instance than the previous turn's (their context is recomputed there, or moved when a link is configured),
  preemptions and recomputed tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

QUEUE_SHARE_OF_TTFT = 0.5  #: queueing share of mean TTFT from which a run counts as queue-bound
MIN_QUEUED_S = 1.0  #: ... and the mean queueing time (s) it must reach
HIT_RATE_SHARE = 0.5  #: hit rate below this fraction of the reusable share counts as a collapse
MIN_REUSABLE_SHARE = 0.2  #: ... when at least this share of prompt tokens was reusable


@dataclass(frozen=True, slots=True)
class Finding:
    kind: str  #: "queue-bound" | "reuse-collapse"
    message: str  #: one sentence with the figures
    figures: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "message": self.message, "figures": dict(self.figures)}


def _col(table: Any, name: str) -> np.ndarray:
    return np.asarray(table[name])


def reusable_tokens(trace_turns: Any, sim_turns: Any, reuse_scale: float = 1.0) -> int:
    """Prompt tokens of the simulated turns that the trace says extend the previous turn's context.

    Both tables are anything whose ``[column]`` gives an array (DataFrames, or the column dicts of
    :meth:`agentreplay.sim.result.SimResult.columns` and :meth:`agentreplay.sim.workload.Workload.trace_turns`):
    ``program_id``, ``turn_idx`` and ``reused_tokens`` of the trace, ``program_id``, ``turn_idx`` and
    ``input_tokens`` of the run. A simulated turn the trace lacks counts 0."""
    reused = dict(
        zip(
            zip(_col(trace_turns, "program_id").tolist(), _col(trace_turns, "turn_idx").tolist(), strict=True),
            _col(trace_turns, "reused_tokens").tolist(),
            strict=True,
        )
    )
    keys = zip(_col(sim_turns, "program_id").tolist(), _col(sim_turns, "turn_idx").tolist(), strict=True)
    got = np.fromiter((reused.get(k, 0) for k in keys), dtype=np.int64, count=len(_col(sim_turns, "turn_idx")))
    return int(np.minimum(got, _col(sim_turns, "input_tokens")).sum() * reuse_scale)


def _moved_share(turns: Any) -> float:
    """Share of follow-up turns served on another instance than the previous turn of their program."""
    _, prog = np.unique(_col(turns, "program_id"), return_inverse=True)
    idx, inst = _col(turns, "turn_idx"), _col(turns, "instance")
    order = np.lexsort((idx, prog))
    prog, inst = prog[order], inst[order]
    follow = prog[1:] == prog[:-1]
    return float((inst[1:][follow] != inst[:-1][follow]).mean()) if follow.any() else 0.0


def diagnose(summary: dict[str, Any], turns: Any, reusable: int | None = None) -> list[Finding]:
    """The findings that apply to a run (empty when none does); see the module docstring for the rules."""
    found: list[Finding] = []
    ttft, queued = float(summary["ttft_s"]["mean"]), float(summary["queued_s"]["mean"])
    if ttft > 0 and queued >= MIN_QUEUED_S and queued >= QUEUE_SHARE_OF_TTFT * ttft:
        share = queued / ttft
        found.append(
            Finding(
                "queue-bound",
                (
                    f"saturated: queueing is {queued:,.1f} s of the {ttft:,.1f} s mean TTFT ({share:.0%}); calls wait "
                    "for a batch slot or KV blocks, so TTFT and JCT measure the queue. More instances, "
                    "or fewer programs "
                    "in flight (--concurrency) or a lower --rate, would change that."
                ),
                {"queued_mean_s": queued, "ttft_mean_s": ttft, "queued_share_of_ttft": share},
            )
        )
    inp = int(summary.get("input_tokens", 0))
    if reusable is not None and inp > 0:
        can, hit = reusable / inp, float(summary["prefix_hit_rate"])
        if can >= MIN_REUSABLE_SHARE and hit < HIT_RATE_SHARE * can:
            moved = _moved_share(turns)
            router = summary.get("policy", {}).get("router", "?")
            found.append(
                Finding(
                    "reuse-collapse",
                    (
                        f"prefix reuse collapsed: hit rate {hit:.3f} where the trace's follow-up turns could reuse "
                        f"{can:.3f} of the prompt tokens; router {router} sent {moved:.0%} of follow-up "
                        "turns to another "
                        f"instance than the previous turn's; {int(summary.get('preemptions', 0)):,} preemptions, "
                        f"{int(summary.get('recomputed_tokens', 0)):,} recomputed tokens."
                    ),
                    {"prefix_hit_rate": hit, "reusable_share": can, "moved_turn_share": moved},
                )
            )
    return found
