"""Numerical soundness check of a saturated e-graph: the rule tests, `eqiforge rules check` and synthesis.

Every e-class gets a value (from the first e-node whose children have values), then EVERY e-node of the
class is evaluated with PyTorch from its children's values and must agree with it. So both sides of every
rule that fired are compared on the test's random tensors, whatever the rule.
"""
from __future__ import annotations

import torch

from .. import ops
from ..ir import Graph, Node, run_node
from . import saturate as sat


def random_inputs(graph: Graph, seed: int) -> dict[str, torch.Tensor]:
    """A standard normal value per input of ``graph`` (inputs named ``pos...``: positive), in its dtype."""
    gen = torch.Generator().manual_seed(seed)
    values = {}
    for n in graph.nodes:
        if n.op == "Input":
            t = torch.randn(n.shape, generator=gen)
            t = t.abs() + 0.5 if n.attrs[0].startswith("pos") else t
            values[n.attrs[0]] = t.to(ops.DTYPES[n.dtype])
    return values


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


def check_rules_on(text: str, witness: Graph, seeds: tuple[int, ...] = (0, 1), iterations: int = 4):
    """Saturate ``witness`` with the rules of ``text`` alone (beside the schema) and check every e-node on
    random inputs of each seed: (matches per rule, problems). Raises EqiforgeError where the text does not
    load or run (a parse or sort error, with egglog's message)."""
    from . import rulesets
    with rulesets.rules_folder_with({"checked": text}, keep_shipped=False) as names:
        # capped from the first step: rules that commute or regroup would add millions of e-nodes in one
        schedule = sat.Schedule.of(*names, limits=sat.Limits(iterations=iterations, enodes=20_000, seconds=20.0),
                                   back_off=sat.BackOff(capped_from=0.0))
        snap, report = sat.saturate(witness, schedule, use_cache=False)
    problems = [p for seed in seeds for p in check_sound(witness, snap, random_inputs(witness, seed))]
    return report.matches_per_rule(), problems
