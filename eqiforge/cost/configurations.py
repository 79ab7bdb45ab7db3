"""The price of a program as torch's configurations run it on a GPU: eager, compiled by Inductor, replayed
as a CUDA graph, and their combinations (the configurations KernelBench publishes times for).

Each price is kernels' device time plus host time, from the same figures as the program as written
(cost/as_written.py):

- **eager**: every call as written, each launched from Python (``launch_us`` a call), plus ``program_us``;
- **inductor** (and max-autotune without CUDA graphs): the calls fused as a compiler fuses them: library
  products, convolutions, attention and recurrent layers stay library calls; every other call joins the
  kernel of the fusible calls it reads from (views are free), and a fused kernel moves only what it reads
  from outside it and what is read outside it (``fuse``); each kernel costs ``compiled_call_us`` of host time,
  the program ``compiled_program_us`` (guards, the compiled wrapper);
- **cudagraphs**: the eager calls replayed as a CUDA graph: ``graph_call_us`` a kernel (the gap between
  kernels on the device), ``graph_program_us`` a program;
- **reduce-overhead** and **max-autotune**: the fused kernels replayed as a CUDA graph.

What it cannot express: Inductor's own kernels' quality (a fused kernel streams at the bandwidth of its
class), GEMM templates with fused epilogues under max-autotune, recompilation, and anything a graph break
leaves to eager.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from .. import ops
from .as_written import (
    ATTENTION,
    CONTRACTIONS,
    CONVOLUTIONS,
    RECURRENT,
    VIEWS,
    CallTerms,
    call_name,
    call_terms,
    priced,
    written_seconds,
)
from .devices import FIGURE_DEFAULTS, Device

#: host figures of compiled and graph-replayed programs (Device.figure names), their values where none were fitted
CONFIG_REFERENCE = {n: FIGURE_DEFAULTS[n] for n in ("compiled_call_us", "compiled_program_us", "graph_call_us",
                                                    "graph_program_us")}
FUSED = ("inductor", "max-autotune-no-cudagraphs", "reduce-overhead", "max-autotune")
GRAPHED = ("cudagraphs", "reduce-overhead", "max-autotune")
LIBRARY = CONTRACTIONS + CONVOLUTIONS + ATTENTION + RECURRENT


@dataclass(frozen=True)
class ConfigWork:
    """A program under a configuration, before host figures: its kernels and their device seconds."""

    kernels: int
    device_seconds: float


def config_work(calls, device: Device, config: str) -> ConfigWork:
    """Kernels and device time of ``calls`` run under ``config`` on ``device`` (its figures applied)."""
    terms = fuse(calls, device) if config in FUSED else [call_terms(c, device) for c in calls]
    device_time = sum(priced(_no_host(t), device) for t in terms)
    return ConfigWork(int(sum(t.calls for t in terms)), device_time)


def config_seconds(calls, device: Device, config: str) -> float:
    """Predicted seconds of one call of the program under ``config`` on ``device`` (its host figures)."""
    if config == "eager":
        return written_seconds(calls, device)
    work = config_work(calls, device, config)
    per_call, per_program = ("graph_call_us", "graph_program_us") if config in GRAPHED else (
        "compiled_call_us", "compiled_program_us")
    return (device.figure(per_program) + work.kernels * device.figure(per_call)) * 1e-6 + work.device_seconds


def _no_host(t: CallTerms) -> CallTerms:
    """A kernel's device time only (a recurrent layer's dependent steps stay: they wait on the device)."""
    return replace(t, calls=0, views=0)


def fuse(calls, device: Device) -> list[CallTerms]:
    """The kernels a compiler makes of ``calls``: library calls alone, fusible calls grouped along their
    data flow (through views), each group one kernel moving only its external traffic."""
    n = len(calls)
    names = [call_name(c) for c in calls]
    root = list(range(n))

    def find(i):
        while root[i] != i:
            root[i] = root[root[i]]
            i = root[i]
        return i

    def producer(i):  # the call whose data a call's result is (views see through to it)
        while i >= 0 and names[i] in VIEWS and calls[i].sources:
            i = calls[i].sources[0]
        return i

    fusible = [names[i] not in LIBRARY and names[i] not in VIEWS for i in range(n)]
    for i in range(n):
        if fusible[i]:
            for s in calls[i].sources:
                p = producer(s)
                if p >= 0 and fusible[p]:
                    root[find(p)] = find(i)
    readers: dict[int, set[int]] = {}  # a call -> the kernels (groups, or -1 - call) that read its result
    for i in range(n):
        if names[i] in VIEWS:  # transparent: its readers read its producer (producer() sees through it)
            continue
        for s in calls[i].sources:
            readers.setdefault(producer(s), set()).add(find(i) if fusible[i] else -1 - i)
    kernels = []
    groups: dict[int, list[int]] = {}
    for i in range(n):
        if names[i] in VIEWS:
            continue
        if not fusible[i]:
            kernels.append(call_terms(calls[i], device))
        else:
            groups.setdefault(find(i), []).append(i)
    for group, members in groups.items():
        kernels.append(_group_terms([calls[i] for i in members], members, group, find, producer, readers, device))
    return kernels


def _group_terms(members, indices, group, find, producer, readers, device) -> CallTerms:
    """One fused kernel: the members' compute, the bytes it reads from outside and writes for outside."""
    terms = [call_terms(c, device) for c in members]
    read, seen = 0.0, set()
    for call in members:
        for shape, dtype, s in zip(call.in_shapes, call.in_dtypes, call.sources):
            p = producer(s)
            if p >= 0 and find(p) == group:
                continue
            key = p if p >= 0 else None
            if key is not None and key in seen:
                continue
            seen.add(key)
            read += ops.numel(shape) * ops.dtype_size(dtype)
    written = sum(ops.numel(shape) * ops.dtype_size(dtype)
                  for i, call in zip(indices, members) for shape, dtype in zip(call.out_shapes, call.out_dtypes)
                  if readers.get(i, set()) - {group} or i not in readers)
    klass = "reduction" if any(t.memory_class == "reduction" for t in terms) else terms[0].memory_class
    return CallTerms(1, 0, 0, sum(t.compute for t in terms), "vector", (), read + written, klass, 0)


def fit_config_figures(works: list[tuple[str, ConfigWork]], measured: list[float], reference: dict | None = None,
                       weight: float = 1.0) -> dict:
    """Host figures of compiled and graph-replayed programs fitted to measured seconds: per family, a
    per-kernel and a per-program cost (least squares in log units, held towards ``reference`` by ``weight``;
    CONFIG_REFERENCE by default)."""
    from scipy.optimize import least_squares
    names = list(CONFIG_REFERENCE)
    base = np.log([(reference or CONFIG_REFERENCE)[n] for n in names])
    graphed = np.array([c in GRAPHED for c, _ in works])
    kernels = np.array([w.kernels for _, w in works], dtype=float)
    device = np.array([w.device_seconds for _, w in works])
    target = np.log(measured)

    def residuals(w):
        f = np.exp(base + w)
        per_call = np.where(graphed, f[2], f[0])
        per_program = np.where(graphed, f[3], f[1])
        return np.concatenate([np.log((per_program + kernels * per_call) * 1e-6 + device) - target, weight * w])

    w = least_squares(residuals, np.zeros(len(names))).x
    return {n: float(v) for n, v in zip(names, np.exp(base + w))}
