"""Why the program keeps running where a plan was made: typed verdicts, rendered into the report's words only
by ``str()``, so that no code reads a sentence back to decide."""
from __future__ import annotations

import enum
from dataclasses import dataclass

from .. import ops
from ..pipeline.options import Options


class Keep(enum.Enum):
    """The reasons the original program runs instead of the plan."""

    EXTERN_ONLY = "the plan is PyTorch calls EqiForge does not optimize"
    NOTHING = "the plan computes nothing"
    NO_FASTER = "the plan is predicted no faster"
    TOO_CLOSE = "the plan is predicted only slightly faster"
    MEASURED = "measured"


@dataclass(frozen=True)
class KeepProgram:
    """A verdict against the plan: ``reason``, with the predicted seconds it rests on (``after``, the plan;
    ``before``, the program; ``as_written``: priced as written rather than as captured) or the measured
    decision's words (``detail``)."""

    reason: Keep
    after: float = 0.0
    before: float = 0.0
    as_written: bool = False
    min_gain: float = 0.0
    detail: str = ""

    def __str__(self) -> str:
        than = " than the program's calls as written" if self.as_written else ""
        times = f"{self.after * 1e6:.1f} us vs {self.before * 1e6:.1f} us{'' if self.as_written else ' as captured'}"
        if self.reason is Keep.NO_FASTER:
            return f"the plan is predicted no faster{than}: {times}"
        if self.reason is Keep.TOO_CLOSE:
            return (f"the plan is predicted only {(self.before / self.after - 1) * 100:.2f}% faster{than} ({times}), "
                    f"less than min_gain={self.min_gain}, within the cost model's error")
        if self.reason is Keep.MEASURED:
            return f"measured: {self.detail}"
        return self.reason.value


def no_better(optimized, opts: Options) -> KeepProgram | None:
    """Why the plan should not replace the program, or None. Only for backends with an original to run and
    with ``original_if_no_better`` (a triton plan is what its user asked for): the plan is only PyTorch calls
    EqiForge does not optimize, or it is predicted faster by less than ``min_gain`` than the captured program
    (priced decomposed, so slower than the user's own calls) or than the program's calls as written, each one
    native kernel."""
    if opts.runtime.entry.original is None or not opts.measuring.original_if_no_better:
        return None
    report = optimized.report
    if nothing_to_optimize(report):
        return KeepProgram(Keep.EXTERN_ONLY if report.ops_after.get("Extern") else Keep.NOTHING)
    after, min_gain = report.predicted_after, opts.measuring.min_gain
    for before, as_written in ((report.predicted_before, False), (report.predicted_written, True)):
        if before and after * (1 + min_gain) >= before:
            return KeepProgram(Keep.NO_FASTER if after >= before else Keep.TOO_CLOSE, after, before, as_written,
                               min_gain)
    return None


def nothing_to_optimize(report) -> bool:
    """Whether the plan computes nothing but PyTorch calls EqiForge does not optimize (or nothing at all): no
    measured choice can find it faster than the program."""
    return {op for op, n in report.ops_after.items() if n and ops.get(op).kind != "leaf"} <= {"Extern"}


def measurable(optimized, opts: Options) -> bool:
    """Whether the program and the plan may be timed to choose: plans with an original to fall back to (the
    torch and inductor backends), when the plan is EqiForge's own (not only calls it does not optimize) and
    the user did not ask for the plan whatever."""
    return (opts.measuring.mode != "never" and opts.runtime.entry.original is not None
            and opts.measuring.original_if_no_better and not nothing_to_optimize(optimized.report))


def measured(detail: str) -> KeepProgram:
    """The verdict of a measured choice the plan lost (``detail``: the decision's words)."""
    return KeepProgram(Keep.MEASURED, detail=detail)
