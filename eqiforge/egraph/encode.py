"""Encode an IR graph as egglog commands, through the bindings API (no program text to parse).

Every live node is let-bound (``$n<id>``), so a shared sub-expression is one term however often it is used,
and the outputs are ``$out<k>``; its ``order`` is its node id. Leaves and externs get their shape and dtype set here; the ``analysis`` rule
set derives the rest.
"""
from __future__ import annotations

import egglog.bindings as eb

from .. import ops
from ..ir import Graph

SPAN = eb.RustSpan("eqiforge", 0, 0)


def lit(kind: str, value):
    """An egglog literal or vector expression for an attribute of the given kind (see ops.ATTR_SORTS)."""
    if kind == "str":
        return eb.Lit(SPAN, eb.String(value))
    if kind == "f64":
        return eb.Lit(SPAN, eb.Float(float(value)))
    if kind == "i64":
        return eb.Lit(SPAN, eb.Int(int(value)))
    if kind == "dims":
        return eb.Call(SPAN, "vec-of", [eb.Lit(SPAN, eb.Int(int(v))) for v in value])
    raise ValueError(f"unknown attribute kind {kind!r}")


def var(name: str):
    return eb.Var(SPAN, name)


def node_name(i: int) -> str:
    return f"$n{i}"


def output_name(k: int) -> str:
    return f"$out{k}"


def _tlist(items: list):
    expr = eb.Call(SPAN, "TNil", [])
    for item in reversed(items):
        expr = eb.Call(SPAN, "TCons", [item, expr])
    return expr


def node_expr(graph: Graph, i: int):
    """The constructor call for node ``i``, its operands referring to their let-bound names."""
    n = graph.nodes[i]
    op = ops.get(n.op)
    operands = [var(node_name(j)) for j in n.inputs]
    attrs = [lit(kind, value) for kind, value in zip(op.attrs, n.attrs)]
    if n.op == "Extern":
        return eb.Call(SPAN, "Extern", attrs + [_tlist(operands)])
    return eb.Call(SPAN, n.op, attrs + operands if op.attr_first else operands + attrs)


def encode(graph: Graph) -> list:
    """Commands that add ``graph`` to an e-graph holding the schema."""
    cmds = []
    for i in graph.live_nodes():
        n = graph.nodes[i]
        cmds.append(eb.ActionCommand(eb.Let(SPAN, node_name(i), node_expr(graph, i))))
        cmds.append(eb.ActionCommand(eb.Set(SPAN, "order", [var(node_name(i))], lit("i64", i))))
        if n.op in ("Input", "Param", "Extern"):
            me = [var(node_name(i))]
            cmds.append(eb.ActionCommand(eb.Set(SPAN, "shape", me, lit("dims", n.shape))))
            cmds.append(eb.ActionCommand(eb.Set(SPAN, "dtype", me, lit("str", n.dtype))))
    for k, o in enumerate(graph.outputs):
        cmds.append(eb.ActionCommand(eb.Let(SPAN, output_name(k), var(node_name(o)))))
    return cmds
