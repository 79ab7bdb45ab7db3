"""A plan extracted at size hints, lifted to one plan for every value of its symbolic dims (eqiforge/dims.py).

``lift`` rewrites a concrete plan graph so that every integer (shapes, attributes, extern arguments) and
every float ``1/size`` that came from a symbolic size is a ``SymInt``/``SymFloat``; the torch backend then
writes it as code that reads the sizes from its inputs (``size_prelude``: ``sym_s0 = cache_0.shape[2]``).
What cannot be lifted is a clear ``NotSymbolic``: a constant tensor whose size changes (a folded mask), a
plan for another backend. Whether the lifted plan is right at other sizes is not assumed: shapes/generalize.py runs it
against the program converted at other values of the symbols before it is used.
"""
from __future__ import annotations

from dataclasses import replace

from .. import ops
from ..dims import Lifter, Poly, SymInt, instantiate, is_symbolic, variable
from ..ir import ExternCall, Graph, Node

#: attribute kinds that hold sizes or numbers computed from them (not names, dtypes or tile configs)
NUMERIC_KINDS = ("dims", "i64", "f64", "epi")


class NotSymbolic(ValueError):
    """A plan (or a program) that cannot serve every value of its symbolic dims; say why."""


def lift(graph: Graph, lifter: Lifter) -> Graph:
    """``graph`` with its symbolic sizes lifted (nodes rebuilt as they are, not re-inferred)."""
    out = Graph(params=dict(graph.params), facts=dict(graph.facts))
    out.externs = {key: ExternCall(e.fn, lifter.lift(e.args), lifter.lift(e.kwargs), e.label)
                   for key, e in graph.externs.items()}
    for i, n in enumerate(graph.nodes):
        kinds = ops.get(n.op).attrs
        attrs = tuple(lifter.lift(a) if k in NUMERIC_KINDS else a for k, a in zip(kinds, n.attrs))
        shape = lifter.lift(n.shape)
        if n.op == "Param" and is_symbolic(shape):
            raise NotSymbolic(f"the constant {n.attrs[0]!r} has a size that changes with the symbolic dims "
                              f"{list(shape)}")
        node = Node(n.op, n.inputs, attrs, shape, n.dtype)
        out.nodes.append(node)
        out._index.setdefault(node, i)
    out.outputs = list(graph.outputs)
    return out


def input_shapes(graph: Graph, lifter: Lifter) -> dict[str, tuple]:
    """Each graph input's shape, lifted."""
    return {n.attrs[0]: lifter.lift(n.shape) for n in graph.nodes if n.op == "Input"}


def size_prelude(shapes: dict[str, tuple], arguments: dict[str, str], only: str | None = None) -> list[str]:
    """Statements binding every symbol of ``shapes`` (input name -> shape; or ``only`` that symbol) from the
    first of ``arguments`` (the function's, input name -> its identifier there) with a dim that is the symbol
    alone, or plus a constant."""
    found: dict[str, str] = {}
    for name, identifier in arguments.items():
        for d, size in enumerate(shapes.get(name, ())):
            if isinstance(size, SymInt):
                symbol = _solved(size.poly)
                if symbol and symbol[0] not in found:
                    found[symbol[0]] = f"{identifier}.shape[{d}]" + (f" - {symbol[1]}" if symbol[1] else "")
    wanted = {s for shape in shapes.values() for size in shape if isinstance(size, SymInt) for s in size.poly.symbols}
    missing = sorted(({only} if only else wanted) - set(found))
    if missing:
        raise NotSymbolic(f"no input dim gives the size {', '.join(missing)} alone")
    return [f"{variable(s)} = {source}" for s, source in sorted(found.items()) if only in (None, s)]


def _solved(poly: Poly) -> tuple[str, int] | None:
    """(symbol, constant) when ``poly`` is ``symbol + constant``."""
    linear = [(m, c) for m, c in poly.terms if m]
    if len(linear) != 1 or len(linear[0][0]) != 1 or linear[0][1] != 1:
        return None
    constant = next((c for m, c in poly.terms if not m), 0)
    return linear[0][0][0], constant


def symbols_of(shapes) -> list[str]:
    return sorted({s for shape in shapes for size in shape if isinstance(size, SymInt) for s in size.poly.symbols})


def snapshot_at(snap, lifter: Lifter, values: dict[str, int]):
    """The saturated e-graph ``snap`` (at the hints ``lifter`` knows) with every size at ``values``: what
    extraction prices a bucket at, the e-graph shared (only the prices and the choice change)."""
    def at(value):
        return instantiate(lifter.lift(value), values)
    attrs = [tuple(at(a) if k in NUMERIC_KINDS else a for k, a in zip(ops.get(op).attrs, node_attrs))
             for op, node_attrs in zip(snap.node_op, snap.node_attrs)]
    return replace(snap, node_attrs=attrs, class_shape=[tuple(at(tuple(s))) for s in snap.class_shape])
