"""The roofline price of the program as written (frontend/as_written.py): each PyTorch call one native
kernel that reads its tensors once and writes its results once.

It prices what a plan replaces, so that a plan is run only where it is predicted faster than the user's own
calls, not merely faster than their decomposition. Contractions (matmuls, convolutions, attention) are
compute; everything else is one pass over memory plus its elementwise arithmetic; views cost host time only.
"""
from __future__ import annotations

import math

from .. import ops
from .devices import Device
from .features import node_features
from .roofline import RooflinePrior

VIEWS = ("view", "reshape", "_unsafe_view", "broadcast_tensors", "transpose", "permute", "expand", "unsqueeze", "squeeze", "t",
         "slice", "select", "alias", "detach", "split", "chunk", "unbind", "lift_fresh_copy", "dropout")
CONTRACTIONS = ("mm", "bmm", "matmul", "addmm", "baddbmm", "linear", "mv", "dot")
CONVOLUTIONS = ("convolution", "conv1d", "conv2d", "conv3d")
ATTENTION = ("scaled_dot_product_attention", "_scaled_dot_product_flash_attention_for_cpu")
#: calls that read only the elements their indices pick (plus the indices), not whole operands
GATHERS = ("nll_loss", "nll_loss_nd", "nll_loss_forward", "nll_loss2d", "gather", "index_select", "embedding", "take", "index")
TRANSCENDENTAL = ("exp", "log", "tanh", "sigmoid", "gelu", "silu", "mish", "softplus", "erf", "pow", "sqrt",
                  "rsqrt", "softmax", "log_softmax", "logsumexp", "layer_norm", "group_norm", "batch_norm",
                  "cross_entropy", "nll_loss", "elu", "selu", "celu")


def written_seconds(calls, device: Device) -> float:
    """Predicted seconds of the program as written on ``device``."""
    prior = RooflinePrior(device)
    return sum(call_seconds(c, prior) for c in calls)


def library_calls_only(calls) -> bool:
    """Whether every call is a view or a product, convolution or attention: calls a compiler makes as they
    are written (to the same library kernels), with no elementwise or reduction work between to fuse."""
    return bool(calls) and all(_name(c) in VIEWS + CONTRACTIONS + CONVOLUTIONS + ATTENTION for c in calls)


def _name(call) -> str:
    return call.op.split(".")[1] if call.op.startswith("aten.") else call.op


def call_seconds(call, prior: RooflinePrior) -> float:
    device = prior.device
    name = _name(call)
    if name in VIEWS or not call.out_shapes:
        return device.view_us * 1e-6
    passes = 5 if any(kind in name for kind in device.unfused) else 1  # composed from five ATen ops
    moved = sum(ops.numel(s) * ops.dtype_size(d) for s, d in zip(call.in_shapes + call.out_shapes,
                                                                   call.in_dtypes + call.out_dtypes))
    elements = max(ops.numel(s) for s in call.in_shapes + call.out_shapes)
    if name in GATHERS:  # the indices, one picked element per index, the results
        indices = sum(ops.numel(s) for s, d in zip(call.in_shapes, call.in_dtypes) if d in ("int64", "int32"))
        outputs = [ops.numel(s) for s in call.out_shapes]
        moved = indices * 12 + sum(n * ops.dtype_size(d) for n, d in zip(outputs, call.out_dtypes))
        elements = max([indices, *outputs])
    memory = moved / (device.mem_bw_gbs * 1e9)
    product = _as_matmul(name, call)
    if product is not None:  # priced as the plan's matrix products are, so the two compare like for like
        a, b, out = product
        f = node_features("MatMul", [a, b], [call.out_dtypes[0]] * 2, out, call.out_dtypes[0])
        return max(prior.node_seconds(f), device.launch_us * 1e-6 + memory)
    flops = _contraction_flops(name, call)
    if flops:
        compute = flops / device.matmul_peak(call.out_dtypes[0])
    else:
        per_element = 8.0 if any(t in name for t in TRANSCENDENTAL) else 1.0
        compute = elements * per_element / (device.vector_tflops * 1e12)
    return passes * (device.launch_us * 1e-6 + max(compute, memory))


def _as_matmul(name: str, call):
    """(A, B, out) shapes of the matrix product a contraction call is ([..., M, K] @ [..., K, N]), or None."""
    if name not in CONTRACTIONS or not call.in_shapes or not call.in_shapes[0] or not call.out_shapes[0]:
        return None
    out = call.out_shapes[0]
    k = call.in_shapes[0][-1]
    rows, n = ops.numel(out[:-1]) if len(out) > 1 else 1, out[-1] if out else 1
    if name in ("bmm", "baddbmm") and len(out) == 3:
        return (out[0], out[1], k), (out[0], k, out[2]), out
    return (rows, k), (k, n), (rows, n)


def _contraction_flops(name: str, call) -> float:
    """Multiply-adds x 2 of a convolution or attention, from its shapes; 0 for other ops."""
    out = call.out_shapes[0]
    if name in CONVOLUTIONS and len(call.in_shapes) >= 2:
        weight = call.in_shapes[1]  # [C_out, C_in / groups, *kernel]
        return 2.0 * ops.numel(out) * math.prod(weight[1:])
    if name in ATTENTION and len(call.in_shapes) >= 3:
        q, k, v = call.in_shapes[:3]
        return 2.0 * ops.numel(q[:-1]) * k[-2] * (q[-1] + v[-1])
    return 0.0
