"""Training and evaluating the learned model on profiling records (``eqiforge cost train|eval``).

Both split the records by shape with the same seed, so ``eval`` tests on shapes ``train`` never saw.
"""
from __future__ import annotations

import numpy as np

from ..errors import EqiforgeError
from .calibrate import cpu_model
from .dataset import record_features, split_by_shape
from .learned import LearnedModel
from .lookup import get_device
from .metrics import evaluate
from .roofline import RooflinePrior


def usable(records: list[dict]) -> list[dict]:
    """Records with a measured time (failed measurements are kept in the file but carry no time)."""
    return [r for r in records if r.get("seconds")]


def records_device(records: list[dict]) -> str:
    devices = sorted({r["device"] for r in records})
    if len(devices) != 1:
        raise EqiforgeError(f"records must come from one device, found {devices or 'none'}")
    return devices[0]


def machine_records(records: list[dict], machine: str | None = None) -> tuple[list[dict], str | None]:
    """(the records of one CPU model, that model): ``machine``, by default this processor's. Records naming
    no machine (a GPU's: the device says it) are returned as they are, with None."""
    machines = sorted({r["machine"] for r in records if r.get("machine")})
    if not machines:
        return records, None
    want = machine or cpu_model()
    if want not in machines:
        raise EqiforgeError(f"no records of the CPU {want!r}; the records are of {machines}: profile this CPU "
                            "(`eqiforge cost profile --device cpu`) or pass --machine")
    return [r for r in records if r.get("machine") == want], want


def train_model(records: list[dict], held_out: float = 0.25, seed: int = 0, machine: str | None = None,
                **fit) -> LearnedModel:
    """A model fitted on the training shapes of ``records`` (one device; of a CPU, one ``machine``)."""
    records, machine = machine_records(usable(records), machine)
    device = records_device(records)
    train, test = split_by_shape(records, held_out, seed)
    if not train:
        raise EqiforgeError("no training records after the shape split")
    summary = {"shapes": len({r["shape"] for r in train}), "held_out_shapes": len({r["shape"] for r in test}),
               "split_seed": seed, **({"machine": machine} if machine else {})}
    return LearnedModel(device, kernels=generated_kernels(device)).fit(
        [record_features(r) for r in train], np.array([r["seconds"] for r in train]), seed=seed, summary=summary,
        **fit)


def generated_kernels(device: str) -> bool:
    """Whether records of ``device`` time generated Triton kernels (a GPU's) or the torch backend's native
    PyTorch calls (the CPU's: no Triton there)."""
    return device != "cpu"


def evaluate_models(records: list[dict], models: list, held_out: float = 0.25, seed: int = 0,
                    machine: str | None = None) -> dict[str, dict]:
    """Metrics of each model (the roofline prior first) on the held-out shapes of ``records`` (of a CPU, one
    ``machine``'s)."""
    records, _ = machine_records(usable(records), machine)
    _, test = split_by_shape(records, held_out, seed)
    if not test:
        raise EqiforgeError("no held-out records after the shape split")
    feats = [record_features(r) for r in test]
    measured = np.array([r["seconds"] for r in test])
    groups = [r["group"] for r in test]
    prior = RooflinePrior(get_device(records_device(records)), kernels=generated_kernels(records_device(records)))
    return {m.name: evaluate(groups, m.predict(feats), measured) for m in [prior, *models]}
