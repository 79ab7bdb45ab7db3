"""Profiling this machine's device: what ``eqiforge cost profile`` does here, and each node does in a fleet.

Records go to ``bench/data/<device>/records.jsonl`` by default (``learned.DATA_DIR``), the folder ``cost train``
reads; the device is the CUDA device's entry in the device table, or "cpu" for the torch backend's native calls.
"""
from __future__ import annotations

import functools
import itertools
from pathlib import Path

from ..errors import EqiforgeError


def table_device(cuda_name: str):
    """The device-table entry a CUDA device name (e.g. 'NVIDIA H100 80GB HBM3') refers to."""
    from ..cost.devices import CUDA_NAMES, DEVICES
    if cuda_name in CUDA_NAMES:
        return DEVICES[CUDA_NAMES[cuda_name]]
    key = cuda_name.upper().replace(" ", "")
    for name in sorted(DEVICES, key=len, reverse=True):
        if name.upper() in key:
            return DEVICES[name]
    raise EqiforgeError(f"CUDA device {cuda_name!r} is not in the device table {sorted(DEVICES)}")


def saved_model(device: str):
    """The model ``--cost-model learned`` would load for ``device`` (``learned.model_paths``), unchecked."""
    from ..cost import learned
    path = learned.model_path(device)
    if path is None:
        looked = ", ".join(map(str, learned.model_paths(device)))
        raise EqiforgeError(f"no learned model for {device} (looked in {looked}); train one with `eqiforge cost train`")
    return learned.LearnedModel.load(path)


def settings_of(args) -> dict:
    """What ``profile_here`` needs of the command line, as plain values (a fleet task's payload)."""
    return {k: getattr(args, k) for k in ("device", "budget", "records", "seed", "active", "pool")}


def profile_here(settings: dict, out: str | Path | None = None, known: dict | None = None):
    """Profile this machine's device (``settings["device"]``: "cuda", or "cpu" for the torch backend's native
    calls) into ``out`` (default bench/data/<device>), skipping the record keys ``known[device]`` lists;
    ``(the run, its records folder, the device's stamp)``, or None where "cuda" is asked and there is none."""
    from ..cost import learned
    from ..cost.dataset import record_features
    from .candidates import active_selection
    from .profile import profile
    if settings["device"] == "cpu":
        from ..cost.calibrate import cpu_device, cpu_model
        from .cpu import cpu_timer, sweep_cpu
        name, timer, sweep, machine = "cpu", cpu_timer, sweep_cpu, cpu_model()
        cpu_device()  # calibrated before timing starts (the prior the model corrects)
    else:
        from .measure import cuda_available, cuda_timer
        if not cuda_available():
            return None
        import torch

        from .candidates import sweep as sweep_cuda
        device = table_device(torch.cuda.get_device_name())
        name, timer, sweep, machine = device.name, cuda_timer, functools.partial(sweep_cuda, device), None
    out = Path(out or learned.DATA_DIR / name)
    groups = sweep(settings["seed"])
    if settings["active"]:
        model = saved_model(name)
        pool = [r for g in itertools.islice(sweep(settings["seed"] + 1), settings["pool"]) for r in g]
        groups = [active_selection(model, pool, settings["records"], record_features)]
    run = profile(out, groups, timer, name, learned.library_versions(), settings["budget"], settings["records"],
                  machine=machine, known=(known or {}).get(name, ()))
    return run, out, name
