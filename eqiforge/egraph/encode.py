"""Encode an IR graph as egglog commands, through the bindings API (no program text to parse).

Every live node is let-bound (``$node<id>_``, see ``node_name``), so a shared sub-expression is one term however often
it is used, and the outputs are ``$output<k>``; its ``order`` and ``last`` are its node id. Leaves and externs get their
shape and dtype set here; the ``analysis`` rule set derives the rest. The graph's ``facts`` (relations that only values
show, such as a constant causal mask: frontend/masks.py) are stated on their nodes.
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
    if kind == "epi":
        return _epi(value)
    if kind == "tile":
        return eb.Call(SPAN, "TileCfg", [lit("i64", v) for v in value]) if value else eb.Call(SPAN, "NoTile", [])
    raise ValueError(f"unknown attribute kind {kind!r}")


#: Epi tuple heads and their egglog constructors (see eqiforge/ops/fused.py)
EPI_CONSTRUCTORS = {"acc": "EAcc", "x": "EX", "in": "EIn", "const": "EConst", "un": "EUn", "bin": "EBin",
                    "cast": "ECast"}


def _epi(expr: tuple):
    args = []
    for part in expr[1:]:
        if isinstance(part, tuple):
            args.append(_epi(part))
        elif isinstance(part, str):
            args.append(lit("str", part))
        elif isinstance(part, float):
            args.append(lit("f64", part))
        else:
            args.append(lit("i64", part))
    return eb.Call(SPAN, EPI_CONSTRUCTORS[expr[0]], args)


def var(name: str):
    return eb.Var(SPAN, name)


def node_name(i: int) -> str:
    """The global name of IR node ``i``. It ends in a non-digit: egglog 13.2 names the temporaries of a
    global's uses by appending a counter to the name, so ``$node31``'s tenth use and ``$node311``'s first
    were one temporary and a stored e-node got the wrong child (``(Mul $node311 $node31)`` read back as
    ``(Mul $node31 $node31)``). Also unusual on purpose: egglog forbids rule variables named like globals."""
    return f"$node{i}_"


def output_name(k: int) -> str:
    return f"$output{k}_"


def op_call(name: str, operands: list, attrs) -> eb.Call:
    """The constructor call of op ``name`` on operand expressions and attribute values (a variadic op's
    operands past its arity go in a vector)."""
    op = ops.get(name)
    args = operands[:op.arity] + [lit(kind, value) for kind, value in zip(op.attrs, attrs)]
    if op.variadic:
        args.append(eb.Call(SPAN, "vec-of", operands[op.arity:]))
    return eb.Call(SPAN, name, args)


def node_expr(graph: Graph, i: int):
    """The constructor call for node ``i``, its operands referring to their let-bound names."""
    n = graph.nodes[i]
    return op_call(n.op, [var(node_name(j)) for j in n.inputs], n.attrs)


def _as_tuple(fact) -> tuple:
    """A fact as (relation, its integer arguments after the node): a bare name has none."""
    return (fact,) if isinstance(fact, str) else tuple(fact)


def encode(graph: Graph) -> list:
    """Commands that add ``graph`` to an e-graph holding the schema."""
    cmds = []
    for i in graph.live_nodes():
        n = graph.nodes[i]
        cmds.append(eb.ActionCommand(eb.Let(SPAN, node_name(i), node_expr(graph, i))))
        cmds += [eb.ActionCommand(eb.Set(SPAN, span, [var(node_name(i))], lit("i64", i))) for span in ("order", "last")]
        if n.op in ("Input", "Param", "Extern"):
            me = [var(node_name(i))]
            cmds.append(eb.ActionCommand(eb.Set(SPAN, "shape", me, lit("dims", n.shape))))
            cmds.append(eb.ActionCommand(eb.Set(SPAN, "dtype", me, lit("str", n.dtype))))
        cmds += [eb.ActionCommand(eb.Expr_(SPAN, eb.Call(SPAN, fact[0], [var(node_name(i))]
                                                         + [lit("i64", v) for v in fact[1:]])))
                 for fact in map(_as_tuple, graph.facts.get(i, ()))]
    for k, o in enumerate(graph.outputs):
        cmds.append(eb.ActionCommand(eb.Let(SPAN, output_name(k), var(node_name(o)))))
    return cmds
