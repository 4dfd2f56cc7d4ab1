"""The registered experiments: each feature's (``experiments=`` of its ``__init__``, :mod:`agentreplay.features`),
in the features' order, then the preset comparison (:mod:`agentreplay.experiment.compare`).

Names are unique, and no ``Params`` field takes the name of an option every experiment has (:data:`COMMON`).
"""

from __future__ import annotations

from functools import cache

from agentreplay.experiment.base import Experiment
from agentreplay.features.base import load
from agentreplay.features.registry import features

#: experiments that belong to no feature
OWN = ("agentreplay.experiment.compare:EXPERIMENT",)
#: options of ``agentreplay fleet NAME`` common to every experiment (no ``Params`` field may take one)
COMMON = ("trace", "gpu", "model", "tp", "config", "out", "workers", "dask", "seeds", "json", "help")


def refs() -> tuple[str, ...]:
    """``module:attribute`` of every registered experiment, in order."""
    return (*(r for f in features() for r in f.experiments), *OWN)


@cache
def experiments() -> dict[str, Experiment]:
    """Name -> experiment, in registration order (imports each experiment's module)."""
    from agentreplay.experiment.params import specs

    out: dict[str, Experiment] = {}
    for ref in refs():
        exp = load(ref)
        if exp.name in out:
            raise ValueError(f"experiment name {exp.name!r} is registered twice ({ref})")
        clash = [s.name for s in specs(exp.Params) if s.name in COMMON]
        if clash:
            raise ValueError(f"{ref}: Params field(s) {clash} take the name of a common option ({', '.join(COMMON)})")
        out[exp.name] = exp
    return out


def experiment(name: str) -> Experiment:
    """The experiment called ``name``; KeyError naming the known ones."""
    known = experiments()
    if name not in known:
        raise KeyError(f"no experiment named {name!r} (known: {', '.join(known)})")
    return known[name]
