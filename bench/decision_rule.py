"""The measured choice's error rates, simulated on this machine's noise: how often a candidate that is not
faster replaces the program, how often a truly faster one is taken, and after how many rounds.

The noise is replayed, not modelled: each simulated round draws one measured round of a tie pair of
bench/data/cpu/decision_noise.json (the same program timed as two candidates, `decision_noise.py`), so the
pair's shared drift, bimodal calls and preempted rounds are this machine's; the plan's time is its draw
divided by the true ratio. The rounds run through EqiForge's own loop (`decide/timing.py`) on a clock the
simulation keeps, with the choice's stopping, racing and deciding (`decide/choice.py`), budget and all.
`--noise 2` doubles every round's deviation from the pair's mean (in logs): a busier machine.

    python bench/decision_rule.py --seeds 200

writes bench/results/decision_rule.md (tests/test_decision_rule.py checks the same rates on fewer seeds).
"""
from __future__ import annotations

import argparse
import json
import math
import random
from pathlib import Path

from eqiforge.decide import choice, timing
from measure import write_results

NOISE = Path(__file__).parent / "data" / "cpu" / "decision_noise.json"
RESULTS = Path(__file__).parent / "results" / "decision_rule.md"
TRUE_RATIOS = (0.9, 1.0, 1.02, 1.05, 1.1, 1.2, 1.5)  # the program's time over the plan's


def tie_pairs() -> dict[str, tuple[list[float], list[float]]]:
    """program name -> the per-round seconds of its two equal candidates, as measured."""
    pairs = json.loads(NOISE.read_text())["pairs"]
    return {name.removeprefix("tie: "): (p["a"], p["b"]) for name, p in pairs.items() if name.startswith("tie: ")}


class Replay:
    """A program and a plan ``ratio`` times faster, whose calls in round k cost a measured round's two times
    (drawn with replacement; deviations from the round's mean scaled by ``noise`` in logs)."""

    def __init__(self, pair: tuple[list[float], list[float]], ratio: float, seed: int, noise: float = 1.0):
        self.rounds, self.ratio, self.noise = list(zip(*pair)), ratio, noise
        self.rng, self.now, self.drawn, self.calls = random.Random(seed), 0.0, [], {"program": 0, "plan": 0}

    def clock(self) -> float:
        return self.now

    def _round(self, k: int) -> tuple[float, float]:
        while len(self.drawn) <= k:
            a, b = self.rng.choice(self.rounds)
            mean = math.sqrt(a * b)
            self.drawn.append((mean * (a / mean) ** self.noise, mean * (b / mean) ** self.noise / self.ratio))
        return self.drawn[k]

    def candidate(self, name: str):
        def call():  # the first call, then an untimed and a timed call per round
            k = max(0, (self.calls[name] - 1) // 2)
            self.calls[name] += 1
            self.now += self._round(k)[name == "plan"]
        return call


def simulate(pair, ratio: float, seed: int, noise: float = 1.0, budget_s: float = 2.0, min_gain: float = 0.005,
             max_rounds: int = timing.MAX_ROUNDS) -> tuple[str, int]:
    """(the winner, rounds timed) of one measured choice between the program and the plan, as choose() runs it."""
    machine = Replay(pair, ratio, seed, noise)
    timings = timing.time_candidates({n: machine.candidate(n) for n in ("program", "plan")}, budget_s,
                                     clock=machine.clock, seed=seed, max_rounds=max_rounds,
                                     settled=lambda t: choice.settled(t, min_gain),
                                     beaten=lambda t: choice.beaten(t, min_gain))
    return choice.decide(timings, ["program", "plan"], min_gain)[0], timings.rounds


def rates(pair, ratio: float, seeds: int, **kw) -> tuple[float, int, int]:
    """(share of seeds the plan was chosen, median rounds, 90th percentile of rounds)."""
    runs = [simulate(pair, ratio, seed, **kw) for seed in range(seeds)]
    rounds = sorted(n for _, n in runs)
    return sum(w == "plan" for w, _ in runs) / seeds, rounds[seeds // 2], rounds[int(seeds * 0.9)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=200)
    args = parser.parse_args()
    header = ["| noise | program | " + " | ".join(f"{r:g}x" for r in TRUE_RATIOS) + " |",
              "|---|---|" + "---:|" * len(TRUE_RATIOS)]
    sections = []
    for title, kw in (("Until settled (the budget of 2 s, at most 100 rounds)", {}),
                      ("One look: a budget that fits 6 rounds (a program of tens of milliseconds)",
                       {"max_rounds": 6})):
        rows = []
        for noise in (1.0, 2.0):
            for name, pair in tie_pairs().items():
                cells = []
                for ratio in TRUE_RATIOS:
                    share, median, p90 = rates(pair, ratio, args.seeds, noise=noise, **kw)
                    cells.append(f"{share:.1%} ({median}/{p90})")
                rows.append(f"| {noise:g}x | {name} | " + " | ".join(cells) + " |")
        sections += [f"## {title}", "", *header, *rows, ""]
    write_results(RESULTS, [
        "# The measured choice's error rates, simulated on this machine's noise", "",
        f"Each cell: the share of {args.seeds} simulated decisions that ran the plan, for a plan that is truly "
        "the column's ratio faster than the program (0.9x: slower; 1x: a tie), then the median and 90th "
        "percentile of rounds timed. Noise: rounds of the program's tie pair in "
        "`bench/data/cpu/decision_noise.json` replayed (2x: their deviations doubled). Rule: "
        "`decide/choice.py` (min_gain 0.005) on `decide/evidence.py`'s signed-rank bounds.", "", *sections])


if __name__ == "__main__":
    main()
