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


#: hot-path dataclasses whose ``__init__`` is written out (mypyc compiles it; the generated one runs interpreted)
def _written_out_inits():
    from agentreplay.kv.retention import ToolStats
    from agentreplay.kv.segment_pool import Run, Segment
    from agentreplay.request import ProgramInfo, Request
    from agentreplay.scheduler.plan import StepPlan

    return [Request, ProgramInfo, StepPlan, Run, Segment, ToolStats]


def _annotations(cls) -> dict[str, str]:
    """The class's field annotations as written in its source (the compiled build keeps only simplified types)."""
    import ast

    source = ROOT / (cls.__module__.replace(".", "/") + ".py")
    tree = ast.parse(source.read_text())
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls.__name__)
    return {
        s.target.id: ast.unparse(s.annotation)
        for s in node.body
        if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
    }


def _value(annotation: str, i: int):
    """A value of the field's declared type, distinct per field (the compiled build checks types)."""
    from agentreplay.kv.segment_pool import Run, Segment
    from agentreplay.request import ProgramInfo

    simple = {"int": 1000 + i, "float": 0.25 + i, "bool": True, "str": f"s{i}", "StopReason": "max_seqs"}
    if annotation in simple:
        return simple[annotation]
    if annotation.startswith("tuple"):
        return (i,)
    if annotation.startswith(("Segment", "list[Segment]")):
        seg = Segment(("k", i), 0, 0)
        return [seg] if annotation.startswith("list") else seg
    if annotation.startswith("list"):
        return [0.5 + i]
    if annotation.startswith("dict[str, "):
        return {f"k{i}": i}
    kinds = {"Run | None": Run(1, None), "ProgramInfo": ProgramInfo(1.0 + i)}
    return kinds.get(annotation, ("h", i))  # Any, Hashable


@pytest.mark.parametrize("cls", _written_out_inits(), ids=lambda c: c.__name__)
def test_a_written_out_init_sets_every_field_as_the_dataclass_would(cls) -> None:
    """Given only the required fields, every other field takes its declared default (a fresh object for a
    default factory, never shared between instances); given every field by keyword, each keeps its value."""
    import dataclasses

    fields = dataclasses.fields(cls)
    ann = _annotations(cls)
    required = {
        f.name: _value(ann[f.name], k)
        for k, f in enumerate(fields)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    }
    a, b = cls(**required), cls(**required)
    for f in fields:
        if f.default is not dataclasses.MISSING:
            assert getattr(a, f.name) == f.default, f.name
        elif f.default_factory is not dataclasses.MISSING:
            want, got = f.default_factory(), getattr(a, f.name)
            assert type(got) is type(want), f.name
            if dataclasses.is_dataclass(want):
                assert dataclasses.astuple(got) == dataclasses.astuple(want), f.name
            else:
                assert got == want, f.name
            assert got is not getattr(b, f.name), f"{f.name}: one default object shared by two instances"
    given = {f.name: _value(ann[f.name], k) for k, f in enumerate(fields)}
    c = cls(**given)
    for f in fields:
        assert getattr(c, f.name) == given[f.name], f.name
