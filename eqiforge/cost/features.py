"""Per-node cost features, computed apart from any model: what the op is, how much work and traffic.

Features come from a snapshot's e-nodes (op, operand shapes, output shape, dtype) or from IR nodes, so the
same prices serve extraction and the plan report.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ops import fused
from .. import ops


@dataclass(frozen=True)
class NodeFeatures:
    op: str
    kind: str
    in_shapes: tuple[ops.Shape, ...]
    out_shape: ops.Shape
    dtype: str
    flops: float
    bytes: float  # DRAM traffic if the node runs as its own kernel: operands read once, output written once
    is_view: bool
    folded: bool  # computed once at optimization time from constants (costs nothing at run time)
    attrs: tuple = ()  # the op's attributes (kernel nodes: layouts, tile, split-K, fused expressions)

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes if self.bytes else 0.0


def node_features(op_name: str, in_shapes, in_dtypes, out_shape, dtype: str, folded: bool = False,
                  attrs: tuple = ()) -> NodeFeatures:
    op = ops.get(op_name)
    in_shapes = tuple(tuple(s) for s in in_shapes)
    read = [ops.numel(s) * ops.dtype_size(d) for s, d in zip(in_shapes, in_dtypes)]
    flops = op.flops(list(in_shapes), out_shape)
    if op.kind == "kernel":
        read, flops = _kernel_work(op_name, in_shapes, read, out_shape, attrs)
    if op.kind == "band":  # the band's diagonals are read, not the whole operand
        diagonals = ops.band_diagonals(in_shapes[0], *attrs)
        flops = 2.0 * ops.numel(out_shape) * diagonals
        read = [ops.numel(out_shape[:-1]) * diagonals * ops.dtype_size(in_dtypes[0]), *read[1:]]
    traffic = sum(read) + ops.numel(out_shape) * ops.dtype_size(dtype)
    return NodeFeatures(op_name, op.kind, in_shapes, tuple(out_shape), dtype, flops, float(traffic), op.is_view(),
                        folded, tuple(attrs))


def _kernel_work(op_name, in_shapes, read, out_shape, attrs):
    """(bytes read per operand, FLOPs) of a kernel node. A row reduction whose prologue never reads x
    (it computes from its extra inputs) takes x only for its shape."""
    out = ops.numel(out_shape)
    a = ops.get(op_name).named(attrs)
    if op_name == "GemmK":
        k = in_shapes[0][-2] if a.layout_a == "T" else in_shapes[0][-1]
        return read, 2.0 * out * k + out * fused.flops_per_element(a.epilogue)
    if op_name == "PointwiseK":
        return read, out * fused.flops_per_element(a.expr)
    if op_name == "AttentionK":  # two products over [Sq, Sk] scores, plus the softmax on them
        q, v = in_shapes[0], in_shapes[2]
        scores = ops.numel(q[:-1]) * v[-2] * (0.5 if a.causal else 1.0)  # causal: tiles above the diagonal skipped
        return read, scores * (2.0 * q[-1] + 2.0 * v[-1] + 5.0)
    x = ops.numel(in_shapes[0])
    flops = x * (4.0 + fused.flops_per_element(a.prologue)) + out * fused.flops_per_element(a.epilogue)
    return ([read[0] if _reads_x(a.prologue) else 0] + read[1:]), flops


def _reads_x(expr: tuple) -> bool:
    return expr[0] == "x" or any(_reads_x(e) for e in expr[1:] if isinstance(e, tuple))


def constant_classes(snap) -> list[bool]:
    """E-classes computable from parameters and constants alone (least fixpoint over the e-nodes)."""
    const = [False] * snap.num_classes
    changed = True
    while changed:
        changed = False
        for n, op in enumerate(snap.node_op):
            c = snap.node_class[n]
            if const[c] or op in ("Input", "Extern"):
                continue
            if all(const[k] for k in snap.node_children[n]):
                const[c] = changed = True
    return const


def snapshot_features(snap, fold_constants: bool) -> list[NodeFeatures]:
    """Features of every e-node of a snapshot. With ``fold_constants``, compute nodes over constant
    classes are marked folded (inference: they are evaluated once when the plan is built)."""
    const = constant_classes(snap) if fold_constants else [False] * snap.num_classes
    feats = []
    for n, op in enumerate(snap.node_op):
        kids = snap.node_children[n]
        c = snap.node_class[n]
        folded = bool(kids) and const[c] and all(const[k] for k in kids) and not ops.get(op).is_view()
        feats.append(node_features(op, [snap.class_shape[k] for k in kids], [snap.class_dtype[k] for k in kids],
                                   snap.class_shape[c], snap.class_dtype[c], folded, snap.node_attrs[n]))
    return feats
