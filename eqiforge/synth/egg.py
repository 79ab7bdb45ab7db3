"""An equality of two terms as an egglog rule in the house conventions (rules/README.md).

The left side becomes a query of one atom per op (``(= t0 (Sum t1 (vec-of 1)))``), every variable's shape
is read (``(= s_A (shape v_A))``) and guarded as the symbolic typing assumed it: its rank, its size-1 dims,
and each size symbol bound once (``(= n_j (vec-get s_A 1))``) and equal wherever it recurs. So the rule
fires only where the identity was found to hold, at any sizes. A scalar is a Fill whose value and dtype the
right side reuses, filled to the shape it meets there. The right side is built from the bound variables and
size symbols, and unioned with the left.

A rule goes one way: every variable of its right side must occur on its left.
"""
from __future__ import annotations

import re

from .terms import Dim, Shape, Term, Var, ops_of, variables


def orientable(lhs, rhs) -> bool:
    """Whether ``lhs -> rhs`` is a rewrite: the right side's variables all occur on the left."""
    return isinstance(lhs, Term) and variables(rhs) <= variables(lhs)


def rule_name(lhs, rhs, taken: set[str]) -> str:
    """A readable name from the two sides' ops, ``sum-expand--expand-sum`` (a variable side: ``x``), not in
    ``taken`` (a number appended where it is), then added to it."""
    side = lambda t: "-".join(o.lower() for o in ops_of(t)) or "x"  # noqa: E731
    base = name = f"{side(lhs)}--{side(rhs)}"
    n = 1
    while name in taken:
        n += 1
        name = f"{base}-{n}"
    taken.add(name)
    return name


def _vec(items) -> str:
    return f"(vec-of {' '.join(str(i) for i in items)})"


class _Query:
    """The left side's atoms and what they bind: size symbols, scalars' Fill values and dtypes."""

    def __init__(self):
        self.atoms: list[str] = []
        self.symbols: set[str] = set()
        self.scalars: dict[str, tuple[str, str]] = {}
        self.fresh = 0

    def var(self, prefix: str) -> str:
        self.fresh += 1
        return f"{prefix}{self.fresh}"

    def shape_guards(self, vector: str, shape: Shape) -> None:
        """Guard the Dims value ``vector`` to be ``shape``: rank, size-1 dims, one symbol per other dim."""
        self.atoms.append(f"(= {len(shape)} (vec-length {vector}))")
        for p, d in enumerate(shape):
            if not d:
                self.atoms.append(f"(= 1 (vec-get {vector} {p}))")
            elif len(d) == 1:
                self.atoms.append(f"(= n_{d[0]} (vec-get {vector} {p}))")
                self.symbols.add(d[0])
            else:
                self.atoms.append(f"(= {_size(d)} (vec-get {vector} {p}))")

    def pattern(self, term) -> str:
        """The query variable standing for ``term``, its atoms and guards added."""
        if isinstance(term, Var):
            name = f"v_{term.name}"
            if f"(= s_{term.name} (shape {name}))" not in self.atoms:
                self.atoms.append(f"(= s_{term.name} (shape {name}))")
                self.shape_guards(f"s_{term.name}", term.shape)
            return name
        args = []
        for k in term.kids:
            if isinstance(k, Var) and k.scalar:
                fill = self.var("f")
                value, dtype = self.scalars.setdefault(k.name, (f"c_{k.name}", f"d_{k.name}"))
                self.atoms.append(f"(= {fill} (Fill {value} {self.var('fs')} {dtype}))")
                args.append(fill)
            else:
                args.append(self.pattern(k))
        args += self.attrs(term)
        y = self.var("t")
        self.atoms.append(f"(= {y} ({term.op} {' '.join(args)}))")
        return y

    def attrs(self, term: Term) -> list[str]:
        if term.op in ("Expand", "Reshape"):
            target = self.var("s")
            self.shape_guards(target, term.attrs[0])
            return [target]
        if term.op == "Slice":
            dim, start, end = term.attrs
            return [str(dim), self._bound(start), self._bound(end)]
        return [_attr(a) for a in term.attrs]

    def _bound(self, d: Dim) -> str:
        bound = self.var("b")
        self.atoms.append(f"(= {bound} {_size(d) if d else 0})")
        return bound


def _size(d: Dim) -> str:
    """A size in symbols: 1, ``n_j``, ``(+ n_j n_k)``."""
    if not d:
        return "1"
    names = [f"n_{s}" for s in d]
    out = names[0]
    for n in names[1:]:
        out = f"(+ {out} {n})"
    return out


def _attr(a) -> str:
    if isinstance(a, tuple):
        return _vec(a)
    return str(a)


def _build(term, q: _Query) -> str:
    """The right side as an egglog expression over the query's variables."""
    if isinstance(term, Var):
        return f"v_{term.name}"
    args = []
    for k in term.kids:
        if isinstance(k, Var) and k.scalar:
            value, dtype = q.scalars[k.name]
            args.append(f"(Fill {value} {_shape(term.kids[0].shape)} {dtype})")
        else:
            args.append(_build(k, q))
    if term.op in ("Expand", "Reshape"):
        args.append(_shape(term.attrs[0]))
    elif term.op == "Slice":
        dim, start, end = term.attrs
        args += [str(dim), _size(start) if start else "0", _size(end)]
    else:
        args += [_attr(a) for a in term.attrs]
    return f"({term.op} {' '.join(args)})"


def _shape(shape: Shape) -> str:
    return f"(vec-of {' '.join(_size(d) for d in shape)})"


def rule_text(lhs: Term, rhs, name: str) -> str:
    """``(rule (query) ((union lhs rhs)) :name "name")``; the right side's symbols must be bound on the left."""
    q = _Query()
    top = q.pattern(lhs)
    body = _build(rhs, q)
    unbound = set(re.findall(r"\bn_(\w+)", body)) - q.symbols
    if unbound:
        raise ValueError(f"{name}: sizes {sorted(unbound)} of the right side are not read on the left")
    query = "\n       ".join(_wrap(q.atoms))
    return f"(rule ({query})\n      ((union {top} {body}))\n      :name \"{name}\")"


def _wrap(atoms: list[str], width: int = 100) -> list[str]:
    """Atoms joined into lines of at most ``width`` characters."""
    lines, line = [], ""
    for a in atoms:
        if line and len(line) + 1 + len(a) > width:
            lines.append(line)
            line = a
        else:
            line = f"{line} {a}" if line else a
    return lines + [line] if line else lines
