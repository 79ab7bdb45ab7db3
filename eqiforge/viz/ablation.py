"""Rule-set ablation: run the optimizer over combinations of rule sets and tabulate what each buys and costs.

Every combination is a task of one sweep (``eqiforge.sweep``): a plain record (the program, its rule sets, the
options) that a worker runs through the stages ``eqiforge.optimize`` runs after capture, returning one plain
row. Rows merge in task order, so the same inputs give the same table (timings aside) in ``jobs`` local worker
processes (the default) or on a Ray cluster (``executor``). Without ``rules``, "all" is the rule sets
``eqiforge.optimize`` uses by default (its search schedule's). A zoo of programs is one sweep of every
program's combinations (:func:`run_combinations`, viz/zoo.py).

The program is captured here once: to price every row for the device this process would, and to fail before
any work. Workers get the captured program where it pickles small; else they load it themselves from a
:class:`ProgramSource` (the command line's example or file; a zoo's programs always, by name), once per worker,
or capture the callable given again.

Measuring is optional (``measure``; default: only where CUDA is available): after the optimizations, each
combination is a timed task (``timed=True``: its node to itself) that rebuilds its module (the pipeline is
deterministic: the same plan) and times it, so timings never compete with other tasks; each measured row
names its node.
"""
from __future__ import annotations

import contextlib
import pickle
import statistics
import tempfile
import time
from dataclasses import dataclass, replace
from itertools import combinations as choose
from pathlib import Path
from typing import Callable

import torch

from .. import cost, frontend, sweep
from ..egraph import rulesets
from ..errors import EqiforgeError
from ..pipeline.compile import compile_graph, priced_device
from ..pipeline.options import Options
from ..pipeline.report import Report, StageTimer
from ..pipeline.search import Search
from .table import AblationTable

MODES = ("all", "leave-one-out", "each", "subsets")
MAX_SUBSET_SETS = 6  # 2^6 = 64 runs
NOT_KERNELS = ("Input", "Param", "Fill")  # plan nodes that launch nothing
SHIP_BYTES = 32 * 2 ** 20  # a larger captured program goes to workers as its ProgramSource, where there is one


@dataclass(frozen=True)
class ProgramSource:
    """How a worker loads a program: ``load(*args)`` returns (callable, example inputs); ``load`` is a
    module-level function and ``args`` plain values (names, paths), so it pickles small and compares by value."""
    load: Callable
    args: tuple = ()


@dataclass(frozen=True)
class Combination:
    """An ablation task's payload: one program under one combination of rule sets; timed where ``repeats``."""
    program: object  # a ProgramSource, or a pair: (captured program or callable, example inputs)
    rules: tuple[str, ...]
    opts: Options
    repeats: int = 0


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
           executor: sweep.Executor | None = None, results_path=None, source: ProgramSource | None = None,
           **options) -> AblationTable:
    """Optimize ``fn`` at ``example_inputs`` once per rule-set combination of ``mode`` over ``rules`` (default:
    the rule sets ``eqiforge.optimize`` uses by default); return the table. The combinations run on
    ``executor`` (default: ``jobs`` local worker processes) and their rows are kept in ``results_path`` (default:
    a temporary file; a file of an interrupted run resumes it); ``source`` is how workers load the program
    where the captured one is large or does not pickle. ``options`` are those of ``eqiforge.optimize`` (limits,
    extractor, device, ...) except ``rules``; the saturation and extraction caches are off unless ``cache=True``:
    the table times them."""
    opts, names, runs = setup(rules, mode, jobs, repeats, options)
    name = name or getattr(fn, "__name__", None) or type(fn).__name__
    timed = measure if measure is not None else torch.cuda.is_available()
    captured, opts = prepared(fn, example_inputs, opts)
    program = shipped(captured, fn, example_inputs, source)
    with executor_or_local(executor, jobs) as runner:
        [rows] = run_combinations(runner, {name: (program, runs, opts)}, results_path, progress,
                                  repeats if timed else 0).values()
    return AblationTable(rows, program=name, mode=mode, rulesets=names)


def setup(rules, mode: str, jobs: int, repeats: int, options: dict) -> tuple[Options, list[str], list]:
    """The options of an ablation, its rule sets and its runs (label, rule sets), the arguments checked before
    any work."""
    if mode not in MODES:
        raise _unknown_mode(mode)
    for what, value in (("jobs", jobs), ("repeats", repeats)):
        if not isinstance(value, int) or value < 1:
            raise EqiforgeError(f"{what} must be a positive integer, got {value!r}")
    opts = Options.of(**{"cache": False, **options})
    names = rule_names(rules, opts)
    return opts, names, combinations(names, mode)


def rule_names(rules, opts: Options) -> list[str]:
    """The rule sets called ``rules`` (checked), else those ``eqiforge.optimize`` runs under ``opts`` (its search
    schedule's: the prices do not choose them, so any cost model will do)."""
    if rules is not None:
        return [rs.name for rs in rulesets.select(list(rules))]
    return Search.of(opts, cost.get_cost_model(kernels=opts.runtime.entry.kernels)).rulesets


def prepared(fn, example_inputs, opts: Options) -> tuple:
    """``fn`` captured here, and ``opts`` with the device its plans are priced for resolved here: a worker runs
    one thread, and this CPU's calibration is per thread count, so workers left to resolve "cpu" would price
    their rows for another machine than this process's."""
    captured = frontend.capture(fn, example_inputs, fold_params=opts.search.fold_constants)
    device = cost.get_device(priced_device(opts, captured.graph, bound=captured.param_inputs))
    return captured, opts.with_(priced_device=device)


def shipped(captured, fn, example_inputs, source: ProgramSource | None = None):
    """What workers get of a program: the captured program where it pickles to at most SHIP_BYTES (each task
    carries a copy; a worker then captures nothing), else ``source``, else the captured program or, where that
    does not pickle (its externs may hold PyTorch objects), the callable to capture again."""
    try:
        size = len(pickle.dumps((captured, example_inputs)))
    except Exception:  # noqa: BLE001 - what cannot be pickled raises one of several types
        size = None
    if size is not None and (size <= SHIP_BYTES or source is None):
        return captured, example_inputs
    return source or _pickled_or_error(fn, example_inputs)


def _pickled_or_error(fn, example_inputs) -> tuple:
    try:
        pickle.dumps((fn, example_inputs))
    except Exception as err:  # noqa: BLE001 - as above
        raise EqiforgeError(f"ablation runs each combination in a worker process, and neither the captured program "
                            f"nor {fn!r} pickles ({err}): define it at module level, or give a ProgramSource") from err
    return fn, example_inputs


@contextlib.contextmanager
def executor_or_local(executor, jobs: int):
    """``executor``, else ``jobs`` local worker processes, closed after."""
    if executor is not None:
        yield executor
        return
    with sweep.LocalExecutor(jobs) as local:
        yield local


def run_combinations(executor, programs: dict, results_path=None, progress: bool = False,
                     repeats: int = 0) -> dict[str, list[dict]]:
    """Rows per program of ``programs`` (name -> (what workers get of it, [(label, rule sets)], options)): every
    program's combinations in one sweep, in program then combination order; with ``repeats``, then each one
    timed (a timed task), filling its row's ``measured_us`` and ``node``. A task that failed is an error."""
    tasks = [sweep.Task(f"{name}/{label}", "ablation", Combination(program, sets, opts))
             for name, (program, runs, opts) in programs.items() for label, sets in runs]
    with _results_file(results_path) as path:
        rows = _succeeded(sweep.run_sweep(executor, optimize_task, tasks, path, desc="ablation",
                                          progress=progress), tasks)
        if repeats:
            timed = [sweep.Task(f"{task.id}/timed", "ablation timing", replace(task.payload, repeats=repeats))
                     for task in tasks]
            measured = sweep.run_sweep(executor, measure_task, timed, path, desc="timing", timed=True,
                                       progress=progress)
            for row, times in zip(rows, _succeeded(measured, timed)):
                row.update(times)
    ordered = iter(rows)
    return {name: [{**next(ordered), "combination": label} for label, _ in runs]
            for name, (_, runs, _) in programs.items()}


@contextlib.contextmanager
def _results_file(path):
    if path is not None:
        yield Path(path)
        return
    with tempfile.TemporaryDirectory(prefix="eqiforge-ablation-") as folder:
        yield Path(folder) / sweep.cli.RESULTS


def _succeeded(results: list, tasks: list) -> list:
    failed = [f"{task.id}: {result['error']}" for task, result in zip(tasks, results) if sweep.is_failure(result)]
    if failed:
        raise EqiforgeError(f"{len(failed)} of {len(tasks)} ablation runs failed; " + "; ".join(failed[:3]))
    return results


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
        "measured_us": None, "node": None,
    }


def optimize_task(task: sweep.Task) -> dict:
    """An ablation task, in a worker: the combination optimized on one core (one per worker); its row."""
    torch.set_num_threads(1)
    run = task.payload
    captured, _ = loaded(run.program, run.opts.search.fold_constants)
    return row_of(optimize_captured(captured, run.opts.with_(rules=run.rules)).report)


def measure_task(task: sweep.Task) -> dict:
    """A timed task, in a worker holding its node: the combination's module rebuilt and timed there with the
    node's cores (median of ``repeats`` calls); ``measured_us`` and the ``node``."""
    cpus = sweep.task_cpus()
    if cpus:
        torch.set_num_threads(cpus)
    run = task.payload
    captured, example_inputs = loaded(run.program, run.opts.search.fold_constants)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    module = optimize_captured(captured, run.opts.with_(rules=run.rules)).to(device)
    inputs = tuple(t.to(device) for t in example_inputs)
    return {"measured_us": median_seconds(module, inputs, run.repeats) * 1e6, "node": sweep.this_node()}


_LOADED: dict = {}  # in a worker: the program it loaded last from a ProgramSource (its tasks mostly share one)


def loaded(program, fold: bool) -> tuple:
    """(captured program, example inputs) of a task's ``program``: as shipped, captured, or loaded and captured."""
    if isinstance(program, ProgramSource):
        if (program, fold) not in _LOADED:
            fn, example_inputs = program.load(*program.args)
            _LOADED.clear()
            _LOADED[program, fold] = frontend.capture(fn, example_inputs, fold_params=fold), example_inputs
        return _LOADED[program, fold]
    first, example_inputs = program
    if isinstance(first, frontend.Captured):
        return program
    return frontend.capture(first, example_inputs, fold_params=fold), example_inputs


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
