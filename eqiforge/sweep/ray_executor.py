"""Ray as a sweep's executor (``pip install 'eqiforge[cluster]'``): one remote call per task, with explicit CPU
resources and Ray's retries of tasks whose worker died. Ray is imported here only, when an executor is made.

A Ray instance the executor starts itself (no address, none running) is bound to the loopback address and has
no dashboard: a local cluster is never reachable from other machines. Ray 2.60 turns a node address of 127.0.0.1
into the machine's routable one unless ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` (its single-machine mode), which it
reads when it is first imported: an executor without an address sets it before importing Ray.
"""
from __future__ import annotations

import os

from ..errors import EqiforgeError

from .records import crash

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


class RayExecutor:
    """Each task a ``ray.remote(num_cpus=cpus_per_task, max_retries=max_retries)`` call on the cluster at
    ``address`` (None: the one this process is connected to, else a new local one on 127.0.0.1)."""

    def __init__(self, address: str | None = None, cpus_per_task: float = 1, max_retries: int = 2):
        self.ray = import_ray(local=address is None)
        self.address, self.cpus_per_task, self.max_retries = address, cpus_per_task, max_retries

    def _connect(self) -> bool:
        """Connect (or start a loopback-bound local instance); whether this call did, so it shuts it down."""
        if self.ray.is_initialized():
            return False
        if self.address:
            self.ray.init(address=self.address, log_to_driver=False)
        else:
            self.ray.init(_node_ip_address=LOOPBACK, include_dashboard=False, log_to_driver=False)
        return True

    def map(self, fn, tasks):
        if not tasks:
            return
        started = self._connect()
        try:
            remote = self.ray.remote(num_cpus=self.cpus_per_task, max_retries=self.max_retries)(fn)
            pending = {remote.remote(task): task for task in tasks}
            while pending:
                done, _ = self.ray.wait(list(pending), num_returns=1)
                task = pending.pop(done[0])
                try:
                    result = self.ray.get(done[0])
                except self.ray.exceptions.RayError as err:  # raised, or its worker died past the retries
                    result = crash(err)
                yield task, result
        finally:
            if started:
                self.ray.shutdown()
