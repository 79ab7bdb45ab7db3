"""Profiling on the CPU: the torch backend's kernel nodes (the native PyTorch calls of ``native.py``), timed
on this machine, in the records format GPU profiling writes.

A GEMM problem comes with its four operand layouts (each operand given as is or transposed: the choice the
layout rules offer, a candidate group); row reductions (softmax, log_softmax, layer norm, sum, max) with one
configuration each. Shapes are drawn log-uniformly within strata (small, medium, large) as on a GPU, scaled
for a CPU. A record is timed by calling the native function the plan would call: the median of five
timings, each of enough calls to last about a millisecond.
"""
from __future__ import annotations

import itertools
import math
import random
import time

import torch

from .. import native
from ..cost.dataset import digest, kernel_record, tuplify

STRATA = ((8, 128), (128, 512), (512, 1536))
DTYPES = ("float32",)
LAYOUTS = (("N", "N"), ("N", "T"), ("T", "N"), ("T", "T"))
ROW_KINDS = ("softmax", "log_softmax", "layer_norm", "sum", "max")
BIAS = ("bin", "add", ("acc",), ("in", 0))


def _dim(rng: random.Random, stratum: int) -> int:
    low, high = STRATA[stratum]
    return max(1, int(math.exp(rng.uniform(math.log(low), math.log(high)))))


def gemm_layouts(m: int, n: int, k: int, dtype: str, bias: bool) -> list[dict]:
    """One problem, out[m, n] = A[m, k] @ B[k, n] (+ a bias row), with each operand in both layouts: one
    candidate group and one shape (the split into training and held-out shapes keeps the group whole)."""
    problem = digest("GemmK", m, n, k, bias)
    group = []
    for la, lb in LAYOUTS:
        a = (k, m) if la == "T" else (m, k)
        b = (n, k) if lb == "T" else (k, n)
        extras = [(1, n)] if bias else []
        rec = kernel_record("GemmK", [a, b, *extras], [dtype] * (2 + len(extras)), (m, n), dtype,
                            (la, lb, (), 1, BIAS if bias else ("acc",)))
        group.append({**rec, "shape": problem, "group": digest(problem, dtype)})
    return group


def sweep_cpu(seed: int = 0):
    """An endless, reproducible stream of candidate groups of torch-backend kernel nodes."""
    rng = random.Random(seed)
    for i in itertools.count():
        dtype, stratum = DTYPES[i % len(DTYPES)], i % len(STRATA)
        if rng.random() < 0.7:
            m, n, k = (_dim(rng, stratum if rng.random() < 0.6 else rng.randrange(len(STRATA))) for _ in range(3))
            yield gemm_layouts(m, n, k, dtype, bias=rng.random() < 0.3)
        else:
            rows, cols = _dim(rng, stratum), _dim(rng, rng.randrange(len(STRATA)))
            kind = rng.choice(ROW_KINDS)
            out = (rows, 1) if kind in ("sum", "max") else (rows, cols)
            yield [kernel_record("RowReduceK", [(rows, cols)], [dtype], out, dtype, (kind, ("x",), ("acc",), 1e-5))]


def cpu_timer(rec: dict) -> float:
    """Median seconds of the record's native call on this CPU (warm)."""
    attrs = tuplify(rec["attrs"])
    if not native.is_native(rec["op"], attrs, [tuple(s) for s in rec["in_shapes"]]):
        raise ValueError(f"{rec['op']}{attrs} is no native PyTorch call")
    gen = torch.Generator().manual_seed(0)
    tensors = [torch.randn(tuple(s), generator=gen).to(getattr(torch, d))
               for s, d in zip(rec["in_shapes"], rec["in_dtypes"])]
    fn = native.CALLS[rec["op"]]
    arity = {"GemmK": 2, "RowReduceK": 1}[rec["op"]]
    call = lambda: fn(*tensors[:arity], *attrs, tensors[arity:])  # noqa: E731
    with torch.no_grad():
        call()
        t0 = time.perf_counter()
        call()
        inner = max(1, int(1e-3 / max(time.perf_counter() - t0, 1e-7)))
        runs = []
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(inner):
                call()
            runs.append((time.perf_counter() - t0) / inner)
    return sorted(runs)[2]
