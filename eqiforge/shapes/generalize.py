"""A plan for every value of a program's symbolic dims: the plan extracted at the symbols' hints, lifted
(lower/symbolic.py), written as torch code that reads its sizes from its inputs, checked against the program
converted at other values; and shape buckets, where extraction priced at other sizes chooses another plan."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..dims import Lifter, instantiate, variable
from ..errors import EqiforgeError, NoPlanForEverySize
from ..frontend.symbolic import resized
from ..lower import symbolic
from ..lower.plan import build_plan
from ..lower.pytorch_source import ident
from ..lower.torch_code import to_torch_code
from ..lower.writer import provenance
from ..pipeline import validate
from ..pipeline.options import Options
from ..runtime.torch_plan import BucketedPlan, TorchPlan


def examples_at(captured, values: dict[str, int]) -> list[torch.Tensor]:
    """The example call's tensors resized to the symbols' ``values`` (frontend/symbolic.py ``resized``)."""
    shapes = lifted_inputs(captured)
    return [resized(t, instantiate(shapes[n], values)) for n, t in zip(captured.input_names, captured.inputs)]


def lifted_inputs(captured) -> dict[str, tuple]:
    return symbolic.input_shapes(captured.graph, captured.symbolic.lifter)


def generalize(optimized, captured, opts: Options, title: str) -> None:
    """Make ``optimized`` (its plan extracted at the symbols' hints) serve every value of them: its plan
    lifted (lower/symbolic.py), written as torch code reading the sizes from its inputs, and checked against
    the program converted at other values of the symbols (the traced call's among them). Where extraction,
    priced at a quarter and four times the hint, chooses another plan, that plan serves a range of its own
    (a bucket, chosen at call time; the saturated e-graph is shared). An EqiforgeError when the hint's plan
    does not hold at other values; a bucket's plan that does not is dropped."""
    program = captured.symbolic
    shapes = lifted_inputs(captured)
    arguments = {n: ident(n) for n in captured.input_names if n not in captured.param_inputs}
    main = _symbolic_runner(optimized.plan, program.lifter, captured, title, optimized.report.rulesets)
    checked = [_checked(main, captured, values, opts) for values in program.check_values()]
    failed = next((c for c in checked if c.failure), None)
    if failed:
        raise NoPlanForEverySize(f"no plan for every size: the plan lifted from {program.hints} {failed}")
    (symbol, hint), = program.hints.items() if len(program.hints) == 1 else ((None, None),)
    buckets, notes = [(hint, main)], []
    for values in program.representative_values() if optimized.extraction and not optimized.shared_blocks else ():
        bucket, note = _bucket(optimized, captured, values, opts, title)
        notes.append(note)
        if bucket is not None:
            buckets.append((values[symbol], bucket))
    runner = main if len(buckets) == 1 else BucketedPlan(
        sorted(buckets, key=lambda b: b[0]), symbolic.size_prelude(shapes, arguments, only=symbol)[0].replace(
            variable(symbol), "size", 1), list(arguments.values()))
    optimized.generalize(runner, runner.source, shapes, {s: r[0] for s, r in program.ranges.items()})
    places = "; ".join(map(str, checked)) or "the hints only"
    optimized.report.symbolic = f"{program.describe()}; the plan checked at {places}" + "".join(f"; {n}" for n in notes)


def _symbolic_runner(plan, lifter, captured, title: str, rulesets) -> TorchPlan:
    """``plan`` lifted by ``lifter`` and written as torch code reading its sizes from the inputs."""
    names = captured.input_names
    try:
        lifted = symbolic.lift(plan.graph, lifter)
        prelude = symbolic.size_prelude(lifted_inputs(captured),
                                        {n: ident(n) for n in names if n not in captured.param_inputs})
    except symbolic.NotSymbolic as err:
        raise NoPlanForEverySize(f"no plan for every size: {err}") from None
    header = provenance(plan, title, rulesets) + [f"symbolic dims: {captured.symbolic.describe()}"]
    return TorchPlan(to_torch_code(lifted, names, captured.param_inputs, header, prelude))


@dataclass(frozen=True)
class SizeCheck:
    """A plan for every size checked against the program converted at some values of its symbols (``where``:
    "s=v, ..."); ``failure`` says how it failed there ("" where it passed)."""

    where: str
    failure: str = ""

    def __str__(self) -> str:
        return f"fails at {self.where}: {self.failure}" if self.failure else self.where


def _checked(runner, captured, values: dict[str, int], opts: Options) -> SizeCheck:
    """``runner`` against the program converted at ``values`` (a program that does not convert there, a slice
    empty at the smallest size, fails the check: no plan for every size)."""
    where = ", ".join(f"{s}={v}" for s, v in values.items())
    try:
        graph = captured.symbolic.graph_at(values)
    except EqiforgeError as err:
        return SizeCheck(where, f"the program does not convert there ({err})")
    verdict = validate.PlanCheck(graph, captured.input_names, examples_at(captured, values), captured.param_inputs,
                                 opts.search.assume_finite)(runner)
    return SizeCheck(where, "" if verdict.ok else verdict.describe())


def _bucket(optimized, captured, values: dict[str, int], opts: Options, title: str):
    """(the runner of the plan extraction chooses with the e-graph priced at ``values``, or None when it is
    the hint's plan or does not hold; a note for the report)."""
    program, extraction = captured.symbolic, optimized.extraction
    where = ", ".join(f"{s}={v}" for s, v in values.items())
    snap = symbolic.snapshot_at(extraction.snapshot, program.lifter, values)
    node_cost = optimized.search.prices(snap)
    selection = optimized.search.extracted(snap, node_cost)
    if _reached(snap, selection.choice) == _reached(snap, extraction.selection.choice):
        return None, f"priced at {where}: the same plan"
    graph = program.graph_at(values, symbolic=True)
    plan = build_plan(snap, selection.choice, graph, optimized.cost_model, opts.search.fold_constants)
    lifter = Lifter(program.sizes.expressions, values)
    try:
        runner = _symbolic_runner(plan, lifter, captured, title, optimized.report.rulesets)
    except EqiforgeError as err:
        return None, f"priced at {where}: another plan, not used ({err})"
    check = _checked(runner, captured, values, opts)
    if check.failure:
        return None, f"priced at {where}: another plan, not used (it {check})"
    return runner, f"priced at {where}: another plan ({plan.predicted_seconds * 1e6:.1f} us predicted there)"


def _reached(snap, choice: dict[int, int]) -> dict[int, int]:
    """The chosen e-node of every e-class the roots reach: two choices give the same plan when these agree."""
    reached, stack = {}, list(snap.roots)
    while stack:
        c = stack.pop()
        if c not in reached:
            reached[c] = choice[c]
            stack.extend(snap.node_children[choice[c]])
    return reached
