"""Rule synthesis as tasks of a sweep (``eqiforge.sweep``): the parts that take long run where the executor puts
them, in fixed shards, so that a run gives the same rules in this process, in local workers and on Ray.

- **enumeration** of the largest size, one task per root operator: each rebuilds the smaller sizes (the
  same every time, seconds) and evaluates its operator's terms; what comes back is each term's fingerprint or
  why it was dropped, filed here in enumeration order (``candidates.Enumerator.classify``), so the classes and
  candidates are those of one process;
- **derivation** (``derive.derivable``), one task per chunk of ``derive.CHUNK`` candidates (``CHUNK_WITH_KEPT``
  with kept rules): chunks are cut here, so each graph holds the same candidates whoever saturates it;
- **verification** (``verify.verify``, sympy's proofs the slowest part) of each candidate made general
  (``generalize.py``), ``VERIFY_CHUNK`` candidates a task.

Without an executor each task runs in this process, in order. With a results file (``--resume``) each finished
task's result is kept there under a digest of what it computed from, and a run started again skips it.
"""
from __future__ import annotations

import base64
import hashlib
import json
import pickle
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..errors import EqiforgeError
from ..sweep import Task, code_digest, is_failure, stored_results
from . import derive
from .candidates import Enumerator
from .generalize import generalized
from .terms import parse_vars, symbols_of
from .verify import verify

VERIFY_CHUNK = 25
#: a step of fewer tasks runs in this process while the executor has run none: starting its workers (each
#: imports torch and egglog) costs more than a few tasks' worth of parallel work saves; once they are up, two
#: tasks are worth sending (the redundancy pass at size 4 is sweeps of two or three)
MIN_TASKS = 4


@dataclass
class Step:
    """Where a step of a synthesis spent its time: its wall seconds, the tasks run in this process and through
    the executor, read from the results file, and the largest number of tasks one sweep of it had (what bounds
    how many nodes it can use)."""

    name: str
    seconds: float = 0.0
    here: int = 0
    sent: int = 0
    stored: int = 0
    widest: int = 0


class Runner:
    """Where a synthesis's tasks run: ``executor`` (a sweep executor; None: this process), and ``results``, a
    results file that keeps each finished task's result (pickled) under a digest of its function, its payload
    and :func:`~eqiforge.sweep.code_digest` (this version, the package's source, the rule files), so that a run
    interrupted and started again with the same options redoes only what did not finish, and a task whose inputs
    or code changed runs again. ``steps`` says where the time went."""

    def __init__(self, executor=None, results: str | Path | None = None):
        self.executor = executor
        self.results = None if results is None else Path(results)
        self._stored = {} if self.results is None else stored_results(self.results)
        self._context = code_digest() if self.results is not None else ""
        self.steps: dict[str, Step] = {}
        self._step = Step("other")
        self._warm = False  # the executor has run tasks: its workers are up

    @contextmanager
    def step(self, name: str):
        """Count the block's time and tasks under ``name`` (a step entered again adds to it)."""
        outer, self._step = self._step, self.steps.setdefault(name, Step(name))
        start = time.monotonic()
        try:
            yield
        finally:
            self._step.seconds += time.monotonic() - start
            self._step = outer

    def run(self, fn, tasks: list[Task], finished=None) -> list:
        """``fn``'s result of each task, in task order: in this process without an executor or with fewer than
        MIN_TASKS tasks to run (two once the executor's workers are up); ``finished(result)`` is called as each
        comes in (progress). A task that crashed stops the synthesis (a shard's result is part of every later
        step)."""
        keys = {task.id: self._key(fn, task) for task in tasks}
        results = {task.id: pickle.loads(base64.b64decode(self._stored[keys[task.id]])) for task in tasks
                   if keys[task.id] in self._stored}
        for result in results.values():
            if finished is not None:
                finished(result)
        todo = [task for task in tasks if task.id not in results]
        here = self.executor is None or len(todo) < (min(2, MIN_TASKS) if self._warm else MIN_TASKS)
        self._warm |= not here
        self._step.stored += len(tasks) - len(todo)
        self._step.widest = max(self._step.widest, len(todo))
        if here:
            self._step.here += len(todo)
        else:
            self._step.sent += len(todo)
        for task, result in ((t, fn(t)) for t in todo) if here else self.executor.map(fn, todo):
            if is_failure(result):
                raise EqiforgeError(f"synthesis task {task.id} failed: {result.get('error', result['status'])}")
            results[task.id] = result
            self._store(keys[task.id], result)
            if finished is not None:
                finished(result)
        return [results[task.id] for task in tasks]

    def _key(self, fn, task: Task) -> str:
        if self.results is None:
            return ""
        # repr, not pickle: a pickle depends on which objects the payload shares (a candidate read back from a
        # results file shares none), a dataclass's repr only on its values
        digest = hashlib.sha256(repr((fn.__module__, fn.__qualname__, task.payload, self._context)).encode())
        return f"{task.kind}-{digest.hexdigest()[:32]}"

    def _store(self, key: str, result) -> None:
        if self.results is None:
            return
        encoded = base64.b64encode(pickle.dumps(result)).decode()
        self.results.parent.mkdir(parents=True, exist_ok=True)
        with self.results.open("a") as f:
            f.write(json.dumps({"id": key, "result": encoded}) + "\n")
        self._stored[key] = encoded


def last_size_outcomes(runner: Runner, vars_spec: str, ops: list[str], size: int, seed: int):
    """For ``enumerate_candidates(last_outcomes=...)``: the last size's outcomes, a task per root operator (None
    without an executor: the enumeration assesses them itself, without rebuilding the smaller sizes)."""
    if runner.executor is None:
        return None

    def assess(_enumerator) -> dict[str, list[str]]:
        tasks = [Task(f"enumerate-{size}-{op}", "synthesis-enumeration", (vars_spec, tuple(ops), size, seed, op))
                 for op in ops]
        return dict(zip(ops, runner.run(assess_operator, tasks)))
    return assess


def assess_operator(task: Task) -> list[str]:
    """The fingerprint (or DROPPED reason) of every term of ``size`` whose root is ``op``, in enumeration order."""
    vars_spec, ops, size, seed, op = task.payload
    vars_ = parse_vars(vars_spec)
    enumerator = Enumerator(vars_, symbols_of(vars_), seed)
    for smaller in range(1, size):
        enumerator.grow(list(ops), smaller)
    return [enumerator.assess(term)[0] for term in enumerator.terms(op, size)]


def derivable(runner: Runner, candidates: list, symbols: list[str], extra_rules: list[str] = (), progress=None,
              without: tuple[str, ...] = ()) -> tuple[list[bool], list[str]]:
    """``derive.derivable`` of ``candidates``, a task per chunk."""
    size = derive.CHUNK_WITH_KEPT if extra_rules else derive.CHUNK
    chunks = [(candidates[start:start + size], list(extra_rules)) for start in range(0, len(candidates), size)]
    joined, limited = derivable_each(runner, chunks, symbols, progress, without)
    return [j for part in joined for j in part], limited


def derivable_each(runner: Runner, chunks: list[tuple[list, list[str]]], symbols: list[str], progress=None,
                   without: tuple[str, ...] = ()) -> tuple[list[list[bool]], list[str]]:
    """``derive.derivable`` of each (candidates, extra rules) of ``chunks``, a task each: the verdicts chunk by
    chunk, and the stop reasons."""
    tasks = [Task(f"derive-{n}", "synthesis-derivation", (candidates, symbols, rules, without))
             for n, (candidates, rules) in enumerate(chunks)]
    counted = None if progress is None else lambda result: progress.update(len(result[0]))
    joined, limited = [], []
    for part, stops in runner.run(derive_chunk, tasks, finished=counted):
        joined.append(part)
        limited += stops
    return joined, limited


def derive_chunk(task: Task) -> tuple[list[bool], list[str]]:
    candidates, symbols, extra_rules, without = task.payload
    return derive.derivable(candidates, symbols, extra_rules, without=without)


def verifications(runner: Runner, candidates: list, vars_: list, symbols: list[str], seed: int) -> list:
    """(the candidate made general, ``verify.verify`` of it) for each candidate (generalize.py), ``VERIFY_CHUNK``
    a task."""
    tasks = [Task(f"verify-{start}", "synthesis-verification",
                  (candidates[start:start + VERIFY_CHUNK], vars_, symbols, seed))
             for start in range(0, len(candidates), VERIFY_CHUNK)]
    return [v for part in runner.run(verify_chunk, tasks) for v in part]


def verify_chunk(task: Task) -> list:
    candidates, vars_, symbols, seed = task.payload
    general = [generalized(c, vars_, symbols, seed) for c in candidates]
    return [(c, verify(c.lhs, c.rhs, vars_, symbols, seed)) for c in general]
