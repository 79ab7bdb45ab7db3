"""The flags of a command that runs a sweep (``eqiforge fuzz``, ``eqiforge ablate``), written once."""
from __future__ import annotations

from pathlib import Path

from .executor import Executor
from .run import CLUSTERS, executor_from

RESULTS = "sweep.jsonl"  # the results file a command keeps in its output folder


def add_arguments(parser, resumable: bool = True) -> None:
    """--workers, --cluster, --address and (``resumable``) --resume on ``parser`` (a command with an --out
    folder)."""
    parser.add_argument("--workers", type=int, default=2, help="local worker processes (default 2)")
    add_cluster_arguments(parser)
    if resumable:
        parser.add_argument("--resume", action="store_true",
                            help=f"skip the tasks --out's {RESULTS} holds from an interrupted run of the same "
                                 "command")


def add_cluster_arguments(parser) -> None:
    """--cluster and --address: for a command whose tasks run one per node (``cost profile``) too."""
    parser.add_argument("--cluster", choices=CLUSTERS, default=None,
                        help="where tasks run: local worker processes or a Ray cluster (default $EQIFORGE_CLUSTER, "
                             "else local; ray needs pip install 'eqiforge[cluster]')")
    parser.add_argument("--address", default=None, help="the Ray cluster's address (implies --cluster ray)")


def executor_of(args, local: Executor | None = None) -> Executor:
    """The executor the flags ask for (``local``: the local one to use instead of worker processes)."""
    return executor_from(args.cluster, args.address, args.workers, local)


def results_file(folder, resume: bool) -> Path:
    """``folder``'s results file (the folder made if missing: results are appended to it), emptied unless
    ``resume``."""
    Path(folder).mkdir(parents=True, exist_ok=True)
    path = Path(folder) / RESULTS
    if not resume:
        path.unlink(missing_ok=True)
    return path
