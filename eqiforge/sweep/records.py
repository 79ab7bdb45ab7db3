"""What a sweep is made of: tasks, what an executor says of a finished one, and the records of tasks that failed,
plain and serialisable."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

FAILED = ("crash", "timeout")  # the statuses of the records an executor makes for a task that gave no result


@dataclass(frozen=True)
class Task:
    """One unit of a sweep: ``id`` is stable across runs (the results file is keyed by it), ``payload`` is what
    the task function needs (picklable; plain data where it can be)."""
    id: str
    kind: str
    payload: Any


class Finished(tuple):
    """What an executor yields for a finished task: the pair ``(task, result)``, as ``for task, result in
    executor.map(...)`` reads it, which also says which node ran the task ("" where it cannot tell) and how many
    tasks of the same map were still running then (None where it cannot tell)."""

    def __new__(cls, task: Task, result: Any, node: str = "", running: int | None = None):
        pair = super().__new__(cls, (task, result))
        pair.node, pair.running = node, running
        return pair

    @property
    def task(self) -> Task:
        return self[0]

    @property
    def result(self) -> Any:
        return self[1]


def crash(error: BaseException | str) -> dict:
    """The result of a task that raised or whose worker died (after the executor's retries)."""
    text = f"{type(error).__name__}: {error}" if isinstance(error, BaseException) else error
    return {"status": "crash", "error": text}


def timeout(seconds: float) -> dict:
    """The result of a task stopped because it ran longer than its timeout."""
    return {"status": "timeout", "error": f"it ran longer than its timeout of {seconds:g} s and was stopped"}


def is_failure(result) -> bool:
    """Whether ``result`` is an executor's record of a task that gave no result (a crash or a timeout)."""
    return isinstance(result, dict) and result.get("status") in FAILED
