"""Well-typed IR terms over an op vocabulary, by size: the raw material of rule synthesis.

A term's shape is symbolic: a dim is a sum of size symbols in order (``("j", "k")`` is j + k, the j part
first; ``()`` is 1), so a term is typed once for every size and its attributes that depend on sizes (an
Expand's target, a Slice's bounds) are written in symbols too. Values come from instantiating the symbols
(``values.py``). The op table is the authority on shapes: every instantiated term is checked against its
shape rules (``ops.infer_shape``) when it is evaluated.

A variable is a tensor of a symbolic shape, or a scalar (shape None): the IR's scalars are Fill nodes of the
other operand's shape, so a scalar may only be the second operand of an elementwise op.

Terms are built bottom-up over *representatives* (Ruler's way): a term whose values equal an earlier term's
is a candidate rule and is not extended further, so the count grows with the distinct values, not with
every spelling of them.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from .. import ops

Dim = tuple[str, ...]
Shape = tuple[Dim, ...]

#: the default vocabulary: the algebra ops the rules rewrite most (`eqiforge rules synthesize --ops`)
DEFAULT_OPS = ("MatMul", "Permute", "Reshape", "Expand", "Sum", "Amax", "Add", "Mul", "Neg", "Div", "Concat",
               "Slice")
ELEMENTWISE = ("Add", "Sub", "Mul", "Div", "Maximum", "Minimum")  # binary ops over equal shapes or a scalar
UNARY = ("Neg", "Exp", "Log", "Abs", "Relu", "Recip")
#: ops along one dim (or, Diagonal, of a matrix's two last dims of one size): running sums, reversals, diagonals
ALONG = ("Cumsum", "Flip", "Diagonal")
SUPPORTED = DEFAULT_OPS + tuple(o for o in ELEMENTWISE + UNARY if o not in DEFAULT_OPS) + ("Amin",) + ALONG


@dataclass(frozen=True)
class Var:
    """A pattern variable: a tensor of ``shape``, or a scalar (``shape`` None)."""

    name: str
    shape: Shape | None

    size = 0

    @property
    def scalar(self) -> bool:
        return self.shape is None

    def text(self) -> str:
        return self.name


@dataclass(frozen=True)
class Term:
    """``op`` applied to ``kids`` (terms or variables) with ``attrs`` (ints, perms, symbolic dims/shapes)."""

    op: str
    kids: tuple
    attrs: tuple
    shape: Shape
    size: int = field(compare=False)

    scalar = False

    def text(self) -> str:
        inner = [k.text() for k in self.kids] + [_attr_text(a) for a in self.attrs]
        return f"{self.op.lower()}({', '.join(inner)})"


def _attr_text(a) -> str:
    if isinstance(a, tuple) and a and isinstance(a[0], tuple):  # a symbolic shape
        return "[" + ", ".join(dim_text(d) for d in a) + "]"
    return str(a)


def dim_text(d: Dim) -> str:
    return "+".join(d) or "1"


def variables(term) -> set[Var]:
    if isinstance(term, Var):
        return {term}
    return set().union(*(variables(k) for k in term.kids))


def with_variables_of(vars_: list[Var], *terms) -> list[Var]:
    """``vars_`` and, after them by name, the terms' variables that are not among them (a generalized rule's
    fresh ones): what an instantiation must draw."""
    more = set().union(*(variables(t) for t in terms)) - set(vars_)
    return list(vars_) + sorted(more, key=lambda v: v.name)


def ops_of(term) -> list[str]:
    """The ops of a term, outermost first (pre-order)."""
    return [] if isinstance(term, Var) else [term.op] + [o for k in term.kids for o in ops_of(k)]


def same_shape(a: Shape, b: Shape) -> bool:
    """Equal symbolic shapes: each dim the same sum of symbols (in any order)."""
    return len(a) == len(b) and all(sorted(x) == sorted(y) for x, y in zip(a, b))


def parse_vars(spec: str) -> list[Var]:
    """``"A:i,j W:j,k r:1,j s:scalar"`` -> variables (dims by symbol, ``1`` for a size-1 dim)."""
    found = []
    for item in spec.split():
        name, _, dims = item.partition(":")
        if not name.isidentifier() or not dims:
            raise ValueError(f"variable {item!r}: write NAME:DIM,DIM (symbols or 1) or NAME:scalar")
        shape = None if dims == "scalar" else tuple(() if d == "1" else (d,) for d in dims.split(","))
        found.append(Var(name, shape))
    return found


DEFAULT_VARS = "A:i,j B:i,j W:j,k V:k,l r:1,j s:scalar"


def symbols_of(vars_: list[Var]) -> list[str]:
    return sorted({s for v in vars_ if v.shape for d in v.shape for s in d})


# ---------------------------------------------------------------------------------------------- typing

def applications(op: str, kids: tuple, symbols: list[str]) -> list[tuple[tuple, Shape]]:
    """Every (attrs, result shape) with which ``op`` types on ``kids``; empty when it does not."""
    if any(k.scalar for k in kids[:1]) or (len(kids) == 1 and kids[0].scalar):
        return []
    x = kids[0].shape
    if op in UNARY:
        return [((), x)]
    if op in ELEMENTWISE:
        b = kids[1]
        return [((), x)] if b.scalar or same_shape(x, b.shape) else []
    if any(k.scalar for k in kids):
        return []
    if op == "MatMul":
        a, b = x, kids[1].shape
        ok = len(a) == len(b) >= 2 and same_shape(a[:-2], b[:-2]) and sorted(a[-1]) == sorted(b[-2])
        return [((), a[:-1] + b[-1:])] if ok else []
    if op == "Permute":
        perms = [p for p in itertools.permutations(range(len(x))) if list(p) != sorted(p)]
        return [((p,), tuple(x[i] for i in p)) for p in perms]
    if op in ("Sum", "Amax", "Amin"):
        return [(((d,),), x[:d] + ((),) + x[d + 1:]) for d in range(len(x)) if x[d]]
    if op == "Cumsum":
        return [((d,), x) for d in range(len(x)) if x[d]]
    if op == "Flip":
        return [(((d,),), x) for d in range(len(x)) if x[d]]
    if op == "Diagonal":  # the IR keeps a unit last dim: [..., n, n] -> [..., n, 1]
        return [((), x[:-1] + ((),))] if len(x) >= 2 and x[-1] and sorted(x[-1]) == sorted(x[-2]) else []
    if op == "Expand":
        return [((t,), t) for d in range(len(x)) if not x[d] for s in symbols
                for t in [x[:d] + ((s,),) + x[d + 1:]]]
    if op == "Reshape":  # size-1 dims in and out only: a product of symbols is no dim here
        grown = [x[:p] + ((),) + x[p:] for p in range(len(x) + 1)] if len(x) < 3 else []
        shrunk = [x[:p] + x[p + 1:] for p in range(len(x)) if not x[p] and len(x) > 1]
        return [((t,), t) for t in dict.fromkeys(grown + shrunk)]  # inserting a 1 beside a 1: one target
    if op == "Concat":
        b = kids[1].shape
        return [((d,), x[:d] + (x[d] + b[d],) + x[d + 1:]) for d in range(len(x))
                if len(b) == len(x) and x[d] and b[d] and not set(x[d]) & set(b[d])
                and same_shape(x[:d] + x[d + 1:], b[:d] + b[d + 1:])]
    if op == "Slice":  # a part of a dim that is a sum: [start, end) in symbols
        return [((d, x[d][:m], x[d][:m + 1]), x[:d] + ((x[d][m],),) + x[d + 1:])
                for d in range(len(x)) if len(x[d]) > 1 for m in range(len(x[d]))]
    raise ValueError(f"op {op} is not in the synthesis vocabulary {SUPPORTED}")


def arity(op: str) -> int:
    return 1 if op in UNARY + ALONG or op in ("Permute", "Sum", "Amax", "Amin", "Expand", "Reshape", "Slice") else 2


def commutative(op: str) -> bool:
    return "commutative" in ops.get(op).tags


def ac_normal(term) -> str:
    """The term's text up to commuting the operands of commutative ops and regrouping associative ones:
    equalities of that kind are left out (the rules state none on purpose: they grow e-graphs fast)."""
    if isinstance(term, Var):
        return term.name
    if commutative(term.op):
        operands = _chain(term, term.op) if "associative" in ops.get(term.op).tags else term.kids
        return f"{term.op}({','.join(sorted(ac_normal(k) for k in operands))})"
    return f"{term.op}({','.join(ac_normal(k) for k in term.kids)};{term.attrs})"


def _chain(term, op: str) -> list:
    """The operands of a nest of ``op`` applications at any depth: ``[a, b, c, d]`` of ``(a + b) + (c + d)`` and
    of ``a + (b + (c + d))``."""
    if isinstance(term, Term) and term.op == op:
        return [x for k in term.kids for x in _chain(k, op)]
    return [term]


def new_terms(op: str, size: int, by_size: dict[int, list], symbols: list[str]):
    """Every term of ``op`` of exactly ``size`` ops whose operands are representatives (``by_size``); of a
    commutative op, one operand order (``a + b``, not also ``b + a``)."""
    if arity(op) == 1:
        for k in by_size.get(size - 1, []):
            for attrs, shape in applications(op, (k,), symbols):
                yield Term(op, (k,), attrs, shape, size)
        return
    for left in range(size):
        for a in by_size.get(left, []):
            for b in by_size.get(size - 1 - left, []):
                if commutative(op) and not b.scalar and b.text() < a.text():
                    continue
                for attrs, shape in applications(op, (a, b), symbols):
                    yield Term(op, (a, b), attrs, shape, size)
