"""Exact DAG-cost extraction as a 0-1 integer program, solved by HiGHS through ``scipy.optimize.milp``.

Variables: x_n = 1 when e-node n is chosen, y_c = 1 when e-class c is needed. Roots are needed; a needed
class chooses exactly one node; a chosen node makes its child classes needed (one row per class and child
class, summing the class's nodes that read the child); minimise the sum of the chosen nodes' costs. Each node has one
variable however many parents read it, so this is DAG cost.

Choosing one node per class can still close a cycle (x = f(g(x))). Cycles only live inside strongly
connected components of the class graph, so only classes there get an order variable t_c and the big-M
constraint "chosen n in c reads d in the same component => t_c >= t_d + 1"; an acyclic e-graph gets none.
Before the model is built, nodes that cannot help are pruned: infinite cost, reading their own class,
children without any solution, a node of a class holding one as cheap that reads a subset of its children,
inputs and weights aside (dominated), and anything the roots cannot reach.
"""
from __future__ import annotations

import time
from collections.abc import Sequence

import networkx as nx
import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_array

from ..egraph.snapshot import Snapshot
from .dag import Costs, child_classes, usable_nodes


#: the solver's time when the deadline has passed already: it then stops at once, with or without a solution
_NO_TIME = 1e-6


def ilp_choice(snap: Snapshot, node_cost: Costs, roots: Sequence[int], solvable: list[bool],
               time_limit: float, deadline: float | None = None,
               excluded: Sequence[dict[int, int]] = ()) -> tuple[dict[int, int] | None, str]:
    """Solve the extraction ILP: (choice, how good it is: "optimal" or why not) or (None, why there is no
    solution). The solver stops at ``deadline`` (a ``time.perf_counter()`` value; default: ``time_limit``
    from now), so building the model counts against the time limit too. ``excluded`` choices are cut off
    (no-good cuts): the answer is then the best choice that is none of them, the next-best plan."""
    deadline = time.perf_counter() + time_limit if deadline is None else deadline
    model = _Model(snap, node_cost, roots, solvable, excluded)
    if not model.nodes:
        return {}, "optimal"  # no roots: nothing to choose
    left = max(deadline - time.perf_counter(), _NO_TIME)
    try:
        result = milp(model.objective, integrality=model.integrality, bounds=model.bounds,
                      constraints=model.constraints, options={"time_limit": left, "disp": False})
    except Exception as err:  # noqa: BLE001 - any solver failure means: use the greedy result
        return None, f"scipy.optimize.milp failed: {err}"
    said = result.message.partition(" (")[0].rstrip(".")  # HiGHS's words, without its status dump
    if result.x is None:
        return None, f"no solution within {time_limit:g} s ({said})"
    choice = {snap.node_class[n]: n for n, x in zip(model.nodes, result.x) if x > 0.5}
    return choice, "optimal" if result.status == 0 else _not_proven(said, getattr(result, "mip_gap", None))


def _cost_unit(costs: np.ndarray) -> float:
    """The unit the objective is written in: the cheapest priced node's cost. Costs are seconds, and a cheap
    kernel's microsecond lies below HiGHS's absolute tolerances (a MIP gap of 1e-6): in seconds it declared
    optimal a plan 2% dearer than the best. The largest coefficient stays within 1e9 of one."""
    positive = costs[costs > 0]
    return max(float(positive.min()), float(positive.max()) * 1e-9) if positive.size else 1.0


def _not_proven(said: str, gap: float | None) -> str:
    """How good a solution HiGHS stopped with is, in the words the report prints: why it stopped, and how far
    its cost may be above the optimum (HiGHS's relative gap to its lower bound) where it knows."""
    limit = "time limit" if "time limit" in said.lower() else said
    within = f", within {gap:.1%} of the optimum" if gap is not None and np.isfinite(gap) else ""
    return f"{limit}: not proven optimal{within}"


def candidate_nodes(snap: Snapshot, node_cost: Costs, roots: Sequence[int], solvable: list[bool],
                    dominated: bool = False) -> list[int]:
    """The e-nodes worth a variable, in index order (see the module docstring for what is pruned). An e-node
    is dominated by another of its class that costs no more and reads a subset of its child classes: any
    plan choosing it is at least as cheap with the other (what the other needs is needed already, and it
    closes no cycle the first did not). Fused kernels make many such nodes: on a transformer layer's joint
    e-graph 4 in 10. With ``dominated`` they are kept: the next-best plans include such alternatives, e.g.
    another kernel for the same operands."""
    kids = child_classes(snap)
    by_class: dict[int, list[int]] = {}
    for n, usable in enumerate(usable_nodes(snap, node_cost, solvable)):
        if usable:
            by_class.setdefault(snap.node_class[n], []).append(n)
    if not dominated:
        free = _free_classes(snap, node_cost, by_class)
        by_class = {c: _undominated(members, node_cost, kids, free) for c, members in by_class.items()}
    reached, frontier = set(roots), list(roots)
    while frontier:
        for n in by_class[frontier.pop()]:
            fresh = set(kids[n]) - reached
            reached |= fresh
            frontier.extend(sorted(fresh))
    return [n for c in sorted(reached) for n in by_class[c]]


def _free_classes(snap: Snapshot, node_cost: Costs, by_class: dict[int, list[int]]) -> frozenset[int]:
    """E-classes computed at no cost from nothing (an input, a weight): reading one adds nothing to a plan."""
    return frozenset(c for c, members in by_class.items()
                     if any(not snap.node_children[n] and node_cost[n] == 0 for n in members))


def _undominated(members: list[int], node_cost: Costs, kids: list[tuple[int, ...]], free: frozenset[int]) -> list[int]:
    """The nodes of one class that no cheaper-or-equal node dominates (of equals, the first), in index order:
    one dominates when it reads a subset of their children, free classes aside (a GEMM reading a weight
    transposed dominates the same GEMM over a transposed copy of it)."""
    kept: list[int] = []
    for n in sorted(members, key=lambda n: (node_cost[n], len(set(kids[n]) - free), n)):
        reads = set(kids[n]) | free
        if not any(reads.issuperset(kids[m]) for m in kept):
            kept.append(n)
    return sorted(kept)


class _Model:
    """The ILP's arrays. Variables are laid out as [x per candidate node | y per class | t per cyclic class]."""

    def __init__(self, snap: Snapshot, node_cost: Costs, roots: Sequence[int], solvable: list[bool],
                 excluded: Sequence[dict[int, int]] = ()):
        self.nodes = candidate_nodes(snap, node_cost, roots, solvable, dominated=bool(excluded))
        self.kids = child_classes(snap)
        self.classes = sorted({snap.node_class[n] for n in self.nodes})
        self.y = {c: len(self.nodes) + i for i, c in enumerate(self.classes)}
        self.components = self._cyclic_components(snap)
        self.t = {c: len(self.nodes) + len(self.classes) + i for i, c in enumerate(sorted(self.components))}
        self.rows: list[tuple[list[int], list[float], float, float]] = []  # (columns, values, lower, upper)
        self._one_node_per_needed_class(snap)
        self._chosen_node_needs_children(snap)
        self._acyclic_within_components(snap)
        for choice in excluded:
            self._not(choice)
        self._finish(node_cost, roots)

    def _cyclic_components(self, snap: Snapshot) -> dict[int, frozenset[int]]:
        """Class -> its strongly connected component, for classes on a cycle of candidate nodes."""
        graph = nx.DiGraph((snap.node_class[n], d) for n in self.nodes for d in self.kids[n])
        cyclic = [frozenset(comp) for comp in nx.strongly_connected_components(graph) if len(comp) > 1]
        return {c: comp for comp in cyclic for c in comp}

    def _one_node_per_needed_class(self, snap: Snapshot) -> None:
        members: dict[int, list[int]] = {c: [] for c in self.classes}
        for i, n in enumerate(self.nodes):
            members[snap.node_class[n]].append(i)
        for c, cols in members.items():  # sum x_n - y_c = 0
            self.rows.append((cols + [self.y[c]], [1.0] * len(cols) + [-1.0], 0.0, 0.0))

    def _chosen_node_needs_children(self, snap: Snapshot) -> None:
        """sum of x_n over the nodes of class c reading class d, minus y_d, <= 0: one row per (c, d), not
        per node. Valid because a class chooses one node; tighter in the LP relaxation, where half of each of
        two alternatives would otherwise need only half of their child (on a transformer layer's joint
        e-graph: solved to optimality in under 2 s where the per-node rows left a 17% gap after 10 s)."""
        readers: dict[tuple[int, int], list[int]] = {}
        for i, n in enumerate(self.nodes):
            for d in self.kids[n]:
                readers.setdefault((snap.node_class[n], d), []).append(i)
        for (_, d), cols in sorted(readers.items()):
            self.rows.append((cols + [self.y[d]], [1.0] * len(cols) + [-1.0], -np.inf, 0.0))

    def _acyclic_within_components(self, snap: Snapshot) -> None:
        """t_c - t_d - M x_n >= 1 - M, M = component size: binding only when n is chosen."""
        for i, n in enumerate(self.nodes):
            component = self.components.get(snap.node_class[n])
            for d in self.kids[n]:
                if component is not None and d in component:
                    big_m = float(len(component))
                    self.rows.append(([self.t[snap.node_class[n]], self.t[d], i], [1.0, -1.0, -big_m],
                                      1.0 - big_m, np.inf))

    def _not(self, choice: dict[int, int]) -> None:
        """No-good cut: not every e-node of ``choice`` again (sum of their x <= count - 1). A choice holding a
        node without a variable cannot be chosen anyway. Costs are positive, so a solution never holds a
        node it does not need: a different node set is a different plan."""
        column = {n: i for i, n in enumerate(self.nodes)}
        chosen = set(choice.values())
        if chosen <= column.keys():
            cols = sorted(column[n] for n in chosen)
            self.rows.append((cols, [1.0] * len(cols), -np.inf, len(cols) - 1.0))

    def _finish(self, node_cost: Costs, roots: Sequence[int]) -> None:
        """Turn the rows and per-variable data into milp's arguments."""
        num_x, num_y = len(self.nodes), len(self.classes)
        num = num_x + num_y + len(self.t)
        self.objective = np.zeros(num)
        costs = np.array([float(node_cost[n]) for n in self.nodes])
        self.objective[:num_x] = costs / _cost_unit(costs)
        self.integrality = np.zeros(num)
        self.integrality[:num_x] = 1  # y follows from x; t only orders
        lower, upper = np.zeros(num), np.ones(num)
        lower[[self.y[r] for r in roots]] = 1.0
        for c, col in self.t.items():
            upper[col] = len(self.components[c]) - 1
        self.bounds = Bounds(lower, upper)
        rows = [r for r, (cols, _, _, _) in enumerate(self.rows) for _ in cols]
        cols = [col for cols, _, _, _ in self.rows for col in cols]
        vals = [v for _, values, _, _ in self.rows for v in values]
        matrix = coo_array((vals, (rows, cols)), shape=(len(self.rows), num)).tocsr()
        self.constraints = LinearConstraint(matrix, [r[2] for r in self.rows], [r[3] for r in self.rows])
