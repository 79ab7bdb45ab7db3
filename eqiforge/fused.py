"""Fused elementwise expressions (``Epi``): the language of kernel epilogues, prologues and pointwise kernels.

An Epi is a nested tuple evaluated elementwise (see eqiforge/lower/kernels.py for the forms). Here live
its vocabulary, its PyTorch semantics (used by the kernel ops' reference implementations, hence by the
rule tests and the torch fallback) and its FLOP count (used by the cost prior). In the e-graph the same
expressions are terms of the ``Epi`` sort of rules/schema.egg.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

UNARY = {
    "neg": torch.neg, "exp": torch.exp, "log": torch.log, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt,
    "recip": torch.reciprocal, "abs": torch.abs, "relu": torch.relu, "sigmoid": torch.sigmoid,
    "tanh": torch.tanh, "erf": torch.erf, "gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"), "silu": F.silu,
}
BINARY = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div, "pow": torch.pow,
    "maximum": torch.maximum, "minimum": torch.minimum,
}
#: IR op name -> Epi operator name, for the ops a fused kernel can absorb
FROM_IR = {"Neg": "neg", "Exp": "exp", "Log": "log", "Sqrt": "sqrt", "Rsqrt": "rsqrt", "Recip": "recip",
           "Abs": "abs", "Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh", "Erf": "erf", "Gelu": "gelu",
           "GeluTanh": "gelu_tanh", "Silu": "silu", "Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div",
           "Pow": "pow", "Maximum": "maximum", "Minimum": "minimum"}
TRANSCENDENTAL = {"exp", "log", "sqrt", "rsqrt", "sigmoid", "tanh", "erf", "gelu", "gelu_tanh", "silu", "pow"}


def evaluate(expr: tuple, acc: torch.Tensor | None, extras: list[torch.Tensor], x: torch.Tensor | None = None):
    """PyTorch value of ``expr`` as kernels compute it: in float32, or in float64 when a tensor it reads or
    a cast in it is float64 (a kernel never computes narrower than its program); ``acc``/``x`` fill
    ("acc",)/("x",)."""
    tensors = [t for t in (acc, x, *extras) if t is not None]
    wide = any(t.dtype == torch.float64 for t in tensors) or _casts_to_float64(expr)
    return _evaluate(expr, acc, extras, x, torch.float64 if wide else torch.float32)


def _casts_to_float64(expr) -> bool:
    return isinstance(expr, tuple) and (expr[:2] == ("cast", "float64") or any(map(_casts_to_float64, expr)))


def _evaluate(expr: tuple, acc, extras, x, wide: torch.dtype):
    head = expr[0]
    if head == "acc":
        return acc.to(wide)
    if head == "x":
        return x.to(wide)
    if head == "in":
        return extras[expr[1]].to(wide)
    if head == "const":
        return torch.tensor(expr[1], dtype=wide)
    if head == "un":
        return UNARY[expr[1]](_evaluate(expr[2], acc, extras, x, wide))
    if head == "bin":
        return BINARY[expr[1]](_evaluate(expr[2], acc, extras, x, wide), _evaluate(expr[3], acc, extras, x, wide))
    if head == "cast":  # dtype names are torch's
        return _evaluate(expr[2], acc, extras, x, wide).to(getattr(torch, expr[1])).to(wide)
    raise ValueError(f"not an Epi expression: {expr!r}")


def flops_per_element(expr: tuple) -> float:
    """Arithmetic per output element (a transcendental function counts as 8)."""
    head = expr[0]
    if head in ("un", "bin"):
        own = 8.0 if expr[1] in TRANSCENDENTAL else 1.0
        return own + sum(flops_per_element(e) for e in expr[2:])
    if head == "cast":
        return flops_per_element(expr[2])
    return 0.0


def inputs_used(expr: tuple) -> set[int]:
    """Indices of the extra inputs an expression reads."""
    if expr[0] == "in":
        return {expr[1]}
    return set().union(*(inputs_used(e) for e in expr[1:] if isinstance(e, tuple)))


def renumber(expr: tuple, mapping: dict[int, int]) -> tuple:
    """``expr`` with input i read as input mapping[i]."""
    if expr[0] == "in":
        return ("in", mapping[expr[1]])
    return tuple(renumber(p, mapping) if isinstance(p, tuple) else p for p in expr)


def drop_unread(exprs: list[tuple], num_inputs: int) -> tuple[list[tuple], list[int]]:
    """(expressions renumbered, kept input positions): inputs no expression reads are dropped. Fusion
    leaves the slot of an inlined producer unread; dropping it keeps that producer from being computed."""
    kept = sorted(set().union(*(inputs_used(e) for e in exprs)) & set(range(num_inputs)))
    mapping = {old: new for new, old in enumerate(kept)}
    return [renumber(e, mapping) for e in exprs], kept


def format_expr(expr: tuple) -> str:
    """Readable infix form, for plans and kernel headers."""
    head = expr[0]
    if head in ("acc", "x"):
        return head
    if head == "in":
        return f"in{expr[1]}"
    if head == "const":
        return f"{expr[1]:g}"
    if head == "un":
        return f"{expr[1]}({format_expr(expr[2])})"
    if head == "bin":
        return f"{expr[1]}({format_expr(expr[2])}, {format_expr(expr[3])})"
    return f"{expr[1]}({format_expr(expr[2])})"
