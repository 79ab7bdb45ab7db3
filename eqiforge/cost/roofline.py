"""The analytical roofline prior: time = launch + max(compute time, memory time), per node.

Matrix products are priced with wave quantisation: the output is cut into 128x128 tiles, tiles run in waves
of one per SM, and every wave costs a full tile's work, so a shape that leaves SMs idle is not flattered.
Views cost only host time; leaves and folded constants cost nothing at run time.
"""
from __future__ import annotations

import math

import numpy as np

from .. import ops
from .devices import Device, get_device
from .features import NodeFeatures

TILE = 128


class RooflinePrior:
    """Cost model interface: ``predict(features) -> seconds`` (numpy array), plus a name for reports."""

    def __init__(self, device: str | Device | None = None):
        self.device = get_device(device)
        self.name = f"roofline prior ({self.device.name})"

    def predict(self, batch: list[NodeFeatures]) -> np.ndarray:
        return np.array([self.node_seconds(f) for f in batch], dtype=np.float64)

    def node_seconds(self, f: NodeFeatures) -> float:
        dev = self.device
        if f.kind == "leaf" or f.folded:
            return 0.0
        if f.is_view:
            return dev.view_us * 1e-6
        memory = f.bytes / (dev.mem_bw_gbs * 1e9)
        if f.kind == "matmul":
            compute = self._matmul_seconds(f)
        else:
            compute = f.flops / (dev.vector_tflops * 1e12)
        return dev.launch_us * 1e-6 + max(compute, memory)

    def _matmul_seconds(self, f: NodeFeatures) -> float:
        *batch, m, n = f.out_shape
        k = f.in_shapes[0][-1]
        tiles = ops.numel(batch) * math.ceil(m / TILE) * math.ceil(n / TILE)
        waves = math.ceil(tiles / self.device.sms)
        per_sm = self.device.matmul_peak(f.dtype) / self.device.sms
        tile_flops = 2.0 * min(m, TILE) * min(n, TILE) * k
        return waves * tile_flops / per_sm
