"""EqiForge's algebra with Inductor's code generation, on the CPU: eager, torch.compile, torch.compile with the
eqiforge backend, and eqiforge.optimize with its torch and inductor backends, side by side in one process
(the measurement of bench/run_cpu.py: interleaved, shuffled, fresh inputs per call, medians; ratios to
torch.compile are medians of per-round ratios, which cancel the machine's drift).

    python bench/inductor_cpu.py                          # the algebra suite -> bench/results/cpu_inductor.md
    python bench/inductor_cpu.py --suite kernelbench      # -> bench/results/cpu_inductor_kernelbench.md
    python bench/inductor_cpu.py --programs matmul_chain,encoder_layer --repeats 50
    python bench/inductor_cpu.py --variants eager,compile,compile_eqiforge   # a shorter run

Build times (torch.compile and Inductor compile on their first call) are excluded from the timings. The
yardstick of issue 13 is torch.compile: the eqiforge backend should be no slower than 1.05x of it anywhere.

    python bench/inductor_cpu.py --suite kernelbench --variants compile,optimize_predicted,optimize --cold

``--cold``: every program's variants start from empty Inductor and EqiForge caches (this CPU's calibration
kept): the first-call table then compares cold compiles only. Without it, a program whose graph an earlier
one compiled (gelu written out after gelu_tanh, nll_loss after cross_entropy) has torch.compile's first call
read from Inductor's cache, 0.1 s instead of 1 s.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import torch

import eqiforge
from eqiforge.cost.calibrate import cache_path, cpu_device
from eqiforge.decide.timing import HARD_LIMIT
from measure import TOLERANCE, provenance, rel_error, steady_allocator, time_round_robin
from run_cpu import SUITES, fresh

RESULTS = Path(__file__).resolve().parent / "results"
#: variant -> how it is built from (program, example inputs)
BUILDERS = {
    "eager": lambda program, example: program,
    "compile": lambda program, example: torch.compile(program),
    "compile_eqiforge": lambda program, example: torch.compile(program, backend="eqiforge"),
    "eqiforge": lambda program, example: eqiforge.optimize(program, example, backend="torch"),
    "eqiforge_inductor": lambda program, example: eqiforge.optimize(program, example, backend="inductor"),
    # the predicted choice, nothing timed and no disk cache read or written: the first-call cost of optimize()
    # without measured choice (built before "optimize", it leaves that one's caches as they were)
    "optimize_predicted": lambda program, example: eqiforge.optimize(program, example, measure="never",
                                                                     cache=False),
    "optimize": lambda program, example: eqiforge.optimize(program, example),  # defaults: the measured choice
}
TITLES = {"eager": "eager", "compile": "torch.compile", "compile_eqiforge": "compile (backend=eqiforge)",
          "eqiforge": "EqiForge (torch)", "eqiforge_inductor": "EqiForge (inductor)",
          "optimize": "eqiforge.optimize (defaults)", "optimize_predicted": "eqiforge.optimize (measure=never)"}


def build(program, example, names) -> tuple[dict, dict]:
    """The variants, each built and called once (what compiles at its first call compiles) and checked, and
    the seconds of each one's build and first call."""
    variants, first_call = {}, {}
    with torch.no_grad():
        ref = program(*example)
    for name in names:
        started = time.perf_counter()
        variants[name] = BUILDERS[name](program, example)
        with torch.no_grad():
            out = variants[name](*example)
        first_call[name] = time.perf_counter() - started
        err = rel_error(out, ref)
        if err > TOLERANCE:
            raise AssertionError(f"{name} differs from eager by {err:.2e}")
    return variants, first_call


def warm_up() -> None:
    """Compile and optimize a trivial function once, so the first program's first torch.compile and optimize()
    calls do not pay the process's one-time Dynamo, Inductor and EqiForge start-up alone (the first calls are
    compared across variants)."""
    x = torch.randn(8)
    torch.compile(lambda t: t * 2 + 1)(x)
    eqiforge.optimize(lambda t: t * 2 + 1, (x,), measure="never", cache=False)(x)


@contextlib.contextmanager
def cold_caches():
    """Empty Inductor and EqiForge caches for what runs inside (the EqiForge one holding only this CPU's
    calibration, which a machine measures once), both removed afterwards."""
    from torch._inductor.runtime.cache_dir_utils import temporary_cache_dir
    calibration = cache_path()
    saved = os.environ.get("EQIFORGE_CACHE_DIR")
    with tempfile.TemporaryDirectory() as inductor, tempfile.TemporaryDirectory() as ours:
        if calibration.exists():
            shutil.copy(calibration, Path(ours) / calibration.name)
        os.environ["EQIFORGE_CACHE_DIR"] = ours
        try:
            with temporary_cache_dir(inductor):
                yield
        finally:
            if saved is None:
                os.environ.pop("EQIFORGE_CACHE_DIR")
            else:
                os.environ["EQIFORGE_CACHE_DIR"] = saved


def _runs(opt) -> str:
    """What ``optimize()``'s module runs, for the table (its report's ``runs``, without the reason)."""
    return opt.report.runs.split(" (")[0]


def _paired(samples: dict, variant: str, base: str) -> float:
    """Median over rounds of ``variant``'s time over ``base``'s in the same round (the machine's drift cancels)."""
    return statistics.median(v / b for v, b in zip(samples[variant], samples[base]))


def _versus_faster(samples: dict, variant: str, *bases: str) -> float:
    """``variant``'s paired ratio (``_paired``) to the one of ``bases`` with the lowest median time."""
    return _paired(samples, variant, min(bases, key=lambda b: statistics.median(samples[b])))


def _stages(name: str, report) -> tuple[str, float, float, float]:
    """(program, its measure stage, its compile stage, the timing's budget) of ``optimize()``'s report."""
    budget = eqiforge.Options().measuring.seconds
    return name, report.stage_seconds.get("measure", 0.0), report.stage_seconds.get("compile", 0.0), budget


def _stage_table(stage_rows: list) -> list[str]:
    """The measuring stage of ``optimize()`` against its budget (timing.HARD_LIMIT its allowance), per program."""
    if not stage_rows:
        return []
    within = sum(m <= HARD_LIMIT * b for _, m, _, b in stage_rows)
    return ["", f"eqiforge.optimize's stages (defaults): the timing (`measure`) against its budget "
            f"(`measure_seconds`, at most {HARD_LIMIT}x it spent: docs/usage.md#measured-choice), and the Inductor "
            f"builds it started (`compile`, outside the budget), seconds; within {HARD_LIMIT}x the budget: "
            f"{within} of {len(stage_rows)}.", "",
            "| program | measure | compile | budget | measure / budget |", "|---|---|---|---|---|",
            *(f"| {n} | {m:.2f} | {c:.2f} | {b:.1f} | {m / b:.2f} |" for n, m, c, b in stage_rows)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--suite", choices=list(SUITES), default="algebra")
    p.add_argument("--programs", help="comma-separated names (default: the whole suite)")
    p.add_argument("--variants", default=",".join(BUILDERS), help=f"comma-separated, of {list(BUILDERS)}")
    p.add_argument("--repeats", type=int, default=100)
    p.add_argument("--out", help="the results file (default: bench/results/cpu_inductor[_SUITE].md)")
    p.add_argument("--cold", action="store_true",
                   help="each program's variants start from empty Inductor and EqiForge caches")
    args = p.parse_args()
    allocator = steady_allocator()
    suite = SUITES[args.suite][0]
    names = args.programs.split(",") if args.programs else list(suite)
    variants_run = [v for v in BUILDERS if v in args.variants.split(",")]
    if "compile" not in variants_run:
        raise SystemExit("--variants must include compile (the yardstick)")
    ratios = [v for v in variants_run if v not in ("eager", "compile")]
    versus_best = "optimize" in variants_run and "eager" in variants_run
    rows, first_rows, stage_rows = [], [], []
    warm_up()
    if args.cold:
        cpu_device()  # calibrated once, before the first program's caches (cold_caches keeps it)
    for name in names:
        program, example = suite[name].make()
        with cold_caches() if args.cold else contextlib.nullcontext():
            variants, first_call = build(program, example, variants_run)
        with torch.no_grad():
            samples = time_round_robin(variants, fresh(example, len(variants) + 1), args.repeats)
        ms = {v: statistics.median(samples[v]) * 1e3 for v in variants_run}
        rows.append(f"| {name} | {'yes' if suite[name].algebraic_win else 'no'} | "
                    + " | ".join(f"{ms[v]:.3f}" for v in variants_run)
                    + "".join(f" | {_paired(samples, v, 'compile'):.2f}" for v in ratios)
                    + (f" | {_versus_faster(samples, 'optimize', 'eager', 'compile'):.2f}" if versus_best else "")
                    + (f" | {_runs(variants['optimize'])}" if "optimize" in variants else "") + " |")
        first_rows.append(f"| {name} | " + " | ".join(f"{first_call[v]:.2f}" for v in variants_run) + " |")
        if "optimize" in variants:
            stage_rows.append(_stages(name, variants["optimize"].report))
        print(rows[-1], first_rows[-1], flush=True)
    out = Path(args.out) if args.out else \
        RESULTS / ("cpu_inductor.md" if args.suite == "algebra" else f"cpu_inductor_{args.suite}.md")
    command = " ".join(["python bench/inductor_cpu.py", *(f"--{k} {v}" for k, v in
                        (("suite", args.suite), ("programs", args.programs), ("variants", args.variants),
                         ("repeats", args.repeats)) if v)] + (["--cold"] if args.cold else []))
    head = [f"# EqiForge + Inductor on the CPU ({datetime.datetime.now(datetime.timezone.utc).isoformat()})", "",
            f"{torch.get_num_threads()} threads, torch {torch.__version__}, median of {args.repeats} interleaved "
            f"calls, ms; ratios: median of per-round time ratios; allocator: {allocator}. `{command}`.", "",
            "| program | algebra | " + " | ".join(TITLES[v] for v in variants_run)
            + "".join(f" | {TITLES[v]} / torch.compile" for v in ratios)
            + (" | eqiforge.optimize / the faster of eager and torch.compile" if versus_best else "")
            + (" | eqiforge.optimize runs" if "optimize" in variants_run else "") + " |",
            "|---" * (2 + len(variants_run) + len(ratios) + versus_best + ("optimize" in variants_run)) + "|"]
    first = ["", "First calls: seconds to build each variant and run its first call (compiles included; this process "
             "compiled a trivial function first, so no variant pays Dynamo's and Inductor's start-up alone).", "",
             "| program | " + " | ".join(TITLES[v] for v in variants_run) + " |",
             "|---" * (1 + len(variants_run)) + "|"]
    out.write_text("\n".join(head + rows + first + first_rows + _stage_table(stage_rows) + ["", provenance()]) + "\n")
    print(f"written {out}")


if __name__ == "__main__":
    main()
