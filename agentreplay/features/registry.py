"""The features, one line each: the folder names under ``agentreplay/features/`` in the order their mechanisms
attach to a simulated cluster (an earlier mechanism's hooks run first; a mechanism that depends on another names
it, :mod:`agentreplay.features.mechanism`), and the config sections they own (:class:`FeatureSections`).

Adding a feature: create ``agentreplay/features/<name>/`` (``__init__.py`` declaring ``FEATURE``, its config,
mechanism, experiments, ``README.md`` and its tests under ``tests/features/<name>/``) and add its name here; a
feature with a config section also types the section in :class:`FeatureSections` (its place there is its place in
``config.toml``). Nothing outside the folder and this file changes: :class:`agentreplay.sim.config.SimConfig` gets
the section from here, the simulator attaches the mechanism in the order of :data:`NAMES`, and its summary
sections follow the others (:data:`SUMMARY_LATE`).
"""

from __future__ import annotations

import importlib
from functools import cache
from typing import TYPE_CHECKING

from agentreplay.features.base import Feature, load

if TYPE_CHECKING:
    from agentreplay.features.classes.config import AdmissionConfig, ClassConfig
    from agentreplay.features.disagg.config import DisaggConfig
    from agentreplay.features.failover.config import FailureConfig
    from agentreplay.features.footprint.config import FootprintConfig
    from agentreplay.features.speculation.config import SpeculativeConfig
    from agentreplay.features.thinking.config import ThinkingConfig

NAMES: tuple[str, ...] = (
    "thinking",
    "classes",
    "speculation",
    "disagg",
    "dp",
    "footprint",
    "failover",
    "fanout",
    "day",
)


class FeatureSections:
    """The config sections the features own, each typed as its dataclass, in the order a config lists them
    (``config.toml``, :meth:`agentreplay.sim.config.SimConfig.to_dict`): :class:`agentreplay.sim.config.SimConfig`
    gets one field per section from here, after the core sections and before ``seed``, so ``cfg.disagg`` reads
    ``[disagg]`` (and mypy knows its type). Which feature owns a section, and its dataclass, is the feature's
    ``CONFIG`` (:func:`section_types`)."""

    __slots__ = ()

    disagg: DisaggConfig
    footprint: FootprintConfig
    admission: AdmissionConfig
    classes: ClassConfig
    speculative: SpeculativeConfig
    thinking: ThinkingConfig
    failures: FailureConfig


#: the feature sections, in config order
SECTIONS: tuple[str, ...] = tuple(FeatureSections.__annotations__)

#: The mechanisms' summary sections in the order the run summary lists them (its in-memory key order, what
#: ``simulate --json`` prints; ``summary.json`` sorts its keys, :mod:`agentreplay.sim.collect`): those of
#: ``SUMMARY_EARLY`` follow the run's ``rejected`` figures (what the front end admitted), those of ``SUMMARY_LATE``
#: the cluster's figures, and any section not listed comes last, in registry order.
SUMMARY_EARLY: tuple[str, ...] = ("admission", "classes")
SUMMARY_LATE: tuple[str, ...] = ("disagg", "thinking", "speculative", "footprint", "failover", "dp_group")


@cache
def features() -> tuple[Feature, ...]:
    """Every registered feature's declaration (imports each folder's ``__init__``, none of its code)."""
    return tuple(importlib.import_module(f"agentreplay.features.{n}").FEATURE for n in NAMES)


def feature(name: str) -> Feature:
    for f in features():
        if f.name == name:
            return f
    raise KeyError(f"no feature named {name!r} (known: {', '.join(NAMES)})")


@cache
def section_types() -> dict[str, type]:
    """Each feature section's dataclass, in :data:`SECTIONS` order (imports the features' config modules). A
    feature's ``CONFIG`` must hold exactly the sections it declares, and those must be the ones listed in
    :class:`FeatureSections`."""
    found: dict[str, type] = {}
    for f in features():
        config: dict[str, type] = load(f.config) if f.config is not None else {}
        if tuple(config) != f.sections:
            raise RuntimeError(
                f"feature {f.name!r}: CONFIG holds sections {list(config)}, it declares {list(f.sections)}"
            )
        for name, cls in config.items():
            if name in found:
                raise RuntimeError(f"config section [{name}] is owned by two features")
            found[name] = cls
    if set(found) != set(SECTIONS):
        raise RuntimeError(
            f"feature sections {sorted(found)} are not the ones FeatureSections lists ({sorted(SECTIONS)})"
        )
    return {name: found[name] for name in SECTIONS}
