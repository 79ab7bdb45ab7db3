"""The Report of one optimization: what every stage did, how long it took, and what it predicts."""
from __future__ import annotations

import logging
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

from ..egraph.report import SaturationReport

log = logging.getLogger("eqiforge")


@dataclass
class Report:
    rulesets: list[str]
    saturation: SaturationReport
    stage_seconds: dict[str, float] = field(default_factory=dict)
    predicted_before: float = 0.0  # seconds, the captured program as written
    predicted_after: float = 0.0  # seconds, the extracted plan
    predicted_written: float = 0.0  # seconds, the program's calls as written, each one native kernel (0: unknown)
    extraction_method: str = ""
    extraction_cost: float = 0.0
    cost_model: str = ""
    ops_before: dict[str, int] = field(default_factory=dict)
    ops_after: dict[str, int] = field(default_factory=dict)
    folded_constants: int = 0
    lowering_notes: list[str] = field(default_factory=list)  # e.g. kernels that fell back to PyTorch (the
    #                                                          runner's own list: it adds to it at run time)
    attention_notes: list[str] = field(default_factory=list)  # why a softmax(S) V is not one attention kernel
    validation: str = ""  # what the plan check found and what was returned (empty: not checked)
    plan_check_intervened: bool = False  # the check found the first plan wrong: mended it or fell back
    runs: str = "the plan"  # what a call runs: the plan, or the original program (and why)
    measured: str = ""  # what the measured choice timed and decided (choice.py; "": no measured choice)
    provisional: bool = False  # a measured choice was timed on a busy machine: not cached, measured again later
    from_cache: bool = False  # every measured choice was read from EqiForge's cache (none timed here)
    repeated_blocks: str = ""  # "N repeated blocks of M nodes optimized once", or why not (blocks.py)
    repeated_blocks_found: bool | None = None  # None: not looked for (share_blocks=False)
    capture_fallback: str = ""  # why torch.export did not capture the program and which path did ("": it did)
    symbolic: str = ""  # a plan for every value of its symbolic dims: the dims, their ranges, the checks

    # the saturation's headline numbers, at the top level for convenience
    @property
    def stop_reason(self) -> str:
        return self.saturation.stop_reason

    @property
    def iterations(self) -> int:
        return self.saturation.iterations

    @property
    def enodes(self) -> int:
        return self.saturation.enodes

    @property
    def eclasses(self) -> int:
        return self.saturation.eclasses

    @property
    def speedup(self) -> float:
        return self.predicted_before / self.predicted_after if self.predicted_after else float("inf")

    def per_iteration(self) -> list[dict]:
        return self.saturation.per_iteration()

    def matches_per_rule(self) -> dict[str, int]:
        return self.saturation.matches_per_rule()

    def summary(self) -> str:
        """A short table for people: sizes, predicted times and seconds per stage."""
        def count(ops: dict[str, int]) -> str:
            compute = sum(n for op, n in ops.items() if op not in ("Input", "Param", "Fill"))
            return f"{compute} ops"

        rows = [("capture", self.capture_fallback)] if self.capture_fallback else []
        rows += [
            ("rule sets", ", ".join(self.rulesets) or "(none)"),
            ("program", f"{count(self.ops_before)} -> {count(self.ops_after)}"),
            ("predicted time", f"{self.predicted_before * 1e6:.1f} us -> {self.predicted_after * 1e6:.1f} us "
                               f"({self.speedup:.2f}x, {self.cost_model})"
                               + (f"; as written {self.predicted_written * 1e6:.1f} us"
                                  if self.predicted_written else "")),
            ("e-graph", f"{self.enodes} e-nodes, {self.eclasses} e-classes after {self.iterations} iterations"),
            ("stopped because", self.stop_reason + (" (this saturation read from EqiForge's cache)"
                                                    if self.saturation.from_cache else "")),
            ("extraction", f"{self.extraction_method}"),
            ("constants folded", str(self.folded_constants)),
            ("seconds per stage", ", ".join(f"{k} {v:.2f}" for k, v in self.stage_seconds.items())),
        ]
        if self.repeated_blocks and self.repeated_blocks_found is not False:
            rows.append(("repeated blocks", self.repeated_blocks))
        if self.lowering_notes or self.attention_notes:
            rows.append(("lowering", "; ".join(self.lowering_notes + self.attention_notes)))
        if self.validation:
            rows.append(("plan check", self.validation))
        if self.symbolic:
            rows.append(("symbolic dims", self.symbolic))
        if self.measured:
            rows.append(("measured", self.measured))
        if self.runs != "the plan":
            rows.append(("a call runs", self.runs))
        top = list(self.matches_per_rule().items())[:5]
        if top:
            rows.append(("top rules (matches)", ", ".join(f"{r} {n}" for r, n in top)))
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)

    def record(self, decision, then: bool = False) -> None:
        """A measured choice's outcome (decide/choice.Decision), alone or (``then``) after the one before."""
        first = not (then and self.measured)
        self.measured = "; then ".join(filter(None, [None if first else self.measured, decision.describe()]))
        self.provisional = decision.provisional or (not first and self.provisional)
        self.from_cache = decision.from_cache and (first or self.from_cache)

    def as_dict(self) -> dict:
        """The report as plain data (``eqiforge optimize --json``): what was predicted and measured, what runs
        and why, seconds per stage, the e-graph's sizes, the plan check; numbers in seconds."""
        fields = {k: v for k, v in self.__dict__.items() if k != "saturation"}
        return {**fields, "speedup_predicted": self.speedup if self.predicted_after else None,
                "egraph": {"enodes": self.enodes, "eclasses": self.eclasses, "iterations": self.iterations,
                           "stop_reason": str(self.stop_reason), "saturation_seconds": self.saturation.seconds,
                           "from_cache": self.saturation.from_cache},
                "matches_per_rule": self.matches_per_rule()}

    def __str__(self) -> str:
        return self.summary()


class StageTimer:
    """Times named pipeline stages into a dict; a stage entered inside another is its own (an Inductor
    build inside the measuring counts as "compile", not "measure"). Stage starts and ends are logged (INFO)."""

    def __init__(self):
        self.seconds: dict[str, float] = {}
        self._inner: list[float] = []  # per open stage: seconds spent in stages opened inside it

    @contextmanager
    def __call__(self, stage: str):
        log.info("%s ...", stage)
        t0 = time.perf_counter()
        self._inner.append(0.0)
        try:
            yield
        finally:
            elapsed = time.perf_counter() - t0
            own = elapsed - self._inner.pop()
            if self._inner:
                self._inner[-1] += elapsed
            self.seconds[stage] = self.seconds.get(stage, 0.0) + own
            log.info("%s done in %.2f s", stage, own)
