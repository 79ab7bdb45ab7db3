"""Plan-level training data for the cost model: every program of bench/'s suites optimized with the measured
choice on, its best plans timed side by side (eqiforge/decide/choice.py's protocol), the records kept.

    python bench/measured_plans.py                       # -> bench/data/cpu/plans/measured_choice.jsonl.gz
    python bench/measured_plans.py --suites algebra --programs matmul_chain,row_sums --out /tmp/p.jsonl.gz

Each program is optimized with the torch backend and ``measure="always"``, up to NEXT_PLANS next-best plans
predicted within BAND times the best (wider than optimize()'s defaults: the data should hold plans the model
ranks wrongly). Every record holds each plan's nodes and its predicted and measured seconds; then

    eqiforge cost train --data bench/data/cpu --plans bench/data/cpu/plans
    eqiforge cost eval --data bench/data/cpu --plans bench/data/cpu/plans

fit the learned model's plan figures on three programs in four and rank every program's plans by figures
fitted without it (with spread_plans.py's records beside these).
"""
from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from pathlib import Path

import torch

NEXT_PLANS = 4
BAND = 4.0
OUT = Path(__file__).resolve().parent / "data" / "cpu" / "plans" / "measured_choice.jsonl.gz"


def main() -> None:
    from run_cpu import SUITES
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--suites", default="algebra,kernelbench", help=f"comma-separated, of {list(SUITES)}")
    p.add_argument("--programs", help="comma-separated names (default: every program of the suites)")
    p.add_argument("--seconds", type=float, default=1.0, help="measure_seconds per program")
    p.add_argument("--out", default=str(OUT))
    args = p.parse_args()
    import eqiforge
    from eqiforge.cost.dataset import read_records
    from eqiforge.decide import program as decide_program
    from eqiforge.paths import cache_dir
    from measure import steady_allocator
    print(f"allocator: {steady_allocator()}", file=sys.stderr)  # as bench/'s timings: no page faults in them
    decide_program.NEXT_PLANS, decide_program.NEXT_PLANS_BAND = NEXT_PLANS, BAND
    started = time.time()  # this run's records are those written since (the file may rotate meanwhile)
    wanted = set(args.programs.split(",")) if args.programs else None
    for suite in args.suites.split(","):
        for name, case in SUITES[suite][0].items():
            if wanted is None or name in wanted:
                program, example = case.make()
                with torch.no_grad():  # cache=False: measured again, whatever an earlier run decided
                    opt = eqiforge.optimize(program, example, backend="torch", measure="always",
                                            measure_seconds=args.seconds, cache=False)
                print(f"{suite}/{name}: {opt.report.measured}", flush=True)
    data = "".join(json.dumps(r) + "\n" for r in read_records(cache_dir("measure")) if r["time"] >= started).encode()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_bytes(gzip.compress(data, mtime=0))
    lines = data.count(b"\n")
    print(f"written {args.out} ({lines} records)", file=sys.stderr)

if __name__ == "__main__":
    main()
