"""ATen -> IR: one small builder per op family, and ``TABLE``, the map from ATen overloads to builders.

A builder is ``build(b, args, out) -> Ref | tuple[Ref | None, ...]``:

- ``b`` is the :class:`Builder`, which adds IR nodes while establishing the IR conventions of ``ops.py``
  (explicit broadcasting and type promotion, keep-dim reductions, equal-rank matmuls);
- ``args`` maps the ATen schema's argument names to their values, defaults filled in; tensors are
  :class:`Ref` s, everything else is the plain Python value of the FX graph;
- ``out`` is the :class:`Meta` (static shape and dtype name) of the call's result, or a tuple of them for
  multi-output ops. Builders read result shapes from it instead of re-deriving ATen's shape logic
  (``view(x, [-1, 4])``, ``expand``, ``split`` sizes, ...), and result dtypes instead of its promotion rules.

A builder raises :class:`Unsupported` for a call the IR cannot express (``sort``'s indices, say); the
converter then emits an ``Extern``, exactly as for an op missing from the table.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Callable

import torch

from .. import ops
from ..ir import Graph

aten = torch.ops.aten

#: most dims one reduction node reduces (the schema's shape rules); more are chained
MAX_REDUCED_DIMS = {"Sum": 3, "Amax": 2, "Amin": 2}


class Unsupported(Exception):
    """This call cannot be expressed in the IR; the converter keeps it as an ``Extern``."""


@dataclass(frozen=True)
class Meta:
    """Static shape and dtype name of one tensor value (not a tuple: tuples mean multi-output)."""

    shape: tuple[int, ...]
    dtype: str


@dataclass(frozen=True)
class Ref:
    """A tensor operand: an IR node id with its shape and dtype (so builders need not look them up)."""

    id: int
    shape: tuple[int, ...]
    dtype: str


Args = dict[str, Any]
Out = Any  # Meta, or a tuple of Meta | None for multi-output ops


def norm_dim(dim: int, rank: int) -> int:
    """A dim in ``[0, rank)``; negative dims count from the end (a scalar wraps like a 1-d tensor)."""
    wrap = max(rank, 1)
    if not -wrap <= dim < wrap:
        raise Unsupported(f"dim {dim} out of range for rank {rank}")
    return dim % wrap


def norm_dims(dims, rank: int) -> list[int]:
    """Reduction dims, sorted and normalised; ``None`` or ``[]`` means all (ATen's convention)."""
    if dims is None or (isinstance(dims, (list, tuple)) and not dims):
        return list(range(rank))
    dims = [dims] if isinstance(dims, int) else dims
    return sorted({norm_dim(d, rank) for d in dims}) if rank else []


def dtype_name(dtype: torch.dtype) -> str:
    try:
        return ops.DTYPE_NAMES[dtype]
    except KeyError:
        raise Unsupported(f"dtype {dtype} is not an IR dtype") from None


def acc_dtype(dtype: str) -> str:
    """The dtype numerically delicate composites (softmax, norms, variance) compute in, as ATen does."""
    return "float32" if dtype in ("float16", "bfloat16") else dtype


class Builder:
    """Adds IR nodes to ``graph``; every helper returns a :class:`Ref` and skips no-op nodes."""

    def __init__(self, graph: Graph):
        self.graph = graph

    def ref(self, node_id: int) -> Ref:
        n = self.graph.nodes[node_id]
        return Ref(node_id, n.shape, n.dtype)

    def op(self, name: str, *operands: Ref, attrs: tuple = ()) -> Ref:
        return self.ref(self.graph.add(name, tuple(x.id for x in operands), attrs))

    def fill(self, value, shape, dtype: str) -> Ref:
        if not isinstance(value, (bool, int, float)):
            raise Unsupported(f"fill value {value!r} is not a real number")
        if float(value) != value and not math.isnan(value):
            raise Unsupported(f"fill value {value} is not exact as a float")
        return self.ref(self.graph.fill(float(value), tuple(shape), dtype))

    def node(self, x: Ref):
        return self.graph.nodes[x.id]

    def cast(self, x: Ref, dtype: str) -> Ref:
        """``x`` as ``dtype``; a cast Fill is a Fill of the cast value (exactly what the Cast would give)."""
        if x.dtype == dtype:
            return x
        n = self.node(x)
        if n.op == "Fill":
            value = torch.tensor(n.attrs[0], dtype=ops.DTYPES[x.dtype]).to(ops.DTYPES[dtype]).item()
            return self.fill(value, x.shape, dtype)
        return self.op("Cast", x, attrs=(dtype,))

    def reshape(self, x: Ref, shape) -> Ref:
        """``x`` reshaped; a Reshape of a Reshape reshapes the source (so views chain into one node), and a
        reshaped Fill is a Fill."""
        shape = tuple(shape)
        n = self.node(x)
        if n.op == "Fill":
            return self.fill(n.attrs[0], shape, x.dtype)
        if n.op == "Reshape":
            x = self.ref(n.inputs[0])
        return x if x.shape == shape else self.op("Reshape", x, attrs=(shape,))

    def permute(self, x: Ref, perm) -> Ref:
        """``x`` permuted; a permutation that moves unit dims alone (the others keep their order) is a
        Reshape, so a chain of views around it composes into one reshape the rules see through."""
        perm = tuple(perm)
        moved = [d for d in perm if x.shape[d] != 1]
        if moved == sorted(moved):
            return self.reshape(x, tuple(x.shape[d] for d in perm))
        return self.op("Permute", x, attrs=(perm,))

    def broadcast(self, x: Ref, shape) -> Ref:
        """``x`` broadcast to ``shape``: a Reshape adds the missing leading dims, an Expand grows size-1 dims.
        A Fill is simply filled at the new shape."""
        shape = tuple(shape)
        n = self.node(x)
        if n.op == "Fill":
            return self.fill(n.attrs[0], shape, x.dtype)
        x = self.reshape(x, (1,) * (len(shape) - len(x.shape)) + x.shape)
        return x if x.shape == shape else self.op("Expand", x, attrs=(shape,))

    def slice(self, x: Ref, dim: int, start: int, end: int) -> Ref:
        return x if (start, end) == (0, x.shape[dim]) else self.op("Slice", x, attrs=(dim, start, end))

    def operand(self, value, shape, dtype: str) -> Ref:
        """An elementwise operand of the given shape and dtype: scalars become Fills, tensors are cast and
        broadcast (cast first: it is cheaper on the smaller tensor)."""
        if isinstance(value, Ref):
            return self.broadcast(self.cast(value, dtype), shape)
        return self.fill(value, shape, dtype)

    def elementwise(self, name: str, values, shape, dtype: str) -> Ref:
        return self.op(name, *(self.operand(v, shape, dtype) for v in values))

    def scale(self, x: Ref, factor) -> Ref:
        """``x * factor`` for a Python number, skipping factor 1 (``alpha``/``beta`` of add, addmm, ...)."""
        return x if factor == 1 else self.op("Mul", x, self.fill(factor, x.shape, x.dtype))

    def reduce(self, name: str, x: Ref, dims) -> Ref:
        """Sum/Amax/Amin over ``dims`` keeping them (size 1), chaining nodes when there are many dims."""
        dims = norm_dims(dims, len(x.shape))
        step = MAX_REDUCED_DIMS[name]
        for i in range(0, len(dims), step):
            x = self.op(name, x, attrs=(tuple(dims[i:i + step]),))
        return x

    def mean(self, x: Ref, dims) -> Ref:
        """Keep-dim mean as Sum then Mul by 1/n (a Mul, so the algebra sees a scaling it can move)."""
        count = math.prod(x.shape[d] for d in norm_dims(dims, len(x.shape)))
        total = self.reduce("Sum", x, dims)
        return self.op("Mul", total, self.fill(1.0 / count, total.shape, total.dtype))

    def matmul(self, a: Ref, b: Ref, out: Meta) -> Ref:
        """``torch.matmul`` semantics: vectors become [1, n] / [n, 1] matrices, batch dims broadcast
        explicitly, and the result is reshaped to the ATen result shape (dropping the vector dims)."""
        a, b = self.cast(a, out.dtype), self.cast(b, out.dtype)
        if len(a.shape) == 1:
            a = self.reshape(a, (1,) + a.shape)
        if len(b.shape) == 1:
            b = self.reshape(b, b.shape + (1,))
        batch = tuple(torch.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
        a = self.broadcast(a, batch + a.shape[-2:])
        b = self.broadcast(b, batch + b.shape[-2:])
        return self.reshape(self.op("MatMul", a, b), out.shape)


def first(args: Args, count: int = 1) -> list:
    """The first ``count`` argument values in schema order (operand names differ across overloads)."""
    return list(args.values())[:count]


def promoted(x, y) -> str:
    """torch's promoted dtype of two tensor or scalar operands (what comparisons compute in)."""
    def probe(v):  # only the dtype and whether it has dims matter to torch's promotion rules
        return torch.empty((0,) * min(len(v.shape), 1), dtype=ops.DTYPES[v.dtype]) if isinstance(v, Ref) else v
    return dtype_name(torch.result_type(probe(x), probe(y)))


# ------------------------------------------------------------------------------------ elementwise builders

def unary(name: str):
    """Unary math: the operand is cast to the result dtype first (``exp`` of an int tensor is float)."""
    return lambda b, a, out: b.op(name, b.cast(a["self"], out.dtype))


def gelu(b: Builder, a: Args, out: Meta) -> Ref:
    return b.op("GeluTanh" if a["approximate"] == "tanh" else "Gelu", b.cast(a["self"], out.dtype))


def binary(name: str):
    """Arithmetic of two operands (tensor or scalar, either side) computed in the result dtype."""
    return lambda b, a, out: b.elementwise(name, first(a, 2), out.shape, out.dtype)


def add_sub(name: str):
    """``add``/``sub``: ``self op alpha * other``."""
    def build(b: Builder, a: Args, out: Meta) -> Ref:
        other = b.scale(b.operand(a["other"], out.shape, out.dtype), a["alpha"])
        return b.op(name, b.operand(a["self"], out.shape, out.dtype), other)
    return build


def rsub(b: Builder, a: Args, out: Meta) -> Ref:
    """``other - alpha * self``."""
    scaled = b.scale(b.operand(a["self"], out.shape, out.dtype), a["alpha"])
    return b.op("Sub", b.operand(a["other"], out.shape, out.dtype), scaled)


def compare(name: str):
    """Comparisons compute in the promoted operand dtype and produce bool."""
    return lambda b, a, out: b.elementwise(name, first(a, 2), out.shape, promoted(*first(a, 2)))


def logical(name: str):
    """Logical ops (and bitwise ops on bools) on operands cast to bool; xor is ``Ne`` of bools."""
    def build(b: Builder, a: Args, out: Meta) -> Ref:
        if out.dtype != "bool":
            raise Unsupported("bitwise op on non-bool tensors")
        return b.elementwise(name, first(a, 2), out.shape, "bool")  # Not has one operand: first() gives one
    return build


def clamped(b: Builder, x, lo, hi, out: Meta) -> Ref:
    """Minimum(Maximum(x, lo), hi), the order torch uses (so lo > hi gives hi); None bounds are skipped."""
    x = b.operand(x, out.shape, out.dtype)
    if lo is not None:
        x = b.elementwise("Maximum", [x, lo], out.shape, out.dtype)
    if hi is not None:
        x = b.elementwise("Minimum", [x, hi], out.shape, out.dtype)
    return x


def clamp(b: Builder, a: Args, out: Meta) -> Ref:
    """``clamp``/``clamp_min``/``clamp_max`` (scalar or tensor bounds)."""
    return clamped(b, a["self"], a.get("min"), a.get("max"), out)


def softplus(b: Builder, a: Args, out: Meta) -> Ref:
    """softplus(x; beta, threshold) = Softplus(beta x) / beta, exact where threshold is the op's 20 (it
    compares beta x with it); another threshold stays a PyTorch call."""
    if a["threshold"] != 20:
        raise Unsupported(f"softplus with threshold {a['threshold']} (the IR op's is 20)")
    x = b.cast(a["self"], out.dtype)
    beta = a["beta"]
    return b.op("Softplus", x) if beta == 1 else b.scale(b.op("Softplus", b.scale(x, beta)), 1.0 / beta)


def elu(b: Builder, a: Args, out: Meta) -> Ref:
    """elu(x; alpha, scale, input_scale) = scale * Where(x > 0, x, alpha * (exp(input_scale * x) - 1))."""
    x = b.cast(a["self"], out.dtype)
    negative = b.op("Sub", b.op("Exp", b.scale(x, a["input_scale"])), b.fill(1.0, x.shape, x.dtype))
    y = b.op("Where", b.op("Gt", x, b.fill(0, x.shape, x.dtype)), x, b.scale(negative, a["alpha"]))
    return b.scale(y, a["scale"])


def hardtanh(b: Builder, a: Args, out: Meta) -> Ref:
    return clamped(b, a["self"], a["min_val"], a["max_val"], out)


def leaky_relu(b: Builder, a: Args, out: Meta) -> Ref:
    """Where(x > 0, x, slope * x)."""
    x = b.cast(a["self"], out.dtype)
    return b.op("Where", b.op("Gt", x, b.fill(0, x.shape, x.dtype)), x, b.scale(x, a["negative_slope"]))


def where(b: Builder, a: Args, out: Meta) -> Ref:
    cond = b.operand(a["condition"], out.shape, "bool")
    return b.op("Where", cond, *(b.operand(a[k], out.shape, out.dtype) for k in ("self", "other")))


def masked_fill(b: Builder, a: Args, out: Meta) -> Ref:
    """``masked_fill(x, mask, v)`` = Where(mask, v, x)."""
    mask = b.operand(a["mask"], out.shape, "bool")
    value, x = (b.operand(a[k], out.shape, out.dtype) for k in ("value", "self"))
    return b.op("Where", mask, value, x)


# -------------------------------------------------------------------------------------- reduction builders

def reduction(name: str):
    """``sum``/``amax``/``amin``/``max()``/``min()``: keep-dim node(s), then a Reshape if dims are dropped."""
    def build(b: Builder, a: Args, out: Meta) -> Ref:
        return b.reshape(b.reduce(name, b.cast(a["self"], out.dtype), a.get("dim")), out.shape)
    return build


def any_all(name: str):
    """``any``/``all`` = Amax/Amin of bools; unlike ``sum``, an explicit empty dim list reduces nothing."""
    def build(b: Builder, a: Args, out: Meta) -> Ref:
        x = b.cast(a["self"], "bool")
        dims = a.get("dim")
        return b.reshape(x if dims == [] else b.reduce(name, x, dims), out.shape)
    return build


def values_of(name: str):
    """``max.dim``/``min.dim`` whose indices no one reads: the values are an Amax/Amin (the indices stay a
    PyTorch call: the builder gives no node for them, so a program reading them keeps the whole call)."""
    def build(b: Builder, a: Args, out: tuple) -> tuple:
        values = b.reduce(name, a["self"], a["dim"])
        return b.reshape(values, out[0].shape), None
    return build


def vector_norm(b: Builder, a: Args, out: Meta) -> Ref:
    """``linalg_vector_norm(x, ord, dim)``: sqrt of the sum of squares (ord 2), the sum of magnitudes (1), their
    max or min (inf, -inf), or (sum |x|^p)^(1/p); other orders (0: a count) stay a PyTorch call."""
    x, order = b.cast(a["self"], out.dtype), float(a["ord"])
    dims = a["dim"]
    if order == 2:
        total = b.op("Sqrt", b.reduce("Sum", b.op("Mul", x, x), dims))
    elif order == 1:
        total = b.reduce("Sum", b.op("Abs", x), dims)
    elif math.isinf(order):
        total = b.reduce("Amax" if order > 0 else "Amin", b.op("Abs", x), dims)
    elif order > 0:
        powered = b.op("Pow", b.op("Abs", x), b.fill(order, x.shape, x.dtype))
        summed = b.reduce("Sum", powered, dims)
        total = b.op("Pow", summed, b.fill(1.0 / order, summed.shape, summed.dtype))
    else:
        raise Unsupported(f"vector norm of order {order}")
    return b.reshape(total, out.shape)


def cumsum(b: Builder, a: Args, out: Meta) -> Ref:
    """``cumsum(x, dim)`` (in the result dtype, as ``dtype=`` asks): one Cumsum."""
    x = a["self"]
    if not x.shape:
        raise Unsupported("cumsum of a 0-d tensor")
    return b.op("Cumsum", b.cast(x, out.dtype), attrs=(norm_dim(a["dim"], len(x.shape)),))


def sort(b: Builder, a: Args, out: tuple) -> tuple:
    """``sort`` whose indices no one reads: the sorted values (stable or not: equal values are alike)."""
    x = a["self"]
    if not x.shape:
        raise Unsupported("sort of a 0-d tensor")
    return b.op("Sort", x, attrs=(norm_dim(a["dim"], len(x.shape)), int(bool(a["descending"])))), None


def mean(b: Builder, a: Args, out: Meta) -> Ref:
    return b.reshape(b.mean(b.cast(a["self"], out.dtype), a.get("dim")), out.shape)


def var_mean(b: Builder, a: Args, out: Out):
    """``var``/``var_mean`` with ``correction``: sum of centered squares divided by ``n - correction``.

    The scale is a Div, not a Mul by a reciprocal: ``n - correction`` may be 0, where torch gives inf/nan.
    """
    var_meta = out[0] if isinstance(out, tuple) else out
    x = b.cast(a["self"], acc_dtype(var_meta.dtype))
    dims = a["dim"]
    count = math.prod(x.shape[d] for d in norm_dims(dims, len(x.shape)))
    correction = 1 if a["correction"] is None else a["correction"]
    avg = b.mean(x, dims)
    centered = b.op("Sub", x, b.broadcast(avg, x.shape))
    total = b.reduce("Sum", b.op("Mul", centered, centered), dims)
    var = b.op("Div", total, b.fill(count - correction, total.shape, total.dtype))
    var = b.reshape(b.cast(var, var_meta.dtype), var_meta.shape)
    if not isinstance(out, tuple):
        return var
    return var, b.reshape(b.cast(avg, out[1].dtype), out[1].shape)


def softmax(log: bool):
    """``softmax`` = Exp(x - max) / Sum, ``log_softmax`` = (x - max) - Log(Sum), both with the max kept so
    the extractor can re-form a fused row kernel. Half types compute in float32, as ATen does."""
    def build(b: Builder, a: Args, out: Meta) -> Ref:
        x = b.cast(a["self"], acc_dtype(out.dtype))
        dims = [a["dim"]]
        centered = b.op("Sub", x, b.broadcast(b.reduce("Amax", x, dims), x.shape))
        exps = b.op("Exp", centered)
        total = b.broadcast(b.reduce("Sum", exps, dims), x.shape)
        y = b.op("Sub", centered, b.op("Log", total)) if log else b.op("Div", exps, total)
        return b.cast(y, out.dtype)
    return build


def layer_norm(b: Builder, a: Args, out: Out):
    """``native_layer_norm`` -> (normalised output, mean, rstd); mean and rstd keep the normalised dims as
    size 1, which is the shape ATen returns them in."""
    y_meta, mean_meta, rstd_meta = out
    x = b.cast(a["input"], acc_dtype(mean_meta.dtype))
    dims = list(range(len(x.shape) - len(a["normalized_shape"]), len(x.shape)))
    avg = b.mean(x, dims)
    centered = b.op("Sub", x, b.broadcast(avg, x.shape))
    var = b.mean(b.op("Mul", centered, centered), dims)
    rstd = b.op("Rsqrt", b.op("Add", var, b.fill(a["eps"], var.shape, var.dtype)))
    y = b.op("Mul", centered, b.broadcast(rstd, x.shape))
    if a["weight"] is not None:
        y = b.op("Mul", y, b.operand(a["weight"], x.shape, x.dtype))
    if a["bias"] is not None:
        y = b.op("Add", y, b.operand(a["bias"], x.shape, x.dtype))
    return (b.cast(y, y_meta.dtype), b.reshape(b.cast(avg, mean_meta.dtype), mean_meta.shape),
            b.reshape(b.cast(rstd, rstd_meta.dtype), rstd_meta.shape))


# ---------------------------------------------------------------------------------------- matmul builders

def matmul(b: Builder, a: Args, out: Meta) -> Ref:
    """``mm``, ``bmm``, ``matmul``, ``mv``, ``dot``: all one MatMul with torch.matmul semantics."""
    return b.matmul(*first(a, 2), out)


def addmm(b: Builder, a: Args, out: Meta) -> Ref:
    """``addmm``/``baddbmm``: ``beta * self + alpha * (m1 @ m2)``; with beta 0, self is ignored (as torch)."""
    bias, m1, m2 = first(a, 3)
    product = b.scale(b.matmul(m1, m2, out), a["alpha"])
    if a["beta"] == 0:
        return product
    return b.op("Add", product, b.scale(b.operand(bias, out.shape, out.dtype), a["beta"]))


def linear(b: Builder, a: Args, out: Meta) -> Ref:
    """``linear(x, W, bias)`` = x @ W^T (+ bias); only pre-dispatch graphs keep it whole."""
    w = a["weight"]
    product = b.matmul(a["input"], b.permute(w, (1, 0)) if len(w.shape) == 2 else w, out)
    if a["bias"] is None:
        return product
    return b.op("Add", product, b.operand(a["bias"], out.shape, out.dtype))


# ------------------------------------------------------------------------------ convolution and pooling

def pair(value, name: str) -> tuple[int, int]:
    """A 2-d window argument (int or one- or two-element list) as two ints; padding="same" and the like stay
    PyTorch calls."""
    if isinstance(value, int):
        return value, value
    if not isinstance(value, (list, tuple)) or len(value) not in (1, 2) or not all(isinstance(v, int) for v in value):
        raise Unsupported(f"{name}={value!r} is not one or two ints")
    return (value[0], value[0]) if len(value) == 1 else tuple(value)


def convolution(b: Builder, a: Args, out: Meta) -> Ref:
    """``convolution``/``conv2d`` over [N, C, H, W]: one Conv2d whose bias is a zero Fill when absent (so a
    folded shift has a bias to join); transposed and 1-d/3-d convolutions stay PyTorch calls."""
    x, w = a["input"], a["weight"]
    if a.get("transposed") or len(x.shape) != 4 or len(w.shape) != 4:
        raise Unsupported("only 2-d, non-transposed convolutions over [N, C, H, W] are IR ops")
    bias = b.fill(0, (w.shape[0],), out.dtype) if a["bias"] is None else b.cast(a["bias"], out.dtype)
    attrs = (pair(a["stride"], "stride"), pair(a["padding"], "padding"), pair(a["dilation"], "dilation"), a["groups"])
    return b.op("Conv2d", b.cast(x, out.dtype), b.cast(w, out.dtype), bias, attrs=attrs)


def pooled(b: Builder, name: str, x: Ref, attrs: tuple, out: Out):
    """A pooling node, checked against the ATen result shape (ceil mode is taken where it changes nothing);
    a multi-output call (``max_pool2d_with_indices``) gives the values only."""
    meta = out[0] if isinstance(out, tuple) else out
    try:
        shape = ops.infer_shape(name, [x.shape], attrs)
    except ops.ShapeError as err:
        raise Unsupported(str(err)) from None
    if shape != meta.shape:
        raise Unsupported(f"{name} with ceil mode gives {meta.shape}, not {shape}")
    y = b.op(name, x, attrs=attrs)
    return (y,) + (None,) * (len(out) - 1) if isinstance(out, tuple) else y


def window(a: Args) -> tuple:
    """kernel, stride (an empty list: the kernel) and padding of a pooling call."""
    kernel = pair(a["kernel_size"], "kernel_size")
    return kernel, pair(a["stride"], "stride") if a["stride"] else kernel, pair(a["padding"], "padding")


def max_pool(b: Builder, a: Args, out: Out):
    return pooled(b, "MaxPool2d", a["self"], window(a) + (pair(a["dilation"], "dilation"),), out)


def avg_pool(b: Builder, a: Args, out: Meta) -> Ref:
    if a["divisor_override"] is not None:
        raise Unsupported("avg_pool2d with divisor_override")
    return pooled(b, "AvgPool2d", a["self"], window(a) + (int(a["count_include_pad"]),), out)


def adaptive_avg_pool(b: Builder, a: Args, out: Meta) -> Ref:
    """An adaptive average pool whose output size divides the input is a plain one (kernel = stride)."""
    x = a["self"]
    size = pair(a["output_size"], "output_size")
    if len(x.shape) != 4 or any(n % s for n, s in zip(x.shape[2:], size)):
        raise Unsupported(f"adaptive pooling of {x.shape} to {size} has windows of different sizes")
    kernel = tuple(n // s for n, s in zip(x.shape[2:], size))
    return pooled(b, "AvgPool2d", x, (kernel, kernel, (0, 0), 1), out)


def batch_norm_inference(b: Builder, a: Args, out: tuple):
    """Inference batch norm (running statistics) as ``x * scale + shift`` with per-channel ``scale = weight *
    rsqrt(var + eps)`` and ``shift = bias - mean * scale`` broadcast over dim 1: the form rules/conv.egg folds
    into a convolution's weight and bias (and constant folding computes once). The saved statistics, empty
    in inference, are not given."""
    x = a["input"]
    if len(x.shape) < 2:
        raise Unsupported("batch norm needs a channel dim")
    dtype, c = acc_dtype(out[0].dtype), x.shape[1]

    def per_channel(name):  # a [C] argument, or None
        return None if a[name] is None else b.cast(a[name], dtype)
    var, mean, weight, bias = (per_channel(k) for k in ("running_var", "running_mean", "weight", "bias"))
    scale = b.op("Rsqrt", b.op("Add", var, b.fill(a["eps"], (c,), dtype)))
    scale = scale if weight is None else b.op("Mul", scale, weight)
    shift = b.op("Sub", b.fill(0, (c,), dtype) if bias is None else bias, b.op("Mul", mean, scale))

    def spread(v):
        return b.broadcast(b.reshape(v, (1, c) + (1,) * (len(x.shape) - 2)), x.shape)
    y = b.op("Add", b.op("Mul", b.cast(x, dtype), spread(scale)), spread(shift))
    return (b.cast(y, out[0].dtype),) + (None,) * (len(out) - 1)


# -------------------------------------------------------------------------------------- movement builders

def same_values(b: Builder, a: Args, out: Meta) -> Ref:
    """Copies, aliases and dtype conversions: the values of the first operand, cast to the result dtype."""
    return b.cast(first(a)[0], out.dtype)


def reshape_to_result(b: Builder, a: Args, out: Meta) -> Ref:
    """``view``/``reshape``/``squeeze``/``unsqueeze``/``flatten``...: a Reshape to the ATen result shape."""
    return b.reshape(a["self"], out.shape)


def expand(b: Builder, a: Args, out: Meta) -> Ref:
    return b.broadcast(a["self"], out.shape)


def permute(b: Builder, a: Args, out: Meta) -> Ref:
    x = a["self"]
    return b.permute(x, [norm_dim(d, len(x.shape)) for d in a["dims"]])


def transpose(b: Builder, a: Args, out: Meta) -> Ref:
    """``transpose(x, d0, d1)`` and ``t(x)`` (dims 0 and 1; identity below rank 2)."""
    x = a["self"]
    rank = len(x.shape)
    if rank < 2:
        return x
    perm = list(range(rank))
    d0, d1 = norm_dim(a.get("dim0", 0), rank), norm_dim(a.get("dim1", 1), rank)
    perm[d0], perm[d1] = perm[d1], perm[d0]
    return b.permute(x, perm)


def cat(b: Builder, a: Args, out: Meta) -> Ref:
    """n-ary ``cat`` as a left-nested chain of binary Concats (operands cast to the result dtype); empty
    operands add nothing and are left out (``block_diag`` decomposes to cats with pieces empty along the dim,
    and a cache starts as a legacy empty 1-D tensor)."""
    dim = norm_dim(a["dim"], len(out.shape))
    tensors = [t for t in a["tensors"] if 0 not in t.shape]
    parts = [b.cast(t, out.dtype) for t in tensors]
    result = parts[0]
    for part in parts[1:]:
        result = b.op("Concat", result, part, attrs=(dim,))
    return result


cat.drops_empty_operands = True  # the IR has no empty tensors: this builder never reads one


def block_diag(b: Builder, a: Args, out: Meta) -> Ref:
    """``block_diag``: blocks of one shape as one BlockDiag of their stack [h, d, k] (a block repeated: its
    broadcast), so a product by the matrix can become a batched product by the blocks; blocks of several
    shapes as ATen decomposes them, rows of zeros, a block, zeros (0-d and 1-D blocks are 1 x 1 and 1 x n)."""
    blocks = [b.reshape(b.cast(t, out.dtype), (1,) * (2 - len(t.shape)) + t.shape) for t in a["tensors"]]
    if len({t.shape for t in blocks}) == 1 and len(blocks) > 1:
        d, k = blocks[0].shape
        if len(set(blocks)) == 1:
            stack = b.broadcast(b.reshape(blocks[0], (1, d, k)), (len(blocks), d, k))
        else:
            stack = cat(b, {"tensors": [b.reshape(t, (1, d, k)) for t in blocks], "dim": 0},
                        Meta((len(blocks), d, k), out.dtype))
        return b.op("BlockDiag", stack)
    rows, before = [], 0
    for t in blocks:
        (r, c), after = t.shape, out.shape[1] - before - t.shape[1]
        parts = [b.fill(0, (r, before), out.dtype)] * (before > 0) + [t] \
            + [b.fill(0, (r, after), out.dtype)] * (after > 0)
        rows.append(cat(b, {"tensors": parts, "dim": 1}, Meta((r, out.shape[1]), out.dtype)))
        before += c
    return cat(b, {"tensors": rows, "dim": 0}, out)


def split(b: Builder, a: Args, out: tuple) -> tuple:
    """``split``/``split_with_sizes``/``chunk``/``unbind``: consecutive Slices whose sizes are read from the
    result metas; ``unbind`` pieces (one dim fewer) get a Reshape that drops the dim."""
    x = a["self"]
    dim = norm_dim(a.get("dim", 0), len(x.shape))
    pieces, start = [], 0
    for piece in out:
        size = piece.shape[dim] if len(piece.shape) == len(x.shape) else 1
        pieces.append(b.reshape(b.slice(x, dim, start, start + size), piece.shape))
        start += size
    return tuple(pieces)


def slice_(b: Builder, a: Args, out: Meta) -> Ref:
    """``slice.Tensor``; bounds are normalised like Python's (negative, None, clamped). A step is views the
    IR has (``strided_slice``)."""
    x = a["self"]
    dim = norm_dim(a["dim"], len(x.shape))
    size = x.shape[dim]

    def bound(v, default):
        v = default if v is None else v
        return min(max(v + size if v < 0 else v, 0), size)
    start, end = bound(a["start"], 0), bound(a["end"], size)
    if a["step"] == 1:
        return b.slice(x, dim, start, end)
    return strided_slice(b, x, dim, start, out.shape[dim], a["step"])


def strided_slice(b: Builder, x: Ref, dim: int, start: int, n: int, step: int) -> Ref:
    """``x[start::step]`` (``n`` elements) along ``dim`` as views: a window of ``n * step`` elements, reshaped to
    ``[n, step]``, and the column at ``start``'s offset in it (GPT-J's rotary ``x[..., ::2]``, ``x[..., 1::2]``).
    The window starts up to ``step - 1`` before ``start`` so that it ends inside ``x``; a tensor too short
    for any such window (5 elements, step 2) stays a PyTorch call."""
    size = x.shape[dim]
    offset = max(0, start + n * step - size)
    if n == 0 or offset > min(start, step - 1):
        raise Unsupported(f"slice with step {step} of {size} elements from {start}")
    window = b.slice(x, dim, start - offset, start - offset + n * step)
    rows = b.reshape(window, x.shape[:dim] + (n, step) + x.shape[dim + 1:])
    column = b.slice(rows, dim + 1, offset, offset + 1)
    return b.reshape(column, x.shape[:dim] + (n,) + x.shape[dim + 1:])


def select(b: Builder, a: Args, out: Meta) -> Ref:
    """``select(x, dim, i)`` = a one-wide Slice, then a Reshape that drops the dim."""
    x = a["self"]
    dim = norm_dim(a["dim"], len(x.shape))
    index = a["index"] % x.shape[dim]
    return b.reshape(b.slice(x, dim, index, index + 1), out.shape)


def diagonal(b: Builder, a: Args, out: Meta) -> Ref:
    """``diagonal(x, offset, dim1, dim2)``: the two dims moved last (the others keep their order), an offset
    as a Slice, then one Diagonal (a column) reshaped to ATen's result (the diagonal as the last dim)."""
    x, offset = a["self"], a["offset"]
    rank = len(x.shape)
    d1, d2 = norm_dim(a["dim1"], rank), norm_dim(a["dim2"], rank)
    if d1 == d2:
        raise Unsupported("diagonal of one dim with itself")
    x = b.permute(x, [d for d in range(rank) if d not in (d1, d2)] + [d1, d2])
    if offset > 0:
        x = b.slice(x, rank - 1, min(offset, x.shape[-1] - 1), x.shape[-1])
    elif offset < 0:
        x = b.slice(x, rank - 2, min(-offset, x.shape[-2] - 1), x.shape[-2])
    return b.reshape(b.op("Diagonal", x), out.shape)


def flip(b: Builder, a: Args, out: Meta) -> Ref:
    """``flip(x, dims)``: one Flip of the normalised dims (none: x itself)."""
    x, dims = a["self"], a["dims"]
    dims = sorted({norm_dim(d, len(x.shape)) for d in dims}) if x.shape else []
    return b.op("Flip", x, attrs=(tuple(dims),)) if dims else x


def roll(b: Builder, a: Args, out: Meta) -> Ref:
    """``roll(x, shifts, dims)``: one Roll per dim (shifts taken modulo the size); a roll of the flattened
    tensor (no dims) stays a PyTorch call."""
    x, shifts, dims = a["self"], list(a["shifts"]), list(a["dims"])
    if not dims or len(dims) != len(shifts):
        raise Unsupported("roll of the flattened tensor")
    for shift, dim in zip(shifts, dims):
        dim = norm_dim(dim, len(x.shape))
        if shift % x.shape[dim]:
            x = b.op("Roll", x, attrs=(shift % x.shape[dim], dim))
    return x


def repeat(b: Builder, a: Args, out: Meta) -> Ref:
    """``repeat(x, repeats)`` (and ``tile``) as views: a size-1 dim before each repeated dim, broadcast to the
    repeat count, then merged with it; sums over the result then meet the broadcast."""
    x, repeats = a["self"], list(a["repeats"])
    shape = (1,) * (len(repeats) - len(x.shape)) + x.shape
    spread = [d for r, n in zip(repeats, shape) for d in ((1, n) if r > 1 else (n,))]
    target = [d for r, n in zip(repeats, shape) for d in ((r, n) if r > 1 else (n,))]
    return b.reshape(b.broadcast(b.reshape(x, spread), target), out.shape)


def constant(value):
    """``ones``/``zeros`` and their ``_like``/``new_`` forms: a Fill of the result shape."""
    return lambda b, a, out: b.fill(value, out.shape, out.dtype)


def eye(b: Builder, a: Args, out: Meta) -> Ref:
    """``eye(n, m)`` = Where(row index == column index, 1, 0), from constant index vectors, as ``diag``
    decomposes: the identity is then a constant mask the structure facts (masks.py) recognise, not a
    dense n x m tensor, and the IR never sees the unsigned ``arange`` ATen's decomposition would use."""
    n, m = out.shape
    rows = b.ref(b.graph.param(f"eye_index_{n}", torch.arange(n)))
    cols = b.ref(b.graph.param(f"eye_index_{m}", torch.arange(m)))
    same = b.op("Eq", b.broadcast(b.reshape(rows, (n, 1)), (n, m)), b.broadcast(cols, (n, m)))
    if out.dtype == "bool":
        return same
    return b.op("Where", same, b.fill(1, out.shape, out.dtype), b.fill(0, out.shape, out.dtype))


def fill_from(arg: str):
    """``full``/``full_like``/``new_full``/``scalar_tensor``/``fill``: a Fill with the value of ``arg``."""
    return lambda b, a, out: b.fill(a[arg], out.shape, out.dtype)


# -------------------------------------------------------------------------------------------------- table

BuildFn = Callable[[Builder, Args, Out], Any]


def aten_op(target: str):
    """An ATen overload or overload packet by name: ``"exp"``, ``"add.Tensor"``."""
    return functools.reduce(getattr, target.split("."), aten)


#: how an elementwise op of the op table is built from its ATen targets, by the op's kind
PLAIN = {"unary": unary, "binary": binary, "compare": compare}
#: the op table's elementwise ops from their ATen targets; TABLE overrides the ones with their own builder
ELEMENTWISE: dict[Any, BuildFn] = {aten_op(t): PLAIN[o.kind](o.name)
                                   for o in ops.OPS.values() if o.kind in PLAIN for t in o.aten}

#: ATen overload (or whole overload packet) -> builder; anything else becomes an Extern
TABLE: dict[Any, BuildFn] = {
    **ELEMENTWISE,
    aten.gelu: gelu, aten.softplus: softplus, aten.elu.default: elu,
    aten.add.Tensor: add_sub("Add"), aten.add.Scalar: add_sub("Add"),
    aten.sub.Tensor: add_sub("Sub"), aten.sub.Scalar: add_sub("Sub"),
    aten.rsub.Tensor: rsub, aten.rsub.Scalar: rsub,
    aten.logical_and: logical("And"), aten.logical_or: logical("Or"),
    aten.logical_xor: logical("Ne"), aten.logical_not: logical("Not"),
    aten.bitwise_and.Tensor: logical("And"), aten.bitwise_or.Tensor: logical("Or"),
    aten.bitwise_xor.Tensor: logical("Ne"), aten.bitwise_not.default: logical("Not"),
    aten.clamp.default: clamp, aten.clamp.Tensor: clamp, aten.clamp_min: clamp, aten.clamp_max: clamp,
    aten.hardtanh.default: hardtanh, aten.leaky_relu.default: leaky_relu,
    aten.where.self: where, aten.where.ScalarSelf: where, aten.where.ScalarOther: where, aten.where.Scalar: where,
    aten.masked_fill.Scalar: masked_fill, aten.masked_fill.Tensor: masked_fill,
    # reductions
    aten.sum.dim_IntList: reduction("Sum"), aten.sum.default: reduction("Sum"),
    aten.amax: reduction("Amax"), aten.amin: reduction("Amin"),
    aten.max.default: reduction("Amax"), aten.min.default: reduction("Amin"),
    aten.any.dim: any_all("Amax"), aten.any.dims: any_all("Amax"), aten.any.default: any_all("Amax"),
    aten.all.dim: any_all("Amin"), aten.all.dims: any_all("Amin"), aten.all.default: any_all("Amin"),
    aten.max.dim: values_of("Amax"), aten.min.dim: values_of("Amin"), aten.linalg_vector_norm: vector_norm,
    aten.mean.dim: mean, aten.mean.default: mean, aten.cumsum.default: cumsum,
    aten.sort.default: sort, aten.sort.stable: sort,
    aten.var.correction: var_mean, aten.var_mean.correction: var_mean,
    aten._softmax: softmax(log=False), aten.softmax.int: softmax(log=False),
    aten._log_softmax: softmax(log=True), aten.log_softmax.int: softmax(log=True),
    aten.native_layer_norm: layer_norm,
    # contractions
    aten.mm: matmul, aten.bmm: matmul, aten.matmul: matmul, aten.mv: matmul, aten.dot: matmul,
    aten.addmm.default: addmm, aten.baddbmm.default: addmm, aten.linear: linear,
    # convolution, pooling, inference batch norm
    aten.convolution.default: convolution, aten.conv2d.default: convolution,
    aten.max_pool2d_with_indices.default: max_pool, aten.max_pool2d.default: max_pool,
    aten.avg_pool2d.default: avg_pool, aten._adaptive_avg_pool2d.default: adaptive_avg_pool,
    aten.adaptive_avg_pool2d.default: adaptive_avg_pool,
    aten._native_batch_norm_legit_no_training.default: batch_norm_inference,
    # copies, casts, views and data movement
    **{op: same_values for op in (aten.clone, aten.alias, aten.detach, aten.contiguous, aten.lift_fresh_copy,
                                  aten._to_copy, aten.to.dtype, aten.to.dtype_layout,
                                  torch.ops.prims.convert_element_type)},
    **{op: reshape_to_result for op in (aten.view.default, aten._unsafe_view, aten.reshape, aten.unsqueeze,
                                        aten.squeeze, aten.flatten.using_ints, aten.unflatten.int)},
    aten.expand.default: expand,
    aten.permute: permute, aten.transpose.int: transpose, aten.t: transpose,
    aten.cat: cat, aten.block_diag: block_diag,
    aten.split.Tensor: split, aten.split_with_sizes: split, aten.chunk: split, aten.unbind.int: split,
    aten.slice.Tensor: slice_, aten.select.int: select, aten.diagonal.default: diagonal,
    aten.flip.default: flip, aten.roll.default: roll, aten.repeat.default: repeat,
    # constants
    aten.ones.default: constant(1), aten.ones_like: constant(1), aten.new_ones: constant(1),
    aten.zeros.default: constant(0), aten.zeros_like: constant(0), aten.new_zeros: constant(0),
    aten.full.default: fill_from("fill_value"), aten.full_like: fill_from("fill_value"),
    aten.new_full: fill_from("fill_value"), aten.scalar_tensor: fill_from("s"),
    aten.fill.Scalar: fill_from("value"), aten.eye.default: eye, aten.eye.m: eye,
}

#: composites the generic core-ATen decompositions would break up although the IR has them whole: mv, dot,
#: eye and roll (their decompositions use unsigned or gathered indices), block_diag (its zero-padded rows
#: hide the blocks), and the op table's elementwise ops named by packet (silu, ...; popping one they lack is
#: a no-op)
KEEP_WHOLE = (aten.mv.default, aten.dot.default, aten.eye.default, aten.eye.m, aten.roll.default,
              aten.block_diag.default,
              *(t.default for t in ELEMENTWISE if isinstance(t, torch._ops.OpOverloadPacket)))


def lookup(target) -> BuildFn | None:
    """The builder for an FX call target: by exact overload first, then by its overload packet."""
    builder = TABLE.get(target)
    if builder is None and isinstance(target, torch._ops.OpOverload):
        builder = TABLE.get(target.overloadpacket)
    return builder
