"""The documented example of a new one-parameter policy (docs/how-to/add-a-policy.md) runs as written: its class
and parameter dataclass, in a registry, build from a configuration section and decide."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import pytest

from agentreplay.kv.retention import RETENTIONS, Decision, GapContext, ToolStats
from agentreplay.kv.segment_pool import Segment
from agentreplay.policy.registry import Entry, ParamError, Registry, check
from agentreplay.request import ProgramInfo, Request
from tests.conftest import ROOT

PAGE = ROOT / "docs" / "how-to" / "add-a-policy.md"


def _example() -> str:
    text = PAGE.read_text()
    start = text.index("For example, a retention policy")
    return re.search(r"```python\n(.*?)```", text[start:], re.S).group(1)  # type: ignore[union-attr]


def test_the_documented_policy_example_builds_and_decides() -> None:
    ns: dict[str, Any] = {
        "dataclass": dataclass,
        "check": check,
        "ToolStats": ToolStats,
        "Request": Request,
        "GapContext": GapContext,
        "Decision": Decision,
    }
    exec(compile("from __future__ import annotations\n" + _example(), str(PAGE), "exec"), ns)
    reg = Registry(
        "retention",
        [*RETENTIONS.entries(), Entry("mean-fraction", ns["MeanFraction"], ns["MeanFractionParams"], "example")],
    )

    class Section:  # the configuration section, with the new field
        mean_fraction = 0.25

    stats = ToolStats()
    policy = reg.build("mean-fraction", Section(), stats)
    r = Request(
        turn=0,
        program=0,
        turn_idx=0,
        prompt=100,
        target_out=1,
        reuse=0,
        pfx=None,
        prog=Segment(("prog", 0), 0, 0),
        base=0,
        release_s=0.0,
        info=ProgramInfo(0.0),
        tool_class="test",
    )
    ctx = GapContext(0.0, 10, 10, 0.0, None, 1.0)
    assert policy.decide(r, ctx).action == "release"  # no observation yet
    stats.observe("test", 8.0)
    d = policy.decide(r, ctx)
    assert d.action == "pin" and math.isclose(d.ttl_s, 2.0)

    class Bad:
        mean_fraction = -1.0

    with pytest.raises(ParamError, match=r"mean_fraction = -1\.0 is invalid"):
        reg.build("mean-fraction", Bad(), stats)
