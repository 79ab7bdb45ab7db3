"""What every extractor shares: the Selection it returns, DAG cost, and the check that a choice is valid.

A choice maps e-classes to one of their e-nodes. Following the chosen nodes down from the roots gives a
term DAG; its cost is DAG cost, the sum over the *distinct* chosen e-nodes reachable from the roots, because
the lowered plan computes a shared sub-term once and reads its buffer from every user. A choice is valid
when every class it reaches has a chosen node of that class and the chosen nodes never lead back to a
class on the path (a cyclic term cannot be computed).
"""
from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

from ..egraph.snapshot import Snapshot

Costs = Sequence[float]  # seconds per e-node, indexed by e-node id; math.inf = never choose

_ON_PATH, _DONE = 1, 2


@dataclass(frozen=True)
class Selection:
    """An extraction result: the chosen e-node of every e-class the roots need, and what it costs."""

    choice: dict[int, int]  # e-class -> chosen e-node, only for classes reachable from the roots
    cost: float  # DAG cost of the choice, seconds
    method: str  # "greedy", "ilp" or "ilp->greedy fallback: <reason>", plus the limit that cut it short if one
    # did: "ilp (time limit: not proven optimal)", "greedy (work limit: <n> of <m> e-nodes priced by tree cost)"
    seconds: float  # wall time the extraction took


@dataclass
class Extraction:
    """Everything extraction saw and chose: the e-graph, each e-node's price, the choice (kept on the
    optimized module for drawings and analysis)."""

    snapshot: Snapshot
    node_cost: list[float]
    selection: Selection


def child_classes(snap: Snapshot) -> list[tuple[int, ...]]:
    """Each e-node's distinct child classes, sorted: a node reading one class twice needs it once."""
    return [tuple(sorted(set(children))) for children in snap.node_children]


def class_parents(snap: Snapshot, kids: list[tuple[int, ...]]) -> list[list[int]]:
    """For each e-class, the e-nodes that read it (each once, in index order): who to revisit when it changes."""
    parents: list[list[int]] = [[] for _ in range(snap.num_classes)]
    for n, classes in enumerate(kids):
        for c in classes:
            parents[c].append(n)
    return parents


def solvable_classes(snap: Snapshot, node_cost: Costs) -> list[bool]:
    """Which e-classes have an acyclic term of finite cost.

    Grown from the leaves (a node counts once all its child classes are solvable), so a class that is only
    reachable around a cycle is never solvable.
    """
    kids = child_classes(snap)
    parents = class_parents(snap, kids)
    waiting = [len(k) for k in kids]
    solvable = [False] * snap.num_classes
    ready = [n for n in range(snap.num_nodes) if not waiting[n]]
    while ready:
        n = ready.pop()
        c = snap.node_class[n]
        if solvable[c] or not math.isfinite(node_cost[n]):
            continue
        solvable[c] = True
        for p in parents[c]:
            waiting[p] -= 1
            if not waiting[p]:
                ready.append(p)
    return solvable


def usable_nodes(snap: Snapshot, node_cost: Costs, solvable: list[bool]) -> list[bool]:
    """E-nodes that may appear in a valid choice: finite cost, not reading their own class, solvable children."""
    return [
        math.isfinite(node_cost[n]) and c not in children and all(solvable[d] for d in children)
        for n, (c, children) in enumerate(zip(snap.node_class, snap.node_children))
    ]


def check_choice(snap: Snapshot, choice: dict[int, int], roots: Sequence[int] | None = None) -> list[int]:
    """The e-classes reachable from ``roots`` (default ``snap.roots``) through ``choice``, children first.

    Raises ValueError when a reached class has no chosen node, a chosen node belongs to another class, or
    the chosen nodes form a cycle.
    """
    state: dict[int, int] = {}
    order: list[int] = []
    for root in snap.roots if roots is None else roots:
        if root in state:
            continue
        state[root] = _ON_PATH
        stack = [(root, _chosen_children(snap, choice, root))]
        while stack:
            c, children = stack[-1]
            d = next(children, None)
            if d is None:
                stack.pop()
                state[c] = _DONE
                order.append(c)
            elif d not in state:
                state[d] = _ON_PATH
                stack.append((d, _chosen_children(snap, choice, d)))
            elif state[d] == _ON_PATH:
                raise ValueError(f"the chosen e-nodes form a cycle through e-class {d}")
    return order


def _chosen_children(snap: Snapshot, choice: dict[int, int], c: int):
    if c not in choice:
        raise ValueError(f"e-class {c} is needed but has no chosen e-node")
    n = choice[c]
    if snap.node_class[n] != c:
        raise ValueError(f"e-node {n} was chosen for e-class {c} but belongs to e-class {snap.node_class[n]}")
    return iter(snap.node_children[n])


def dag_cost(snap: Snapshot, node_cost: Costs, choice: dict[int, int], roots: Sequence[int] | None = None) -> float:
    """DAG cost of ``choice``: each distinct chosen e-node reachable from the roots paid once (validates it)."""
    return math.fsum(node_cost[choice[c]] for c in check_choice(snap, choice, roots))


def select(snap: Snapshot, node_cost: Costs, choice: dict[int, int], roots: Sequence[int], method: str,
           started: float) -> Selection:
    """Package ``choice`` as a Selection: keep only what the roots need, cost it, stop the clock."""
    needed = {c: choice[c] for c in sorted(check_choice(snap, choice, roots))}
    return Selection(needed, dag_cost(snap, node_cost, needed, roots), method, time.perf_counter() - started)
