"""The learned model's input: one fixed-length numeric vector per kernel node, computed apart from the model.

Why these features: a kernel's time is set by its work (FLOPs, bytes, intensity), how that work is cut into
programs (tile, warps, stages, split-K, grid), how well the programs fill the device (waves over the SMs and
the idle fraction of the last wave), what is fused into it (epilogue/prologue arithmetic), whether loads can
be vectorized (layouts, 16-alignment of dims) and what the compiler made of it (registers, spills, shared
memory: the static resources, optional, from ``eqiforge.profiling.static``). Sizes enter as logarithms so
that one MLP sees 64 and 8192 on a comparable scale.

``FEATURE_VERSION`` changes whenever the layout of the vector changes; a saved model records it.
"""
from __future__ import annotations

import math

import numpy as np

from ..ops import fused
from .. import ops
from .devices import Device
from .features import NodeFeatures

FEATURE_VERSION = 2
DTYPES = ("float32", "float16", "bfloat16")
KERNEL_OPS = ("GemmK", "PointwiseK", "RowReduceK", "AttentionK")
POINTWISE_BLOCK = 1024  # PointwiseSpec's default block: elements per program
FEATURE_NAMES = (
    *(f"op_{o}" for o in KERNEL_OPS), *(f"dtype_{d}" for d in DTYPES),
    "log2_m", "log2_n", "log2_k", "log2_batch", "log_flops", "log_bytes", "log_intensity",
    "log2_block_m", "log2_block_n", "log2_block_k", "group_m", "warps", "stages", "log2_split_k",
    "log2_grid", "waves", "log2_full_waves", "wave_efficiency", "smem_fraction",
    "fused_flops_per_element", "fused_expr_nodes", "extra_inputs", "a_transposed", "b_transposed",
    "m_aligned16", "n_aligned16", "k_aligned16",
    "has_resources", "log2_registers", "log2_spills", "shared_kib", "causal",
)


def expr_size(expr) -> int:
    """Nodes of a fused expression (its leaves included): a proxy for the epilogue's register pressure."""
    if not isinstance(expr, tuple):
        return 0
    return 1 + sum(expr_size(e) for e in expr[1:] if isinstance(e, tuple))


def _attrs(f: NodeFeatures):
    return ops.get(f.op).named(f.attrs)


def problem_dims(f: NodeFeatures) -> tuple[int, int, int, int]:
    """(M, N, K, batch) of a kernel node. GEMM: out[..., M, N] over K. Attention: M queries, N keys, K the
    head dim, batch the leading dims of q. Pointwise: rows x last dim, K = 1. Row reduction: rows x reduced
    length of x, K = 1."""
    if f.op == "GemmK":
        *batch, m, n = f.out_shape
        k = f.in_shapes[0][-2] if _attrs(f).layout_a == "T" else f.in_shapes[0][-1]
        return m, n, k, ops.numel(batch)
    if f.op == "AttentionK":
        *batch, m, k = f.in_shapes[0]
        keys = f.in_shapes[1]
        return m, keys[-1] if _attrs(f).layout_k == "T" else keys[-2], k, ops.numel(batch)
    shape = f.in_shapes[0] if f.op == "RowReduceK" else f.out_shape
    last = shape[-1] if shape else 1
    return ops.numel(shape) // max(last, 1), last, 1, 1


def launch_config(f: NodeFeatures) -> dict:
    """Tile, warps, stages, split-K and grid size (programs) of a kernel node; zeros where a kernel kind has
    no such knob (its template chooses)."""
    m, n, _, batch = problem_dims(f)
    if f.op == "GemmK":
        tile, split_k = _attrs(f).tile, _attrs(f).split_k
        block_m, block_n, block_k, group_m, warps, stages = tile or (0, 0, 0, 0, 0, 0)
        grid = batch * math.ceil(m / block_m) * math.ceil(n / block_n) * split_k if tile else 0
        return dict(block_m=block_m, block_n=block_n, block_k=block_k, group_m=group_m, warps=warps,
                    stages=stages, split_k=split_k, grid=grid)
    grid = math.ceil(ops.numel(f.out_shape) / POINTWISE_BLOCK) if f.op == "PointwiseK" else m
    return dict(block_m=0, block_n=0, block_k=0, group_m=0, warps=0, stages=0, split_k=1, grid=grid)


def waves(grid: int, sms: int) -> tuple[float, int, float]:
    """(programs per SM, waves rounded up, wave efficiency = busy fraction of SM-slots over all waves)."""
    full = math.ceil(grid / sms)
    return grid / sms, full, (grid / (full * sms) if full else 0.0)


def fused_work(f: NodeFeatures) -> tuple[float, int, int]:
    """(fused FLOPs per element, fused expression nodes, extra inputs) of a kernel node."""
    op = ops.get(f.op)
    exprs = [getattr(_attrs(f), name) for name in op.exprs]
    extras = len(f.in_shapes) - op.arity
    return sum(fused.flops_per_element(e) for e in exprs), sum(expr_size(e) for e in exprs), extras


def _log2(x: float) -> float:
    return math.log2(x) if x > 0 else 0.0


def feature_vector(f: NodeFeatures, device: Device, resources: dict | None = None) -> np.ndarray:
    """The vector named by ``FEATURE_NAMES`` for kernel node ``f`` on ``device``. ``resources``: the static
    resources of its kernel (``n_regs``, ``n_spills``, ``shared``), or None (then zeros, flag off)."""
    m, n, k, batch = problem_dims(f)
    cfg = launch_config(f)
    per_sm, full, efficiency = waves(cfg["grid"], device.sms)
    smem = cfg["stages"] * (cfg["block_m"] + cfg["block_n"]) * cfg["block_k"] * ops.dtype_size(f.dtype)
    flops_pe, expr_nodes, extras = fused_work(f)
    transposed = (_attrs(f).layout_a == "T", _attrs(f).layout_b == "T") if f.op == "GemmK" else \
        (False, _attrs(f).layout_k == "T") if f.op == "AttentionK" else (False, False)
    res = resources or {}
    values = [
        *(float(f.op == o) for o in KERNEL_OPS), *(float(f.dtype == d) for d in DTYPES),
        _log2(m), _log2(n), _log2(k), _log2(batch), math.log(f.flops + 1), math.log(f.bytes + 1),
        math.log(f.intensity + 1e-3),
        _log2(cfg["block_m"]), _log2(cfg["block_n"]), _log2(cfg["block_k"]), cfg["group_m"], cfg["warps"],
        cfg["stages"], _log2(cfg["split_k"]),
        _log2(cfg["grid"]), per_sm, _log2(full), efficiency, smem / max(device.smem_per_sm_kib * 1024, 1),
        flops_pe, expr_nodes, extras, *map(float, transposed),
        float(m % 16 == 0), float(n % 16 == 0), float(k % 16 == 0),
        float(resources is not None), _log2(res.get("n_regs", 0)), _log2(res.get("n_spills", 0) + 1),
        res.get("shared", 0) / 1024, float(f.op == "AttentionK" and bool(_attrs(f).causal)),
    ]
    return np.asarray(values, dtype=np.float64)
