"""The program as written: its PyTorch calls before decomposition, as plain records a cost model can price.

The IR is the program decomposed to core ATen (a smooth-L1 loss is eight ops), so pricing the captured
IR graph prices a slower program than the user's: PyTorch runs ``smooth_l1_loss`` as one fused kernel.
These records keep each call of the exported program whole (its op, the shapes and dtypes it reads and
writes, and its other arguments), so the plan can be compared with what it replaces.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass

import torch

from .. import ops


@dataclass(frozen=True)
class WrittenCall:
    op: str  # the ATen overload's name: "aten.smooth_l1_loss.default"
    in_shapes: tuple[tuple[int, ...], ...]  # tensor arguments, in order
    in_dtypes: tuple[str, ...]
    out_shapes: tuple[tuple[int, ...], ...]  # tensor results
    out_dtypes: tuple[str, ...]
    args: tuple  # the non-tensor arguments, in order (a convolution's groups, ...)
    #: per tensor argument, the index of the call that made it, or -1 for an input of the program (a weight, a
    #: constant): what a fusion of the calls as written may keep on chip
    sources: tuple[int, ...] = ()


def written_calls(gm: torch.fx.GraphModule) -> list[WrittenCall]:
    """One record per ATen call of an exported (not yet decomposed) graph, tensors read from its metadata."""
    calls, made_by = [], {}  # made_by: an FX node -> the call that computed it (through getitem)
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target is operator.getitem and node.args[0] in made_by:
            made_by[node] = made_by[node.args[0]]
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        args = _flat(node.args)
        values = [a.meta.get("val") if isinstance(a, torch.fx.Node) else a for a in args]
        tensors = [(a, v) for a, v in zip(args, values) if isinstance(v, torch.Tensor)]
        results = [v for v in _flat((node.meta.get("val"),)) if isinstance(v, torch.Tensor)]
        made_by[node] = len(calls)
        calls.append(WrittenCall(
            str(node.target), tuple(tuple(t.shape) for _, t in tensors), tuple(_dtype(t) for _, t in tensors),
            tuple(tuple(t.shape) for t in results), tuple(_dtype(t) for t in results),
            tuple(v for v in values if not isinstance(v, torch.Tensor) and isinstance(v, (int, float, bool))),
            tuple(made_by.get(a, -1) for a, _ in tensors)))
    return calls


def _flat(values) -> list:
    out = []
    for v in values:
        out.extend(_flat(v) if isinstance(v, (list, tuple)) else [v])
    return out


def _dtype(t: torch.Tensor) -> str:
    return ops.DTYPE_NAMES.get(t.dtype, "float32")
