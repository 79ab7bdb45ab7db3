"""The overhead of running a sweep on Ray: the same fuzz sample through the local executor (2 worker processes)
and through a Ray cluster of two local nodes of 1 CPU each, bound to 127.0.0.1, in alternating order.

Each repeat draws its own programs (seed = 1000 x repeat), the same for both executors, and starts from an empty
EqiForge cache, so that neither run finds the other's saturations. The cluster is started once (as a standing
cluster is), with ``ray.cluster_utils.Cluster``: Ray 2.60's ``ray start --node-ip-address 127.0.0.1`` turns the
address into the machine's routable one unless ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, and under that setting
``ray start --address`` refuses to add a second node. Results: bench/results/sweep_overhead.md.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # measure.py

from measure import write_results  # noqa: E402

from eqiforge.fuzz.__main__ import main as fuzz_main  # noqa: E402
from eqiforge.sweep.ray_executor import LOOPBACK, SINGLE_MACHINE  # noqa: E402

OUT = Path(__file__).resolve().parent / "results" / "sweep_overhead.md"


def timed_campaign(sample: list[str], work: Path, cache: Path, extra: list[str]) -> float:
    """Wall seconds of one fuzz campaign from an empty EqiForge cache."""
    shutil.rmtree(cache, ignore_errors=True)
    cache.mkdir()
    out = Path(tempfile.mkdtemp(dir=work))
    start = time.perf_counter()
    code = fuzz_main(sample + extra + ["--out", str(out)])
    seconds = time.perf_counter() - start
    if code:
        raise SystemExit(f"the campaign failed ({code}): see {out}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--programs", type=int, default=12)
    parser.add_argument("--configs", default="default,greedy")
    parser.add_argument("--per-program", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="sweep-overhead-"))
    cache = work / "cache"
    os.environ["EQIFORGE_CACHE_DIR"] = str(cache)  # before the cluster starts: its workers inherit it
    os.environ.setdefault(SINGLE_MACHINE, "0")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False,
                                                            "node_ip_address": LOOPBACK})
    cluster.add_node(num_cpus=1, node_ip_address=LOOPBACK)
    executors = {"local": ["--workers", "2"], "ray": ["--address", cluster.address]}
    seconds = {name: [] for name in executors}
    load = [os.getloadavg()[0]]
    try:
        for repeat in range(args.repeats):
            sample = ["--programs", str(args.programs), "--configs", args.configs, "--per-program",
                      str(args.per_program), "--seed", str(1000 * repeat)]
            for name in (list(executors) if repeat % 2 == 0 else list(executors)[::-1]):
                seconds[name].append(timed_campaign(sample, work, cache, executors[name]))
                load.append(os.getloadavg()[0])
    finally:
        cluster.shutdown()
        shutil.rmtree(work, ignore_errors=True)
    jobs = args.programs * args.per_program
    median = {name: statistics.median(s) for name, s in seconds.items()}
    lines = ["# Sweep overhead: local executor vs a two-node local Ray cluster", "",
             f"The same fuzz sample ({args.programs} programs x {args.per_program} of {args.configs}: {jobs} jobs) per "
             f"repeat, {args.repeats} repeats in alternating order, each from an empty EqiForge cache; Ray: two nodes "
             "of 1 CPU each on 127.0.0.1, one CPU per task; local: 2 worker processes.", "",
             "| executor | wall seconds per repeat | median |", "|---|---|---:|"]
    lines += [f"| {name} | {', '.join(f'{s:.1f}' for s in seconds[name])} | {median[name]:.1f} |" for name in executors]
    lines += ["", f"Ray / local: **{median['ray'] / median['local']:.2f}x** (the issue's bound: 1.15x). Load average "
              f"(1 min) before and after each run: {', '.join(f'{x:.2f}' for x in load)}.", ""]
    write_results(OUT, lines)


if __name__ == "__main__":
    main()
