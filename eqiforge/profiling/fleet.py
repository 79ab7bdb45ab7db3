"""``eqiforge cost profile --cluster ray``: every node of a cluster profiles its own device, into one dataset.

One timed task per node (``Executor.map(timed=True)``: the task holds its node's CPUs and GPUs, so nothing
else runs beside the kernels it times). As many tasks as the cluster has nodes, all free at the start, so each
lands on its own node. A task measures into a folder of its node's and sends back its records. Here they are
appended to ``OUT/<device>/records.jsonl``, the layout a single machine's profile writes and ``cost train``
reads. Each record is stamped with the node and its device's fingerprint (the CUDA device's name and compute
capability, CUDA's version; or the CPU's model), so one device table entry's records from several machines
stay distinguishable. Keys a device's file already holds are passed to the tasks, which skip them: a run
started again measures only what is missing.
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from .. import sweep
from ..cost import learned
from ..cost.dataset import RECORDS_FILE, append_record, read_records
from ..errors import EqiforgeError
from .device import profile_here, settings_of


def profile_fleet(args) -> int:
    out = Path(args.out or learned.DATA_DIR)
    known = {folder.name: [r["key"] for r in read_records(folder)] for folder in out.glob("*") if folder.is_dir()}
    try:
        executor = sweep.executor_from(args.cluster, args.address)
    except EqiforgeError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    with executor, tempfile.TemporaryDirectory(prefix="eqiforge-profile-") as folder:
        names = executor.nodes()
        tasks = [sweep.Task(f"profile-{i}", "profile", (settings_of(args), known)) for i in range(len(names))]
        results = sweep.run_sweep(executor, profile_node, tasks, Path(folder) / sweep.cli.RESULTS,
                                  desc="profiling", timed=True)
    for result in results:
        print(merge(out, result))
    return 1 if any(sweep.is_failure(r) for r in results) else 0


def profile_node(task: sweep.Task) -> dict:
    """A node's profile: ``{"node", "device", "fingerprint", "records", "run"}`` (device None: no CUDA device)."""
    settings, known = task.payload
    with tempfile.TemporaryDirectory(prefix="eqiforge-profile-") as folder:
        measured = profile_here(settings, folder, known)
        node = sweep.this_node()
        if measured is None:
            return {"node": node, "device": None, "fingerprint": {}, "records": [], "run": "no CUDA device"}
        run, records_dir, device = measured
        return {"node": node, "device": device, "fingerprint": fingerprint(settings["device"]),
                "records": read_records(records_dir / RECORDS_FILE),
                "run": f"measured {run.measured}, failed {run.failed}, already present {run.skipped}; "
                       f"stopped: {run.stop}"}


def fingerprint(kind: str) -> dict:
    """What sets this node's device apart from another of the same table entry."""
    import torch
    if kind == "cpu":
        from ..cost.calibrate import cpu_model
        return {"cpu": cpu_model(), "threads": torch.get_num_threads()}
    props = torch.cuda.get_device_properties(0)
    return {"cuda_device": props.name, "capability": f"{props.major}.{props.minor}",
            "memory_gib": round(props.total_memory / 2 ** 30, 1), "cuda": torch.version.cuda}


def merge(out: Path, result: dict) -> str:
    """Append a node's records to its device's file (keys already there skipped); a line saying what came."""
    if sweep.is_failure(result):
        return f"a node failed: {result.get('error', result.get('status'))}"
    if result["device"] is None:
        return f"{result['node']}: {result['run']}, nothing measured"
    path = out / result["device"] / RECORDS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    present = {r["key"] for r in read_records(path.parent)}  # committed .jsonl.gz files included
    added = 0
    for record in result["records"]:
        if record["key"] not in present:
            append_record(path, {**record, "node": result["node"], "fingerprint": result["fingerprint"]})
            present.add(record["key"])
            added += 1
    return f"{result['node']} ({result['device']}): {result['run']}; {added} records added to {path}"
