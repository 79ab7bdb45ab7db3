"""A graph traced with symbolic sizes (torch.export's ``Dim``s, Dynamo's dynamic graphs), read at chosen values.

torch records a symbolic size as a sympy expression over its shape environment's symbols (``s0 + 1``). The
IR is concrete, so a symbolic graph is converted at *hints* (values for its symbols, ``SizeEnv``): every
shape and every size the graph computes is that expression's value there. ``symbolic_sizes`` collects what
the hints must be chosen around (eqiforge/dims.py): the expressions the graph's sizes take, and the static
sizes they must not be confused with.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable

import sympy
import torch
import torch.fx as fx
from torch.utils import _pytree as pytree

from ..dims import MIN_HINT, Lifter, NotPolynomial, Poly, choose_hints

SYMBOLIC = (torch.SymInt, torch.SymFloat, torch.SymBool)


def poly_of(expr) -> Poly:
    """A torch size expression (sympy) as a Poly; NotPolynomial for floor divisions, modulos and the like."""
    expr = sympy.sympify(expr)
    symbols = sorted(expr.free_symbols, key=str)
    if not symbols:
        if not expr.is_integer:
            raise NotPolynomial(f"size {expr} is not an integer")
        return Poly.constant(int(expr))
    try:
        terms = sympy.Poly(expr, *symbols).terms()
    except (sympy.PolynomialError, sympy.GeneratorsNeeded) as err:
        raise NotPolynomial(f"size {expr} is not a polynomial of {symbols}") from err
    out = {}
    for powers, coef in terms:
        if not coef.is_integer:
            raise NotPolynomial(f"size {expr} has a non-integer coefficient")
        out[tuple(sorted(str(s) for s, k in zip(symbols, powers) for _ in range(k)))] = int(coef)
    return Poly.of(out)


def _expr(value):
    return value.node.expr if isinstance(value, SYMBOLIC) else None


@dataclass
class SizeEnv:
    """Values of a graph's symbols: what its symbolic sizes are read as when it is converted to the IR."""

    hints: dict[str, int]

    def concrete(self, value):
        """A symbolic int, float or bool at the hints; anything else as it is."""
        expr = _expr(value)
        if expr is None:
            return value
        result = expr.xreplace({s: sympy.Integer(self.hints[str(s)]) for s in expr.free_symbols})
        if isinstance(value, torch.SymBool):
            return bool(result)
        return int(result) if isinstance(value, torch.SymInt) else float(result)

    def written(self, call):
        """A call as written (frontend/as_written.py) with its sizes at the hints, to be priced there."""
        def shapes(group):
            return tuple(tuple(self.concrete(d) for d in shape) for shape in group)
        return replace(call, in_shapes=shapes(call.in_shapes), out_shapes=shapes(call.out_shapes),
                       args=tuple(self.concrete(a) for a in call.args))


@dataclass
class SymbolicSizes:
    """What a symbolic graph's sizes are made of."""

    observed: dict[str, int]  # each symbol's value in the traced call
    expressions: set[Poly] = field(default_factory=set)  # every symbolic size and size computation
    static: set[int] = field(default_factory=set)  # every static size, and the integers the calls take
    ranges: dict[str, tuple[int, int | None]] = field(default_factory=dict)  # values the trace holds for

    @property
    def symbols(self) -> list[str]:
        return sorted(self.observed)


def symbolic_sizes(gm: fx.GraphModule) -> SymbolicSizes | None:
    """The sizes of ``gm``'s nodes (``meta['val']``), or None when none is symbolic."""
    sizes = SymbolicSizes({})
    for node in gm.graph.nodes:
        for leaf in pytree.tree_leaves(node.meta.get("val")):
            dims = leaf.shape if isinstance(leaf, torch.Tensor) else [leaf]
            for d in dims:
                _note(sizes, d)
        for arg in pytree.tree_leaves((node.args, node.kwargs)):
            if isinstance(arg, int) and not isinstance(arg, bool):
                sizes.static.add(arg)
    return sizes if sizes.observed else None


def _note(sizes: SymbolicSizes, d) -> None:
    expr = _expr(d)
    if expr is None:
        if isinstance(d, int) and not isinstance(d, bool):
            sizes.static.add(d)
        return
    if isinstance(d, torch.SymBool) or not expr.free_symbols:
        return
    sizes.expressions.add(poly_of(expr))
    env = d.node.shape_env
    for s in expr.free_symbols:
        sizes.observed[str(s)] = int(env.backed_var_to_val[s])
        bounds = env.var_to_range.get(s)
        sizes.ranges[str(s)] = (max(2, _finite(bounds.lower) or 2), _finite(bounds.upper)) if bounds else (2, None)


def _finite(bound) -> int | None:
    """A range's bound as an int; None for torch's infinities."""
    try:
        return int(bound)
    except (TypeError, ValueError, AttributeError, OverflowError):
        return None


@dataclass
class SymbolicProgram:
    """A program traced with symbolic dims: its graph converts to the IR at any values of its symbols.

    ``hints`` are the values it is optimized at (distinctive, eqiforge/dims.py); ``lifter`` recognises their
    sizes in a plan; ``ranges`` are the values torch's trace holds for (lower, upper; None: unbounded)."""

    sizes: SymbolicSizes
    hints: dict[str, int]
    convert: Callable[[SizeEnv, object], object]  # (sizes, lifter or None) -> IR graph

    @property
    def ranges(self) -> dict[str, tuple[int, int | None]]:
        return self.sizes.ranges

    @property
    def lifter(self) -> Lifter:
        return Lifter(self.sizes.expressions, self.hints)

    def graph_at(self, values: dict[str, int], symbolic: bool = False):
        """The program's IR graph with its symbols at ``values`` (``symbolic``: knowing which sizes vary)."""
        return self.convert(SizeEnv(values), Lifter(self.sizes.expressions, values) if symbolic else None)

    def check_values(self) -> list[dict[str, int]]:
        """Values of the symbols a lifted plan is checked at besides the hints: the traced call's, another
        distinctive assignment above the hints, and the smallest the ranges allow (a window whose
        constants hold only above some size: ``x[14:15:2]`` read two elements from 14 at 16 rows, and a
        plan lifted from there failed at 15), within the ranges."""
        other = choose_hints(self.sizes.symbols, self.sizes.expressions, self.sizes.static,
                             {s: 2 * h for s, h in self.hints.items()}, avoid=[self.hints])
        small = {s: self.ranges.get(s, (2, None))[0] for s in self.hints}  # checked, not lifted: any value will do
        within = [v for v in (self.sizes.observed, other, small)
                  if all(lo <= v[s] and (hi is None or v[s] <= hi) for s, (lo, hi) in self.ranges.items())]
        return [v for k, v in enumerate(within) if v != self.hints and v not in within[:k]]

    def representative_values(self) -> list[dict[str, int]]:
        """Values of a program's one symbol that extraction also prices at, for buckets: about a quarter
        and four times the hint, within the range, distinctive as the hints are (eqiforge/dims.py)."""
        if len(self.sizes.symbols) != 1:
            return []
        (s, hint), (lo, hi) = next(iter(self.hints.items())), self.ranges.get(next(iter(self.hints)), (2, None))
        out = []
        for near in [n for n in (hint // 4, 4 * hint) if n >= MIN_HINT]:
            value = choose_hints([s], self.sizes.expressions, self.sizes.static, {s: max(lo, near)},
                                 avoid=[self.hints, *out])
            if (hi is None or value[s] <= hi) and value not in out and value[s] != hint:
                out.append(value)
        return out

    def describe(self) -> str:
        """The symbols, their ranges and the hints, for the report."""
        parts = []
        for s in self.sizes.symbols:
            lo, hi = self.ranges.get(s, (2, None))
            parts.append(f"{s} in [{lo}, {'inf' if hi is None else hi}] (priced at {self.hints[s]})")
        return ", ".join(parts)


def resized(t: torch.Tensor, shape) -> torch.Tensor:
    """``t`` at another shape of the same rank, its values repeated cyclically along each dim that changed
    (token ids stay valid ids, masks stay masks): example inputs for another value of a symbolic dim."""
    for d, n in enumerate(shape):
        if t.shape[d] != n:
            t = t.index_select(d, torch.arange(n, device=t.device) % t.shape[d])
    return t.contiguous()
