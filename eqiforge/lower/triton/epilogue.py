"""Fused expressions (``Epi`` tuples, see ``eqiforge.lower.kernels``) rendered as Triton statements.

An Epi becomes one assignment per operation (``e0 = acc + in0``, ``e1 = ...``), shared sub-expressions
computed once, so that long fused chains stay readable in the generated kernel. All arithmetic is in the
kernel's compute dtype (fp32, or fp64 for kernels touching float64: ``kernels.compute_dtype``): the templates
load every operand converted to it, and an Epi ``cast`` rounds to its dtype and comes back (the final store
casts to the output dtype). Python float literals keep their full value in fp64 arithmetic.

Each operator's expression is its op-table entry's ``triton`` field (``ops.EPI``); two are rendered here:
rsqrt (``source.rsqrt``: fp64 needs a correctly rounded form) and pow, through ``tl.exp2``/``tl.log2`` with
the sign and zero cases of ``torch.pow`` handled explicitly, and common constant exponents (2, 3, 0.5,
-0.5, -1) exactly. Only ``tl`` builtins are used (the Triton interpreter has no libdevice).
"""
from __future__ import annotations

from ...ops.fused import inputs_used
from ...ops import EPI
from .source import TL_DTYPES, UnsupportedSpec, rsqrt

#: Epi operator -> Triton expression of its operands ({0}, {1}); None: rendered by _Renderer itself
UNARY = {name: op.triton for name, op in EPI.items() if op.arity == 1}
BINARY = {name: op.triton for name, op in EPI.items() if op.arity == 2}
RENDERED_HERE = ("rsqrt", "pow")
EXACT_POWERS = {2.0: "{a} * {a}", 3.0: "{a} * {a} * {a}", 0.5: "tl.sqrt({a})", -1.0: "1.0 / {a}", 1.0: "{a}"}


def literal(value: float) -> str:
    """A Triton float literal that round-trips (``float("inf")`` and ``float("nan")`` included)."""
    text = repr(float(value))
    if text in ("inf", "-inf", "nan"):
        return f'float("{text}")' if text != "-inf" else '-float("inf")'
    return f"({text})" if text.startswith("-") else text


def inputs(epi: tuple, count: int) -> list[int]:
    """Indices of the extra inputs (``("in", i)`` leaves) the expression reads, in order; ``count`` exist."""
    used = sorted(inputs_used(epi))
    if any(not 0 <= i < count for i in used):
        raise UnsupportedSpec(f"expression reads inputs {used} but the kernel has {count}")
    return used


def render(epi: tuple, leaves: dict[tuple, str], tile: str, prefix: str = "e",
           compute: str = "float32") -> tuple[list[str], str]:
    """Statements evaluating ``epi`` elementwise in the ``compute`` dtype, and the name (or leaf) that holds
    the result.

    ``leaves`` maps the leaves the kernel provides (``("acc",)``, ``("x",)``, ``("in", i)``) to variable
    names (holding ``compute`` values); ``tile`` is the Triton shape of the kernel's tile
    (``"[BLOCK_M, BLOCK_N]"``), used when the whole expression is a constant.
    """
    r = _Renderer(leaves, prefix, tile, compute)
    result = r.visit(epi)
    if epi[0] == "const":
        result = r.emit(f"tl.full({tile}, {result}, {r.tl_dtype})")
    return r.lines, result


class _Renderer:
    def __init__(self, leaves: dict[tuple, str], prefix: str, tile: str, compute: str):
        self.leaves, self.prefix, self.tile, self.compute = leaves, prefix, tile, compute
        self.tl_dtype = TL_DTYPES[compute]
        self.lines: list[str] = []
        self.done: dict[tuple, str] = {}  # sub-expression -> the name holding it
        self.count = 0

    def emit(self, expr: str) -> str:
        name = f"{self.prefix}{self.count}"
        self.count += 1
        self.lines.append(f"{name} = {expr}")
        return name

    def visit(self, e: tuple) -> str:
        if e in self.done:
            return self.done[e]
        tag = e[0]
        if tag in ("acc", "x", "in"):
            if e not in self.leaves:
                raise UnsupportedSpec(f"leaf {e} is not available in this kernel (has {sorted(self.leaves)})")
            return self.leaves[e]
        if tag == "const":
            return literal(e[1])
        if tag == "un":
            out = self.unary(e[1], self.visit(e[2]))
        elif tag == "bin":
            out = self.binary(e[1], e[2], e[3])
        elif tag == "cast":
            if e[1] not in TL_DTYPES:
                raise UnsupportedSpec(f"cannot cast to {e[1]}")
            out = self.emit(f"{self.visit(e[2])}.to({TL_DTYPES[e[1]]}).to({self.tl_dtype})  # rounded to {e[1]}")
        else:
            raise UnsupportedSpec(f"malformed expression {e!r}")
        self.done[e] = out
        return out

    def unary(self, op: str, x: str) -> str:
        if op not in UNARY:
            raise UnsupportedSpec(f"unknown unary op {op!r}")
        return self.emit(rsqrt(x, self.compute) if op == "rsqrt" else UNARY[op].format(x))

    def binary(self, op: str, left: tuple, right: tuple) -> str:
        if op not in BINARY:
            raise UnsupportedSpec(f"unknown binary op {op!r}")
        a, b = self.visit(left), self.visit(right)
        if op == "pow":
            return self.pow(a, b, right[1] if right[0] == "const" else None)
        return self.emit(BINARY[op].format(a, b))

    def pow(self, a: str, b: str, constant: float | None) -> str:
        """``torch.pow``: exact for small constant exponents, else exp2(b * log2|a|) with torch's sign rules."""
        c = None if constant is None else float(constant)
        if c in EXACT_POWERS:
            return self.emit(EXACT_POWERS[c].format(a=a))
        if c == -0.5:
            return self.unary("rsqrt", a)
        if c == 0.0:
            return self.emit(f"tl.full({self.tile}, 1.0, {self.tl_dtype})  # x ** 0 == 1, even for 0 and nan")
        if c is not None and not c.is_integer():
            return self.emit(f"tl.exp2({b} * tl.log2({a}))  # nan for {a} < 0, like torch")
        out = self.emit(f"tl.exp2({b} * tl.log2(tl.abs({a})))  # |{a}| ** {b}")
        if c is None:  # a runtime exponent: a negative base needs an integer exponent
            sign = f'tl.where({b} == tl.floor({b}), tl.where({b} % 2.0 == 0.0, {out}, -{out}), float("nan"))'
            self.lines.append(f"{out} = tl.where({a} < 0.0, {sign}, {out})")
            self.lines.append(f"{out} = tl.where({b} == 0.0, 1.0, {out})  # x ** 0 == 1, even for 0 and nan")
        elif c % 2.0 == 1.0:
            self.lines.append(f"{out} = tl.where({a} < 0.0, -{out}, {out})  # an odd exponent keeps the sign")
        return out
