"""What per-round timings say about two candidates: how much faster one is, and how sure that is.

A round times every candidate once, so the ratio of two candidates' times in one round cancels what the
machine did to both (drift, another process): the rounds' log-ratios are the evidence. Their location, the
Hodges-Lehmann estimate (the median of the pairwise means of the log-ratios), says how much faster; the
Wilcoxon signed-rank test says how sure, and its confidence bounds are the pairwise means at the test's
critical ranks. For two candidates that are the same program a round's log-ratio is as likely negative as
positive, whatever the noise's shape (bimodal calls, a preempted round), so the test's false-positive rate
is exact at every number of rounds, not a normal approximation's; and a consistent gain needs no more rounds
than its sign takes to show (five rounds of five in agreement pass ``ONE_LOOK_ALPHA``, ten of ten ``ALPHA``).
The error rates of the decisions built on it are simulated on this machine's measured noise
(bench/decision_rule.py, checked by tests/test_decision_rule.py) and stated in docs/decisions.md.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from . import timing

ALPHA = 0.01  # one-sided, per look: a candidate is faster "beyond doubt" when its gain's confidence bound at
#               1 - ALPHA is above the gain asked for; the rounds are looked at after each round from FIRST_LOOK on
ONE_LOOK_ALPHA = 0.05  # the level of a decision on fewer rounds than FIRST_LOOK: one test, taken once timing ends
FIRST_LOOK = 2 * timing.MIN_ROUNDS  # the round from which timing may stop early (timing.time_candidates)


@dataclass(frozen=True)
class Comparison:
    """The ratio of a first candidate's time to a second's over the rounds both ran: its estimate and its
    one-sided ``1 - ALPHA`` confidence bounds (``low`` 0, ``high`` inf: the rounds cannot bound it)."""

    rounds: int
    estimate: float
    low: float
    high: float

    def faster_by(self, gain: float) -> bool:
        """Whether the first is faster than the second by more than ``gain`` (a fraction) beyond doubt."""
        return self.high * (1 + gain) < 1.0

    def slower_by(self, gain: float) -> bool:
        """Whether the first is slower than the second by more than ``gain`` beyond doubt."""
        return self.low > 1.0 + gain


def compare(ratios: list[float]) -> Comparison:
    """The evidence of per-round ratios (first candidate's time over the second's, one per round), at the
    level of the rounds' number: ALPHA from FIRST_LOOK rounds on, ONE_LOOK_ALPHA below."""
    logs = np.log(np.asarray([r for r in ratios if r > 0], dtype=float))
    n = len(logs)
    if not n:
        return Comparison(0, 1.0, 0.0, math.inf)
    alpha = ALPHA if n >= FIRST_LOOK else ONE_LOOK_ALPHA
    upper = np.triu_indices(n)
    walsh = np.sort(((logs[:, None] + logs[None, :]) / 2)[upper])  # the n(n+1)/2 pairwise means, each pair once
    critical = _critical_rank(n, alpha)
    estimate = math.exp(float(np.median(walsh)))
    if critical < 0:
        return Comparison(n, estimate, 0.0, math.inf)
    return Comparison(n, estimate, math.exp(float(walsh[critical])), math.exp(float(walsh[-1 - critical])))


@functools.lru_cache(maxsize=None)
def _critical_rank(n: int, alpha: float) -> int:
    """The largest c with P(T <= c) <= alpha for the signed-rank statistic T of n rounds with no difference
    (its exact distribution: each rank's sign a fair coin), or -1 where even T = 0 is likelier than alpha
    (fewer than 7 rounds at ALPHA 0.01). The confidence bounds are the pairwise means of rank c from each end."""
    counts = np.zeros(n * (n + 1) // 2 + 1)
    counts[0] = 1.0
    for rank in range(1, n + 1):  # the distribution of T over the first `rank` ranks, as probabilities
        shifted = np.zeros_like(counts)
        shifted[rank:] = counts[:-rank]
        counts = (counts + shifted) / 2
    below = np.nonzero(np.cumsum(counts) <= alpha)[0]
    return int(below[-1]) if len(below) else -1
