"""Training and evaluating the learned model on profiling records (``eqiforge cost train|eval``).

Both split the records by shape with the same seed, so ``eval`` tests on shapes ``train`` never saw.
"""
from __future__ import annotations

import numpy as np

from ..errors import EqiforgeError
from .dataset import record_features, split_by_shape
from .learned import LearnedModel
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


def train_model(records: list[dict], held_out: float = 0.25, seed: int = 0, **fit) -> LearnedModel:
    """A model fitted on the training shapes of ``records`` (one device)."""
    records = usable(records)
    device = records_device(records)
    train, test = split_by_shape(records, held_out, seed)
    if not train:
        raise EqiforgeError("no training records after the shape split")
    summary = {"shapes": len({r["shape"] for r in train}), "held_out_shapes": len({r["shape"] for r in test}),
               "split_seed": seed}
    return LearnedModel(device, kernels=generated_kernels(device)).fit(
        [record_features(r) for r in train], np.array([r["seconds"] for r in train]), seed=seed, summary=summary,
        **fit)


def generated_kernels(device: str) -> bool:
    """Whether records of ``device`` time generated Triton kernels (a GPU's) or the torch backend's native
    PyTorch calls (the CPU's: no Triton there)."""
    return device != "cpu"


def evaluate_models(records: list[dict], models: list, held_out: float = 0.25, seed: int = 0) -> dict[str, dict]:
    """Metrics of each model (the roofline prior first) on the held-out shapes of ``records``."""
    records = usable(records)
    _, test = split_by_shape(records, held_out, seed)
    if not test:
        raise EqiforgeError("no held-out records after the shape split")
    feats = [record_features(r) for r in test]
    measured = np.array([r["seconds"] for r in test])
    groups = [r["group"] for r in test]
    prior = RooflinePrior(records_device(records), kernels=generated_kernels(records_device(records)))
    return {m.name: evaluate(groups, m.predict(feats), measured) for m in [prior, *models]}
