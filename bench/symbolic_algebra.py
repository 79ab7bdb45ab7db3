"""The algebra suite with one dim symbolic: one plan for every size against a plan specialised to each size.

Each program of bench/programs.py is optimized once with its first input's leading dim (the encoder layer's
sequence dim; ``DIMS``) declared dynamic (``optimize(..., dynamic=...)``), then timed at three sizes of that
dim beside the plan ``optimize()`` builds for that size alone: paired, in a random order per round, each
call right after its own previous call (measure.py's protocol; a visit counts the median of 5 such calls),
the median over rounds of the ratio symbolic / specialised. Both choose as predicted (``measure="never"``),
so the plans, not a timing, are compared.

    python bench/symbolic_algebra.py [--repeats 40] [--out bench/results/symbolic_algebra.md]
"""
from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import torch

import eqiforge
from measure import time_round_robin, write_results
from programs import PROGRAMS

#: the symbolic dim per program (input index -> its dims that take that size); the others: the first input's
#: leading dim. Inputs that share the dim resize together (x + y needs both).
DIMS = {"encoder_layer": {0: [1]}, "distribute_scale": {0: [0], 1: [0]}, "elementwise": {0: [0], 1: [0]},
        "shared_factor_sum": {i: [0] for i in range(4)}}
SCALES = (0.75, 1.0, 1.25)
CALLS = 5  # timed calls per visit, their median counted: one call each left matmul_chain's ratio at 0.93-1.12


def resized(inputs: tuple, dims: dict, size: int) -> tuple:
    shapes = [list(t.shape) for t in inputs]
    for which, ds in dims.items():
        for d in ds:
            shapes[which][d] = size
    return tuple(torch.randn(*s) for s in shapes)


def run(name: str, repeats: int) -> list[dict]:
    program, inputs = PROGRAMS[name].make()
    dims = DIMS.get(name, {0: [0]})
    which, dim = next((w, ds[0]) for w, ds in dims.items())
    options = dict(measure="never", backend="torch")
    symbolic = eqiforge.optimize(program, inputs, dynamic=dims, **options)
    rows = []
    for scale in SCALES:
        size = max(2, round(inputs[which].shape[dim] * scale))
        example = resized(inputs, dims, size)
        special = eqiforge.optimize(program, example, **options)
        sets = [example] + [resized(inputs, dims, size) for _ in range(3)]
        seconds = time_round_robin({"symbolic": symbolic, "specialised": special}, sets, repeats, calls=CALLS)
        ratio = statistics.median(a / b for a, b in zip(seconds["symbolic"], seconds["specialised"]))
        with torch.no_grad():
            got, want = symbolic(*example), program(*example)
            close = bool((got - want).abs().max() <= 1e-4 * want.abs().max())  # relative to the largest value
        rows.append({"program": name, "size": size, "symbolic": bool(symbolic.symbolic), "close": close,
                     "sym_us": statistics.median(seconds["symbolic"]) * 1e6,
                     "spec_us": statistics.median(seconds["specialised"]) * 1e6, "ratio": ratio,
                     "runs": symbolic.report.runs, "special_runs": special.report.runs})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=40)
    parser.add_argument("--programs", default=",".join(PROGRAMS))
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "symbolic_algebra.md")
    args = parser.parse_args()
    torch.set_num_threads(2)
    rows = [r for name in args.programs.split(",") for r in run(name, args.repeats)]
    lines = [f"# The algebra suite with one dim symbolic (CPU, {torch.get_num_threads()} threads, "
             f"{args.repeats} paired rounds of {CALLS} calls each, medians)", "",
             "| program | size | one plan for every size? | matches eager | symbolic us | specialised us "
             "| symbolic / specialised | symbolic runs | specialised runs |",
             "|---|---:|---|---|---:|---:|---:|---|---|"]
    for r in rows:
        lines.append(f"| {r['program']} | {r['size']} | {r['symbolic']} | {r['close']} | {r['sym_us']:.1f} "
                     f"| {r['spec_us']:.1f} | {r['ratio']:.3f} | {r['runs']} | {r['special_runs']} |")
    worst = max(r["ratio"] for r in rows)
    lines += ["", f"Worst ratio {worst:.3f}; within 5% at every size: {worst <= 1.05}.", ""]
    write_results(args.out, lines)


if __name__ == "__main__":
    main()
