"""Build hook: compile the simulator's hot path with mypyc (C extensions), or install pure Python.

Everything else about the package is declared in ``pyproject.toml``. The modules in :data:`HOT` are the ones a
simulation spends its time in (``python benchmarks/bench_sim.py --profile synth-4k`` shows the split). mypyc
compiles type-annotated Python to C, with the same semantics, checked at run time against the annotations; it
ships inside mypy (https://mypyc.readthedocs.io/en/latest/getting_started.html#using-setup-py). The sources stay
the reference: the test suite runs against whichever build is installed, and the compiled build gives results
identical to the pure-Python one (``tests/sim/test_native.py``).

- ``AGENTREPLAY_PURE_PYTHON=1 pip install ...`` skips compilation (e.g. on a machine without a C compiler;
  compilation failures are also tolerated: the extensions are optional and the sources are used).
- The build records how it went (compiled, or pure Python and why) and a SHA-256 of each compiled source in
  ``agentreplay/_native_sources.json``;
  ``agentreplay/__init__.py`` refuses to import when a compiled module's source has changed since (an editable
  install whose compiled modules no longer match the code) and says how to rebuild.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import json
import os
import sys
from pathlib import Path

from setuptools import setup

ROOT = Path(__file__).resolve().parent
MANIFEST = ROOT / "agentreplay" / "_native_sources.json"

#: Hot-path modules compiled with mypyc (paths relative to the project root).
HOT = [
    "agentreplay/engine.py",
    "agentreplay/request.py",
    "agentreplay/scheduler/cohort.py",
    "agentreplay/scheduler/scheduler.py",
    "agentreplay/scheduler/plan.py",
    "agentreplay/sim/instance.py",
    "agentreplay/sim/gpu_time.py",
    "agentreplay/kv/residency.py",
    "agentreplay/router/policies.py",
    "agentreplay/sim/orchestrator.py",
    "agentreplay/sim/metrics.py",
    "agentreplay/sim/tools.py",
    "agentreplay/kv/segment_pool.py",
    "agentreplay/kv/manager.py",
    "agentreplay/kv/tiers.py",
    "agentreplay/perf/model.py",
    "agentreplay/perf/terms.py",
    "agentreplay/perf/refined.py",
    "agentreplay/perf/padding.py",
    "agentreplay/perf/tiles.py",
    "agentreplay/scheduler/queue.py",
    "agentreplay/kv/retention.py",
    "agentreplay/scheduler/victim.py",
]


def remove_compiled() -> None:
    """Delete compiled modules an earlier editable build left beside the sources: Python would import them
    before the sources, and without a manifest nothing would notice that they are stale."""
    for p in HOT:
        src = ROOT / p
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            src.with_suffix(suffix).unlink(missing_ok=True)
    for f in ROOT.glob("*__mypyc*"):
        f.unlink()


def write_manifest(build: str) -> None:
    """Record how this build went (``agentreplay._native.build_status``) and the hash of each compiled source."""
    sources = {p[:-3].replace("/", "."): hashlib.sha256((ROOT / p).read_bytes()).hexdigest() for p in HOT}
    MANIFEST.write_text(
        json.dumps({"build": build, "sources": sources if build == "compiled" else {}}, indent=1, sort_keys=True) + "\n"
    )


def pure_python(why: str, warn: bool = False) -> list:
    """Install the sources only: say why, remove stale compiled modules, record it in the manifest."""
    print(
        f"agentreplay: {'WARNING: ' if warn else ''}{why}; installing pure Python"
        + (" (simulations run about 3x slower)" if warn else ""),
        file=sys.stderr,
    )
    remove_compiled()
    write_manifest(f"pure: {why}")
    return []


def native_extensions() -> list:
    if os.environ.get("AGENTREPLAY_PURE_PYTHON", "").strip() not in ("", "0"):
        return pure_python("AGENTREPLAY_PURE_PYTHON set")
    try:
        from mypyc.build import mypycify
    except ImportError as e:  # build isolation off and mypy missing
        return pure_python(f"mypyc unavailable ({e})")
    os.chdir(ROOT)  # mypycify takes paths relative to the project root
    try:
        exts = mypycify(HOT, opt_level="3")
    except (Exception, SystemExit) as e:  # mypyc exits on a type error it cannot compile
        return pure_python(f"mypyc failed ({e!r}); run mypy on the modules of setup.py HOT to see why", warn=True)
    for ext in exts:
        ext.optional = True  # a failed C build leaves the pure-Python sources in use
    write_manifest("compiled")
    return exts


setup(ext_modules=native_extensions())
