"""Plan-level data: what the measured choice timed (``decide/choice.py``'s records), as a cost model sees it.

A measured choice appends a record per program: its candidates, each with the predicted and measured
seconds, and, for EqiForge's plans, the plan's nodes (op, operand shapes and dtypes, output shape and dtype,
attributes: what a cost model prices). A cost model ranks a program's plans by the sum of its node prices, as
extraction does; these records say how well that ranking matches the clock:

- **Kendall tau** of the predicted and measured times of a program's plans, the same over the pairs of plans
  measured more than NOISE apart (closer pairs are ties within the clock's noise, which a model can only
  guess), and **top-1 regret**: how much slower the plan the model would pick is than the measured fastest
  (0: it picks the fastest), averaged over programs with at least two plans measured.
- **Plan figures**: the device figures of a learned model's prior refitted to the measured plan times
  (``fit_plan_figures``): what kernel-level profiling cannot see (the host cost of a PyTorch call in a plan,
  the rate at which a call reads what the call before it just wrote) shows in whole plans. Seven numbers,
  physical ones, where per-op factors (an earlier fit, one per op) ranked held-out programs worse than none.

Programs are split into training and held-out ones by a seeded hash of the program (stable as records are
added), so evaluation is on programs the figures never saw; ``cross_validated`` holds out every program once
(k folds), which says more than one split of a few dozen programs.
"""
from __future__ import annotations

import copy
import dataclasses
import json
import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares

from ..errors import EqiforgeError
from .dataset import digest, tuplify
from .devices import MEMORY_CLASSES, Device, memory_class
from .features import NodeFeatures, node_features
from .metrics import group_tau
from .roofline import RooflinePrior

#: measured times of two plans closer than this (relative) are a tie within the measurement's noise
NOISE = 0.03
#: how strongly plan figures are held at the model's own (in log units, per figure, against the plans'
#: relative log errors); in cross-validation on this project's CPU records 0.1 and 0.3 ranked alike, 1.0 worse
FIGURE_PRIOR = 0.3
MEMORY_CLASS_NAMES = sorted({*MEMORY_CLASSES.values(), "other"})


def graph_nodes(graph) -> list[dict]:
    """The live nodes of an IR graph as JSON records: what a cost model prices (``node_record`` inverts)."""
    records = []
    for i in graph.live_nodes():
        n = graph.nodes[i]
        kids = [graph.nodes[j] for j in n.inputs]
        records.append({"op": n.op, "in_shapes": [list(k.shape) for k in kids], "in_dtypes": [k.dtype for k in kids],
                        "out_shape": list(n.shape), "dtype": n.dtype,
                        "attrs": json.loads(json.dumps(n.attrs, default=str))})
    return records


def node_record(rec: dict) -> NodeFeatures:
    return node_features(rec["op"], [tuple(s) for s in rec["in_shapes"]], rec["in_dtypes"], tuple(rec["out_shape"]),
                         rec["dtype"], attrs=tuplify(rec["attrs"]))


@dataclass
class PlanGroup:
    """One program's measured plans: each plan's node features and measured seconds."""

    program: str
    plans: list[list[NodeFeatures]]
    seconds: list[float]


def plan_groups(records: list[dict], machine: str | None = None) -> list[PlanGroup]:
    """The programs of choice records with at least two plans that carry nodes and a measured time; of the
    CPU model ``machine`` only, when given."""
    groups = []
    for rec in records:
        if machine and rec.get("machine", {}).get("cpu") != machine:
            continue
        measured = [c for c in rec.get("candidates", []) if c.get("nodes") and c.get("measured_s")]
        if len(measured) >= 2:
            groups.append(PlanGroup(rec["program"], [[node_record(n) for n in c["nodes"]] for c in measured],
                                    [c["measured_s"] for c in measured]))
    return groups


def split_programs(groups: list[PlanGroup], held_out: float = 0.25, seed: int = 0):
    """(train, test): whole programs to one side, by a seeded hash of the program."""
    test_side = [int(digest(seed, g.program), 16) % 1000 < held_out * 1000 for g in groups]
    return [g for g, t in zip(groups, test_side) if not t], [g for g, t in zip(groups, test_side) if t]


def plan_seconds(model, group: PlanGroup) -> np.ndarray:
    """The model's price of each plan of ``group``: the sum of its nodes' prices, to 10 significant digits
    (plans of the same nodes in another order are ties, not a rounding error's ranking)."""
    return np.array([float(f"{np.sum(model.predict(plan)):.10g}") for plan in group.plans])


def tied_regret(predicted, measured) -> float:
    """How much slower the model's pick is than the fastest measured plan; among plans it prices alike, the
    mean of theirs (which one extraction keeps is arbitrary)."""
    predicted, measured = np.asarray(predicted), np.asarray(measured)
    return float(measured[predicted == predicted.min()].mean() / measured.min() - 1.0)


def apart_tau(predicted, measured, apart: float = NOISE) -> float | None:
    """Kendall's tau over the pairs of plans measured more than ``apart`` apart (a predicted tie counts as a
    disagreement), or None when no pair is."""
    agree = disagree = 0
    for i in range(len(measured)):
        for j in range(i + 1, len(measured)):
            if abs(np.log(measured[i] / measured[j])) > np.log1p(apart):
                if (predicted[i] - predicted[j]) * (measured[i] - measured[j]) > 0:
                    agree += 1
                else:
                    disagree += 1
    return (agree - disagree) / (agree + disagree) if agree + disagree else None


def ranking_metrics(priced: list[tuple[np.ndarray, list[float]]]) -> dict:
    """Mean Kendall tau (all pairs, and pairs beyond NOISE) and top-1 regret of (predicted, measured) per program."""
    taus = [t for p, s in priced if (t := group_tau(p, s)) is not None]
    apart = [t for p, s in priced if (t := apart_tau(p, s)) is not None]
    mean = lambda xs: float(np.mean(xs)) if xs else float("nan")  # noqa: E731
    return {"programs": len(priced), "plans": sum(len(s) for _, s in priced), "kendall_tau": mean(taus),
            "tau_apart": mean(apart), "top1_regret": mean([tied_regret(p, s) for p, s in priced])}


def plan_metrics(groups: list[PlanGroup], model) -> dict:
    """``ranking_metrics`` of ``model``'s plan prices over ``groups``."""
    return ranking_metrics([(plan_seconds(model, g), g.seconds) for g in groups])


def cross_validated(model, groups: list[PlanGroup], folds: int = 5, seed: int = 0, fit=None) -> dict:
    """``ranking_metrics`` of ``model`` with its plan figures fitted afresh (``fit_plans``) on all programs but
    one fold's (or by ``fit(train_groups)``, which refits ``model``), each fold priced by the fit that never saw
    it. ``model`` itself is left as it is."""
    fit = fit or model.fit_plans
    fold = [int(digest(seed, g.program), 16) % folds for g in groups]
    saved = copy.deepcopy(model.header)
    priced = []
    try:
        for k in range(folds):
            train = [g for g, f in zip(groups, fold) if f != k]
            if train:
                fit(train)
            priced += [(plan_seconds(model, g), g.seconds) for g, f in zip(groups, fold) if f == k]
    finally:
        model.header = saved
    return ranking_metrics(priced)


def plan_device(device: Device, figures: dict) -> Device:
    """``device`` with the figures a fit to measured plans found (``fit_plan_figures``); itself when none."""
    if not figures:
        return device
    scale = figures["compute_scale"]
    return dataclasses.replace(device, launch_us=figures["call_us"], view_us=figures["view_us"],
                               peak_tflops={k: v / scale for k, v in device.peak_tflops.items()},
                               vector_tflops=device.vector_tflops / scale,
                               class_bw_gbs=tuple(sorted(figures["bandwidth_gbs"].items())))


def _parts(device: Device, kernels: bool, plan: list[NodeFeatures]) -> np.ndarray:
    """[3, nodes]: each node's roofline price in its parts, host + max(compute, memory) (the prior priced as it
    is, with no host cost, then with memory or compute free)."""
    free = dataclasses.replace(device, launch_us=0.0, view_us=0.0)
    priced = [RooflinePrior(d, kernels).predict(plan) for d in (
        device, free, dataclasses.replace(free, mem_bw_gbs=math.inf, class_bw_gbs=()),
        dataclasses.replace(free, peak_tflops={k: math.inf for k in device.peak_tflops}, vector_tflops=math.inf))]
    whole, busy, compute, memory = priced
    host = whole - busy
    if not np.allclose(host + np.maximum(compute, memory), whole, rtol=1e-9, atol=1e-15):
        raise EqiforgeError("a node's roofline price is not host + max(compute, memory); no plan figures fit it")
    return np.stack([host, compute, memory])


def fit_plan_figures(model, groups: list[PlanGroup]) -> dict:
    """The device figures that fit the measured times of each program's plans relative to each other: the host
    cost of a call and of a view, one scale of every compute rate, and a bandwidth per memory class
    (devices.MEMORY_CLASSES), each held towards ``model``'s own figures by FIGURE_PRIOR (a least-squares fit,
    scipy, in log units). A node's price is then host + max(compute, memory) as the prior's, times the model's
    kernel correction where it makes one. Relative, because a plan's measured time also holds what no node
    price sees (the call's Python and allocations: measured plans run 2-3x their summed prices on a CPU)."""
    device, kernels = model.device, model.kernels
    rows = []  # per node: host, compute, memory, view?, class, correction, plan
    seconds, program = [], []
    for k, g in enumerate(groups):
        for plan, measured in zip(g.plans, g.seconds):
            if plan:
                host, compute, memory = _parts(device, kernels, plan)
                rows.append(np.stack([host, compute, memory, [f.is_view for f in plan],
                                      [MEMORY_CLASS_NAMES.index(memory_class(f.op, f.kind)) for f in plan],
                                      model.corrections(plan), np.full(len(plan), len(seconds))]))
            seconds.append(measured)
            program.append(k)
    if not rows:
        return {}
    host, compute, memory, view, klass, correction, plan = np.concatenate(rows, axis=1)
    klass, plan, view = klass.astype(int), plan.astype(int), view > 0
    target, program = np.log(seconds), np.array(program)
    plans_of = np.bincount(program)

    def residuals(w):
        nodes = correction * (np.exp(np.where(view, w[1], w[0])) * host
                              + np.maximum(np.exp(w[2]) * compute, np.exp(w[3 + klass]) * memory))
        error = np.log(np.maximum(np.bincount(plan, nodes, minlength=len(seconds)), 1e-12)) - target
        return np.concatenate([error - (np.bincount(program, error) / plans_of)[program], FIGURE_PRIOR * w])

    w = np.exp(least_squares(residuals, np.zeros(3 + len(MEMORY_CLASS_NAMES))).x)
    return {"call_us": device.launch_us * w[0], "view_us": device.view_us * w[1], "compute_scale": w[2],
            "bandwidth_gbs": {name: device.mem_bw_gbs / w[3 + i] for i, name in enumerate(MEMORY_CLASS_NAMES)}}


def table(rows: dict[str, dict]) -> str:
    """A text table of plan-level metrics, one row per model."""
    head = f"{'model':<56} {'programs':>8} {'plans':>6} {'tau':>6} {f'tau>{NOISE:.0%}':>7} {'top-1 regret':>12}"
    lines = [head, "-" * len(head)]
    for name, m in rows.items():
        lines.append(f"{name:<56} {m['programs']:>8} {m['plans']:>6} {m['kendall_tau']:>6.3f} {m['tau_apart']:>7.3f} "
                     f"{m['top1_regret']:>12.2%}")
    return "\n".join(lines)
