"""``python -m eqiforge.fuzz``: a differential fuzz campaign.

Writes DIR/summary.json and DIR/summary.md (counts per configuration and per op family), DIR/results.jsonl
(one line per job, in job order), DIR/workers.log (the local workers' output) and DIR/repro_<seed>_<config>.py
for every wrong, crashing, hanging or invalid job (exit code 1 when there is any) and every job in which the
optimizer's own plan check intervened. Jobs run in local worker processes, or as tasks on a Ray cluster
(``--cluster ray``, ``--address``); DIR/sweep.jsonl holds each job's outcome as it arrives, from which
``--resume`` continues an interrupted campaign.
"""
from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

from .. import sweep
from ..errors import EqiforgeError

from . import runner


def add_arguments(parser) -> None:
    """The campaign's flags (``eqiforge fuzz`` and ``python -m eqiforge.fuzz``)."""
    parser.add_argument("--programs", type=int, default=50, help="torch-profile programs (default 50)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the first program (default 0)")
    parser.add_argument("--configs", default="all",
                        help=f"'all' or a comma list of {', '.join(runner.CONFIGS)} (default all)")
    parser.add_argument("--per-program", type=int, default=3,
                        help="configurations per program, in rotation over --configs (default 3)")
    parser.add_argument("--triton", type=int, default=0, metavar="K",
                        help="also K triton-backend jobs on tiny programs, under the Triton interpreter")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per job before it is a hang")
    sweep.add_arguments(parser)  # --workers, --cluster, --address, --resume
    parser.add_argument("--out", required=True, help="directory for the summary and the reproducers")


def add_commands(sub) -> None:
    """``eqiforge fuzz`` on the CLI's sub-parsers."""
    p = sub.add_parser("fuzz", help="a differential fuzz campaign: random programs, optimized and compared with "
                                    "eager (docs/fuzzing.md)", description=__doc__.splitlines()[0])
    add_arguments(p)
    p.set_defaults(run=lambda args: campaign(args, "eqiforge " + shlex.join(sys.argv[1:])))


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m eqiforge.fuzz", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return campaign(parser.parse_args(argv), "python -m eqiforge.fuzz " + shlex.join(argv))


def campaign(args, command: str) -> int:
    """Run the campaign ``args`` describe (``command``: the command line, for the summary); 1 where any job
    failed, 2 for an unknown configuration or a cluster it cannot use."""
    configs = runner.CONFIGS if args.configs == "all" else tuple(args.configs.split(","))
    unknown = sorted(set(configs) - set(runner.CONFIGS))
    if unknown:
        print(f"error: unknown configuration(s) {unknown}; known: {', '.join(runner.CONFIGS)} (the triton ones run "
              "with --triton K)", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        executor = sweep.executor_of(args, local=runner.JobPool(args.workers, str(out / "workers.log")))
    except EqiforgeError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    jobs = runner.plan_jobs(args.programs, args.seed, configs, args.per_program, args.triton, args.timeout)
    results_path = sweep.results_file(out, args.resume)
    start = time.perf_counter()
    tasks = [sweep.Task(job.name, "fuzz", job) for job in jobs]
    with executor:
        stored = sweep.run_sweep(executor, runner.run_task, tasks, results_path, desc="fuzzing",
                                 failed=lambda result: result["status"] in runner.FAILURES)
    results = [(job, runner.outcome_from(result)) for job, result in zip(jobs, stored)]
    (out / "results.jsonl").write_text("".join(json.dumps(runner.as_record(*r)) + "\n" for r in results))
    for job, outcome in results:
        if runner.needs_reproducer(outcome):
            runner.write_reproducer(out, job, outcome)
    failed = sum(outcome.status in runner.FAILURES for _, outcome in results)
    summary = runner.summarize(results, time.perf_counter() - start, command)
    runner.write_summary(out, summary)
    print(f"{summary['jobs']} jobs: " + ", ".join(f"{summary[s]} {s}" for s in runner.STATUSES) +
          f"; plan check intervened {summary['validation interventions']}x; {summary['wall seconds']} s; "
          f"see {out / 'summary.md'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
