"""The learned cost model: an ensemble of small MLPs correcting the roofline prior.

    seconds = prior(node) * exp(mean over members of MLP_i(feature_vector(node)))

Each member predicts log(measured / prior), so an untrained or unsure model stays near the prior, the
analytical structure (waves, bandwidth, peaks) need not be re-learned, and errors are relative, as the
extraction's decisions are. Members differ by seed and bootstrap sample; their spread says where the model is
unsure (active learning measures there). The MLPs correct the kernel ops profiling timed (and, for the torch
backend, a MatMul as the GEMM call it makes), nothing else: they would extrapolate.
Fitted afterwards to measured whole plans (``fit_plans``, cost/plans.py): the figures of the prior (host cost
of a call and a view, compute rate, a bandwidth per class of node), what kernel profiling cannot see, and
whether the MLPs' corrections price plans at all (``kernel_corrections``: kept only where they rank the
training programs' plans better in cross-validation; calls profiled alone ranked this CPU's plans worse).

A model file (``.npz``, no pickle) holds a JSON header (device, torch/triton versions, feature version,
training-data summary; a CPU's figures), the input normalisation and every member's weights.

A CPU model keeps the calibrated figures (cost/calibrate.py) of the prior it was trained against and prices
with that prior, not with this machine's latest calibration: its corrections are ratios to those prices, and
a recalibration moves the prior by tens of percent (the same processor model measured another day: kernel
MAPE of the corrections 14% against the training prior, 25% against a recalibrated one).
"""
from __future__ import annotations

import copy
import dataclasses
import json
import math
from importlib import metadata
from pathlib import Path

import numpy as np
import torch

from ..errors import EqiforgeError
from ..ops.native import ACC
from .calibrate import cpu_model
from .configs import best_prices
from .devices import Device
from .lookup import get_device
from .features import NodeFeatures, node_features
from .plans import cross_validated, fit_plan_figures, plan_device
from .roofline import RooflinePrior
from .vector import FEATURE_NAMES, FEATURE_VERSION, feature_vector

FORMAT = "eqiforge-learned-cost/1"


def library_versions() -> dict:
    """Versions a profiling record and a model are keyed by (timings change with the compiler)."""
    return {name: metadata.version(name) for name in ("torch", "triton")}


def _mlp(width: int, hidden: int) -> torch.nn.Sequential:
    return torch.nn.Sequential(torch.nn.Linear(width, hidden), torch.nn.GELU(), torch.nn.Linear(hidden, hidden),
                               torch.nn.GELU(), torch.nn.Linear(hidden, 1))


class LearnedModel:
    """Cost model interface (``name``, ``predict``) plus ``fit``, ``spread``, ``save`` and ``load``."""

    def __init__(self, device: str | Device | None = None, members: int = 5, hidden: int = 64,
                 kernels: bool = True):
        self.device = get_device(device)
        self._kernels = kernels
        self._prior = (None, None)  # (the plan figures it was built with, the prior)
        self.hidden = hidden
        self.nets = [_mlp(len(FEATURE_NAMES), hidden) for _ in range(members)]
        self.mean = np.zeros(len(FEATURE_NAMES))
        self.scale = np.ones(len(FEATURE_NAMES))
        self.low = np.full(len(FEATURE_NAMES), -np.inf)  # the training features' range: inputs are clamped to
        self.high = np.full(len(FEATURE_NAMES), np.inf)  # it, so a node unlike any record gets a bounded guess
        self.header = {"format": FORMAT, "device": self.device.name, "versions": library_versions(),
                       "feature_version": FEATURE_VERSION, "kernels": kernels, "training": {}, "plan_figures": {},
                       "kernel_corrections": True}
        if self.device.name == "cpu":  # a measured device: the figures the corrections are relative to
            self.header["device_figures"] = dataclasses.asdict(self.device)

    @property
    def kernels(self) -> bool:
        """Whether it prices generated kernels (the triton backend) or the torch backend's calls."""
        return self._kernels

    @property
    def prior(self) -> RooflinePrior:
        """The roofline prior the MLPs correct, on the figures fitted to measured plans where there are some."""
        figures = self.header.get("plan_figures") or {}
        if self._prior[0] != figures:
            self._prior = (copy.deepcopy(figures), RooflinePrior(plan_device(self.device, figures), self.kernels))
        return self._prior[1]

    @property
    def machine(self) -> str | None:
        """The CPU model whose records trained it (None: a GPU's, the device names the chip)."""
        return self.header["training"].get("machine")

    @property
    def name(self) -> str:
        records = self.header["training"].get("records", 0)
        plans = self.header["training"].get("plans", {}).get("programs")
        fitted = f", figures from {plans} programs' plans" if plans else ""
        if plans and not self.header.get("kernel_corrections", True):
            fitted += ", MLPs off for plans"
        return f"learned model ({self.device.name}; {records} records, {len(self.nets)} MLPs{fitted})"

    # ------------------------------------------------------------------------------------------ prediction
    def _inputs(self, batch: list[NodeFeatures]) -> torch.Tensor:
        rows = np.clip(np.stack([feature_vector(f, self.device) for f in batch]), self.low, self.high)
        return torch.as_tensor((rows - self.mean) / self.scale, dtype=torch.float32)

    def member_log_ratios(self, batch: list[NodeFeatures]) -> np.ndarray:
        """[members, len(batch)] predicted log(measured / prior), for the nodes this model corrects."""
        with torch.no_grad():
            x = self._inputs(batch)
            return np.stack([net.eval()(x)[:, 0].double().numpy() for net in self.nets])

    def corrected(self, batch: list[NodeFeatures], prior: np.ndarray) -> list[tuple[int, NodeFeatures]]:
        """(index, features the MLPs see) of the nodes the model corrects: kernel nodes of the ops it was
        trained on (an op without records would be a guess) that the prior finds feasible. For the torch
        backend an algebra MatMul is the native GEMM a GemmK without epilogue calls, so it is corrected as
        that GemmK: the same call priced two ways would decide between a fused and an unfused plan."""
        trained = set(self.header["training"].get("ops", ()))
        chosen = []
        for i, f in enumerate(batch):
            seen = _as_native_gemm(f) if f.op == "MatMul" and not self.kernels else f
            if seen is not None and seen.kind == "kernel" and seen.op in trained and not f.folded \
                    and np.isfinite(prior[i]):
                chosen.append((i, seen))
        return chosen

    def predict(self, batch: list[NodeFeatures]) -> np.ndarray:
        """Seconds per node; for generated kernels an untiled GEMM at its best config (cost/configs.py)."""
        if self.kernels:
            return best_prices(self._configured, batch)[0]
        return self._configured(batch)

    def _configured(self, batch: list[NodeFeatures]) -> np.ndarray:
        prior = self.prior.predict(batch)
        return prior * self.corrections(batch, prior)

    def corrections(self, batch: list[NodeFeatures], prior: np.ndarray | None = None) -> np.ndarray:
        """The factor the MLPs put on each node's prior price (``prior``: those prices, when already known):
        1 where they make no correction, and for every node when ``kernel_corrections`` is off."""
        factors = np.ones(len(batch))
        if not self.header.get("kernel_corrections", True):
            return factors
        chosen = self.corrected(batch, self.prior.predict(batch) if prior is None else prior)
        if chosen:
            index, seen = zip(*chosen)
            factors[list(index)] = np.exp(self.member_log_ratios(list(seen)).mean(axis=0))
        return factors

    def spread(self, batch: list[NodeFeatures]) -> np.ndarray:
        """Ensemble standard deviation of the log-ratio per node: how unsure the model is."""
        return self.member_log_ratios(batch).std(axis=0)

    # ------------------------------------------------------------------------------------------ training
    def fit(self, batch: list[NodeFeatures], seconds: np.ndarray, epochs: int = 400, lr: float = 3e-3,
            seed: int = 0, summary: dict | None = None) -> "LearnedModel":
        """Fit every member (own seed, own bootstrap sample) to log(seconds / prior) by full-batch Adam, the
        prior on the model's own figures (plan figures are fitted afterwards, to the MLPs as they are)."""
        self.header["plan_figures"] = {}
        prior = self.prior.predict(batch)
        self.header["training"] = {"ops": sorted({f.op for f in batch if f.kind == "kernel"})}
        keep = [i for i, _ in self.corrected(batch, prior) if seconds[i] > 0]
        if not keep:
            raise EqiforgeError("no usable training records (kernel nodes with a finite prior and a time)")
        batch = [batch[i] for i in keep]
        target = torch.as_tensor(np.log(np.asarray(seconds)[keep] / prior[keep]), dtype=torch.float32)
        rows = np.stack([feature_vector(f, self.device) for f in batch])
        self.mean, self.scale = rows.mean(axis=0), rows.std(axis=0) + 1e-6
        self.low, self.high = rows.min(axis=0), rows.max(axis=0)
        x = self._inputs(batch)
        for i in range(len(self.nets)):
            gen = torch.Generator().manual_seed(seed * 1000 + i)
            torch.manual_seed(seed * 1000 + i)  # the member's initial weights
            self.nets[i] = net = _mlp(len(FEATURE_NAMES), self.hidden)
            sample = torch.randint(len(batch), (len(batch),), generator=gen) if len(self.nets) > 1 \
                else torch.arange(len(batch))
            opt = torch.optim.Adam(net.parameters(), lr=lr, weight_decay=1e-5)
            net.train()
            for _ in range(epochs):
                opt.zero_grad()
                loss = torch.nn.functional.mse_loss(net(x[sample])[:, 0], target[sample])
                loss.backward()
                opt.step()
            net.eval()
        self.header["training"].update({"records": len(batch), "epochs": epochs, "seed": seed, **(summary or {})})
        return self

    def fit_plans(self, groups: list, summary: dict | None = None, folds: int = 5) -> "LearnedModel":
        """Fit the prior's figures to measured plans (cost/plans.py's groups), the MLPs as they are, with the
        MLPs' corrections on or off, whichever ranks ``groups``' plans better in ``folds``-fold
        cross-validation (Kendall tau; off when they tie, the simpler model, and with fewer programs than folds)."""
        self.header["plan_figures"] = {}  # the fit starts from the model's own figures
        tau = {}
        for corrections in (False, True):
            self.header["kernel_corrections"] = corrections
            tau[corrections] = cross_validated(self, groups, folds, fit=self.fit_figures)["kendall_tau"] \
                if len(groups) >= folds else 0.0
        self.header["kernel_corrections"] = bool(tau[True] > tau[False])
        self.fit_figures(groups)
        self.header["training"]["plans"] = {"programs": len(groups), "plans": sum(len(g.plans) for g in groups),
                                            "cross_validated_tau": {"kernel MLPs off": tau[False],
                                                                    "kernel MLPs on": tau[True]},
                                            **(summary or {})}
        return self

    def fit_figures(self, groups: list) -> None:
        """Fit the plan figures alone (cost/plans.py), the kernel corrections on or off as they are set."""
        self.header["plan_figures"] = {}
        self.header["plan_figures"] = fit_plan_figures(self, groups)

    # ------------------------------------------------------------------------------------------ files
    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        arrays = {"header": np.array(json.dumps({**self.header, "hidden": self.hidden, "members": len(self.nets)})),
                  "mean": self.mean, "scale": self.scale, "low": self.low, "high": self.high}
        for i, net in enumerate(self.nets):
            arrays.update({f"m{i}.{k}": v.numpy() for k, v in net.state_dict().items()})
        with open(path, "wb") as fh:
            np.savez_compressed(fh, **arrays)
        return path

    @classmethod
    def load(cls, path: str | Path) -> "LearnedModel":
        """A saved model, pricing the backend it was trained for (its header's ``kernels``)."""
        with np.load(path, allow_pickle=False) as data:
            header = json.loads(str(data["header"]))
            if header.get("format") != FORMAT or header.get("feature_version") != FEATURE_VERSION:
                raise EqiforgeError(f"{path}: model format {header.get('format')} / feature version "
                                    f"{header.get('feature_version')} does not match this EqiForge "
                                    f"({FORMAT} / {FEATURE_VERSION}); retrain with `eqiforge cost train`")
            model = cls(_saved_device(header), header["members"], header["hidden"], header.get("kernels", True))
            model.header = {k: v for k, v in header.items() if k not in ("hidden", "members")}
            model.mean, model.scale, model.low, model.high = data["mean"], data["scale"], data["low"], data["high"]
            for i, net in enumerate(model.nets):
                net.load_state_dict({k: torch.from_numpy(data[f"m{i}.{k}"]) for k in net.state_dict()})
                net.eval()
        return model


def _saved_device(header: dict) -> Device | str:
    """The device a saved model prices on: a CPU's calibrated figures as at training, else the table's name."""
    figures = header.get("device_figures")
    if not figures:
        return header["device"]
    return Device(**{**figures, "unfused": tuple(figures["unfused"]),
                     "class_bw_gbs": tuple(tuple(pair) for pair in figures.get("class_bw_gbs", ())),
                     "figures": tuple(tuple(pair) for pair in figures.get("figures", ()))})


def _as_native_gemm(f: NodeFeatures) -> NodeFeatures | None:
    """A MatMul of operands of rank 2 or more as the GemmK node whose native call it makes: torch.matmul of a
    batched left operand by a matrix is one product of the folded rows, otherwise a batched product."""
    a, b = f.in_shapes
    if len(a) < 2 or len(b) < 2:
        return None
    if len(b) == 2 and len(a) > 2:
        a, out = (math.prod(a[:-1]), a[-1]), (math.prod(a[:-1]), b[-1])
    else:
        out = f.out_shape
    return node_features("GemmK", [a, b], [f.dtype, f.dtype], out, f.dtype, attrs=("N", "N", (), 1, ACC))


# ------------------------------------------------------------------------------------------ finding a model

DATA_DIR = Path(__file__).resolve().parents[2] / "bench" / "data"  # a source checkout's measured data
PACKAGED_DIR = Path(__file__).resolve().parent / "models"  # the shipped models, one folder per device
MODEL_FILE = "model.npz"


def shipped_model_file(device: str | Device) -> Path:
    """The package's model file for ``device`` (``eqiforge/cost/models/<device>/model.npz``): the one a wheel
    ships and ``eqiforge cost train`` writes by default, so the model trained is the model installed."""
    return PACKAGED_DIR / (device if isinstance(device, str) else device.name) / MODEL_FILE


def model_paths(device: str | Device) -> list[Path]:
    """Where a model for ``device`` may live, in the order they are tried: a source checkout's
    ``bench/data/<device>/model.npz`` (one saved beside its records with ``--out``, not shipped), then the
    package's own (``shipped_model_file``)."""
    name = device if isinstance(device, str) else device.name
    return [DATA_DIR / name / MODEL_FILE, shipped_model_file(name)]


def model_path(device: str | Device) -> Path | None:
    """The model file ``find_model`` loads for ``device``: the first of ``model_paths`` that exists, or None."""
    return next((p for p in model_paths(device) if p.exists()), None)


def find_model(device: str | Device | None = None, kernels: bool = True) -> tuple[LearnedModel | None, str]:
    """(the model for ``device`` whose triton version matches this one, or None; why none when None)."""
    device = get_device(device)
    path = model_path(device)
    if path is None:
        return None, "no learned model for this device"
    model = LearnedModel.load(path)
    if model.header.get("kernels", True) != kernels:
        trained = "the triton backend's kernels" if model.header.get("kernels", True) else "the torch backend"
        return None, f"learned model at {path} was trained for {trained}"
    if model.machine and model.machine != cpu_model():
        return None, f"learned model at {path} was trained on the CPU {model.machine!r}, this is {cpu_model()!r}"
    threads = model.header.get("device_figures", {}).get("sms")
    if threads and threads != torch.get_num_threads():  # its records were timed, its prior calibrated, with those
        return None, f"learned model at {path} was trained with {threads} threads, this process uses " \
                     f"{torch.get_num_threads()}"
    library = "triton" if kernels else "torch"  # what the measured times depend on
    here, there = library_versions()[library], model.header["versions"].get(library)
    if here != there:
        return None, f"learned model at {path} was trained with {library} {there}, this is {here}"
    return model, ""
