"""The analytical roofline prior: time = launch + max(compute time, memory time), per node.

Matrix products are priced with wave quantisation: the output is cut into 128x128 tiles, tiles run in waves
of one per SM, and every wave costs a full tile's work, so a shape that leaves SMs idle is not flattered.
Views cost only host time; leaves and folded constants cost nothing at run time, except a constant-filled
tensor that a generated kernel reads (the triton backend fills it per call; the algebra uses the number).
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from ..ops import fused, native
from .. import ops
from .configs import best_prices
from .devices import Device
from .features import NodeFeatures, node_features

TILE = 128
ROW_BLOCK = 1024  # elements per program of the row-reduction template (RowReduceSpec's default block)
ATTENTION_BLOCK = 64  # query rows and keys per tile of the attention template (AttentionSpec's default)
MIN_KEYS_PER_SHARE = 4 * ATTENTION_BLOCK  # a key-axis share reads at least 4 key tiles
CONV_GRANULE = 32  # a convolution's output channels and reduction depth run in multiples of this (MMA tiles)
#: a library GEMM splits a long K (shares of at least this many) over the SMs its tiles leave idle
LIBRARY_SPLIT_K = 8192
SM_STREAM_SHARE = 4.0  # an SM streams up to ~4x its equal share of DRAM bandwidth (a prior the learned model corrects)


def attention_split(n_batch: int, sq: int, sk: int, sms: int) -> int:
    """Shares of the key axis an attention kernel runs as separate programs (flash-decoding): when its query
    tiles alone would leave SMs idle (decoding: a query or a few per head), enough shares to give every SM
    a program, each of at least MIN_KEYS_PER_SHARE keys. The plan's kernel uses the split priced here."""
    tiles = n_batch * math.ceil(sq / ATTENTION_BLOCK)
    if 2 * tiles > sms:
        return 1
    return max(1, min(math.ceil(sms / tiles), sk // MIN_KEYS_PER_SHARE))


def conv_factors(x: tuple, weight: tuple, out: tuple, transposed: bool, stride: tuple, dilation: tuple
                 ) -> tuple[str, ...]:
    """The shape classes of a convolution whose efficiency differs (each a fitted figure, Device.figure):
    transposed, 3-D, grouped (depthwise at the limit: the input channels, a transposed one's output channels,
    at least twice the weight's per group), strided, and the 3x3 stride-1 2-D one that libraries run by
    Winograd's algorithm (fewer multiplications than its FLOPs)."""
    spatial = len(weight) - 2
    channels = out[1] if transposed else x[1]
    grouped = len(x) > 2 and channels >= 2 * weight[1]
    winograd = (not transposed and not grouped and spatial == 2 and tuple(weight[2:]) == (3, 3)
                and all(s == 1 for s in stride) and all(d == 1 for d in dilation))
    return tuple(name for name, applies in (
        ("conv_transposed", transposed), ("conv_3d", spatial == 3), ("conv_grouped", grouped),
        ("conv_strided", any(s > 1 for s in stride)), ("conv_winograd", winograd)) if applies)


def _row_programs(x: tuple) -> int:
    """Programs of the row-reduction template over ``x``: one per block of rows of ROW_BLOCK elements."""
    rows, n = ops.numel(x[:-1]), x[-1]
    block_cols = min(ROW_BLOCK, 1 << max(n - 1, 0).bit_length())
    return math.ceil(rows / max(ROW_BLOCK // block_cols, 1))


class RooflinePrior:
    """Cost model interface: ``predict(features) -> seconds`` (numpy array), plus a name for reports.

    With ``kernels`` (the triton backend) kernel-layer nodes are priced as generated kernels and the
    remaining algebra ops as PyTorch calls (one kernel each plus host dispatch); without it (the torch
    backend) kernel-layer nodes are never chosen.
    """

    def __init__(self, device: Device, kernels: bool = False):
        if not isinstance(device, Device):  # resolving a name measures or fits figures: above this module
            raise TypeError(f"RooflinePrior prices a Device, got {device!r}: cost.get_device(name) gives one")
        self.device = device
        self.kernels = kernels
        fitted = f"; {self.device.fitted}" if self.device.fitted else ""
        self.name = f"roofline prior ({self.device.name}{fitted})"

    def predict(self, batch: list[NodeFeatures]) -> np.ndarray:
        """Seconds per node; for generated kernels an untiled GEMM at its best config (cost/configs.py)."""
        if self.kernels:
            return best_prices(self._configured, batch)[0]
        return self._configured(batch)

    def _configured(self, batch: list[NodeFeatures]) -> np.ndarray:
        return np.array([self.node_seconds(f) for f in batch], dtype=np.float64)

    def node_seconds(self, f: NodeFeatures) -> float:
        dev = self.device
        if f.op == "Fill" and self.kernels and not f.folded:  # generated code materialises it: torch.full
            return dev.launch_us * 1e-6 + f.bytes / (dev.bandwidth_gbs(f.op, f.kind) * 1e9)
        if f.kind == "leaf" or f.folded:
            return 0.0
        if f.is_view:
            return dev.view_us * 1e-6
        if f.kind == "kernel" and not self.kernels and not native.is_native(f.op, f.attrs, f.in_shapes,
                                                                                     self.device.unfused):
            return math.inf
        memory = f.bytes / (dev.bandwidth_gbs(f.op, f.kind) * 1e9)
        if f.op == "GemmK":
            return self._gemm_kernel_seconds(f, memory)
        if f.op == "AttentionK":
            return self._attention_kernel_seconds(f, memory)
        if f.op == "RowReduceK":
            memory /= self._bandwidth_share(_row_programs(f.in_shapes[0]))
        if f.kind == "matmul":
            compute = self.matmul_compute(f)
        elif f.kind == "conv":
            a = ops.get(f.op).named(f.attrs)
            x, weight = f.in_shapes[0], f.in_shapes[1]
            compute = self.conv_compute(x, weight, f.out_shape, f.dtype, transposed=False)
            factors = conv_factors(x, weight, f.out_shape, False, tuple(a.stride), tuple(a.dilation))
            compute /= dev.figure("conv_efficiency") * math.prod(dev.figure(name) for name in factors)
        else:
            compute = f.flops / (dev.vector_tflops * 1e12)
        host = dev.view_us * 1e-6 if self.kernels and f.kind != "kernel" else 0.0  # PyTorch dispatch
        if f.kind == "conv":  # a library convolution's own host work, as the program's calls pay it (as_written)
            host += dev.figure("conv_call_us") * 1e-6
        if f.kind == "band":  # one multiply-add call per diagonal, each with three views
            host += ops.band_diagonals(f.in_shapes[0], *f.attrs) * (dev.launch_us + 3 * dev.view_us) * 1e-6
        return dev.launch_us * 1e-6 + max(compute, memory) + host

    def _gemm_kernel_seconds(self, f: NodeFeatures, memory: float) -> float:
        attrs = ops.get("GemmK").named(f.attrs)
        layout_a, tile, split_k = attrs.layout_a, attrs.tile, attrs.split_k
        if not tile and self.kernels:
            return math.inf  # no config: predict() prices its configs
        tile = tile or (TILE, TILE, 32, 8, 4, 3)  # a native PyTorch matmul: its library picks good tiles
        block_m, block_n, block_k, _, _, stages = tile
        smem = stages * (block_m + block_n) * block_k * ops.dtype_size(f.dtype)
        if self.kernels and smem > self.device.smem_per_sm_kib * 1024:  # a library matmul picks its own tiles
            return math.inf
        k = f.in_shapes[0][-2] if layout_a == "T" else f.in_shapes[0][-1]
        compute = self._matmul_seconds(f, k, (block_m, block_n, block_k, stages), split_k)
        # the epilogue runs on the vector units after the main loop, once per output element: what makes a
        # row statistic cheaper computed once per row (in a reduction's epilogue) than once per element here
        compute += ops.numel(f.out_shape) * fused.flops_per_element(attrs.epilogue) / (self.device.vector_tflops * 1e12)
        partials = 2.0 * split_k * ops.numel(f.out_shape) * 4 if split_k > 1 else 0.0
        launches = 2 if split_k > 1 else 1
        memory += partials / (self.device.bandwidth_gbs(f.op, f.kind) * 1e9)
        return launches * self.device.launch_us * 1e-6 + max(compute, memory)

    def _bandwidth_share(self, programs: int) -> float:
        """The share of DRAM bandwidth ``programs`` running programs can draw, an SM streaming at most
        SM_STREAM_SHARE times its equal share: a few programs leave most of it unused (what two-stage row
        reductions and split attention fix)."""
        return min(1.0, programs * SM_STREAM_SHARE / self.device.sms)

    def _attention_kernel_seconds(self, f: NodeFeatures, memory: float) -> float:
        """Query tiles of 64 rows (times the key-axis shares, see attention_split) run in waves over the SMs,
        each doing both products over its keys; a split adds the combine kernel and its fp32 workspace."""
        *batch, rows, dv = f.out_shape
        n_batch, sk = ops.numel(batch), f.in_shapes[2][-2]
        split = attention_split(n_batch, rows, sk, self.device.sms)
        programs = n_batch * math.ceil(rows / ATTENTION_BLOCK) * split
        waves = math.ceil(programs / self.device.sms)
        per_sm = self.device.matmul_peak(f.dtype) * 0.7 / self.device.sms  # softmax work between products
        compute = waves * f.flops / programs / per_sm
        seconds = self.device.launch_us * 1e-6 + max(compute, memory / self._bandwidth_share(programs))
        if split > 1:
            workspace = 2 * 4 * split * n_batch * rows * (dv + 2)  # written, then read by the combine kernel
            seconds += self.device.launch_us * 1e-6 + workspace / (self.device.bandwidth_gbs(f.op, f.kind) * 1e9)
        return seconds

    def matmul_compute(self, f: NodeFeatures) -> float:
        """Compute seconds of a library matrix product (a MatMul node, or a call as written): 128x128 tiles,
        the reduction split over SMs its tiles leave idle (what cuBLAS does for a large K); a split costs what
        GemmK's does, a second kernel and its fp32 partial sums' traffic."""
        *batch, m, n = f.out_shape
        k = f.in_shapes[0][-1]
        tiles = ops.numel(batch) * math.ceil(m / TILE) * math.ceil(n / TILE)
        split = max(1, min(self.device.sms // tiles, k // LIBRARY_SPLIT_K))
        seconds = self._matmul_seconds(f, k, (TILE, TILE, 32, 3), split)
        if split > 1:
            partials = 2.0 * split * ops.numel(f.out_shape) * 4
            seconds += self.device.launch_us * 1e-6 + partials / (self.device.bandwidth_gbs(f.op, f.kind) * 1e9)
        return seconds

    def conv_compute(self, x: tuple, weight: tuple, out: tuple, dtype: str, transposed: bool) -> float:
        """Compute seconds of a library convolution at the device's convolution rate (its GEMM efficiency
        aside): an implicit GEMM per group, priced as matmul_compute prices a product, so that few output
        channels or a short reduction waste tiles as they do. A convolution: [N * spatial_out, C_in / g *
        kernel] @ [.., C_out / g]; a transposed one scatters each input element: [N * spatial_in, C_in / g]
        @ [.., C_out / g * kernel]."""
        kernel = math.prod(weight[2:])
        if transposed:  # weight [C_in, C_out / g, *kernel]
            groups = max(out[1] // max(weight[1], 1), 1)
            m, k, n = x[0] * math.prod(x[2:]), x[1] // groups, weight[1] * kernel
        else:  # weight [C_out, C_in / g, *kernel]
            groups = max(x[1] // max(weight[1], 1), 1)
            m, k, n = out[0] * math.prod(out[2:]), weight[1] * kernel, out[1] // groups
        k, n = (math.ceil(d / CONV_GRANULE) * CONV_GRANULE for d in (k, n))  # a tile's columns and depth are padded
        gemm = node_features("MatMul", [(groups, m, k), (groups, k, n)], [dtype] * 2, (groups, m, n), dtype)
        datasheet = RooflinePrior(dataclasses.replace(self.device, figures=()))
        return datasheet.matmul_compute(gemm) * self.device.matmul_peak(dtype) / self.device.conv_peak(dtype)

    def _matmul_seconds(self, f: NodeFeatures, k: int, tile: tuple, split_k: int) -> float:
        """Wave-quantised compute time: every wave of tiles costs a full tile; small tiles run the tensor
        cores less efficiently (efficiency ~ sqrt of the tile area relative to 128x128); the device's fitted
        GEMM efficiency scales the rate."""
        *batch, m, n = f.out_shape
        block_m, block_n = tile[0], tile[1]
        tiles = ops.numel(batch) * math.ceil(m / block_m) * math.ceil(n / block_n) * split_k
        waves = math.ceil(tiles / self.device.sms)
        efficiency = min(1.0, (block_m * block_n) / (TILE * TILE)) ** 0.5 * self.device.figure("gemm_efficiency")
        per_sm = self.device.matmul_peak(f.dtype) * efficiency / self.device.sms
        tile_flops = 2.0 * min(m, block_m) * min(n, block_n) * math.ceil(k / split_k)
        return waves * tile_flops / per_sm
