"""Which hot-path modules run compiled (mypyc, see ``setup.py``), the pure-Python switch, and a guard against
stale compiled modules.

- An editable install keeps each compiled extension next to its source, and Python imports the extension first.
  After the source is edited, the extension would silently keep running the old code; :func:`check` refuses
  that and says how to rebuild. The build writes ``_native_sources.json``: module name -> SHA-256 of the source
  it compiled.
- ``AGENTREPLAY_PURE_PYTHON=1`` at run time imports the sources instead of the compiled modules
  (:class:`SourceFinder`): for profiling (cProfile cannot see inside compiled functions), debugging, and the test
  that compares the two builds. At install time the same variable skips compilation.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

PKG = Path(__file__).resolve().parent
MANIFEST_NAME = "_native_sources.json"


class StaleNativeModuleError(ImportError):
    """A compiled module no longer matches its source."""


def pure_python_requested() -> bool:
    return os.environ.get("AGENTREPLAY_PURE_PYTHON", "").strip() not in ("", "0")


def _compiled_file(pkg: Path, module: str) -> Path | None:
    rel = Path(*module.split(".")[1:])
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        f = pkg / rel.with_suffix(suffix)
        if f.exists():
            return f
    return None


def _read_manifest(pkg: Path) -> dict:
    path = pkg / MANIFEST_NAME
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
        if not isinstance(data, dict) or not isinstance(data.get("sources", {}), dict):
            raise ValueError("expected an object with 'build' and 'sources'")
        return data
    except (OSError, ValueError) as e:
        raise StaleNativeModuleError(f"{path}: unreadable build manifest ({e}); reinstall agentreplay") from e


def _manifest(pkg: Path) -> dict[str, str]:
    return {str(k): str(v) for k, v in _read_manifest(pkg).get("sources", {}).items()}


def build_status(pkg: Path = PKG) -> str:
    """How the installed package was built: ``compiled``, or ``pure: <why>`` (``unknown`` without a manifest,
    e.g. a source tree that was never installed)."""
    return str(_read_manifest(pkg).get("build", "unknown"))


def compiled_modules(pkg: Path = PKG) -> list[str]:
    """Modules that run compiled in this process (empty under ``AGENTREPLAY_PURE_PYTHON``)."""
    if pure_python_requested():
        return []
    return sorted(m for m in _manifest(pkg) if _compiled_file(pkg, m) is not None)


def check(pkg: Path = PKG) -> None:
    """Raise :class:`StaleNativeModuleError` when a compiled module's source changed after it was compiled."""
    stale = []
    for module, digest in _manifest(pkg).items():
        src = pkg / Path(*module.split(".")[1:]).with_suffix(".py")
        if (
            _compiled_file(pkg, module) is not None
            and src.exists()
            and hashlib.sha256(src.read_bytes()).hexdigest() != digest
        ):
            stale.append(str(src))
    if stale:
        raise StaleNativeModuleError(
            "these sources changed after they were compiled, so the compiled modules would run old code: "
            + ", ".join(stale)
            + ". Rebuild with `pip install -e .` (about a minute), run the sources with "
            "AGENTREPLAY_PURE_PYTHON=1, or install pure Python with `AGENTREPLAY_PURE_PYTHON=1 pip install -e .`"
        )


class SourceFinder:
    """Meta-path finder that loads ``agentreplay`` submodules from their ``.py`` source even where a compiled
    extension sits beside it (the default finder prefers the extension)."""

    def find_spec(
        self, name: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if path is None or not name.startswith("agentreplay."):
            return None
        leaf = name.rpartition(".")[2]
        for d in path:
            src = Path(d) / f"{leaf}.py"
            if src.is_file():
                return importlib.util.spec_from_file_location(name, src)
        return None


def activate() -> None:
    """Called once by ``agentreplay/__init__.py``: use the sources if asked, else refuse stale extensions."""
    if pure_python_requested():
        if not any(isinstance(f, SourceFinder) for f in sys.meta_path):
            sys.meta_path.insert(0, SourceFinder())  # type: ignore[arg-type]
    else:
        check()
