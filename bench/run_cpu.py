"""CPU benchmark: eager, torch.compile, the hand rewrite and EqiForge, side by side in one process.

    python bench/run_cpu.py                      # the algebra suite -> bench/results/cpu.json and cpu.md
    python bench/run_cpu.py --suite kernelbench  # the KernelBench-style suite -> cpu_kernelbench.json/.md
    python bench/run_cpu.py --suite twins        # algebra programs and their hand twins -> cpu_twins.json/.md
    python bench/run_cpu.py --suite families     # algebra families, several spellings -> cpu_families.json/.md
    python bench/run_cpu.py --suite all          # every suite, each to its own files
    python bench/run_cpu.py --quick              # CI smoke: few repeats
    python bench/run_cpu.py --programs matmul_chain,low_rank --repeats 300 --out /tmp/bench

On a CPU EqiForge runs its torch backend (the chosen plan as PyTorch ops), so these numbers show what the
algebra buys, not kernel quality. Compile and optimize times are excluded from the timings and recorded.
A fifth, diagnostic variant times EqiForge's lowered plan without its drop-in wrapper, which separates
the wrapper's per-call cost from the plan's.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path

import torch

import eqiforge
import families
import kernelbench_style
import twins
from measure import (BUSY_CORES, TOLERANCE, OtherLoad, fresh_inputs, provenance, rel_error, steady_allocator,
                     time_round_robin)
from programs import PROGRAMS, Program
from summary import markdown

#: suite name -> (its programs, the stem of its result files in --out)
SUITES: dict[str, tuple[dict[str, Program], str]] = {
    "algebra": (PROGRAMS, "cpu"),
    "kernelbench": (kernelbench_style.SUITE, "cpu_kernelbench"),
    "twins": (twins.SUITE, "cpu_twins"),
    "families": (families.SUITE, "cpu_families"),
}

# eqiforge_plan is a diagnostic: the lowered plan called without the drop-in wrapper (its per-call checks)
VARIANTS = ("eager", "compile", "hand", "eqiforge", "eqiforge_plan")


def _error(err: BaseException) -> str:
    """The exception's type and first line, for the JSON (the traceback goes to stderr)."""
    first = str(err).strip().splitlines()[:1]
    return f"{type(err).__name__}: {first[0][:300] if first else ''}"


def _build_compile(program, example, _backend: str) -> tuple:
    """torch.compile (inductor); the first call compiles, under no_grad like the timed calls."""
    compiled = torch.compile(program)
    with torch.no_grad():
        compiled(*example)
    return compiled, {}


def _build_eqiforge(program, example, backend: str) -> tuple:
    """EqiForge with ``backend`` (torch: the plan's quality as PyTorch calls; auto: what ``optimize()`` does by
    default, the plan under Inductor among the measured candidates) and every rule set; what its report says
    rides along."""
    opt = eqiforge.optimize(program, example, backend=backend)
    r = opt.report
    return opt, {"stage_seconds": r.stage_seconds, "predicted_before_s": r.predicted_before,
                 "predicted_after_s": r.predicted_after, "enodes": r.enodes, "eclasses": r.eclasses,
                 "iterations": r.iterations, "stop_reason": r.stop_reason, "ops_before": r.ops_before,
                 "ops_after": r.ops_after, "runs": r.runs, "validation": r.validation, "plan": str(opt.plan)}


BUILDERS = {"compile": _build_compile, "eqiforge": _build_eqiforge}
RETRY_PAUSE_S = 3.0  # between timing attempts on a busy machine


def fresh(example: tuple[torch.Tensor, ...], sets: int) -> list[tuple[torch.Tensor, ...]]:
    """Fresh input sets shaped like ``example``: standard normal (``measure.fresh_inputs``), except integer
    tensors, which are class labels and are drawn in [0, the largest label of the example]."""
    if all(t.is_floating_point() for t in example):
        return fresh_inputs(example, sets)
    gen = torch.Generator().manual_seed(1)
    return [tuple(torch.randn(t.shape, dtype=t.dtype, generator=gen) if t.is_floating_point()
                  else torch.randint(0, int(t.max()) + 1, t.shape, dtype=t.dtype, generator=gen) for t in example)
            for _ in range(sets)]


def quietest_timing(variants: dict, example: tuple, repeats: int, attempts: int) -> tuple[dict, float | None]:
    """Time the variants; while other processes keep the machine busy, wait and retry (up to ``attempts``
    runs in all) and keep the run they disturbed least. Returns (samples, other load in cores)."""
    best = None
    for attempt in range(attempts):
        if attempt:
            time.sleep(RETRY_PAUSE_S)
        with OtherLoad() as load:
            samples = time_round_robin(variants, fresh(example, len(variants) + 1), repeats)
        if best is None or (load.cores is not None and load.cores < best[1]):
            best = (samples, load.cores)
        if load.cores is None or load.cores <= BUSY_CORES:
            break
    return best


def bench_program(p: Program, repeats: int, attempts: int, backend: str = "torch") -> dict:
    """Build every variant, check it against eager on the example inputs, then time them together."""
    program, example = p.make()
    variants = {"eager": program, "hand": p.hand(program)}
    row = {"algebraic_win": p.algebraic_win, "doc": p.doc, "build_seconds": {}, "info": {}, "errors": {}}
    for name, build in BUILDERS.items():
        t0 = time.perf_counter()
        try:
            variants[name], row["info"][name] = build(program, example, backend)
        except Exception as err:  # a variant that cannot be built is reported, not fatal
            row["errors"][name] = _error(err)
            traceback.print_exc()
        row["build_seconds"][name] = time.perf_counter() - t0
    if "eqiforge" in variants:
        variants["eqiforge_plan"] = variants["eqiforge"].runner.forward
    row["rel_error"] = {}
    with torch.no_grad():
        ref = program(*example)
        for name, fn in list(variants.items()):
            try:
                row["rel_error"][name] = rel_error(fn(*example), ref)
            except Exception as err:  # built but cannot run: reported, not timed
                row["errors"][name] = _error(err)
                del variants[name]
    row["correct"] = {name: err <= TOLERANCE for name, err in row["rel_error"].items()}
    samples, row["other_load_cores"] = quietest_timing({v: variants[v] for v in VARIANTS if v in variants},
                                                       example, repeats, attempts)
    row["median_ms"] = {v: statistics.median(samples[v]) * 1e3 if v in samples else None for v in VARIANTS}
    row["min_ms"] = {v: min(samples[v]) * 1e3 if v in samples else None for v in VARIANTS}
    row["ratios"] = {f"{a}/{b}": paired_ratio(samples, a, b)
                     for a, b in [("eqiforge", "hand"), ("eqiforge", "eager"), ("compile", "eager"),
                                  ("hand", "eager"), ("eqiforge_plan", "hand"), ("eqiforge_plan", "eager")]}
    return row


def paired_ratio(samples: dict[str, list[float]], a: str, b: str) -> float | None:
    """The median over rounds of a's time over b's in the same round (None when either was not timed): a
    ratio of two medians lets a slow stretch of rounds weigh on one side only."""
    if not samples.get(a) or not samples.get(b):
        return None
    return statistics.median(x / y for x, y in zip(samples[a], samples[b]))


def machine_info(threads: int, repeats: int) -> dict:
    return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "cpu_count": os.cpu_count(), "cpus_usable": len(os.sched_getaffinity(0)),
            "cpu": _cpu_model(), "platform": platform.platform(), "python": platform.python_version(),
            "torch": torch.__version__, "eqiforge": _source_version(), "threads": threads, "repeats": repeats,
            "tolerance": TOLERANCE, "paired_ratios": True,
            "timing": "median of per-call time.perf_counter under torch.no_grad; variants interleaved per repeat in "
                      "shuffled order; calls rotate over fresh input sets"}


def _source_version() -> str:
    """The commit benchmarked, '+dirty' when files outside bench/ differ from it (results follow the code)."""
    root = Path(__file__).resolve().parent.parent
    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", ".", ":!bench"], cwd=root,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return sha + ("+dirty" if dirty else "")


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor()


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--suite", choices=[*SUITES, "all"], default="algebra",
                    help="algebra: programs.py (-> cpu.json/.md); kernelbench: kernelbench_style.py "
                         "(-> cpu_kernelbench.json/.md); twins: twins.py (-> cpu_twins.json/.md); families: "
                         "families.py (-> cpu_families.json/.md); all: every suite, each to its own files "
                         "(default algebra)")
    ap.add_argument("--repeats", type=int, default=None, help="timed calls per variant (default 100, quick 5)")
    ap.add_argument("--programs", default=None, help="comma-separated subset of the suite's programs")
    ap.add_argument("--quick", action="store_true", help="few repeats and no retries, for a CI smoke run")
    ap.add_argument("--attempts", type=int, default=None, help=f"timing runs per program while other processes "
                    f"use > {BUSY_CORES} cores; the least disturbed is kept (default 5, quick 1)")
    ap.add_argument("--backend", default="torch", choices=["torch", "auto"],
                    help="EqiForge's backend (default torch: the plan as PyTorch calls; auto: optimize()'s default)")
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)), help="torch.set_num_threads")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"),
                    help="folder for the result files (cpu.json/.md, cpu_kernelbench.json/.md)")
    args = ap.parse_args(argv)
    args.repeats = args.repeats or (5 if args.quick else 100)
    args.attempts = args.attempts or (1 if args.quick else 5)
    args.suites = list(SUITES) if args.suite == "all" else [args.suite]
    known = [name for suite in args.suites for name in SUITES[suite][0]]
    args.programs = args.programs.split(",") if args.programs else known
    unknown = [n for n in args.programs if n not in known]
    if unknown:
        ap.error(f"unknown program(s) {unknown} in suite {args.suite}; known: {known}")
    return args


def run_suite(suite: str, args) -> dict:
    """Benchmark the suite's programs named in ``args.programs``; the results as written to JSON."""
    programs = SUITES[suite][0]
    machine = {**machine_info(args.threads, args.repeats), "allocator": steady_allocator(),
               "eqiforge_backend": args.backend}
    results = {"suite": suite, "machine": machine, "programs": {}}
    for name in [n for n in args.programs if n in programs]:
        print(f"[bench] {suite}/{name} ...", file=sys.stderr, flush=True)
        results["programs"][name] = bench_program(programs[name], args.repeats, args.attempts, args.backend)
    return results


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for suite in args.suites:
        results = run_suite(suite, args)
        if not results["programs"]:
            continue  # --programs named none of this suite's programs
        stem = SUITES[suite][1]
        (out / f"{stem}.json").write_text(json.dumps(results, indent=1) + "\n")
        table = markdown(results)
        (out / f"{stem}.md").write_text(table.rstrip("\n") + "\n\n" + provenance() + "\n")
        print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
