"""The saturation driver: run rule sets under limits, record what happened, return a snapshot.

One *step* runs one rule set once and then re-derives shapes (the ``analysis`` rule set to saturation), so
guards always see shapes of new nodes. One *iteration* runs every selected rule set once, in order. Limits
(iterations, e-nodes, seconds) are checked between steps, and a step predicted to overrun the time limit
is not started; rule sets that match too much are banned for a few iterations (back-off, doubling each
time). egglog cannot be interrupted inside a step, so the whole run
happens in a forked child: if it passes the hard wall-clock limit or dies (Rust panic, out of memory), the
parent kills it and replays, in its own process, the steps that had completed (deterministic, and known
to finish in time), and extraction goes on with that e-graph. Hitting a limit is normal; the report says which one.
"""
from __future__ import annotations

import multiprocessing
import time
from dataclasses import asdict, dataclass, replace
from typing import Callable

import egglog.bindings as eb

from .. import ops
from ..errors import EqiforgeError
from ..ir import Graph
from . import encode, rulesets, snapshot
from .report import SaturationReport, StepStats


@dataclass(frozen=True)
class Limits:
    """When to stop. ``seconds`` is checked between steps; ``hard_seconds`` kills a runaway step."""

    iterations: int = 10
    enodes: int = 50_000
    seconds: float = 8.0
    hard_seconds: float | None = None  # default: 2 * seconds + 10
    match_limit: int = 20_000  # back-off: a rule set matching more than this in one step is banned
    ban_iterations: int = 2

    def __post_init__(self):
        for name in ("iterations", "enodes", "match_limit", "ban_iterations"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 0:
                raise EqiforgeError(f"limit {name} must be a non-negative integer, got {getattr(self, name)!r}")
        if not self.seconds > 0 or (self.hard_seconds is not None and not self.hard_seconds > 0):
            raise EqiforgeError("time limits must be positive numbers of seconds")

    @property
    def kill_after(self) -> float:
        return self.hard_seconds if self.hard_seconds is not None else 2 * self.seconds + 10


def _run(name: str):
    return eb.RunSchedule(eb.Run(encode.SPAN, eb.RunConfig(name, None)))


def _saturate(name: str):
    return eb.RunSchedule(eb.Saturate(encode.SPAN, eb.Run(encode.SPAN, eb.RunConfig(name, None))))


def _size(egraph) -> tuple[int, int]:
    """(e-nodes, e-classes with a known shape)."""
    (out,) = egraph.run_program(eb.PrintSize(encode.SPAN, None))
    sizes = dict(out.sizes)
    return sum(n for f, n in sizes.items() if f in ops.OPS), sizes.get("shape", 0)


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
    if last is None or last[1] <= 0:
        return 0.0
    seconds, before = last
    return seconds * (enodes / before) ** 2


def run(graph: Graph, names: list[str] | None, limits: Limits, *, max_steps: int | None = None,
        on_step: Callable[[StepStats], None] | None = None, assume_finite: bool = True):
    """Saturate in this process; return (egglog EGraph, SaturationReport). Used directly by tests.
    ``assume_finite=False`` leaves out the rules that hold for finite values only (see rulesets)."""
    sets = rulesets.select(names, assume_finite=assume_finite)
    start = time.perf_counter()
    egraph = eb.EGraph()
    _execute(egraph, rulesets.schema_commands(), "loading rules/schema.egg")
    for rs in sets:
        _execute(egraph, rs.commands, f"loading rule set {rs.name}")
    _execute(egraph, encode.encode(graph) + [_saturate(rulesets.ANALYSIS)], "adding the program")
    report = SaturationReport(limits=asdict(limits))
    report.initial_enodes, report.initial_eclasses = _size(egraph)
    banned_until: dict[str, int] = {}
    times_banned: dict[str, int] = {}
    last_step: dict[str, tuple[float, int]] = {}  # rule set -> (seconds, e-nodes before) of its last step
    enodes = report.initial_enodes
    steps = 0
    report.stop_reason = "saturated"
    for iteration in range(1, limits.iterations + 1):
        changed = False
        for rs in sets:
            if max_steps is not None and steps >= max_steps:
                report.stop_reason = f"replayed {steps} completed steps"
                break
            if banned_until.get(rs.name, 0) >= iteration:
                changed = True  # a banned rule set may still have work to do
                continue
            predicted = predicted_seconds(last_step.get(rs.name), enodes)
            if time.perf_counter() - start + predicted > limits.seconds:
                report.stop_reason = (f"time limit ({limits.seconds:g} s): the next {rs.name} step was predicted to "
                                      f"take {predicted:.1f} s")
                break
            last_step[rs.name] = (0.0, enodes)
            t0 = time.perf_counter()
            (out,) = _execute(egraph, [_run(rs.name)], f"running rule set {rs.name}")
            _execute(egraph, [_saturate(rulesets.ANALYSIS)], f"deriving shapes after {rs.name}")
            enodes, eclasses = _size(egraph)
            matches = {r: n for r, n in out.report.num_matches_per_rule.items() if n}
            stats = StepStats(iteration, rs.name, enodes, eclasses, matches, time.perf_counter() - t0)
            last_step[rs.name] = (stats.seconds, last_step[rs.name][1])
            changed |= out.report.updated
            if sum(matches.values()) > limits.match_limit << times_banned.get(rs.name, 0):
                times_banned[rs.name] = times_banned.get(rs.name, 0) + 1
                banned_until[rs.name] = iteration + (limits.ban_iterations << (times_banned[rs.name] - 1))
                stats = replace(stats, banned=True)
            report.steps.append(stats)
            steps += 1
            if on_step:
                on_step(stats)
            if enodes >= limits.enodes:
                report.stop_reason = f"e-node limit ({limits.enodes})"
                break
            if time.perf_counter() - start >= limits.seconds:
                report.stop_reason = f"time limit ({limits.seconds:g} s)"
                break
        else:
            if not changed:
                break
            if iteration == limits.iterations:
                report.stop_reason = f"iteration limit ({limits.iterations})"
            continue
        break
    report.seconds = time.perf_counter() - start
    return egraph, report


def _child(graph, names, limits, max_steps, assume_finite, conn):
    try:
        egraph, report = run(graph, names, limits, max_steps=max_steps, assume_finite=assume_finite,
                             on_step=lambda s: conn.send(("step", s)))
        snap = snapshot.from_egraph(egraph, len(graph.outputs), graph.live_nodes())
        conn.send(("done", snap, report))
    except EqiforgeError as err:
        conn.send(("error", str(err)))
    except BaseException as err:  # noqa: BLE001 - anything else must reach the parent as a message
        conn.send(("error", f"saturation failed: {type(err).__name__}: {err}"))
    finally:
        conn.close()


def saturate(graph: Graph, names: list[str] | None, limits: Limits, *,
             on_step: Callable[[StepStats], None] | None = None, max_steps: int | None = None,
             assume_finite: bool = True):
    """Saturate in a forked child under the hard limit; return (Snapshot, SaturationReport)."""
    rulesets.select(names)  # fail early, in this process, on unknown names or bad rule files
    ctx = multiprocessing.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(graph, names, limits, max_steps, assume_finite, send), daemon=True)
    start = time.perf_counter()
    proc.start()
    send.close()
    done_steps, why = 0, None
    try:
        while True:
            left = limits.kill_after - (time.perf_counter() - start)
            if left <= 0 or not recv.poll(min(left, 0.5)):
                if left <= 0:
                    why = f"hard time limit ({limits.kill_after:g} s): a step ran away and was stopped"
                    break
                if not proc.is_alive() and not recv.poll():
                    why = f"egglog process died (exit code {proc.exitcode}), likely out of memory"
                    break
                continue
            try:
                msg = recv.recv()
            except EOFError:
                why = f"egglog process died (exit code {proc.exitcode})"
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
    # the completed steps ran within the limit before, so replay them here (a second child could die the
    # same way, e.g. a fork that inherited a lock held by another thread)
    egraph, report = run(graph, names, replace(limits, seconds=1e9), max_steps=done_steps,
                         assume_finite=assume_finite)
    snap = snapshot.from_egraph(egraph, len(graph.outputs), graph.live_nodes())
    report.stop_reason = f"{why}; continued with the {done_steps} steps completed before"
    report.seconds = time.perf_counter() - start
    return snap, report
