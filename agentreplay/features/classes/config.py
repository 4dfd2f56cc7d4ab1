"""Configuration of front-end admission (``[admission]``) and of priority classes (``[classes]``).

Two frozen sections of :class:`agentreplay.sim.config.SimConfig`, owned by the classes feature, each validated when
built (a bad value fails with the section, field, value and the allowed range, like every other section):

- ``[admission]``: ``policy`` names a policy of :data:`agentreplay.router.admission.ADMISSIONS` (``admit-all``,
  ``thunderagent``, ``deadline``); the other fields are those policies' parameters (each policy's parameter
  dataclass reads the fields it names, and validates them).
- ``[classes]``: priority classes (interactive, background, batch). Off by default; when on, each program gets a
  class, from the trace's ``programs`` column ``column`` where the trace has it (a trace given as a ``Trace``, as
  ``fleet-priority`` and the Python API do; ``simulate`` compiles the trace without extra columns), otherwise by a
  seeded draw from ``mix`` (the summary's ``classes.source`` says which); its class's rank is its
  ``ProgramInfo.priority`` (0 = interactive, the most urgent), which the ``priority`` queue order and the
  ``lowest-priority`` victim read, and its class's deadline is its JCT deadline (``deadline_s`` absolute, else
  ``deadline_x`` times its uncontended JCT, as :mod:`agentreplay.fleet.goodput`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agentreplay.policy.registry import ParamError
from agentreplay.router.admission import ADMISSIONS
from agentreplay.router.deadline import DeadlineAction
from agentreplay.router.thunderagent import ThunderSharedTokens, ThunderVariant
from agentreplay.sim.config_checks import check as _check
from agentreplay.sim.errors import ConfigError

#: The priority classes, most urgent first (the index is the class's rank, ``ProgramInfo.priority``).
CLASSES: tuple[str, ...] = ("interactive", "background", "batch")


@dataclass(frozen=True, slots=True)
class AdmissionConfig:
    """Front-end admission: ``policy`` and the parameters of the admission policies (sources in
    :mod:`agentreplay.router.thunderagent` and :mod:`agentreplay.router.deadline`)."""

    policy: str = "admit-all"  #: a name of ADMISSIONS
    #: thunderagent: which ThunderAgent router: "released" (github.com/ThunderAgent-org/ThunderAgent, what
    #: deployments run) or "original" (github.com/HaoKang-Timmy/ThunderAgent); see agentreplay.router.thunderagent
    thunder_variant: ThunderVariant = "released"
    #: thunderagent: share of the instances' KV capacity (tokens) the admitted programs' footprint may fill
    thunder_capacity_fraction: float = 1.0
    #: thunderagent: half-life of an acting (in-tool) program's footprint, seconds; 0 = no decay. original: decay
    #: on when > 0; released: used only with thunder_acting_token_decay (its 2^(-t) is the default 1 s)
    thunder_half_life_s: float = 1.0
    #: thunderagent: a call held longer than this, seconds, is resumed whatever the capacity (source: 1800 s)
    thunder_resume_timeout_s: float = 1800.0
    #: thunderagent (original): period of the pause / resume check while calls are held, seconds (source: 5 s)
    thunder_recheck_s: float = 5.0
    #: thunderagent: decode headroom reserved per admitted program, tokens (source: BUFFER_PER_PROGRAM = 100)
    thunder_buffer_tokens: int = 100
    #: thunderagent (released): period of the scheduler check (pause / resume), seconds (--scheduler-interval, 5 s)
    thunder_scheduler_interval_s: float = 5.0
    #: thunderagent: weight of an acting program's tokens in the footprint, dimensionless >= 0
    #: (--acting-token-weight, 1.0)
    thunder_acting_token_weight: float = 1.0
    #: thunderagent (released): count acting tokens x 2^(-t / half-life) when resuming (--use-acting-token-decay)
    thunder_acting_token_decay: bool = False
    #: thunderagent (released): shared-token discount: "off" (as released: never updated) or "kv-usage" (reasoning
    #: tokens minus the instances' KV tokens in use, vLLM's kv_cache_usage_perc formula)
    thunder_shared_tokens: ThunderSharedTokens = "off"
    #: thunderagent (released): after a pause, further acting pauses in a check wait this long, seconds (0 = none,
    #: as released; PAUSE_COOLDOWN = 5 in earlier commits)
    thunder_pause_cooldown_s: float = 0.0
    #: thunderagent (released): no resume round within this long after the last resume, seconds (0 = none, as
    #: released; RESUME_COOLDOWN = 5 in earlier commits)
    thunder_resume_cooldown_s: float = 0.0
    #: deadline: what happens to a program that cannot meet its deadline (see agentreplay.router.deadline)
    deadline_action: DeadlineAction = "defer"

    def __post_init__(self) -> None:
        _check(self.policy in ADMISSIONS, "admission", "policy", self.policy, f"one of {list(ADMISSIONS.names())}")
        try:
            ADMISSIONS.check(self)
        except ParamError as exc:
            raise ConfigError(f"[admission] {exc}") from None


def _default_mix() -> dict[str, float]:
    return {"interactive": 0.2, "background": 0.3, "batch": 0.5}


def _default_deadline_x() -> dict[str, float]:
    return {"interactive": 1.5, "background": 3.0, "batch": 10.0}


@dataclass(frozen=True, slots=True)
class ClassConfig:
    """Priority classes: each program's class, priority and JCT deadline (module docstring)."""

    enabled: bool = False  #: assign classes (off: every program is interactive, priority 0, as before)
    #: class -> share of the programs drawn into it (seeded); shares sum to 1
    mix: dict[str, float] = field(default_factory=_default_mix)
    column: str = "priority_class"  #: the trace's programs column that names each program's class, if present
    #: class -> absolute JCT deadline, seconds (takes precedence over deadline_x for that class)
    deadline_s: dict[str, float] = field(default_factory=dict)
    #: class -> JCT deadline as a multiple of the program's uncontended JCT (>= 1)
    deadline_x: dict[str, float] = field(default_factory=_default_deadline_x)

    def __post_init__(self) -> None:
        _check(isinstance(self.enabled, bool), "classes", "enabled", self.enabled, "true or false")
        _check(bool(self.column), "classes", "column", self.column, "a column name")
        for name, table in (("mix", self.mix), ("deadline_s", self.deadline_s), ("deadline_x", self.deadline_x)):
            for k in table:
                _check(k in CLASSES, "classes", f"{name}.{k}", table[k], f"a class of {list(CLASSES)}")
        for k, v in self.mix.items():
            _check(isinstance(v, int | float) and v >= 0, "classes", f"mix.{k}", v, ">= 0")
        total = sum(self.mix.values())
        _check(abs(total - 1.0) < 1e-9, "classes", "mix", dict(self.mix), "shares summing to 1")
        for k, v in self.deadline_s.items():
            _check(isinstance(v, int | float) and v > 0, "classes", f"deadline_s.{k}", v, "> 0 seconds")
        for k, v in self.deadline_x.items():
            _check(isinstance(v, int | float) and v >= 1, "classes", f"deadline_x.{k}", v, ">= 1")
        for k in CLASSES:
            _check(
                k in self.deadline_s or k in self.deadline_x,
                "classes",
                "deadline_x",
                dict(self.deadline_x),
                f"a deadline for every class (class {k!r} has none in deadline_s or deadline_x)",
            )


#: the config sections this feature owns (agentreplay.features.registry)
CONFIG: dict[str, type] = {"admission": AdmissionConfig, "classes": ClassConfig}
