"""The compiled hot path (mypyc, ``setup.py``) against its sources: identical replays, the pure-Python switch,
and the guard against compiled modules that no longer match their sources."""

from __future__ import annotations

import hashlib
import importlib.machinery
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from agentreplay import _native
from tests.conftest import ROOT

#: Runs in a subprocess (the build is chosen at import): replays the first 40 bundled programs under every
#: preset, with migration and with a tight pool, and writes each per-turn frame and summary.
SCRIPT = r"""
import json, sys
from pathlib import Path
from agentreplay import _native
from agentreplay.policy.presets import PRESETS, apply_preset
from agentreplay.sim import SimConfig, simulate
from agentreplay.sim.workload import compile_trace
from agentreplay.trace.io import read_trace
import agentreplay.scheduler.scheduler as sched

out = Path(sys.argv[1])
w = compile_trace(read_trace(Path(sys.argv[2]))).head(40)
base = SimConfig().replace(workload={"concurrency": 16}, hardware={"instances": 2}, cache={"num_gpu_blocks": 6000})
cfgs = {p: apply_preset(base, p) for p in sorted(PRESETS)}
cfgs["migrate"] = apply_preset(base.replace(hardware={"instances": 3}), "continuum").replace(
    router={"inter_instance_gbps": 50.0, "affinity_max_outstanding": 6})
cfgs["tight"] = SimConfig().replace(workload={"concurrency": 12}, cache={"num_gpu_blocks": 6000})
summaries = {}
for name, cfg in cfgs.items():
    res = simulate(w, cfg)
    res.turns.to_parquet(out / f"{name}.parquet")
    summaries[name] = res.summary
(out / "summaries.json").write_text(json.dumps(summaries, sort_keys=True, default=str))
(out / "build.json").write_text(json.dumps({"scheduler": sched.__file__, "compiled": _native.compiled_modules()}))
"""


def _replay(tmp: Path, pure: bool) -> Path:
    out = tmp / ("pure" if pure else "default")
    out.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "AGENTREPLAY_PURE_PYTHON"}
    if pure:
        env["AGENTREPLAY_PURE_PYTHON"] = "1"
    subprocess.run(
        [sys.executable, "-c", SCRIPT, str(out), str(ROOT / "datasets" / "swebench-verified")],
        check=True,
        env=env,
        cwd=ROOT,
    )
    return out


@pytest.mark.slow
def test_compiled_build_replays_exactly_like_the_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENTREPLAY_PURE_PYTHON", raising=False)  # what the installed build provides
    pure, default = _replay(tmp_path, True), _replay(tmp_path, False)
    assert json.loads((pure / "build.json").read_text())["scheduler"].endswith(".py")
    assert json.loads((pure / "build.json").read_text())["compiled"] == []
    build = json.loads((default / "build.json").read_text())
    # whichever build is installed: when compiled, the default process must really run the extensions
    assert build["compiled"] == _native.compiled_modules()
    if build["compiled"]:
        assert not build["scheduler"].endswith(".py")
    assert (pure / "summaries.json").read_text() == (default / "summaries.json").read_text()
    for f in sorted(pure.glob("*.parquet")):
        pd.testing.assert_frame_equal(pd.read_parquet(f), pd.read_parquet(default / f.name), check_exact=True)


def _fake_package(tmp: Path, source: str, recorded: str, compiled: bool) -> Path:
    pkg = tmp / "agentreplay"
    (pkg / "sim").mkdir(parents=True)
    (pkg / "sim" / "hot.py").write_text(source)
    if compiled:
        (pkg / "sim" / f"hot{importlib.machinery.EXTENSION_SUFFIXES[0]}").write_bytes(b"")
    digest = hashlib.sha256(recorded.encode()).hexdigest()
    (pkg / _native.MANIFEST_NAME).write_text(
        json.dumps({"build": "compiled", "sources": {"agentreplay.sim.hot": digest}})
    )
    return pkg


def test_the_hot_path_type_checks_for_mypyc() -> None:
    """A type error in a hot-path module makes the build fall back to pure Python (about 3x slower) without
    failing the install; this test makes that visible. Pure builds asked for, or without mypy, pass."""
    status = _native.build_status()
    assert not status.startswith("pure: mypyc failed"), status


def test_a_compiled_module_whose_source_changed_is_refused(tmp_path: Path) -> None:
    pkg = _fake_package(tmp_path, "x = 2\n", "x = 1\n", compiled=True)
    with pytest.raises(_native.StaleNativeModuleError, match=r"hot\.py.*pip install -e \."):
        _native.check(pkg)


def test_matching_sources_and_pure_installs_pass_the_guard(tmp_path: Path) -> None:
    _native.check(_fake_package(tmp_path / "a", "x = 1\n", "x = 1\n", compiled=True))
    _native.check(_fake_package(tmp_path / "b", "x = 2\n", "x = 1\n", compiled=False))  # nothing compiled
    assert _native.compiled_modules(tmp_path / "b" / "agentreplay") == []


def test_an_unreadable_manifest_names_the_file(tmp_path: Path) -> None:
    pkg = _fake_package(tmp_path, "x = 1\n", "x = 1\n", compiled=True)
    (pkg / _native.MANIFEST_NAME).write_text("{not json")
    with pytest.raises(_native.StaleNativeModuleError, match=_native.MANIFEST_NAME):
        _native.check(pkg)
