"""What a torch.compile graph runs: its plan, or the graph as the fallback compiles it (Inductor, or op by op),
predicted (verdicts.py) or timed (choice.py) on the example inputs."""
from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import unset_fake_temporarily

from ..pipeline.options import Options
from . import choice
from .verdicts import measurable

GRAPH, PLAN = "graph", "plan"  # the candidates' names


def predicted(optimized, opts: Options, fallback: str) -> bool:
    """Whether the prediction decides what the graph runs (``verdicts.no_better``), with no race: under
    measure="never", for a plan that may not be timed, or where it is decisive (``choice.untimed``: then the
    report says so)."""
    if opts.measuring.mode == "never" or not measurable(optimized, opts):
        return True
    report = optimized.report
    timed = choice.untimed([(GRAPH, graph_price(report, fallback)), (PLAN, report.predicted_after)],
                           opts.measuring.mode, opts.measuring.seconds)
    if timed is not None:
        report.measured = timed.describe()
    return timed is not None


def race(graph_call, plan_call, optimized, opts: Options, fallback: str, code: str, key: str, fixed: dict,
         live: list[int], examples: list, prepare=None) -> choice.Decision:
    """The graph (``graph_call``, its ``code``; built by ``prepare`` once it is timed) against its plan, each
    called on lists of the graph's inputs: copies of ``examples`` at the positions ``live``, ``fixed`` (position
    -> weight or size) shared; ``key`` names the decision in the cache. The simpler, the graph, runs unless
    the plan is faster beyond doubt (decide/choice.py)."""
    report = optimized.report
    with unset_fake_temporarily(), torch.no_grad():
        sets = timing_sets(len(live) + len(fixed), fixed, live, examples)
        candidates = [choice.Candidate(GRAPH, choice.rotating(lambda *x: graph_call(list(x)), sets),
                                       graph_price(report, fallback), code, prepare=prepare),
                      choice.Candidate(PLAN, choice.rotating(lambda *x: plan_call(list(x)), sets),
                                       report.predicted_after, optimized.source)]
        decision = choice.choose(candidates, opts.measuring.mode, opts.measuring.seconds, opts.measuring.min_gain,
                                 opts.runtime.cache, key=key, device=examples[0].device.type if examples else "cpu")
    report.record(decision)
    return decision


def graph_price(report, fallback: str) -> float | None:
    """The price of the graph as the fallback runs it, as a candidate: op by op, the program as written;
    compiled by Inductor, none, so it is timed against the plan however far apart the prices are (the cost
    model cannot see Inductor's fusion; docs/decisions.md)."""
    return None if fallback == "inductor" else report.predicted_written or report.predicted_before


def timing_sets(count: int, fixed: dict, live: list[int], examples: list) -> list[list]:
    """Input lists of ``count`` for timed calls to take in turn: copies of ``examples`` (the inputs at
    ``live``, activations), the values of ``fixed`` (position -> weight or size) shared."""
    return [[fixed[i] if i in fixed else fresh[live.index(i)] for i in range(count)]
            for fresh in choice.input_sets(*examples)]
