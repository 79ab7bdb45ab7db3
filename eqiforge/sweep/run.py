"""Choosing an executor, and the resumable sweep.

:func:`run_sweep` appends each result to a results file as it arrives and returns the results in task order, so
a sweep gives the same table whatever executed it, and a sweep started again skips the ids the file holds from
the same code (:func:`code_digest`).
"""
from __future__ import annotations

import collections
import functools
import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable

from tqdm import tqdm

from .. import __version__
from ..errors import EqiforgeError

from .executor import Executor, LocalExecutor
from .ray_executor import RayExecutor
from .records import Finished, Task, is_failure

CLUSTERS = ("local", "ray")


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


@functools.cache
def code_digest() -> str:
    """A digest of this version, the package's source and the rule files: a stored result holds only while all
    three are unchanged, so that an edit or an upgrade that keeps the version number runs the tasks again."""
    from ..egraph import rulesets  # egglog: only once a results file is read or written
    h = hashlib.sha256(__version__.encode())
    package = Path(__file__).resolve().parent.parent
    for folder, pattern in ((package, "*.py"), (rulesets.rules_dir(), "*.egg")):
        for path in sorted(folder.rglob(pattern)):
            h.update(path.relative_to(folder).as_posix().encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def stored_results(path: Path, code: str | None = None) -> dict[str, Any]:
    """id -> result of every complete line of a results file (a line cut short by an interruption is skipped);
    with ``code``, only the lines written by that :func:`code_digest`."""
    return _results_of(_stored_lines(path), code)


def _stored_lines(path: Path) -> dict[str, dict]:
    """id -> the last complete line of that id in a results file."""
    found = {}
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                continue
            found[entry["id"]] = entry
    return found


def _results_of(lines: dict[str, dict], code: str | None) -> dict[str, Any]:
    return {i: entry["result"] for i, entry in lines.items() if code is None or entry.get("code") == code}


def run_sweep(executor: Executor, fn: Callable[[Task], Any], tasks: list[Task], results_path: str | Path,
              failed: Callable[[Any], bool] = is_failure, desc: str = "sweep", *, timed: bool = False,
              timeout_s: float | None = None, progress: bool = True) -> list:
    """Run the tasks whose id ``results_path`` does not hold yet from this code, appending ``{"id", "result",
    "node", "code"}`` lines as results arrive; the results of all ``tasks``, in task order. ``timed`` and
    ``timeout_s`` are the executor's (``Executor.map``); with ``progress``, a bar on stderr counts the tasks done,
    ``failed`` ones (timeouts and crashes by default), those running, and the tasks each node finished."""
    ids = [task.id for task in tasks]
    if len(set(ids)) != len(ids):
        raise EqiforgeError("a sweep's task ids must be unique")
    path = Path(results_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = _stored_lines(path)
    results = _results_of(lines, code_digest())
    stale = len(lines) - len(results)
    if stale:
        print(f"{path}: {stale} results were written by other eqiforge code or rules: those tasks run again",
              file=sys.stderr)
    todo = [task for task in tasks if task.id not in results]
    failures = sum(failed(results[i]) for i in ids if i in results)
    by_node = collections.Counter()
    cut_short = path.exists() and path.stat().st_size and not path.read_bytes().endswith(b"\n")
    # only what was asked: executors beside these (the fuzz campaign's pool, which times its own jobs) take neither
    asked = {name: value for name, value in (("timed", timed), ("timeout_s", timeout_s)) if value}
    with open(path, "a") as log, tqdm(total=len(tasks), initial=len(tasks) - len(todo), unit="task", desc=desc,
                                      postfix={"failed": failures}, disable=not progress) as bar:
        if cut_short:
            log.write("\n")  # the interrupted line stays alone (and skipped)
        for pair in executor.map(fn, todo, **asked):
            done = pair if isinstance(pair, Finished) else Finished(*pair)  # the fuzz pool's are plain pairs
            task, result = done
            log.write(json.dumps({"id": task.id, "result": result, "node": done.node, "code": code_digest()}) + "\n")
            log.flush()
            results[task.id] = result
            failures += failed(result)
            by_node[done.node or "?"] += 1
            running_now = {} if done.running is None else {"running": done.running}
            bar.set_postfix({"failed": failures, **running_now, **by_node}, refresh=False)
            bar.update(1)
    return [results[i] for i in ids]
