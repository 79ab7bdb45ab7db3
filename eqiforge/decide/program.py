"""What ``optimize()``'s module runs: the plan, a next-best plan, the program as written, or either compiled by
Inductor (``backend="auto"``), decided by prediction (verdicts.py) or by timing them (choice.py).

Two races at most. The first times the program as written against the plan and the next-best plans (and the
program compiled by Inductor where ``auto`` would time it anyway); the second, for ``auto``, times what won
against the same compiled by Inductor. A plan for every size races its torch code against one dynamic-shape
Inductor compile of it. Each race's ``Decision`` is rendered into ``report.measured``; what runs follows from
its winner (a candidate name), never from its words.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..cost.as_written import library_calls_only
from ..cost.plans import graph_nodes
from ..errors import EqiforgeError
from ..pipeline.options import Options
from ..runtime.inductor_plan import InductorPlan, compiled_original
from ..runtime.torch_plan import BucketedPlan
from . import choice
from .verdicts import KeepProgram, measurable, measured, no_better

NEXT_PLANS = 2  # a measured choice times up to this many next-best distinct plans beside the best ...
NEXT_PLANS_BAND = 1.5  # ... those predicted within this factor of the best candidate (docs/decisions.md)
PROGRAM, PLAN = "program", "plan"  # the candidates' names
COMPILED_PROGRAM, COMPILED_PLAN = "program under Inductor", "plan under Inductor"


def decide_static(optimized, fn, args, kwargs, captured, opts: Options, timer) -> None:
    """Make ``optimized`` (its plan checked, for the example call's signature) run what is predicted or
    measured fastest: see the module docstring."""
    no_inductor = why_not_inductor(opts, captured, args, kwargs) if opts.runtime.auto else "not asked"
    budget = opts.measuring.seconds / (1 if no_inductor else 2)  # both races share measure_seconds
    compiled = None if no_inductor else compiled_original(fn)
    first = FirstRace(no_better(optimized, opts))
    if opts.runtime.entry.timed and measurable(optimized, opts):  # inductor: predicted (dynamo.py measures)
        with timer("measure"):
            raced = compiled if program_compile_may_win(optimized.report, opts, captured) else None
            first = first_race(optimized, fn, args, kwargs, captured, opts, budget, timer, raced)
    why = first.why
    if first.compiled_won:
        optimized.run_original(compiled, why, compiled=True)
    elif why:
        entry = opts.runtime.entry
        optimized.run_original(entry.original(fn), why, compiled=entry.original is compiled_original)
    elif isinstance(optimized.runner, InductorPlan):  # compiled once chosen, not when the original runs
        with timer("compile"):
            optimized.runner.compile(captured.inputs)
        optimized.report.lowering_notes += optimized.runner.notes
    if not no_inductor and not (why and first.compiled_raced):  # the program won a race its compile ran in
        with timer("measure"):
            second_race(optimized, fn, args, kwargs, captured, opts, why, compiled, first.compiled_raced, timer)
    elif no_inductor and opts.runtime.auto and optimized.report.measured:
        optimized.report.measured += f"; Inductor not tried: {no_inductor}"
    optimized.next_plans = None  # the e-graph's alternatives are not kept with the module


def decide_every_size(optimized, fn, args, kwargs, captured, opts: Options, timer) -> None:
    """The same for a plan for every size: the program where the plan is predicted no better (not with shape
    buckets: another plan was predicted better at its size), else, for ``auto``, the plan's torch code against
    its dynamic-shape Inductor compile."""
    why = None if isinstance(optimized.runner, BucketedPlan) else no_better(optimized, opts)
    if why:
        optimized.run_original(fn, why)
    elif opts.runtime.auto and not why_not_inductor(opts, captured, args, kwargs, plans_only=True):
        with timer("measure"):
            dynamic_inductor_race(optimized, captured, opts, timer)


@dataclass
class FirstRace:
    """What the first race decided: why the original runs (None: the plan), whether the program compiled by
    Inductor was one of its candidates, and whether it won."""

    why: KeepProgram | None
    compiled_raced: bool = False
    compiled_won: bool = False


def first_race(optimized, fn, args, kwargs, captured, opts: Options, budget: float, timer,
               compiled=None) -> FirstRace:
    """The program as written against the plan and the next-best plans where the prediction does not decide,
    and against ``compiled`` (the program compiled by Inductor) when given: the second race would time it
    beside whichever won, so it runs in this one, and a program that wins needs no second race."""
    report = optimized.report
    unsafe = choice.unsafe_to_repeat(args, kwargs)
    if unsafe:
        report.measured = f"not measured ({unsafe}); runs: the predicted choice"
        return FirstRace(no_better(optimized, opts))
    sets = choice.input_sets(args, kwargs)
    best = min(report.predicted_after, program_price(report) or report.predicted_after)
    with timer("lower"):
        alternatives = optimized.next_plans.plans(NEXT_PLANS, NEXT_PLANS_BAND * best) if optimized.next_plans else []
    others = {f"plan {i}": alternative for i, alternative in enumerate(alternatives, 2)}  # by candidate name
    with torch.no_grad():
        candidates = [
            choice.Candidate(PROGRAM, choice.rotating(lambda a, k: fn(*a, **k), sets),
                             report.predicted_written or report.predicted_before, captured.graph.format()),
            choice.Candidate(PLAN, choice.rotating(lambda a, k: optimized(*a, **k), sets), report.predicted_after,
                             optimized.source, nodes=graph_nodes(optimized.plan.graph))]
        for name, (_, plan, runner, source) in others.items():
            module = optimized.alternative(runner, source, plan)
            candidates.append(choice.Candidate(name, choice.rotating(lambda a, k, m=module: m(*a, **k), sets),
                                               plan.predicted_seconds, source, nodes=graph_nodes(plan.graph)))
        if compiled is not None:
            candidates.append(_compiled_program(compiled, captured, args, kwargs, sets, timer))
        device = next((t.device.type for t in captured.inputs if isinstance(t, torch.Tensor)), "cpu")
        decision = choice.choose(candidates, opts.measuring.mode, budget, opts.measuring.min_gain,
                                 opts.runtime.cache, key=captured.graph.format(), device=device)  # CUDA: synced
    report.record(decision)
    raced = compiled is not None and (COMPILED_PROGRAM in decision.medians or COMPILED_PROGRAM in decision.failed)
    if not decision.measured:  # the prediction decides, as with measure="never"
        return FirstRace(no_better(optimized, opts))
    if decision.winner in others:  # a next-best plan was measured faster: it is the plan now
        selection, plan, runner, source = others[decision.winner]
        optimized.use_plan(plan, runner, source)
        optimized.extraction.selection = selection
        report.predicted_after, report.ops_after = plan.predicted_seconds, plan.graph.op_counts()
    if decision.winner == PLAN or decision.winner in others:
        return FirstRace(None, raced)
    return FirstRace(measured(decision.why), raced, decision.winner == COMPILED_PROGRAM)


def _compiled_program(compiled, captured, args, kwargs, sets, timer) -> choice.Candidate:
    """The program compiled by Inductor as a candidate (compiled only if it is timed)."""
    return choice.Candidate(COMPILED_PROGRAM, choice.rotating(lambda a, k: compiled(*a, **k), sets), None,
                            captured.graph.format() + "\n# under Inductor",
                            prepare=building(timer, lambda: compiled(*args, **kwargs)))


def building(timer, build):
    """``build`` as a candidate's ``prepare``: its seconds are the "compile" stage's, not the measuring's, whose
    budget bounds the timing (docs/decisions.md)."""
    def prepare():
        with timer("compile"):
            return build()
    return prepare


def why_not_inductor(opts: Options, captured, args, kwargs, plans_only: bool = False) -> str:
    """Why backend="auto" does not time Inductor's compile of the program or plan ("": it does): only CPU
    tensors in inference are, when measuring is allowed, and the program only if repeating its calls is
    safe (``plans_only``: only plans are timed, and a plan never changes its inputs)."""
    if opts.measuring.mode == "never" or opts.measuring.seconds <= 0:
        return "measure='never'" if opts.measuring.mode == "never" else "a budget of 0 s"
    tensors = [t for t in [*captured.inputs, *captured.param_inputs.values(), *captured.graph.params.values()]
               if isinstance(t, torch.Tensor)]
    if any(t.device.type != "cpu" for t in tensors):
        return "not a CPU program"
    if torch.is_grad_enabled() and any(t.requires_grad for t in captured.inputs):
        return "an input requires grad (optimize under torch.no_grad() for inference)"
    return "" if plans_only else choice.unsafe_to_repeat(args, kwargs)


def second_race(optimized, fn, args, kwargs, captured, opts: Options, why, compiled, compiled_raced: bool,
                timer) -> None:
    """backend="auto": what runs now (the program as written, or the plan as torch code) against the same
    compiled by Inductor; the faster runs. Beside a plan, the program compiled by Inductor (``compiled``) too,
    unless the first race timed it (``compiled_raced``: the plan beat it there) or the plan is predicted
    decisively faster than the program (``program_compile_may_win``). Inductor compiles only once timing
    needs it (a cached decision compiles nothing it does not run)."""
    report = optimized.report
    compile_program = (why or not compiled_raced) and program_compile_may_win(report, opts, captured,
                                                                               predicted=not why)
    if why and not compile_program:  # the program runs as written, and Inductor would make the same calls
        report.measured = "; ".join(filter(None, [report.measured, "the program under Inductor not timed: it is "
                                                  "only library calls (products, convolutions, attention)"]))
        return
    program_sets = choice.input_sets(args, kwargs) if compile_program else None
    program = captured.graph.format()
    candidates = [] if program_sets is None else [_compiled_program(compiled, captured, args, kwargs, program_sets,
                                                                    timer)]
    if why:
        candidates.insert(0, choice.Candidate(PROGRAM, choice.rotating(lambda a, k: fn(*a, **k), program_sets),
                                              None, program))
    else:
        inductor, sets = InductorPlan.of(optimized.runner), choice.input_sets(*captured.inputs)
        candidates[:0] = [
            choice.Candidate(PLAN, choice.rotating(optimized.runner, sets), None, optimized.source),
            choice.Candidate(COMPILED_PLAN, choice.rotating(inductor, sets), None,
                             optimized.source + "\n# under Inductor",
                             prepare=building(timer, lambda: _compiled(inductor, captured.inputs)))]
    with torch.no_grad():
        decision = choice.choose(candidates, "always", opts.measuring.seconds / 2, opts.measuring.min_gain,
                                 opts.runtime.cache, key=program)
    report.record(decision, then=True)
    if decision.winner == COMPILED_PROGRAM:
        optimized.run_original(compiled, measured(decision.why), compiled=True)
    elif decision.winner == COMPILED_PLAN:
        if inductor.graph is None:  # the decision came from the cache: compile now
            try:
                building(timer, lambda: _compiled(inductor, captured.inputs))()
            except EqiforgeError as err:
                report.measured += f" ({err}: the plan runs as torch code)"
                return
        optimized.run_plan_as(inductor, f"the plan, compiled by Inductor (measured: {decision.why})")
        report.lowering_notes += inductor.notes


def _compiled(plan: InductorPlan, inputs) -> None:
    """Compile ``plan`` for inference (grad mode runs its torch code); an error says why Inductor could not."""
    plan.compile(inputs, inference_only=True)
    if plan.graph is None:
        raise EqiforgeError(plan.notes[0])


def program_compile_may_win(report, opts: Options, captured, predicted: bool = True) -> bool:
    """Whether the program compiled by Inductor is timed: always under ``measure="always"``; under "auto" not
    where the program is only library calls (products, convolutions, attention and views: Inductor makes
    the same calls, with nothing between them to fuse) nor, beside a plan that beat the program as written
    (``predicted``), where the plan is predicted ``choice.DECISIVE`` times faster than the program (an
    algebraic win; Inductor fuses the plan's graph as well as the program's, and the compile it would cost is
    about a torch.compile's first call)."""
    if opts.measuring.mode == "always":
        return True
    if library_calls_only(captured.written):
        return False
    program = program_price(report)
    return not predicted or program is None or program < choice.DECISIVE * report.predicted_after


def program_price(report) -> float | None:
    """The program's predicted seconds: the lower of its price as captured (decomposed) and as written."""
    return min(filter(None, (report.predicted_before, report.predicted_written)), default=None)


def dynamic_inductor_race(optimized, captured, opts: Options, timer) -> None:
    """backend="auto" for a plan for every size: its torch code against the same compiled once by Inductor
    with dynamic shapes (``torch.compile(dynamic=True)``: one compile for every size), timed on the example
    call; the faster runs."""
    runner, report = optimized.runner, optimized.report
    compiled = torch.compile(runner.forward, dynamic=True)
    sets = choice.input_sets(*captured.inputs)
    faster = choice.Candidate("plan under Inductor (dynamic shapes)", choice.rotating(compiled, sets), None,
                              optimized.source + "\n# under Inductor, dynamic shapes",
                              prepare=building(timer, lambda: compiled(*captured.inputs)))
    current = choice.Candidate(PLAN, choice.rotating(runner.forward, sets), None, optimized.source)
    with torch.no_grad():
        decision = choice.choose([current, faster], "always", opts.measuring.seconds, opts.measuring.min_gain,
                                 opts.runtime.cache, key=captured.graph.format() + "\n# for every size")
    report.record(decision)
    if decision.winner == faster.name:  # a later move or copy of the module rebinds the torch code
        runner.forward = compiled
        optimized.run_plan_as(runner, f"the plan for every size, compiled by Inductor with dynamic shapes "
                                      f"(measured: {decision.why})")
