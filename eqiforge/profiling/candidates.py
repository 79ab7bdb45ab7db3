"""Which kernels to measure: a stratified random sweep of problems, each with all its configurations.

Stratified: every problem dim is drawn log-uniformly within a stratum (small, medium, large) and the strata
are cycled, so that small, skinny and large problems all appear in a short run. Each GEMM problem comes with
every tile config and split-K that fits in shared memory (a whole candidate group, the choice extraction
makes); row reductions and pointwise kernels have a single configuration (their templates choose).
"""
from __future__ import annotations

import itertools
import math
import random

import numpy as np

from ..cost.dataset import kernel_record
from ..cost.devices import Device
from ..ops import ROW_RESULT_KINDS, dtype_size

STRATA = ((16, 256), (256, 2048), (2048, 8192))
DTYPES = ("float16", "bfloat16", "float32")
TILES = [(bm, bn, bk, 8, w, s) for bm, bn, bk, w, s in
         [(64, 64, 32, 4, 3), (128, 64, 32, 4, 4), (64, 128, 32, 4, 4), (128, 128, 32, 8, 3), (128, 128, 64, 8, 3),
          (128, 256, 64, 8, 3), (32, 64, 32, 2, 5), (64, 32, 32, 2, 5), (16, 64, 64, 2, 4)]]
SPLIT_K = (1, 2, 4, 8)
EPILOGUES = (("acc",), ("un", "relu", ("acc",)), ("bin", "add", ("acc",), ("in", 0)),
             ("un", "gelu", ("bin", "add", ("acc",), ("in", 0))))
ROW_KINDS = ("sum", "max", "logsumexp", "softmax", "log_softmax", "layer_norm", "rms_norm", "moments")


def _dim(rng: random.Random, stratum: int) -> int:
    low, high = STRATA[stratum]
    value = math.exp(rng.uniform(math.log(low), math.log(high)))
    return max(1, int(16 * round(value / 16)) if rng.random() < 0.7 else int(value))  # mostly aligned


def gemm_group(m: int, n: int, k: int, dtype: str, epilogue: tuple, device: Device, batch: int = 1) -> list[dict]:
    """Records (unmeasured) of every feasible tile x split-K config of one GEMM problem."""
    lead = (batch,) if batch > 1 else ()
    a, b, out = lead + (m, k), lead + (k, n), lead + (m, n)
    extras = [lead + (1, n)] if ("in", 0) in _leaves(epilogue) else []
    group = []
    for tile, split_k in itertools.product(TILES, SPLIT_K):
        smem = tile[5] * (tile[0] + tile[1]) * tile[2] * dtype_size(dtype)
        if smem > device.smem_per_sm_kib * 1024 or (split_k > 1 and k < 512 * split_k):
            continue
        group.append(kernel_record("GemmK", [a, b, *extras], [dtype] * (2 + len(extras)), out, dtype,
                                   ("N", "N", tile, split_k, epilogue)))
    return group


def _leaves(expr: tuple):
    yield expr
    for e in expr[1:]:
        if isinstance(e, tuple):
            yield from _leaves(e)


def sweep(device: Device, seed: int = 0):
    """An endless stream of candidate groups (lists of unmeasured records), stratified, reproducible."""
    rng = random.Random(seed)
    for i in itertools.count():
        dtype, stratum = DTYPES[i % len(DTYPES)], (i // len(DTYPES)) % len(STRATA)
        pick = rng.random()
        if pick < 0.7:
            dims = [_dim(rng, stratum if rng.random() < 0.6 else rng.randrange(len(STRATA))) for _ in range(3)]
            batch = rng.choice((1, 1, 1, 4, 16)) if stratum < 2 else 1
            yield gemm_group(*dims, dtype, rng.choice(EPILOGUES), device, batch)
        elif pick < 0.85:
            rows, cols = _dim(rng, stratum), _dim(rng, rng.randrange(len(STRATA)))
            kind = rng.choice(ROW_KINDS)
            out = (rows, 1) if kind in ROW_RESULT_KINDS else (rows, 2) if kind == "moments" else (rows, cols)
            yield [kernel_record("RowReduceK", [(rows, cols)], [dtype], out, dtype, (kind, ("x",), ("acc",), 1e-5))]
        else:
            shape = (_dim(rng, stratum), _dim(rng, rng.randrange(len(STRATA))))
            expr = ("un", rng.choice(("relu", "gelu", "exp")), ("in", 0))
            yield [kernel_record("PointwiseK", [shape], [dtype], shape, dtype, (expr, shape))]


def active_selection(model, pool: list[dict], count: int, features) -> list[dict]:
    """Active learning: from ``pool`` (unmeasured records) the ``count`` most worth measuring: per group the
    candidate the model predicts fastest (the decision that matters), then those the ensemble disagrees on
    most. ``features``: record -> NodeFeatures."""
    feats = [features(r) for r in pool]
    predicted, spread = model.predict(feats), model.spread(feats)
    best: dict[str, int] = {}
    for i, rec in enumerate(pool):
        if rec["group"] not in best or predicted[i] < predicted[best[rec["group"]]]:
            best[rec["group"]] = i
    chosen = set(best.values())
    order = list(best.values()) + [int(i) for i in np.argsort(-spread, kind="stable") if i not in chosen]
    return [pool[i] for i in order[:count]]
