"""Plan-level data: what the measured choice timed (``choice.py``'s records), as a cost model sees it.

A measured choice appends a record per program: its candidates, each with the predicted and measured
seconds, and, for EqiForge's plans, the plan's nodes (op, operand shapes and dtypes, output shape and dtype,
attributes: what a cost model prices). A cost model ranks a program's plans by the sum of its node prices, as
extraction does; these records say how well that ranking matches the clock:

- **Kendall tau** of the predicted and measured times of a program's plans, and **top-1 regret**: how much
  slower the plan the model would pick is than the measured fastest (0: it picks the fastest), averaged over
  programs with at least two plans measured.
- **Op factors**: a learned model's per-op correction of its node prices, fitted to the measured plan times
  (``fit_op_factors``): what kernel-level profiling cannot see (the host cost of a PyTorch call, what a
  composite call costs against its decomposition) shows in whole plans.

Programs are split into training and held-out ones by a seeded hash of the program (stable as records are
added), so evaluation is on programs the factors never saw.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares

from .dataset import digest, tuplify
from .features import NodeFeatures, node_features
from .metrics import group_tau, top_k_slowdown

#: how strongly op factors are held at 1 (in log units, per op, against the plans' log errors)
FACTOR_PRIOR = 0.3


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


def plan_groups(records: list[dict]) -> list[PlanGroup]:
    """The programs of choice records with at least two plans that carry nodes and a measured time."""
    groups = []
    for rec in records:
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
    """The model's price of each plan of ``group``: the sum of its nodes' prices."""
    return np.array([float(np.sum(model.predict(plan))) for plan in group.plans])


def plan_metrics(groups: list[PlanGroup], model) -> dict:
    """Mean Kendall tau and top-1 regret of ``model``'s plan prices over ``groups``."""
    taus, regrets = [], []
    for g in groups:
        predicted = plan_seconds(model, g)
        tau = group_tau(predicted, g.seconds)
        if tau is not None:
            taus.append(tau)
        regrets.append(top_k_slowdown(predicted, g.seconds, 1))
    mean = lambda xs: float(np.mean(xs)) if xs else float("nan")  # noqa: E731
    return {"programs": len(groups), "plans": sum(len(g.plans) for g in groups), "kendall_tau": mean(taus),
            "top1_regret": mean(regrets)}


def fit_op_factors(model, groups: list[PlanGroup]) -> dict[str, float]:
    """Per-op log factors w (a node of op o costs exp(w_o) times ``model``'s price) that fit the measured plan
    times in log space, each held towards 0 by FACTOR_PRIOR: a least-squares fit (scipy) over the plans."""
    ops = sorted({f.op for g in groups for plan in g.plans for f in plan})
    index = {op: i for i, op in enumerate(ops)}
    rows = []  # per plan: the per-op sums of base prices, and the measured seconds
    for g in groups:
        for plan, seconds in zip(g.plans, g.seconds):
            base = model.predict(plan)
            sums = np.zeros(len(ops))
            for f, price in zip(plan, base):
                sums[index[f.op]] += price
            rows.append((sums, seconds))
    if not rows:
        return {}
    sums = np.stack([r[0] for r in rows])
    target = np.log([r[1] for r in rows])

    def residuals(w):
        predicted = np.maximum(sums @ np.exp(w), 1e-12)
        return np.concatenate([np.log(predicted) - target, FACTOR_PRIOR * w])

    fit = least_squares(residuals, np.zeros(len(ops)))
    return {op: float(w) for op, w in zip(ops, fit.x) if abs(w) > 1e-6}


def table(rows: dict[str, dict]) -> str:
    """A text table of plan-level metrics, one row per model."""
    head = f"{'model':<48} {'programs':>8} {'plans':>6} {'tau':>6} {'top-1 regret':>12}"
    lines = [head, "-" * len(head)]
    for name, m in rows.items():
        lines.append(f"{name:<48} {m['programs']:>8} {m['plans']:>6} {m['kendall_tau']:>6.3f} {m['top1_regret']:>12.1%}")
    return "\n".join(lines)

