"""What a feature is: one folder under ``agentreplay/features/<name>/`` and one line in :mod:`.registry`.

A feature's folder holds its configuration section, its simulator mechanism (the ``Mechanism`` seam of
:mod:`agentreplay.features.mechanism`), its experiments (the ``Experiment`` seam of :mod:`agentreplay.experiment`)
and its documentation page (``README.md``, included in the docs). The folder's ``__init__.py`` declares a
:class:`Feature` whose parts are named as ``"module:attribute"`` strings and imported only when used, so listing
the features (``--help``, the docs build) imports none of their code.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def load(ref: str) -> Any:
    """The object a ``"package.module:attribute"`` reference names (imported on first use)."""
    module, _, attr = ref.partition(":")
    if not attr:
        raise ValueError(f"reference {ref!r} is not 'module:attribute'")
    return getattr(importlib.import_module(module), attr)


@dataclass(frozen=True, slots=True)
class Feature:
    """One optional part of the simulator or one family of studies.

    ``sections``: the config sections it owns (``[name]`` in a TOML config; none: it has none). ``config``:
    reference to its ``CONFIG``, each section's name -> its dataclass. ``mechanism``: reference to its mechanism
    factory (``SimConfig -> Mechanism | None``; None: it changes no simulated behaviour, e.g. a workload study).
    ``experiments``: references to its experiments.
    """

    name: str
    summary: str
    sections: tuple[str, ...] = ()
    config: str | None = None
    mechanism: str | None = None
    experiments: tuple[str, ...] = ()

    @property
    def folder(self) -> Path:
        return Path(__file__).resolve().parent / self.name

    @property
    def doc(self) -> Path:
        """The feature's documentation page (the docs build includes it)."""
        return self.folder / "README.md"
