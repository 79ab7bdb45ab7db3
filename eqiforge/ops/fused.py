"""Fused elementwise expressions (``Epi``): the language of kernel epilogues, prologues and pointwise kernels.

An Epi is a nested tuple evaluated elementwise (see eqiforge/lower/kernels.py for the forms). Its operators
are the unary and binary math ops of the op table (``ops.EPI``); here live their names, an expression's
FLOP count (used by the cost prior) and its structure (inputs read, renumbering, formatting). Its PyTorch
semantics is ``ops.evaluate``. In the e-graph the same expressions are terms of the ``Epi`` sort of
rules/schema.egg.
"""
from __future__ import annotations

from . import EPI, evaluate  # noqa: F401  (evaluate: an Epi's PyTorch value, part of this language)

UNARY = tuple(name for name, op in EPI.items() if op.arity == 1)
BINARY = tuple(name for name, op in EPI.items() if op.arity == 2)
TRANSCENDENTAL = frozenset(name for name, op in EPI.items() if "transcendental" in op.tags)
COMMUTATIVE = frozenset(name for name, op in EPI.items() if "commutative" in op.tags)


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


def canonical_inputs(exprs: list[tuple], inputs: list) -> tuple[list[tuple], list[int]]:
    """(expressions renumbered, kept input positions): the operands of commutative operators ordered by what
    they compute, then inputs numbered in the order the expressions first read them, a tensor at two positions
    read as one, inputs no expression reads dropped. Fusion reaches one kernel along many paths (inlining
    order, a producer read twice, a + b beside b + a) with its inputs numbered differently; this is the form
    they share, so that they are one e-node to extraction. ``inputs`` identify the tensors (e-classes)."""
    exprs = [_commuted(e, inputs) for e in exprs]
    kept: list[int] = []
    mapping: dict[int, int] = {}
    slot_of: dict = {}

    def visit(expr: tuple) -> None:
        if expr[0] == "in":
            i = expr[1]
            if i not in mapping and i < len(inputs):
                if inputs[i] not in slot_of:
                    slot_of[inputs[i]] = len(kept)
                    kept.append(i)
                mapping[i] = slot_of[inputs[i]]
            return
        for part in expr[1:]:
            if isinstance(part, tuple):
                visit(part)

    for e in exprs:
        visit(e)
    return [renumber(e, mapping) for e in exprs], kept


def _commuted(expr: tuple, inputs: list) -> tuple:
    """``expr`` with the two operands of each commutative operator in a fixed order: by what they read and
    compute (inputs named by their tensors), so that the order fusion happened to build them in is gone."""
    if not isinstance(expr, tuple) or expr[0] == "in":
        return expr
    parts = tuple(_commuted(p, inputs) for p in expr)
    if parts[0] == "bin" and parts[1] in COMMUTATIVE:
        a, b = parts[2:]
        if _tensor_key(b, inputs) < _tensor_key(a, inputs):
            parts = parts[:2] + (b, a)
    return parts


def _tensor_key(expr, inputs: list) -> str:
    """A total order on operands: the expression written out with each input as the tensor it reads;
    constants sort last (``x * 0.125``, as a person writes it)."""
    if not isinstance(expr, tuple):
        return repr(expr)
    if expr[0] == "in":
        return f"in:{inputs[expr[1]]!r}" if expr[1] < len(inputs) else f"in#{expr[1]}"
    if expr[0] == "const":
        return f"~{expr[1:]!r}"
    return "(" + ",".join(_tensor_key(p, inputs) for p in expr) + ")"


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
