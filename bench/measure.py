"""How the benchmarks measure: output error against eager, fresh inputs, EqiForge's own timing loop.

Every variant of a program is timed by the same loop (``time_round_robin``, which is
``eqiforge.decide.timing.time_candidates``: the loop EqiForge's measured choice decides by) so that no variant gets
a different harness. Variants are interleaved per repeat, in a shuffled order, so slow drift of the machine
(frequency, other tenants) and the state left by the previous call hit all of them alike; calls rotate
over several fresh input sets so that no call is timed on data left hot in cache by the call before it.
``steady_allocator`` keeps page faults out of the timings, and ``OtherLoad`` says how busy the machine was
with other work meanwhile.
"""
from __future__ import annotations

import ctypes
import datetime
import itertools
import math
import subprocess
import sys
from pathlib import Path
from typing import Callable

import torch
import torch.utils._pytree as pytree

from eqiforge.cost.calibrate import cpu_model
from eqiforge.decide.load import OtherLoad  # noqa: F401 - the benchmarks' load probe
from eqiforge.decide.timing import time_candidates

TOLERANCE = 1e-4  # largest relative error accepted for fp32 (rewrites change rounding, not results)
BUSY_CORES = 0.25  # other processes' load above which a timing is retried, then flagged


def rel_error(out, ref) -> float:
    """Largest |out - ref| over the largest |ref|, over every tensor of the two output structures."""
    outs, refs = pytree.tree_leaves(out), pytree.tree_leaves(ref)
    if len(outs) != len(refs):
        return float("inf")
    worst = 0.0
    for o, r in zip(outs, refs):
        if o.shape != r.shape:
            return float("inf")
        scale = r.abs().max().item() if r.numel() else 0.0
        diff = (o - r).abs().max().item() if r.numel() else 0.0
        worst = max(worst, diff / max(scale, 1e-30))
    return worst


def steady_allocator() -> str:
    """Make glibc keep freed memory (no per-allocation mmap, no trimming); returns what was set.

    By default glibc hands large blocks back to the OS and the next allocation page-faults them in again,
    at a cost comparable to a memory-bound op, and whether it happens depends on what the previously timed
    variant freed. Keeping memory makes timings measure compute and memory traffic (as jemalloc or
    tcmalloc would in a deployment) and makes them independent of the order of variants.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return "default (not glibc)"
    m_trim_threshold, m_mmap_threshold = -1, -3  # from <malloc.h>
    if libc.mallopt(m_mmap_threshold, 1 << 30) and libc.mallopt(m_trim_threshold, 2**31 - 1):
        return "glibc: mmap threshold 1 GiB, no trimming"
    return "default (mallopt failed)"


def fresh_inputs(example: tuple[torch.Tensor, ...], sets: int, seed: int = 1) -> list[tuple[torch.Tensor, ...]]:
    """``sets`` input tuples shaped like ``example``, standard normal (what the programs expect)."""
    gen = torch.Generator().manual_seed(seed)
    return [tuple(torch.randn(t.shape, dtype=t.dtype, generator=gen) for t in example) for _ in range(sets)]


def time_round_robin(variants: dict[str, Callable], input_sets: list[tuple], repeats: int,
                     warmup: int = 3, seed: int = 0, calls: int = 1) -> dict[str, list[float]]:
    """Seconds of every visit, per variant, ``repeats`` rounds after ``warmup`` untimed ones, under no_grad:
    EqiForge's own timing loop (``eqiforge.decide.timing.time_candidates``, the one its measured choice decides by),
    so what the benchmarks measure and what EqiForge decides agree. Each round visits the variants in a
    shuffled (seeded) order; a visit is an untimed call followed at once by ``calls`` timed ones (their
    median): a call is slowed or sped up by what ran just before it (a large matmul leaves caches and threads
    in a different state than a small one, ~0.1 ms here; an eager RMSNorm timed after another variant's call
    took 0.30 ms, after its own 0.17 ms), so each variant is timed on the state it leaves itself. Calls take
    the input sets in turn, so no call reads inputs that the call before it left in cache. A variant that
    raises is an error here (a benchmark's variants were checked before timing)."""
    turn = itertools.cycle(input_sets)  # shared by the variants: every call takes the next set
    visits = {name: (lambda f=f: f(*next(turn))) for name, f in variants.items()}
    with torch.no_grad():
        for _ in range(warmup):
            for visit in visits.values():
                visit()
        timings = time_candidates(visits, math.inf, seed=seed, min_rounds=repeats, max_rounds=repeats, calls=calls)
    if timings.failed:
        raise RuntimeError(f"variants failed while timed: {timings.failed}")
    return timings.seconds


def write_results(out: Path, lines: list[str]) -> None:
    """Write a benchmark's result page (``lines``, then the command that ran it and where and when it ran:
    ``provenance()``) to ``out``, and print it."""
    command = " ".join(["python", f"bench/{Path(sys.argv[0]).name}", *sys.argv[1:]])
    text = "\n".join([*lines, f"`{command}`", "", provenance(), ""])
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(text)


def provenance() -> str:
    """One line saying when, at which commit, on which processor and with which torch a result was measured."""
    when = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    return (f"Measured {when} at commit {_commit()} on {cpu_model()}, torch {torch.__version__}, "
            f"{torch.get_num_threads()} threads.")


def _commit() -> str:
    """The checkout's short commit, "+dirty" where tracked files changed; "unknown" outside a git checkout."""
    root = Path(__file__).resolve().parent.parent

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=30,
                              check=True).stdout.strip()
    try:
        commit = git("rev-parse", "--short", "HEAD")
        changed = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{commit}+dirty" if changed else commit
