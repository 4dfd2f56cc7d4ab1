"""``agentreplay fleet spec`` on a tiny trace, and the study's cases and crossover."""

from __future__ import annotations

from pathlib import Path

from agentreplay.features.speculation.experiment import crossover, default_cases
from tests.experiment.helpers import fleet_json, tiny_trace


def test_cases_and_crossover() -> None:
    cases = default_cases(3, [0.5, 0.8], "llama-3.1-8b")
    assert [c.label for c in cases] == [
        "none",
        "ngram a=0.5",
        "ngram a=0.8",
        "draft llama-3.1-8b a=0.5",
        "draft llama-3.1-8b a=0.8",
        "ngram per-class",
    ]
    curve = [
        {"drafter": "ngram", "acceptance": 0.5, "ctx": 1000, "batch": n, "speedup": s}
        for n, s in ((1, 1.6), (64, 1.1), (128, 0.9), (256, 0.7))
    ]
    assert crossover(curve) == {"ngram a=0.5, 1,000-token contexts": 128}
    assert crossover(curve[:2]) == {"ngram a=0.5, 1,000-token contexts": None}


def test_speculation_shortens_jct_one_program_at_a_time(tmp_path: Path) -> None:
    trace = tiny_trace(tmp_path / "tr", [[(2000 + 1500 * t, 200, 1.0) for t in range(3)]] * 2)
    out = tmp_path / "o"
    args = ["--trace", str(trace), "--loads", "1", "--model", "llama-3.1-8b", "--tp", "1", "--out", str(out)]
    doc = fleet_json("spec", *args)
    by = {r["case"]: r for r in doc["tables"]["spec"]}
    # n-gram speculation has no drafter cost, so it shortens decode and JCT
    assert by["ngram a=0.8"]["jct_p50_s"] < by["ngram a=0.5"]["jct_p50_s"] < by["none"]["jct_p50_s"]
    assert by["ngram a=0.8"]["tokens_per_step"] > by["ngram a=0.5"]["tokens_per_step"] > 1.0
    assert by["none"]["ttft_p90_s"] >= by["none"]["ttft_p50_s"]
    assert {r["ctx"] for r in doc["tables"]["spec_speedup"]} == {16_000, 1_000}
    md = (out / "spec.md").read_text()
    assert "| 1 | ngram a=0.8 |" in md and "TTFT p90 s" in md and (out / "spec.png").stat().st_size > 0
