"""Ray as a sweep's executor (``pip install 'eqiforge[cluster]'``): one remote call per task, with explicit CPU
resources and Ray's retries of tasks whose worker died. Ray is imported here only, when an executor is made.

A Ray instance the executor starts itself (no address, none running) is bound to the loopback address and has
no dashboard: a local cluster is never reachable from other machines. Ray 2.60 turns a node address of 127.0.0.1
into the machine's routable one unless ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` (its single-machine mode), which it
reads when it is first imported: an executor without an address sets it before importing Ray.
"""
from __future__ import annotations

import collections
import os
import time

from ..errors import EqiforgeError

from .executor import Executor
from .nodes import run_on_node
from .records import Finished, crash, timeout

LOOPBACK = "127.0.0.1"
SINGLE_MACHINE = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"  # "0": Ray keeps 127.0.0.1 as the node address


def import_ray(local: bool = False):
    """The ray module (``local``: in its single-machine mode, where this process imports it first), or an
    EqiforgeError saying how to install it."""
    if local:
        os.environ.setdefault(SINGLE_MACHINE, "0")
    try:
        import ray
    except ImportError as err:
        raise EqiforgeError("running on a Ray cluster needs Ray: pip install 'eqiforge[cluster]'") from err
    return ray


class RayExecutor(Executor):
    """Each task a remote call with ``num_cpus=cpus_per_task`` and ``max_retries`` on the cluster at ``address``
    (None: the one this process is connected to, else a new local one on 127.0.0.1, shut down by ``close``).

    No more tasks are submitted than the cluster has CPUs for, so a task starts about when it is submitted: its
    timeout counts from then (its worker's start included), and a timed-out task is stopped with
    ``ray.cancel(force=True)``, which kills its worker. A timed task holds a whole node: it asks for every CPU
    (and GPU) of one node with no timed task running, pinned there by a NodeAffinitySchedulingStrategy; so no
    two timed tasks share a node, nor does any other Ray task. Ray's own tools for "one at a time per node" do
    less here: a custom resource per node must be declared when the node starts, and an actor per node with
    ``max_concurrency=1`` keeps timed tasks apart but lets other tasks onto the cores they time."""

    def __init__(self, address: str | None = None, cpus_per_task: float = 1, max_retries: int = 2):
        self.ray = import_ray(local=address is None)
        self.address, self.cpus_per_task, self.max_retries = address, cpus_per_task, max_retries
        self._started = False

    def _connect(self) -> None:
        """Connect (or start a loopback-bound local instance) unless this process is connected already."""
        if self.ray.is_initialized():
            return
        if self.address:
            self.ray.init(address=self.address, log_to_driver=False)
        else:
            self.ray.init(_node_ip_address=LOOPBACK, include_dashboard=False, log_to_driver=False)
        self._started = True

    def nodes(self) -> list[str]:
        """The cluster's live nodes, named as ``nodes.this_node`` names them (IP / the start of the node id)."""
        self._connect()
        return [f"{n['NodeManagerAddress']}/{n['NodeID'][:8]}" for n in self.ray.nodes() if n["Alive"]]

    def close(self) -> None:
        if self._started:
            self.ray.shutdown()
            self._started = False

    def _slots(self, timed: bool, pending: dict) -> list[tuple[dict, str | None]]:
        """(remote options, the node a timed task is pinned to) for each task that may be submitted now, beside
        the ``pending`` ones."""
        if timed:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
            busy = {node for _, node, _ in pending.values()}
            return [({"num_cpus": node["Resources"]["CPU"], "num_gpus": node["Resources"].get("GPU", 0),
                      "scheduling_strategy": NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)},
                     node["NodeID"])
                    for node in self.ray.nodes()
                    if node["Alive"] and node["Resources"].get("CPU", 0) >= 1 and node["NodeID"] not in busy]
        capacity = max(1, int(self.ray.cluster_resources().get("CPU", 0) // self.cpus_per_task))
        return [({"num_cpus": self.cpus_per_task}, None)] * max(0, capacity - len(pending))

    def map(self, fn, tasks, *, timed=False, timeout_s=None):
        if not tasks:
            return
        self._connect()
        remote = self.ray.remote(max_retries=self.max_retries)(run_on_node)
        todo = collections.deque(tasks)
        pending = {}  # object ref -> (task, the node a timed task is pinned to, when it was submitted)
        try:
            while todo or pending:
                slots = self._slots(timed, pending)
                if not (slots or pending):
                    raise EqiforgeError("the Ray cluster has no node with a CPU to run timed tasks on")
                for options, node in slots[:len(todo)]:
                    task = todo.popleft()
                    cpus = int(options["num_cpus"]) if timed else None
                    pending[remote.options(**options).remote(fn, task, cpus)] = (task, node, time.monotonic())
                wait_s = None
                if timeout_s is not None:
                    wait_s = max(0.0, min(at for _, _, at in pending.values()) + timeout_s - time.monotonic())
                done, _ = self.ray.wait(list(pending), num_returns=1, timeout=wait_s)
                if done:
                    task, _, _ = pending.pop(done[0])
                    try:
                        result, node = self.ray.get(done[0])
                    except self.ray.exceptions.RayError as err:  # raised, or its worker died past the retries
                        result, node = crash(err), ""
                    yield Finished(task, result, node, len(pending))
                late = [ref for ref, (_, _, at) in pending.items()
                        if timeout_s is not None and time.monotonic() - at > timeout_s]
                for ref in late:
                    task, _, _ = pending.pop(ref)
                    self.ray.cancel(ref, force=True)
                    yield Finished(task, timeout(timeout_s), "", len(pending))
        finally:
            for ref in pending:  # the caller stopped early: its tasks are not left running
                self.ray.cancel(ref, force=True)
