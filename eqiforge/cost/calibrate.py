"""The CPU as a cost-model device, calibrated on the machine the plan runs on.

A GPU's figures come from its datasheet (devices.py); a CPU's depend on the part, its threads and the
library build, so they are measured: matmul FLOP/s per dtype, elementwise FLOP/s, memory bandwidth, and the
host cost of one PyTorch call and of one view. Measuring takes a few seconds; the result is cached per
machine (CPU model, threads, torch version) under ``EQIFORGE_CACHE_DIR`` (default ``~/.cache/eqiforge``),
and ``eqiforge cost calibrate`` measures again.
"""
from __future__ import annotations

import hashlib
import json
import platform
import time
from contextlib import contextmanager
from pathlib import Path

import torch
from torch._dispatch.python import no_python_dispatcher
from torch._subclasses.fake_tensor import unset_fake_temporarily
from torch.utils._python_dispatch import _disable_current_modes

from ..paths import cache_dir
from .devices import Device

#: the dtypes whose matmul rate is measured; others are priced at float32's
MATMUL_DTYPES = ("float32", "float64", "bfloat16")
VERSION = 3  # of the measurements: a change invalidates the cache (3: measured outside torch.compile's dispatch)


def machine_key() -> dict:
    """What the figures depend on: the CPU, the threads PyTorch uses, the library versions."""
    return {"cpu": cpu_model(), "machine": platform.machine(), "threads": torch.get_num_threads(),
            "torch": torch.__version__, "version": VERSION}


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def cache_path() -> Path:
    digest = hashlib.sha1(json.dumps(machine_key(), sort_keys=True).encode()).hexdigest()[:12]
    return cache_dir() / f"cpu-{digest}.json"


_LOADED: dict[Path, Device] = {}  # cache file -> its device, read once per process


def cpu_device(remeasure: bool = False) -> Device:
    """This machine's CPU as a Device: from the cache, or measured (and cached) when absent or asked."""
    path = cache_path()
    if not remeasure and path in _LOADED:
        return _LOADED[path]
    if not remeasure and path.exists():
        try:
            _LOADED[path] = _device(json.loads(path.read_text())["figures"])
            return _LOADED[path]
        except (ValueError, KeyError, TypeError):
            pass  # a damaged cache file is measured again
    figures = measure()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"machine": machine_key(), "figures": figures}, indent=2) + "\n")
    tmp.replace(path)
    _LOADED[path] = _device(figures)
    return _LOADED[path]


def _device(figures: dict) -> Device:
    return Device("cpu", figures["threads"], {d: figures[f"matmul_tflops_{d}"] for d in MATMUL_DTYPES},
                  figures["vector_tflops"], figures["mem_bw_gbs"], smem_per_sm_kib=0,
                  launch_us=figures["call_us"], view_us=figures["view_us"], unfused=unfused_on_cpu())


def unfused_on_cpu() -> tuple[str, ...]:
    """Norms this PyTorch build has no fused CPU kernel for (it composes them from five ATen ops), as the
    dispatcher says: ``F.rms_norm`` on a CPU is no faster than the ops written out."""
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    return () if has("aten::_fused_rms_norm", "CPU") else ("rms_norm",)


def _best_seconds(fn, repeats: int = 5, inner: int = 1) -> float:
    """The fastest of ``repeats`` timings of ``inner`` calls, per call: the least disturbed run, so that a
    busy machine (another job on the same cores) disturbs the figures as little as it can."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        best = min(best, (time.perf_counter() - t0) / inner)
    return best


def measure() -> dict:
    """Measure this CPU's figures (about two seconds). Rates are measured on one thread and scaled by the
    threads PyTorch uses: a multi-threaded timing on a machine with another busy job measured 15x apart
    run to run (its threads wait for each other at every barrier), a one-thread timing stays within a few
    percent. Bandwidth is one thread's (a few cores rarely draw more) and not scaled."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with plain_dispatch():
            figures = _measure_one_thread()
    finally:
        torch.set_num_threads(threads)
    figures["threads"] = threads
    for key in [k for k in figures if "tflops" in k]:
        figures[key] *= threads
    return figures


@contextmanager
def plain_dispatch():
    """PyTorch calls as a program makes them: no fake tensors, dispatch modes or Python dispatcher. A plan is
    often first priced inside torch.compile's backend, where AOTAutograd has the Python dispatcher on: every
    call there cost ~10x (a call 10.8 us, a view 25.6 us, against 3.9 and 2.6 us), and a calibration taken
    there was cached for the machine."""
    with unset_fake_temporarily(), no_python_dispatcher(), _disable_current_modes():
        yield


def _measure_one_thread() -> dict:
    gen = torch.Generator().manual_seed(0)
    figures = {}
    n = 256
    for dtype in MATMUL_DTYPES:
        a, b = (torch.randn(n, n, generator=gen).to(getattr(torch, dtype)) for _ in range(2))
        figures[f"matmul_tflops_{dtype}"] = 2.0 * n ** 3 / _best_seconds(lambda: torch.mm(a, b), 10) / 1e12
    big = torch.randn(16 * 2 ** 20, generator=gen)  # 64 MiB: past the caches
    out = torch.empty_like(big)
    figures["mem_bw_gbs"] = 2 * big.nbytes / _best_seconds(lambda: torch.add(big, 1.0, out=out), 5) / 1e9
    small = torch.randn(64 * 1024, generator=gen)  # 256 KiB: in cache, so the arithmetic is what is timed
    result = torch.empty_like(small)  # (a fresh 256 KiB result can cost more in page faults than the math)
    figures["vector_tflops"] = small.numel() * 8.0 / _best_seconds(lambda: torch.exp(small, out=result), 5,
                                                                  20) / 1e12
    one = torch.randn(8, generator=gen)
    figures["call_us"] = _best_seconds(lambda: torch.add(one, one), 5, 2000) * 1e6
    figures["view_us"] = _best_seconds(lambda: one.view(2, 4), 5, 2000) * 1e6
    return figures
