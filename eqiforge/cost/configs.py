"""Kernel configs chosen by the cost model, not enumerated in the e-graph.

A GEMM kernel's tile (BLOCK_M BLOCK_N BLOCK_K GROUP_M num_warps num_stages) and split-K are how it runs,
not what it computes. The e-graph holds one untiled GEMM e-node per fused form; a cost model of generated
kernels prices it at its best config (``best_prices``: every config of ``gemm_configs`` priced in the same
batched call, the cheapest kept), and the plan is built with that config (``configured``). One e-node
instead of up to seven per GEMM variant: the tiling step was most of a transformer block's joint e-graph.

The config space is what the tiling rules used to add (Triton's matmul tutorial configs; CUTLASS's
split-K): no block larger than the problem (a block may exceed a dim only while the dim is above half of
it), split-K for a small output with a long reduction. Static resources (shared memory per SM) are the
cost model's check: an infeasible config is priced at infinity and never chosen.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from .. import ops
from .features import NodeFeatures

#: (tile, the smallest M and N it is used for, exclusive): M > min_m and N > min_n
GEMM_TILES = (((128, 128, 32, 8, 8, 3), 64, 64), ((128, 64, 32, 8, 4, 4), 64, 32), ((64, 128, 32, 8, 4, 4), 32, 64),
              ((64, 64, 32, 8, 4, 4), 32, 32), ((32, 32, 32, 8, 4, 4), 0, 16), ((16, 16, 32, 8, 2, 2), 0, 0))
SPLIT_K_TILE = (32, 32, 64, 8, 4, 3)
SPLIT_K = 4
#: split-K runs for an output of at most SPLIT_K_MAX_M x SPLIT_K_MAX_N with K of at least SPLIT_K_MIN_K
SPLIT_K_MAX_M, SPLIT_K_MAX_N, SPLIT_K_MIN_K = 64, 256, 1024


def untiled_gemm(f: NodeFeatures) -> bool:
    """A GEMM kernel node whose config is still to be chosen."""
    return f.op == "GemmK" and not ops.get("GemmK").named(f.attrs).tile


def gemm_configs(f: NodeFeatures) -> list[tuple[tuple, int]]:
    """(tile, split_k) configs of an untiled GEMM kernel node for its problem shape, in a fixed order (ties
    go to the first: deterministic)."""
    a = ops.get("GemmK").named(f.attrs)
    *_, m, n = f.out_shape
    configs = [(tile, 1) for tile, min_m, min_n in GEMM_TILES if m > min_m and n > min_n]
    k = f.in_shapes[0][-2] if a.layout_a == "T" else f.in_shapes[0][-1]
    if m <= SPLIT_K_MAX_M and n <= SPLIT_K_MAX_N and k >= SPLIT_K_MIN_K:
        configs.append((SPLIT_K_TILE, SPLIT_K))
    return configs


def with_config(f: NodeFeatures, tile: tuple, split_k: int) -> NodeFeatures:
    """``f`` with its GEMM tile and split-K set."""
    return replace(f, attrs=tuple(with_gemm_config(f.attrs, tile, split_k)))


def with_gemm_config(attrs: tuple, tile: tuple, split_k: int) -> tuple:
    """GemmK attributes with the tile and split-K set."""
    return tuple(ops.get("GemmK").named(attrs)._replace(tile=tuple(tile), split_k=split_k))


def best_prices(price, batch: list[NodeFeatures]) -> tuple[np.ndarray, list[tuple | None]]:
    """(seconds per node, the chosen (tile, split_k) per node or None): ``price`` (a model's prices of nodes
    whose configs are set) over ``batch`` with every untiled GEMM priced at its cheapest config, all configs
    priced in one call."""
    expanded, owner = [], []
    for i, f in enumerate(batch):
        variants = [with_config(f, *c) for c in gemm_configs(f)] if untiled_gemm(f) else [f]
        expanded += variants
        owner += [i] * len(variants)
    prices = price(expanded) if expanded else np.zeros(0)
    best = np.full(len(batch), np.inf)
    chosen: list[tuple | None] = [None] * len(batch)
    for f, i, p in zip(expanded, owner, prices):
        if p < best[i]:  # strict: the first of equal configs stays
            best[i] = p
            if untiled_gemm(batch[i]):
                a = ops.get("GemmK").named(f.attrs)
                chosen[i] = (a.tile, a.split_k)
    return best, chosen
