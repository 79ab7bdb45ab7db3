"""The executor interface, the local executor and the resumable sweep.

A sweep is a list of :class:`Task` records and a module-level function that runs one task and returns a plain
JSON-serialisable result. ``Executor.map(fn, tasks)`` yields ``(task, result)`` as tasks finish, in any order;
:func:`run_sweep` appends each result to a results file as it arrives and returns the results in task order,
so a sweep gives the same table whatever executed it, and a sweep started again skips the ids the file holds.
A task that raises, or that a worker dies under more often than the retries allow, comes back as a
:func:`crash` record: never lost, never a hung sweep.
"""
from __future__ import annotations

import concurrent.futures
import json
import multiprocessing
import os
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any, Callable, Iterator, Protocol

from tqdm import tqdm

from ..errors import EqiforgeError

from .ray_executor import RayExecutor
from .records import Task, crash

CLUSTERS = ("local", "ray")


class Executor(Protocol):
    def map(self, fn: Callable[[Task], Any], tasks: list[Task]) -> Iterator[tuple[Task, Any]]:
        """``(task, fn(task))`` for every task, as they finish."""


class LocalExecutor:
    """Spawned worker processes on this machine (no dependency). At most ``workers`` tasks are in flight, so where
    a worker dies the culprit is among them: each is run again up to ``max_retries`` times, then a crash."""

    def __init__(self, workers: int = 2, max_retries: int = 1):
        self.workers, self.max_retries = max(1, workers), max_retries

    def _pool(self) -> concurrent.futures.ProcessPoolExecutor:
        return concurrent.futures.ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn"))

    def map(self, fn, tasks):
        todo = [(task, 0) for task in reversed(tasks)]  # a stack: popped in task order
        running: dict[concurrent.futures.Future, tuple[Task, int]] = {}
        pool = self._pool()
        try:
            while todo or running:
                while todo and len(running) < self.workers:
                    task, attempt = todo.pop()
                    running[pool.submit(fn, task)] = (task, attempt)
                done, _ = concurrent.futures.wait(running, return_when=concurrent.futures.FIRST_COMPLETED)
                if any(isinstance(f.exception(), BrokenProcessPool) for f in done):
                    done = concurrent.futures.wait(running).done  # the pool broke under every task in flight
                lost = []
                for future in done:
                    task, attempt = running.pop(future)
                    error = future.exception()
                    if isinstance(error, BrokenProcessPool):
                        lost.append((task, attempt, error))
                    else:
                        yield task, crash(error) if error else future.result()
                if lost:
                    pool.shutdown(wait=True)
                    pool = self._pool()
                    for task, attempt, error in lost:
                        if attempt < self.max_retries:
                            todo.append((task, attempt + 1))
                        else:
                            yield task, crash(f"its worker process died ({error}), {attempt + 1} times")
        finally:
            pool.shutdown(wait=True, cancel_futures=True)


def executor_from(cluster: str | None = None, address: str | None = None, workers: int = 2,
                  local: Executor | None = None) -> Executor:
    """The executor a command's ``--cluster`` / ``--address`` / ``--workers`` (or ``$EQIFORGE_CLUSTER``) ask for:
    Ray where ``cluster`` is "ray" or an address is given, else ``local`` (default: local worker processes)."""
    cluster = cluster or os.environ.get("EQIFORGE_CLUSTER") or ("ray" if address else "local")
    if cluster not in CLUSTERS:
        raise EqiforgeError(f"unknown cluster {cluster!r}: one of {', '.join(CLUSTERS)}")
    if cluster == "ray" or address:
        return RayExecutor(address)
    return local or LocalExecutor(workers)


def stored_results(path: Path) -> dict[str, Any]:
    """id -> result of every complete line of a results file (a line cut short by an interruption is skipped)."""
    found = {}
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                continue
            found[entry["id"]] = entry["result"]
    return found


def is_crash(result) -> bool:
    return isinstance(result, dict) and result.get("status") == "crash"


def run_sweep(executor: Executor, fn: Callable[[Task], Any], tasks: list[Task], results_path: str | Path,
              failed: Callable[[Any], bool] = is_crash, desc: str = "sweep") -> list:
    """Run the tasks whose id ``results_path`` does not hold yet, appending ``{"id", "result"}`` lines as results
    arrive (progress on stderr: tasks done, ``failed`` ones); the results of all ``tasks``, in task order."""
    ids = [task.id for task in tasks]
    if len(set(ids)) != len(ids):
        raise EqiforgeError("a sweep's task ids must be unique")
    path = Path(results_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    results = stored_results(path)
    todo = [task for task in tasks if task.id not in results]
    failures = sum(failed(results[i]) for i in ids if i in results)
    cut_short = path.exists() and path.stat().st_size and not path.read_bytes().endswith(b"\n")
    with open(path, "a") as log, tqdm(total=len(tasks), initial=len(tasks) - len(todo), unit="task", desc=desc,
                                      postfix={"failed": failures}) as bar:
        if cut_short:
            log.write("\n")  # the interrupted line stays alone (and skipped)
        for task, result in executor.map(fn, todo):
            log.write(json.dumps({"id": task.id, "result": result}) + "\n")
            log.flush()
            results[task.id] = result
            failures += failed(result)
            bar.set_postfix(failed=failures)
            bar.update(1)
    return [results[i] for i in ids]
