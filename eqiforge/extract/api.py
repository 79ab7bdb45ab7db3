"""``extract``: choose one e-node per needed e-class of a Snapshot, minimising DAG cost.

The greedy extractor always runs: it is the answer for ``method="greedy"`` and the safety net for
``method="ilp"``, whose result is used only when the solver returns one in time that is no worse. Both are
bounded: greedy's set work by a fixed count (see greedy), the ILP by the time limit, which counts greedy and
building the model too. The method string says when a limit cut an answer short. The ILP's answers are
kept on disk (cache.py): the same snapshot and prices are not solved twice, and get the same answer.
"""
from __future__ import annotations

import time
from collections.abc import Sequence

from ..egraph.snapshot import Snapshot
from ..errors import EqiforgeError
from . import cache
from .dag import Costs, Selection, dag_cost, solvable_classes, select
from .greedy import greedy_choice
from .ilp import ilp_choice

METHODS = ("auto", "greedy", "ilp")
#: "auto" solves the ILP up to this many e-nodes (it finds sharing that greedy misses, e.g. merged
#: projections) and runs greedy beyond
AUTO_ILP_MAX_NODES = 20_000


def extract(snap: Snapshot, node_cost: Costs, roots: Sequence[int] | None = None, method: str = "auto",
            time_limit: float = 10.0, use_cache: bool = True) -> Selection:
    """Pick the e-nodes that compute ``roots`` (default ``snap.roots``) at the least DAG cost.

    ``node_cost`` gives seconds per e-node (math.inf = never choose it). ``method`` is "greedy" (fast),
    "ilp" (exact if the solver proves it within ``time_limit`` seconds of extraction, else the better of its
    best and the greedy result) or "auto" (ilp for e-graphs up to AUTO_ILP_MAX_NODES e-nodes, greedy beyond).
    ``use_cache``: an ILP answer stored on disk for the same snapshot and prices is used, a new one stored.
    """
    started = time.perf_counter()
    roots = list(snap.roots if roots is None else roots)
    _check_arguments(snap, node_cost, roots, method, time_limit)
    solvable = solvable_classes(snap, node_cost)
    unsolvable = [r for r in roots if not solvable[r]]
    if unsolvable:
        raise EqiforgeError(f"root e-classes {unsolvable} have no acyclic term of finite cost to extract")
    if method == "auto":
        method = "ilp" if snap.num_nodes <= AUTO_ILP_MAX_NODES else "greedy"
    entry = cache.key(snap, node_cost, roots, time_limit) if method == "ilp" and use_cache else None
    stored = cache.load(entry) if entry else None
    if stored is not None:
        try:
            return select(snap, node_cost, stored[0], roots, stored[1], started)
        except ValueError:
            pass  # not a choice for this snapshot: solved again, and the entry rewritten
    fast, tree_priced = greedy_choice(snap, node_cost)
    cut = f" (work limit: {tree_priced} of {snap.num_nodes} e-nodes priced by tree cost)" if tree_priced else ""
    if method == "greedy":
        return select(snap, node_cost, fast, roots, f"greedy{cut}", started)
    exact, quality = ilp_choice(snap, node_cost, roots, solvable, time_limit, deadline=started + time_limit)
    fallback = _why_not_ilp(snap, node_cost, roots, exact, quality, fast)
    if fallback:
        chosen = select(snap, node_cost, fast, roots, f"ilp->greedy fallback{cut}: {fallback}", started)
    else:
        chosen = select(snap, node_cost, exact, roots, "ilp" if quality == "optimal" else f"ilp ({quality})", started)
    if entry:
        cache.store(entry, chosen.choice, chosen.method)
    return chosen


def next_best(snap: Snapshot, node_cost: Costs, found: Sequence[Selection], roots: Sequence[int] | None = None,
              time_limit: float = 1.0) -> Selection | None:
    """The cheapest choice that is none of ``found``'s (the ILP with a no-good cut per plan found), or None:
    no other choice exists, the e-graph is past AUTO_ILP_MAX_NODES, or the solver found none in
    ``time_limit`` (a solution it did not prove optimal is returned, its method says so). Called k times, it gives the k
    best distinct plans, the candidates a measured choice times beyond the best."""
    started = time.perf_counter()
    roots = list(snap.roots if roots is None else roots)
    if snap.num_nodes > AUTO_ILP_MAX_NODES:
        return None
    solvable = solvable_classes(snap, node_cost)
    choice, quality = ilp_choice(snap, node_cost, roots, solvable, time_limit,
                                 excluded=[selection.choice for selection in found])
    if choice is None:
        return None
    return select(snap, node_cost, choice, roots, "ilp (next best" + ("" if quality == "optimal" else
                                                                      f", {quality}") + ")", started)


def _why_not_ilp(snap: Snapshot, node_cost: Costs, roots: list[int], exact: dict[int, int] | None, quality: str,
                 fast: dict[int, int]) -> str:
    """Why the ILP's answer cannot be used ("" when it can): none came back, or a timed-out one is worse."""
    if exact is None:
        return quality
    exact_cost, fast_cost = dag_cost(snap, node_cost, exact, roots), dag_cost(snap, node_cost, fast, roots)
    if exact_cost > fast_cost:
        return f"ILP result ({quality}) costs {exact_cost:.6g} s > greedy {fast_cost:.6g} s"
    return ""


def _check_arguments(snap: Snapshot, node_cost: Costs, roots: list[int], method: str, time_limit: float) -> None:
    if method not in METHODS:
        raise EqiforgeError(f"unknown extraction method {method!r}; choose one of: {', '.join(METHODS)}")
    if len(node_cost) != snap.num_nodes:
        raise EqiforgeError(f"node_cost has {len(node_cost)} entries but the snapshot has {snap.num_nodes} e-nodes")
    bad = [r for r in roots if not 0 <= r < snap.num_classes]
    if bad:
        raise EqiforgeError(f"root e-classes {bad} do not exist (the snapshot has {snap.num_classes} e-classes)")
    if any(not cost >= 0 for cost in node_cost):  # also catches NaN
        raise EqiforgeError("node_cost must be non-negative seconds (math.inf forbids a node); found a negative or NaN")
    if not time_limit > 0:
        raise EqiforgeError(f"time_limit must be a positive number of seconds, got {time_limit!r}")
