"""The Plan: the extracted program as an IR graph with a predicted time per node.

Built from a snapshot and an extractor's selection. With constant folding on (inference), every compute
node whose operands are all constants (a deterministic PyTorch call too: rotary cos/sin of a folded table) is
evaluated here, once, and becomes a parameter of the plan.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .. import ops
from ..cost.configs import best_prices, untiled_gemm, with_gemm_config
from ..cost.features import node_features
from ..ir import Graph, run_node


@dataclass
class Plan:
    graph: Graph
    node_seconds: dict[int, float] = field(default_factory=dict)
    cost_model: str = ""
    folded: int = 0  # nodes evaluated at optimization time
    sms: int | None = None  # SMs of the device priced for: kernels are configured as they were priced
    eclass: dict[int, int] = field(default_factory=dict)  # plan node -> the e-class it was chosen for

    @property
    def predicted_seconds(self) -> float:
        return sum(self.node_seconds.get(i, 0.0) for i in self.graph.live_nodes())

    def format(self) -> str:
        """The chosen program, one node per line with its predicted time."""
        lines = [f"# plan: {len(self.graph.live_nodes())} nodes, predicted {self.predicted_seconds * 1e6:.1f} us "
                 f"({self.cost_model}); {self.folded} nodes folded into constants"]
        for line, i in zip(self.graph.format().splitlines(), self.graph.live_nodes()):
            us = self.node_seconds.get(i, 0.0) * 1e6
            lines.append(f"{line:<90} # {us:8.2f} us" if us else line)
        lines.append(self.graph.format().splitlines()[-1])
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.format()


def price(graph: Graph, cost_model) -> dict[int, float]:
    """Predicted seconds of every live node of ``graph``."""
    live = graph.live_nodes()
    feats = []
    for i in live:
        n = graph.nodes[i]
        kids = [graph.nodes[j] for j in n.inputs]
        feats.append(node_features(n.op, [k.shape for k in kids], [k.dtype for k in kids], n.shape, n.dtype,
                                   attrs=n.attrs))
    return dict(zip(live, cost_model.predict(feats).tolist()))


def configured_gemm(cost_model, kids, attrs: tuple, shape, dtype: str) -> tuple:
    """A GEMM kernel's attributes with the config the cost model priced it at (cost/configs.py): the e-graph
    holds GEMMs untiled, and a plan runs each with the config its price was taken at."""
    f = node_features("GemmK", [k.shape for k in kids], [k.dtype for k in kids], shape, dtype, attrs=attrs)
    if not untiled_gemm(f):
        return attrs
    _, [config] = best_prices(cost_model.predict, [f])
    return with_gemm_config(attrs, *config) if config else attrs


def build_plan(snap, choice: dict[int, int], source: Graph, cost_model, fold_constants: bool) -> Plan:
    """Turn the chosen e-nodes into a Plan graph (topological, hash-consed), folding constants if asked."""
    graph = Graph(externs=dict(source.externs), symbolic=source.symbolic)
    built: dict[int, int] = {}  # e-class -> plan node id
    consts: dict[int, torch.Tensor] = {}  # plan node id -> value, for constant nodes
    folded = 0
    for c in _postorder(snap, choice):
        n = choice[c]
        op, attrs = snap.node_op[n], snap.node_attrs[n]
        kids = tuple(built[k] for k in snap.node_children[n])
        shape, dtype = snap.class_shape[c], snap.class_dtype[c]
        if op == "Input":
            built[c] = graph.input(attrs[0], shape, dtype)
        elif op == "Param":
            built[c] = graph.param(attrs[0], source.params[attrs[0]])
        else:
            if op == "GemmK" and getattr(cost_model, "kernels", False):
                attrs = configured_gemm(cost_model, [graph.nodes[k] for k in kids], attrs, shape, dtype)
            built[c] = graph.add(op, kids, attrs, shape=shape, dtype=dtype)
        node = graph.nodes[built[c]]
        foldable = op != "Extern" or (fold_constants and graph.externs[attrs[0]].deterministic)
        if not source.varies(node) and (  # a symbolic size's value is the call's: never folded
                op in ("Param", "Fill") or (op != "Input" and foldable and kids and all(k in consts for k in kids))):
            consts[built[c]] = run_node(graph, node, [consts[k] for k in kids], {})
            if fold_constants and kids and not ops.get(op).is_view():
                name = f"folded{folded}"
                folded += 1
                built[c] = graph.param(name, consts.pop(built[c]).contiguous())
                consts[built[c]] = graph.params[name]
    graph.outputs = [built[r] for r in snap.roots]
    graph, remap = compact(graph)
    device = getattr(cost_model, "device", None)
    eclass = {remap[i]: c for c, i in built.items() if i in remap}
    return Plan(graph, price(graph, cost_model), getattr(cost_model, "name", ""), folded, getattr(device, "sms", None),
                eclass)


def compact(graph: Graph) -> tuple[Graph, dict[int, int]]:
    """A copy holding only the live nodes (and the params and externs they use), and old id -> new id."""
    out = Graph(symbolic=graph.symbolic)
    remap: dict[int, int] = {}
    for i in graph.live_nodes():
        n = graph.nodes[i]
        if n.op == "Param":
            remap[i] = out.param(n.attrs[0], graph.params[n.attrs[0]])
        else:
            remap[i] = out.add(n.op, tuple(remap[j] for j in n.inputs), n.attrs, shape=n.shape, dtype=n.dtype)
            if n.op == "Extern":
                out.externs[n.attrs[0]] = graph.externs[n.attrs[0]]
    out.outputs = [remap[o] for o in graph.outputs]
    return out, remap


def _postorder(snap, choice: dict[int, int]) -> list[int]:
    """Chosen e-classes reachable from the roots, children before parents (iterative: graphs are deep)."""
    order, seen = [], set()
    for root in snap.roots:
        stack = [(root, False)]
        while stack:
            c, expanded = stack.pop()
            if expanded:
                order.append(c)
                continue
            if c in seen:
                continue
            seen.add(c)
            stack.append((c, True))
            stack.extend((k, False) for k in reversed(snap.node_children[choice[c]]) if k not in seen)
    return order
