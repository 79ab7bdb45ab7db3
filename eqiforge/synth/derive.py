"""Which candidates the rules already derive, and which of the rest follow from the others (minimization).

Ruler's test, on this project's e-graph: both sides of many candidates go into one IR graph (at fixed sizes,
scalars as Fills of distinct values), the rule sets saturate it under their default schedule, and a candidate
whose sides end in one e-class is derivable. Candidates go in chunks so that one chunk's growth does not
starve another's of the e-node limit; a chunk that stops at a limit is reported (its candidates may be
derivable after all, and are kept for the next steps, which only costs a rule more).

Minimization follows Ruler's greedy loop: take the smallest candidates not yet derivable, keep the verified
ones as rules, and test the rest again with the kept rules added (a rules folder with the project's files and
the kept ones as one more rule set), until none is left.
"""
from __future__ import annotations

from ..egraph import rulesets
from ..egraph import saturate as sat
from ..egraph.schedule import BackOff, Schedule, Step
from ..errors import EqiforgeError
from ..ir import Graph
from .terms import variables
from .values import to_graph

#: sizes the derivation graphs are built at (distinct, none 1: no rule's size guard holds by accident)
SIZES = (3, 4, 5, 6, 7, 8, 9, 10)
CHUNK = 400  # candidates per saturated graph
CHUNK_WITH_KEPT, KEPT_ENODES = 100, 15_000  # with kept rules: smaller graphs and e-node limit (the cap per rule)
EXTRA = "synthesized"  # the kept rules' rule sets while minimizing: synthesized0, synthesized1, ...
#: rules per rule set: egglog's memory grows with the square of a set's rules (one set of 100 synthesized rules
#: took 0.7 GB, of 200 1.8 GB, of 300 3.4 GB; 538 in sets of 60: 1.6 GB)
RULES_PER_SET = 60
#: the kept rules run capped from their first step, and are banned past a few matches: hundreds of rules of
#: which some commute or regroup would otherwise add millions of e-nodes in one step (a size-3 run ran out
#: of 14 GB so)
EXTRA_BACK_OFF = BackOff(match_limit=2_000, ban_iterations=2, capped_from=0.0)


def derive_sizes(symbols: list[str]) -> dict[str, int]:
    return {s: SIZES[i % len(SIZES)] + len(SIZES) * (i // len(SIZES)) for i, s in enumerate(symbols)}


def scalar_values(candidates) -> dict[str, float]:
    """A distinct value per scalar variable: two scalars must not be one Fill node."""
    names = sorted({v.name for c in candidates for t in (c.lhs, c.rhs) for v in variables(t) if v.scalar})
    return {n: 0.25 + 0.5 * i for i, n in enumerate(names)}


def derivable(candidates: list, symbols: list[str], extra_rules: list[str] = (), limits: sat.Limits | None = None,
              progress=None, without: tuple[str, ...] = ()) -> tuple[list[bool], list[str]]:
    """(whether each candidate's sides join under the algebra rule sets less the rules named in ``without``,
    plus the rules of ``extra_rules`` (egglog texts, one rule each); the stop reasons of chunks that hit a
    limit)."""
    sizes, scalars = derive_sizes(symbols), scalar_values(candidates)
    joined, limited = [], []
    files = {f"{EXTRA}{k // RULES_PER_SET}": "\n".join(extra_rules[k:k + RULES_PER_SET])
             for k in range(0, len(extra_rules), RULES_PER_SET)}
    with rulesets.rules_folder_with(files, without=without) as extra:
        limits = limits or (sat.Limits(enodes=KEPT_ENODES) if extra else sat.Limits())
        shipped = sat.default_schedule(None, limits, ("algebra",))
        schedule = Schedule(shipped.steps + tuple(Step(n, EXTRA_BACK_OFF) for n in extra), shipped.limits)
        size = CHUNK_WITH_KEPT if extra else CHUNK
        for start in range(0, len(candidates), size):
            chunk = candidates[start:start + size]
            part, stops = _joined(chunk, schedule, sizes, scalars)
            joined += part
            limited += stops
            if progress is not None:
                progress.update(len(chunk))
    return joined, limited


def _joined(chunk: list, schedule: Schedule, sizes: dict, scalars: dict) -> tuple[list[bool], list[str]]:
    """Whether each candidate's sides join in one saturated graph of them all, and the graph's stop reason if
    a limit stopped it. A graph whose saturation fails (a rule merged two shapes: an unsound rule) is split in
    halves, each run again, down to one candidate, which then counts as not derivable, with the error as its
    stop reason: a failure costs its candidates' derivability, not the synthesis."""
    g, memo, sides = Graph(), {}, []
    for c in chunk:
        sides.append((to_graph(g, c.lhs, sizes, scalars, memo), to_graph(g, c.rhs, sizes, scalars, memo)))
    g.outputs = sorted({n for pair in sides for n in pair})
    try:
        snap, report = sat.saturate(g, schedule, use_cache=False)
    except EqiforgeError as err:
        if len(chunk) == 1:
            return [False], [f"saturation failed on {chunk[0].text()}: {err}"]
        half = len(chunk) // 2
        (a, a_stops), (b, b_stops) = (_joined(part, schedule, sizes, scalars) for part in (chunk[:half], chunk[half:]))
        return a + b, a_stops + b_stops
    stops = [] if report.stop_reason.kind in (sat.Stop.SATURATED, sat.Stop.ITERATIONS) else [str(report.stop_reason)]
    return [snap.bindings[a] == snap.bindings[b] for a, b in sides], stops
