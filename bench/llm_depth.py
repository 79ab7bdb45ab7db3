"""Optimize time against depth: Llama-style blocks (RMSNorm, rotary, grouped-query causal attention, SwiGLU;
hidden 256) stacked 1, 8 and 32 deep, optimized with repeated blocks shared (the default) and, for the
deepest, without; stage seconds and whether the plan matches eager.

    python bench/llm_depth.py                      # -> bench/results/cpu_llm_depth.md
    python bench/llm_depth.py --layers 1,4 --no-whole

Issue 14's goal: 32 layers optimize in at most 2x the time of one layer plus capture.
"""
from __future__ import annotations

import argparse
import datetime
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn

import eqiforge
from measure import provenance, rel_error

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from test_deep_models import LlamaBlock  # noqa: E402 - the block the deep-model tests check

OUT = Path(__file__).resolve().parent / "results" / "cpu_llm_depth.md"
STAGES = ("capture", "saturate", "extract", "lower", "validate")


def measure(layers: int, share: bool) -> str:
    torch.manual_seed(0)
    model = nn.Sequential(*[LlamaBlock(dim=256, heads=8, kv_heads=2, seq=32) for _ in range(layers)]).eval()
    x = torch.randn(2, 32, 256)
    t0 = time.perf_counter()
    opt = eqiforge.optimize(model, (x,), share_blocks=share, original_if_no_better=False)
    total = time.perf_counter() - t0
    seconds = opt.report.stage_seconds
    with torch.no_grad():
        fresh = torch.randn(2, 32, 256)
        err = rel_error(opt(fresh), model(fresh))
    stages = " | ".join(f"{seconds.get(s, 0.0):.2f}" for s in STAGES)
    return (f"| {layers} | {'shared' if share else 'whole graph'} | {total:.2f} | {stages} | "
            f"{total - seconds.get('capture', 0.0):.2f} | {opt.report.repeated_blocks} | {err:.1e} |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", default="1,8,32")
    p.add_argument("--no-whole", action="store_true", help="skip the deepest model without shared blocks")
    args = p.parse_args()
    depths = [int(n) for n in args.layers.split(",")]
    rows = [measure(n, True) for n in depths]
    if not args.no_whole:
        rows.append(measure(depths[-1], False))
    for row in rows:
        print(row)
    lines = [f"# Optimize time against depth ({datetime.date.today()}, CPU, {torch.get_num_threads()} threads, "
             f"torch {torch.__version__})", "", f"`python bench/llm_depth.py --layers {args.layers}`: Llama-style "
             "blocks, hidden 256, 8 heads (2 key/value heads), batch 2 x 32 tokens; seconds.", "",
             "| layers | blocks | total | " + " | ".join(STAGES) + " | total - capture | repeated blocks | "
             "error vs eager |", "|---" * (6 + len(STAGES)) + "|", *rows]
    OUT.write_text("\n".join([*lines, "", provenance()]) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
