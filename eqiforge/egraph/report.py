"""What a saturation did: per step (one rule set run once), the e-graph size, matches per rule and time.

A step records the matches it applied and, apart, the rules it skipped for finding more matches than its
cap (a capped step counts every match in the e-graph, a plain one only those that are new).
Plain data (no egglog), so it crosses process boundaries and feeds the growth plots and ablations. It
records the schedule that ran (``str(report.schedule)`` shows it).
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .schedule import Schedule


class Stop(enum.Enum):
    """What ended a saturation."""

    NOT_RUN = "not run"
    SATURATED = "saturated"  # an iteration changed nothing
    ITERATIONS = "iteration limit"
    ENODES = "e-node limit"
    SECONDS = "time limit"
    STEPS = "step count"  # a replay stopped after the steps a killed run had completed
    KILLED = "hard time limit"  # a step ran away; the completed steps were replayed
    DIED = "egglog died"  # the saturating process died (panic, memory); the completed steps were replayed


class StopReason(str):
    """Why a saturation stopped: ``kind`` (a Stop) and, as the string itself, the detail people read
    ("e-node limit (50000): skipped add-interchange (...)")."""

    kind: Stop

    def __new__(cls, kind: Stop, detail: str | None = None):
        reason = super().__new__(cls, detail if detail is not None else kind.value)
        reason.kind = kind
        return reason

    def __getnewargs__(self):  # pickled across the saturation's process boundary
        return self.kind, str(self)


@dataclass
class StepStats:
    iteration: int
    ruleset: str
    enodes: int
    eclasses: int
    matches: dict[str, int]  # applied matches per rule
    seconds: float
    banned: bool = False  # matched too much: the rule set is banned for a few iterations (back-off)
    match_cap: int = 0  # capped step: the most matches one rule could apply, the e-nodes left; 0 = not capped
    skipped: dict[str, int] = field(default_factory=dict)  # rules that found more than match_cap: applied none


@dataclass
class SaturationReport:
    steps: list[StepStats] = field(default_factory=list)
    stop_reason: StopReason = field(default_factory=lambda: StopReason(Stop.NOT_RUN))
    seconds: float = 0.0
    initial_enodes: int = 0
    initial_eclasses: int = 0
    limits: dict = field(default_factory=dict)  # the schedule's limits, as a dict
    schedule: Schedule | None = None  # the schedule that ran (None: not run)
    from_cache: bool = False  # read from the saturation cache (cache.py): what a run measured then
    guided: str = ""  # a guided run (guide.py): how many e-classes the kernel layer worked on

    @property
    def iterations(self) -> int:
        return max((s.iteration for s in self.steps), default=0)

    @property
    def enodes(self) -> int:
        return self.steps[-1].enodes if self.steps else self.initial_enodes

    @property
    def eclasses(self) -> int:
        return self.steps[-1].eclasses if self.steps else self.initial_eclasses

    def matches_per_rule(self) -> dict[str, int]:
        total: dict[str, int] = {}
        for s in self.steps:
            for rule, n in s.matches.items():
                total[rule] = total.get(rule, 0) + n
        return dict(sorted(total.items(), key=lambda kv: (-kv[1], kv[0])))

    def per_iteration(self) -> list[dict]:
        """One row per iteration: size after it, time spent, matches."""
        rows: dict[int, dict] = {}
        for s in self.steps:
            row = rows.setdefault(s.iteration, {"iteration": s.iteration, "seconds": 0.0, "matches": 0})
            row.update(enodes=s.enodes, eclasses=s.eclasses)
            row["seconds"] += s.seconds
            row["matches"] += sum(s.matches.values())
        return list(rows.values())
