"""Tool Simulator: how long the tool call after each turn takes.

One small class per mode behind :class:`ToolModel`; the orchestrator asks ``gap_s`` once per finished turn
(never for a program's last turn). The generative mode (sampling a fitted per-class model) plugs in here with
the same interface and the ``rng`` it is given.
"""

from __future__ import annotations

import math
from typing import Any, Protocol

import numpy as np

from agentreplay.sim.config import ToolConfig
from agentreplay.sim.workload import Workload


class ToolModel(Protocol):
    def gap_s(self, turn: int, rng: np.random.Generator) -> float:
        """Seconds of tool time after global turn index ``turn`` (not a program's last turn)."""
        ...


class ReplayTools:
    """The trace's durations (measured or estimated, as the trace says)."""

    def __init__(self, workload: Workload) -> None:
        # read through a memoryview (a Python float per read, no NumPy scalar: a third of the cost); the same
        # buffer, so a day's chunked generator filling the array in place is seen
        self._tool_s: Any = np.ascontiguousarray(workload.tool_s, dtype=np.float64).data

    def gap_s(self, turn: int, rng: np.random.Generator) -> float:
        v: float = self._tool_s[turn]
        return 0.0 if math.isnan(v) else v


class FixedTools:
    """The same duration after every turn (counterfactual: 'what if every tool took x s')."""

    def __init__(self, seconds: float) -> None:
        self._s = float(seconds)

    def gap_s(self, turn: int, rng: np.random.Generator) -> float:
        return self._s


class ScaledTools(ReplayTools):
    """The trace's durations times a factor (counterfactual: 'tests twice as slow')."""

    def __init__(self, workload: Workload, factor: float) -> None:
        super().__init__(workload)
        self._k = float(factor)

    def gap_s(self, turn: int, rng: np.random.Generator) -> float:
        return super().gap_s(turn, rng) * self._k


def make_tools(cfg: ToolConfig, workload: Workload) -> ToolModel:
    """The tool model of ``cfg``; replay and scale fail early if a non-final turn has no duration."""
    if cfg.mode == "fixed":
        return FixedTools(cfg.fixed_s)
    if cfg.mode == "generative":
        from agentreplay.sim.tools_generative import GenerativeTools

        assert cfg.model_path is not None
        return GenerativeTools(workload, cfg.model_path, scale=cfg.scale, class_scale=cfg.class_scale)
    last = np.zeros(workload.n_turns, dtype=bool)
    last[workload.turn_start[1:] - 1] = True
    missing = np.isnan(workload.tool_s) & ~last
    if missing.any():
        i = int(np.argmax(missing))
        p = int(np.searchsorted(workload.turn_start, i, side="right") - 1)
        raise ValueError(
            f"tools mode {cfg.mode!r}: program {workload.program_ids[p]!r} turn "
            f"{i - int(workload.turn_start[p])} has no tool_duration_s; use --tools fixed"
        )
    return ReplayTools(workload) if cfg.mode == "replay" else ScaledTools(workload, cfg.scale)
