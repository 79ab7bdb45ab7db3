"""The backends as a table: one entry per way a plan runs, saying what the rest of the pipeline asks of it.

``optimize()`` and the torch.compile backend read an entry's fields instead of comparing the backend's name:
which rule layers saturate and which prices apply (``kernels``), how a plan is lowered to what runs
(``lower``), whether ``optimize()`` times the plan against the program (``timed``), whether a plan for every
size can run on it (``symbolic``), and what runs where the plan is predicted no better (``original``: None
where the plan runs whatever, a triton plan being what its user asked for). ``auto`` is no entry: it is
resolved once, at the top (``resolve``).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..errors import EqiforgeError
from ..lower.torch_code import to_torch_code
from ..lower.writer import provenance
from .inductor_plan import InductorPlan, compiled_original
from .torch_plan import TorchPlan
from .triton_plan import TritonPlan

AUTO = "auto"  # torch code, with Inductor's compile of the program and of the plan timed beside it


@dataclass(frozen=True)
class Backend:
    name: str
    kernels: bool  # the kernel layer's rules and prices: the plan's nodes are generated Triton kernels
    timed: bool  # optimize() times the plan against the program (inductor: compiled later; triton: never)
    symbolic: bool  # a plan for every value of symbolic dims runs on it (as torch code)
    original: Callable | None  # fn -> what runs where the plan is predicted no better (None: the plan runs)
    lower: Callable  # (plan, input names, bound inputs, title, rule sets) -> (runner, its source, notes)

    @property
    def cpu_priced(self) -> bool:
        """Whether a plan of CPU tensors is priced for this CPU (a kernel plan runs on a GPU)."""
        return not self.kernels


def _torch_code(plan, input_names, bound, title, rulesets):
    return to_torch_code(plan.graph, input_names, bound, provenance(plan, title, rulesets))


def _lower_torch(plan, input_names, bound, title, rulesets):
    runner = TorchPlan(_torch_code(plan, input_names, bound, title, rulesets))
    return runner, runner.source, []


def _lower_inductor(plan, input_names, bound, title, rulesets):
    runner = InductorPlan(_torch_code(plan, input_names, bound, title, rulesets))  # compiled by the caller
    return runner, runner.source, []


def _lower_triton(plan, input_names, bound, title, rulesets):
    runner = TritonPlan(plan, input_names, {**plan.graph.params, **(bound or {})}, list(bound or {}), title=title,
                        rulesets=rulesets)
    return runner, runner.source, runner.notes


BACKENDS: dict[str, Backend] = {b.name: b for b in [
    Backend("torch", kernels=False, timed=True, symbolic=True, original=lambda fn: fn, lower=_lower_torch),
    Backend("triton", kernels=True, timed=False, symbolic=False, original=None, lower=_lower_triton),
    Backend("inductor", kernels=False, timed=False, symbolic=False, original=compiled_original,
            lower=_lower_inductor),
]}
NAMES = (AUTO, *BACKENDS)


def resolve(name: str, auto: str = "torch") -> tuple[Backend, bool]:
    """(the backend called ``name``, whether it was ``auto``: then ``auto``'s entry, with Inductor timed after)."""
    if name == AUTO:
        return BACKENDS[auto], True
    if name not in BACKENDS:
        raise EqiforgeError(f"unknown backend {name!r}; available: {list(NAMES)}")
    return BACKENDS[name], False
