"""Measured choice: which candidate runs a program, decided by timing them where the cost model cannot tell.

The cost model ranks the candidates (the program as written, EqiForge's plan, ...); where the predicted best
is not clearly ahead (``DECISIVE``), or when asked (``measure="always"``), the candidates are timed on the
example inputs (``timing.py``) and a candidate replaces a simpler one only when it is faster by more than
``min_gain`` beyond doubt (``evidence.py``: a signed-rank confidence bound on the rounds' ratios, whose
error rates on this machine's noise docs/decisions.md states). Otherwise the simpler one runs, the program
itself first of all. Decisions are cached on disk (the ``measure`` folder of EqiForge's
cache), keyed by the program, the candidates and this machine, so a second process does not time again;
a decision timed while other processes used the cores PyTorch's threads need (``load.py``) is provisional:
used by this process, not cached, measured again by the next one;
every measurement is also appended to ``records.jsonl`` there (predicted and measured seconds per candidate),
the data a cost model learns plan-level ranking from.
"""
from __future__ import annotations

import enum
import hashlib
import itertools
import json
import logging
import platform
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import torch
import torch.utils._pytree as pytree

from . import evidence, load, timing
from ..caches import append_bounded, records_max_bytes
from ..paths import cache_dir, read_entry, write_entry

log = logging.getLogger("eqiforge")

VERSION = 3  # of the decisions and records (2: calls take copies of the inputs in turn; 3: the signed-rank rule)
DECISIVE = 2.0  # "auto": a candidate predicted this many times faster than every other one runs untimed
ALIKE = 0.03  # timing stops once the winner so far is at most this much slower than any other, beyond doubt
RECORDS = "records.jsonl"
INPUT_SETS = 4  # copies of the example inputs a candidate's calls take in turn ...
SETS_BYTES = 256 * 2**20  # ... as long as they fit in this many bytes together (else one: the example's)


@dataclass
class Candidate:
    """One way to run the program: ``call`` runs it once on the example inputs."""

    name: str
    call: Callable[[], object]
    predicted_s: float | None = None  # the cost model's price (None: it cannot price this candidate)
    source: str = ""  # what identifies it in the decision's cache key (generated code, the program's text)
    prepare: Callable[[], None] | None = None  # builds it (an Inductor compile) once it is to be timed: not
    #                                            when the decision is cached or predicted, not in the budget
    nodes: list[dict] | None = None  # a plan's nodes as the cost model prices them (cost/plans.py), recorded


class Reason(str, enum.Enum):
    """How a decision was taken."""

    ONE_CANDIDATE = "one candidate"
    NO_BUDGET = "a budget of 0 s"
    PREDICTED = "the prediction is decisive"
    TOO_FEW_ROUNDS = "too few rounds to decide"
    FASTER = "measured faster beyond doubt"
    NOT_FASTER = "no candidate was faster beyond doubt"


@dataclass
class Decision:
    """Which candidate runs (``winner``, a candidate's name), how that was decided (``reason``; ``why``
    renders it with its numbers) and what was measured."""

    winner: str
    reason: Reason
    why: str
    medians: dict[str, float] = field(default_factory=dict)  # seconds per candidate; empty: not measured
    rounds: int = 0
    failed: dict[str, str] = field(default_factory=dict)
    from_cache: bool = False
    other_cores: float | None = None  # other processes' cores while timing (load.py); None: not measured
    provisional: bool = False  # timed on a busy machine: not cached, measured again by the next process

    def __post_init__(self):
        self.reason = Reason(self.reason)  # read back from the cache as its value

    @property
    def measured(self) -> bool:
        """Whether timings decided (else the prediction did, as with measure="never")."""
        return self.reason in (Reason.FASTER, Reason.NOT_FASTER)

    def describe(self) -> str:
        """One line for the report: what was measured, and what runs."""
        if not self.medians:
            return f"not measured ({self.why}); runs: {self.winner}"
        base = next(iter(self.medians.values()))
        parts = [f"{name} {ms(s)}" + (f" ({base / s:.2f}x)" if i and s > 0 else "")
                 for i, (name, s) in enumerate(self.medians.items())]
        parts += [f"{name} failed ({why})" for name, why in self.failed.items()]
        cached = ", read from EqiForge's cache" if self.from_cache else ""
        busy = (f"; provisional: other processes kept {self.other_cores:.1f} cores busy while timing, so the next "
                f"process measures again" if self.provisional else "")
        return f"{', '.join(parts)} (medians of {self.rounds} rounds{cached}); runs: {self.winner}{busy}"


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms" if seconds >= 1e-4 else f"{seconds * 1e6:.3g} us"


def choose(candidates: list[Candidate], mode: str, budget_s: float, min_gain: float, use_cache: bool = True,
           key: str = "", device: str = "cpu") -> Decision:
    """The candidate that runs (``mode`` "auto" or "always"; "never" is the caller's predicted choice).
    ``candidates`` come simplest first (the program as written leads): a later one replaces an earlier one
    only when measured faster beyond doubt. Unmeasured ("auto" with a decisive prediction, a budget of 0,
    too few rounds in the budget) the predicted best runs. The decision is logged (INFO)."""
    log.info("timing %s (budget %g s)", ", ".join(c.name for c in candidates), budget_s)
    decision = _choose(candidates, mode, budget_s, min_gain, use_cache, key, device)
    log.info("decided: %s", decision.describe())
    return decision


def _choose(candidates: list[Candidate], mode: str, budget_s: float, min_gain: float, use_cache: bool, key: str,
            device: str) -> Decision:
    decided = untimed([(c.name, c.predicted_s) for c in candidates], mode, budget_s)
    if decided is not None:
        return decided
    predicted = _predicted_best(candidates)
    entry = _key(candidates, key, device) if use_cache else None
    stored = _load(entry, candidates) if entry else None
    if stored is not None:
        return stored
    failed = _prepared(candidates)
    with load.OtherLoad() as busy:
        timings = timing.time_candidates({c.name: c.call for c in candidates if c.name not in failed}, budget_s,
                                         settled=lambda t: settled(t, min_gain),
                                         beaten=lambda t: beaten(t, min_gain), **_device_hooks(device))
    timings.failed = {**failed, **timings.failed}
    if timings.rounds < timing.MIN_ROUNDS:
        why = timings.note or "the candidates failed"
        names = [c.name for c in candidates if c.name in timings.seconds]
        runs = predicted.name if predicted.name in names else (names[0] if names else candidates[0].name)
        return Decision(runs, Reason.TOO_FEW_ROUNDS, f"too few rounds to decide: {why}", failed=timings.failed)
    order = [c.name for c in candidates if c.name in timings.seconds]
    winner, why = decide(timings, order, min_gain)
    decision = Decision(winner, Reason.NOT_FASTER if winner == order[0] else Reason.FASTER, why,
                        {n: timings.median(n) for n in timings.seconds}, timings.rounds, timings.failed,
                        other_cores=busy.cores, provisional=busy.disturbing)
    if entry and not decision.provisional:
        write_entry("measure", f"{entry}.json", json.dumps(asdict(decision)).encode())
    _record(candidates, decision, key, device)
    return decision


def input_sets(*inputs) -> list[tuple]:
    """Copies of ``inputs`` (tensors cloned, anything else shared) for candidates' calls to take in turn
    (``rotating``): a timed call then reads inputs the untimed call before it did not leave in the caches,
    as a layer reads what the layer before it wrote, and as bench/'s timings do; on the example alone a
    program of several passes over its input (eager's) was timed 1.6x faster than with fresh inputs, and a
    fused one (Inductor's) gained nothing."""
    tensors = [t for t in pytree.tree_leaves(inputs) if isinstance(t, torch.Tensor)]
    size = sum(t.numel() * t.element_size() for t in tensors)
    if size * INPUT_SETS > SETS_BYTES:
        return [inputs]
    return [pytree.tree_map(lambda x: x.clone() if isinstance(x, torch.Tensor) else x, inputs)
            for _ in range(INPUT_SETS)]


def rotating(call: Callable, sets: list[tuple]) -> Callable[[], object]:
    """A call with no arguments: ``call(*inputs)`` on the next of ``sets`` each time."""
    turn = itertools.cycle(sets)
    return lambda: call(*next(turn))


def _prepared(candidates: list[Candidate]) -> dict[str, str]:
    """Build the candidates that need it; returns why each that could not be built failed."""
    failed = {}
    for c in candidates:
        try:
            if c.prepare is not None:
                c.prepare()
        except Exception as err:  # noqa: BLE001 - a candidate that cannot be built is dropped, never the user's error
            failed[c.name] = f"{type(err).__name__}: {str(err).strip()[:200]}"
    return failed


def unsafe_to_repeat(args: tuple, kwargs: dict) -> str:
    """Why calling the program on these inputs over and over could change what the user holds ("": it
    cannot): an input that is not a tensor, a constant or a plain container, such as a transformers cache,
    which the model appends to. (Programs that write their tensors or a module's state are refused at capture.)"""
    odd = _custom_containers(pytree.tree_flatten((args, kwargs))[1])
    return f"its inputs hold a {odd}, which the program may change in place" if odd else ""


def _custom_containers(tree) -> str:
    """The first container type of a pytree spec that is not a tuple, list or dict ("" if none)."""
    if tree.is_leaf():
        return ""
    if tree.type not in (tuple, list, dict):
        return getattr(tree.type, "__name__", str(tree.type))
    return next((found for child in tree.children() if (found := _custom_containers(child))), "")


def untimed(prices: list[tuple[str, float | None]], mode: str, budget_s: float) -> Decision | None:
    """The decision where nothing is to be timed (one candidate, a budget of 0, "auto" with a predicted best
    ``DECISIVE`` times faster than the rest), from the candidates' (name, predicted seconds); else None.
    Callers whose candidates are dear to build (compiled by Inductor) ask this first."""
    best = min((p for p in prices if p[1] is not None), key=lambda p: p[1], default=prices[0])
    if len(prices) < 2:
        return Decision(prices[0][0], Reason.ONE_CANDIDATE, "one candidate")
    if budget_s <= 0:
        return Decision(best[0], Reason.NO_BUDGET, "a budget of 0 s")
    others = [p for name, p in prices if name != best[0]]
    if mode == "auto" and best[1] is not None and all(p is not None and p >= DECISIVE * best[1] for p in others):
        return Decision(best[0], Reason.PREDICTED, f"{best[0]} predicted {DECISIVE:g}x or more faster than the rest")
    return None


def decide(timings: timing.Timings, order: list[str], min_gain: float) -> tuple[str, str]:
    """(the winner, why): walking ``order`` (simplest first), a candidate takes over from the current winner
    when faster than it by more than ``min_gain`` beyond doubt (``evidence``: the rounds' signed-rank
    confidence bound)."""
    winner, why = order[0], "no candidate was faster beyond doubt"
    for name in order[1:]:
        found = evidence.compare(timings.ratios(name, winner))
        if found.faster_by(min_gain):
            winner, why = name, (f"faster than {winner} beyond doubt over {found.rounds} rounds: "
                                 f"{1 / found.estimate:.2f}x, at least {1 / found.high:.2f}x")
    return winner, why


def settled(timings: timing.Timings, min_gain: float) -> bool:
    """Whether more rounds are not worth their time: against every other candidate, ``decide``'s winner so far
    is at most ALIKE slower beyond doubt (faster, or no more than that slower: candidates a few percent apart
    under a noise of +-5% per round took 80-100 rounds to order). A true tie stops there too, on the simpler
    candidate; a tie under more noise than the ALIKE bound can settle runs to the budget or MAX_ROUNDS (giving a
    candidate up on a projection of its bound cost a 5% gain one decision in ten here)."""
    names = list(timings.seconds)
    winner = decide(timings, names, min_gain)[0]
    return all(evidence.compare(timings.ratios(winner, other)).high <= 1 + ALIKE for other in names if other != winner)


def beaten(timings: timing.Timings, min_gain: float) -> set[str]:
    """The candidates slower than another one by more than ``min_gain`` beyond doubt: they cannot win (``decide``
    would not take them over that one), so they leave the rounds (racing); ``decide`` compares them on the
    rounds they ran."""
    names = list(timings.seconds)
    return {a for a in names if any(evidence.compare(timings.ratios(a, b)).slower_by(min_gain)
                                    for b in names if b != a)}


def _predicted_best(candidates: list[Candidate]) -> Candidate:
    priced = [c for c in candidates if c.predicted_s is not None]
    return min(priced, key=lambda c: c.predicted_s) if priced else candidates[0]


def machine() -> dict:
    """What a measurement depends on besides the program: the processor, threads, library versions."""
    from ..cost.calibrate import machine_key
    found = {**machine_key(), "python": platform.python_version()}
    if torch.cuda.is_available():
        found["gpu"] = torch.cuda.get_device_name()
    return found


def _key(candidates: list[Candidate], key: str, device: str) -> str:
    text = json.dumps([VERSION, key, device, machine(), [(c.name, c.source) for c in candidates]], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def _load(entry: str, candidates: list[Candidate]) -> Decision | None:
    data = read_entry("measure", f"{entry}.json")
    try:
        decision = Decision(**json.loads(data)) if data is not None else None
    except (ValueError, TypeError):
        return None
    if decision is None or decision.winner not in {c.name for c in candidates}:
        return None
    decision.from_cache = True
    return decision


def _device_hooks(device: str) -> dict:
    """CUDA: wait for the queued kernels around each timed call, and flush the L2 between visits."""
    if device != "cuda" or not torch.cuda.is_available():
        return {}
    scratch = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")  # larger than any L2 today
    return {"sync": torch.cuda.synchronize, "flush": scratch.zero_}


def _record(candidates: list[Candidate], decision: Decision, key: str, device: str) -> None:
    """Append the measurement to the records (a JSON line): a cost model's plan-level training data."""
    line = {"version": VERSION, "time": time.time(), "program": key, "device": device, "machine": machine(),
            "runs": decision.winner, "rounds": decision.rounds,
            "candidates": [{"name": c.name, "predicted_s": c.predicted_s, "measured_s": decision.medians.get(c.name),
                            "failed": decision.failed.get(c.name), **({"nodes": c.nodes} if c.nodes else {})}
                           for c in candidates]}
    append_bounded(cache_dir("measure") / RECORDS, json.dumps(line), records_max_bytes())
