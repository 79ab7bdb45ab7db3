"""The roofline price of the program as written (frontend/as_written.py): each PyTorch call one library
kernel that reads its tensors once and writes its results once.

It prices what a plan replaces, so that a plan is run only where it is predicted faster than the user's own
calls, not merely faster than their decomposition; on a GPU it is also what published eager timings measure
(cost/published.py), which is how the device figures it uses are fitted (cost/gpu_fit.py).

A call is priced in terms (``call_terms``): host work (a call, a view, a recurrent step), compute at the
datasheet rate of its class, and the bytes it moves, which stream at its memory class's bandwidth
(``Device.class_bw_gbs``, the datasheet's where none was fitted); compute is divided by the device's fitted
efficiency for its class (``Device.figure``, 1 where none was fitted):

    seconds = calls * launch_us + views * view_us + steps * rnn_step_us
              + max(compute / efficiency(compute class), bytes / bandwidth(memory class),
                    bytes of a row kernel / (rows * row_gbs))

The last term is a kernel that gives each row one block (layer and group norms, softmax): with few, long
rows most SMs idle and it streams at the rate of the blocks it has.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from .. import ops
from .devices import Device
from .features import node_features
from .roofline import RooflinePrior, conv_factors

VIEWS = ("view", "reshape", "_unsafe_view", "broadcast_tensors", "transpose", "permute", "expand", "unsqueeze",
         "squeeze", "t", "slice", "select", "alias", "detach", "split", "chunk", "unbind", "lift_fresh_copy", "flatten",
         "unflatten", "view_as", "expand_as", "narrow", "movedim", "split_with_sizes", "numpy_T", "unfold",
         "_assert_tensor_metadata")
CONTRACTIONS = ("mm", "bmm", "matmul", "addmm", "baddbmm", "linear", "mv", "dot", "einsum", "tensordot", "addbmm")
CONVOLUTIONS = ("convolution", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d")
ATTENTION = ("scaled_dot_product_attention", "_scaled_dot_product_flash_attention_for_cpu")
RECURRENT = ("lstm", "gru", "rnn_tanh", "rnn_relu")
#: calls whose kernel gives each row (normalized group) one block: few long rows leave SMs idle
ROW_KERNELS = ("softmax", "log_softmax", "_softmax", "_log_softmax", "layer_norm", "group_norm", "rms_norm",
               "native_layer_norm", "native_group_norm", "instance_norm", "logsumexp")
#: reductions (a pass over the input, a smaller output)
REDUCTIONS = ("sum", "mean", "amax", "amin", "max", "min", "argmax", "argmin", "prod", "var", "std", "var_mean",
              "norm", "linalg_vector_norm", "cumsum", "cumprod", "all", "any", "batch_norm", "native_batch_norm",
              "_native_batch_norm_legit", "_native_batch_norm_legit_no_training", "mse_loss", "l1_loss",
              "smooth_l1_loss", "huber_loss", "kl_div", "binary_cross_entropy", "cross_entropy", "cross_entropy_loss",
              "cosine_similarity", "hinge_embedding_loss", "triplet_margin_loss", "margin_ranking_loss",
              "cosine_embedding_loss", "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d",
              "adaptive_max_pool1d", "adaptive_max_pool2d", "adaptive_max_pool3d", "_adaptive_avg_pool2d",
              "_adaptive_avg_pool3d")
#: sliding-window pools: each output element reads its window (index arithmetic per tap, what bounds them)
POOLS = ("max_pool1d", "max_pool2d", "max_pool3d", "avg_pool1d", "avg_pool2d", "avg_pool3d",
         "max_pool2d_with_indices", "max_pool3d_with_indices")
POOL_OPS_PER_TAP = 8.0  # index arithmetic, bounds checks and the compare or add of one window element
#: data movement: copies, concatenations, pads, index arithmetic (no math on the values)
MOVEMENT = ("cat", "stack", "clone", "contiguous", "copy", "_to_copy", "to", "pad", "constant_pad_nd", "repeat",
            "flip", "roll", "pixel_shuffle", "pixel_unshuffle", "tril", "triu", "diag", "diag_embed", "masked_fill",
            "index_put", "scatter", "zeros_like", "ones_like", "empty_like", "full_like", "zeros", "ones", "full",
            "arange", "new_zeros", "new_ones", "new_full", "fill", "channel_shuffle", "upsample_nearest2d",
            "upsample_bilinear2d", "interpolate")
#: elementwise calls: one pass over their operands (transcendental ones cost more arithmetic, TRANSCENDENTAL)
ELEMENTWISE = ("add", "sub", "mul", "div", "multiply", "rsub", "neg", "abs", "exp", "log", "log1p", "sqrt", "rsqrt",
               "pow", "relu", "sigmoid", "tanh", "gelu", "silu", "mish", "softplus", "softsign", "elu", "selu", "celu",
               "leaky_relu", "hardtanh", "hardsigmoid", "hardswish", "relu6", "clamp", "clamp_min", "clamp_max",
               "where", "eq", "ne", "lt", "le", "gt", "ge", "bitwise_not", "logical_not", "logical_and",
               "logical_or", "maximum", "minimum", "erf", "sin", "cos", "sign", "reciprocal", "square", "dropout",
               "randn", "rand", "lerp", "addcmul", "addcdiv", "fmod", "remainder", "floor", "ceil", "round")
#: calls that read only the elements their indices pick (plus the indices), not whole operands
GATHERS = ("nll_loss", "nll_loss_nd", "nll_loss_forward", "nll_loss2d", "gather", "index_select", "embedding", "take",
           "index")
TRANSCENDENTAL = ("exp", "log", "tanh", "sigmoid", "gelu", "silu", "mish", "softplus", "erf", "pow", "sqrt",
                  "rsqrt", "softmax", "log_softmax", "logsumexp", "layer_norm", "group_norm", "batch_norm",
                  "cross_entropy", "nll_loss", "elu", "selu", "celu")
#: what each term's efficiency is called in ``Device.figures`` (the fitted figures, cost/gpu_fit.py)
COMPUTE_CLASSES = ("gemm", "conv", "attention", "vector")


@dataclass(frozen=True)
class CallTerms:
    """A call's price before the device's fitted efficiencies: see the module docstring."""

    calls: float  # kernels launched from the host (a call composed of five ATen ops launches five)
    views: float
    steps: float  # sequential steps of a recurrent layer (each a few dependent kernels)
    compute: float  # seconds at the datasheet rate of compute_class
    compute_class: str
    conv_factors: tuple[str, ...]  # a convolution's shape classes (roofline.conv_factors)
    bytes: float  # DRAM traffic
    memory_class: str  # devices.MEMORY_CLASSES' names
    rows: float  # ROW_KERNELS: blocks in flight (one per row); 0 otherwise


def written_seconds(calls, device: Device) -> float:
    """Predicted seconds of the program as written on ``device``: its calls, plus the per-program host cost."""
    return device.figure("program_us") * 1e-6 + sum(call_seconds(c, device) for c in calls)


def library_calls_only(calls) -> bool:
    """Whether every call is a view or a product, convolution or attention: calls a compiler makes as they
    are written (to the same library kernels), with no elementwise or reduction work between to fuse."""
    return bool(calls) and all(call_name(c) in VIEWS + CONTRACTIONS + CONVOLUTIONS + ATTENTION for c in calls)


def call_name(call) -> str:
    """The ATen function a call is, its in-place variant as the function (``aten.relu_.default``: relu)."""
    name = call.op.split(".")[1] if call.op.startswith("aten.") else call.op
    return name[:-1] if name.endswith("_") and not name.endswith("__") else name


def generic_calls(calls) -> list[str]:
    """The ops among ``calls`` no class prices (not a view, library call, reduction, movement or known
    elementwise op): priced as one elementwise pass, a guess a report must name."""
    known = (VIEWS + CONTRACTIONS + CONVOLUTIONS + ATTENTION + RECURRENT + ROW_KERNELS + REDUCTIONS + POOLS + MOVEMENT
             + GATHERS + ELEMENTWISE)
    return sorted({c.op for c in calls if call_name(c) not in known})


def call_seconds(call, device: Device) -> float:
    """Predicted seconds of one call as written on ``device`` (its fitted figures applied)."""
    return priced(call_terms(call, device), device)


def priced(t: CallTerms, device: Device) -> float:
    """A call's seconds from its terms and ``device``'s figures (the formula of the module docstring)."""
    f = device.figure
    efficiency = f(f"{t.compute_class}_efficiency") * math.prod(f(name) for name in t.conv_factors)
    memory = t.bytes / (device.class_bandwidth_gbs(t.memory_class) * 1e9)
    if t.rows:
        memory = max(memory, t.bytes / (t.rows * f("row_gbs") * 1e9))
    host = t.calls * device.launch_us + t.views * device.view_us + t.steps * f("rnn_step_us")
    if t.compute_class == "conv":  # a library convolution's own host work (its algorithm's choice and set-up)
        host += f("conv_call_us")
    return host * 1e-6 + max(t.compute / efficiency, memory)


def call_terms(call, device: Device) -> CallTerms:
    """The terms of one call on ``device``'s datasheet (figures not applied)."""
    name = call_name(call)
    if name in VIEWS or not call.out_shapes or (name == "dropout" and not _training(call)):
        return CallTerms(0, 1, 0, 0.0, "vector", (), 0.0, "elementwise", 0)
    passes = 5 if any(kind in name for kind in device.unfused) else 1  # composed from five ATen ops
    moved = sum(ops.numel(s) * ops.dtype_size(d) for s, d in zip(call.in_shapes + call.out_shapes,
                                                                   call.in_dtypes + call.out_dtypes))
    elements = max(ops.numel(s) for s in call.in_shapes + call.out_shapes)
    if name in GATHERS:  # the indices, one picked element per index, the results
        indices = sum(ops.numel(s) for s, d in zip(call.in_shapes, call.in_dtypes) if d in ("int64", "int32"))
        outputs = [ops.numel(s) for s in call.out_shapes]
        moved = indices * 12 + sum(n * ops.dtype_size(d) for n, d in zip(outputs, call.out_dtypes))
        elements = max([indices, *outputs])
    if name == "dropout" or (name == "batch_norm" and _training(call, first=True)):
        moved *= 1.5  # dropout: a random mask drawn and applied; batch statistics: the input read twice
    dtype = call.out_dtypes[0]
    compute_class, factors, steps, rows = "vector", (), 0, 0
    if (product := _as_matmul(name, call)) is not None:  # priced as the plan's products are: like for like
        a, b, out = product
        datasheet = RooflinePrior(dataclasses.replace(device, figures=()))
        compute = datasheet.matmul_compute(node_features("MatMul", [a, b], [dtype] * 2, out, dtype))
        compute_class = "gemm"
    elif name in CONVOLUTIONS and len(call.in_shapes) >= 2:
        compute = RooflinePrior(device).conv_compute(call.in_shapes[0], call.in_shapes[1], call.out_shapes[0], dtype,
                                                     _transposed(call))
        compute_class, factors = "conv", _conv_factors(call)
    elif name in ATTENTION and len(call.in_shapes) >= 3:
        q, k, v = call.in_shapes[:3]
        compute = 2.0 * ops.numel(q[:-1]) * k[-2] * (q[-1] + v[-1]) / device.matmul_peak(dtype)
        compute_class = "attention"
    elif name in RECURRENT:
        compute, steps = _recurrent(call, device)
        compute_class = "gemm"
    elif name in POOLS:
        window = math.prod(a for a in call.args[:len(call.in_shapes[0]) - 2] if not isinstance(a, bool))
        compute = ops.numel(call.out_shapes[0]) * window * POOL_OPS_PER_TAP / (device.vector_tflops * 1e12)
    else:
        per_element = 8.0 if any(t in name for t in TRANSCENDENTAL) else 1.0
        compute = passes * elements * per_element / (device.vector_tflops * 1e12)
        rows = _rows(name, call)
    return CallTerms(passes, 0, steps, compute, compute_class, factors, passes * moved,
                     _memory_class(name, compute_class), rows)


def _memory_class(name: str, compute_class: str) -> str:
    """The call's class of traffic (devices.MEMORY_CLASSES' names)."""
    if compute_class == "conv":
        return "conv"
    if compute_class != "vector":
        return "contraction"
    if name in ROW_KERNELS or name in REDUCTIONS:
        return "reduction"
    return "other" if name in MOVEMENT + GATHERS + POOLS else "elementwise"


def _training(call, first: bool = False) -> bool:
    """dropout(x, p, train): whether it drops (its bool, p > 0); batch_norm(..., training, ...): its first bool."""
    bools = [a for a in call.args if isinstance(a, bool)]
    if first:
        return bool(bools and bools[0])
    floats = [a for a in call.args if isinstance(a, float)]
    return bool(bools and bools[-1] and (not floats or floats[0] > 0))


def _rows(name: str, call) -> float:
    """Blocks a row kernel runs (rows of its last dim; a layer norm's normalized groups; a group norm's groups)."""
    if name not in ROW_KERNELS:
        return 0
    x = call.in_shapes[0]
    if "group_norm" in name:
        groups = next((a for a in call.args if isinstance(a, int) and not isinstance(a, bool)), 1)
        return x[0] * groups if x else 1
    if "layer_norm" in name:
        normalized = [a for a in call.args if isinstance(a, int) and not isinstance(a, bool)]
        return max(ops.numel(x) // max(math.prod(normalized), 1), 1) if normalized else ops.numel(x[:-1])
    return max(ops.numel(x) // max(x[-1], 1), 1) if x else 1


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


def _transposed(call) -> bool:
    """aten.convolution(x, w, b, stride, padding, dilation, transposed, output_padding, groups), or a
    conv_transpose call."""
    if "transpose" in call_name(call):
        return True
    bools = [a for a in call.args if isinstance(a, bool)]
    return bool(bools and bools[0])


def _conv_factors(call) -> tuple[str, ...]:
    """roofline.conv_factors of a convolution call, its stride and dilation read from its arguments (those
    left at their defaults are not recorded: 1)."""
    x, weight, out = call.in_shapes[0], call.in_shapes[1], call.out_shapes[0]
    spatial = len(weight) - 2
    ints = [a for a in call.args if isinstance(a, int) and not isinstance(a, bool)]
    stride = tuple(ints[:spatial]) or (1,) * spatial
    plain = call_name(call) in ("convolution", "conv1d", "conv2d", "conv3d")  # (..., stride, padding, dilation, ...)
    dilation = tuple(ints[2 * spatial:3 * spatial]) if plain else ()
    return conv_factors(x, weight, out, _transposed(call), stride, dilation)


def _recurrent(call, device: Device) -> tuple[float, float]:
    """(compute seconds, sequential steps) of an LSTM/GRU/RNN call: its input and hidden products, per
    layer and direction, and one dependent step per time step, layer and direction."""
    x = call.in_shapes[0]
    weights = call.in_shapes[2:] if len(call.in_shapes) > 2 else ()
    flops = 0.0
    ints = [a for a in call.args if isinstance(a, int) and not isinstance(a, bool)]
    bools = [a for a in call.args if isinstance(a, bool)]
    layers = ints[0] if ints else 1
    bidirectional = len(bools) >= 3 and bools[-2]
    batch_first = bool(bools) and bools[-1]
    seq = x[1] if batch_first and len(x) == 3 else x[0]
    batch = x[0] if batch_first and len(x) == 3 else (x[1] if len(x) == 3 else 1)
    for w in weights:
        if len(w) == 2:  # a [gates * hidden, in] weight: one product per time step
            flops += 2.0 * seq * batch * w[0] * w[1]
    steps = seq * layers * (2 if bidirectional else 1)
    return flops / device.matmul_peak(call.in_dtypes[0]), steps
