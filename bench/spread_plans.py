"""Plans with spread, for judging a cost model's plan ranking: every program of bench/'s suites extracted again
under randomly perturbed prices (each e-node's price times exp(N(0, SIGMA))), the distinct plans that pass
the plan check timed side by side with the extractor's own (eqiforge/decide/timing.py's protocol), and the records
written as the measured choice writes them, so that

    python bench/spread_plans.py --out /tmp/spread.jsonl.gz
    eqiforge cost eval --data bench/data/cpu --plans /tmp/spread.jsonl.gz

ranks them by the roofline prior and the learned model. The measured choice's own candidates (the
extractor's next-best plans) are mostly within 3% of each other, ties within the clock's noise; these
differ by up to 20x, which a model that prices calls well should order. With ``--learned`` the plan
extracted under the learned model's prices is timed beside them (where it makes other calls): what each
model's first pick costs.
"""
from __future__ import annotations

import argparse
import gzip
import json
import math
import random
import sys

import torch

SIGMA = 1.0  # spread of the log-normal price perturbation


def perturbed_plans(optimized, count: int, seed: int, sources: set) -> list:
    """Up to ``count`` (plan, runner) of distinct code extracted under perturbed prices, checked; their code is
    added to ``sources`` (the code already timed)."""
    from eqiforge.pipeline import validate
    from eqiforge.extract import extract
    nxt, rng = optimized.next_plans, random.Random(seed)
    low = nxt.lowering
    check = validate.PlanCheck(low.graph, low.input_names, nxt.examples, low.bound, low.opts.search.assume_finite)
    plans = []
    for _ in range(4 * count):
        if len(plans) == count:
            break
        prices = [c * math.exp(rng.gauss(0.0, SIGMA)) if math.isfinite(c) else c for c in nxt.node_cost]
        selection = extract(low.snap, prices, method="ilp", time_limit=2.0, use_cache=False)
        plan, runner, source, _ = low.lower(selection)
        if source not in sources and check(runner).ok:
            sources.add(source)
            plans.append((plan, runner))
    return plans


def same_nodes(a, b) -> bool:
    """Whether two plans make the same calls (their code may differ in order and names only)."""
    from eqiforge.cost.plans import graph_nodes
    key = lambda plan: sorted(json.dumps(n, sort_keys=True) for n in graph_nodes(plan.graph))  # noqa: E731
    return key(a) == key(b)


def main() -> None:
    from run_cpu import SUITES
    from eqiforge import frontend
    from eqiforge.decide import choice, timing
    from eqiforge.cost.calibrate import machine_key
    from eqiforge.cost.plans import graph_nodes
    from eqiforge.pipeline.compile import compile_graph
    from eqiforge.pipeline.options import Options
    from eqiforge.pipeline.report import StageTimer
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--suites", default="algebra,kernelbench", help=f"comma-separated, of {list(SUITES)}")
    p.add_argument("--plans", type=int, default=5, help="perturbed plans per program (default 5)")
    p.add_argument("--seconds", type=float, default=3.0, help="timing budget per program")
    p.add_argument("--learned", action="store_true", help="time the plan extracted under the learned cost model "
                   "too (where its code differs from the others)")
    p.add_argument("--seed", type=int, default=0, help="of the price perturbations (another seed, other plans)")
    p.add_argument("--out", required=True, help="a .jsonl.gz of records")
    args = p.parse_args()
    from measure import steady_allocator
    allocator = steady_allocator()  # as bench/'s timings: a plan's time without page faults that depend on
    print(f"allocator: {allocator}", file=sys.stderr)  # which plan was timed before it
    opts = Options.of(backend="torch", measure="always", cache=False)
    lines = []
    for suite in args.suites.split(","):
        for seed, (name, case) in enumerate(SUITES[suite][0].items()):
            program, example = case.make()
            with torch.no_grad():
                captured = frontend.capture(program, example, {}, fold_params=opts.search.fold_constants)
                optimized = compile_graph(captured.graph, captured.input_names, captured.out_spec, opts,
                                          StageTimer(), bound=captured.param_inputs,
                                          examples=list(captured.inputs), next_plans=True)
                if optimized.next_plans is None:  # one plan only (shared blocks), or the program itself
                    continue
                sources = {optimized.source}
                runners = [("plan", optimized.plan, optimized.runner)] + [  # the plans alone: no drop-in wrapper
                    (f"plan {i}", plan, runner) for i, (plan, runner) in
                    enumerate(perturbed_plans(optimized, args.plans, 1000 * args.seed + seed, sources), 2)]
                if args.learned:  # the plan extraction picks under the learned cost model's prices
                    other = compile_graph(captured.graph, captured.input_names, captured.out_spec,
                                          opts.with_(cost_model="learned"), StageTimer(),
                                          bound=captured.param_inputs, examples=list(captured.inputs))
                    if not any(same_nodes(other.plan, plan) for _, plan, _ in runners):
                        runners.append(("learned model's plan", other.plan, other.runner))
                sets = choice.input_sets(*captured.inputs)
                timed = timing.time_candidates({n: choice.rotating(r, sets) for n, _, r in runners}, args.seconds)
            record = {"program": f"{suite}/{name}", "device": "cpu", "machine": machine_key(), "allocator": allocator,
                      "candidates": [
                {"name": n, "predicted_s": plan.predicted_seconds, "nodes": graph_nodes(plan.graph),
                 "measured_s": timed.median(n) if n in timed.seconds else None} for n, plan, _ in runners]}
            lines.append(json.dumps(record))
            print(f"{suite}/{name}: " + ", ".join(f"{c['name']} {c['measured_s']:.3g} s" for c in record["candidates"]
                                                 if c["measured_s"]), flush=True)
    with gzip.open(args.out, "wt") as f:
        f.write("".join(line + "\n" for line in lines))
    print(f"written {args.out} ({len(lines)} records)", file=sys.stderr)


if __name__ == "__main__":
    main()
