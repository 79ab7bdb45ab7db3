"""Sweeps: many independent tasks (fuzz jobs, programs x rule sets, synthesis shards) run by one executor interface,
local worker processes by default or Ray on a cluster, merged in task order and resumable from a results file.
Timed tasks hold a node to themselves; any task may have a timeout."""
from .cli import add_arguments, executor_of, results_file
from .executor import Executor, LocalExecutor
from .nodes import task_cpus, this_node
from .ray_executor import RayExecutor
from .records import Finished, Task, crash, is_failure, timeout
from .run import CLUSTERS, code_digest, executor_from, run_sweep, stored_results

__all__ = ["CLUSTERS", "Executor", "Finished", "LocalExecutor", "RayExecutor", "Task", "add_arguments",
           "code_digest", "crash", "executor_from", "executor_of", "is_failure", "results_file", "run_sweep",
           "stored_results", "task_cpus", "this_node", "timeout"]
