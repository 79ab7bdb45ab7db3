"""Rule synthesis as tasks of a sweep (``eqiforge.sweep``): the parts that take long run where the executor puts
them, in fixed shards, so that a run gives the same rules in this process, in local workers and on Ray.

- **enumeration** of the largest size, one task per root operator: each rebuilds the smaller sizes (the
  same every time, seconds) and evaluates its operator's terms; what comes back is each term's fingerprint or
  why it was dropped, filed here in enumeration order (``candidates.Enumerator.classify``), so the classes and
  candidates are those of one process;
- **derivation** (``derive.derivable``), one task per chunk of ``derive.CHUNK`` candidates (``CHUNK_WITH_KEPT``
  with kept rules): chunks are cut here, so each graph holds the same candidates whoever saturates it;
- **verification** (``verify.verify``, sympy's proofs the slowest part), ``VERIFY_CHUNK`` candidates a task.

Without an executor each task runs in this process, in order.
"""
from __future__ import annotations

from ..errors import EqiforgeError
from ..sweep import Task, is_failure
from . import derive
from .candidates import Enumerator
from .terms import parse_vars, symbols_of
from .verify import verify

VERIFY_CHUNK = 25
#: a step of fewer tasks runs in this process: starting an executor's workers (each imports torch and egglog)
#: costs more than a few tasks' worth of parallel work saves
MIN_TASKS = 4


def run_tasks(executor, fn, tasks: list[Task], finished=None) -> list:
    """``fn``'s result of each task, in task order: in this process without an executor or with fewer than
    MIN_TASKS tasks; ``finished(result)`` is called as each comes in (progress). A task that crashed stops the
    synthesis (a shard's result is part of every later step)."""
    here = executor is None or len(tasks) < MIN_TASKS
    results = {}
    for task, result in ((t, fn(t)) for t in tasks) if here else executor.map(fn, tasks):
        if is_failure(result):
            raise EqiforgeError(f"synthesis task {task.id} failed: {result.get('error', result['status'])}")
        results[task.id] = result
        if finished is not None:
            finished(result)
    return [results[task.id] for task in tasks]


def last_size_outcomes(executor, vars_spec: str, ops: list[str], size: int, seed: int):
    """For ``enumerate_candidates(last_outcomes=...)``: the last size's outcomes, a task per root operator (None
    without an executor: the enumeration assesses them itself, without rebuilding the smaller sizes)."""
    if executor is None:
        return None

    def assess(_enumerator) -> dict[str, list[str]]:
        tasks = [Task(f"enumerate-{size}-{op}", "synthesis-enumeration", (vars_spec, tuple(ops), size, seed, op))
                 for op in ops]
        return dict(zip(ops, run_tasks(executor, assess_operator, tasks)))
    return assess


def assess_operator(task: Task) -> list[str]:
    """The fingerprint (or DROPPED reason) of every term of ``size`` whose root is ``op``, in enumeration order."""
    vars_spec, ops, size, seed, op = task.payload
    vars_ = parse_vars(vars_spec)
    enumerator = Enumerator(vars_, symbols_of(vars_), seed)
    for smaller in range(1, size):
        enumerator.grow(list(ops), smaller)
    return [enumerator.assess(term)[0] for term in enumerator.terms(op, size)]


def derivable(executor, candidates: list, symbols: list[str], extra_rules: list[str] = (), progress=None,
              without: tuple[str, ...] = ()) -> tuple[list[bool], list[str]]:
    """``derive.derivable`` of ``candidates``, a task per chunk."""
    size = derive.CHUNK_WITH_KEPT if extra_rules else derive.CHUNK
    tasks = [Task(f"derive-{start}", "synthesis-derivation",
                  (candidates[start:start + size], symbols, list(extra_rules), without))
             for start in range(0, len(candidates), size)]
    joined, limited = [], []
    for part, stops in run_tasks(executor, derive_chunk, tasks,
                                 finished=None if progress is None else lambda result: progress.update(len(result[0]))):
        joined += part
        limited += stops
    return joined, limited


def derive_chunk(task: Task) -> tuple[list[bool], list[str]]:
    candidates, symbols, extra_rules, without = task.payload
    return derive.derivable(candidates, symbols, extra_rules, without=without)


def verifications(executor, candidates: list, vars_: list, symbols: list[str], seed: int) -> list:
    """``verify.verify`` of each candidate, ``VERIFY_CHUNK`` a task."""
    tasks = [Task(f"verify-{start}", "synthesis-verification",
                  (candidates[start:start + VERIFY_CHUNK], vars_, symbols, seed))
             for start in range(0, len(candidates), VERIFY_CHUNK)]
    return [v for part in run_tasks(executor, verify_chunk, tasks) for v in part]


def verify_chunk(task: Task) -> list:
    candidates, vars_, symbols, seed = task.payload
    return [verify(c.lhs, c.rhs, vars_, symbols, seed) for c in candidates]
