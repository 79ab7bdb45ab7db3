"""Write down, before any GPU run here, what EqiForge's GPU cost model predicts for KernelBench's programs.

For every captured program of the published dataset (bench/data/gpu/kernelbench.json.gz) at the sizes of
KernelBench's current snapshot (its H100 SXM setup, "H100_Modal"), the model's predicted time of the program
as written (eager: each call a library kernel launched from Python) and as torch.compile runs it (Inductor:
the calls between library products fused, cost/configurations.py), with the figures the package ships
(eqiforge/cost/gpu_figures.json), beside the published eager and torch.compile times; and the same
predictions for the H200, which has no published times (the H100's figures on its datasheet). A first GPU
run checks these written predictions: the published problems timed there (KernelBench's own timing script)
against the H200 columns.

    python bench/gpu/kernelbench_predictions.py        # -> bench/gpu/kernelbench_predicted.md and .json
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from eqiforge.cost import get_device
from eqiforge.cost.configurations import config_seconds
from eqiforge.cost.gpu_fit import accuracy
from eqiforge.cost.published import DATASET, load_published

HERE = Path(__file__).resolve().parent
SETUP = "H100_Modal"


def predictions(data) -> list[dict]:
    """One row per program timed on SETUP: published and predicted times (ms) on the H100 and the H200."""
    published = {}
    for program, timing in data.measured(setups=(SETUP,), configs=("eager", "inductor")):
        published.setdefault((timing.level, timing.problem, program.key), {})[timing.config] = timing.seconds
    h100, h200 = get_device("H100"), get_device("H200")
    rows = []
    for (level, problem, key), times in sorted(published.items()):
        calls = list(data.programs[key].calls)
        rows.append({"level": level, "problem": problem,
                     "published_eager_ms": times.get("eager", np.nan) * 1e3,
                     "published_compile_ms": times.get("inductor", np.nan) * 1e3,
                     **{f"predicted_{gpu}_{config}_ms": config_seconds(calls, device, config) * 1e3
                        for gpu, device in (("h100", h100), ("h200", h200)) for config in ("eager", "inductor")}})
    return rows


def markdown(rows: list[dict], model: str) -> str:
    def figures(config):
        pairs = [(r[f"predicted_h100_{config}_ms"], r[f"published_{'eager' if config == 'eager' else 'compile'}_ms"])
                 for r in rows]
        pairs = [(p, m) for p, m in pairs if np.isfinite(m)]
        a = accuracy([p for p, _ in pairs], [m for _, m in pairs])
        return (f"median predicted/published {a['median_ratio']:.2f}, {a['within_1_5x']:.0%} within 1.5x, "
                f"{a['within_2x']:.0%} within 2x, Kendall tau {a['kendall_tau']:.3f} ({a['programs']} programs)")

    lines = ["# KernelBench's programs: EqiForge's predicted GPU times (predictions, not measurements)", "",
             (f"Model: {model}. Published times: KernelBench's `results/timing/{SETUP}` (H100 SXM, mean of 100 "
              "calls; MIT licence). Predicted: the program as written (eager) and under torch.compile (Inductor's "
              "default mode, priced as the calls fused between library products). H200 columns: no published "
              "times exist; a GPU run checks them. Levels 1-2 were fitted on; level 3 is held out."), "",
             f"- H100 eager: {figures('eager')}", f"- H100 torch.compile: {figures('inductor')}", "",
             ("| level | problem | published eager ms | predicted eager ms | published compile ms | "
              "predicted compile ms | predicted H200 eager ms | predicted H200 compile ms |"),
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['level']} | {r['problem']} | {r['published_eager_ms']:.3g} "
                     f"| {r['predicted_h100_eager_ms']:.3g} "
                     f"| {r['published_compile_ms']:.3g} | {r['predicted_h100_inductor_ms']:.3g} "
                     f"| {r['predicted_h200_eager_ms']:.3g} | {r['predicted_h200_inductor_ms']:.3g} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(DATASET))
    parser.add_argument("--out", default=str(HERE / "kernelbench_predicted"), help="path without suffix")
    args = parser.parse_args()
    rows = predictions(load_published(args.data))
    model = get_device("H100").fitted
    Path(args.out).with_suffix(".json").write_text(json.dumps({"model": model, "setup": SETUP, "rows": rows},
                                                              indent=1) + "\n")
    Path(args.out).with_suffix(".md").write_text(markdown(rows, model))
    print(f"{len(rows)} programs -> {args.out}.md, .json")


if __name__ == "__main__":
    main()
