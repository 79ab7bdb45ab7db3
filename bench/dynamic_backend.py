"""torch.compile(backend="eqiforge") on a graph Dynamo made dynamic, against torch.compile and eager.

A minGPT-style causal attention block (batch 4, width 128, 4 heads) is compiled by each backend and called
at lengths 16, 24, 40 and 72 first (Dynamo makes the length dynamic at the second), then timed at each
``--lengths``: paired, in a random order per round, each call right after its own previous call, a visit
the median of 5 calls (measure.py's protocol); the report gives the median over rounds of each one's ratio
to torch.compile's time, the backend's call counts and what its dynamic graph runs (its ``measured`` row:
the plan for every size timed once against the graph as Inductor compiles it). A fresh EqiForge cache, so
the decision is measured in this run.

    python bench/dynamic_backend.py [--lengths 40,100,200] [--repeats 60] [--out bench/results/dynamic_backend.md]
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import warnings
from pathlib import Path

os.environ["EQIFORGE_CACHE_DIR"] = tempfile.mkdtemp(prefix="eqiforge-bench-")  # before eqiforge reads it

import torch  # noqa: E402

from eqiforge import dynamo  # noqa: E402
from measure import time_round_robin, write_results  # noqa: E402

WIDTH, HEADS, BATCH = 128, 4, 4


def block(x, wq, wk, wv, wo):
    """Causal self-attention written out (no SDPA) with a residual: minGPT's attention."""
    q, k, v = x @ wq, x @ wk, x @ wv
    b, t, d = q.shape
    q, k, v = (z.view(b, t, HEADS, d // HEADS).transpose(1, 2) for z in (q, k, v))
    scores = (q @ k.transpose(-1, -2)) / (d // HEADS) ** 0.5
    scores = scores.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
    y = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d)
    return y @ wo + x


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lengths", default="40,100,200")
    parser.add_argument("--repeats", type=int, default=60)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "dynamic_backend.md")
    args = parser.parse_args()
    torch.set_num_threads(2)
    warnings.filterwarnings("ignore")
    gen = torch.Generator().manual_seed(0)
    weights = [torch.randn(WIDTH, WIDTH, generator=gen) / WIDTH ** 0.5 for _ in range(4)]

    def inputs(length: int) -> tuple:
        return (torch.randn(BATCH, length, WIDTH, generator=gen), *weights)

    variants = {"eager": block, "torch.compile": torch.compile(block),
                "eqiforge backend": torch.compile(block, backend="eqiforge")}
    rows = []
    with torch.no_grad():
        for fn in variants.values():
            for length in (16, 24, 40, 72):
                fn(*inputs(length))
        before = dynamo.call_counts()
        for length in map(int, args.lengths.split(",")):
            sets = [inputs(length) for _ in range(4)]
            want = block(*sets[0])
            close = all(torch.allclose(fn(*sets[0]), want, rtol=1e-4, atol=1e-4) for fn in variants.values())
            seconds = time_round_robin(variants, sets, args.repeats, calls=5)
            ratio = {k: statistics.median(a / b for a, b in zip(v, seconds["torch.compile"]))
                     for k, v in seconds.items()}
            rows.append((length, close, {k: statistics.median(v) for k, v in seconds.items()}, ratio))
    counts = {k: v - before[k] for k, v in dynamo.call_counts().items()}
    report = dynamo.REPORTS[-1]
    lines = [f"# A causal attention block at lengths Dynamo made dynamic (CPU, {torch.get_num_threads()} threads, "
             f"{args.repeats} paired rounds of 5 calls, medians)", "",
             "| length | outputs match eager | " + " | ".join(f"{k} us (x torch.compile)" for k in variants) + " |",
             "|---:|---|" + "---:|" * len(variants)]
    for length, close, median, ratio in rows:
        lines.append(f"| {length} | {close} | " + " | ".join(f"{median[k] * 1e6:.0f} ({ratio[k]:.3f})"
                                                             for k in variants) + " |")
    served = ", ".join(f"{n} {k}" for k, n in counts.items())
    lines += ["", f"The backend's calls while timed, by what served them: {served}.", "",
              f"Its dynamic graph runs: {report.runs}.", "", f"Measured: {report.measured}.", ""]
    write_results(args.out, lines)


if __name__ == "__main__":
    main()
