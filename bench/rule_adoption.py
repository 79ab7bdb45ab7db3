"""What adopted rules cost and buy: e-graph growth, saturation time and predicted plan time on bench/'s suites
with the shipped rules and with the rules less ADOPTED (issue 25: "measure what they cost"), or less a rule set.

    python bench/rule_adoption.py                    # -> bench/results/rule_adoption.md
    python bench/rule_adoption.py --set synthesized --suites algebra,kernelbench,twins,families --measure \
        --out bench/results/synthesized_rules.md     # the rules synthesis found (issue 42), plans timed

Each program is optimized with the torch backend, no measuring, no cache, no plan check (what is compared is
the optimizer's own work), once with every rule and once in a rules folder without the rules, in one process.
With ``--measure``, the two plans of every program where they differ are timed side by side (interleaved,
fresh inputs per call, measure.time_round_robin) and the median of per-round ratios is reported.
"""
from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import torch

from measure import fresh_inputs, time_round_robin, write_results

ADOPTED = (  # found by synthesis, then written for any rank and dim
    "sum-of-expand-over-kept-dim", "max-of-expand-over-kept-dim", "min-of-expand-over-kept-dim",
    # written for the twins suite's misses (bench/twins.py)
    "sum-of-broadcast-factor-right", "sum-of-broadcast-factor-left", "max-of-broadcast-offset-right",
    "max-of-broadcast-offset-left", "max-of-broadcast-offset-sub", "min-of-broadcast-offset-right",
    "min-of-broadcast-offset-left", "min-of-broadcast-offset-sub", "sum-of-row-product-2d-right",
    "sum-of-row-product-2d-left", "sum-of-row-product-3d-right", "sum-of-row-product-3d-left",
    "expand-out-of-matmul-right", "row-scale-left-out-of-matmul", "row-scale-right-out-of-matmul",
    "column-scale-left-out-of-matmul", "column-scale-right-out-of-matmul", "neg-out-of-matmul-left",
    "neg-out-of-matmul-right", "neg-into-matmul-left", "neg-into-matmul-right", "matmul-unflatten-rows",
    "matmul-flatten-rows-to-vector", "matmul-flatten-summed-rows")


def optimize_one(case, rules: tuple[str, ...]):
    """(e-nodes, saturation seconds, predicted plan seconds, matches of ``rules``), the optimized module and
    its example inputs."""
    import eqiforge
    program, example = case.make()
    with torch.no_grad():
        opt = eqiforge.optimize(program, example, backend="torch", measure="never", cache=False, validate=False)
    r = opt.report
    matches = sum(r.saturation.matches_per_rule().get(n, 0) for n in rules)
    return (r.saturation.enodes, r.saturation.seconds, r.predicted_after, matches), opt, example


def plan_code(opt) -> str:
    """The plan's code without its comments (which name the rule sets and the predicted time)."""
    return "\n".join(line for line in opt.source.splitlines() if not line.lstrip().startswith("#"))


def measured_ratio(with_rules, without, example, repeats: int) -> float:
    """The median over rounds of the plan's time with the rules over its time without them."""
    seconds = time_round_robin({"with": with_rules, "without": without}, fresh_inputs(example, 3), repeats)
    return statistics.median(x / y for x, y in zip(seconds["with"], seconds["without"]))


def main() -> None:
    from run_cpu import SUITES
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--suites", default="algebra,kernelbench,twins")
    p.add_argument("--set", help="the rules of this rule set instead of ADOPTED")
    p.add_argument("--measure", action="store_true", help="time the two plans where they differ")
    p.add_argument("--repeats", type=int, default=41, help="rounds of timing per program (default 41)")
    p.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "rule_adoption.md"))
    args = p.parse_args()
    from eqiforge.egraph import rulesets
    rules = tuple(rulesets.available()[args.set].rule_names) if args.set else ADOPTED
    torch.set_num_threads(min(2, torch.get_num_threads()))
    cases = [(f"{s}/{n}", c) for s in args.suites.split(",") for n, c in SUITES[s][0].items()]
    with_rules, without, timed = {}, {}, {}
    for name, case in cases:
        with_rules[name], opt_with, example = optimize_one(case, rules)
        with rulesets.rules_folder_with({}, without=rules):
            without[name], opt_without, _ = optimize_one(case, rules)
        if plan_code(opt_with) != plan_code(opt_without):
            timed[name] = f"{measured_ratio(opt_with, opt_without, example, args.repeats):.3f}" if args.measure \
                else "differs"
    title = f"rule set {args.set}" if args.set else "Adopted rules"
    rows = [f"# {title}: {', '.join(rules)}", "",
            "| program | e-nodes without | with | saturate s without | with | predicted plan us without | with | "
            "matches | measured with / without |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    totals = [0, 0, 0.0, 0.0]
    for name, _ in cases:
        (e0, s0, p0, _), (e1, s1, p1, m) = without[name], with_rules[name]
        totals = [totals[0] + e0, totals[1] + e1, totals[2] + s0, totals[3] + s1]
        if m or e0 != e1 or abs(p0 - p1) > 1e-12 or name in timed:
            rows.append(f"| {name} | {e0} | {e1} | {s0:.2f} | {s1:.2f} | {p0 * 1e6:.1f} | {p1 * 1e6:.1f} | {m} | "
                        f"{timed.get(name, '')} |")
    better = sum(with_rules[n][2] < without[n][2] * (1 - 1e-9) for n, _ in cases)
    worse = sum(with_rules[n][2] > without[n][2] * (1 + 1e-9) for n, _ in cases)
    rows += ["", f"{len(cases)} programs (rows: those where anything differs). Totals: {totals[0]} -> {totals[1]} "
             f"e-nodes, saturation {totals[2]:.1f} -> {totals[3]:.1f} s; predicted plan time lower on {better}, "
             f"higher on {worse}; plans differ on {len(timed)} (measured with / without: the median over rounds of "
             "the per-round ratio; empty where the plans are the same).", ""]
    write_results(Path(args.out), rows)


if __name__ == "__main__":
    main()
