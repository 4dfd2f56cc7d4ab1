"""Build the bundled SWE-bench Verified dataset (``datasets/swebench-verified/``) with its manifest.

Run from the project root with ../shared beside it::

    python -m collectors.bundle

The dataset is exactly what ``agentreplay collect mini-swe-agent`` writes from the shared trajectories
(a test checks this row for row); the manifest records the source, its commit, the counts and this command.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from collectors.registry import collect

SOURCE = Path("..") / "shared" / "datasets" / "swebench-verified-mini-swe-agent" / "trajs"
DEST = Path("datasets") / "swebench-verified"
MANIFEST = {
    "name": "swebench-verified",
    "description": "500 SWE-bench Verified trajectories of mini-swe-agent 1.15 + Gemini 3 Pro Preview, canonical trace",
    "source_repository": "github.com/gruckion/mini-swe-agent",
    "source_commit": "d12a71affd95403b036b2bdbd827349b77bfffb9",
    "source_folder": "swebench_results/20251118_gemini-3-pro-74pct/",
    "source_license": "MIT (mini-swe-agent); trajectories contain Gemini outputs and SWE-bench Verified task text",
    "build_command": "python -m collectors.bundle  "
    "(= agentreplay collect mini-swe-agent ../shared/datasets/swebench-verified-mini-swe-agent/trajs "
    "--out datasets/swebench-verified)",
}


def build(source: Path = SOURCE, dest: Path = DEST) -> dict:
    result = collect("mini-swe-agent", source, dest, strict=True)
    t = result.trace.turns
    manifest = {
        **MANIFEST,
        "counts": {
            "programs": result.n_programs,
            "turns": result.n_turns,
            "input_tokens": int(t["input_tokens"].sum()),
            "output_tokens": int(t["output_tokens"].sum()),
            "resolved": int(result.trace.programs["resolved"].sum()),
        },
        "notes": result.notes,
        "files": ["programs.parquet", "turns.parquet"],
    }
    (dest / "MANIFEST.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


if __name__ == "__main__":
    print(json.dumps(build(), indent=2))
    sys.exit(0)
