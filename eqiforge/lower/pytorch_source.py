"""PyTorch source text for plan values: the rendering both backends' generated code shares.

Names (inputs, generated variables), literals (numbers, dtypes, extern arguments), an algebra node as a
PyTorch call (its op-table entry's ``torch_src``, or a call with its attributes), a fused expression, and a
kernel node computing exactly what its kind means (``eqiforge/ops/kernel_semantics.py``, whose source a
generated module embeds when it needs it) — the triton backend's fallback for a kernel it cannot render.
"""
from __future__ import annotations

import inspect
import math
import re

import torch

from ..ops import kernel_semantics
from .. import ops
from ..dims import SymFloat
from ..ir import ExternCall, TensorArg
from . import kernels as K

#: generated variables: a letter and a node number (t12, e3, v7)
GENERATED_VAR = re.compile(r"[a-z]\d+")
#: compute dtype -> conversion of a tensor to it
UPCAST = {"float32": ".float()", "float64": ".double()"}


def dtype_src(dtype: str) -> str:
    return f"torch.{dtype}"


def ident(name: str) -> str:
    """A Python identifier for an input or parameter name that cannot be taken for a generated variable."""
    name = re.sub(r"\W", "_", name)
    return name if name and not name[0].isdigit() and not GENERATED_VAR.fullmatch(name) else f"in_{name}"


def number_src(value) -> str:
    """Source text of a Python number: its repr, except the non-finite floats repr cannot round-trip."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"float({str(value)!r})"
    return repr(value)


def literal(value, args: list[str] = ()) -> str | None:
    """Source text of a value built from numbers, strings, dtypes, tuples and lists (an extern argument, a
    node attribute), with tensor arguments named by ``args``; None when it cannot be printed as code."""
    if isinstance(value, TensorArg):
        return args[value.index] if value.index < len(args) else None
    if isinstance(value, (list, tuple)):
        parts = [literal(v, args) for v in value]
        if any(p is None for p in parts):
            return None
        inner = ", ".join(parts) + ("," if isinstance(value, tuple) and len(parts) == 1 else "")
        return f"[{inner}]" if isinstance(value, list) else f"({inner})"
    if isinstance(value, torch.dtype):
        return f"torch.{str(value).split('.')[-1]}"
    if value is None or isinstance(value, (bool, int, float, str)):
        return number_src(value)
    return None


def extern_call(ext: ExternCall, args: list[str]) -> str | None:
    """``torch.ops.<ns>.<op>.<overload>(...)`` for an ATen extern, or None if it cannot be printed."""
    fn = ext.fn
    if not isinstance(fn, torch._ops.OpOverload):
        return None
    parts = [literal(a, args) for a in ext.args] + [
        None if (v := literal(val, args)) is None else f"{k}={v}" for k, val in ext.kwargs.items()]
    if any(p is None for p in parts):
        return None
    ns, name = fn.namespace, fn._schema.name.split("::")[-1]
    return f"torch.ops.{ns}.{name}.{fn._overloadname}({', '.join(parts)})"


REDUCTIONS = {"Sum": "sum", "Amax": "amax", "Amin": "amin"}


def sizes(shape) -> str:
    """A shape, permutation or dim list as a call's arguments: ``x.reshape(8, 1)`` (a 0-d shape ``()``), which
    PyTorch parses ~0.7 us faster than ``x.reshape((8, 1))`` on a CPU, most of a view's cost."""
    return ", ".join(map(repr, shape)) if len(shape) else "()"


def torch_call(n, args: list[str]) -> str:
    """PyTorch source for one algebra node: its op-table entry's ``torch_src`` (operands by position, attributes
    by name: ``{stride}``), or a call with its attributes."""
    if ops.get(n.op).torch_src:
        return ops.get(n.op).torch_src.format(*args, **n.a._asdict())
    a = n.a
    if n.op == "Cast":
        return f"{args[0]}.to({dtype_src(a.dtype)})"
    if n.op == "Permute":
        return f"{args[0]}.permute({sizes(a.perm)})"
    if n.op in ("Reshape", "Expand"):
        return f"{args[0]}.{n.op.lower()}({sizes(a.shape)})"
    if n.op == "Slice":
        return f"{args[0]}.narrow({a.dim}, {a.start}, {a.end - a.start})"
    if n.op == "Concat":
        return f"torch.cat([{args[0]}, {args[1]}], {a.dim})"
    if n.op in REDUCTIONS:
        dims = a.dims[0] if len(a.dims) == 1 else list(a.dims)  # an int: PyTorch's list path is slower
        return f"{args[0]}.{REDUCTIONS[n.op]}({dims}, True)"  # keepdim by position: faster
    raise ValueError(f"no PyTorch rendering for {n.op}")


def epi_source(e: tuple, acc: str, x: str, extras: list[str], up: str) -> str:
    """PyTorch source of a fused expression; ``up`` converts a tensor to the kernel's compute dtype (``UPCAST``)."""
    head = e[0]
    if head == "acc":
        return acc
    if head == "x":
        return x
    if head == "in":
        return f"{extras[e[1]]}{up}"
    if head == "const":
        return number_src(e[1] if isinstance(e[1], SymFloat) else float(e[1]))
    if head in ("un", "bin"):
        return ops.EPI[e[1]].torch_src.format(*(epi_source(a, acc, x, extras, up) for a in e[2:]))
    return f"{epi_source(e[2], acc, x, extras, up)}.to({dtype_src(e[1])}){up}"


def kernel_source(spec, args: list[str]) -> str:
    """PyTorch source computing a kernel spec as its kind means (kernel_semantics, by its function names), in
    the spec's compute dtype like the Triton templates: float64 stays float64."""
    out, compute = dtype_src(spec.out.dtype), K.compute_dtype(spec)
    up = UPCAST[compute]
    if isinstance(spec, K.AttentionSpec):
        q, k, v, *bias = args
        return (f"attention({q}, {k}, {v}, {spec.scale!r}, {spec.causal}, {spec.k_transposed}, "
                f"{bias[0] if bias else None}, {dtype_src(compute)}).to({out})")
    if isinstance(spec, K.GemmSpec):
        acc = f"gemm({args[0]}, {args[1]}, {spec.a_transposed}, {spec.b_transposed}, {dtype_src(compute)})"
        return f"({epi_source(spec.epilogue, acc, '', args[2:], up)}).to({out})"
    if isinstance(spec, K.PointwiseSpec):
        return f"({epi_source(spec.expr, '', '', args, up)}).expand({spec.out.shape}).to({out})"
    rows = epi_source(spec.prologue, "", f"{args[0]}{up}", args[1:], up)
    acc = f"row_reduce({rows}, {spec.kind!r}, {spec.eps!r})"
    return f"({epi_source(spec.epilogue, acc, '', args[1:], up)}).to({out})"


def semantics_source() -> str:
    """The functions ``kernel_source`` calls, as source for a module that already imports torch."""
    text = inspect.getsource(kernel_semantics)
    return "# what each kernel kind computes (eqiforge/ops/kernel_semantics.py)\n" + text[text.index("\ndef ") + 1:]
