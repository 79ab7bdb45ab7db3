"""Timing candidates that compute the same thing, on a shared, noisy machine, within a time budget.

The protocol (measured on this project's 2-core machines, where a fixed order gave 2x errors on small
programs): every candidate is called once first (its first call compiles, allocates, warms its caches; a
candidate that raises is dropped with the reason); then each round visits the candidates in a random order,
and each visit is an untimed call followed at once by the timed one, so a candidate is timed on the caches
it left itself, never on what a neighbour warmed or flushed. Comparisons are per round (the ratio of two
candidates' times in the same round cancels the machine's drift, which moved a GEMM 1.6x between runs
here) and a round is only as long as its candidates: no time is spent where nothing is learned. A candidate
the caller finds beaten beyond doubt leaves the rounds (racing): a plan 4x slower than the program cost
two-thirds of a round where it could no longer win.
"""
from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

MIN_ROUNDS = 5  # fewer cannot tell a quartile from a median
MAX_ROUNDS = 100
HARD_LIMIT = 1.5  # rounds stop at this many budgets even before MIN_ROUNDS (then no decision is taken)


@dataclass
class Timings:
    """Seconds of each timed call, per candidate, one per round; candidates that failed, and why."""

    seconds: dict[str, list[float]] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    first_call: dict[str, float] = field(default_factory=dict)  # seconds of each candidate's first call
    note: str = ""  # why fewer rounds than MIN_ROUNDS were timed, if so

    @property
    def rounds(self) -> int:
        """Rounds timed (a candidate that left the race early has fewer)."""
        return max((len(v) for v in self.seconds.values()), default=0)

    def median(self, name: str) -> float:
        return statistics.median(self.seconds[name])

    def ratios(self, name: str, other: str) -> list[float]:
        """``name``'s time over ``other``'s, round by round (the rounds both were timed in: the first ones)."""
        return [a / b for a, b in zip(self.seconds[name], self.seconds[other]) if b > 0]


def time_candidates(candidates: dict[str, Callable[[], object]], budget_s: float, *, seed: int = 0,
                    min_rounds: int = MIN_ROUNDS, max_rounds: int = MAX_ROUNDS, sync: Callable[[], None] = None,
                    flush: Callable[[], None] = None, clock: Callable[[], float] = time.perf_counter,
                    settled: Callable[[Timings], bool] = None,
                    beaten: Callable[[Timings], set[str]] = None, calls: int = 1) -> Timings:
    """Time every candidate (a call with no arguments) by the protocol above: rounds until ``max_rounds``, or
    until ``budget_s`` is spent once ``min_rounds`` are done, or until ``settled(timings)`` says more rounds
    cannot change the decision; the candidates ``beaten(timings)`` names are not timed again (both are asked
    from ``2 * min_rounds`` rounds on); fewer rounds (the note says how many) where the first
    calls and rounds pass HARD_LIMIT budgets before that. ``sync`` waits for a device's queued work (CUDA);
    ``flush`` evicts its caches before each visit (a GPU's L2), so a candidate is timed on its own warm-up call
    only. A visit times ``calls`` calls, each right after the one before, and counts their median: where a call's
    time is bimodal (a matrix-vector product on 2 threads), a few per visit keep each round's ratio stable."""
    sync, flush = sync or (lambda: None), flush or (lambda: None)
    timings = Timings()
    started = clock()
    for name, call in candidates.items():
        t0 = clock()
        try:
            call()
            sync()
        except Exception as err:  # noqa: BLE001 - a candidate that cannot run is dropped, never the user's error
            timings.failed[name] = f"{type(err).__name__}: {err}"
            continue
        timings.first_call[name] = clock() - t0
        timings.seconds[name] = []
    names = list(timings.seconds)
    order = random.Random(seed)
    round_cost = 0.0
    for done in range(max_rounds):
        spent = clock() - started
        if done >= min_rounds and spent >= budget_s or done >= 2 * min_rounds and settled and settled(timings):
            break
        if done >= 2 * min_rounds and beaten:
            names = [n for n in names if n not in beaten(timings)] or names
        if spent + round_cost > HARD_LIMIT * budget_s:  # the budget cannot fit the rounds a decision needs
            timings.note = (f"{done} rounds fit the budget of {budget_s:g} s (first calls {spent:.3g} s"
                            + (f", a round {round_cost:.3g} s)" if done else ")"))
            break
        round_started = clock()
        for name in order.sample(names, len(names)):
            flush()
            candidates[name]()  # the untimed call: the timed one runs on the caches this one left
            sync()
            timed = []
            for _ in range(calls):
                t0 = clock()
                candidates[name]()
                sync()
                timed.append(clock() - t0)
            timings.seconds[name].append(statistics.median(timed))
        round_cost = clock() - round_started
    return timings


def quantile(values: list[float], q: float) -> float:
    """The ``q`` quantile of ``values`` (linear interpolation)."""
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)
