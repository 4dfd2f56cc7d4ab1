"""Plain-language findings about a finished simulation: saturation and collapsed prefix reuse.

Computed from the run's outputs (summary, turns and programs frames), outside the compiled simulator. The
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

import pandas as pd

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


def reusable_tokens(trace_turns: pd.DataFrame, sim_turns: pd.DataFrame, reuse_scale: float = 1.0) -> int:
    """Prompt tokens of the simulated turns that the trace says extend the previous turn's context."""
    keys = sim_turns[["program_id", "turn_idx"]]
    reused = keys.merge(trace_turns[["program_id", "turn_idx", "reused_tokens"]], how="left",
                        on=["program_id", "turn_idx"])["reused_tokens"].fillna(0)
    capped = reused.clip(upper=sim_turns["input_tokens"].to_numpy())
    return int(capped.sum() * reuse_scale)


def _moved_share(turns: pd.DataFrame) -> float:
    """Share of follow-up turns served on another instance than the previous turn of their program."""
    t = turns.sort_values(["program_id", "turn_idx"], kind="stable")
    prev = t.groupby("program_id", sort=False)["instance"].shift()
    follow = prev.notna()
    return float((t["instance"][follow] != prev[follow]).mean()) if follow.any() else 0.0


def diagnose(summary: dict[str, Any], turns: pd.DataFrame, reusable: int | None = None) -> list[Finding]:
    """The findings that apply to a run (empty when none does); see the module docstring for the rules."""
    found: list[Finding] = []
    ttft, queued = float(summary["ttft_s"]["mean"]), float(summary["queued_s"]["mean"])
    if ttft > 0 and queued >= MIN_QUEUED_S and queued >= QUEUE_SHARE_OF_TTFT * ttft:
        share = queued / ttft
        found.append(Finding("queue-bound", (
            f"saturated: queueing is {queued:,.1f} s of the {ttft:,.1f} s mean TTFT ({share:.0%}); calls wait "
            "for a batch slot or KV blocks, so TTFT and JCT measure the queue. More instances, or fewer programs "
            "in flight (--concurrency) or a lower --rate, would change that."),
            {"queued_mean_s": queued, "ttft_mean_s": ttft, "queued_share_of_ttft": share}))
    inp = int(summary.get("input_tokens", 0))
    if reusable is not None and inp > 0:
        can, hit = reusable / inp, float(summary["prefix_hit_rate"])
        if can >= MIN_REUSABLE_SHARE and hit < HIT_RATE_SHARE * can:
            moved = _moved_share(turns)
            router = summary.get("policy", {}).get("router", "?")
            found.append(Finding("reuse-collapse", (
                f"prefix reuse collapsed: hit rate {hit:.3f} where the trace's follow-up turns could reuse "
                f"{can:.3f} of the prompt tokens; router {router} sent {moved:.0%} of follow-up turns to another "
                f"instance than the previous turn's; {int(summary.get('preemptions', 0)):,} preemptions, "
                f"{int(summary.get('recomputed_tokens', 0)):,} recomputed tokens."),
                {"prefix_hit_rate": hit, "reusable_share": can, "moved_turn_share": moved}))
    return found
