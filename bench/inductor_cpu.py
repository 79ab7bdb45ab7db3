"""EqiForge's algebra with Inductor's code generation, on the CPU: eager, torch.compile, EqiForge (torch
backend) and EqiForge (inductor backend), side by side in one process (the measurement of bench/run_cpu.py:
interleaved, shuffled, fresh inputs per call, medians).

    python bench/inductor_cpu.py                          # the algebra suite -> bench/results/cpu_inductor.md
    python bench/inductor_cpu.py --programs matmul_chain,encoder_layer --repeats 50

Build times (torch.compile and Inductor compile on their first call) are excluded from the timings.
"""
from __future__ import annotations

import argparse
import datetime
import statistics
from pathlib import Path

import torch

import eqiforge
from measure import TOLERANCE, fresh_inputs, rel_error, steady_allocator, time_round_robin
from programs import PROGRAMS

OUT = Path(__file__).resolve().parent / "results" / "cpu_inductor.md"
VARIANTS = ("eager", "compile", "eqiforge", "eqiforge_inductor")


def build(program, example) -> dict:
    compiled = torch.compile(program)
    variants = {"eager": program, "compile": compiled,
                "eqiforge": eqiforge.optimize(program, example, backend="torch"),
                "eqiforge_inductor": eqiforge.optimize(program, example, backend="inductor")}
    with torch.no_grad():
        ref = program(*example)
        for name, fn in variants.items():  # compiles what compiles at its first call, and checks it
            err = rel_error(fn(*example), ref)
            if err > TOLERANCE:
                raise AssertionError(f"{name} differs from eager by {err:.2e}")
    return variants


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--programs", help="comma-separated names (default: the algebra suite)")
    p.add_argument("--repeats", type=int, default=100)
    args = p.parse_args()
    torch.set_num_threads(torch.get_num_threads())
    allocator = steady_allocator()
    names = args.programs.split(",") if args.programs else list(PROGRAMS)
    rows = []
    for name in names:
        program, example = PROGRAMS[name].make()
        variants = build(program, example)
        with torch.no_grad():
            samples = time_round_robin(variants, fresh_inputs(example, len(variants) + 1), args.repeats)
        ms = {v: statistics.median(samples[v]) * 1e3 for v in VARIANTS}
        runs = variants["eqiforge_inductor"].report.runs
        rows.append(f"| {name} | {'yes' if PROGRAMS[name].algebraic_win else 'no'} | "
                    + " | ".join(f"{ms[v]:.3f}" for v in VARIANTS)
                    + f" | {ms['eqiforge_inductor'] / ms['compile']:.2f} | {ms['eqiforge_inductor'] / ms['eager']:.2f}"
                    f" | {'plan' if runs == 'the plan' else 'original'} |")
        print(rows[-1], flush=True)
    head = [f"# EqiForge + Inductor on the CPU ({datetime.datetime.now(datetime.timezone.utc).isoformat()})", "",
            f"{torch.get_num_threads()} threads, torch {torch.__version__}, median of {args.repeats} interleaved "
            f"calls, ms; allocator: {allocator}. `python bench/inductor_cpu.py`.", "",
            "| program | algebra | eager | torch.compile | EqiForge (torch) | EqiForge (inductor) | "
            "inductor / compile | inductor / eager | inductor runs |", "|---|---|---|---|---|---|---|---|---|"]
    OUT.write_text("\n".join(head + rows) + "\n")
    print(f"written {OUT}")


if __name__ == "__main__":
    main()
