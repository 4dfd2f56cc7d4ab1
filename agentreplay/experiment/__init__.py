"""Experiments: labelled variants of a base configuration run on a trace, turned into tables and figures.

An experiment declares its parameters, its variants, its analysis and its rendering (:class:`Experiment`,
:mod:`agentreplay.experiment.base`); one runner runs any of them on the sweep's executors, resumably, into one
output folder (:func:`run_experiment`); ``agentreplay fleet NAME`` runs the registered ones
(:func:`experiments`: each feature's, and the preset comparison).

>>> from pathlib import Path
>>> from agentreplay.experiment import experiment, run_experiment
>>> from agentreplay.sim.config import SimConfig
>>> exp = experiment("thinking")
>>> done = run_experiment(exp, exp.Params(loads=(4,)), SimConfig(), Path("datasets/swebench-verified"),
...                       Path("out/thinking"), workers=2)  # doctest: +SKIP
>>> done.tables["thinking"]  # doctest: +SKIP
"""

from agentreplay.experiment.base import Experiment, param
from agentreplay.experiment.registry import experiment, experiments
from agentreplay.experiment.results import Results, Run, over_seeds
from agentreplay.experiment.runner import ExperimentError, Outcome, run_experiment
from agentreplay.experiment.tables import View, about, about_of

__all__ = [
    "Experiment",
    "ExperimentError",
    "Outcome",
    "Results",
    "Run",
    "View",
    "about",
    "about_of",
    "experiment",
    "experiments",
    "over_seeds",
    "param",
    "run_experiment",
]
