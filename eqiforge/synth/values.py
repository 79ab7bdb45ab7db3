"""Terms instantiated and evaluated: sizes for the symbols, random inputs, float64 values, fingerprints.

A term's *fingerprint* is its symbolic shape and its values at a few instantiations (each its own sizes and
inputs), rounded: terms with equal fingerprints are candidate equalities (Ruler's characteristic vectors).
Sizes are at least 2 and distinct within an instantiation, so a sum over a dim is never an identity by
accident of a size 1 and two symbols never agree by chance; inputs are bounded away from 0 (a quotient stays
finite) with random signs.
"""
from __future__ import annotations

import hashlib
import random

import numpy as np
import torch

from .. import ops
from ..ir import Graph
from .terms import Dim, Shape, Term, Var, dim_text, variables

ROUND = 6  # decimals a fingerprint keeps: equal terms differ by float64 rounding (~1e-13) only
DTYPE = "float32"  # of the IR graphs built from terms (the e-graph's dtype analysis wants one)


def dim_size(d: Dim, sizes: dict[str, int]) -> int:
    return sum(sizes[s] for s in d) if d else 1


def concrete_shape(shape: Shape, sizes: dict[str, int]) -> tuple[int, ...]:
    return tuple(dim_size(d, sizes) for d in shape)


def concrete_attrs(term: Term, sizes: dict[str, int]) -> tuple:
    """The term's attributes in numbers: symbolic targets and slice bounds at ``sizes``."""
    if term.op in ("Expand", "Reshape"):
        return (concrete_shape(term.attrs[0], sizes),)
    if term.op == "Slice":
        dim, start, end = term.attrs
        return dim, (dim_size(start, sizes) if start else 0), dim_size(end, sizes)
    return term.attrs


def draw_sizes(symbols: list[str], rng: random.Random, low: int = 2, high: int = 7) -> dict[str, int]:
    """Distinct sizes in [low, high] for the symbols (as many as fit; beyond that, any)."""
    pool = list(range(low, high + 1))
    rng.shuffle(pool)
    return {s: pool[i] if i < len(pool) else rng.randint(low, high) for i, s in enumerate(symbols)}


def draw_value(shape: tuple[int, ...], gen: torch.Generator) -> torch.Tensor:
    """Magnitudes in [0.5, 2], random signs: no quotient by a value near 0."""
    magnitude = 0.5 + 1.5 * torch.rand(shape, generator=gen, dtype=torch.float64)
    return torch.where(torch.rand(shape, generator=gen) < 0.5, -magnitude, magnitude)


class Instance:
    """One instantiation: sizes for the symbols and a value for every variable."""

    def __init__(self, vars_: list[Var], sizes: dict[str, int], seed: int):
        gen = torch.Generator().manual_seed(seed)
        self.sizes = sizes
        self.inputs = {v.name: float(draw_value((), gen)) if v.scalar else
                       draw_value(concrete_shape(v.shape, sizes), gen) for v in vars_}


def instances(vars_: list[Var], symbols: list[str], count: int, seed: int) -> list[Instance]:
    rng = random.Random(seed)
    return [Instance(vars_, draw_sizes(symbols, rng), rng.randrange(2 ** 31)) for _ in range(count)]


def apply(term: Term, kids: list, sizes: dict[str, int]) -> torch.Tensor:
    """The op table's reference implementation of ``term`` on its operands' values (a scalar operand is a
    number: filled to the other operand's shape, as the IR's Fill), checked against its shape rules."""
    tensors = [torch.full_like(kids[0], k) if isinstance(k, float) else k for k in kids]
    attrs = concrete_attrs(term, sizes)
    op = ops.get(term.op)
    expected = ops.infer_shape(term.op, [tuple(t.shape) for t in tensors], attrs)
    if expected != concrete_shape(term.shape, sizes):
        raise AssertionError(f"{term.text()}: typed {term.shape}, the op table says {expected} at {sizes}")
    return op.torch_impl(*tensors, *attrs)


class Evaluator:
    """Values of terms at fixed instantiations; representatives' values are kept for their parents. Beside
    the first instantiation's value, a term keeps its value with each of its variables drawn again (the
    others as they were): a term that does not change with one of its variables has it cancel out."""

    def __init__(self, vars_: list[Var], symbols: list[str], count: int = 3, seed: int = 0):
        self.instances = instances(vars_, symbols, count, seed)
        self.kept: dict = {v: [i.inputs[v.name] for i in self.instances] for v in vars_}
        redrawn = Instance(vars_, self.instances[0].sizes, seed + 7919).inputs
        self.others: dict = {v: {v: redrawn[v.name]} for v in vars_}  # term -> variable -> value, it redrawn

    def values(self, term: Term) -> list[torch.Tensor] | None:
        """The term's value at every instantiation, or None where one is not finite."""
        out = [apply(term, [self.kept[k][n] for k in term.kids], inst.sizes) for n, inst in enumerate(self.instances)]
        return out if all(bool(torch.isfinite(v).all()) for v in out) else None

    def redrawn(self, term: Term) -> dict:
        """variable -> the term's value at the first instantiation with that variable drawn again."""
        sizes = self.instances[0].sizes
        return {v: apply(term, [self.others[k].get(v, self.kept[k][0]) for k in term.kids], sizes)
                for v in sorted(variables(term), key=lambda v: v.name)}

    def cancels(self, term: Term, values: list[torch.Tensor], redrawn: dict) -> bool:
        """Whether some variable of the term leaves its value unchanged (``A + (s - A)``, ``A / (A / s)``)."""
        return any(bool(torch.equal(torch.round(r, decimals=ROUND), torch.round(values[0], decimals=ROUND)))
                   for r in redrawn.values())

    def keep(self, term: Term, values: list[torch.Tensor], redrawn: dict) -> None:
        self.kept[term] = values
        self.others[term] = redrawn


def constant(values: list[torch.Tensor]) -> bool:
    """Whether a term's values are one number everywhere, whatever its inputs (``W / W``, ``A - A``): a Fill
    in the IR, and an identity that holds only where its operand is finite (and nonzero)."""
    first = values[0].flatten()[0]
    return all(bool((v == first).all()) for v in values)


def fingerprint(shape: Shape, values: list) -> str:
    """The symbolic shape (dims as sums in any order) and the values, rounded, as one digest."""
    h = hashlib.sha1(repr(tuple(tuple(sorted(d)) for d in shape)).encode())
    for v in values:
        h.update(np.ascontiguousarray(np.round(v.numpy().ravel(), ROUND) + 0.0).tobytes())
    return h.hexdigest()


def evaluate(term, inst: Instance, dtype: torch.dtype = torch.float64, inputs: dict | None = None) -> torch.Tensor:
    """A term's value at one instantiation (inputs cast to ``dtype``; ``inputs`` overrides the instance's)."""
    given = inputs or inst.inputs
    if isinstance(term, Var):
        v = given[term.name]
        return v if isinstance(v, float) else v.to(dtype)
    return apply(term, [evaluate(k, inst, dtype, inputs) for k in term.kids], inst.sizes).to(dtype)


def to_graph(g: Graph, term, sizes: dict[str, int], scalars: dict[str, float], memo: dict) -> int:
    """Add ``term`` at ``sizes`` to IR graph ``g`` (inputs by variable name, scalars as Fills of the
    values in ``scalars``); return its node."""
    if term in memo:
        return memo[term]
    if isinstance(term, Var):
        node = g.input(term.name, concrete_shape(term.shape, sizes), DTYPE)
    else:
        kids = []
        for k in term.kids:
            if isinstance(k, Var) and k.scalar:
                kids.append(g.fill(scalars[k.name], g.nodes[kids[0]].shape, DTYPE))
            else:
                kids.append(to_graph(g, k, sizes, scalars, memo))
        node = g.add(term.op, tuple(kids), concrete_attrs(term, sizes))
    memo[term] = node
    return node


def shape_text(shape: Shape) -> str:
    return "[" + ", ".join(dim_text(d) for d in shape) + "]"
