"""Symbolic dims: sizes that change from call to call (a sequence length, a decoding cache's length).

A symbolic program is optimized at *size hints*: every stage before lowering sees plain integers, the
values of the dims at the hints, and decides (prices, rule guards, layouts) at those values, as Dynamo
decides at its size hints. The hints are chosen distinctive (primes that no static size of the program
equals or is a multiple of), so that after extraction every integer of the plan that came from a symbolic
dim is recognised by its value and lifted back to its expression (:class:`Lifter`): a ``SymInt`` is an
``int`` that computes as its hint but prints as its expression, so the torch backend's code generator,
unchanged, writes code that reads the sizes from its inputs. What was decided at the hint is then checked
where it matters: the lifted plan is instantiated and run against the program at other values of each dim
(lower/symbolic.py), and a plan that does not hold there is not used symbolically.

Expressions are polynomials with integer coefficients over the symbols (``s0 + 1``, ``12*s0``,
``s0*s1``): what the shapes of tensor programs are made of. Anything else (a floor division, a modulo)
is :class:`NotPolynomial`, and the program is then specialised per shape as before.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Mapping

Monomial = tuple[str, ...]  # symbol names, sorted, with repetition
#: the smallest hint: above any rank or small static size a lifted integer could be confused with
MIN_HINT = 17


class NotPolynomial(ValueError):
    """A size expression outside what symbolic plans handle (floor division, modulo, ...)."""


@dataclass(frozen=True)
class Poly:
    """sum(coef * prod(symbols)) with integer coefficients; terms sorted, no zero coefficient."""

    terms: tuple[tuple[Monomial, int], ...]

    @staticmethod
    def of(terms: Mapping[Monomial, int] | Iterable[tuple[Monomial, int]]) -> Poly:
        items = terms.items() if isinstance(terms, Mapping) else terms
        merged: dict[Monomial, int] = {}
        for mono, coef in items:
            merged[mono] = merged.get(mono, 0) + coef
        return Poly(tuple(sorted((m, c) for m, c in merged.items() if c)))

    @staticmethod
    def constant(value: int) -> Poly:
        return Poly.of({(): int(value)})

    @staticmethod
    def symbol(name: str) -> Poly:
        return Poly.of({(name,): 1})

    @property
    def symbols(self) -> frozenset[str]:
        return frozenset(s for mono, _ in self.terms for s in mono)

    def is_constant(self) -> bool:
        return not self.symbols

    def __add__(self, other: Poly) -> Poly:
        return Poly.of(self.terms + other.terms)

    def __mul__(self, other: Poly) -> Poly:
        return Poly.of([(tuple(sorted(a + b)), ca * cb) for a, ca in self.terms for b, cb in other.terms])

    def scaled(self, k: int) -> Poly:
        return Poly.of([(m, c * k) for m, c in self.terms])

    def divided(self, k: int) -> Poly | None:
        """self / k when every coefficient divides exactly, else None."""
        if k == 0 or any(c % k for _, c in self.terms):
            return None
        return Poly.of([(m, c // k) for m, c in self.terms])

    def at(self, values: Mapping[str, int]) -> int:
        return sum(c * math.prod(values[s] for s in m) for m, c in self.terms)

    def source(self, names: Mapping[str, str] | None = None) -> str:
        """Python source of the expression, symbols written as ``names[s]`` (default ``sym_<s>``)."""
        if not self.terms:
            return "0"
        parts = []
        for mono, coef in sorted(self.terms, key=lambda t: (-len(t[0]), t[0])):
            factors = [(names or {}).get(s, variable(s)) for s in mono]
            if abs(coef) != 1 or not factors:
                factors.insert(0, str(abs(coef)))
            parts.append(("- " if coef < 0 else "+ ") + "*".join(factors))
        text = " ".join(parts)
        return text[2:] if text.startswith("+ ") else "-" + text[2:]

    def __str__(self) -> str:
        return self.source({s: s for s in self.symbols})


def variable(symbol: str) -> str:
    """The generated code's variable holding a symbol's value (never a generated temporary's name)."""
    return f"sym_{symbol}"


class SymInt(int):
    """An integer that computes as its hint and prints as its expression (``repr``: Python source)."""

    poly: Poly

    def __new__(cls, hint: int, poly: Poly):
        obj = super().__new__(cls, int(hint))
        obj.poly = poly
        return obj

    def __repr__(self) -> str:
        return f"({self.poly.source()})" if len(self.poly.terms) > 1 else self.poly.source()

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return format(int(self), spec) if spec else repr(self)

    def __reduce__(self):
        return (SymInt, (int(self), self.poly))

    def _combine(self, other, poly_op, int_op):
        if isinstance(other, bool) or not isinstance(other, int):
            return int_op(int(self), other)
        other_poly = other.poly if isinstance(other, SymInt) else Poly.constant(other)
        return sym(int_op(int(self), int(other)), poly_op(self.poly, other_poly))

    def __add__(self, other):
        return self._combine(other, Poly.__add__, int.__add__)

    __radd__ = __add__

    def __sub__(self, other):
        return self._combine(other, lambda a, b: a + b.scaled(-1), int.__sub__)

    def __rsub__(self, other):
        return self._combine(other, lambda a, b: b + a.scaled(-1), lambda a, b: b - a)

    def __mul__(self, other):
        return self._combine(other, Poly.__mul__, int.__mul__)

    __rmul__ = __mul__

    def __neg__(self):
        return sym(-int(self), self.poly.scaled(-1))

    def __floordiv__(self, other):
        if isinstance(other, int) and not isinstance(other, (bool, SymInt)) and self.poly.divided(other):
            return sym(int(self) // other, self.poly.divided(other))
        return int(self) // other  # not exact: the hint's value (the instantiated checks catch a wrong one)

    def __rtruediv__(self, other):
        if isinstance(other, (int, float)) and not isinstance(other, bool):
            return SymFloat(other / int(self), f"({float(other)!r} / {self!r})")
        return NotImplemented

    def __hash__(self):
        return int.__hash__(self)


class SymFloat(float):
    """A float that is its value at the hints and prints as the expression computing it from sizes;
    ``size`` is the SymInt it equals when it is a size itself (a Fill of an integer tensor)."""

    def __new__(cls, value: float, source: str, size: SymInt | None = None):
        obj = super().__new__(cls, value)
        obj.source, obj.size = source, size
        return obj

    def __repr__(self) -> str:
        return self.source

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return format(float(self), spec) if spec else repr(self)

    def __reduce__(self):
        return (SymFloat, (float(self), self.source, self.size))


def sym(hint: int, poly: Poly):
    """A SymInt, or the plain int when the expression has no symbol left."""
    return int(hint) if poly.is_constant() else SymInt(hint, poly)


def is_symbolic(value) -> bool:
    """Whether a value (an attribute, a shape, nested tuples of them) holds a symbolic size."""
    if isinstance(value, (SymInt, SymFloat)):
        return True
    return isinstance(value, (tuple, list)) and any(is_symbolic(v) for v in value)


# --------------------------------------------------------------------------------------------- hints

def choose_hints(symbols: Iterable[str], expressions: Iterable[Poly], static: Iterable[int],
                 near: Mapping[str, int], avoid: Iterable[Mapping[str, int]] = ()) -> dict[str, int]:
    """A prime per symbol, at least ``MIN_HINT`` and the smallest from ``near[s]`` up, such that the
    non-constant ``expressions`` take distinct values, none equal to a ``static`` size nor dividing one
    (so an integer of the plan is lifted unambiguously), and the assignment differs from each of ``avoid``."""
    symbols = sorted(set(symbols))
    expressions = [e for e in set(expressions) if not e.is_constant()]
    static = {abs(int(v)) for v in static if abs(int(v)) > 1}
    taken = [dict(a) for a in avoid]
    chosen: dict[str, int] = {}
    for s in symbols:
        candidate = max(MIN_HINT, near.get(s, MIN_HINT))
        while True:
            candidate = _next_prime(candidate)
            trial = {**chosen, s: candidate}
            if all(t != trial for t in taken) and _distinctive(trial, expressions, static, set(chosen) | {s}):
                chosen[s] = candidate
                break
            candidate += 1
    return chosen


def _distinctive(values: dict[str, int], expressions: list[Poly], static: set[int], known: set[str]) -> bool:
    ready = [e for e in expressions if e.symbols <= known]
    seen = set()
    for e in ready:
        v = abs(e.at(values))
        if v <= 1 or v in seen or v in static or any(s % v == 0 for s in static):
            return False
        seen.add(v)
    return len(set(values.values())) == len(values)


def _next_prime(n: int) -> int:
    while n < 2 or any(n % k == 0 for k in range(2, math.isqrt(n) + 1)):
        n += 1
    return n


# --------------------------------------------------------------------------------------------- lifting

class Lifter:
    """Recognises the integers (and the floats 1/e) that symbolic sizes take at the hints.

    ``expressions`` are the program's symbolic sizes; an integer of the plan equal to one's value at the
    hints (or a static multiple of one: a merged dim) becomes that expression."""

    def __init__(self, expressions: Iterable[Poly], hints: Mapping[str, int]):
        self.hints = dict(hints)
        self.by_value: dict[int, Poly] = {}
        for e in sorted({e for e in expressions if not e.is_constant()}, key=lambda e: e.terms):
            self.by_value.setdefault(e.at(self.hints), e)

    def lift_int(self, value: int):
        if isinstance(value, (bool, SymInt)) or abs(value) <= 1:
            return value
        if value in self.by_value:
            return SymInt(value, self.by_value[value])
        if value < 0 and -value in self.by_value:
            return SymInt(value, self.by_value[-value].scaled(-1))
        for v, e in self.by_value.items():
            if v > 1 and value % v == 0 and value // v > 1:
                return SymInt(value, e.scaled(value // v))
        return value

    def lift_float(self, value: float):
        if isinstance(value, SymFloat) or not math.isfinite(value) or value == 0:
            return value
        for v in self.by_value:
            if math.isclose(value, 1.0 / v, rel_tol=1e-12):
                return SymFloat(value, f"(1.0 / {self.lift_int(v)!r})")
            if value == v:
                size = self.lift_int(v)
                return SymFloat(value, f"float({size!r})", size)
        return value

    def lift(self, value):
        """``value`` with every integer and float lifted, through tuples and lists (attributes, shapes,
        fused expressions); strings and other objects as they are."""
        if isinstance(value, bool):
            return value
        if isinstance(value, int):
            return self.lift_int(value)
        if isinstance(value, float):
            return self.lift_float(value)
        if isinstance(value, (tuple, list)):
            return type(value)(self.lift(v) for v in value)
        return value


def instantiate(value, values: Mapping[str, int]):
    """``value`` with every symbolic size replaced by its plain value at ``values`` (and SymFloats by the
    float their source computes there)."""
    if isinstance(value, SymInt):
        return value.poly.at(values)
    if isinstance(value, SymFloat):
        return float(eval(value.source, {variable(s): v for s, v in values.items()}))  # noqa: S307 - our own
    if isinstance(value, (tuple, list)):
        return type(value)(instantiate(v, values) for v in value)
    return value
