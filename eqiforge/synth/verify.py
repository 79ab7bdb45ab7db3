"""Checks of a candidate equality before it is kept, each recorded with what it found.

- **values**: both sides in float64 at many random instantiations (sizes 2-9, not necessarily distinct,
  inputs bounded away from 0 with random signs): the worst relative error must be within ``TOLERANCE``.
- **finite only**: an inf, -inf or NaN put into each input in turn; where the two sides then disagree (one
  gives NaN where the other gives a number, or infinities differ) the rule holds for finite values only and
  goes into the file's ``; assumes finite:`` list.
- **half precision**: each side's relative error in float16 against float64 (what a rule costs in accuracy
  when a program runs in half precision); recorded, not judged.
- **symbolic** (sympy, which PyTorch brings): both sides over symbols at small sizes, their difference
  simplified to 0; a proof of the identity at those sizes for every input value, where the values check
  samples them. Ops sympy cannot follow here leave it undecided.
- **in the e-graph**: the rule's egglog text, saturated alone on its left side's program, must fire, and
  every e-node must then evaluate to its e-class's value (``egraph/soundness.py``): this checks the rule as
  written, guards and all, not only the identity.
"""
from __future__ import annotations

import functools
import random
from dataclasses import dataclass

import numpy as np
import torch

from .terms import Term, Var, variables, with_variables_of
from .values import Instance, concrete_attrs, concrete_shape, draw_sizes, evaluate

TOLERANCE = 1e-9
SHAPES = 24  # random instantiations of the values check
SYMPY_SIZES = (2, 3, 2, 3, 2, 3)  # sizes of the symbols, in order, for the symbolic check
SYMPY_OPS = {"MatMul", "Permute", "Reshape", "Expand", "Sum", "Amax", "Amin", "Add", "Sub", "Mul", "Neg", "Div",
             "Concat", "Slice", "Maximum", "Minimum", "Recip", "Cumsum", "Flip", "Diagonal"}


@dataclass(frozen=True)
class InEgraph:
    """How a candidate's rules behaved as rules in the e-graph: ``sound`` (each fired and no e-node
    disagreed), and the words the report shows."""

    sound: bool
    words: str

    def __str__(self) -> str:
        return self.words


@dataclass
class Verification:
    shapes: int = 0
    error: float = 0.0  # worst relative error in float64
    finite_only: bool = False
    half_error: tuple[float, float] = (0.0, 0.0)  # lhs, rhs in float16 against float64
    symbolic: str = ""  # "proved at sizes ...", "undecided: ...", "not tried: ..."
    egraph: InEgraph | None = None  # None: not run as rules yet

    @property
    def passed(self) -> bool:
        return self.error <= TOLERANCE and (self.egraph is None or self.egraph.sound)


def _relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / (b.norm() + 1e-300))


def check_values(lhs, rhs, vars_: list[Var], symbols: list[str], seed: int,
                 stop_above: float | None = None) -> tuple[int, float]:
    """(instantiations checked, worst relative error) of lhs against rhs in float64; with ``stop_above``, the
    check ends at the first instantiation whose error is above it (a trial that fails, found fast)."""
    rng = random.Random(seed)
    worst = 0.0
    for n in range(SHAPES):
        sizes = {s: rng.randint(2, 9) for s in symbols} if n % 2 else draw_sizes(symbols, rng, 2, 9)
        inst = Instance(vars_, sizes, rng.randrange(2 ** 31))
        worst = max(worst, _relative(evaluate(lhs, inst), evaluate(rhs, inst)))
        if stop_above is not None and worst > stop_above:
            return n + 1, worst
    return SHAPES, worst


def _agree(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same NaN/inf positions and infinities; close elsewhere."""
    bad_a, bad_b = ~torch.isfinite(a), ~torch.isfinite(b)
    if not torch.equal(bad_a, bad_b) or not torch.equal(a.isinf() & a.gt(0), b.isinf() & b.gt(0)):
        return False
    ok = ~bad_a
    return _relative(a[ok], b[ok]) <= 1e-6 if ok.any() else True


def finite_only(lhs, rhs, vars_: list[Var], symbols: list[str], seed: int) -> bool:
    """Whether a NaN or an infinity in some input makes the sides disagree."""
    inst = Instance(vars_, draw_sizes(symbols, random.Random(seed)), seed)
    for v in sorted(variables(lhs) | variables(rhs), key=lambda v: v.name):
        for poison in (float("inf"), float("-inf"), float("nan")):
            inputs = dict(inst.inputs)
            if v.scalar:
                inputs[v.name] = poison
            else:
                x = inputs[v.name].clone()
                x.view(-1)[0] = poison
                inputs[v.name] = x
            if not _agree(evaluate(lhs, inst, inputs=inputs), evaluate(rhs, inst, inputs=inputs)):
                return True
    return False


def half_error(lhs, rhs, vars_: list[Var], symbols: list[str], seed: int) -> tuple[float, float]:
    inst = Instance(vars_, draw_sizes(symbols, random.Random(seed)), seed)
    exact = evaluate(lhs, inst)
    return tuple(_relative(evaluate(t, inst, torch.float16).double(), exact) for t in (lhs, rhs))


def symbolic(lhs, rhs, symbols: list[str]) -> str:
    """Prove lhs == rhs over symbolic inputs at small sizes with sympy, or say why not."""
    used = {op for t in (lhs, rhs) for op in _ops(t)}
    if used - SYMPY_OPS:
        return f"not tried: {', '.join(sorted(used - SYMPY_OPS))}"
    import sympy
    sizes = {s: SYMPY_SIZES[i % len(SYMPY_SIZES)] for i, s in enumerate(symbols)}
    inputs = {}
    for v in sorted(variables(lhs) | variables(rhs), key=lambda v: v.name):
        if v.scalar:
            inputs[v.name] = sympy.Symbol(v.name)
        else:
            shape = concrete_shape(v.shape, sizes)
            flat = [sympy.Symbol(f"{v.name}_{i}") for i in range(int(np.prod(shape)))]
            inputs[v.name] = np.array(flat, dtype=object).reshape(shape)
    diff = np.asarray(_sym(lhs, inputs, sizes) - _sym(rhs, inputs, sizes), dtype=object).ravel()
    if all(sympy.cancel(d) == 0 for d in diff):  # rational functions: decided by cancelling
        return f"proved at sizes {', '.join(f'{s}={n}' for s, n in sizes.items())} (sympy)"
    return "undecided (sympy did not cancel the difference to 0)"


def _ops(t) -> list[str]:
    return [] if isinstance(t, Var) else [t.op] + [o for k in t.kids for o in _ops(k)]


def _sym(t, inputs: dict, sizes: dict):
    """A term over numpy arrays of sympy expressions (numpy's object arrays do the broadcasting)."""
    import sympy
    if isinstance(t, Var):
        return inputs[t.name]
    kids = [_sym(k, inputs, sizes) for k in t.kids]
    if len(kids) == 2 and not isinstance(kids[1], np.ndarray):  # a scalar operand
        kids[1] = np.full(kids[0].shape, kids[1], dtype=object)
    a = concrete_attrs(t, sizes)
    fold = lambda f, x, dims: functools.reduce(  # noqa: E731
        lambda acc, d: np.frompyfunc(f, 2, 1).reduce(acc, axis=d, keepdims=True), dims, x)
    table = {
        "MatMul": lambda x, y: np.matmul(x, y), "Permute": lambda x: np.transpose(x, a[0]),
        "Reshape": lambda x: x.reshape(a[0]), "Expand": lambda x: np.broadcast_to(x, a[0]).copy(),
        "Sum": lambda x: fold(lambda p, q: p + q, x, a[0]), "Amax": lambda x: fold(sympy.Max, x, a[0]),
        "Amin": lambda x: fold(sympy.Min, x, a[0]), "Add": np.add, "Sub": np.subtract, "Mul": np.multiply,
        "Neg": np.negative, "Div": lambda x, y: x / y, "Recip": lambda x: 1 / x,
        "Concat": lambda x, y: np.concatenate([x, y], axis=a[0]),
        "Slice": lambda x: np.take(x, range(a[1], a[2]), axis=a[0]),
        "Maximum": np.frompyfunc(sympy.Max, 2, 1), "Minimum": np.frompyfunc(sympy.Min, 2, 1),
        "Cumsum": lambda x: np.cumsum(x, axis=a[0]), "Flip": lambda x: np.flip(x, axis=a[0]),
        "Diagonal": lambda x: np.diagonal(x, axis1=-2, axis2=-1)[..., None],
    }
    return np.asarray(table[t.op](*kids), dtype=object)


def verify(lhs: Term, rhs, vars_: list[Var], symbols: list[str], seed: int = 0) -> Verification:
    """Every check of lhs == rhs but the e-graph's (which ``rules_in_egraph`` runs for many rules at once)."""
    vars_ = with_variables_of(vars_, lhs, rhs)
    shapes, error = check_values(lhs, rhs, vars_, symbols, seed)
    result = Verification(shapes, error)
    if error <= TOLERANCE:
        result.finite_only = finite_only(lhs, rhs, vars_, symbols, seed + 1)
        result.half_error = half_error(lhs, rhs, vars_, symbols, seed + 2)
        result.symbolic = symbolic(lhs, rhs, symbols)
    return result
