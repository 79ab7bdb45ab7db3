"""Profiling on the CPU: the torch backend's kernel nodes (the native PyTorch calls of ``ops/native.py``), timed
on this machine, in the records format GPU profiling writes.

A GEMM problem comes with its four operand layouts (each operand given as is or transposed: the choice the
layout rules offer, a candidate group), some batched as torch.matmul takes them; row reductions (softmax,
log_softmax, layer norm, sum, max) with one configuration each; scaled dot-product attention with keys in
both layouts, causal or not. Shapes are drawn log-uniformly within strata (small, medium, large) as on a GPU, scaled
for a CPU. A record is timed by calling the native function the plan would call: the median of five
timings, each of enough calls to last about a millisecond.
"""
from __future__ import annotations

import itertools
import math
import random
import time

import torch

from ..ops import native
from ..cost.dataset import digest, kernel_record, tuplify

STRATA = ((8, 128), (128, 512), (512, 1536))
DTYPES = ("float32",)
LAYOUTS = (("N", "N"), ("N", "T"), ("T", "N"), ("T", "T"))
ROW_KINDS = ("softmax", "log_softmax", "layer_norm", "sum", "max")
BIAS = ("bin", "add", ("acc",), ("in", 0))


def _dim(rng: random.Random, stratum: int) -> int:
    low, high = STRATA[stratum]
    return max(1, int(math.exp(rng.uniform(math.log(low), math.log(high)))))


def gemm_layouts(m: int, n: int, k: int, dtype: str, bias: bool, batch: tuple = ()) -> list[dict]:
    """One problem, out[*batch, m, n] = A[*batch, m, k] @ B[*batch, k, n] (+ a bias row, unbatched only), with
    each operand in both layouts: one candidate group and one shape (the split into training and held-out
    shapes keeps the group whole)."""
    problem = digest("GemmK", m, n, k, bias, *batch)
    group = []
    for la, lb in LAYOUTS:
        a = (*batch, k, m) if la == "T" else (*batch, m, k)
        b = (*batch, n, k) if lb == "T" else (*batch, k, n)
        extras = [(1, n)] if bias else []
        rec = kernel_record("GemmK", [a, b, *extras], [dtype] * (2 + len(extras)), (*batch, m, n), dtype,
                            (la, lb, (), 1, BIAS if bias else ("acc",)))
        group.append({**rec, "shape": problem, "group": digest(problem, dtype)})
    return group


def attention_layouts(batch: tuple, queries: int, keys: int, head: int, dtype: str, causal: bool) -> list[dict]:
    """One attention problem (q [*batch, queries, head]; causal only when square, as the torch backend calls
    it) with the keys given as [.., keys, head] and as [.., head, keys]: one candidate group."""
    problem = digest("AttentionK", *batch, queries, keys, head, causal)
    q, v = (*batch, queries, head), (*batch, keys, head)
    group = []
    for layout in ("N", "T"):
        k = (*batch, head, keys) if layout == "T" else v
        rec = kernel_record("AttentionK", [q, k, v], [dtype] * 3, q, dtype, (layout, head ** -0.5, int(causal)))
        group.append({**rec, "shape": problem, "group": digest(problem, dtype)})
    return group


def sweep_cpu(seed: int = 0):
    """An endless, reproducible stream of candidate groups of torch-backend kernel nodes."""
    rng = random.Random(seed)
    for i in itertools.count():
        dtype, stratum = DTYPES[i % len(DTYPES)], i % len(STRATA)
        draw = rng.random()
        if draw < 0.55:
            m, n, k = (_dim(rng, stratum if rng.random() < 0.6 else rng.randrange(len(STRATA))) for _ in range(3))
            yield gemm_layouts(m, n, k, dtype, bias=rng.random() < 0.3)
        elif draw < 0.65:  # batched products (attention scores, per-head projections): smaller matrices
            batch = tuple(rng.choice((1, 2, 4, 8, 16)) for _ in range(rng.randrange(1, 3)))
            m, n, k = (_dim(rng, min(stratum, 1)) for _ in range(3))
            yield gemm_layouts(m, n, k, dtype, bias=False, batch=batch)
        elif draw < 0.75:
            batch = (rng.choice((1, 2, 4)), rng.choice((1, 2, 4, 8, 12)))
            queries = _dim(rng, min(stratum, 1)) * 2
            causal = rng.random() < 0.5
            keys = queries if causal else _dim(rng, min(stratum, 1)) * 2
            yield attention_layouts(batch, queries, keys, rng.choice((16, 32, 64, 128)), dtype, causal)
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
    arity = {"GemmK": 2, "RowReduceK": 1, "AttentionK": 3}[rec["op"]]
    call = lambda: fn(*tensors[:arity], *attrs, tensors[arity:])  # noqa: E731
    with torch.no_grad():
        call()
        inner = max(1, int(1e-3 / max(min(_seconds(call, 1) for _ in range(3)), 1e-7)))
        runs = sorted(_seconds(call, inner) for _ in range(5))
    return runs[2]


def _seconds(call, repeats: int) -> float:
    """Seconds per call of ``repeats`` calls in a row. The calls per timing are sized on the fastest of three
    single calls: sized on one, a slow first call (the first touch of a large output: 0.55 ms against 0.1 ms
    after, for an elementwise op over [512, 1024]) made every timing a single call, open to preemption."""
    t0 = time.perf_counter()
    for _ in range(repeats):
        call()
    return (time.perf_counter() - t0) / repeats
