"""The design-space study: the published agent-serving findings as controlled experiments.

>>> from agentreplay.study import StudyOptions, run_study, write_report
>>> from agentreplay.sweep import make_executor
>>> with make_executor(workers=2) as ex:
...     run = run_study(StudyOptions.make(quick=True), "out/study-work", ex)
>>> write_report(run, "out/study")
"""

from agentreplay.study.runner import StudyRun, run_study
from agentreplay.study.spec import POLICIES, StudyOptions

__all__ = ["POLICIES", "StudyOptions", "StudyRun", "run_study"]
