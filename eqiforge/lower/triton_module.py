"""The triton backend: a Plan becomes one readable Python module of Triton kernels and torch glue.

The module imports only torch and triton, so a plan optimized here runs (and is timed) on a machine without
EqiForge. It defines one launcher per kernel node and ``forward(<inputs>, params)``: kernel nodes run their
generated Triton kernel; views, re-formed composites and remaining algebra ops run as PyTorch calls; externs
as the ATen calls they were. A kernel the templates cannot render runs as PyTorch code computing the same
fused expression, float64 in float64 as the templates do (reported as a fallback).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import torch

from .. import fused, ops
from ..cost.roofline import attention_split
from ..ir import ExternCall, Graph, TensorArg
from . import kernels as K
from .plan import Plan
from .triton import PRELUDE, UnsupportedSpec, render

class ExportError(ValueError):
    """A plan that cannot be written as a standalone module (an extern call with unprintable arguments)."""


@dataclass
class GeneratedModule:
    source: str
    param_names: dict[str, str]  # module parameter key -> plan parameter name
    kernels: list[str] = field(default_factory=list)  # launcher names, in order
    fallbacks: dict[str, str] = field(default_factory=dict)  # kernel -> why it runs in PyTorch
    externs: dict[str, ExternCall] = field(default_factory=dict)  # key -> call, for unprintable externs


def dtype_src(dtype: str) -> str:
    return f"torch.{dtype}"


def _ident(name: str) -> str:
    """A Python identifier for an input or parameter name that cannot be taken for a generated variable
    (those are a letter and a node number: t12, e3, v7)."""
    ident = re.sub(r"\W", "_", name)
    return ident if ident and not ident[0].isdigit() and not GENERATED_VAR.fullmatch(ident) else f"in_{ident}"


GENERATED_VAR = re.compile(r"[a-z]\d+")


# ----------------------------------------------------------------------------------------- kernel specs

def kernel_spec(graph: Graph, i: int, sms: int | None = None):
    """(spec, operand node ids in launcher order) of kernel node ``i`` (its inputs are all read: the
    snapshot drops inputs that fused expressions do not read). ``sms``: the SMs of the device the plan was
    priced for, which choose an attention kernel's key-axis split as the cost model priced it."""
    n = graph.nodes[i]
    operand = lambda j: K.Operand(graph.nodes[j].shape, graph.nodes[j].dtype)  # noqa: E731
    out = K.Operand(n.shape, n.dtype)
    if n.op == "GemmK":
        layout_a, layout_b, tile, split_k, epilogue = n.attrs
        spec = K.GemmSpec(operand(n.inputs[0]), operand(n.inputs[1]), out, layout_a == "T", layout_b == "T",
                          K.Tile(*tile), split_k, epilogue, tuple(operand(j) for j in n.inputs[2:]))
    elif n.op == "PointwiseK":
        spec = K.PointwiseSpec(tuple(operand(j) for j in n.inputs), out, n.attrs[0])
    elif n.op == "AttentionK":
        layout_k, scale, causal = n.attrs
        bias = operand(n.inputs[3]) if len(n.inputs) > 3 else None
        *batch, sq, _ = n.shape
        sk = graph.nodes[n.inputs[2]].shape[-2]
        split = attention_split(math.prod(batch), sq, sk, sms) if sms else 1
        spec = K.AttentionSpec(*(operand(j) for j in n.inputs[:3]), out, scale, bool(causal), layout_k == "T",
                               bias, split=split)
    else:
        kind, prologue, epilogue, eps = n.attrs
        spec = K.RowReduceSpec(kind, operand(n.inputs[0]), out, prologue, epilogue,
                               tuple(operand(j) for j in n.inputs[1:]), eps)
    return spec, list(n.inputs)


def describe(graph: Graph, i: int, seconds: float) -> str:
    """The kernel header: what it computes, which rule sets shaped it, its predicted time."""
    n = graph.nodes[i]
    rules = ["fusion"]
    if n.op == "GemmK":
        layout_a, layout_b, tile, split_k, epilogue = n.attrs
        what = f"GEMM {graph.nodes[n.inputs[0]].shape} x {graph.nodes[n.inputs[1]].shape} -> {n.shape}, " \
               f"epilogue {fused.format_expr(epilogue)}"
        rules += ["layout"] if "T" in (layout_a, layout_b) else []
        rules += ["tiling" + (f" (split-K {split_k})" if split_k > 1 else "")]
    elif n.op == "PointwiseK":
        what = f"pointwise {fused.format_expr(n.attrs[0])} -> {n.shape}"
    elif n.op == "AttentionK":
        layout_k, scale, causal = n.attrs
        what = (f"attention softmax({scale:g} * q k^T{' + bias' if len(n.inputs) > 3 else ''}"
                f"{', causal' if causal else ''}) v -> {n.shape}")
        rules = ["composite", "attention"]
    else:
        kind, prologue, epilogue, _ = n.attrs
        what = f"row {kind} of {fused.format_expr(prologue)}, epilogue {fused.format_expr(epilogue)} -> {n.shape}"
        rules += ["composite"] if kind not in ops.ROW_RESULT_KINDS else []
    return f"{what}\nrule sets: {', '.join(rules)}\npredicted: {seconds * 1e6:.2f} us"


# --------------------------------------------------------------------------------------- torch glue

UPCAST = {"float32": ".float()", "float64": ".double()"}  # compute dtype -> conversion of a tensor to it


def _epi_torch(e: tuple, acc: str, x: str, extras: list[str], up: str) -> str:
    """PyTorch source of an Epi; ``up`` converts a tensor to the kernel's compute dtype (``UPCAST``)."""
    head = e[0]
    if head == "acc":
        return acc
    if head == "x":
        return x
    if head == "in":
        return f"{extras[e[1]]}{up}"
    if head == "const":
        return repr(float(e[1]))
    if head in ("un", "bin"):
        return ops.EPI[e[1]].torch_src.format(*(_epi_torch(a, acc, x, extras, up) for a in e[2:]))
    return f"{_epi_torch(e[2], acc, x, extras, up)}.to({dtype_src(e[1])}){up}"


ROW_TORCH = {"sum": "{v}.sum(-1, keepdim=True)", "max": "{v}.amax(-1, keepdim=True)",
             "min": "{v}.amin(-1, keepdim=True)", "softmax": "torch.softmax({v}, -1)",
             "log_softmax": "torch.log_softmax({v}, -1)",
             "layer_norm": "torch.nn.functional.layer_norm({v}, {v}.shape[-1:], eps={eps!r})",
             "rms_norm": "{v} * torch.rsqrt({v}.square().mean(-1, keepdim=True) + {eps!r})",
             "moments": "(lambda var, mean: torch.cat([mean, torch.rsqrt(var + {eps!r})], -1))("
                        "*torch.var_mean({v}, -1, correction=0, keepdim=True))"}


def kernel_in_torch(spec, args: list[str]) -> str:
    """PyTorch code computing a kernel spec (the fallback when it has no Triton rendering), in the spec's
    compute dtype like the templates: float64 stays float64."""
    out, compute = spec.out.dtype, K.compute_dtype(spec)
    up = UPCAST[compute]
    if isinstance(spec, K.AttentionSpec):
        wide = compute == "float64"  # else SDPA computes in q's dtype (half precision accumulates in float32)
        q, k, v, *bias = [f"{a}{up}" if wide else a for a in args]
        k = f"{k}.mT" if spec.k_transposed else k
        mask = f", attn_mask={bias[0]}" + ("" if wide else f".to({q}.dtype)") if bias else ""
        return (f"torch.nn.functional.scaled_dot_product_attention({q}, {k}, {v}{mask}, "
                f"is_causal={spec.causal}, scale={spec.scale!r}).to({dtype_src(out)})")
    if isinstance(spec, K.GemmSpec):
        a = f"{args[0]}.mT" if spec.a_transposed else args[0]
        b = f"{args[1]}.mT" if spec.b_transposed else args[1]
        acc = f"torch.matmul({a}{up}, {b}{up})"
        return f"({_epi_torch(spec.epilogue, acc, '', args[2:], up)}).to({dtype_src(out)})"
    if isinstance(spec, K.PointwiseSpec):
        return f"({_epi_torch(spec.expr, '', '', args, up)}).expand({spec.out.shape}).to({dtype_src(out)})"
    v = _epi_torch(spec.prologue, "", f"{args[0]}{up}", args[1:], up)
    acc = ROW_TORCH[spec.kind].format(v=f"({v})", eps=spec.eps)
    return f"({_epi_torch(spec.epilogue, acc, '', args[1:], up)}).to({dtype_src(out)})"


def torch_call(n, args: list[str]) -> str:
    """PyTorch source for one algebra node: its op-table entry's ``torch_src``, or a call with its attributes."""
    op = n.op
    if ops.get(op).torch_src:
        return ops.get(op).torch_src.format(*args)
    if op == "Cast":
        return f"{args[0]}.to({dtype_src(n.attrs[0])})"
    if op == "Permute":
        return f"{args[0]}.permute({tuple(n.attrs[0])})"
    if op in ("Reshape", "Expand"):
        return f"{args[0]}.{op.lower()}({tuple(n.attrs[0])})"
    if op == "Slice":
        dim, start, end = n.attrs
        return f"{args[0]}.narrow({dim}, {start}, {end - start})"
    if op == "Concat":
        return f"torch.cat([{args[0]}, {args[1]}], {n.attrs[0]})"
    if op in ("Sum", "Amax", "Amin"):
        fn = {"Sum": "sum", "Amax": "amax", "Amin": "amin"}[op]
        dims = n.attrs[0][0] if len(n.attrs[0]) == 1 else list(n.attrs[0])  # an int: PyTorch's list path is slower
        return f"{args[0]}.{fn}({dims}, keepdim=True)"
    raise ValueError(f"no PyTorch rendering for {op}")


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


def extern_call(key: str, ext: ExternCall, args: list[str]) -> str | None:
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


# -------------------------------------------------------------------------------------------- module

def generate(plan: Plan, input_names: list[str], title: str = "plan", bound: list[str] = (),
             in_torch: dict[str, str] | None = None) -> GeneratedModule:
    """The standalone module for ``plan``: kernels first, then ``forward``. Inputs named in ``bound`` (live
    parameters, when constants are not folded) are read from ``params`` like parameters; kernels named in
    ``in_torch`` (name -> why) run as PyTorch code."""
    in_torch = in_torch or {}
    graph = plan.graph
    gen = GeneratedModule("", {})
    parts, body = [], []
    names: dict[int, str] = {}
    inputs = [_ident(n) for n in input_names]
    device = f"{inputs[0]}.device" if inputs else "next(iter(params.values())).device"
    extern_results: dict[str, str] = {}
    for i in graph.live_nodes():
        n = graph.nodes[i]
        args = [names[j] for j in n.inputs]
        var = f"t{i}"
        if n.op == "Input" and n.attrs[0] not in bound:
            names[i] = _ident(n.attrs[0])
            continue
        if n.op in ("Param", "Input"):
            key = _ident(n.attrs[0])
            gen.param_names[key] = n.attrs[0]
            body.append(f"{var} = params[{key!r}]")
        elif n.op == "Fill":
            body.append(f"{var} = torch.full({n.shape}, {number_src(n.attrs[0])}, dtype={dtype_src(n.dtype)}, "
                        f"device={device})")
        elif n.op == "Extern":
            key = n.attrs[0]
            if key not in extern_results:
                call = extern_call(key, graph.externs[key], args)
                if call is None:
                    gen.externs[key] = graph.externs[key]
                    call = f"externs[{key!r}]({', '.join(args)})"
                extern_results[key] = f"e{i}"
                body.append(f"e{i} = {call}")
                body.append(f"e{i} = e{i} if isinstance(e{i}, (tuple, list)) else (e{i},)")
            body.append(f"{var} = {extern_results[key]}[{n.attrs[1]}]")
        elif ops.get(n.op).kind == "kernel":
            spec, operand_ids = kernel_spec(graph, i, plan.sms)
            operands = [names[j] for j in operand_ids]
            kname = f"kernel{len(gen.kernels) + len(gen.fallbacks)}_{n.op[:-1].lower()}"
            try:
                if kname in in_torch:
                    raise UnsupportedSpec(in_torch[kname])
                parts.append(render(spec, kname, describe(graph, i, plan.node_seconds.get(i, 0.0))))
                body.append(f"{var} = torch.empty({n.shape}, dtype={dtype_src(n.dtype)}, device={device})")
                body.append(f"{kname}({var}, {', '.join(operands)})")
                gen.kernels.append(kname)
            except UnsupportedSpec as err:
                gen.fallbacks[kname] = str(err)
                body.append(f"{var} = {kernel_in_torch(spec, operands)}  # {kname} in PyTorch: {err}")
        else:
            body.append(f"{var} = {torch_call(n, args)}")
        names[i] = var
    outs = ", ".join(names[o] for o in graph.outputs)
    header = (f'"""EqiForge plan for {title}: {len(gen.kernels)} Triton kernels, predicted '
              f'{plan.predicted_seconds * 1e6:.1f} us ({plan.cost_model}).\n\nGenerated code: imports only torch '
              f'and triton. Call forward({", ".join(inputs + ["params"])}) with params a dict of tensors.\n"""\n')
    signature = ", ".join(inputs + ["params", "externs=None"])
    forward = [f"def forward({signature}):", *("    " + line for line in body), f"    return ({outs},)"]
    gen.source = header + PRELUDE + "\n\n" + "\n\n".join(parts) + "\n\n" + "\n".join(forward) + "\n"
    return gen
