"""Kernel-layer nodes that PyTorch runs as one native call, and those calls.

The torch backend cannot fuse, but a re-formed composite (rules/composite.egg, attention.egg) is one
PyTorch op: a layer norm with its affine, a softmax, addmm, scaled dot-product attention. The cost prior prices exactly
these kernel nodes for the torch backend (the rest are never chosen there) and the torch lowering calls them.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .. import ops

ACC = ("acc",)
BIAS = ("bin", "add", ACC, ("in", 0))  # acc + bias
SCALE = ("bin", "mul", ACC, ("in", 0))  # x_hat * w
AFFINE = ("bin", "add", SCALE, ("in", 1))  # x_hat * w + b
NORMS = ("layer_norm", "rms_norm")


def _is_row(shape, n: int) -> bool:
    """A parameter row [1, ..., 1, n], as the frontend shapes norm weights and biases."""
    return shape[-1] == n and all(d == 1 for d in shape[:-1])


def is_native(op: str, attrs: tuple, in_shapes, unfused=()) -> bool:
    """Whether kernel node ``op(attrs)`` on operands of ``in_shapes`` is one native PyTorch call; row kinds
    in ``unfused`` have no fused kernel on the device priced for (a Device's ``unfused``)."""
    if op not in CALLS:
        return False
    a = ops.get(op).named(attrs)
    if op == "RowReduceK":
        if a.prologue != ("x",) or a.kind == "moments" or a.kind in unfused:  # moments: no single call
            return False
        n = in_shapes[0][-1]
        return a.epilogue == ACC or (a.kind in NORMS and a.epilogue in (SCALE, AFFINE)
                                     and all(_is_row(s, n) for s in in_shapes[1:]))
    if op == "AttentionK":  # PyTorch's causal mask is top-left aligned: the same as ours only when square
        q, k = in_shapes[0], in_shapes[1]
        return not a.causal or q[-2] == (k[-1] if a.layout_k == "T" else k[-2])
    if a.tile or a.split_k != 1:  # GemmK
        return False
    n = in_shapes[1][-1] if a.layout_b == "N" else in_shapes[1][-2]
    return a.epilogue == ACC or (a.epilogue == BIAS and len(in_shapes[0]) == 2 and _is_row(in_shapes[2], n))


def row_reduce(x, kind, prologue, epilogue, eps, extras):
    """A native row reduction (see is_native for what it accepts)."""
    n = x.shape[-1]
    weight = extras[0].reshape(n) if extras else None
    bias = extras[1].reshape(n) if len(extras) > 1 else None
    if kind == "layer_norm":
        return F.layer_norm(x, (n,), weight, bias, eps)
    if kind == "rms_norm":
        return F.rms_norm(x, (n,), weight, eps)
    if kind == "softmax":
        return torch.softmax(x, -1)
    if kind == "log_softmax":
        return torch.log_softmax(x, -1)
    if kind == "logsumexp":
        return torch.logsumexp(x, -1, keepdim=True)
    return {"sum": torch.sum, "max": torch.amax, "min": torch.amin}[kind](x, -1, keepdim=True)


def gemm(a, b, layout_a, layout_b, tile, split_k, epilogue, extras):
    """matmul, or addmm for a 2-d product with a bias row."""
    a = a.mT if layout_a == "T" else a
    b = b.mT if layout_b == "T" else b
    return torch.addmm(extras[0], a, b) if epilogue == BIAS else torch.matmul(a, b)


def attention(q, k, v, layout_k, scale, causal, extras):
    """PyTorch's fused scaled_dot_product_attention."""
    k = k.mT if layout_k == "T" else k
    bias = extras[0].to(q.dtype) if extras else None
    grouped = q.dim() > 2 and k.shape[-3] != q.shape[-3]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, is_causal=bool(causal), scale=scale,
                                          enable_gqa=grouped)


CALLS = {"RowReduceK": row_reduce, "GemmK": gemm, "AttentionK": attention}
