"""Does optimize()'s choice hold in every process? A program optimized with the defaults in several fresh
processes (each with empty EqiForge and Inductor caches, this CPU's calibration kept), each then timing eager,
torch.compile and the optimized module side by side (``measure.time_round_robin``, fresh inputs in turn).

    python bench/fresh_processes.py --processes 3 --rounds 60

writes bench/results/fresh_processes.md: per program and process, what runs and its time over the faster of
eager and torch.compile (the median of per-round ratios). The programs are the two of issue 44: a causal
attention written out, and an RMSNorm at KernelBench level 1 #36's shape scaled to a CPU.

    python bench/fresh_processes.py --under-load --rounds 60

writes bench/results/decision_under_load.md: three processes per program sharing one cache, the first
optimizing while busy processes (one per core) run beside it, which stop before its timing; the report says
whether the choice was provisional (not cached), and the next processes, on a quiet machine, measure again
and then read the decision back.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import torch

from decision_noise import causal_attention, rms_norm
from measure import fresh_inputs, steady_allocator, time_round_robin, write_results

RESULTS = Path(__file__).parent / "results" / "fresh_processes.md"
UNDER_LOAD = Path(__file__).parent / "results" / "decision_under_load.md"


PROGRAMS = {
    "causal attention [2, 4, 128, 64]": (causal_attention, lambda: tuple(torch.randn(2, 4, 128, 64) for _ in range(3))),
    "RMSNorm [14, 64, 64, 64]": (rms_norm, lambda: (torch.randn(14, 64, 64, 64), torch.randn(64))),
}


def one_process(name: str, rounds: int, busy: int = 0) -> dict:
    """In this process: optimize ``name`` with the defaults (``busy`` processes spinning beside it meanwhile),
    then time the three side by side."""
    import eqiforge
    warnings.simplefilter("ignore")
    steady_allocator()
    fn, make = PROGRAMS[name]
    torch.manual_seed(0)
    example = make()
    with torch.no_grad():
        spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
        try:
            opt = eqiforge.optimize(fn, example)
        finally:
            for spinner in spinners:
                spinner.kill()
                spinner.wait()
        compiled = torch.compile(fn)
        compiled(*example)
        seconds = time_round_robin({"eager": fn, "torch.compile": compiled, "eqiforge": opt},
                                   fresh_inputs(example, 4), repeats=rounds, seed=1)
    best = [min(e, c) for e, c in zip(seconds["eager"], seconds["torch.compile"])]
    return {"runs": opt.report.runs.split(" (")[0], "provisional": opt.report.provisional,
            "cached": opt.report.from_cache,
            "ms": {k: statistics.median(v) * 1e3 for k, v in seconds.items()},
            "over_best": statistics.median(o / b for o, b in zip(seconds["eqiforge"], best))}


def in_fresh_process(name: str, rounds: int, busy_list: tuple[int, ...] = (0,)) -> list[dict]:
    """``one_process`` in new interpreters sharing caches that start empty (the CPU calibration copied in),
    one per entry of ``busy_list`` (the busy processes beside its optimization)."""
    from eqiforge.cost.calibrate import cache_path
    root = tempfile.mkdtemp(prefix="eqiforge-fresh-")
    try:
        calibration = cache_path()
        if calibration.exists():
            (Path(root) / "eqiforge").mkdir()
            shutil.copy(calibration, Path(root) / "eqiforge" / calibration.name)
        env = {**os.environ, "EQIFORGE_CACHE_DIR": str(Path(root) / "eqiforge"),
               "TORCHINDUCTOR_CACHE_DIR": str(Path(root) / "inductor")}
        results = []
        for busy in busy_list:
            out = subprocess.run([sys.executable, __file__, "--one", name, "--rounds", str(rounds), "--busy",
                                  str(busy)], env=env, check=True, capture_output=True, text=True).stdout
            results.append(json.loads(out.strip().splitlines()[-1]))
        return results
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--under-load", action="store_true",
                        help="a loaded process, then quiet ones sharing its cache (decision_under_load.md)")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # the child: one program, printed as JSON
    parser.add_argument("--busy", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one_process(args.one, args.rounds, args.busy)))
        return
    if args.under_load:
        under_load(args.rounds)
        return
    rows = []
    for name in PROGRAMS:
        for i in range(args.processes):
            [r] = in_fresh_process(name, args.rounds)
            ms = r["ms"]
            rows.append(f"| {name} | {i + 1} | {ms['eager']:.3f} | {ms['torch.compile']:.3f} | {ms['eqiforge']:.3f} "
                        f"| {r['over_best']:.2f} | {r['runs']} |")
    write_results(RESULTS, [
        f"# optimize() in fresh processes (CPU, {torch.get_num_threads()} threads)", "",
        f"Each row a new process with empty EqiForge and Inductor caches; ms are medians of {args.rounds} rounds "
        "(eager, torch.compile and the optimized module in a random order per round, fresh inputs in turn); "
        "`/ best` is the median over rounds of the module's time over the faster of eager and torch.compile.", "",
        "| program | process | eager ms | torch.compile ms | eqiforge ms | / best | runs |",
        "|---|---:|---:|---:|---:|---:|---|", *rows, ""])


def under_load(rounds: int) -> None:
    """Per program: a process optimizing beside one busy process per core, then two quiet ones, one cache."""
    busy, rows = os.cpu_count() or 1, []
    for name in PROGRAMS:
        for i, r in enumerate(in_fresh_process(name, rounds, (busy, 0, 0))):
            rows.append(f"| {name} | {i + 1} | {busy if i == 0 else 0} | {'yes' if r['provisional'] else 'no'} | "
                        f"{'yes' if r['cached'] else 'no'} | {r['ms']['eqiforge']:.3f} | {r['over_best']:.2f} | "
                        f"{r['runs']} |")
    write_results(UNDER_LOAD, [
        f"# optimize() under load, then on a quiet machine (CPU, {torch.get_num_threads()} threads)", "",
        "Per program three processes sharing one EqiForge and Inductor cache (empty at the start); the first "
        "optimizes while busy processes spin beside it (stopped before its timing). `provisional`: the report "
        "says the choice was timed on a busy machine (not cached); `from cache`: the decision was read back. "
        f"ms are medians of {rounds} rounds; `/ best` is the median of per-round ratios to the faster of eager "
        "and torch.compile, all timed after the load ended.", "",
        "| program | process | busy processes while optimizing | provisional | from cache | eqiforge ms | / best "
        "| runs |", "|---|---:|---:|---|---|---:|---:|---|", *rows, ""])


if __name__ == "__main__":
    main()
