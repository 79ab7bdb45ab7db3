"""The executor interface and the local executor.

An executor runs a sweep's :class:`Task` records with a module-level task function that returns a plain,
JSON-serialisable result: ``map(fn, tasks)`` yields a :class:`Finished` per task as tasks finish, in any order.
A task that raises, or that a worker dies under more often than the retries allow, comes back as a crash
record, and one that runs past ``timeout_s`` as a timeout record: never lost, never a hung sweep. ``timed``
tasks are measurements: no two of them run on one node at once, nor beside another task of the same map.
An executor keeps its workers from its first map until it is closed (``with executor: ...``), so the maps of
one study (optimize, then time) start them once.
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import multiprocessing
import os
import signal
import socket
import threading
import time
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Callable, Iterator, Protocol

from .nodes import run_on_node
from .records import Finished, Task, crash, timeout

_STARTS = None  # in a local worker: the queue on which it says which task it starts


class Executor(Protocol):
    def map(self, fn: Callable[[Task], Any], tasks: list[Task], *, timed: bool = False,
            timeout_s: float | None = None) -> Iterator[Finished]:
        """A :class:`Finished` pair ``(task, result)`` for every task, as they finish."""

    def close(self) -> None:
        """Let the workers go."""

    def nodes(self) -> list[str]:
        """The names of the nodes tasks may run on (``this_node()`` in a task there), one per node."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _start_worker(starts) -> None:
    """A local worker's start: the queue it reports task starts on, and a watch on its parent."""
    global _STARTS
    _STARTS = starts
    threading.Thread(target=_exit_with_parent, args=(os.getppid(),), daemon=True).start()


def _exit_with_parent(parent: int, every_s: float = 1.0) -> None:
    """End this worker once its parent is gone (killed, say: a pool's workers outlived a main process the OOM
    killer ended, each still holding gigabytes, for an hour)."""
    while os.getppid() == parent:
        time.sleep(every_s)
    os._exit(1)


def _run_reporting(fn, task: Task, cpus: int | None) -> tuple:
    """``run_on_node`` in a local worker, which first says which task it starts, in which process, when."""
    _STARTS.put((task.id, os.getpid(), time.monotonic()))
    return run_on_node(fn, task, cpus)


class LocalExecutor(Executor):
    """Spawned worker processes on this machine (no dependency). At most ``workers`` tasks are in flight (timed
    ones: one, holding the machine), so where a worker dies the culprit is among them: each is run again up to
    ``max_retries`` times, then a crash. A task past its timeout (counted from when its worker starts it) has
    its worker killed; the pool breaks and starts again, and the other tasks in flight run again, no retry
    counted. Workers start at the first map and serve the later ones (with this process's environment then)."""

    POLL_S = 0.2  # how often timeouts are checked

    def __init__(self, workers: int = 2, max_retries: int = 1):
        self.workers, self.max_retries = max(1, workers), max_retries
        self.node = socket.gethostname()
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None
        self._starts = None

    def nodes(self) -> list[str]:
        return [self.node]

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def _ready(self) -> concurrent.futures.ProcessPoolExecutor:
        if self._pool is None:
            context = multiprocessing.get_context("spawn")
            self._starts = context.SimpleQueue()
            self._pool = concurrent.futures.ProcessPoolExecutor(self.workers, mp_context=context,
                                                                initializer=_start_worker, initargs=(self._starts,))
        return self._pool

    def _read_starts(self, started: dict) -> None:
        while not self._starts.empty():
            task_id, pid, at = self._starts.get()
            started[task_id] = (pid, at)

    def map(self, fn, tasks, *, timed=False, timeout_s=None):
        limit, cpus = (1, len(os.sched_getaffinity(0))) if timed else (self.workers, None)
        todo = [(task, 0) for task in reversed(tasks)]  # a stack: popped in task order
        running: dict[concurrent.futures.Future, tuple[Task, int]] = {}
        started: dict[str, tuple[int, float]] = {}  # task id -> (its worker's pid, when it started)

        def overdue(future) -> bool:
            task_id = running[future][0].id
            return (timeout_s is not None and not future.done() and task_id in started
                    and time.monotonic() - started[task_id][1] > timeout_s)

        def finished(task, result, node: str = self.node) -> Finished:
            return Finished(task, result, node, sum(t.id in started for t, _ in running.values()))

        try:
            while todo or running:
                pool = self._ready()
                while todo and len(running) < limit:
                    task, attempt = todo.pop()
                    running[pool.submit(_run_reporting, fn, task, cpus)] = (task, attempt)
                wait_s = None if timeout_s is None else self.POLL_S
                done, _ = concurrent.futures.wait(running, wait_s, concurrent.futures.FIRST_COMPLETED)
                self._read_starts(started)
                late = {future for future in running if overdue(future)}
                for future in late:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(started[running[future][0].id][0], signal.SIGKILL)
                broke = late or any(isinstance(f.exception(), BrokenProcessPool) for f in done)
                if broke:
                    done = concurrent.futures.wait(running).done  # the pool broke under every task in flight
                for future in done:
                    task, attempt = running.pop(future)
                    started.pop(task.id, None)
                    error = future.exception()
                    if not isinstance(error, BrokenProcessPool):
                        yield finished(task, crash(error)) if error else finished(task, *future.result())
                    elif future in late:
                        yield finished(task, timeout(timeout_s))
                    elif late:  # lost to the kill of another task's worker: not its fault
                        todo.append((task, attempt))
                    elif attempt < self.max_retries:
                        todo.append((task, attempt + 1))
                    else:
                        yield finished(task, crash(f"its worker process died ({error}), {attempt + 1} times"))
                if broke:
                    self.close()
        finally:
            if running and self._pool is not None:  # the caller stopped early: tasks in flight are abandoned
                self._pool.shutdown(wait=False, cancel_futures=True)
                self._pool = None
