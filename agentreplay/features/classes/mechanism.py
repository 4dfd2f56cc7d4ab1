"""Front-end admission, priority classes and deadlines as a mechanism (``[admission]``, ``[classes]``).

On in every run: the orchestrator's admission gate is ``[admission] policy`` (:data:`agentreplay.router.admission
.ADMISSIONS`; ``admit-all`` by default, which the orchestrator never calls per turn). Once the cluster is priced
(:meth:`Classes.admit`), with classes on or the ``deadline`` policy, each program gets its class and JCT deadline
(:func:`agentreplay.features.classes.classes.setup`: the deadline policy's ``reject`` action removes the programs
that cannot meet theirs); the classes' ranks are the programs' priorities. Summary: ``admission`` for a policy
other than admit-all, ``classes`` with classes on (absent otherwise, so other runs keep their summary).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentreplay.features.classes.classes import ClassSetup, setup
from agentreplay.features.mechanism import Mechanism, Parts, Sizing, View, Wiring
from agentreplay.router.admission import ADMISSIONS

if TYPE_CHECKING:
    from agentreplay.router.admission import AdmissionPolicy
    from agentreplay.sim.config import SimConfig
    from agentreplay.sim.workload import Workload


class Classes(Mechanism):
    """The admission policy, and the programs' classes and deadlines when asked for (module docstring)."""

    def __init__(self, cfg: SimConfig) -> None:
        self.cfg = cfg
        self.setup: ClassSetup | None = None  #: classes and deadlines (classes on, or the deadline policy)
        self.admission: AdmissionPolicy | None = None

    @classmethod
    def from_config(cls, cfg: SimConfig) -> Classes:
        """Always on (the admission gate is part of every run)."""
        return cls(cfg)

    def admit(self, workload: Workload, sizing: Sizing) -> Workload:
        cfg, adm = self.cfg, self.cfg.admission
        if cfg.classes.enabled or adm.policy == "deadline":
            self.setup = setup(sizing.trace, workload, cfg, sizing.pricer, sizing.chunk_tokens)
            workload = self.setup.workload
        self.admission = ADMISSIONS.build(adm.policy, adm, None if self.setup is None else self.setup.ctx)
        return workload

    def wire(self, parts: Parts) -> Wiring:
        classes = self.setup.classes if self.setup is not None and self.cfg.classes.enabled else None
        return Wiring(admission=self.admission, priorities=None if classes is None else classes.tolist())

    def summary(self, view: View) -> dict[str, Any]:
        out: dict[str, Any] = {}
        policy = self.cfg.admission.policy
        if policy != "admit-all":
            assert self.admission is not None
            out["admission"] = self.admission.summary()  # type: ignore[attr-defined]
            if self.setup is not None and policy == "deadline":
                out["admission"]["rejected_programs"] = len(self.setup.rejected_classes)
        if self.setup is not None and self.cfg.classes.enabled:
            out["classes"] = self.setup.summary(view.program_column("jct_s"))
        return out


MECHANISM = Classes.from_config
