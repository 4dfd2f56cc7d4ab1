"""``[speculative]``: speculative decoding on every instance (the mechanism is
:mod:`agentreplay.features.speculation.speculative`, whose docstring gives the model and its sources)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, get_args

from agentreplay.sim.config_checks import check

Method = Literal["none", "ngram", "draft_model"]
AcceptanceModel = Literal["expected", "sampled"]


def _check(cond: bool, name: str, value: Any, allowed: str) -> None:
    check(cond, "speculative", name, value, allowed)


@dataclass(frozen=True, slots=True)
class SpeculativeConfig:
    """Speculative decoding on every instance (vLLM ``--speculative-config``). Off by default (``method = "none"``).

    ``method``: ``ngram`` (vLLM ``{"method": "ngram"}``, prompt lookup: no model cost) or ``draft_model`` (vLLM
    ``{"method": "draft_model", "model": ...}``). ``num_speculative_tokens``: draft tokens per step, k.
    ``acceptance``: per-token acceptance rate a in [0, 1]; ``acceptance_by_tool_class`` overrides it for the
    turns whose tool call is of a listed class (e.g. ``{edit = 0.8, test = 0.5}``). A draft model is priced as
    ``draft_model`` (a catalogue model on the target's GPUs and TP) or as ``draft_cost_fraction`` of the target
    (each of the k draft passes costs that fraction of the target's step); exactly one of the two.
    """

    method: Method = "none"
    num_speculative_tokens: int = 3  #: k, draft tokens per step (vLLM num_speculative_tokens)
    acceptance: float = 0.7  #: per-token acceptance rate a (expected-value model, module docstring)
    acceptance_by_tool_class: dict[str, float] | None = None  #: tool class -> a, e.g. {edit = 0.8}
    draft_model: str | None = None  #: catalogue model of the drafter (method draft_model)
    draft_cost_fraction: float | None = None  #: drafter pass cost / target step cost (method draft_model)
    #: "expected": S = ceil((out - 1) / E) steps per turn; "sampled": each step's accepted drafts drawn from the
    #: truncated geometric law of Leviathan et al. (seeded from the run's seed), S = steps until out - 1 tokens
    acceptance_model: AcceptanceModel = "expected"

    def __post_init__(self) -> None:
        _check(self.method in get_args(Method), "method", self.method, f"one of {list(get_args(Method))}")
        m = self.acceptance_model
        _check(m in get_args(AcceptanceModel), "acceptance_model", m, f"one of {list(get_args(AcceptanceModel))}")
        k = self.num_speculative_tokens
        _check(isinstance(k, int) and not isinstance(k, bool) and 1 <= k <= 32, "num_speculative_tokens", k, "1..32")
        a = self.acceptance
        _check(isinstance(a, int | float) and 0.0 <= a <= 1.0, "acceptance", a, "a rate in [0, 1]")
        by = self.acceptance_by_tool_class
        if by is not None:
            from agentreplay.trace.taxonomy import TOOL_CLASSES  # (here: its regexes take ~15 ms to import)

            _check(isinstance(by, dict), "acceptance_by_tool_class", by, "a table {class = rate}")
            for cls, v in by.items():
                _check(cls in TOOL_CLASSES, "acceptance_by_tool_class", cls, f"a tool class, one of {TOOL_CLASSES}")
                _check(isinstance(v, int | float) and 0.0 <= v <= 1.0, f"acceptance_by_tool_class.{cls}", v, "[0, 1]")
        f = self.draft_cost_fraction
        if f is not None:
            _check(isinstance(f, int | float) and f > 0, "draft_cost_fraction", f, "> 0")
        if self.method == "draft_model":
            _check(
                (self.draft_model is None) != (f is None),
                "draft_model",
                self.draft_model,
                "method draft_model needs exactly one of draft_model (a catalogue model) and draft_cost_fraction",
            )
            if self.draft_model is not None:
                from agentreplay.perf import load_model

                try:
                    load_model(self.draft_model)
                except ValueError as exc:
                    _check(False, "draft_model", self.draft_model, str(exc))
        else:
            for name in ("draft_model", "draft_cost_fraction"):
                v = getattr(self, name)
                _check(v is None, name, v, f"only with method = 'draft_model' (method is {self.method!r})")

    @property
    def enabled(self) -> bool:
        return self.method != "none"

    def rate(self, tool_class: str) -> float:
        """The acceptance rate of a turn whose tool call is of ``tool_class``."""
        by = self.acceptance_by_tool_class
        return float(by.get(tool_class, self.acceptance)) if by else float(self.acceptance)


#: the config section this feature owns (agentreplay.features.registry)
CONFIG: dict[str, type] = {"speculative": SpeculativeConfig}
