"""THE op table: every IR op is declared here once.

An entry gives the op's name (also its egglog constructor), its tensor operands and attributes, its shape
rule, a reference PyTorch implementation (used by constant folding, the rule tests, the kernels' reference
semantics and the torch backend's kernel nodes), FLOP counts for the cost prior and algebraic tags; an
elementwise op also gives the ATen ops it comes from, its PyTorch source for generated code and its Triton
expression for fused kernels. What follows from an entry is derived from it: the frontend's mapping of plain
elementwise ATen ops, the schema's datatype of algebra ops, elementwise shape/dtype rules and one-op kernel
rules (eqiforge/egraph/rulesets.py), and the fused-expression vocabulary (``EPI``, eqiforge/ops/fused.py).

IR conventions that keep the algebra simple (the frontend establishes them):
- Broadcasting is explicit: elementwise operands have equal shapes; ``Expand`` and ``Reshape`` make them so.
- Type promotion is explicit: elementwise operands have equal dtypes; ``Cast`` makes them so.
- Reductions keep the reduced dims (size 1); a ``Reshape`` drops them when the program asked so.
- ``MatMul`` takes two operands of equal rank >= 2 with equal batch dims (vectors are reshaped to matrices).
- Anything else is an ``Extern``: a PyTorch call the optimizer treats as a black box.
"""
from __future__ import annotations

import functools
import math
import re
from collections import namedtuple
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch

from . import kernel_semantics

Shape = tuple[int, ...]

#: attribute kinds and the egglog sort that holds them
ATTR_SORTS = {"str": "String", "f64": "f64", "i64": "i64", "dims": "Dims", "epi": "Epi", "tile": "Tile"}

DTYPES = {
    "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
    "float64": torch.float64, "int64": torch.int64, "int32": torch.int32, "bool": torch.bool,
}
DTYPE_NAMES = {v: k for k, v in DTYPES.items()}


def dtype_size(dtype: str) -> int:
    """Bytes per element of a dtype name."""
    return DTYPES[dtype].itemsize


def numel(shape: Sequence[int]) -> int:
    return math.prod(shape)


class ShapeError(ValueError):
    """Operands whose shapes or attributes do not fit the op."""


@dataclass(frozen=True)
class OpDef:
    """One IR op. ``shape(in_shapes, attrs)`` returns the output shape or raises ShapeError."""

    name: str
    kind: str  # leaf | unary | binary | compare | where | cast | movement | matmul | reduce | scan (same shape,
    # computed along a dim) | conv | pool | extern | kernel
    arity: int  # fixed tensor operands
    attrs: tuple[str, ...]  # attribute kinds (ATTR_SORTS)
    shape: Callable[[list[Shape], tuple], Shape]
    torch_impl: Callable | None  # (tensors..., attrs...) -> tensor; None for leaves/externs
    tags: frozenset = field(default_factory=frozenset)
    variadic: bool = False  # more tensor operands follow, as a vector (extern arguments, kernel extras)
    aten: tuple[str, ...] = ()  # ATen ops it comes from ("exp", "add.Tensor"): frontend/aten.py maps them
    torch_src: str | None = None  # PyTorch source in generated code, operands {0}, {1}, ...
    triton: str | None = None  # Triton expression in a fused kernel (tl builtins, operands {0}, {1});
    # None for the few that lower/triton/epilogue.py renders itself
    attr_names: tuple[str, ...] = ()  # one per attribute: code reads attributes by these names (``named``)
    config: tuple[str, ...] = ()  # attributes that say how a kernel runs, not what it computes (tile, split-K)

    def __post_init__(self):
        if len(self.attr_names) != len(self.attrs) or not set(self.config) <= set(self.attr_names):
            raise ValueError(f"op {self.name}: attributes {self.attrs} need one name each, got {self.attr_names}")

    @functools.cached_property
    def Attrs(self) -> type:  # noqa: N802 - a class
        """The named tuple of this op's attributes (``GemmKAttrs(layout_a, layout_b, tile, ...)``)."""
        return namedtuple(f"{self.name}Attrs", self.attr_names)

    def named(self, attrs: tuple):
        """``attrs`` as this op's named tuple, so code says ``.causal``, not ``[2]``."""
        return self.Attrs(*attrs)

    @property
    def exprs(self) -> tuple[str, ...]:
        """Names of its fused-expression attributes, in order; the last one computes the stored result."""
        return tuple(n for n, kind in zip(self.attr_names, self.attrs) if kind == "epi")

    @property
    def epi(self) -> str | None:
        """Its operator name in fused expressions (``GeluTanh`` -> ``gelu_tanh``): unary and binary math only."""
        return re.sub(r"(?<!^)(?=[A-Z])", "_", self.name).lower() if self.kind in ("unary", "binary") else None

    @property
    def signature(self) -> tuple[str, ...]:
        """egglog argument kinds in order: fixed operands ("T"), attributes, then the operand vector."""
        return ("T",) * self.arity + self.attrs + (("TVec",) if self.variadic else ())

    def flops(self, in_shapes: list[Shape], out: Shape) -> float:
        """Floating-point operations of one evaluation (multiply-add = 2)."""
        if self.kind == "matmul":
            return 2.0 * numel(out) * in_shapes[0][-1]
        if self.kind in ("unary", "binary", "compare", "where"):
            return float(numel(out)) * (8.0 if "transcendental" in self.tags else 1.0)
        if self.kind in ("reduce", "scan"):
            return float(numel(in_shapes[0]))
        if self.kind == "conv":  # every output element is a dot product over a weight filter [C_in / groups, kh, kw]
            return 2.0 * numel(out) * numel(in_shapes[1][1:])
        if self.kind == "pool":  # about one comparison or addition per input element
            return float(numel(in_shapes[0]))
        return 0.0

    def is_view(self) -> bool:
        """Ops that PyTorch serves as views (no kernel, no traffic) when the layout allows."""
        return "view" in self.tags


# ---------------------------------------------------------------------------------------------- shape rules

def _same(ins: list[Shape], _attrs) -> Shape:
    if any(s != ins[0] for s in ins):
        raise ShapeError(f"elementwise operands must have equal shapes (broadcasting is explicit), got {ins}")
    return ins[0]


def _leaf(_ins, _attrs) -> Shape:
    raise ShapeError("leaf shapes are given, not inferred")


def _fill(_ins, attrs) -> Shape:
    return tuple(attrs.shape)


def _permute(ins, attrs) -> Shape:
    (s,), (perm,) = ins, attrs
    if sorted(perm) != list(range(len(s))):
        raise ShapeError(f"permutation {perm} does not fit rank {len(s)}")
    return tuple(s[p] for p in perm)


def _reshape(ins, attrs) -> Shape:
    (s,), (target,) = ins, attrs
    if numel(s) != numel(target):
        raise ShapeError(f"cannot reshape {s} to {target}")
    return tuple(target)


def _expand(ins, attrs) -> Shape:
    (s,), (target,) = ins, attrs
    if len(s) != len(target) or any(a != b and a != 1 for a, b in zip(s, target)):
        raise ShapeError(f"cannot expand {s} to {target} (ranks must match, only size-1 dims grow)")
    return tuple(target)


def _slice(ins, attrs) -> Shape:
    (s,), (dim, start, end) = ins, attrs
    if not (0 <= dim < len(s) and 0 <= start < end <= s[dim]):
        raise ShapeError(f"slice dim={dim} [{start}:{end}] out of range for {s}")
    return s[:dim] + (end - start,) + s[dim + 1:]


def _concat(ins, attrs) -> Shape:
    (a, b), (dim,) = ins, attrs
    if len(a) != len(b) or not 0 <= dim < len(a) or a[:dim] + a[dim + 1:] != b[:dim] + b[dim + 1:]:
        raise ShapeError(f"cannot concatenate {a} and {b} along {dim}")
    return a[:dim] + (a[dim] + b[dim],) + a[dim + 1:]


def _diagonal(ins, _attrs) -> Shape:
    (s,) = ins
    if len(s) < 2:
        raise ShapeError(f"Diagonal takes a tensor of rank >= 2, got {s}")
    return s[:-2] + (min(s[-2:]), 1)


def _block_diag(ins, _attrs) -> Shape:
    (s,) = ins
    if len(s) != 3:
        raise ShapeError(f"BlockDiag takes a stack of blocks [h, d, k], got {s}")
    h, d, k = s
    return (h * d, h * k)


def band_diagonals(w_shape: Shape, lo: int, hi: int) -> int:
    """How many diagonals of a [..., n, m] operand a BandMatMul with offsets lo..hi reads."""
    n, m = w_shape[-2:]
    return max(0, min(hi, m - 1) - max(lo, 1 - n) + 1)


def _matmul(ins, _attrs) -> Shape:
    a, b = ins
    if len(a) != len(b) or len(a) < 2 or a[:-2] != b[:-2] or a[-1] != b[-2]:
        raise ShapeError(f"MatMul needs equal-rank operands [..., M, K] @ [..., K, N], got {a} @ {b}")
    return a[:-1] + (b[-1],)


def _reduce(ins, attrs) -> Shape:
    (s,), (dims,) = ins, attrs
    if not dims or len(set(dims)) != len(dims) or any(not 0 <= d < len(s) for d in dims):
        raise ShapeError(f"reduction dims {dims} invalid for {s}")
    return tuple(1 if i in dims else n for i, n in enumerate(s))


def _window(ins, attrs) -> Shape:
    (s,) = ins
    if len(s) < 2 or attrs.before < 0 or attrs.after < 0:
        raise ShapeError(f"WindowSum sums rows (dim -2) of a rank >= 2 tensor, with before, after >= 0; got {s}, "
                         f"{attrs.before}, {attrs.after}")
    return s


def _along(ins, attrs) -> Shape:
    """Ops along one dim that keep the shape (a running sum, a sort, a roll)."""
    (s,) = ins
    if not 0 <= attrs.dim < len(s):
        raise ShapeError(f"dim {attrs.dim} invalid for {s}")
    return s


def _flip(ins, attrs) -> Shape:
    (s,) = ins
    if not attrs.dims or len(set(attrs.dims)) != len(attrs.dims) or any(not 0 <= d < len(s) for d in attrs.dims):
        raise ShapeError(f"flip dims {attrs.dims} invalid for {s}")
    return s


def _where(ins, _attrs) -> Shape:
    return _same(ins, ())


def _window_out(size: int, kernel: int, stride: int, padding: int, dilation: int) -> int:
    """Positions of a sliding window along one spatial dim (no ceil mode): PyTorch's formula."""
    return (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1


def _windows(x: Shape, channels: int | None, kernel, stride, padding, dilation) -> Shape:
    """[N, channels (None: x's), Ho, Wo] of a 2-d window op over x [N, C, H, W], or ShapeError."""
    if len(x) != 4 or not all(len(v) == 2 for v in (kernel, stride, padding, dilation)) \
            or min(stride) < 1 or min(dilation) < 1 or min(padding) < 0:
        raise ShapeError(f"a 2-d window op takes [N, C, H, W] and two-element kernel/stride/padding/dilation, got "
                         f"{x}, kernel {kernel}, stride {stride}, padding {padding}, dilation {dilation}")
    spatial = tuple(_window_out(*a) for a in zip(x[2:], kernel, stride, padding, dilation))
    if min(spatial) < 1:
        raise ShapeError(f"window {kernel} (padding {padding}, dilation {dilation}) does not fit {x}")
    return (x[0], x[1] if channels is None else channels) + spatial


def _conv2d(ins, attrs) -> Shape:
    x, w, b = ins
    g = attrs.groups
    if len(w) != 4 or g < 1 or len(x) != 4 or x[1] != w[1] * g or w[0] % g or b != (w[0],):
        raise ShapeError(f"Conv2d takes x [N, C, H, W], w [O, C / groups, kh, kw] and b [O] (groups {g}), "
                         f"got {x}, {w}, {b}")
    return _windows(x, w[0], w[2:], attrs.stride, attrs.padding, attrs.dilation)


def _pooled(x: Shape, kernel, stride, padding, dilation) -> Shape:
    if len(kernel) != 2 or len(padding) != 2 or any(2 * p > k for p, k in zip(padding, kernel)):
        raise ShapeError(f"pooling padding {padding} must be at most half the kernel {kernel}")
    return _windows(x, None, kernel, stride, padding, dilation)


def _max_pool2d(ins, attrs) -> Shape:
    return _pooled(ins[0], attrs.kernel, attrs.stride, attrs.padding, attrs.dilation)


def _avg_pool2d(ins, attrs) -> Shape:
    return _pooled(ins[0], attrs.kernel, attrs.stride, attrs.padding, (1, 1))


# ------------------------------------------------------------------------------------------- torch impls
# Named functions (not lambdas) so that generated FX code reads well.

def cast(x, dtype: str):
    return x.to(DTYPES[dtype])


def permute(x, perm):
    return x.permute(tuple(perm))


def reshape(x, shape):
    return x.reshape(tuple(shape))


def expand(x, shape):
    return x.expand(tuple(shape))


def slice_dim(x, dim, start, end):
    return x.narrow(dim, start, end - start)


def diagonal(x):
    return torch.diagonal(x, 0, -2, -1).unsqueeze(-1)


def flip(x, dims):
    return torch.flip(x, tuple(dims))


def block_diag(stack):
    return torch.block_diag(*stack.unbind(0))


def window_sum(x, before, after):
    rows = torch.nn.functional.pad(x, (0, 0, before, after))
    return rows.unfold(-2, before + after + 1, 1).sum(-1)


def sort_values(x, dim, descending):
    return torch.sort(x, dim, descending=bool(descending)).values


def concat(a, b, dim):
    return torch.cat([a, b], dim)


def sum_keepdim(x, dims):
    return torch.sum(x, dim=list(dims), keepdim=True)


def amax_keepdim(x, dims):
    return torch.amax(x, dim=list(dims), keepdim=True)


def amin_keepdim(x, dims):
    return torch.amin(x, dim=list(dims), keepdim=True)


def gelu_tanh(x):
    return torch.nn.functional.gelu(x, approximate="tanh")


def conv2d(x, w, b, stride, padding, dilation, groups):
    return torch.nn.functional.conv2d(x, w, b, tuple(stride), tuple(padding), tuple(dilation), groups)


def max_pool2d(x, kernel, stride, padding, dilation):
    return torch.nn.functional.max_pool2d(x, tuple(kernel), tuple(stride), tuple(padding), tuple(dilation))


def avg_pool2d(x, kernel, stride, padding, count_include_pad):
    return torch.nn.functional.avg_pool2d(x, tuple(kernel), tuple(stride), tuple(padding),
                                          count_include_pad=bool(count_include_pad))


# ------------------------------------------------------------------------------------ kernel layer ops
# Implementation choices that live in the same e-classes as the algebra they implement (rules/fusion.egg,
# layout.egg, tiling.egg). Their reference implementations are the kernel kinds of kernel_semantics.py with
# their fused expressions evaluated around them: the rule tests check them and the torch backend can run
# them. Signature order: fixed operands, attributes, then the vector of extra inputs (passed as a list).

def _transposed(shape: Shape, layout: str) -> Shape:
    return shape[:-2] + (shape[-1], shape[-2]) if layout == "T" else shape


def _gemm_shape(ins, attrs) -> Shape:
    return _matmul([_transposed(ins[0], attrs.layout_a), _transposed(ins[1], attrs.layout_b)], ())


def _pointwise_shape(_ins, attrs) -> Shape:
    return tuple(attrs.shape)


ROW_RESULT_KINDS = ("sum", "max", "min", "logsumexp")  # one value per row; "moments" two; the other kinds whole rows


def _row_reduce_shape(ins, attrs) -> Shape:
    x = ins[0]
    if attrs.kind == "moments":
        return x[:-1] + (2,)
    return x[:-1] + (1,) if attrs.kind in ROW_RESULT_KINDS else x


def evaluate(expr: tuple, acc: torch.Tensor | None, extras: list[torch.Tensor], x: torch.Tensor | None = None):
    """PyTorch value of a fused expression (eqiforge/ops/fused.py) as kernels compute it, each operator by its
    entry's reference implementation: in float32, or in float64 when a tensor it reads or a cast in it is
    float64 (a kernel never computes narrower than its program); ``acc``/``x`` fill ("acc",)/("x",)."""
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
    if head in ("un", "bin"):
        return EPI[expr[1]].torch_impl(*(_evaluate(e, acc, extras, x, wide) for e in expr[2:]))
    if head == "cast":  # dtype names are torch's
        return _evaluate(expr[2], acc, extras, x, wide).to(getattr(torch, expr[1])).to(wide)
    raise ValueError(f"not an Epi expression: {expr!r}")


def _result_dtype(expr: tuple, like: torch.Tensor) -> torch.dtype:
    """A fused kernel stores in its expression's final cast, else in its first operand's dtype."""
    return DTYPES[expr[1]] if expr[0] == "cast" else like.dtype


def accumulator(x: torch.Tensor) -> torch.dtype:
    """What a kernel accumulates ``x`` in: float32, or float64 for float64 (never less than the input)."""
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def gemm_kernel(a, b, layout_a, layout_b, tile, split_k, epilogue, extras):
    acc = kernel_semantics.gemm(a, b, layout_a == "T", layout_b == "T", accumulator(a))
    return evaluate(epilogue, acc, extras).to(_result_dtype(epilogue, a))


def pointwise_kernel(expr, shape, inputs):
    return evaluate(expr, None, inputs).expand(tuple(shape)).to(_result_dtype(expr, inputs[0]))


def row_reduce_kernel(x, kind, prologue, epilogue, eps, extras):
    if kind not in kernel_semantics.ROW:
        raise ValueError(f"unknown row reduction {kind!r}")
    acc = kernel_semantics.row_reduce(evaluate(prologue, None, extras, x), kind, eps)
    return evaluate(epilogue, acc, extras).to(_result_dtype(epilogue, x))


def _grouped(q_batch: Shape, kv_batch: Shape) -> bool:
    """k/v batch dims equal q's, or have fewer heads in the last batch dim (grouped-query attention)."""
    return (q_batch == kv_batch or (len(q_batch) == len(kv_batch) > 0 and q_batch[:-1] == kv_batch[:-1]
                                    and q_batch[-1] % kv_batch[-1] == 0))


def _attention_shape(ins, attrs) -> Shape:
    q, k, v = ins[:3]
    layout_k = attrs.layout_k
    keys = k[-1] if layout_k == "T" else k[-2]
    if (not _grouped(q[:-2], v[:-2]) or k[:-2] != v[:-2] or keys != v[-2]
            or (k[-2] if layout_k == "T" else k[-1]) != q[-1]):
        raise ShapeError(f"attention needs q [..., Sq, D], k [..., Sk, D] and v [..., Sk, Dv], got {q}, {k}, {v}")
    return q[:-1] + (v[-1],)


def attention_kernel(q, k, v, layout_k, scale, causal, extras):
    bias = extras[0] if extras else None
    return kernel_semantics.attention(q, k, v, scale, causal, layout_k == "T", bias, accumulator(q)).to(q.dtype)


_U, _B = ("unary", 1), ("binary", 2)
_EW = frozenset({"elementwise"})
_TR = frozenset({"elementwise", "transcendental"})
_K = frozenset({"kernel"})


def _op(name, kind_arity, impl, tags=_EW, attrs: dict[str, str] | None = None, shape=_same, **kw) -> OpDef:
    """An entry; ``attrs`` maps each attribute's name to its kind, in signature order."""
    kind, arity = kind_arity
    attrs = attrs or {}
    return OpDef(name, kind, arity, tuple(attrs.values()), shape, impl, frozenset(tags),
                 attr_names=tuple(attrs), **kw)


OPS: dict[str, OpDef] = {o.name: o for o in [
    # leaves: graph inputs, parameters/constants (foldable), and constant-filled tensors (scalars)
    _op("Input", ("leaf", 0), None, {"leaf"}, {"name": "str"}, _leaf),
    _op("Param", ("leaf", 0), None, {"leaf", "constant"}, {"name": "str"}, _leaf),
    _op("Fill", ("leaf", 0), None, {"leaf", "constant"}, {"value": "f64", "shape": "dims", "dtype": "str"}, _fill),
    # elementwise unary: reference implementation, ATen ops, PyTorch source, Triton expression
    _op("Neg", _U, torch.neg, aten=("neg",), torch_src="torch.neg({0})", triton="-{0}"),
    _op("Exp", _U, torch.exp, _TR, aten=("exp",), torch_src="torch.exp({0})", triton="tl.exp({0})"),
    _op("Log", _U, torch.log, _TR, aten=("log",), torch_src="torch.log({0})", triton="tl.log({0})"),
    _op("Sqrt", _U, torch.sqrt, _TR, aten=("sqrt",), torch_src="torch.sqrt({0})", triton="tl.sqrt({0})"),
    _op("Rsqrt", _U, torch.rsqrt, _TR, aten=("rsqrt",), torch_src="torch.rsqrt({0})"),  # Triton: fp64 needs care
    _op("Recip", _U, torch.reciprocal, aten=("reciprocal",), torch_src="torch.reciprocal({0})",
        triton="1.0 / {0}"),
    _op("Abs", _U, torch.abs, aten=("abs",), torch_src="torch.abs({0})", triton="tl.abs({0})"),
    _op("Relu", _U, torch.relu, aten=("relu",), torch_src="torch.relu({0})",
        triton="tl.where({0} < 0.0, 0.0, {0})"),  # keeps nan, like torch
    _op("Sigmoid", _U, torch.sigmoid, _TR, aten=("sigmoid",), torch_src="torch.sigmoid({0})",
        triton="tl.sigmoid({0})"),
    _op("Tanh", _U, torch.tanh, _TR, aten=("tanh",), torch_src="torch.tanh({0})",
        triton="2.0 * tl.sigmoid(2.0 * {0}) - 1.0"),  # the interpreter has no libdevice tanh
    _op("Erf", _U, torch.erf, _TR, aten=("erf",), torch_src="torch.erf({0})", triton="tl.erf({0})"),
    _op("Gelu", _U, torch.nn.functional.gelu, _TR, aten=("gelu",), torch_src="torch.nn.functional.gelu({0})",
        triton="0.5 * {0} * (1.0 + tl.erf({0} * 0.7071067811865476))"),  # x * Phi(x), exact
    _op("GeluTanh", _U, gelu_tanh, _TR, aten=("gelu",), torch_src="torch.nn.functional.gelu({0}, approximate='tanh')",
        # (1+tanh u)/2 = sigmoid(2u)
        triton="{0} * tl.sigmoid(1.5957691216057308 * ({0} + 0.044715 * {0} * {0} * {0}))"),
    _op("Silu", _U, torch.nn.functional.silu, _TR, aten=("silu",), torch_src="torch.nn.functional.silu({0})",
        triton="{0} * tl.sigmoid({0})"),
    _op("Mish", _U, torch.nn.functional.mish, _TR, aten=("mish",), torch_src="torch.nn.functional.mish({0})",
        triton="{0} * tl.where({0} > 20.0, 1.0, tl.exp({0}) * (tl.exp({0}) + 2.0) / "
               "(tl.exp({0}) * (tl.exp({0}) + 2.0) + 2.0))"),  # tanh(log(1 + e)) = e(e + 2) / (e(e + 2) + 2)
    _op("Selu", _U, torch.selu, _TR, aten=("selu",), torch_src="torch.selu({0})",
        triton="1.0507009873554805 * tl.where({0} > 0.0, {0}, 1.6732632423543772 * (tl.exp({0}) - 1.0))"),
    _op("Log1p", _U, torch.log1p, _TR, aten=("log1p",), torch_src="torch.log1p({0})",
        triton="tl.where(tl.abs({0}) < 1e-4, {0} * (1.0 - 0.5 * {0}), tl.log(1.0 + {0}))"),  # log(1 + x) loses x near 0
    _op("Softplus", _U, torch.nn.functional.softplus, _TR, aten=("softplus",),
        torch_src="torch.nn.functional.softplus({0})",
        triton="tl.where({0} > 20.0, {0}, tl.where({0} < -15.0, tl.exp({0}), tl.log(1.0 + tl.exp({0}))))"),
    _op("Hardswish", _U, torch.nn.functional.hardswish, aten=("hardswish",),
        torch_src="torch.nn.functional.hardswish({0})",
        triton="{0} * tl.minimum(tl.maximum({0} + 3.0, 0.0), 6.0) / 6.0"),  # x * relu6(x + 3) / 6; nan stays nan
    _op("Hardsigmoid", _U, torch.nn.functional.hardsigmoid, aten=("hardsigmoid",),
        torch_src="torch.nn.functional.hardsigmoid({0})",
        triton="tl.minimum(tl.maximum({0} / 6.0 + 0.5, 0.0, propagate_nan=tl.PropagateNan.ALL), 1.0, "
               "propagate_nan=tl.PropagateNan.ALL)"),
    # elementwise binary (equal shapes and dtypes)
    _op("Add", _B, torch.add, _EW | {"commutative", "associative"}, aten=("add.Tensor", "add.Scalar"),
        torch_src="torch.add({0}, {1})", triton="{0} + {1}"),
    _op("Sub", _B, torch.sub, aten=("sub.Tensor", "sub.Scalar", "rsub.Tensor", "rsub.Scalar"),
        torch_src="torch.sub({0}, {1})", triton="{0} - {1}"),
    _op("Mul", _B, torch.mul, _EW | {"commutative", "associative"}, aten=("mul.Tensor", "mul.Scalar"),
        torch_src="torch.mul({0}, {1})", triton="{0} * {1}"),
    _op("Div", _B, torch.div, aten=("div.Tensor", "div.Scalar"), torch_src="torch.div({0}, {1})",
        triton="{0} / {1}"),
    _op("Pow", _B, torch.pow, _TR, aten=("pow.Tensor_Scalar", "pow.Tensor_Tensor", "pow.Scalar"),
        torch_src="torch.pow({0}, {1})"),  # Triton: several statements
    _op("Maximum", _B, torch.maximum, _EW | {"commutative"}, aten=("maximum", "max.other"),
        torch_src="torch.maximum({0}, {1})",
        triton="tl.maximum({0}, {1}, propagate_nan=tl.PropagateNan.ALL)"),  # nan wins, like torch
    _op("Minimum", _B, torch.minimum, _EW | {"commutative"}, aten=("minimum", "min.other"),
        torch_src="torch.minimum({0}, {1})", triton="tl.minimum({0}, {1}, propagate_nan=tl.PropagateNan.ALL)"),
    *(_op(name, ("compare", 2), getattr(torch, fn), aten=(fn,), torch_src=f"torch.{fn}({{0}}, {{1}})")
      for name, fn in [("Eq", "eq"), ("Ne", "ne"), ("Lt", "lt"), ("Le", "le"), ("Gt", "gt"), ("Ge", "ge")]),
    _op("And", ("compare", 2), torch.logical_and, aten=("logical_and", "bitwise_and.Tensor"),
        torch_src="torch.logical_and({0}, {1})"),
    _op("Or", ("compare", 2), torch.logical_or, aten=("logical_or", "bitwise_or.Tensor"),
        torch_src="torch.logical_or({0}, {1})"),
    _op("Not", ("compare", 1), torch.logical_not, aten=("logical_not", "bitwise_not.default"),
        torch_src="torch.logical_not({0})"),
    _op("Where", ("where", 3), torch.where, shape=_where, torch_src="torch.where({0}, {1}, {2})",
        aten=("where.self", "where.ScalarSelf", "where.ScalarOther", "where.Scalar", "masked_fill.Scalar",
              "masked_fill.Tensor")),
    _op("Cast", ("cast", 1), cast, attrs={"dtype": "str"}),
    # data movement
    _op("Permute", ("movement", 1), permute, {"view"}, {"perm": "dims"}, _permute),
    _op("Reshape", ("movement", 1), reshape, {"view"}, {"shape": "dims"}, _reshape),
    _op("Expand", ("movement", 1), expand, {"view"}, {"shape": "dims"}, _expand),
    _op("Slice", ("movement", 1), slice_dim, {"view"}, {"dim": "i64", "start": "i64", "end": "i64"}, _slice),
    _op("Concat", ("movement", 2), concat, frozenset(), {"dim": "i64"}, _concat),
    # reorderings (copies): reversed along dims, rotated by a shift along one dim
    _op("Flip", ("movement", 1), flip, frozenset(), {"dims": "dims"}, _flip, torch_src="torch.flip({0}, {dims})"),
    _op("Roll", ("movement", 1), torch.roll, frozenset(), {"shift": "i64", "dim": "i64"}, _along,
        torch_src="torch.roll({0}, {shift}, {dim})"),
    # the main diagonal of the last two dims as a column (keeps the rank): [..., n, m] -> [..., min(n, m), 1]
    _op("Diagonal", ("movement", 1), diagonal, {"view"}, shape=_diagonal,
        torch_src="torch.diagonal({0}, 0, -2, -1).unsqueeze(-1)"),
    # the blocks of a stack [h, d, k] on the diagonal of an [h d, h k] matrix, zero elsewhere (torch.block_diag
    # of equal blocks): a product by it is a batched product by the blocks
    _op("BlockDiag", ("movement", 1), block_diag, frozenset(), shape=_block_diag,
        torch_src="torch.block_diag(*{0}.unbind(0))"),
    # contraction and reductions
    _op("MatMul", ("matmul", 2), torch.matmul, frozenset(), shape=_matmul, torch_src="torch.matmul({0}, {1})"),
    # a product whose left operand is read on its band lo <= j - i <= hi alone (zero elsewhere, so its value is
    # the MatMul's where the operand is banded): one multiply-add per diagonal (kernel_semantics.band_matmul)
    _op("BandMatMul", ("band", 2), kernel_semantics.band_matmul, frozenset(), {"lo": "i64", "hi": "i64"},
        _matmul, torch_src="band_matmul({0}, {1}, {lo}, {hi})"),
    _op("Sum", ("reduce", 1), sum_keepdim, {"reduction"}, {"dims": "dims"}, _reduce),
    _op("Amax", ("reduce", 1), amax_keepdim, {"reduction"}, {"dims": "dims"}, _reduce),
    _op("Amin", ("reduce", 1), amin_keepdim, {"reduction"}, {"dims": "dims"}, _reduce),
    # the running sum along one dim (a scan: same shape)
    _op("Cumsum", ("scan", 1), torch.cumsum, frozenset(), {"dim": "i64"}, _along, torch_src="torch.cumsum({0}, {dim})"),
    # the values sorted along one dim (descending: 0/1); their indices are a PyTorch call
    _op("Sort", ("scan", 1), sort_values, frozenset(), {"dim": "i64", "descending": "i64"}, _along,
        torch_src="torch.sort({0}, {dim}, descending={descending} == 1).values"),
    # the sum of a sliding window of rows (dim -2): rows i - before .. i + after, zero past the ends (a product
    # by a band of ones)
    _op("WindowSum", ("scan", 1), window_sum, frozenset(), {"before": "i64", "after": "i64"}, _window,
        torch_src="torch.nn.functional.pad({0}, (0, 0, {before}, {after})).unfold(-2, {before} + {after} + 1, 1)"
                  ".sum(-1)"),
    # 2-d convolution and pooling over [N, C, H, W] (PyTorch's window formula, no ceil mode); a convolution
    # always has its bias [O] (a zero Fill when the program has none), so rules can move shifts into it
    _op("Conv2d", ("conv", 3), conv2d, frozenset(), {"stride": "dims", "padding": "dims", "dilation": "dims",
                                                     "groups": "i64"}, _conv2d,
        torch_src="torch.nn.functional.conv2d({0}, {1}, {2}, {stride}, {padding}, {dilation}, {groups})"),
    _op("MaxPool2d", ("pool", 1), max_pool2d, frozenset(), {"kernel": "dims", "stride": "dims", "padding": "dims",
                                                          "dilation": "dims"}, _max_pool2d,
        torch_src="torch.nn.functional.max_pool2d({0}, {kernel}, {stride}, {padding}, {dilation})"),
    _op("AvgPool2d", ("pool", 1), avg_pool2d, frozenset(), {"kernel": "dims", "stride": "dims", "padding": "dims",
                                                          "count_include_pad": "i64"}, _avg_pool2d,
        torch_src="torch.nn.functional.avg_pool2d({0}, {kernel}, {stride}, {padding}, "
                  "count_include_pad={count_include_pad} == 1)"),
    # a PyTorch call the optimizer does not look into: its operands, and which output of the call it is
    _op("Extern", ("extern", 0), None, {"extern"}, {"key": "str", "output": "i64"}, _leaf, variadic=True),
    # kernel layer (the attribute names are those of the kernel specs, eqiforge/lower/kernels.py)
    _op("GemmK", ("kernel", 2), gemm_kernel, _K, {"layout_a": "str", "layout_b": "str", "tile": "tile",
                                                  "split_k": "i64", "epilogue": "epi"}, _gemm_shape,
        variadic=True, config=("tile", "split_k")),
    _op("PointwiseK", ("kernel", 0), pointwise_kernel, _K, {"expr": "epi", "shape": "dims"}, _pointwise_shape,
        variadic=True),
    _op("RowReduceK", ("kernel", 1), row_reduce_kernel, _K,
        {"kind": "str", "prologue": "epi", "epilogue": "epi", "eps": "f64"}, _row_reduce_shape, variadic=True),
    # fused attention: q, k, v; k's layout ("T": given as [..., D, Sk]), scale, causal (0/1); extra: a bias
    _op("AttentionK", ("kernel", 3), attention_kernel, _K, {"layout_k": "str", "scale": "f64", "causal": "i64"},
        _attention_shape, variadic=True),
]}

COMPARE_OPS = frozenset(n for n, o in OPS.items() if o.kind == "compare")
#: the operators of fused expressions (``("un", name, e)``, ``("bin", name, a, b)``) and their ops
EPI: dict[str, OpDef] = {o.epi: o for o in OPS.values() if o.epi}


def get(name: str) -> OpDef:
    try:
        return OPS[name]
    except KeyError:
        raise KeyError(f"unknown IR op {name!r}; known ops: {sorted(OPS)}") from None


def infer_shape(name: str, in_shapes: list[Shape], attrs: tuple) -> Shape:
    """Output shape of ``name`` applied to operands of ``in_shapes``; ShapeError if they do not fit."""
    op = get(name)
    if len(in_shapes) < op.arity or (len(in_shapes) > op.arity and not op.variadic):
        raise ShapeError(f"{name} takes {op.arity}{'+' if op.variadic else ''} operands, got {len(in_shapes)}")
    return op.shape([tuple(s) for s in in_shapes], op.named(attrs))


def infer_dtype(name: str, in_dtypes: list[str], attrs: tuple) -> str:
    """Output dtype: casts give their target, comparisons bool, Where its branches, kernels their stored
    expression's final cast, others their operand."""
    if name in ("Cast", "Fill"):
        return get(name).named(attrs).dtype
    if name in COMPARE_OPS:
        return "bool"
    if name == "Where":
        return in_dtypes[1]
    exprs = get(name).exprs
    result = get(name).named(attrs)._asdict()[exprs[-1]] if exprs else None  # the expression stored
    if result is not None and result[0] == "cast":
        return result[1]
    return in_dtypes[0]
