"""Greedy DAG-aware extraction, the fast default (extraction-gym's "faster-greedy-dag", in Dijkstra order).

Every e-class gets a best e-node and the set of e-nodes in the term that node stands for. A candidate node
costs its own cost plus the cost of the UNION of its children's sets, so a sub-term that two operands share
is paid once, as DAG cost demands.

Classes are fixed cheapest first, as in Knuth's generalisation of Dijkstra's algorithm: a node is priced
once, when the last of its child classes is fixed, and goes on a heap; the cheapest entry on the heap fixes
its class. Costs are non-negative, so a node never costs less than its children, and a node priced later
could not have beaten the class's fixed one: the result is (up to ties) the fixpoint of "each class takes
its cheapest node given its children's terms", and each e-node is priced once instead of once per
improvement of a child. Because a node is priced only after all its children are fixed, the choice is
acyclic by construction (a node reading its own class is never priced in time). Heap ties go to the lowest
node index, so the result is deterministic.
"""
from __future__ import annotations

import heapq
import math

from ..egraph.snapshot import Snapshot
from .dag import Costs, child_classes, class_parents


def greedy_choice(snap: Snapshot, node_cost: Costs) -> dict[int, int]:
    """The greedy best e-node of every solvable e-class (an acyclic choice)."""
    return _Dijkstra(snap, [float(x) for x in node_cost]).run()


class _Dijkstra:
    """Fix classes cheapest first; ``run`` returns e-class -> chosen e-node."""

    def __init__(self, snap: Snapshot, costs: list[float]):
        self.node_class = snap.node_class
        self.costs = costs
        self.kids = child_classes(snap)
        self.parents = class_parents(snap, self.kids)
        self.waiting = [len(k) for k in self.kids]  # child classes not fixed yet
        self.best: dict[int, int] = {}
        self.total: dict[int, float] = {}
        self.term: dict[int, frozenset[int]] = {}  # e-nodes of each fixed class's term
        self.heap: list[tuple[float, int, frozenset[int], frozenset[int]]] = []  # cost, node, its term in 2 parts

    def run(self) -> dict[int, int]:
        for n, waiting in enumerate(self.waiting):
            if not waiting:
                self._price(n)
        while self.heap:
            cost, n, base, extra = heapq.heappop(self.heap)
            c = self.node_class[n]
            if c not in self.best:
                self._fix(c, n, cost, base.union(extra, (n,)))
        return self.best

    def _fix(self, c: int, n: int, cost: float, term: frozenset[int]) -> None:
        self.best[c], self.total[c], self.term[c] = n, cost, term
        for p in self.parents[c]:
            self.waiting[p] -= 1
            if not self.waiting[p] and self.node_class[p] not in self.best:
                self._price(p)

    def _price(self, n: int) -> None:
        """Put ``n`` on the heap at its cost given its children's terms: own + union of their sets."""
        own, ks, term = self.costs[n], self.kids[n], self.term
        if not math.isfinite(own):
            return
        if not ks:
            heapq.heappush(self.heap, (own, n, frozenset(), frozenset()))
            return
        big = max(ks, key=lambda d: len(term[d]))  # copy the largest set once, add only what the others bring
        extra = frozenset().union(*(term[d] for d in ks if d != big)) - term[big]
        cost = own + self.total[big] + sum(self.costs[m] for m in extra)
        heapq.heappush(self.heap, (cost, n, term[big], extra))
