"""Decision quality of a cost model on measured records: does it pick the fast configuration?

Within a candidate group (one problem, alternative configurations or fusions) extraction keeps the
candidate the model predicts fastest. top-k slowdown: the best measured time among the k predicted fastest,
relative to the best measured time in the group, minus 1 (0 = the model found the fastest; top-5 is what an
autotuner measuring the model's 5 favourites would get). Kendall tau: rank agreement within a group. MAPE:
mean absolute relative error of the times, secondary (a model can be off by a constant and still choose well).
"""
from __future__ import annotations

from collections import defaultdict

import numpy as np
from scipy.stats import kendalltau


def top_k_slowdown(predicted, measured, k: int = 1) -> float:
    predicted, measured = np.asarray(predicted), np.asarray(measured)
    favourites = np.argsort(predicted, kind="stable")[:k]
    return float(measured[favourites].min() / measured.min() - 1.0)


def group_tau(predicted, measured) -> float | None:
    """Kendall tau of one group, or None when it is undefined (fewer than 2 items, or constant)."""
    if len(measured) < 2:
        return None
    tau = kendalltau(predicted, measured).statistic
    return None if np.isnan(tau) else float(tau)


def mape(predicted, measured) -> float:
    predicted, measured = np.asarray(predicted), np.asarray(measured)
    return float(np.mean(np.abs(predicted - measured) / measured))


def evaluate(groups: list[str], predicted, measured) -> dict:
    """Mean top-1/top-5 slowdown and Kendall tau over groups with at least 2 candidates, and overall MAPE."""
    by_group = defaultdict(list)
    for i, g in enumerate(groups):
        by_group[g].append(i)
    predicted, measured = np.asarray(predicted), np.asarray(measured)
    multi = [idx for idx in by_group.values() if len(idx) > 1]
    taus = [t for idx in multi if (t := group_tau(predicted[idx], measured[idx])) is not None]
    mean = lambda xs: float(np.mean(xs)) if xs else float("nan")  # noqa: E731
    return {"groups": len(multi), "records": len(measured),
            "top1_slowdown": mean([top_k_slowdown(predicted[idx], measured[idx], 1) for idx in multi]),
            "top5_slowdown": mean([top_k_slowdown(predicted[idx], measured[idx], 5) for idx in multi]),
            "kendall_tau": mean(taus), "mape": mape(predicted, measured)}


def table(rows: dict[str, dict]) -> str:
    """A text table: one row per model name."""
    head = f"{'model':<40} {'groups':>6} {'records':>7} {'top-1':>8} {'top-5':>8} {'tau':>6} {'MAPE':>7}"
    lines = [head, "-" * len(head)]
    for name, m in rows.items():
        lines.append(f"{name:<40} {m['groups']:>6} {m['records']:>7} {m['top1_slowdown']:>8.1%} "
                     f"{m['top5_slowdown']:>8.1%} {m['kendall_tau']:>6.3f} {m['mape']:>7.1%}")
    return "\n".join(lines)
