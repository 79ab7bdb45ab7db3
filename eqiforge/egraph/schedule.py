"""The schedule of a saturation, as data: which rule sets run, in what order, with what back-off, under which
limits. ``saturate.run`` executes one; ``default_schedule`` builds the one EqiForge runs.

A *step* runs one rule set once, then re-derives shapes (the ``analysis`` rule set to saturation; that is
not a step of the schedule, as guards need it after every rewrite). An *iteration* runs the schedule's steps
in order. Iterations repeat until a limit holds or one changes nothing. A rule set may be the rule set of
several steps; its back-off state (bans, its last step's time and matches, whether it runs capped) is its
own, shared by those steps, and each step applies its own policy to it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import EqiforgeError
from . import rulesets


@dataclass(frozen=True)
class Limits:
    """When to stop. ``enodes`` is checked between steps and caps each rule's matches inside a step;
    ``seconds`` is checked between steps; ``hard_seconds`` kills a runaway step, after which the steps completed
    before it are replayed within the same limits (so that path takes up to ``hard_seconds + seconds``)."""

    iterations: int = 10
    enodes: int = 50_000
    seconds: float = 8.0
    hard_seconds: float | None = None  # default: 2 * seconds + 10

    def __post_init__(self):
        for name in ("iterations", "enodes"):
            _check_count(name, getattr(self, name), "limit")
        if not self.seconds > 0 or (self.hard_seconds is not None and not self.hard_seconds > 0):
            raise EqiforgeError("time limits must be positive numbers of seconds")

    @property
    def kill_after(self) -> float:
        return self.hard_seconds if self.hard_seconds is not None else 2 * self.seconds + 10

    def __str__(self) -> str:
        return f"{self.enodes} e-nodes, {self.seconds:g} s (killed after {self.kill_after:g} s)"


@dataclass(frozen=True)
class BackOff:
    """How a rule set backs off when it matches too much, two ways:

    - banned: a step applying more than ``match_limit`` matches bans its rule set for ``ban_iterations``
      iterations; both double with every ban of that set (egg's BackoffScheduler).
    - capped: inside a step egglog cannot be stopped, but its back-off scheduler drops the matches of a rule
      that finds more than a cap. A rule set runs capped (cap: the e-nodes left) from its first step that
      may find more matches than that, predicted from its last step, or once the e-graph holds
      ``capped_from`` of the e-node limit (other sets' growth makes the prediction unsure). It stays capped:
      a plain run after a capped one would find what the cap skipped.
    """

    match_limit: int = 20_000
    ban_iterations: int = 2
    capped_from: float = 0.5  # fraction of the e-node limit

    def __post_init__(self):
        for name in ("match_limit", "ban_iterations"):
            _check_count(name, getattr(self, name), "back-off")
        if not 0 <= self.capped_from <= 1:
            raise EqiforgeError(f"back-off capped_from must be a fraction in [0, 1], got {self.capped_from!r}")

    def ban(self, applied: int, times_banned: int) -> int | None:
        """Iterations to ban a rule set for after a step that applied ``applied`` matches, when it was banned
        ``times_banned`` times before; None: no ban."""
        return self.ban_iterations << times_banned if applied > self.match_limit << times_banned else None

    def runs_capped(self, enodes: int, limit: int, predicted_matches: float) -> bool:
        """Whether a step at ``enodes`` e-nodes (of the limit ``limit``) must start capped."""
        return enodes >= self.capped_from * limit or predicted_matches >= limit - enodes

    def __str__(self) -> str:
        return (f"banned for {self.ban_iterations} iterations past {self.match_limit} matches (both double "
                f"per ban); capped from {self.capped_from:.0%} of the e-node limit")


@dataclass(frozen=True)
class Step:
    """Run rule set ``ruleset`` once (then shapes), backing off by ``back_off``."""

    ruleset: str
    back_off: BackOff = field(default_factory=BackOff)


@dataclass(frozen=True)
class Schedule:
    """The steps of one iteration, in order, and the limits (``limits.iterations``: how many iterations)."""

    steps: tuple[Step, ...]
    limits: Limits = field(default_factory=Limits)
    #: cost-guided kernel layer (guide.py): the algebra saturates first, then every step runs with the kernel
    #: layer's entry rules limited to e-nodes priced within this factor of their e-class's best form's own
    #: price; ``limits.iterations`` bounds each of the two phases. None: unguided, one phase
    kernel_guide: float | None = None

    def __post_init__(self):
        if self.kernel_guide is not None and not self.kernel_guide >= 1:
            raise EqiforgeError("kernel_guide is a factor of at least 1 (or None: unguided), "
                                f"got {self.kernel_guide!r}")
        if not isinstance(self.steps, tuple) or not all(isinstance(s, Step) for s in self.steps):
            raise EqiforgeError(f"a Schedule's steps are a tuple of Step(...), got {self.steps!r}")
        if not isinstance(self.limits, Limits):
            raise EqiforgeError(f"a Schedule's limits are an eqiforge.Limits(...), got {self.limits!r}")

    @classmethod
    def of(cls, *names: str, limits: Limits | None = None, back_off: BackOff | None = None,
           kernel_guide: float | None = None) -> Schedule:
        """A schedule of a step per name, in order (a name may repeat), all with one back-off policy."""
        return cls(tuple(Step(n, back_off or BackOff()) for n in names), limits or Limits(), kernel_guide)

    def algebra(self) -> Schedule:
        """The same schedule without its kernel-layer steps (a guided run's first phase)."""
        layer = {rs.name: rs.layer for rs in rulesets.select(list(self.rulesets))}
        return Schedule(tuple(s for s in self.steps if layer[s.ruleset] == "algebra"), self.limits)

    @property
    def rulesets(self) -> tuple[str, ...]:
        """The rule sets it runs, each once, in the order of their first steps."""
        return tuple(dict.fromkeys(s.ruleset for s in self.steps))

    def __str__(self) -> str:
        """What it runs, for people: the steps, their back-off and the limits."""
        policies = {s.back_off for s in self.steps}
        shared = len(policies) == 1
        lines = [f"{self.limits.iterations} iterations of {len(self.steps)} steps (each then {rulesets.ANALYSIS} "
                 f"to saturation):"]
        lines += [f"  {k}. {s.ruleset}" + ("" if shared else f"  (back-off: {s.back_off})")
                  for k, s in enumerate(self.steps, 1)]
        lines += [f"back-off: {policies.pop()}"] if shared else []
        lines.append(f"limits: {self.limits}")
        if self.kernel_guide is not None:
            lines.append(f"kernel layer guided: algebra first, then kernels for forms within {self.kernel_guide:g}x "
                         f"of the best form's own price")
        return "\n".join(lines)


def default_schedule(names: list[str] | None, limits: Limits | None = None,
                     layers: tuple[str, ...] = rulesets.LAYERS, back_off: BackOff | None = None,
                     kernel_guide: float | None = None) -> Schedule:
    """The schedule EqiForge runs: a step per rule set called ``names``, in that order (None: every rule set
    whose file's ``; layer:`` field is one of ``layers``, by file name), each with the same back-off."""
    return Schedule.of(*(rs.name for rs in rulesets.select(names, layers)), limits=limits, back_off=back_off,
                       kernel_guide=kernel_guide)


def _check_count(name: str, value, what: str) -> None:
    if not isinstance(value, int) or value < 0:
        raise EqiforgeError(f"{what} {name} must be a non-negative integer, got {value!r}")
