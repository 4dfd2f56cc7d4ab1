"""Defer a module's import until one of its attributes is used (``agentreplay simulate``'s start-up, issue 17).

The simulate path needs no pandas (:mod:`agentreplay.trace.columns`, :mod:`agentreplay.sim.tables`), but the
compiled :mod:`agentreplay.sim.metrics` imports it at module level, which costs about 0.3 s. Until that import
moves into the functions that use it (a change to a compiled module, so a rebuild), the ``simulate`` command
registers a placeholder: ``import pandas`` then binds it, and the first attribute looked up on it imports the
real pandas, which from then on answers every lookup. Code that uses pandas keeps working, only later. Not for
library use: it changes what ``import pandas`` gives in the whole process.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from typing import Any


class _Placeholder(types.ModuleType):
    def __getattr__(self, attr: str) -> Any:
        name = self.__name__
        if sys.modules.get(name) is self:
            del sys.modules[name]
        real = importlib.import_module(name)
        self.__dict__.update(real.__dict__)  # later lookups find the real attributes directly
        return getattr(real, attr)


def defer_import(name: str) -> None:
    """Register a placeholder for top-level module ``name`` unless it is imported already or not installed."""
    if name in sys.modules or "." in name:
        return
    spec = importlib.util.find_spec(name)
    if spec is None:
        return
    module = _Placeholder(name)
    module.__spec__ = spec
    sys.modules[name] = module


def is_loaded(name: str) -> bool:
    """Whether the real module ``name`` was imported (not just its placeholder)."""
    return name in sys.modules and not (isinstance(sys.modules[name], _Placeholder)
                                        and "__file__" not in sys.modules[name].__dict__)
