"""One small program per rewrite rule, built on random shapes, on which that rule must fire.

``CASES[rule name](rng)`` returns an IR graph; the test saturates it with the rule's rule set and checks
every e-node numerically (eqiforge/egraph/soundness.py). Shapes are drawn from ``rng`` so each seed tries new ones.
"""
from __future__ import annotations

import itertools
import random

import torch

from eqiforge import ops
from eqiforge.egraph import rulesets
from eqiforge.frontend.masks import mark_structured_masks
from eqiforge.ir import Graph

F32 = "float32"
CASES: dict[str, callable] = {}


def case(*names):
    def register(fn):
        for name in names:
            CASES[name] = fn
        return fn
    return register


class B:
    """Terse IR builder for the cases."""

    def __init__(self, rng: random.Random):
        self.g = Graph()
        self.rng = rng

    def dim(self, lo=2, hi=7) -> int:
        return self.rng.randint(lo, hi)

    def x(self, name, *shape):
        return self.g.input(name, tuple(shape), F32)

    def op(self, name, *args, attrs=()):
        return self.g.add(name, tuple(args), tuple(attrs))

    def fill(self, value, like):
        return self.g.fill(value, self.g.nodes[like].shape, F32)

    def shape(self, i):
        return self.g.nodes[i].shape

    def out(self, *ids) -> Graph:
        self.g.outputs = list(ids)
        self.g.verify()
        return self.g


# ----------------------------------------------------------------------------------------------- matmul
@case("matmul-assoc-right", "matmul-assoc-left")
def _chain(rng):
    b = B(rng)
    m, k, n, p = b.dim(), b.dim(), b.dim(), b.dim()
    a, c, d = b.x("a", m, k), b.x("c", k, n), b.x("d", n, p)
    return b.out(b.op("MatMul", b.op("MatMul", a, c), d)), ["matmul"]


@case("matmul-scale-into-left", "matmul-scale-into-right")
def _scaled_product(rng):
    b = B(rng)
    a, c = b.x("a", 2, b.dim(), 4), b.x("c", 2, 4, b.dim())
    y = b.op("MatMul", a, c)
    return b.out(b.op("Mul", y, b.fill(rng.uniform(-2, 2), y))), ["matmul"]


@case("neg-out-of-matmul-left", "neg-out-of-matmul-right", "neg-into-matmul-left", "neg-into-matmul-right")
def _negated_products(rng):
    b = B(rng)
    m, k, n = b.dim(), b.dim(), b.dim()
    a, c = b.x("a", m, k), b.x("c", k, n)
    outs = [b.op("MatMul", b.op("Neg", a), c), b.op("MatMul", a, b.op("Neg", c)),
            b.op("Neg", b.op("MatMul", b.x("a2", 2, m, k), b.x("c2", 2, k, n)))]
    return b.out(*outs), ["matmul"]


@case("matmul-scale-out-of-left")
def _scaled_left(rng):
    b = B(rng)
    a, c = b.x("a", b.dim(), 5), b.x("c", 5, b.dim())
    return b.out(b.op("MatMul", b.op("Mul", a, b.fill(0.5, a)), c)), ["matmul"]


@case("matmul-scale-out-of-right")
def _scaled_right(rng):
    b = B(rng)
    a, c = b.x("a", b.dim(), 5), b.x("c", 5, b.dim())
    return b.out(b.op("MatMul", a, b.op("Mul", c, b.fill(-1.5, c)))), ["matmul"]


@case("matmul-merge-shared-left")
def _parallel_right_operands(rng):
    b = B(rng)
    k = b.dim()
    x, w1, w2 = b.x("x", b.dim(), k), b.x("w1", k, b.dim()), b.x("w2", k, b.dim())
    return b.out(b.op("MatMul", x, w1), b.op("MatMul", x, w2)), ["matmul"]


@case("matmul-merge-shared-right")
def _parallel_left_operands(rng):
    b = B(rng)
    k = b.dim()
    a1, a2, w = b.x("a1", 3, b.dim(), k), b.x("a2", 3, b.dim(), k), b.x("w", 3, k, b.dim())
    return b.out(b.op("MatMul", a1, w), b.op("MatMul", a2, w)), ["matmul"]


# ---------------------------------------------------------------------------------------------- transpose
@case("permute-identity-1", "permute-identity-2", "permute-identity-3", "permute-identity-4",
      "permute-compose-2", "permute-compose-3", "permute-compose-4")
def _permutes(rng):
    b = B(rng)
    outs = []
    for rank in (1, 2, 3, 4):
        x = b.x(f"x{rank}", *[b.dim() for _ in range(rank)])
        p = list(range(rank))
        rng.shuffle(p)
        inverse = [p.index(i) for i in range(rank)]
        outs.append(b.op("Permute", b.op("Permute", x, attrs=[tuple(p)]), attrs=[tuple(inverse)]))
        if rank > 1:
            q = list(range(rank))
            rng.shuffle(q)
            outs.append(b.op("Permute", b.op("Permute", x, attrs=[tuple(p)]), attrs=[tuple(q)]))
    return b.out(*outs), ["transpose"]


@case("transpose-of-matmul-2", "matmul-of-transposes-2")
def _transpose_product_2(rng):
    b = B(rng)
    a, c = b.x("a", b.dim(), 4), b.x("c", 4, b.dim())
    return b.out(b.op("Permute", b.op("MatMul", a, c), attrs=[(1, 0)])), ["transpose"]


@case("transpose-of-matmul-3", "matmul-of-transposes-3")
def _transpose_product_3(rng):
    b = B(rng)
    a, c = b.x("a", 2, b.dim(), 4), b.x("c", 2, 4, b.dim())
    return b.out(b.op("Permute", b.op("MatMul", a, c), attrs=[(0, 2, 1)])), ["transpose"]


@case("permute-out-of-add", "permute-out-of-mul", "permute-out-of-scale")
def _permuted_elementwise(rng):
    b = B(rng)
    shape = (b.dim(), b.dim(), b.dim())
    p = (2, 0, 1)
    pa, pb = b.op("Permute", b.x("a", *shape), attrs=[p]), b.op("Permute", b.x("b", *shape), attrs=[p])
    return b.out(b.op("Add", pa, pb), b.op("Mul", pa, pb), b.op("Mul", pa, b.fill(3.0, pa))), ["transpose"]


# ----------------------------------------------------------------------------------------------- reshape
@case("reshape-compose", "reshape-identity", "expand-identity")
def _reshapes(rng):
    b = B(rng)
    m, n = b.dim(), b.dim()
    x = b.x("x", m, n)
    back = b.op("Reshape", b.op("Reshape", x, attrs=[(n, m)]), attrs=[(m, n)])
    flat = b.op("Reshape", b.op("Reshape", x, attrs=[(m * n,)]), attrs=[(1, m * n)])
    same = b.op("Expand", x, attrs=[(m, n)])
    return b.out(back, flat, same), ["reshape"]


@case("reshape-out-of-add", "reshape-out-of-mul", "reshape-out-of-scale")
def _reshaped_elementwise(rng):
    b = B(rng)
    m, n = b.dim(), b.dim()
    ra = b.op("Reshape", b.x("a", m, n), attrs=[(m * n,)])
    rb = b.op("Reshape", b.x("b", m, n), attrs=[(m * n,)])
    return b.out(b.op("Add", ra, rb), b.op("Mul", ra, rb), b.op("Mul", ra, b.fill(0.25, ra))), ["reshape"]


@case("reshape-into-add")
def _reshaped_sum(rng):
    b = B(rng)
    m, n = b.dim(), b.dim()
    return b.out(b.op("Reshape", b.op("Add", b.x("a", m * n), b.x("b", m * n)), attrs=[(m, n)])), ["reshape"]


# ------------------------------------------------------------------------------------------ distributive
@case("mul-factor-right", "mul-factor-left")
def _common_factor(rng):
    b = B(rng)
    shape = (b.dim(), b.dim())
    x, y, c = b.x("x", *shape), b.x("y", *shape), b.x("c", *shape)
    right = b.op("Add", b.op("Mul", x, c), b.op("Mul", y, c))
    left = b.op("Add", b.op("Mul", c, x), b.op("Mul", c, y))
    return b.out(right, left), ["distributive"]


@case("matmul-factor-right", "matmul-factor-left", "matmul-expand-right", "matmul-expand-left")
def _matmul_sums(rng):
    b = B(rng)
    m, k, n = b.dim(), b.dim(), b.dim()
    a1, a2, w = b.x("a1", m, k), b.x("a2", m, k), b.x("w", k, n)
    w2 = b.x("w2", k, n)
    right = b.op("Add", b.op("MatMul", a1, w), b.op("MatMul", a2, w))
    left = b.op("Add", b.op("MatMul", a1, w), b.op("MatMul", a1, w2))
    return b.out(right, left), ["distributive"]


@case("matmul-factor-right-sub", "matmul-factor-left-sub")
def _matmul_differences(rng):
    b = B(rng)
    m, k, n = b.dim(), b.dim(), b.dim()
    a1, a2, w, w2 = b.x("a1", m, k), b.x("a2", m, k), b.x("w", k, n), b.x("w2", k, n)
    right = b.op("Sub", b.op("MatMul", a1, w), b.op("MatMul", a2, w))
    left = b.op("Sub", b.op("MatMul", a1, w), b.op("MatMul", a1, w2))
    return b.out(right, left), ["distributive"]


# ------------------------------------------------------------------------------------------------ scalar
@case("fold-mul", "fold-add", "fold-sub", "fold-div", "fold-neg", "fold-expand", "fold-reshape")
def _constant_arithmetic(rng):
    b = B(rng)
    m, n = b.dim(), b.dim()
    x = b.x("x", m, n)
    u, v = b.fill(rng.uniform(0.5, 2), x), b.fill(rng.uniform(-5, -3), x)  # no cancellation
    small = b.g.fill(1.25, (1, n), F32)
    outs = [b.op("Mul", x, b.op(op, u, v)) for op in ("Mul", "Add", "Sub", "Div")]
    outs.append(b.op("Mul", x, b.op("Neg", u)))
    outs.append(b.op("Add", x, b.op("Expand", small, attrs=[(m, n)])))
    outs.append(b.op("Add", x, b.op("Reshape", b.g.fill(0.75, (n, m), F32), attrs=[(m, n)])))
    return b.out(*outs), ["scalar"]


@case("mul-one", "add-zero", "sub-zero", "div-one", "neg-neg")
def _identities(rng):
    b = B(rng)
    x = b.x("x", b.dim(), b.dim())
    outs = [b.op("Mul", x, b.fill(1.0, x)), b.op("Add", x, b.fill(0.0, x)), b.op("Sub", x, b.fill(0.0, x)),
            b.op("Div", x, b.fill(1.0, x)), b.op("Neg", b.op("Neg", x))]
    return b.out(*[b.op("Exp", o) for o in outs]), ["scalar"]


@case("scalar-mul-to-right", "scalar-add-to-right", "div-by-scalar", "scalar-mul-chain", "scalar-add-chain")
def _scalar_forms(rng):
    b = B(rng)
    x = b.x("x", b.dim(), b.dim())
    c1, c2 = b.fill(rng.uniform(0.5, 2), x), b.fill(rng.uniform(0.5, 2), x)
    outs = [b.op("Mul", c1, x), b.op("Add", c2, x), b.op("Div", x, c1),
            b.op("Mul", b.op("Mul", x, c1), c2), b.op("Add", b.op("Add", x, c1), c2)]
    return b.out(*outs), ["scalar"]


# --------------------------------------------------------------------------------------------- reduction
@case("sum-last-through-matmul", "sum-rows-through-matmul")
def _sum_of_product(rng):
    b = B(rng)
    a, c = b.x("a", 2, b.dim(), 5), b.x("c", 2, 5, b.dim())
    y = b.op("MatMul", a, c)
    return b.out(b.op("Sum", y, attrs=[(2,)]), b.op("Sum", y, attrs=[(1,)])), ["reduction"]


@case("sum-of-add", "sum-of-scaled")
def _sum_of_elementwise(rng):
    b = B(rng)
    shape = (b.dim(), b.dim())
    x, y = b.x("x", *shape), b.x("y", *shape)
    return b.out(b.op("Sum", b.op("Add", x, y), attrs=[(1,)]),
                 b.op("Sum", b.op("Mul", x, b.fill(2.5, x)), attrs=[(0,)])), ["reduction"]


# --------------------------------------------------------------------------------------------- broadcast
#: the elementwise ops of the op table, whose broadcast rules broadcast.egg generates
ELEMENTWISE = [o for o in ops.OPS.values() if o.kind in ("unary", "binary", "compare")]
LOGICAL = ("And", "Or", "Not")  # operands are bool


@case(*[f"expand-out-of-{rulesets.rule_name(o)}" for o in ELEMENTWISE], "expand-out-of-cast",
      *[f"expand-out-of-{rulesets.rule_name(o)}-scalar" for o in ELEMENTWISE if o.arity == 2],
      *[f"expand-out-of-scalar-{rulesets.rule_name(o)}" for o in ELEMENTWISE if o.arity == 2])
def _broadcasts(rng):
    """Every elementwise op of broadcasts (and of a broadcast and a scalar), positive operands (log, sqrt,
    pow and division stay finite), bool ones for the logical ops."""
    b = B(rng)
    m, n = b.dim(), b.dim()
    rows = [b.x("pos_a", 1, n), b.x("pos_b", 1, n)]
    bools = [b.op("Gt", r, b.fill(1.0, r)) for r in rows]
    outs = []
    for o in ELEMENTWISE:
        a, c = bools if o.name in LOGICAL else rows
        ea, ec = (b.op("Expand", t, attrs=[(m, n)]) for t in (a, c))
        if o.arity == 1:
            outs.append(b.op(o.name, ea))
            continue
        scalar = b.g.fill(1.0 if o.name in LOGICAL else 1.5, (m, n), "bool" if o.name in LOGICAL else F32)
        outs += [b.op(o.name, ea, ec), b.op(o.name, ea, scalar), b.op(o.name, scalar, ea)]
    outs.append(b.op("Cast", b.op("Expand", rows[0], attrs=[(m, n)]), attrs=["float64"]))
    return b.out(*outs), ["broadcast"]


@case("sum-of-broadcast", "max-of-broadcast", "min-of-broadcast")
def _reductions_of_broadcasts(rng):
    b = B(rng)
    m, n, k = b.dim(), b.dim(), b.dim()
    row = b.op("Expand", b.x("r", 1, n), attrs=[(m, n)])
    point = b.op("Expand", b.x("p", 1, 1, k), attrs=[(m, n, k)])
    outs = [b.op(r, row, attrs=[(0,)]) for r in ("Sum", "Amax", "Amin")]
    outs += [b.op(r, point, attrs=[(1,)]) for r in ("Sum", "Amax", "Amin")]  # other dims stay broadcast
    return b.out(*outs), ["reduction"]


@case("sum-of-broadcast-factor-right", "sum-of-broadcast-factor-left")
def _sums_of_broadcast_factors(rng):
    """A per-row scale summed over the row, on either side of the Mul, and an outer product's row sums."""
    b = B(rng)
    m, n = b.dim(), b.dim()
    x = b.x("x", m, n)
    rows = b.op("Expand", b.x("s", m, 1), attrs=[(m, n)])
    outer = b.op("Mul", rows, b.op("Expand", b.x("v", 1, n), attrs=[(m, n)]))
    outs = [b.op("Sum", b.op("Mul", x, rows), attrs=[(1,)]), b.op("Sum", b.op("Mul", rows, x), attrs=[(1,)]),
            b.op("Sum", outer, attrs=[(1,)])]
    return b.out(*outs), ["reduction"]


@case("max-of-broadcast-offset-right", "max-of-broadcast-offset-left", "max-of-broadcast-offset-sub",
      "min-of-broadcast-offset-right", "min-of-broadcast-offset-left", "min-of-broadcast-offset-sub")
def _extrema_of_broadcast_offsets(rng):
    b = B(rng)
    m, n, k = b.dim(), b.dim(), b.dim()
    x = b.x("x", m, n, k)
    offset = b.op("Expand", b.x("c", m, 1, k), attrs=[(m, n, k)])
    forms = [b.op("Add", x, offset), b.op("Add", offset, x), b.op("Sub", x, offset)]
    return b.out(*[b.op(r, e, attrs=[(1,)]) for r in ("Amax", "Amin") for e in forms]), ["reduction"]


@case("sum-of-row-product-2d-right", "sum-of-row-product-2d-left", "sum-of-row-product-3d-right",
      "sum-of-row-product-3d-left")
def _sums_of_row_products(rng):
    """A broadcast row times x summed along the row: in 2-d, and in 3-d with one row or one per batch."""
    b = B(rng)
    p, m, n = b.dim(2, 3), b.dim(), b.dim()
    x, x3 = b.x("x", m, n), b.x("x3", p, m, n)
    row = b.op("Expand", b.x("v", 1, n), attrs=[(m, n)])
    shared = b.op("Expand", b.x("v3", 1, 1, n), attrs=[(p, m, n)])
    per_batch = b.op("Expand", b.x("vb", p, 1, n), attrs=[(p, m, n)])
    outs = [b.op("Sum", b.op("Mul", x, row), attrs=[(1,)]), b.op("Sum", b.op("Mul", row, x), attrs=[(1,)])]
    outs += [b.op("Sum", b.op("Mul", x3, v), attrs=[(2,)]) for v in (shared, per_batch)]
    outs += [b.op("Sum", b.op("Mul", v, x3), attrs=[(2,)]) for v in (shared, per_batch)]
    return b.out(*outs), ["reduction"]


@case("sum-of-expand-over-kept-dim", "max-of-expand-over-kept-dim", "min-of-expand-over-kept-dim")
def _reductions_over_kept_dims(rng):
    b = B(rng)
    m, n, k = b.dim(), b.dim(), b.dim()
    row = b.op("Expand", b.x("r", 1, n), attrs=[(m, n)])
    column = b.op("Expand", b.x("c", m, 1, k), attrs=[(m, n, k)])
    outs = [b.op(r, row, attrs=[(1,)]) for r in ("Sum", "Amax", "Amin")]
    outs += [b.op(r, column, attrs=[(d,)]) for r in ("Sum", "Amax", "Amin") for d in (0, 2)]
    return b.out(*outs), ["reduction"]


# ----------------------------------------------------------------------------------------------- softmax
@case("softmax-shift-invariance", "softmax-shift-invariance-sub")
def _shifted_softmax(rng):
    """Softmax of x plus, and minus, a row constant (minus its own row max, as code stabilises by hand)."""
    b = B(rng)
    m, n = b.dim(), b.dim()
    x = b.x("x", m, n)
    outs = []
    for op, c in (("Add", b.x("c", m, 1)), ("Sub", b.op("Amax", x, attrs=[(1,)]))):
        shifted = b.op(op, x, b.op("Expand", c, attrs=[(m, n)]))
        top = b.op("Expand", b.op("Amax", shifted, attrs=[(1,)]), attrs=[(m, n)])
        e = b.op("Exp", b.op("Sub", shifted, top))
        outs.append(b.op("Div", e, b.op("Expand", b.op("Sum", e, attrs=[(1,)]), attrs=[(m, n)])))
    return b.out(*outs), ["softmax"]


@case("logsumexp-shift-out", "logsumexp-shift-out-swapped", "logsumexp-of-broadcast")
def _logsumexps_of_broadcast_sums(rng):
    """logsumexp over rows of a column plus a row broadcast (either order), as PyTorch decomposes it: the
    guarded row max subtracted before exp, added after log, the kept dim reshaped away."""
    b = B(rng)
    m, n = b.dim(), b.dim()
    col = b.op("Expand", b.x("u", m, 1), attrs=[(m, n)])
    row = b.op("Expand", b.x("v", 1, n), attrs=[(m, n)])

    def logsumexp(x):
        top = b.op("Amax", x, attrs=[(1,)])
        infinite = b.op("Eq", b.op("Abs", top), b.g.fill(float("inf"), (m, 1), F32))
        shift = b.op("Where", infinite, b.g.fill(0.0, (m, 1), F32), top)
        total = b.op("Sum", b.op("Exp", b.op("Sub", x, b.op("Expand", shift, attrs=[(m, n)]))), attrs=[(1,)])
        return b.op("Add", b.op("Log", b.op("Reshape", total, attrs=[(m,)])), b.op("Reshape", shift, attrs=[(m,)]))
    return b.out(logsumexp(b.op("Add", col, row)), logsumexp(b.op("Add", row, col))), ["softmax"]


@case("row-division-after-matmul", "row-scale-after-matmul")
def _normalised_product(rng):
    b = B(rng)
    m, k, n = b.dim(), b.dim(), b.dim()
    a, w, r = b.x("a", m, k), b.x("w", k, n), b.x("pos_r", m, 1)
    er = b.op("Expand", r, attrs=[(m, k)])
    return b.out(b.op("MatMul", b.op("Div", a, er), w), b.op("MatMul", b.op("Mul", a, er), w)), ["softmax"]


@case("row-offset-after-matmul")
def _centred_product(rng):
    b = B(rng)
    m, k, n = b.dim(), b.dim(), b.dim()
    a, w, mean = b.x("a", m, k), b.x("w", k, n), b.x("mean", m, 1)
    return b.out(b.op("MatMul", b.op("Sub", a, b.op("Expand", mean, attrs=[(m, k)])), w)), ["softmax"]


# ------------------------------------------------------------------------------- kernel layer: fusion
KERNEL_SETS = ["fusion", "layout", "tiling"]
# an op-table entry's rule-test case: listing its name here tests its generated pointwise-<op> rule(s)
UNARY_OPS = ["Neg", "Exp", "Log", "Sqrt", "Rsqrt", "Recip", "Abs", "Relu", "Sigmoid", "Tanh", "Erf", "Gelu",
             "GeluTanh", "Silu", "Mish", "Selu", "Log1p", "Softplus", "Hardswish", "Hardsigmoid"]
BINARY_OPS = ["Add", "Sub", "Mul", "Div", "Pow", "Maximum", "Minimum"]


@case(*[f"pointwise-{ops.get(o).epi}" for o in UNARY_OPS + BINARY_OPS],
      *[f"pointwise-{ops.get(o).epi}-scalar" for o in BINARY_OPS], "pointwise-cast")
def _one_op_kernels(rng):
    b = B(rng)
    shape = (b.dim(), b.dim())
    x, p = b.x("x", *shape), b.x("pos_p", *shape)
    outs = [b.op(o, p) for o in UNARY_OPS]
    outs += [b.op(o, p, x) for o in BINARY_OPS]
    outs += [b.op(o, p, b.fill(1.5, p)) for o in BINARY_OPS]
    outs.append(b.op("Cast", x, attrs=["float32"]))
    return b.out(*outs), ["fusion"]


@case("inline-pointwise-0", "inline-pointwise-1", "inline-pointwise-2", "inline-pointwise-3",
      "pointwise-broadcast-read-0", "pointwise-broadcast-read-1", "pointwise-broadcast-read-2",
      "pointwise-broadcast-read-3")
def _pointwise_chains(rng):
    b = B(rng)
    m, n = b.dim(), b.dim()
    x, y, z = b.x("x", m, n), b.x("y", m, n), b.x("z", m, n)
    bias = b.op("Expand", b.x("bias", 1, n), attrs=[(m, n)])
    deep = b.op("Add", b.op("Exp", b.op("Relu", b.op("Neg", b.op("Mul", z, b.fill(0.5, z))))), y)   # slots 0, 2, 3
    swapped = b.op("Sub", y, b.op("Tanh", x))                                                          # slot 1
    cast = b.op("Cast", b.op("Exp", b.op("Cast", b.op("Mul", x, b.fill(0.25, x)), attrs=["float32"])),
                attrs=["float32"])
    broadcast = [b.op("Add", bias, x), b.op("Add", x, bias),
                 b.op("Add", b.op("Exp", bias), y), b.op("Add", b.op("Exp", b.op("Relu", bias)), y)]
    return b.out(deep, swapped, cast, *broadcast), ["fusion"]


@case("gemm-from-matmul", "gemm-epilogue-0", "gemm-epilogue-1", "gemm-epilogue-2", "gemm-epilogue-3")
def _gemm_epilogues(rng):
    b = B(rng)
    m, k, n = b.dim(), b.dim(), b.dim()
    a, w, y = b.x("a", m, k), b.x("w", k, n), b.x("y", m, n)
    g = b.op("MatMul", a, w)
    outs = [b.op("Relu", g), b.op("Add", y, g), b.op("Add", b.op("Exp", g), y),
            b.op("Add", b.op("Exp", b.op("Relu", g)), y)]
    return b.out(*outs), ["fusion"]


@case("gemm-extra-inline-0", "gemm-extra-inline-1", "gemm-extra-inline-2", "gemm-extra-inline-3")
def _gemm_extra_producers(rng):
    """A GEMM epilogue reading an elementwise result (exp of an input) at extra slots 0 to 3."""
    b = B(rng)
    m, k, n = b.dim(), b.dim(), b.dim()
    a, w, y, z = b.x("a", m, k), b.x("w", k, n), b.x("y", m, n), b.x("z", m, n)
    g, ez = b.op("MatMul", a, w), b.op("Exp", z)
    outs = [b.op("Add", ez, g), b.op("Add", g, ez), b.op("Add", ez, b.op("Add", g, y)),
            b.op("Add", b.op("Add", g, y), ez)]
    return b.out(*outs), ["fusion"]


@case("row-sum", "row-max", "row-min", "reduction-prologue", "reduction-epilogue-0", "reduction-epilogue-1",
      "reduction-epilogue-2", "reduction-epilogue-3")
def _row_reductions(rng):
    b = B(rng)
    m, n = b.dim(), b.dim()
    x, small = b.x("x", m, n), b.x("small", m, 1)
    s = b.op("Sum", x, attrs=[(1,)])
    outs = [b.op("Mul", s, b.fill(2.0, s)), b.op("Add", small, s), b.op("Add", b.op("Exp", s), small),
            b.op("Add", b.op("Exp", b.op("Relu", s)), small), b.op("Sum", b.op("Exp", x), attrs=[(1,)]),
            b.op("Amax", x, attrs=[(1,)]), b.op("Amin", x, attrs=[(1,)])]
    return b.out(*outs), ["fusion"]


@case("long-row", *[f"split-row-reduction-{split}-{count}" for split in (8, 64) for count in (0, 1, 2)])
def _long_rows(rng):
    """Row reductions over rows of 8192 to 16384 elements, reading x alone, x in a prologue, and x and y."""
    b = B(rng)
    m, n = b.dim(1, 3), 64 * b.dim(128, 256)
    x, y = b.x("x", m, n), b.x("y", m, n)
    outs = [b.op("Amax", x, attrs=[(1,)]), b.op("Sum", b.op("Exp", x), attrs=[(1,)]),
            b.op("Sum", b.op("Mul", x, y), attrs=[(1,)])]
    return b.out(*outs), ["fusion", "tiling"]


def _softmax_parts(b, x, shape):
    last = (len(shape) - 1,)
    c = b.op("Sub", x, b.op("Expand", b.op("Amax", x, attrs=[last]), attrs=[shape]))
    return c, last


@case("softmax-kernel", "log-softmax-kernel")
def _softmaxes(rng):
    b = B(rng)
    shape = (2, b.dim(), b.dim())
    x = b.x("x", *shape)
    c, last = _softmax_parts(b, x, shape)
    e = b.op("Exp", c)
    soft = b.op("Div", e, b.op("Expand", b.op("Sum", e, attrs=[last]), attrs=[shape]))
    logsoft = b.op("Sub", c, b.op("Expand", b.op("Log", b.op("Sum", e, attrs=[last])), attrs=[shape]))
    return b.out(soft, logsoft), ["composite"]


@case("logsumexp-kernel", "logsumexp-kernel-squeezed")
def _logsumexps(rng):
    """PyTorch's decomposition of logsumexp over the last dim: the max shift is 0 where the max is infinite."""
    b = B(rng)
    shape = (2, b.dim(), b.dim())
    x = b.x("x", *shape)
    last = (len(shape) - 1,)
    m = b.op("Amax", x, attrs=[last])
    inf = b.g.fill(float("inf"), b.g.nodes[m].shape, F32)
    w = b.op("Where", b.op("Eq", b.op("Abs", m), inf), b.fill(0.0, m), m)
    e = b.op("Exp", b.op("Sub", x, b.op("Expand", w, attrs=[shape])))
    s = b.op("Sum", e, attrs=[last])
    kept = b.op("Add", b.op("Log", s), w)
    squeezed_shape = shape[:-1]
    squeezed = b.op("Add", b.op("Log", b.op("Reshape", s, attrs=[squeezed_shape])),
                    b.op("Reshape", w, attrs=[squeezed_shape]))
    return b.out(kept, squeezed), ["composite"]


@case("layer-norm-kernel", "layer-norm-moments", "rms-norm-kernel", "rms-norm-kernel-square", "norm-affine",
      "norm-scale")
def _norms(rng):
    b = B(rng)
    m, n = b.dim(), b.dim()
    x = b.x("x", m, n)
    row = (m, 1)
    inv, eps = b.g.fill(1.0 / n, row, F32), b.g.fill(1e-5, row, F32)

    def mean(t):
        return b.op("Mul", b.op("Sum", t, attrs=[(1,)]), inv)

    def scale_rows(t, sq):
        return b.op("Mul", t, b.op("Expand", b.op("Rsqrt", b.op("Add", mean(sq), eps)), attrs=[(m, n)]))
    c = b.op("Sub", x, b.op("Expand", mean(x), attrs=[(m, n)]))
    layer = scale_rows(c, b.op("Mul", c, c))
    rms = scale_rows(x, b.op("Pow", x, b.fill(2.0, x)))
    rms_square = scale_rows(x, b.op("Mul", x, x))
    w = b.op("Expand", b.x("w", 1, n), attrs=[(m, n)])
    shift = b.op("Expand", b.x("shift", 1, n), attrs=[(m, n)])
    affine = b.op("Add", b.op("Mul", layer, w), shift)
    return b.out(affine, b.op("Mul", rms, w), rms_square), ["composite"]


@case("addmm")
def _bias_product(rng):
    b = B(rng)
    m, k, n = b.dim(), b.dim(), b.dim()
    bias = b.op("Expand", b.x("bias", 1, n), attrs=[(m, n)])
    return b.out(b.op("Add", b.op("MatMul", b.x("a", m, k), b.x("w", k, n)), bias)), ["composite"]


@case("gemm-read-a-transposed-2", "gemm-read-b-transposed-2", "gemm-read-a-transposed-3",
      "gemm-read-b-transposed-3", "gemm-read-a-transposed-4", "gemm-read-b-transposed-4")
def _transposed_operands(rng):
    b = B(rng)
    m, k, n = b.dim(), b.dim(), b.dim()
    outs = []
    for batch, swap in (((), (1, 0)), ((2,), (0, 2, 1)), ((2, 3), (0, 1, 3, 2))):
        at, bt = b.x(f"at{len(batch)}", *batch, k, m), b.x(f"bt{len(batch)}", *batch, n, k)
        outs.append(b.op("MatMul", b.op("Permute", at, attrs=[swap]), b.op("Permute", bt, attrs=[swap])))
    return b.out(*outs), ["fusion", "layout"]


# ------------------------------------------------------------------------------------- concat, regrouping
@case("slice-of-slice", "slice-whole", "concat-adjacent-slices")
def _slices(rng):
    b = B(rng)
    m, n = b.dim(), b.dim(4, 9)
    x = b.x("x", m, n)
    cut = rng.randint(1, n - 1)
    halves = b.op("Concat", b.op("Slice", x, attrs=[1, 0, cut]), b.op("Slice", x, attrs=[1, cut, n]), attrs=[1])
    inner = b.op("Slice", b.op("Slice", x, attrs=[1, 1, n]), attrs=[1, 1, n - 1])
    return b.out(b.op("Exp", halves), inner), ["concat"]


@case("add-out-of-concat", "expand-out-of-concat")
def _concat_of_biased(rng):
    b = B(rng)
    m, n1, n2 = b.dim(), b.dim(), b.dim()
    biased = [b.op("Add", b.x(f"y{i}", m, n), b.op("Expand", b.x(f"b{i}", 1, n), attrs=[(m, n)]))
              for i, n in enumerate((n1, n2))]
    return b.out(b.op("Concat", *biased, attrs=[1])), ["concat"]


@case("biases-into-concat")
def _biased_slices(rng):
    """A merged projection's output sliced in two, each slice with its own bias row."""
    b = B(rng)
    m, n1, n2 = b.dim(), b.dim(), b.dim()
    y = b.x("y", m, n1 + n2)
    biased = [b.op("Add", b.op("Slice", y, attrs=[1, lo, hi]), b.op("Expand", b.x(f"b{i}", 1, hi - lo),
                                                                    attrs=[(m, hi - lo)]))
              for i, (lo, hi) in enumerate(((0, n1), (n1, n1 + n2)))]
    return b.out(*biased), ["concat"]


@case("expand-out-of-matmul")
def _broadcast_row_product(rng):
    b = B(rng)
    m, k, n = b.dim(), b.dim(), b.dim()
    rows = b.op("Expand", b.x("row", 2, 1, k), attrs=[(2, m, k)])
    return b.out(b.op("MatMul", rows, b.x("w", 2, k, n))), ["broadcast"]


@case("product-of-constant-rows", "product-by-equal-rows")
def _constant_row_products(rng):
    """A column broadcast along the rows times a matrix, and a matrix times a row broadcast down the rows."""
    b = B(rng)
    m, k, n = b.dim(), b.dim(), b.dim()
    constant_rows = b.op("Expand", b.x("column", m, 1), attrs=[(m, k)])
    equal_rows = b.op("Expand", b.x("row", 1, n), attrs=[(k, n)])
    return b.out(b.op("MatMul", constant_rows, b.x("w", k, n)), b.op("MatMul", b.x("x", m, k), equal_rows)), \
        ["broadcast"]


@case("expand-out-of-matmul-right")
def _broadcast_column_product(rng):
    b = B(rng)
    m, k, n = b.dim(), b.dim(), b.dim()
    columns = b.op("Expand", b.x("column", 2, k, 1), attrs=[(2, k, n)])
    return b.out(b.op("MatMul", b.x("a", 2, m, k), columns)), ["broadcast"]


@case("row-scale-left-out-of-matmul", "row-scale-right-out-of-matmul", "column-scale-left-out-of-matmul",
      "column-scale-right-out-of-matmul")
def _scaled_rows_and_columns(rng):
    """Rows scaled by a broadcast column (u v^T is one: both operands broadcast) and columns by a row, each
    with the scale on either side of the Mul, in 2-d and with a batch dim."""
    b = B(rng)
    m, k, n = b.dim(), b.dim(), b.dim()
    a, w = b.x("a", m, k), b.x("w", k, n)
    rows = b.op("Expand", b.x("u", m, 1), attrs=[(m, k)])
    outer = b.op("Mul", rows, b.op("Expand", b.x("v", 1, k), attrs=[(m, k)]))
    cols = b.op("Expand", b.x("c", 1, n), attrs=[(k, n)])
    batch_rows = b.op("Expand", b.x("bu", 1, m, 1), attrs=[(2, m, k)])
    outs = [b.op("MatMul", outer, w), b.op("MatMul", b.op("Mul", a, rows), w),
            b.op("MatMul", a, b.op("Mul", cols, w)), b.op("MatMul", a, b.op("Mul", w, cols)),
            b.op("MatMul", b.op("Mul", b.x("ba", 2, m, k), batch_rows), b.x("bw", 2, k, n))]
    return b.out(*outs), ["broadcast"]


@case("add-interchange")
def _sum_of_sums(rng):
    b = B(rng)
    shape = (b.dim(), b.dim())
    a, c, d, e = (b.x(name, *shape) for name in "acde")
    return b.out(b.op("Add", b.op("Add", a, c), b.op("Add", d, e))), ["distributive"]


@case("broadcast-add-chain")
def _two_biases(rng):
    b = B(rng)
    m, n = b.dim(), b.dim()
    bias = [b.op("Expand", b.x(f"b{i}", 1, n), attrs=[(m, n)]) for i in range(2)]
    return b.out(b.op("Add", b.op("Add", b.x("x", m, n), bias[0]), bias[1])), ["broadcast"]


@case("scale-over-add")
def _scaled_sum(rng):
    b = B(rng)
    shape = (b.dim(), b.dim())
    total = b.op("Add", b.x("x", *shape), b.x("y", *shape))
    return b.out(b.op("Mul", total, b.fill(0.125, total))), ["distributive"]


# ------------------------------------------------------------------------------------------------ attention
def _softmax_last(b, x):
    shape = b.shape(x)
    last = (len(shape) - 1,)
    e = b.op("Exp", b.op("Sub", x, b.op("Expand", b.op("Amax", x, attrs=[last]), attrs=[shape])))
    return b.op("Div", e, b.op("Expand", b.op("Sum", e, attrs=[last]), attrs=[shape]))


def _attention_inputs(b, batch, tag=""):
    sq, sk, d, dv = b.dim(), b.dim(), b.dim(), b.dim()
    swap = tuple(range(len(batch))) + (len(batch) + 1, len(batch))
    q, k, v = b.x(f"q{tag}", *batch, sq, d), b.x(f"k{tag}", *batch, sk, d), b.x(f"v{tag}", *batch, sk, dv)
    return q, b.op("Permute", k, attrs=[swap]), v, (*batch, sq, sk)


@case("attention", "attention-scaled", "attention-biased", "attention-scaled-biased", "attention-read-k-3")
def _attention_forms(rng):
    b = B(rng)
    q, kt, v, scores_shape = _attention_inputs(b, (2,))
    s = b.op("MatMul", q, kt)
    bias = b.op("Expand", b.x("bias", 1, *scores_shape[1:]), attrs=[scores_shape])
    scaled = b.op("Mul", s, b.fill(0.3, s))
    forms = [s, scaled, b.op("Add", s, bias), b.op("Add", scaled, bias)]
    return b.out(*[b.op("MatMul", _softmax_last(b, x), v) for x in forms]), ["composite", "attention"]


@case("attention-full-bias", "attention-scaled-full-bias")
def _attention_full_bias(rng):
    """A bias of the scores' own shape (SDPA's attn_mask, T5's position bias): no Expand to strip."""
    b = B(rng)
    q, kt, v, scores_shape = _attention_inputs(b, (2,))
    s = b.op("MatMul", q, kt)
    bias = b.x("bias", *scores_shape)
    forms = [b.op("Add", s, bias), b.op("Add", b.op("Mul", s, b.fill(0.3, s)), bias)]
    return b.out(*[b.op("MatMul", _softmax_last(b, x), v) for x in forms]), ["composite", "attention"]


@case("scores-first", "scaled-scores-first", "scores-one-bias", "scaled-scores-one-bias")
def _attention_two_biases(rng):
    """Bloom's spelling: bias + (scaled) q k^T (baddbmm's order), then a second bias (the causal mask)."""
    b = B(rng)
    q, kt, v, scores_shape = _attention_inputs(b, (2,))
    s = b.op("MatMul", q, kt)
    alibi = b.op("Expand", b.x("alibi", 2, 1, scores_shape[-1]), attrs=[scores_shape])
    mask = b.x("mask", *scores_shape)
    forms = [b.op("Add", b.op("Add", alibi, x), mask) for x in (s, b.op("Mul", s, b.fill(0.3, s)))]
    return b.out(*[b.op("MatMul", _softmax_last(b, x), v) for x in forms]), ["composite", "attention"]


@case("attention-read-k-2", "attention-read-k-4")
def _attention_ranks(rng):
    b = B(rng)
    outs = []
    for batch in ((), (2, 2)):
        q, kt, v, _ = _attention_inputs(b, batch, tag=str(len(batch)))
        outs.append(b.op("MatMul", _softmax_last(b, b.op("MatMul", q, kt)), v))
    return b.out(*outs), ["composite", "attention"]


@case("matmul-unflatten-rows", "matmul-flatten-rows-to-vector", "matmul-flatten-summed-rows")
def _flattened_rows_product(rng):
    """A linear map of a 3-d activation as ATen runs it, then a mean over its rows (the batched form is
    reduced, then flattened again); and batched products by a vector or a matrix broadcast along its own dims
    too ([1, k, 1] to [n, k, c]; [1, 1, c] to [n, k, c]), which are no flat products by a vector or a matrix."""
    b = B(rng)
    n, m, k, c = b.dim(1, 3), b.dim(), b.dim(), b.dim()
    x, w = b.x("x", n, m, k), b.x("w", k, c)
    flat = b.op("MatMul", b.op("Reshape", x, attrs=[(n * m, k)]), w)
    y = b.op("Reshape", flat, attrs=[(n, m, c)])
    column = b.op("Expand", b.x("v", 1, k, 1), attrs=[(n, k, c)])
    row = b.op("Expand", b.x("u", 1, 1, c), attrs=[(n, k, c)])
    return b.out(b.op("Sum", y, attrs=[(1,)]), b.op("Sum", y, attrs=[(2,)]), b.op("MatMul", x, column),
                 b.op("MatMul", b.x("x1", n, 1, k), row)), ["reshape", "reduction"]


@case("matmul-unflatten-batch")
def _flattened_batch_product(rng):
    b = B(rng)
    n, h, m, k, c = 2, b.dim(1, 3), b.dim(), b.dim(), b.dim()
    x, w = b.x("x", n, h, m, k), b.x("w", n, h, k, c)
    flat = b.op("MatMul", b.op("Reshape", x, attrs=[(n * h, m, k)]), b.op("Reshape", w, attrs=[(n * h, k, c)]))
    return b.out(b.op("Reshape", flat, attrs=[(n, h, m, c)])), ["reshape"]


@case("transpose-of-flattened-batch")
def _flattened_batch_transpose(rng):
    """K^T of a bmm over flattened heads: the product of two flattened 4-d operands, reshaped back."""
    b = B(rng)
    n, h, m, k = 2, b.dim(1, 3), b.dim(), b.dim()
    q, key = b.x("q", n, h, m, k), b.x("k", n, h, m, k)
    kt = b.op("Permute", b.op("Reshape", key, attrs=[(n * h, m, k)]), attrs=[(0, 2, 1)])
    flat = b.op("MatMul", b.op("Reshape", q, attrs=[(n * h, m, k)]), kt)
    return b.out(b.op("Reshape", flat, attrs=[(n, h, m, m)])), ["reshape", "transpose"]


@case("attention-guarded-rows", "attention-unguarded-product")
def _sdpa_guard(rng):
    b = B(rng)
    q, kt, v, shape = _attention_inputs(b, (2,))
    s = b.op("MatMul", q, kt)
    p = _softmax_last(b, s)
    last = (len(shape) - 1,)
    alive = b.op("Amax", b.op("Not", b.op("Eq", s, b.g.fill(float("-inf"), shape, F32))), attrs=[last])
    dead_row = b.op("Expand", b.op("Not", alive), attrs=[shape])
    guarded = b.op("Where", dead_row, b.g.fill(0.0, shape, F32), p)
    return b.out(b.op("MatMul", guarded, v)), ["composite", "attention"]


@case("masked-fill-as-bias", "masked-fill-as-full-bias")
def _masked_scores(rng):
    b = B(rng)
    m, n = b.dim(), b.dim()
    s = b.x("s", 2, m, n)
    mask = b.op("Lt", b.x("u", 1, m, n), b.g.fill(0.0, (1, m, n), F32))
    full = b.op("Lt", b.x("w", 2, m, n), b.g.fill(0.0, (2, m, n), F32))
    outs = [b.op("Where", cond, b.g.fill(fill, (2, m, n), F32), s)
            for cond in (b.op("Expand", mask, attrs=[(2, m, n)]), full)
            for fill in (float("-inf"), torch.finfo(torch.float32).min)]  # what models fill with: both are a bias
    return b.out(*outs), ["attention"]


@case("attention-causal", "causal-bias-of-mask")
def _causal_attention(rng):
    """A constant causal bias, and masked_fill with a constant causal mask, as the frontend marks them: both
    become the causal kernel. Sq < Sk: every row sees a key, and the diagonal must be the bottom-right one."""
    b = B(rng)
    sk, d = b.dim(3, 7), b.dim()
    sq = b.dim(2, sk - 1)
    q, k, v = b.x("q", 2, sq, d), b.x("k", 2, sk, d), b.x("v", 2, sk, d)
    s = b.op("MatMul", q, b.op("Permute", k, attrs=[(0, 2, 1)]))
    above = torch.ones(1, sq, sk, dtype=torch.bool).triu(sk - sq + 1)
    bias = b.g.param("bias", torch.zeros(1, sq, sk).masked_fill(above, float("-inf")))
    biased = b.op("Add", s, b.op("Expand", bias, attrs=[(2, sq, sk)]))
    masked = b.op("Where", b.op("Expand", b.g.param("mask", above), attrs=[(2, sq, sk)]),
                  b.g.fill(float("-inf"), (2, sq, sk), F32), s)
    outs = [b.op("MatMul", _softmax_last(b, x), v) for x in (biased, masked)]
    return mark_structured_masks(b.out(*outs)), ["composite", "attention"]


@case("attention-grouped-query")
def _grouped_query(rng):
    b = B(rng)
    n, hkv, group, s, d = 2, 2, b.dim(2, 3), b.dim(), b.dim()
    h = hkv * group
    q, k, v = b.x("q", n, h, s, d), b.x("k", n, hkv, s, d), b.x("v", n, hkv, s, d)

    def repeat(t):
        spread = b.op("Expand", b.op("Reshape", t, attrs=[(n, hkv, 1, s, d)]), attrs=[(n, hkv, group, s, d)])
        return b.op("Reshape", spread, attrs=[(n, h, s, d)])
    scores = b.op("MatMul", q, b.op("Permute", repeat(k), attrs=[(0, 1, 3, 2)]))
    return b.out(b.op("MatMul", _softmax_last(b, scores), repeat(v))), ["composite", "attention"]


@case("reshape-through-heads")
def _flatten_groups(rng):
    b = B(rng)
    dims = (2, b.dim(1, 3), b.dim(1, 3), b.dim(), b.dim())
    x = b.x("x", *dims)
    return b.out(b.op("Exp", b.op("Reshape", x, attrs=[(dims[0] * dims[1] * dims[2], dims[3], dims[4])]))), ["reshape"]


@case("attention-low-precision")
def _half_attention(rng):
    b = B(rng)
    sq, sk, d = b.dim(), b.dim(), b.dim()
    q, k, v = (b.g.input(n, (2, s, d), "float16") for n, s in (("q", sq), ("k", sk), ("v", sk)))
    up = [b.op("Cast", t, attrs=["float32"]) for t in (q, k, v)]
    scores = b.op("MatMul", up[0], b.op("Permute", up[1], attrs=[(0, 2, 1)]))
    out = b.op("MatMul", _softmax_last(b, scores), up[2])
    return b.out(b.op("Cast", out, attrs=["float16"])), ["composite", "attention"]


@case("column-scale-into-right")
def _weighted_rows_product(rng):
    b = B(rng)
    m, k, n = b.dim(), b.dim(), b.dim()
    w = b.op("Expand", b.x("w", 1, k), attrs=[(m, k)])
    return b.out(b.op("MatMul", b.op("Mul", b.x("a", m, k), w), b.x("b", k, n))), ["softmax"]


# ------------------------------------------------------------------------------------------------- conv
def _conv(b, x, out_channels, kernel, *, groups=1, stride=(1, 1), padding=(0, 0), dilation=(1, 1), tag=""):
    """Conv2d of x with a random weight [O, C / groups, k, k] and bias [O] (graph inputs)."""
    c = b.shape(x)[1]
    w = b.x(f"w{tag}", out_channels, c // groups, kernel, kernel)
    return b.op("Conv2d", x, w, b.x(f"b{tag}", out_channels), attrs=[stride, padding, dilation, groups])


@case("conv-scale-into-weight", "conv-shift-into-bias")
def _batch_normed_conv(rng):
    b = B(rng)
    groups = rng.choice([1, 2])
    o = groups * b.dim(1, 3)
    x = b.x("x", 2, groups * b.dim(1, 3), b.dim(5, 8), b.dim(5, 8))
    y = _conv(b, x, o, rng.choice([1, 3]), groups=groups, stride=(rng.choice([1, 2]),) * 2,
              padding=(rng.choice([0, 1]),) * 2, dilation=(rng.choice([1, 2]),) * 2)
    scale, shift = (b.op("Expand", b.x(name, 1, o, 1, 1), attrs=[b.shape(y)]) for name in ("scale", "shift"))
    return b.out(b.op("Add", b.op("Mul", y, scale), shift)), ["conv"]


@case("conv-1x1-as-matmul")
def _pointwise_conv(rng):
    b = B(rng)
    x = b.x("x", b.dim(1, 3), b.dim(), b.dim(), b.dim())
    return b.out(_conv(b, x, b.dim(), 1)), ["conv"]


@case("conv-merge-shared-input")
def _parallel_convs(rng):
    b = B(rng)
    x = b.x("x", 2, b.dim(1, 4), b.dim(5, 8), b.dim(5, 8))
    kernel, padding = rng.choice([(1, 0), (3, 1)])
    window = dict(stride=(rng.choice([1, 2]),) * 2, padding=(padding, padding))
    return b.out(*(_conv(b, x, b.dim(1, 4), kernel, tag=str(k), **window) for k in range(2))), ["conv"]


# -------------------------------------------------------------------------------------------- structure
@case("mask-multiply-as-where-right", "mask-multiply-as-where-left", "where-of-not", "diag-mask-of-expand",
      "masked-diagonal-product-left", "masked-diagonal-product-right", "masked-diagonal-row-sums",
      "masked-diagonal-column-sums", "masked-diagonal-total", "diagonal-of-column-broadcast",
      "diagonal-of-row-broadcast", "diag-mask-of-reshape")
def _diagonal_masks(rng):
    """Matrices masked to their diagonal by a constant identity mask (bool, as a 0/1 float, negated, and
    broadcast over a batch), as the frontend marks it, then multiplied from either side and summed."""
    b = B(rng)
    n, k = b.dim(), b.dim()
    eye = b.g.param("eye", torch.eye(n, dtype=torch.bool))
    x, y, z = b.x("x", n, n), b.x("y", n, k), b.x("z", k, n)
    zero = b.g.fill(0.0, (n, n), F32)
    diag = b.op("Where", eye, x, zero)
    as_float = b.op("Where", eye, b.g.fill(1.0, (n, n), F32), zero)
    u = b.op("Expand", b.x("u", n, 1), attrs=[(n, n)])
    outs = [b.op("MatMul", diag, y), b.op("MatMul", z, diag), b.op("Sum", diag, attrs=[(1,)]),
            b.op("Sum", diag, attrs=[(0,)]), b.op("Sum", diag, attrs=[(0, 1)]),
            b.op("MatMul", b.op("Mul", x, as_float), y), b.op("MatMul", b.op("Mul", as_float, u), y),
            b.op("MatMul", b.op("Where", b.op("Not", eye), zero, x), y)]
    batched = b.op("Expand", b.op("Reshape", eye, attrs=[(1, n, n)]), attrs=[(2, n, n)])
    row = b.op("Expand", b.x("v", 2, 1, n), attrs=[(2, n, n)])
    outs.append(b.op("MatMul", b.op("Where", batched, row, b.g.fill(0.0, (2, n, n), F32)), b.x("w", 2, n, k)))
    return mark_structured_masks(b.out(*outs)), ["structure"]


@case("diagonal-of-matmul-2d", "diagonal-of-matmul-3d")
def _diagonal_of_products(rng):
    b = B(rng)
    n, k = b.dim(), b.dim()
    outs = [b.op("Diagonal", b.op("MatMul", b.x("a", n, k), b.x("c", k, n))),
            b.op("Diagonal", b.op("MatMul", b.x("a3", 2, n, k), b.x("c3", 2, k, n)))]
    return b.out(*outs), ["structure"]


@case("sum-of-broadcast-product-2", "sum-of-broadcast-product-2-swapped", "sum-of-broadcast-product-1",
      "sum-of-broadcast-product-1-swapped", "sum-of-broadcast-product-0", "sum-of-broadcast-product-0-swapped")
def _broadcast_contractions(rng):
    """a and b broadcast against each other into [M, N, K]-like boxes and multiplied (either order), summed
    over the dim both keep."""
    b = B(rng)
    m, n, k = b.dim(), b.dim(), b.dim()

    def summed(a_shape, b_shape, box, dim):
        p = b.op("Expand", b.x(f"a{dim}", *a_shape), attrs=[box])
        q = b.op("Expand", b.x(f"b{dim}", *b_shape), attrs=[box])
        return [b.op("Sum", b.op("Mul", p, q), attrs=[(dim,)]), b.op("Sum", b.op("Mul", q, p), attrs=[(dim,)])]
    outs = [*summed((m, 1, k), (1, n, k), (m, n, k), 2), *summed((m, k, 1), (1, k, n), (m, k, n), 1),
            *summed((k, m, 1), (k, 1, n), (k, m, n), 0)]
    return b.out(*outs), ["reduction"]


@case("sum-of-outer-product", "sum-of-outer-product-swapped", "sum-all-through-matmul", "sum-split-two",
      "sum-batch-through-broadcast-matmul-right", "sum-batch-through-broadcast-matmul-left", "total-of-partial-sums")
def _summed_outer_products(rng):
    """Totals of outer products (broadcast and as a product), a batch of products sharing one matrix,
    summed over the batch, and the total of a matrix's row or column sums."""
    b = B(rng)
    batch, n, m, k = 2, b.dim(), b.dim(), b.dim()
    p = b.op("Expand", b.x("u", batch, n, 1), attrs=[(batch, n, m)])
    q = b.op("Expand", b.x("v", batch, 1, m), attrs=[(batch, n, m)])
    shared = b.op("Expand", b.x("w", 1, k, m), attrs=[(batch, k, m)])
    x = b.x("x", batch, n, k)
    outs = [b.op("Sum", b.op("Mul", p, q), attrs=[(1, 2)]), b.op("Sum", b.op("Mul", q, p), attrs=[(1, 2)]),
            b.op("Sum", b.op("MatMul", b.x("c", batch, n, k), b.x("d", batch, k, m)), attrs=[(1, 2)]),
            b.op("Sum", b.op("MatMul", x, shared), attrs=[(0,)]),
            b.op("Sum", b.op("MatMul", b.op("Expand", b.x("w2", 1, n, k), attrs=[(batch, n, k)]),
                             b.x("y", batch, k, m)), attrs=[(0,)]),
            b.op("Sum", b.op("Sum", b.x("z", n, m), attrs=[(rng.randint(0, 1),)]), attrs=[(0, 1)])]
    return b.out(*outs), ["reduction"]


@case("square-of-broadcast-difference", "square-of-broadcast-sum", "product-of-broadcast-difference-with-itself")
def _squared_broadcasts(rng):
    """(a - b)^2 and (a + b)^2 of rows against columns (pairwise distances), squared by pow and by a product."""
    b = B(rng)
    m, n, k = b.dim(), b.dim(), b.dim()
    p = b.op("Expand", b.x("a", m, 1, k), attrs=[(m, n, k)])
    q = b.op("Expand", b.x("c", 1, n, k), attrs=[(m, n, k)])
    two = b.g.fill(2.0, (m, n, k), F32)
    diff = b.op("Sub", p, q)
    outs = [b.op("Pow", diff, two), b.op("Pow", b.op("Add", p, q), two), b.op("Mul", diff, diff)]
    return b.out(*outs), ["reduction"]


@case("tril-mask-of-expand", "causal-complement-is-lower-triangle", "lower-triangular-ones-product",
      "lower-triangular-scaled-product", "expand-into-constant-where", "reshape-into-constant-where",
      "tril-mask-of-reshape")
def _lower_triangular_masks(rng):
    """Lower triangles of ones (a tril mask as a 0/1 float, batched, and the complement of a square causal
    mask) and of a broadcast column, times a matrix: running sums, as the frontend marks the masks."""
    b = B(rng)
    n, k = b.dim(), b.dim()
    lower = torch.ones(n, n, dtype=torch.bool).tril()
    tril, above = b.g.param("tril", lower), b.g.param("above", ~lower)
    ones, zero = b.g.fill(1.0, (n, n), F32), b.g.fill(0.0, (n, n), F32)
    y = b.x("y", n, k)
    column = b.op("Expand", b.x("u", n, 1), attrs=[(n, n)])
    batched = b.op("Expand", b.g.param("tril3", lower[None]), attrs=[(2, n, n)])
    zeros3, ones3 = b.g.fill(0.0, (2, n, n), F32), b.g.fill(1.0, (2, n, n), F32)
    outs = [b.op("MatMul", b.op("Where", tril, ones, zero), y), b.op("MatMul", b.op("Where", tril, column, zero), y),
            b.op("MatMul", b.op("Where", above, zero, ones), y),
            b.op("MatMul", b.op("Where", batched, ones3, zeros3), b.x("w", 2, n, k))]
    spread = b.op("Expand", b.op("Reshape", b.op("Where", above, zero, ones), attrs=[(1, n, n)]), attrs=[(2, n, n)])
    outs.append(b.op("MatMul", spread, b.x("v", 2, n, k)))  # a 2-d mask's matrix broadcast over a batch
    return mark_structured_masks(b.out(*outs)), ["structure"]


@case("band-masked-product", "band-ones-scaled-product-right", "band-ones-scaled-product-left", "band-ones-product",
      "band-ones-product-is-window-sum")
def _banded_products(rng):
    """Matrices masked to a band of diagonals around the main one (by a bool mask in a Where, and times a 0/1
    float band from either side), and a band of ones itself, times a matrix, as the frontend marks the masks."""
    b = B(rng)
    n, k = b.dim(4, 7), b.dim()
    lo, hi = rng.choice([(-1, 1), (-2, 0), (0, 2), (-1, 0), (-2, 1)])
    band = torch.ones(n, n, dtype=torch.bool).triu(lo).tril(hi)
    mask, ones = b.g.param("band", band), b.g.param("band_ones", band.float())
    a, y = b.x("a", n, n), b.x("y", n, k)
    outs = [b.op("MatMul", b.op("Where", mask, a, b.g.fill(0.0, (n, n), F32)), y),
            b.op("MatMul", b.op("Mul", a, ones), y), b.op("MatMul", b.op("Mul", ones, a), y), b.op("MatMul", ones, y)]
    return mark_structured_masks(b.out(*outs)), ["structure"]


@case("identity-kron-product", "product-by-kron-identity")
def _identity_kron_products(rng):
    """kron(I_k, A) X and Y kron(A, I_k) as torch.kron decomposes (the factors reshaped to [k, 1, k, 1] and
    [1, n, 1, n], broadcast and multiplied, flattened), the identity a 0/1 float of a constant mask."""
    b = B(rng)
    k, n, d = b.dim(2, 4), b.dim(2, 4), b.dim()
    eye = b.op("Where", b.g.param("eye", torch.eye(k, dtype=torch.bool)), b.g.fill(1.0, (k, k), F32),
               b.g.fill(0.0, (k, k), F32))
    a = b.x("a", n, n)

    def kron(first, second, p, q):  # p x p and q x q factors
        box = (p, q, p, q)
        left = b.op("Expand", b.op("Reshape", first, attrs=[(p, 1, p, 1)]), attrs=[box])
        right = b.op("Expand", b.op("Reshape", second, attrs=[(1, q, 1, q)]), attrs=[box])
        return b.op("Reshape", b.op("Mul", left, right), attrs=[(p * q, p * q)])
    outs = [b.op("MatMul", kron(eye, a, k, n), b.x("x", k * n, d)),
            b.op("MatMul", b.x("y", d, n * k), kron(a, eye, n, k))]
    return mark_structured_masks(b.out(*outs)), ["structure"]


@case("product-by-block-diagonal", "product-by-broadcast-block-diagonal", "block-diagonal-product")
def _block_diagonal_products(rng):
    """X blockdiag(W_g) for X of rank 2 and rank 3 (the block-diagonal matrix broadcast over the batch, as
    the frontend writes matmul), and blockdiag(W_g) X."""
    b = B(rng)
    h, d, k, m, n = b.dim(2, 4), b.dim(), b.dim(), b.dim(), b.dim()
    bd = b.op("BlockDiag", b.x("w", h, d, k))
    batched = b.op("Expand", b.op("Reshape", bd, attrs=[(1, h * d, h * k)]), attrs=[(2, h * d, h * k)])
    return b.out(b.op("MatMul", b.x("x", m, h * d), bd), b.op("MatMul", b.x("z", 2, m, h * d), batched),
                 b.op("MatMul", bd, b.x("y", h * k, n))), ["structure"]


@case("batch-permute-out-of-shared-product", "reshaped-rows-times-shared-matrix")
def _shared_matrix_products(rng):
    """A permuted batch, and a reshaped one, times one matrix broadcast over the batch; and times a matrix
    broadcast along its own dims as well (a [1, 1, n] or [1, k, 1] to [batch, k, n]: no [k, n] matrix, which
    the rules once took it for, merging shapes that differ)."""
    b = B(rng)
    bt, m, k, n = b.dim(2, 4), b.dim(), b.dim(), b.dim()

    def shared(batch, rows=k, cols=n):
        return b.op("Expand", b.x(f"w{batch}_{rows}_{cols}", 1, rows, cols), attrs=[(batch, k, n)])
    permuted = b.op("Permute", b.x("a", m, bt, k), attrs=[(1, 0, 2)])
    reshaped = b.op("Reshape", b.x("x", m, bt * k), attrs=[(m, bt, k)])
    return b.out(b.op("MatMul", permuted, shared(bt)), b.op("MatMul", reshaped, shared(m)),
                 b.op("MatMul", permuted, shared(bt, 1, n)), b.op("MatMul", permuted, shared(bt, k, 1)),
                 b.op("MatMul", reshaped, shared(m, 1, n)), b.op("MatMul", reshaped, shared(m, k, 1))), \
        ["transpose", "reshape"]


@case("difference-of-running-sum")
def _running_sum_differences(rng):
    b = B(rng)
    n, k = b.dim(3, 7), b.dim()
    c = b.op("Cumsum", b.x("x", n, k), attrs=[0])
    lo = rng.randint(0, n - 2)
    return b.out(b.op("Sub", b.op("Slice", c, attrs=[0, lo + 1, n]), b.op("Slice", c, attrs=[0, lo, n - 1]))), \
        ["structure"]


@case("squared-norm-of-product", "squared-norm-of-product-pow")
def _squared_norms_of_products(rng):
    b = B(rng)
    m, r, n = b.dim(), b.dim(1, 3), b.dim()
    p = b.op("MatMul", b.x("a", m, r), b.x("c", r, n))
    outs = [b.op("Sum", b.op("Mul", p, p), attrs=[(0, 1)]),
            b.op("Sum", b.op("Pow", p, b.g.fill(2.0, (m, n), F32)), attrs=[(0, 1)])]
    return b.out(*outs), ["reduction"]


@case("sum-of-grouped-product-columns")
def _grouped_product_columns(rng):
    b = B(rng)
    m, k, g, h = b.dim(), b.dim(), b.dim(2, 4), b.dim(1, 4)
    p = b.op("MatMul", b.x("x", m, k), b.x("w", k, g * h))
    return b.out(b.op("Sum", b.op("Reshape", p, attrs=[(m, g, h)]), attrs=[(1,)])), ["reduction"]


# ------------------------------------------------------------------------------------------------ order
@case("flip-of-flip", "sum-of-flip", "max-of-flip", "min-of-flip")
def _flips(rng):
    b = B(rng)
    shape = (b.dim(), b.dim(), 3)
    dims = tuple(sorted(rng.sample(range(3), rng.randint(1, 2))))
    x, y = b.x("x", *shape), b.x("y", *shape)
    fx = b.op("Flip", x, attrs=[dims])
    outs = [b.op("Add", b.op("Flip", fx, attrs=[dims]), y),
            *(b.op(r, fx, attrs=[dims]) for r in ("Sum", "Amax", "Amin"))]
    return b.out(*outs), ["reorder"]


@case(*[f"{kind}-out-of-{rulesets.rule_name(o)}" for o in ELEMENTWISE for kind in ("flip", "roll")])
def _reordered_elementwise(rng):
    """Every elementwise op of flipped and of rolled operands (positive ones: log, sqrt, pow and division stay
    finite; bool ones for the logical ops), reordered alike when there are two."""
    b = B(rng)
    m, n = b.dim(), b.dim(3, 7)
    dim, shift = rng.randint(0, 1), rng.randint(1, 2)
    rows = [b.op("Add", b.op("Abs", b.x(f"x{i}", m, n)), b.fill(0.5, b.x(f"x{i}", m, n))) for i in range(2)]
    bools = [b.op("Gt", r, b.fill(1.0, r)) for r in rows]
    outs = []
    for o in ELEMENTWISE:
        operands = bools if o.name in LOGICAL else rows
        for reorder, attrs in (("Flip", [(dim,)]), ("Roll", [shift, dim])):
            moved = [b.op(reorder, t, attrs=attrs) for t in operands[:o.arity]]
            outs.append(b.op(o.name, *moved))
    return b.out(*outs), ["reorder"]


@case("sum-of-roll", "max-of-roll", "min-of-roll", "sum-of-sort", "max-of-sort", "min-of-sort")
def _rolls_and_sorts(rng):
    b = B(rng)
    n, m = b.dim(), b.dim(3, 7)
    x, y = b.x("x", n, m), b.x("y", n, m)
    dim = rng.randint(0, 1)
    shift = rng.randint(1, (n, m)[dim] - 1) if (n, m)[dim] > 1 else 0
    rx = b.op("Roll", x, attrs=[shift, dim])
    sx = b.op("Sort", y, attrs=[dim, rng.randint(0, 1)])
    outs = [b.op(r, t, attrs=[(dim,)]) for r in ("Sum", "Amax", "Amin") for t in (rx, sx)]
    return b.out(*outs), ["reorder"]


def _nontrivial_permutes(*ranks) -> list[tuple[int, ...]]:
    return [p for r in ranks for p in itertools.permutations(range(r)) if p != tuple(range(r))]


@case(*[f"unit-permute-is-reshape-{''.join(map(str, p))}" for p in _nontrivial_permutes(2, 3, 4)], "sum-of-permute",
      "sum-of-transposed-input")
def _unit_permutes_and_permuted_sums(rng):
    """Every permutation of rank 2-4 of a tensor whose swapped dims have a 1 in each pair (a random side),
    a sum of a permuted head split, and a sum of a transposed input along either dim."""
    b = B(rng)
    n, m = b.dim(), b.dim()
    outs = []
    for perm in _nontrivial_permutes(2, 3, 4):
        shape = [b.dim(2, 4) for _ in perm]
        for i, j in itertools.combinations(range(len(perm)), 2):
            a, c = perm[i], perm[j]
            if a > c and 1 not in (shape[a], shape[c]):
                shape[rng.choice((a, c))] = 1
        outs.append(b.op("Exp", b.op("Permute", b.x(f"x{len(outs)}", *shape), attrs=[perm])))
    heads = b.op("Reshape", b.x("y", n, m * 3), attrs=[(n, m, 3)])
    outs.append(b.op("Sum", b.op("Permute", heads, attrs=[(2, 0, 1)]), attrs=[(rng.randint(0, 2),)]))
    outs.append(b.op("Sum", b.op("Permute", b.x("z", n, m), attrs=[(1, 0)]), attrs=[(rng.randint(0, 1),)]))
    return b.out(*outs), ["transpose"]


@case(*[f"permute-out-of-broadcast-mul-{''.join(map(str, p))}{side}"
        for p in rulesets.neighbour_swaps(3) + rulesets.neighbour_swaps(4) for side in ("", "-swapped")])
def _permuted_times_broadcast(rng):
    """A permuted tensor times a broadcast of a tensor whose unpermuted form moves unit dims alone (a per-head
    gain), on either side, for every swap of neighbouring dims of rank 3-4."""
    b = B(rng)
    outs = []
    for perm in rulesets.neighbour_swaps(3) + rulesets.neighbour_swaps(4):
        shape = [b.dim(2, 4) for _ in perm]
        permuted_shape = [shape[d] for d in perm]
        gain = [s if rng.random() < 0.5 else 1 for s in permuted_shape]
        inverse = [perm.index(d) for d in range(len(perm))]
        for i, j in itertools.combinations(range(len(perm)), 2):  # unpermuting the gain moves unit dims alone
            if inverse[i] > inverse[j] and 1 not in (gain[inverse[i]], gain[inverse[j]]):
                gain[rng.choice((inverse[i], inverse[j]))] = 1
        permuted = b.op("Permute", b.x(f"a{len(outs)}", *shape), attrs=[perm])
        broadcast = b.op("Expand", b.x(f"g{len(outs)}", *gain), attrs=[tuple(permuted_shape)])
        outs += [b.op("Mul", permuted, broadcast), b.op("Mul", broadcast, permuted)]
    return b.out(*outs), ["transpose"]


@case(*[f"unit-reshape-is-permute-{''.join(map(str, p))}" for p in rulesets.one_dim_moves(4)])
def _unit_reshapes(rng):
    """Rank-4 reshapes that move one unit dim alone, one per such move (the unit dims on a random side of each
    pair it swaps)."""
    b = B(rng)
    outs = []
    for perm in rulesets.one_dim_moves(4):
        shape = [b.dim(2, 4) for _ in perm]
        for i, j in itertools.combinations(range(4), 2):
            if perm[i] > perm[j] and 1 not in (shape[perm[i]], shape[perm[j]]):
                shape[rng.choice((perm[i], perm[j]))] = 1
        x = b.x(f"x{len(outs)}", *shape)
        outs.append(b.op("Exp", b.op("Reshape", x, attrs=[tuple(shape[d] for d in perm)])))
    return b.out(*outs), ["transpose"]


@case("cumsum-of-permute", "cumsum-of-reshape-after-dim-0", "cumsum-of-reshape-after-dim-1")
def _running_sums_through_views(rng):
    """Running sums of a permuted tensor, of a reshape regrouping the dims after dim 0, and after dim 1 (an
    einsum's batched product by a triangle of ones, seen through its views)."""
    b = B(rng)
    n, m, k = b.dim(), b.dim(), b.dim()
    perm = rng.choice(_nontrivial_permutes(3))
    permuted = b.op("Permute", b.x("a", n, m, k), attrs=[perm])
    after_0 = b.op("Reshape", b.x("x", n, m, k), attrs=[(n, m * k)])
    after_1 = b.op("Reshape", b.x("y", n, m, k), attrs=[(n, m, k, 1)])
    return b.out(b.op("Cumsum", permuted, attrs=[rng.randint(0, 2)]), b.op("Cumsum", after_0, attrs=[0]),
                 b.op("Cumsum", after_1, attrs=[1])), ["transpose", "reshape"]


@case("column-group-scale-through-split", "column-group-scale-through-split-swapped")
def _column_group_scales(rng):
    """A matrix split into column groups, scaled per group (on either side) and per column, merged back."""
    b = B(rng)
    bt, n, h, d = b.dim(2, 3), b.dim(2, 3), b.dim(2, 4), b.dim(2, 4)
    a = b.x("a", bt * n, h * d)
    split = b.op("Reshape", a, attrs=[(bt, n, h, d)])
    per_group = b.op("Expand", b.x("g", 1, 1, h, 1), attrs=[(bt, n, h, d)])
    per_column = b.op("Expand", b.x("c", 1, 1, h, d), attrs=[(bt, n, h, d)])
    return b.out(b.op("Reshape", b.op("Mul", split, per_group), attrs=[(bt * n, h * d)]),
                 b.op("Reshape", b.op("Mul", per_column, split), attrs=[(bt * n, h * d)])), ["reshape"]


@case("matmul-of-unit-batch")
def _unit_batch_product(rng):
    b = B(rng)
    m, k, n = b.dim(), b.dim(), b.dim()
    return b.out(b.op("MatMul", b.x("a", 1, m, k), b.x("c", 1, k, n))), ["reshape"]


@case("sum-over-merged-last-dims", "sum-over-merged-first-dims", "sum-of-unit-extended-reshape")
def _sums_over_merged_dims(rng):
    """Row sums of x repeated along its rows, column sums of x tiled down its columns: sums over a dim a
    reshape merged from two; and a sum of a tensor reshaped to gain a trailing unit dim."""
    b = B(rng)
    n, r, d = b.dim(), b.dim(2, 4), b.dim()
    x = b.x("x", n, d)
    repeated = b.op("Reshape", b.op("Expand", b.op("Reshape", x, attrs=[(n, 1, d)]), attrs=[(n, r, d)]),
                    attrs=[(n, r * d)])
    tiled = b.op("Reshape", b.op("Expand", b.op("Reshape", x, attrs=[(1, n, d)]), attrs=[(r, n, d)]),
                 attrs=[(r * n, d)])
    extended = b.op("Reshape", b.x("y", n, r, d), attrs=[(n, r, d, 1)])  # einsum's trailing unit dim
    return b.out(b.op("Sum", repeated, attrs=[(1,)]), b.op("Sum", tiled, attrs=[(0,)]),
                 b.op("Sum", extended, attrs=[(rng.randint(0, 2),)])), ["reduction"]


@case("total-above-diagonal-of-gram", "total-above-diagonal-of-gram-masked")
def _gram_pair_totals(rng):
    """Totals over pairs i < j of x_i . x_j: X X^T kept above the diagonal (triu(., 1): a square causal mask
    selects), or with the lower triangle and diagonal masked to zero (a tril mask)."""
    b = B(rng)
    n, k = b.dim(), b.dim()
    x = b.x("x", n, k)
    gram = b.op("MatMul", x, b.op("Permute", x, attrs=[(1, 0)]))
    lower = torch.ones(n, n, dtype=torch.bool).tril()
    zero = b.g.fill(0.0, (n, n), F32)
    outs = [b.op("Sum", b.op("Where", b.g.param("above", ~lower), gram, zero), attrs=[(0, 1)]),
            b.op("Sum", b.op("Where", b.g.param("tril", lower), zero, gram), attrs=[(0, 1)])]
    return mark_structured_masks(b.out(*outs)), ["structure"]


@case("exp-of-broadcast-sum", "log-of-exp-times", "log-of-times-exp", "log-of-reshape")
def _log_sum_exp_of_broadcasts(rng):
    """log(sum_j exp(a_i + b_j)) written out, and the log of a product with an exponential either side."""
    b = B(rng)
    n, m = b.dim(), b.dim()
    p = b.op("Expand", b.x("a", n, 1), attrs=[(n, m)])
    q = b.op("Expand", b.x("c", 1, m), attrs=[(n, m)])
    total = b.op("Sum", b.op("Exp", b.op("Add", p, q)), attrs=[(1,)])
    positive = b.op("Exp", b.x("u", n, m))  # a positive factor, so the logs are of positive numbers
    e = b.op("Exp", b.x("v", n, m))
    outs = [b.op("Log", b.op("Reshape", total, attrs=[(n,)])), b.op("Log", b.op("Mul", e, positive)),
            b.op("Log", b.op("Mul", positive, e))]
    return b.out(*outs), ["reduction"]


# ------------------------------------------------------------------------------------------ synthesized
@case("sum-of-cumsum-over-other-dim")
def _sum_of_running_sums(rng):
    """A sum over one dim of a running sum along another (rank 2 or 3)."""
    b = B(rng)
    shape = tuple(b.dim() for _ in range(rng.randint(2, 3)))
    along, summed = rng.sample(range(len(shape)), 2)
    scanned = b.op("Cumsum", b.x("x", *shape), attrs=[along])
    return b.out(b.op("Sum", scanned, attrs=[(summed,)])), ["synthesized"]


@case("cumsum-out-of-matmul-columns", "cumsum-into-matmul-columns", "flip-out-of-matmul-columns",
      "flip-into-matmul-columns", "flip-across-matmul-to-right", "flip-across-matmul-to-left")
def _scans_and_flips_through_products(rng):
    """Products (2-d or batched) of operands scanned or reversed along the right operand's columns or the
    contracted dim, and scans and reversals of a product's columns."""
    b = B(rng)
    lead = (b.dim(),) * rng.randint(0, 1)
    m, k, n = b.dim(), b.dim(), b.dim()
    r = len(lead) + 2
    (a0, w0), (a1, w1), (a2, w2), (a3, w3) = ((b.x(f"a{t}", *lead, m, k), b.x(f"w{t}", *lead, k, n))
                                              for t in range(4))
    outs = [b.op("MatMul", a0, b.op("Cumsum", w0, attrs=[r - 1])),
            b.op("MatMul", a1, b.op("Flip", w1, attrs=[(r - 1,)])),
            b.op("Cumsum", b.op("MatMul", a2, w2), attrs=[r - 1]),
            b.op("Flip", b.op("MatMul", a2, w2), attrs=[(r - 1,)]),
            b.op("MatMul", b.op("Flip", a3, attrs=[(r - 1,)]), b.op("Flip", w3, attrs=[(r - 2,)]))]
    return b.out(*outs), ["synthesized"]


@case("cumsum-out-of-flattened-matmul")
def _running_sums_through_flattened_linear(rng):
    """A linear map of a 3-d activation run flat (rows flattened, one product, viewed back) of a running sum
    along a row dim."""
    b = B(rng)
    bs, m, k, n = b.dim(), b.dim(), b.dim(), b.dim()
    scanned = b.op("Cumsum", b.x("x", bs, m, k), attrs=[rng.randint(0, 1)])
    flat = b.op("MatMul", b.op("Reshape", scanned, attrs=[(bs * m, k)]), b.x("w", k, n))
    return b.out(b.op("Reshape", flat, attrs=[(bs, m, n)])), ["synthesized"]
