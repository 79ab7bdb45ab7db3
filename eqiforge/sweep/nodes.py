"""Where a sweep's task runs: its node's name (for progress, and for the results that a node measured) and the
CPUs its executor reserved for it (a timed task holds its node's, and times with that many threads)."""
from __future__ import annotations

import socket
import sys

_HELD: dict = {}  # in a worker, while a task runs: what its executor reserved for it


def this_node() -> str:
    """This process's node: on Ray its IP and the start of its node id (two nodes may share an IP), else the
    machine's host name."""
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        return f"{ray.util.get_node_ip_address()}/{ray.get_runtime_context().get_node_id()[:8]}"
    return socket.gethostname()


def task_cpus() -> int | None:
    """The CPUs the executor reserved for the running task (a timed task: all of its node's); None where it
    reserved none in particular."""
    return _HELD.get("cpus")


def run_on_node(fn, task, cpus: int | None) -> tuple:
    """``(fn(task), this_node())``: a task's body in a worker, with ``task_cpus()`` saying ``cpus`` meanwhile."""
    _HELD["cpus"] = cpus
    try:
        return fn(task), this_node()
    finally:
        _HELD.clear()
