"""GPU device figures fitted to published timings: what a datasheet does not say about a GPU.

A GPU's prior (cost/roofline.py, cost/as_written.py) reads peaks and bandwidth off the datasheet; measured
programs run slower, by amounts that depend on the kind of work: a call's host cost (Python, dispatch,
launch), the share of the datasheet rate a library GEMM or convolution reaches (transposed, 3-D and grouped
convolutions far less), the bandwidth each class of kernel streams at, how fast one block streams a long row,
a recurrent layer's cost per time step. These are the **figures** (``Device.figures``, the launch and view
costs and ``Device.class_bw_gbs``); this module fits them to published eager times of whole programs
(cost/published.py): least squares on the log of predicted over measured time, each figure held towards a
reference value (PRIOR_WEIGHT, in log units), so that a figure the data does not pin stays sensible.

Efficiencies are fitted relative to each GPU's datasheet, host costs in microseconds; a pooled fit over
every training GPU is the reference each GPU's own fit is held towards, and what a GPU without published
times gets (or the figures of a GPU of the same architecture, ``BORROW``, scaled by the datasheets).
The fitted figures ship in ``gpu_figures.json`` beside this module (``eqiforge cost fit-gpu`` writes it).
"""
from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

from .as_written import call_terms
from .devices import RNN_STEP_US, Device

#: host costs (us) and efficiencies (fractions of the datasheet rate; bandwidth per memory class) the fit
#: moves, with the reference value each is held towards before any data
REFERENCE = {"launch_us": 5.0, "view_us": 1.0, "program_us": 10.0, "conv_call_us": 5.0,
             "bw_elementwise": 0.8, "bw_reduction": 0.8, "bw_other": 0.8, "bw_contraction": 0.8, "bw_conv": 0.8,
             "gemm_efficiency": 0.75, "conv_efficiency": 0.5, "attention_efficiency": 0.5,
             "conv_transposed": 1.0, "conv_3d": 1.0, "conv_grouped": 1.0, "conv_strided": 1.0, "conv_winograd": 1.0,
             "row_gbs": 30.0}
NAMES = tuple(REFERENCE)
MEMORY = ("elementwise", "reduction", "other", "contraction", "conv")
COMPUTE = ("vector", "gemm", "conv", "attention")
CONV_FACTORS = ("conv_transposed", "conv_3d", "conv_grouped", "conv_strided", "conv_winograd")
#: how strongly each figure is held at its reference, in log units against the programs' log errors; the
#: fit's data are a few hundred programs per GPU, so a figure they pin moves, one they do not stays
PRIOR_WEIGHT = 1.0
FIGURES_FILE = Path(__file__).resolve().parent / "gpu_figures.json"
FORMAT = "eqiforge-gpu-figures/1"


@dataclass
class Terms:
    """Every call's terms (as_written.CallTerms) of a list of programs on their datasheets, as arrays."""

    program: np.ndarray  # the program (row of the timings) each call belongs to
    host: np.ndarray  # [calls, 4]: calls, views, (program: 1 on one call per program), steps
    compute: np.ndarray
    compute_class: np.ndarray
    conv: np.ndarray  # [calls, len(CONV_FACTORS)]: which conv factors apply
    bytes: np.ndarray
    bandwidth: np.ndarray  # datasheet bandwidth of the call's GPU, GB/s
    memory_class: np.ndarray
    rows: np.ndarray
    programs: int


def program_terms(programs: list[tuple[list, Device]]) -> Terms:
    """The terms of each (calls, datasheet device) program, in order."""
    cols = {k: [] for k in ("program", "host", "compute", "cc", "conv", "bytes", "bw", "mc", "rows")}
    for i, (calls, device) in enumerate(programs):
        for j, call in enumerate([None, *calls]):  # a first row for the per-program cost
            t = call_terms(call, device) if call is not None else None
            cols["program"].append(i)
            cols["host"].append([t.calls, t.views, 0, t.steps] if t else [0, 0, 1, 0])
            cols["compute"].append(t.compute if t else 0.0)
            cols["cc"].append(COMPUTE.index(t.compute_class) if t else 0)
            cols["conv"].append([f in t.conv_factors for f in CONV_FACTORS] if t else [False] * len(CONV_FACTORS))
            cols["bytes"].append(t.bytes if t else 0.0)
            cols["bw"].append(device.mem_bw_gbs)
            cols["mc"].append(MEMORY.index(t.memory_class) if t else 0)
            cols["rows"].append(t.rows if t else 0)
    a = {k: np.asarray(v, dtype=float) for k, v in cols.items()}
    return Terms(a["program"].astype(int), a["host"], a["compute"], a["cc"].astype(int), a["conv"], a["bytes"],
                 a["bw"], a["mc"].astype(int), a["rows"], len(programs))


def call_parts(terms: Terms, figures: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every call's (host, compute, memory, row-bound) seconds under ``figures`` (as_written.priced's parts)."""
    f = figures
    host = terms.host @ np.array([f["launch_us"], f["view_us"], f["program_us"], f.get("rnn_step_us", RNN_STEP_US)])
    host = (host + np.where(terms.compute_class == COMPUTE.index("conv"), f["conv_call_us"], 0.0)) * 1e-6
    efficiency = np.array([1.0, f["gemm_efficiency"], f["conv_efficiency"],
                           f["attention_efficiency"]])[terms.compute_class]
    efficiency = efficiency * np.prod(np.where(terms.conv > 0, [f[c] for c in CONV_FACTORS], 1.0), axis=1)
    bandwidth = terms.bandwidth * np.array([f[f"bw_{m}"] for m in MEMORY])[terms.memory_class] * 1e9
    rows = np.where(terms.rows > 0, terms.bytes / (np.maximum(terms.rows, 1) * f["row_gbs"] * 1e9), 0.0)
    return host, terms.compute / efficiency, terms.bytes / bandwidth, rows


def predict(terms: Terms, figures: dict) -> np.ndarray:
    """Seconds of each program under ``figures`` (as_written.priced, vectorised)."""
    host, compute, memory, rows = call_parts(terms, figures)
    calls = host + np.maximum(compute, np.maximum(memory, rows))
    return np.bincount(terms.program, calls, minlength=terms.programs)


def fit(terms: Terms, measured: np.ndarray, reference: dict | None = None, weight: float = PRIOR_WEIGHT) -> dict:
    """The figures minimising the squared log error of ``predict`` against ``measured`` seconds, each held
    towards ``reference`` (REFERENCE by default) by ``weight``."""
    reference = reference or REFERENCE
    base = np.log([reference[n] for n in NAMES])
    target = np.log(measured)

    def residuals(w):
        figures = dict(zip(NAMES, np.exp(base + w)))
        return np.concatenate([np.log(np.maximum(predict(terms, figures), 1e-12)) - target, weight * w])

    w = least_squares(residuals, np.zeros(len(NAMES)), method="trf", x_scale=1.0).x
    return {n: float(v) for n, v in zip(NAMES, np.exp(base + w))}


def apply_figures(device: Device, figures: dict, fitted: str) -> Device:
    """``device`` (its datasheet entry) with fitted ``figures``; ``fitted`` says what they were fitted to."""
    host = ("launch_us", "view_us")
    extra = {n: v for n, v in figures.items() if n not in host and not n.startswith("bw_")}
    return replace(device, launch_us=figures["launch_us"], view_us=figures["view_us"],
                   class_bw_gbs=tuple((m, device.mem_bw_gbs * figures[f"bw_{m}"]) for m in MEMORY),
                   figures=tuple(sorted(extra.items())), fitted=fitted)


@functools.cache
def load_figures(path: Path = FIGURES_FILE) -> dict:
    """The shipped figures file: {"gpus": {name: {"figures", "accuracy"}}, "borrow": {name: name}, ...};
    {} if absent."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    return data if data.get("format") == FORMAT else {}


def fitted_device(device: Device, data: dict) -> Device:
    """``device`` with the figures fitted for it, or for the GPU it borrows from (``data["borrow"]``): the
    datasheet entry itself where there are none."""
    gpus, source = data.get("gpus", {}), device.name
    if source not in gpus:
        source = data.get("borrow", {}).get(device.name)
        if source not in gpus:
            return device
    entry = gpus[source]
    what = entry.get("label", "published-time fit")
    if source != device.name:
        what = f"{source}'s {what}"
    return apply_figures(device, entry["figures"], what)


def log_errors(predicted, measured) -> np.ndarray:
    return np.log(np.asarray(predicted) / np.asarray(measured))


def accuracy(predicted, measured) -> dict:
    """Median predicted/measured, shares within 1.5x and 2x, Kendall tau across programs."""
    from scipy.stats import kendalltau
    ratio = np.asarray(predicted) / np.asarray(measured)
    spread = np.maximum(ratio, 1 / ratio)
    return {"programs": len(ratio), "median_ratio": float(np.median(ratio)) if len(ratio) else math.nan,
            "within_1_5x": float(np.mean(spread <= 1.5)) if len(ratio) else math.nan,
            "within_2x": float(np.mean(spread <= 2.0)) if len(ratio) else math.nan,
            "kendall_tau": float(kendalltau(predicted, measured).statistic) if len(ratio) > 1 else math.nan}
