"""The noise a measured choice decides under, on this machine: per-round times of pairs of candidates, timed as
``eqiforge.decide.choice.choose`` times them (its loop, its input sets in turn, no early stop).

Two kinds of pairs: *ties*, the same program twice as two candidates (their per-round ratio is pure noise: how
far apart two equal candidates look in one round), and *races*, a program against the same program compiled by
Inductor (a real difference under the same noise). The tie pairs are the noise that tests/test_decision_rule.py
replays to check the decision rule's error rates; the races say which true ratios matter.

    python bench/decision_noise.py --rounds 300

writes bench/data/cpu/decision_noise.json (seconds per round, per pair) and bench/results/decision_noise.md.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

import torch

from eqiforge.decide import choice, load, timing
from measure import steady_allocator, write_results

DATA = Path(__file__).parent / "data" / "cpu" / "decision_noise.json"
RESULTS = Path(__file__).parent / "results" / "decision_noise.md"


def causal_attention(q, k, v):
    s = q @ k.transpose(-2, -1) / 8
    mask = torch.triu(torch.ones(s.shape[-2], s.shape[-1], dtype=torch.bool), diagonal=1)
    return torch.softmax(s.masked_fill(mask, float("-inf")).float(), dim=-1) @ v


def rms_norm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w


def small_matmul(x, w):
    return torch.relu(x @ w)


def mid_matmul(x, w):
    return x @ w


def programs() -> dict[str, tuple]:
    """name -> (program, example inputs), from a few microseconds a call to a few milliseconds."""
    g = torch.Generator().manual_seed(0)
    rand = lambda *shape: torch.randn(*shape, generator=g)  # noqa: E731
    return {"relu(x @ w) 32x32": (small_matmul, (rand(32, 32), rand(32, 32))),
            "x @ w 256x256": (mid_matmul, (rand(256, 256), rand(256, 256))),
            "causal attention [2, 4, 128, 64]": (causal_attention, (rand(2, 4, 128, 64), rand(2, 4, 128, 64),
                                                                    rand(2, 4, 128, 64))),
            "RMSNorm [14, 64, 64, 64]": (rms_norm, (rand(14, 64, 64, 64), rand(64)))}


def timed_pair(first, second, inputs, rounds: int, seed: int) -> dict[str, list[float]]:
    """Per-round seconds of two candidates, timed by the measured choice's loop on its input sets."""
    sets = choice.input_sets(*inputs)
    calls = {"a": choice.rotating(first, sets), "b": choice.rotating(second, sets)}
    with torch.no_grad():
        found = timing.time_candidates(calls, math.inf, seed=seed, min_rounds=rounds, max_rounds=rounds)
    return found.seconds


def spread(a: list[float], b: list[float]) -> str:
    logs = sorted(math.log(x / y) for x, y in zip(a, b))
    q = lambda p: math.exp(timing.quantile(logs, p))  # noqa: E731
    return f"{q(0.1):.3f} | {q(0.25):.3f} | {q(0.5):.3f} | {q(0.75):.3f} | {q(0.9):.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=300)
    args = parser.parse_args()
    allocator = steady_allocator()
    pairs, rows = {}, []
    with load.OtherLoad() as busy:
        for i, (name, (fn, inputs)) in enumerate(programs().items()):
            compiled = torch.compile(fn)
            for kind, second in (("tie", fn), ("race", compiled)):
                seconds = timed_pair(fn, second, inputs, args.rounds, seed=i)
                pairs[f"{kind}: {name}"] = {kind_name: [float(f"{s:.4g}") for s in times]
                                            for kind_name, times in seconds.items()}
                a, b = seconds["a"], seconds["b"]
                rows.append(f"| {kind} | {name} | {statistics.median(a) * 1e6:.1f} | "
                            f"{statistics.median(b) * 1e6:.1f} | {spread(a, b)} |")
    DATA.parent.mkdir(parents=True, exist_ok=True)
    DATA.write_text(json.dumps({"rounds": args.rounds, "threads": torch.get_num_threads(), "pairs": pairs}) + "\n")
    write_results(RESULTS, [
        "# The noise a measured choice decides under (CPU)", "",
        f"{args.rounds} rounds per pair, timed by the measured choice's loop (`decide/timing.py`) on its input sets "
        f"in turn; {torch.get_num_threads()} threads, allocator {allocator}; other processes' cores meanwhile: "
        f"{busy.cores:.2f}. A tie is the same program as two candidates; a race, the program (a) against it compiled "
        "by Inductor (b). Columns: medians in us, then quantiles of the per-round ratio a/b.", "",
        "| pair | program | a (us) | b (us) | 10% | 25% | median | 75% | 90% |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
        *rows, "", f"Data: `{DATA.relative_to(Path(__file__).parent.parent)}`.", ""])


if __name__ == "__main__":
    main()
