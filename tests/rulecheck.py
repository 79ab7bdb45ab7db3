"""Numerical soundness check of a saturated e-graph, used by the rule tests.

Every e-class gets a value (from the first e-node whose children have values), then EVERY e-node of the
class is evaluated with PyTorch from its children's values and must agree with it. So both sides of every
rule that fired are compared on the test's random tensors, whatever the rule.
"""
from __future__ import annotations

import torch

from eqiforge.egraph import saturate as sat
from eqiforge.ir import Graph, Node, run_node


def saturate_case(graph: Graph, rulesets: list[str], iterations: int = 8):
    """Saturate in a child process as the optimizer does: egglog's worker threads, once started in this
    process, would not exist in later forked children and could deadlock them."""
    return sat.saturate(graph, rulesets, sat.Limits(iterations=iterations, enodes=20_000, seconds=30.0))


def _node_value(graph, snap, n, values, inputs):
    kids = snap.node_children[n]
    c = snap.node_class[n]
    node = Node(snap.node_op[n], tuple(range(len(kids))), snap.node_attrs[n], snap.class_shape[c],
                snap.class_dtype[c])
    return run_node(graph, node, [values[k] for k in kids], inputs)


def _close(a: torch.Tensor, b: torch.Tensor, rtol: float) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype == torch.bool:
        return bool((a == b).all())
    a, b = a.double(), b.double()
    if not torch.equal(a.isinf() | a.isnan(), b.isinf() | b.isnan()) or not torch.equal(a[a.isinf()], b[b.isinf()]):
        return False  # infinities must match exactly (a fill of -inf, a masked score)
    a, b = (torch.where(t.isinf() | t.isnan(), 0.0, t) for t in (a, b))
    return bool((a - b).norm() <= rtol * b.norm() + 1e-9)


def check_sound(graph: Graph, snap, inputs: dict[str, torch.Tensor], rtol: float = 1e-5) -> list[str]:
    """Return a description of every e-node whose value disagrees with its e-class (empty = sound)."""
    values: dict[int, torch.Tensor] = {}
    changed = True
    while changed:
        changed = False
        for n in range(snap.num_nodes):
            c = snap.node_class[n]
            if c not in values and all(k in values for k in snap.node_children[n]):
                values[c] = _node_value(graph, snap, n, values, inputs)
                changed = True
    problems = []
    for n in range(snap.num_nodes):
        c = snap.node_class[n]
        if c not in values:
            problems.append(f"e-class {c} has no computable e-node")
            continue
        got = _node_value(graph, snap, n, values, inputs)
        if tuple(got.shape) != snap.class_shape[c]:
            problems.append(f"{snap.node_op[n]}{snap.node_attrs[n]} has shape {tuple(got.shape)}, "
                            f"analysis says {snap.class_shape[c]}")
        elif not _close(got, values[c], rtol):
            problems.append(f"{snap.node_op[n]}{snap.node_attrs[n]} disagrees with its e-class {c}")
    return problems
