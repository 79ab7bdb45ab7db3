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
"""
from __future__ import annotations

import argparse
import datetime
import statistics
from pathlib import Path

import torch

import eqiforge
from measure import TOLERANCE, rel_error, steady_allocator, time_round_robin
from run_cpu import SUITES, fresh

RESULTS = Path(__file__).resolve().parent / "results"
#: variant -> how it is built from (program, example inputs)
BUILDERS = {
    "eager": lambda program, example: program,
    "compile": lambda program, example: torch.compile(program),
    "compile_eqiforge": lambda program, example: torch.compile(program, backend="eqiforge"),
    "eqiforge": lambda program, example: eqiforge.optimize(program, example, backend="torch"),
    "eqiforge_inductor": lambda program, example: eqiforge.optimize(program, example, backend="inductor"),
}
TITLES = {"eager": "eager", "compile": "torch.compile", "compile_eqiforge": "compile (backend=eqiforge)",
          "eqiforge": "EqiForge (torch)", "eqiforge_inductor": "EqiForge (inductor)"}


def build(program, example, names) -> dict:
    variants = {name: BUILDERS[name](program, example) for name in names}
    with torch.no_grad():
        ref = program(*example)
        for name, fn in variants.items():  # compiles what compiles at its first call, and checks it
            err = rel_error(fn(*example), ref)
            if err > TOLERANCE:
                raise AssertionError(f"{name} differs from eager by {err:.2e}")
    return variants


def _paired(samples: dict, variant: str, base: str) -> float:
    """Median over rounds of ``variant``'s time over ``base``'s in the same round (the machine's drift cancels)."""
    return statistics.median(v / b for v, b in zip(samples[variant], samples[base]))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--suite", choices=list(SUITES), default="algebra")
    p.add_argument("--programs", help="comma-separated names (default: the whole suite)")
    p.add_argument("--variants", default=",".join(BUILDERS), help=f"comma-separated, of {list(BUILDERS)}")
    p.add_argument("--repeats", type=int, default=100)
    args = p.parse_args()
    allocator = steady_allocator()
    suite = SUITES[args.suite][0]
    names = args.programs.split(",") if args.programs else list(suite)
    variants_run = [v for v in BUILDERS if v in args.variants.split(",")]
    if "compile" not in variants_run:
        raise SystemExit("--variants must include compile (the yardstick)")
    ratios = [v for v in variants_run if v not in ("eager", "compile")]
    rows = []
    for name in names:
        program, example = suite[name].make()
        variants = build(program, example, variants_run)
        with torch.no_grad():
            samples = time_round_robin(variants, fresh(example, len(variants) + 1), args.repeats)
        ms = {v: statistics.median(samples[v]) * 1e3 for v in variants_run}
        rows.append(f"| {name} | {'yes' if suite[name].algebraic_win else 'no'} | "
                    + " | ".join(f"{ms[v]:.3f}" for v in variants_run)
                    + "".join(f" | {_paired(samples, v, 'compile'):.2f}" for v in ratios) + " |")
        print(rows[-1], flush=True)
    out = RESULTS / ("cpu_inductor.md" if args.suite == "algebra" else f"cpu_inductor_{args.suite}.md")
    command = " ".join(["python bench/inductor_cpu.py", *(f"--{k} {v}" for k, v in
                        (("suite", args.suite), ("programs", args.programs), ("variants", args.variants),
                         ("repeats", args.repeats)) if v)])
    head = [f"# EqiForge + Inductor on the CPU ({datetime.datetime.now(datetime.timezone.utc).isoformat()})", "",
            f"{torch.get_num_threads()} threads, torch {torch.__version__}, median of {args.repeats} interleaved "
            f"calls, ms; ratios: median of per-round time ratios; allocator: {allocator}. `{command}`.", "",
            "| program | algebra | " + " | ".join(TITLES[v] for v in variants_run)
            + "".join(f" | {TITLES[v]} / torch.compile" for v in ratios) + " |",
            "|---" * (2 + len(variants_run) + len(ratios)) + "|"]
    out.write_text("\n".join(head + rows) + "\n")
    print(f"written {out}")


if __name__ == "__main__":
    main()
