"""What a sweep is made of: tasks, and the record of a task that failed, plain and serialisable."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Task:
    """One unit of a sweep: ``id`` is stable across runs (the results file is keyed by it), ``payload`` is what
    the task function needs (picklable; plain data where it can be)."""
    id: str
    kind: str
    payload: Any


def crash(error: BaseException | str) -> dict:
    """The result of a task that raised or whose worker died (after the executor's retries)."""
    text = f"{type(error).__name__}: {error}" if isinstance(error, BaseException) else error
    return {"status": "crash", "error": text}
