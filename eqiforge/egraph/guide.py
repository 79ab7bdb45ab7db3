"""Cost-guided saturation: the kernel layer works on the algebraic forms worth implementing.

A guided schedule saturates the algebra first, prices the e-graph (the cost model of the plan, on the
algebra's e-nodes and the composite kernels it formed; elementwise ops at nothing, as fusion absorbs them),
and then runs every rule set with the kernel layer's entry rules (an algebra op becoming a one-op kernel)
limited to *promising* e-nodes. An e-node is promising when the forms it stands for cost at most
``factor - 1`` times its e-class's best e-node's own price more than that best form (tree costs: the
e-node's price plus its children's best), and its e-class and its children's are reached from the
program's outputs through promising e-nodes. Kernels are formed for promising ops in e-classes computed at
run time (a folded constant, priced at nothing, gets none) reading reached e-classes.

The difference is local on purpose: a form's whole-subtree cost holds the program upstream of it, so a
factor on it would let any detour through a big program pass. Without a guide, fusion builds kernels over
every algebraic variant: on a BERT layer the row mean inside LayerNorm has dozens of forms (sums of partial
row sums), each fused with each neighbour, hundreds of kernels for a value the LayerNorm kernel computes
anyway. The cost model's prices of algebra ops are unfused prices; ``factor`` is the margin for forms
that fusion makes cheaper than those prices say beyond dropping their elementwise work.
"""
from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import egglog.bindings as eb

from .. import ops
from .encode import SPAN, op_call, var
from .snapshot import Snapshot


@dataclass(frozen=True)
class Guide:
    """Prices for a guided saturation: ``price(snapshot)`` gives seconds per e-node; ``key`` names what the
    prices depend on (the cost model and device), for the saturation cache."""

    price: Callable[[Snapshot], Sequence[float]]
    key: str


def tree_costs(snap: Snapshot, prices: Sequence[float]) -> list[float]:
    """Each e-class's cheapest tree cost (its best e-node's price plus its children's, recursively; inf where
    no acyclic term exists). Classes are fixed cheapest first (prices are non-negative), each e-node priced
    once, when its last child class is fixed."""
    best = [math.inf] * snap.num_classes
    kids = [set(k) for k in snap.node_children]
    readers: dict[int, list[int]] = {}
    for n, ks in enumerate(kids):
        for k in ks:
            readers.setdefault(k, []).append(n)
    waiting = [len(ks) for ks in kids]
    heap = [(prices[n], n) for n, ks in enumerate(kids) if not ks]
    heapq.heapify(heap)
    while heap:
        total, n = heapq.heappop(heap)
        c = snap.node_class[n]
        if best[c] < math.inf:
            continue
        best[c] = total
        for m in readers.get(c, ()):
            waiting[m] -= 1
            if not waiting[m]:
                heapq.heappush(heap, (_tree(snap, prices, best, m), m))
    return best


#: op kinds the guide prices at nothing: fusion folds elementwise work into the kernels around it, so a form
#: with more of it is not dearer for that (LayerNorm then a linear layer as the product of x and the
#: normalisation in the GEMM's epilogue has five more elementwise ops than the LayerNorm kernel's form)
FUSED_KINDS = frozenset({"unary", "binary", "compare", "where", "cast"})


def promising_nodes(snap: Snapshot, prices: Sequence[float], factor: float) -> set[int]:
    """The promising e-nodes (module docstring), reached from the roots."""
    prices = [0.0 if ops.get(op).kind in FUSED_KINDS else p for p, op in zip(prices, snap.node_op)]
    best = tree_costs(snap, prices)
    tree = [_tree(snap, prices, best, n) for n in range(snap.num_nodes)]
    members = snap.class_nodes()
    slack = [(factor - 1.0) * min((prices[n] for n in nodes if tree[n] == best[c]), default=0.0)
             for c, nodes in enumerate(members)]
    kept: set[int] = set()
    seen, frontier = set(snap.roots), list(snap.roots)
    while frontier:
        c = frontier.pop()
        for n in members[c]:
            if math.isfinite(best[c]) and tree[n] <= best[c] + slack[c]:
                kept.add(n)
                fresh = set(snap.node_children[n]) - seen
                seen |= fresh
                frontier.extend(sorted(fresh))
    return kept


def _tree(snap: Snapshot, prices: Sequence[float], best: list[float], n: int) -> float:
    return prices[n] + sum(best[k] for k in snap.node_children[n])


def marking_commands(snap: Snapshot, prices: Sequence[float], kept: set[int]) -> list:
    """egglog commands stating ``(reached e)`` for every e-class holding a kept e-node, and ``(promising e)``
    for those of them computed at run time (a kept e-node with a price: a folded constant has none, and a
    kernel for it would never run). The kernel entry rules ask the first of an op's operands, the second of
    its e-class. An e-class is named by a term of algebra ops it holds already, let-bound bottom-up (a class
    once one of its e-nodes reads named classes only; one that only kernels or cycles reach stays unnamed,
    neither), so the commands add no e-node."""
    algebra = [n for n, op in enumerate(snap.node_op) if ops.get(op).kind != "kernel"]
    readers: dict[int, list[int]] = {}
    unnamed = {}
    for n in algebra:
        unnamed[n] = len(set(snap.node_children[n]))
        for k in set(snap.node_children[n]):
            readers.setdefault(k, []).append(n)
    named: dict[int, str] = {}
    commands = []
    ready = deque(n for n in algebra if not unnamed[n])
    while ready:
        n = ready.popleft()
        c = snap.node_class[n]
        if c in named:
            continue
        named[c] = f"$guide{c}_"
        term = op_call(snap.node_op[n], [var(named[k]) for k in snap.node_children[n]], snap.node_attrs[n])
        commands.append(eb.ActionCommand(eb.Let(SPAN, named[c], term)))
        for m in readers.get(c, ()):
            unnamed[m] -= 1
            if not unnamed[m]:
                ready.append(m)
    reached = {snap.node_class[n] for n in kept}
    promising = {snap.node_class[n] for n in kept if prices[n] > 0}
    for relation, classes in (("reached", reached), ("promising", promising)):
        commands += [eb.ActionCommand(eb.Expr_(SPAN, eb.Call(SPAN, relation, [var(named[c])])))
                     for c in sorted(classes & named.keys())]
    return commands
