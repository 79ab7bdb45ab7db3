"""Rule-set ablation: run the optimizer over combinations of rule sets and tabulate what each buys and costs.

The program is captured once, in this process; the combinations run in worker processes forked from it, so
they inherit the captured IR graph instead of receiving a pickled copy (externs hold PyTorch operator
objects that cannot be pickled). Each worker runs the same stages as ``eqiforge.optimize`` (its saturation
forks a child of its own, which is why the workers are ordinary, non-daemon processes) and sends back one
plain row. Rows come back in combination order whatever order the workers finish in, so the same inputs
give the same rows (timings aside). Without ``rules``, "all" is what ``eqiforge.optimize`` uses by default:
that run goes first, in this process, and its report names the rule sets the other combinations vary.

Measuring is optional (``measure``; default: only where CUDA is available): after the parallel runs, each
combination's module is rebuilt here, one at a time (the pipeline is deterministic, so it is the same plan),
and timed alone on this process's device, so timings do not compete with other workers.
"""
from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import statistics
import time
from itertools import combinations as choose

import torch

from .. import cost, frontend
from ..egraph import rulesets
from ..errors import EqiforgeError
from ..pipeline.compile import compile_graph, priced_device
from ..pipeline.options import Options
from ..pipeline.report import Report, StageTimer
from .table import AblationTable

MODES = ("all", "leave-one-out", "each", "subsets")
MAX_SUBSET_SETS = 6  # 2^6 = 64 runs
NOT_KERNELS = ("Input", "Param", "Fill")  # plan nodes that launch nothing

_WORKER: dict = {}  # in a worker: the captured program and options, inherited from the parent by fork


def combinations(names: list[str], mode: str) -> list[tuple[str, tuple[str, ...]]]:
    """(label, rule sets) per run of ``mode``, in a fixed order.

    all: every set together. leave-one-out: all (the reference), then all but one, for each set.
    each: none (the reference), then each set alone. subsets: all 2^n subsets, smallest first.
    """
    everything = tuple(names)
    if mode == "all":
        return [("all", everything)]
    if mode == "leave-one-out":
        return [("all", everything)] + [(f"all - {n}", tuple(m for m in names if m != n)) for n in names]
    if mode == "each":
        return [("none", ())] + [(f"{n} only", (n,)) for n in names]
    if mode == "subsets":
        if len(names) > MAX_SUBSET_SETS:
            raise EqiforgeError(f"mode 'subsets' runs 2^n combinations; {len(names)} rule sets would be "
                                f"{2 ** len(names)} runs, the limit is {MAX_SUBSET_SETS} sets: choose them with "
                                f"rules=[...] (--rules a,b,c)")
        return [(" + ".join(c) or "none", c) for k in range(len(names) + 1) for c in choose(everything, k)]
    raise _unknown_mode(mode)


def _unknown_mode(mode: str) -> EqiforgeError:
    return EqiforgeError(f"unknown ablation mode {mode!r}; choose one of: {', '.join(MODES)}")


def ablate(fn, example_inputs, rules=None, mode: str = "leave-one-out", jobs: int = 2, *,
           measure: bool | None = None, repeats: int = 20, progress: bool = False, name: str = "",
           **options) -> AblationTable:
    """Optimize ``fn`` at ``example_inputs`` once per rule-set combination of ``mode`` over ``rules``
    (default: the rule sets ``eqiforge.optimize`` uses by default) in ``jobs`` processes; return the table.
    ``options`` are those of ``eqiforge.optimize`` (limits, extractor, device, ...) except ``rules``; the
    saturation and extraction caches are off unless ``cache=True``: the table times them."""
    _check(mode, jobs, repeats)
    names = None if rules is None else [rs.name for rs in rulesets.select(list(rules))]
    runs = None if names is None else combinations(names, mode)  # bad names or too many sets: fail before work
    opts = Options.of(**{"cache": False, **options})
    captured = frontend.capture(fn, example_inputs, fold_params=opts.search.fold_constants)
    # resolved here, once: a worker runs one thread, and this CPU's calibration is per thread count, so
    # workers left to resolve "cpu" priced their rows for another machine than this process's row
    opts = opts.with_(priced_device=cost.get_device(priced_device(opts, captured.graph, bound=captured.param_inputs)))
    done: dict[tuple[str, ...], dict] = {}
    if names is None:  # "all" is whatever optimize picks by default: learn it from that run
        report = optimize_captured(captured, opts).report
        names = list(report.rulesets)
        done[tuple(names)] = row_of(report)
        runs = combinations(names, mode)
    rows = _run_all(captured, opts, [sets for _, sets in runs], done, jobs, progress)
    for (label, _), row in zip(runs, rows):
        row["combination"] = label
    if measure if measure is not None else torch.cuda.is_available():
        _measure(rows, captured, opts, [sets for _, sets in runs], example_inputs, repeats)
    return AblationTable(rows, program=name or _name(fn), mode=mode, rulesets=names)


def _check(mode: str, jobs: int, repeats: int) -> None:
    if mode not in MODES:
        raise _unknown_mode(mode)
    for what, value in (("jobs", jobs), ("repeats", repeats)):
        if not isinstance(value, int) or value < 1:
            raise EqiforgeError(f"{what} must be a positive integer, got {value!r}")


def optimize_captured(captured, opts: Options):
    """The stages after capture, exactly as ``eqiforge.optimize`` runs them."""
    return compile_graph(captured.graph, captured.input_names, captured.out_spec, opts, StageTimer(),
                         bound=captured.param_inputs)


def row_of(report: Report) -> dict:
    """One table row from the report of one run."""
    kernels = sum(n for op, n in report.ops_after.items() if op not in NOT_KERNELS)
    return {
        "combination": "", "rule_sets": "+".join(report.rulesets), "enodes": report.enodes,
        "eclasses": report.eclasses, "iterations": report.iterations, "stop_reason": report.stop_reason,
        "saturate_s": report.stage_seconds.get("saturate", 0.0), "extract_s": report.stage_seconds.get("extract", 0.0),
        "predicted_us": report.predicted_after * 1e6, "speedup": report.speedup, "kernels": kernels,
        "measured_us": None,
    }


def _run_all(captured, opts: Options, runs: list[tuple[str, ...]], done: dict, jobs: int,
             progress: bool) -> list[dict]:
    """Rows in ``runs`` order (those in ``done`` reused); in this process when ``jobs`` is 1, else in workers."""
    rows = [dict(done[sets]) if sets in done else None for sets in runs]
    todo = [k for k, row in enumerate(rows) if row is None]
    if jobs == 1 or len(todo) <= 1:
        _collect(rows, ((k, _row(captured, opts, runs[k])) for k in todo), progress)
        return rows
    ctx = multiprocessing.get_context("fork")  # workers inherit `captured`: nothing is pickled
    with cf.ProcessPoolExecutor(min(jobs, len(todo)), mp_context=ctx, initializer=_start_worker,
                                initargs=(captured, opts)) as pool:
        futures = {pool.submit(_worker_row, runs[k]): k for k in todo}  # forks here, before the bar's thread
        _collect(rows, ((futures[f], f.result()) for f in cf.as_completed(futures)), progress)
    return rows


def _collect(rows: list, results, progress: bool) -> None:
    """Put each (index, row) of ``results`` in place as it arrives, under a progress bar."""
    from tqdm import tqdm
    with tqdm(total=len(rows), initial=sum(row is not None for row in rows), desc="ablation", unit="run",
              disable=None if progress else True) as bar:  # None: shown on a terminal only
        for k, row in results:
            rows[k] = row
            bar.update(1)


def _row(captured, opts: Options, sets: tuple[str, ...]) -> dict:
    return row_of(optimize_captured(captured, opts.with_(rules=sets)).report)


def _start_worker(captured, opts: Options) -> None:
    torch.set_num_threads(1)  # one core per worker; also keeps a forked OpenMP pool out of the way
    _WORKER.update(captured=captured, opts=opts)


def _worker_row(sets: tuple[str, ...]) -> dict:
    return _row(_WORKER["captured"], _WORKER["opts"], sets)


def _measure(rows: list[dict], captured, opts: Options, runs, example_inputs, repeats: int) -> None:
    """Fill ``measured_us``: each combination's module rebuilt here and timed alone (median of repeats)."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    inputs = tuple(t.to(device) for t in example_inputs)
    for row, sets in zip(rows, runs):
        module = optimize_captured(captured, opts.with_(rules=sets)).to(device)
        row["measured_us"] = median_seconds(module, inputs, repeats) * 1e6


def median_seconds(module, inputs, repeats: int) -> float:
    """Median wall time of ``module(*inputs)`` over ``repeats`` calls after two warm-up calls."""
    cuda = any(t.is_cuda for t in inputs)
    times = []
    with torch.no_grad():
        for k in range(repeats + 2):
            if cuda:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            module(*inputs)
            if cuda:
                torch.cuda.synchronize()
            if k >= 2:
                times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _name(fn) -> str:
    return getattr(fn, "__name__", None) or type(fn).__name__
