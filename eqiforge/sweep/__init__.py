"""Sweeps: many independent tasks (fuzz jobs, programs x rule sets, synthesis shards) run by one executor interface,
local worker processes by default or Ray on a cluster, merged in task order and resumable from a results file."""
from .executor import CLUSTERS, Executor, LocalExecutor, executor_from, run_sweep
from .ray_executor import RayExecutor
from .records import Task, crash

__all__ = ["CLUSTERS", "Executor", "LocalExecutor", "RayExecutor", "Task", "crash", "executor_from", "run_sweep"]
