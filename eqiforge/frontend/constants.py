"""Evaluate the program's constant PyTorch calls, and its arithmetic on one-element constants, once, at capture.

A mask built from ``torch.ones``/``triu``/``arange`` (a causal mask, SDPA's ``is_causal``) reaches the IR as
extern calls on constants; evaluated here they become constant tensors that the algebra can reason
around and that masks.py can recognise (a causal bias becomes a causal attention kernel). Only
deterministic calls are evaluated (never ``rand``/``dropout``), and never ones that read parameters, which
may be live.
"""
from __future__ import annotations

import torch

from .. import ops
from ..ir import Graph, run_node

#: ops that give one value from one value per operand: on uniform operands (a Fill, a one-element tensor
#: broadcast) their result is uniform too
UNIFORM = frozenset({"unary", "binary", "compare", "where", "cast"})


def fold_constant_externs(graph: Graph) -> Graph:
    """A copy of ``graph`` where deterministic externs of constants (Fill nodes, other such externs, and
    ops over them) are constant tensors (Param leaves named ``const_<extern>_<output>``). Only what those
    externs read is evaluated: constant ops that no extern reads stay IR nodes (the plan folds them, or
    a causal kernel leaves them unused) and cost no memory here."""
    out = Graph(externs=dict(graph.externs), symbolic=graph.symbolic)
    remap: dict[int, int] = {}
    constant: set[int] = set()
    values: dict[int, torch.Tensor] = {}  # old node id -> value, evaluated on demand

    def value(i: int) -> torch.Tensor:
        """Node ``i``'s value, evaluating what it reads first (iteratively: constant chains can be long)."""
        stack = [i]
        while stack:
            j = stack[-1]
            missing = [k for k in graph.nodes[j].inputs if k not in values]
            if j in values or not missing:
                if j not in values:
                    values[j] = run_node(graph, graph.nodes[j], [values[k] for k in graph.nodes[j].inputs], {})
                stack.pop()
            else:
                stack.extend(missing)
        return values[i]

    inputs = {i for i, n in enumerate(graph.nodes) if n.op == "Input"}  # unused ones too: the caller passes them
    for i in sorted(set(graph.live_nodes()) | inputs):
        n = graph.nodes[i]
        if not graph.varies(n) and (  # a symbolic size's value is the call's
                n.op == "Fill" or (n.op not in ("Input", "Param") and all(j in constant for j in n.inputs)
                                   and (n.op != "Extern" or graph.externs[n.attrs[0]].deterministic))):
            constant.add(i)
        if i in constant and n.op == "Extern":
            remap[i] = out.param(f"const_{n.attrs[0]}_{n.attrs[1]}", value(i))
        elif n.op == "Param":
            remap[i] = out.param(n.attrs[0], graph.params[n.attrs[0]])
        else:
            remap[i] = out.add(n.op, tuple(remap[j] for j in n.inputs), n.attrs, shape=n.shape, dtype=n.dtype)
    out.outputs = [remap[o] for o in graph.outputs]
    out.externs = {k: v for k, v in out.externs.items()
                   if any(n.op == "Extern" and n.attrs[0] == k for n in out.nodes)}
    return _scalar_constants_as_fills(out)


def _scalar_constants_as_fills(graph: Graph) -> Graph:
    """``graph`` where arithmetic on one-element constant tensors (a lifted ``torch.tensor(16.0)``, with Fills
    and broadcasts) is a Fill of its value: DeBERTa's scale ``sqrt(torch.tensor(d))`` is then a constant the
    rules can match (an attention scale), not an opaque tensor. Evaluated on one element, never at the
    shape it is broadcast to."""
    scalar: dict[int, torch.Tensor] = {}  # node -> its one value (0-d), for uniform constants
    reads_param: set[int] = set()
    for i, n in enumerate(graph.nodes):
        if n.op == "Fill":
            scalar[i] = torch.tensor(n.attrs[0], dtype=ops.DTYPES[n.dtype])
        elif n.op == "Param" and graph.params[n.attrs[0]].numel() == 1:
            scalar[i] = graph.params[n.attrs[0]].reshape(())
            reads_param.add(i)
        elif n.inputs and all(j in scalar for j in n.inputs) and (
                n.op in ("Reshape", "Expand") or ops.get(n.op).kind in UNIFORM):
            values = [scalar[j] for j in n.inputs]
            scalar[i] = values[0] if n.op in ("Reshape", "Expand") else run_node(graph, n, values, {})
            if any(j in reads_param for j in n.inputs):
                reads_param.add(i)
    if not reads_param:
        return graph
    out = Graph(externs=dict(graph.externs), symbolic=graph.symbolic)
    remap: dict[int, int] = {}
    for i, n in enumerate(graph.nodes):
        if i in reads_param and n.op != "Param":
            remap[i] = out.fill(scalar[i].item(), n.shape, n.dtype)
        elif n.op == "Param":
            remap[i] = out.param(n.attrs[0], graph.params[n.attrs[0]])
        else:
            remap[i] = out.add(n.op, tuple(remap[j] for j in n.inputs), n.attrs, shape=n.shape, dtype=n.dtype)
    out.outputs = [remap[o] for o in graph.outputs]
    return out
