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

The set work grows with the e-graph times its terms' sizes, quadratic in a program's depth (a 10k-class
chain: 150M set elements read, 6 s), so it is bounded: past a budget of set work (the sizes of the term sets
read, counted rather than timed so that the result stays deterministic), the remaining nodes are priced by
tree cost, own cost plus their children's totals, which needs no sets; the choice stays valid and acyclic, it
may just miss some sharing. The rest of the work is linear in the e-nodes (about 10-30 us each: 2.2 s for
81k, 10 s for 293k on 2 busy cores), which the saturation's e-node limit bounds.
"""
from __future__ import annotations

import heapq
import math

from ..egraph.snapshot import Snapshot
from .dag import Costs, child_classes, class_parents

#: term-set elements read before the rest is priced by tree cost: about 1.5 s (24-30M per second on 2 busy
#: cores); a fixed count, not the extraction's time limit, so that greedy answers alike under any limit
SET_WORK = 40_000_000
_NOTHING: frozenset[int] = frozenset()


def greedy_choice(snap: Snapshot, node_cost: Costs, set_work: int | None = None) -> tuple[dict[int, int], int]:
    """The greedy best e-node of every solvable e-class (an acyclic choice), and how many e-nodes were priced
    by tree cost because the set work (default SET_WORK) ran out (0: none)."""
    dijkstra = _Dijkstra(snap, [float(x) for x in node_cost], SET_WORK if set_work is None else set_work)
    return dijkstra.run(), dijkstra.tree_priced


class _Dijkstra:
    """Fix classes cheapest first; ``run`` returns e-class -> chosen e-node."""

    def __init__(self, snap: Snapshot, costs: list[float], budget: int):
        self.node_class = snap.node_class
        self.costs = costs
        self.kids = child_classes(snap)
        self.parents = class_parents(snap, self.kids)
        self.waiting = [len(k) for k in self.kids]  # child classes not fixed yet
        self.best: dict[int, int] = {}
        self.total: dict[int, float] = {}
        self.term: dict[int, frozenset[int]] = {}  # e-nodes of each fixed class's term
        self.heap: list[tuple[float, int, frozenset[int], frozenset[int]]] = []  # cost, node, its term in 2 parts
        self.work, self.budget, self.tree_priced = 0, budget, 0

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
            heapq.heappush(self.heap, (own, n, _NOTHING, _NOTHING))
            return
        if self.work > self.budget:  # out of work: tree cost, a shared sub-term paid once per use
            self.tree_priced += 1
            heapq.heappush(self.heap, (own + sum(self.total[d] for d in ks), n, _NOTHING, _NOTHING))
            return
        self.work += sum(len(term[d]) for d in ks)
        big = max(ks, key=lambda d: len(term[d]))  # copy the largest set once, add only what the others bring
        extra = frozenset().union(*(term[d] for d in ks if d != big)) - term[big]
        cost = own + self.total[big] + sum(self.costs[m] for m in extra)
        heapq.heappush(self.heap, (cost, n, term[big], extra))
