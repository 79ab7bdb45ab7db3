"""The saturation driver: follow a Schedule (schedule.py) under its limits, record it, return a snapshot.

The schedule is data; ``_follow`` executes it: each iteration runs the schedule's steps in order (one step:
a rule set once, then shapes), skipping the steps of banned rule sets, until a limit holds or an iteration
changes nothing. Limits hold at three levels:

- Between steps, no step starts at or past the e-node, time or iteration limit, nor one predicted to overrun
  the time limit; rule sets that match too much are banned for a few iterations (back-off, doubling).
- Inside a step, egglog cannot be interrupted, and egglog 13.2 checks ``:until`` only between iterations, so
  it cannot bound one. Its back-off scheduler can: it drops the matches of a rule that finds more than a cap.
  A step that may find more matches than there are e-nodes left runs with that cap, so a rule that would
  blow past the limit (``add-interchange``: 279k matches at 16k e-nodes, giving 291k) is skipped instead.
  A capped step matches the whole e-graph, not only what is new (about 4x slower on a fusion-heavy run), so
  a rule set runs capped only from its first step predicted to need it (``BackOff.runs_capped``).
- The whole run happens in a forked child: if it passes the hard wall-clock limit or dies (Rust panic, out
  of memory), the parent kills it and replays, in its own process and under the same limits, the steps that
  had completed (deterministic, so a prefix of the child's run that stops before the step that ran away),
  and extraction goes on with that e-graph.

A guided schedule (``Schedule.kernel_guide``, guide.py) runs in two phases: its algebra steps to saturation,
then the prices and the promising e-classes are stated, then all its steps.

Hitting a limit is normal; the report says which one, and which schedule ran.
"""
from __future__ import annotations

import multiprocessing
import os
import time
from dataclasses import asdict, dataclass, replace
from typing import Callable

import egglog.bindings as eb

from .. import ops
from ..errors import EqiforgeError
from ..ir import Graph
from . import cache, encode, guide as guiding, rulesets, snapshot
from .guide import Guide
from .report import SaturationReport, StepStats, Stop, StopReason
from .schedule import BackOff, Limits, Schedule, Step, default_schedule

__all__ = ["BackOff", "Guide", "Limits", "Schedule", "Step", "as_schedule", "default_schedule", "run", "saturate"]


def _run(name: str):
    return eb.RunSchedule(eb.Run(encode.SPAN, eb.RunConfig(name, None)))


def _capped_run(name: str, cap: int):
    """One iteration of rule set ``name`` under egglog's back-off scheduler with match limit ``cap``: a rule
    finding more matches than that applies none of them in this step. The scheduler lives for this command
    only, so it matches against the whole e-graph (a plain run matches only what is new since its last run)."""
    span = encode.SPAN
    back_off = eb.Call(span, "back-off", [eb.Var(span, ":match-limit"), eb.Lit(span, eb.Int(cap))])
    return eb.UserDefined(span, "run-schedule", [
        eb.Call(span, "let-scheduler", [eb.Var(span, "capped"), back_off]),
        eb.Call(span, "run-with", [eb.Var(span, "capped"), eb.Var(span, name)]),
    ])


def _saturate(name: str):
    return eb.RunSchedule(eb.Saturate(encode.SPAN, eb.Run(encode.SPAN, eb.RunConfig(name, None))))


def _size(egraph) -> tuple[int, int]:
    """(e-nodes, e-classes with a known shape)."""
    (out,) = egraph.run_program(eb.PrintSize(encode.SPAN, None))
    sizes = dict(out.sizes)
    return sum(n for f, n in sizes.items() if f in ops.OPS), sizes.get("shape", 0)


def _matches(report) -> tuple[dict[str, int], dict[str, int]]:
    """(applied, skipped) matches per rule of one step: the report's per-rule totals count applied matches
    only; its per-iteration rule reports also hold what a capped step's scheduler found and dropped."""
    applied = {r: n for r, n in sorted(report.num_matches_per_rule.items()) if n}
    found: dict[str, int] = {}
    for it in report.iterations:
        for rule, reports in it.rule_set_report.rule_reports.items():
            found[rule] = max(found.get(rule, 0), sum(r.num_matches for r in reports))
    return applied, {r: n for r, n in sorted(found.items()) if n and r not in applied}


def _changed(report) -> bool:
    """Whether a step changed the e-graph. Not ``report.updated``: a capped step that skipped a rule reports
    that as updated even when nothing changed."""
    return any(it.rule_set_report.changed for it in report.iterations)


def _execute(egraph, commands, what: str):
    """Run commands; turn egglog's errors and Rust panics into EqiforgeError naming ``what``."""
    try:
        return egraph.run_program(*commands)
    except BaseException as err:  # PanicException derives from BaseException
        if isinstance(err, (KeyboardInterrupt, SystemExit)):
            raise
        msg = str(err)
        if "Illegal merge" in msg and ("shape" in msg or "dtype" in msg):
            raise EqiforgeError(f"{what}: two different shapes/dtypes met in one e-class, so a rule in it is "
                                f"unsound or lacks a shape guard (egglog: {msg.strip()})") from None
        raise EqiforgeError(f"{what}: egglog failed: {msg.strip()[:500]}") from None


def predicted_seconds(last: tuple[float, int] | None, enodes: int) -> float:
    """How long a rule set's next step will take: its last step's time, scaled by the square of the e-graph's
    growth since (matching joins grow faster than the e-graph; measured on a BERT encoder's fusion steps:
    0.65, 4.0, 12.3 s at 12k, 23k, 35k e-nodes). 0 for a rule set that has not run."""
    return _scaled(last, enodes)


def predicted_matches(last: tuple[int, int] | None, enodes: int) -> float:
    """How many matches a rule set's next step will find: its last step's (applied and skipped), scaled as
    time is (``add-interchange``: 8.1k matches at 1.3k e-nodes predict 1.2M at 16k; it found 279k)."""
    return _scaled(last, enodes)


def _scaled(last: tuple[float, int] | None, enodes: int) -> float:
    """``last = (amount, e-nodes then)`` scaled by the square of the e-graph's growth since; 0 without one."""
    if last is None or last[1] <= 0:
        return 0.0
    amount, before = last
    return amount * (enodes / before) ** 2


def as_schedule(rules: Schedule | list[str] | None, limits: Limits | None = None) -> Schedule:
    """``rules`` if it is a Schedule (it carries its limits), else the default schedule of the rule sets it
    names (None: all) under ``limits``."""
    if not isinstance(rules, Schedule):
        return default_schedule(rules, limits)
    if limits is not None and limits != rules.limits:
        raise EqiforgeError("a Schedule carries its own limits: set them in Schedule(..., limits=...)")
    return rules


def run(graph: Graph, rules: Schedule | list[str] | None, limits: Limits | None = None, *,
        max_steps: int | None = None, on_step: Callable[[StepStats], None] | None = None,
        assume_finite: bool = True, guide: Guide | None = None):
    """Saturate in this process by a schedule (see ``as_schedule``); return (egglog EGraph, SaturationReport).
    Used directly by tests and by the replay after a killed child (``max_steps``: stop after that many
    steps). ``assume_finite=False`` leaves out the rules that hold for finite values only (see rulesets).
    ``guide`` prices a guided schedule's e-graph (required by one, ignored otherwise)."""
    schedule = as_schedule(rules, limits)
    guided = _guided(schedule, guide)
    start = time.perf_counter()
    egraph = eb.EGraph()
    for commands, what in _setup(graph, schedule, assume_finite, guided):
        _execute(egraph, commands, what)
    report = SaturationReport(limits=asdict(schedule.limits), schedule=schedule)
    report.initial_enodes, report.initial_eclasses = _size(egraph)
    runner = _Runner(egraph, schedule.limits, report, start, max_steps, on_step)
    if guided:
        report.stop_reason = _follow(schedule.algebra(), runner)
        if report.stop_reason.kind in (Stop.SATURATED, Stop.ITERATIONS):
            report.guided = _state_promising(egraph, graph, schedule.kernel_guide, guide)
            report.stop_reason = _follow(schedule, runner, first_iteration=report.iterations + 1)
    else:
        report.stop_reason = _follow(schedule, runner)
    report.seconds = time.perf_counter() - start
    return egraph, report


def _guided(schedule: Schedule, guide: Guide | None) -> bool:
    """Whether the run is guided: the schedule asks for it and has kernel-layer steps; a clear error when it
    asks without prices."""
    if schedule.kernel_guide is None or schedule.algebra().steps == schedule.steps:
        return False
    if guide is None:
        raise EqiforgeError("a schedule with kernel_guide needs prices: saturate(..., guide=Guide(price, key))")
    return True


def _state_promising(egraph, graph: Graph, factor: float, guide: Guide) -> str:
    """Price the algebra's e-graph and state its promising e-classes (guide.py); what the report says."""
    snap = snapshot.from_egraph(egraph, len(graph.outputs), graph.live_nodes())
    prices = list(guide.price(snap))
    kept = guiding.promising_nodes(snap, prices, factor)
    before = _size(egraph)
    _execute(egraph, guiding.marking_commands(snap, prices, kept), "stating the promising e-classes")
    if _size(egraph) != before:
        raise EqiforgeError(f"naming e-classes for the kernel guide added e-nodes ({before} -> {_size(egraph)}): "
                            f"a bug in eqiforge/egraph/guide.py; kernel_guide=None runs unguided meanwhile")
    classes = len({snap.node_class[n] for n in kept if prices[n] > 0})
    return (f"kernel layer on {classes} of {snap.num_classes} e-classes ({len(kept)} of {snap.num_nodes} e-nodes "
            f"within {factor:g}x of their e-class's best form's own price)")


def _setup(graph: Graph, schedule: Schedule, assume_finite: bool, guided: bool) -> list[tuple[list, str]]:
    """What egglog runs before the schedule, in order: (commands, what they do) for the schema, each rule set
    and the program with its shapes (unguided: every e-class promising)."""
    sets = rulesets.select(list(schedule.rulesets), assume_finite=assume_finite)
    unguided = [] if guided else [eb.ActionCommand(eb.Expr_(encode.SPAN, eb.Call(encode.SPAN, "unguided", [])))]
    return [(list(rulesets.schema_commands()), "loading rules/schema.egg"),
            *[(list(rs.commands), f"loading rule set {rs.name}") for rs in sets],
            (encode.encode(graph) + unguided + [_saturate(rulesets.ANALYSIS)], "adding the program")]


def _follow(schedule: Schedule, runner: _Runner, first_iteration: int = 1) -> StopReason:
    """Execute ``schedule``: its steps in order, once per iteration (numbered from ``first_iteration``), until
    a limit holds or an iteration changes nothing; the stop reason."""
    for iteration in range(first_iteration, first_iteration + schedule.limits.iterations):
        changed, first = False, len(runner.report.steps)
        for step in schedule.steps:
            if runner.banned(step.ruleset, iteration):
                changed = True  # a banned rule set may still have work to do
            elif stop := runner.why_not_start(step.ruleset):
                return stop
            else:
                changed |= runner.step(iteration, step)
        if not changed:
            return _unchanged_reason(runner.report.steps[first:], schedule.limits.enodes)
    return runner.why_not_start(None) or StopReason(Stop.ITERATIONS,
                                                    f"iteration limit ({schedule.limits.iterations})")


@dataclass
class _SetState:
    """What back-off knows of one rule set between its steps."""

    last_step: tuple[float, int] | None = None  # (seconds, e-nodes before) of its last step
    last_found: tuple[int, int] | None = None  # (matches found: applied and skipped, e-nodes before) likewise
    times_banned: int = 0
    banned_until: int = 0  # the last iteration it is banned in
    capped: bool = False  # its steps run capped, from the first that needed it


class _Runner:
    """One saturation between its steps: the e-graph's size, the clock, each rule set's back-off state."""

    def __init__(self, egraph, limits: Limits, report: SaturationReport, start: float, max_steps: int | None,
                 on_step: Callable[[StepStats], None] | None):
        self.egraph, self.limits, self.report, self.start = egraph, limits, report, start
        self.max_steps, self.on_step = max_steps, on_step
        self.enodes = report.initial_enodes
        self.sets: dict[str, _SetState] = {}

    def state(self, name: str) -> _SetState:
        return self.sets.setdefault(name, _SetState())

    def banned(self, name: str, iteration: int) -> bool:
        return self.state(name).banned_until >= iteration

    def why_not_start(self, name: str | None) -> StopReason | None:
        """Why the next step (of rule set ``name``; None: any step) must not start, None when it may."""
        if self.max_steps is not None and len(self.report.steps) >= self.max_steps:
            return StopReason(Stop.STEPS, f"replayed {len(self.report.steps)} completed steps")
        if self.enodes >= self.limits.enodes:
            return StopReason(Stop.ENODES, f"e-node limit ({self.limits.enodes})")
        elapsed = time.perf_counter() - self.start
        if elapsed >= self.limits.seconds:
            return StopReason(Stop.SECONDS, f"time limit ({self.limits.seconds:g} s)")
        predicted = predicted_seconds(self.state(name).last_step, self.enodes) if name else 0.0
        if elapsed + predicted > self.limits.seconds:
            return StopReason(Stop.SECONDS, f"time limit ({self.limits.seconds:g} s): the next {name} step was "
                                            f"predicted to take {predicted:.1f} s")
        return None

    def match_cap(self, step: Step) -> int:
        """The most matches one rule may apply in the next step, 0 for no cap: the e-nodes left, once the
        step's back-off says its rule set runs capped (``BackOff.runs_capped``)."""
        state = self.state(step.ruleset)
        predicted = predicted_matches(state.last_found, self.enodes)
        state.capped = state.capped or step.back_off.runs_capped(self.enodes, self.limits.enodes, predicted)
        return self.limits.enodes - self.enodes if state.capped else 0

    def step(self, iteration: int, step: Step) -> bool:
        """Run the step's rule set once (capped when needed), then derive shapes; record it, back off by the
        step's policy; whether it changed the e-graph."""
        name, state = step.ruleset, self.state(step.ruleset)
        cap, before = self.match_cap(step), self.enodes
        t0 = time.perf_counter()
        command = _capped_run(name, cap) if cap else _run(name)
        (out,) = _execute(self.egraph, [command], f"running rule set {name}")
        _execute(self.egraph, [_saturate(rulesets.ANALYSIS)], f"deriving shapes after {name}")
        self.enodes, eclasses = _size(self.egraph)
        applied, skipped = _matches(out.report)
        stats = StepStats(iteration, name, self.enodes, eclasses, applied, time.perf_counter() - t0,
                          match_cap=cap, skipped=skipped)
        state.last_step = (stats.seconds, before)
        state.last_found = (sum(applied.values()) + sum(skipped.values()), before)
        ban = step.back_off.ban(sum(applied.values()), state.times_banned)
        if ban is not None:
            state.times_banned += 1
            state.banned_until = iteration + ban
            stats = replace(stats, banned=True)
        self.report.steps.append(stats)
        if self.on_step:
            self.on_step(stats)
        return _changed(out.report)


def _unchanged_reason(steps: list[StepStats], enodes: int) -> StopReason:
    """Why an iteration that changed nothing ends the run: saturation, unless it skipped rules for finding
    more matches than e-nodes were left (then the e-node limit stopped it; the biggest are named)."""
    skipped = sorted(((n, rule, s.match_cap) for s in steps for rule, n in s.skipped.items()),
                     key=lambda t: (-t[0], t[1]))
    if not skipped:
        return StopReason(Stop.SATURATED)
    named = ", ".join(f"{rule} ({n} matches > {cap} e-nodes left)" for n, rule, cap in skipped[:3])
    more = f" and {len(skipped) - 3} more" if len(skipped) > 3 else ""
    return StopReason(Stop.ENODES, f"e-node limit ({enodes}): skipped {named}{more}; nothing else changed")


def _child(graph, schedule, max_steps, assume_finite, guide, conn, parents_end):
    # the parent's end of the pipe, closed here: once the parent is gone (a sweep's worker killed), a send must
    # fail and end this child at once, not block forever on a full pipe that this child itself kept open
    parents_end.close()
    try:
        egraph, report = run(graph, schedule, max_steps=max_steps, assume_finite=assume_finite, guide=guide,
                             on_step=lambda s: conn.send(("step", s)))
        snap = snapshot.from_egraph(egraph, len(graph.outputs), graph.live_nodes())
        conn.send(("done", snap, report))
    except (BrokenPipeError, ConnectionResetError):
        os._exit(1)  # nobody to tell: no cleanup either (a forked child's exit can wait on the parent's threads)
    except EqiforgeError as err:
        conn.send(("error", str(err)))
    except BaseException as err:  # noqa: BLE001 - anything else must reach the parent as a message
        conn.send(("error", f"saturation failed: {type(err).__name__}: {err}"))
    finally:
        conn.close()


def saturate(graph: Graph, rules: Schedule | list[str] | None, limits: Limits | None = None, *,
             on_step: Callable[[StepStats], None] | None = None, max_steps: int | None = None,
             assume_finite: bool = True, use_cache: bool = True, guide: Guide | None = None):
    """Saturate by a schedule (see ``as_schedule``) in a forked child under the hard limit; return
    (Snapshot, SaturationReport). With ``use_cache`` a run stored on disk for the same commands, schedule and
    prices (``guide.key``) is read instead (cache.py; ``report.from_cache`` says so), and this run is stored.
    ``guide``: the prices of a guided schedule (guide.py)."""
    schedule = as_schedule(rules, limits)
    # fails early, in this process, on unknown names or bad rule files
    guided = _guided(schedule, guide)
    setup = _setup(graph, schedule, assume_finite, guided)
    entry = cache.key([c for commands, _ in setup for c in commands], (schedule, guide.key if guided else None)) \
        if use_cache and max_steps is None else None
    stored = cache.load(entry) if entry else None
    if stored is not None:
        for step in stored[1].steps if on_step else ():
            on_step(step)
        return stored
    snap, report = _saturate_in_child(graph, schedule, on_step, max_steps, assume_finite, guide)
    if entry:
        cache.store(entry, snap, report)
    return snap, report


def _saturate_in_child(graph: Graph, schedule: Schedule, on_step, max_steps: int | None, assume_finite: bool,
                       guide: Guide | None):
    """(Snapshot, SaturationReport) of ``run`` in a forked child, killed at the hard limit (module docstring)."""
    limits = schedule.limits
    ctx = multiprocessing.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(graph, schedule, max_steps, assume_finite, guide, send, recv),
                       daemon=True)
    start = time.perf_counter()
    proc.start()
    send.close()
    done_steps, why = 0, None
    try:
        while True:
            left = limits.kill_after - (time.perf_counter() - start)
            if left <= 0 or not recv.poll(min(left, 0.5)):
                if left <= 0:
                    why = StopReason(Stop.KILLED, f"hard time limit ({limits.kill_after:g} s): a step ran away "
                                                  f"and was stopped")
                    break
                if not proc.is_alive() and not recv.poll():
                    why = StopReason(Stop.DIED, f"egglog process died (exit code {proc.exitcode}), likely out "
                                                f"of memory")
                    break
                continue
            try:
                msg = recv.recv()
            except EOFError:
                why = StopReason(Stop.DIED, f"egglog process died (exit code {proc.exitcode})")
                break
            if msg[0] == "step":
                done_steps += 1
                if on_step:
                    on_step(msg[1])
            elif msg[0] == "done":
                return msg[1], msg[2]
            else:
                raise EqiforgeError(msg[1])
    finally:
        proc.kill()
        proc.join()
        recv.close()
    return _replay(graph, schedule, done_steps, why, assume_finite, guide, start)


def _replay(graph, schedule: Schedule, done_steps: int, why: StopReason, assume_finite: bool, guide: Guide | None,
            start: float):
    """After a killed child: replay here the steps it completed, under the same limits (a second child could
    die the same way, e.g. a fork that inherited a lock held by another thread). The run is deterministic, so
    this is a prefix of the child's: it stops before the step that ran away, or earlier at a limit."""
    egraph, report = run(graph, schedule, max_steps=done_steps, assume_finite=assume_finite, guide=guide)
    snap = snapshot.from_egraph(egraph, len(graph.outputs), graph.live_nodes())
    if len(report.steps) == done_steps:
        report.stop_reason = StopReason(why.kind, f"{why}; continued with the {done_steps} steps completed before")
    else:
        report.stop_reason = StopReason(why.kind, f"{why}; replayed {len(report.steps)} of the {done_steps} steps "
                                                  f"completed before, then stopped at the {report.stop_reason}")
    report.seconds = time.perf_counter() - start
    return snap, report
