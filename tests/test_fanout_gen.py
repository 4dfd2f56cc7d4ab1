"""The synthetic fan-out generator (agentreplay/fanout.py): seeded, and its statistics as configured."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from agentreplay.fanout import fan_out
from agentreplay.sim.workload import compile_trace
from agentreplay.trace.io import validate
from tests.factories import make_trace


def source(n: int = 60):  # type: ignore[no-untyped-def]
    """n programs; program k has 2 + k % 9 turns, prompts 100, 200, ... (+100 per turn), 10 output tokens."""
    return make_trace([[(100 * (t + 1), 10, 1.0) for t in range(2 + k % 9)] for k in range(n)], shared_prefix_tokens=40)


def test_same_seed_same_trace_other_seed_other_trace() -> None:
    a, _ = fan_out(source(), fanout=3, prob=0.2, seed=7)
    b, _ = fan_out(source(), fanout=3, prob=0.2, seed=7)
    c, _ = fan_out(source(), fanout=3, prob=0.2, seed=8)
    pd.testing.assert_frame_equal(a.programs, b.programs)
    pd.testing.assert_frame_equal(a.turns, b.turns)
    assert a.programs["program_id"].tolist() != c.programs["program_id"].tolist()


def test_spawn_share_and_width_as_configured() -> None:
    """60 programs with 2..10 turns (291 non-last turns); each spawns with p = 0.2, exactly 3 children each."""
    src = source()
    fan, st = fan_out(src, fanout=3, prob=0.2, seed=1, max_child_turns=4)
    validate(fan)
    assert st.candidate_turns == int((src.programs["n_turns"] - 1).sum())
    assert st.spawn_share == pytest.approx(0.2, abs=0.04)  # binomial sd sqrt(.16 / 291) = 0.023
    kids = fan.programs[fan.programs["parent_program_id"].notna()]
    assert len(kids) == 3 * st.spawning_turns == st.children
    per_spawn = kids.groupby(["parent_program_id", "parent_turn_idx"]).size()
    assert (per_spawn == 3).all()
    assert kids["n_turns"].max() <= 4
    assert set(kids["parent_program_id"]) <= set(src.programs["program_id"])  # one level
    assert (
        kids["parent_turn_idx"]
        < fan.programs.set_index("program_id").loc[kids["parent_program_id"], "n_turns"].to_numpy() - 1
    ).all()
    w = compile_trace(fan)
    assert w.dag is not None and len(w.dag.roots) == 60


def test_child_prompts_start_with_the_parents_context() -> None:
    """share='context': child turn k prompt = parent's prompt at the spawn + (template prompt k - 40-token system
    prefix); share='system': 40 + (template prompt k - 40) = the template's prompt."""
    src = source(5)
    for share in ("context", "system"):
        fan, st = fan_out(src, fanout=2, prob=1.0, seed=3, share=share, max_child_turns=None)
        assert st.spawning_turns == st.candidate_turns
        kid = fan.programs[fan.programs["parent_program_id"].notna()].iloc[0]
        parent_turn = int(kid["parent_turn_idx"])
        parent_prompt = 100 * (parent_turn + 1)
        t = fan.turns[fan.turns["program_id"] == kid["program_id"]]
        base = parent_prompt if share == "context" else 40
        assert t["input_tokens"].tolist() == [base + 100 * (k + 1) - 40 for k in range(len(t))]
        assert t["reused_tokens"].tolist()[0] == 0
        assert t["tool_duration_s"].isna().tolist()[-1]
    assert fan.programs["shared_prefix_id"].eq("sys").all()


def test_prompts_capped_at_the_sources_largest() -> None:
    fan, _ = fan_out(source(5), fanout=2, prob=1.0, seed=3, max_child_turns=None)
    assert fan.turns["input_tokens"].max() == 600  # the source's largest prompt (5 programs: 2 to 6 turns)
    assert np.all(fan.turns["reused_tokens"] <= fan.turns["input_tokens"])


@pytest.mark.parametrize(
    ("kw", "message"),
    [({"fanout": 0}, "fanout: must be >= 1"), ({"prob": 1.5}, "prob: must be in"), ({"share": "all"}, "share")],
)
def test_bad_options(kw, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=message):
        fan_out(source(3), **kw)


def test_synth_command_with_fanout(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """``agentreplay synth --fanout 2 --fanout-prob 1``: every non-last turn of the 3 synthetic programs spawns 2."""
    from pathlib import Path

    from typer.testing import CliRunner

    from agentreplay.cli.app import app
    from agentreplay.trace.io import read_trace

    bundled = Path(__file__).resolve().parents[1] / "datasets" / "swebench-verified"
    args = ["synth", "--trace", str(bundled), "--programs", "3", "--out", str(tmp_path / "s"), "--seed", "2"]
    res = CliRunner().invoke(app, [*args, "--fanout", "2", "--fanout-prob", "1"])
    assert res.exit_code == 0, res.output
    tr = read_trace(tmp_path / "s")
    roots = tr.programs[tr.programs["parent_program_id"].isna()]
    assert len(roots) == 3
    assert len(tr.programs) - 3 == 2 * int((roots["n_turns"] - 1).sum())
