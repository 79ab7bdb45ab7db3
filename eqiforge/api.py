"""The pipeline, one way through: capture -> saturate -> price -> extract -> lower -> module.

    torch program --frontend--> IR graph --egraph (encode + saturate)--> snapshot --cost--> prices
        --extract--> chosen e-nodes --lower--> Plan --> Python function (torch backend) --> OptimizedModule
"""
from __future__ import annotations

import math
import os
import warnings
from dataclasses import dataclass, field, replace

import torch

from .pipeline import blocks, validate
from .decide import choice
from . import cost, frontend, ops
from .egraph import rulecheck
from .egraph import saturate as sat
from .errors import EqiforgeError, NoPlanForEverySize
from .extract import Extraction, extract, next_best
from .extract.dag import Selection
from .dims import Lifter, instantiate, variable
from .frontend.symbolic import resized
from .lower import symbolic
from .lower.attention_notes import unfused_attention
from .lower.pytorch_source import ident
from .lower.plan import Plan, build_plan, price
from .lower.torch_code import to_torch_code
from .cost.as_written import library_calls_only, written_seconds
from .cost.plans import graph_nodes
from .lower.writer import provenance
from .pipeline.report import Report, StageTimer
from .runtime import OptimizedModule
from .runtime import backends
from .runtime.inductor_plan import InductorPlan, compiled_original
from .runtime.torch_plan import BucketedPlan, TorchPlan

NEXT_PLANS = 2  # a measured choice times up to this many next-best distinct plans beside the best ...
NEXT_PLANS_BAND = 1.5  # ... those predicted within this factor of the best candidate, the program (priced as
#                        written) included: the cost model's error on a CPU is that large (a cross-entropy plan
#                        predicted 2% faster than eager ran 4x slower)
SHAPES = ("specialize", "static")


@dataclass(frozen=True)
class Options:
    """Everything a user can set; validated once, here."""

    rules: tuple[str, ...] | None = None  # rule-set names; None = every set of the backend's layers
    backend: str = "auto"  # the code a plan runs as: "torch" (PyTorch calls), "inductor" (compiled by Inductor),
    #                        "triton" (generated kernels), or "auto": torch code, and on CPU tensors in inference
    #                        the faster measured of it and Inductor's compile of it (torch code when not measured)
    limits: sat.Limits = field(default_factory=sat.Limits)
    extractor: str = "auto"  # auto | greedy | ilp (auto: ilp on e-graphs up to 20k e-nodes)
    extract_seconds: float = 3.0  # extraction's time limit (greedy, then the ILP in what is left); past it the
    #                               better of the ILP's best and greedy's is used
    cost_model: str = "roofline"
    device: str | cost.Device | None = None  # what the cost model prices for: a device table entry, "cpu"
    #                            (measured) or a Device; None: $EQIFORGE_DEVICE, else "cpu" for the torch
    #                            backend on CPU tensors, else the default GPU
    fold_constants: bool = True  # inference: parameter-only sub-expressions are computed once
    assume_finite: bool = True  # rules exact only for finite values run (docs/numerics.md)
    validate: bool = True  # the plan runs against the captured program before it is returned
    check_rules: bool = True  # a custom rules folder's own rule files are verified before use, an unsound rule
    #                           refused (egraph/rulecheck.py); False trusts them (the plan check still runs)
    original_if_no_better: bool = True  # torch/inductor: a plan predicted no faster runs the original program
    #                                     (inductor: the original compiled by Inductor)
    min_gain: float = 0.005  # ... or predicted faster by less than this fraction, within the cost model's
    #                          error: on a CPU a merged gate/up GEMM, 0.05% faster predicted, ran 12% slower;
    #                          the encoder-layer example's plan, 0.85% faster predicted, ran 5% faster
    progress: bool = False
    share_blocks: bool = True  # identical repeated blocks (a model's layers) are optimized once (blocks.py)
    shapes: str = "specialize"  # optimize(): a call at another input signature gets its own plan ("static": an error)
    dynamic: object = None  # optimize(): dims symbolic from the first call (True: every dim over 1; or a dict
    #                         from a tensor input's name or index to its dims); None: a dim becomes symbolic
    #                         at its second distinct value (runtime/module.py)
    cache: bool = True  # saturations and exact extractions stored on disk are reused (egraph/cache.py,
    #                     extract/cache.py); False computes them again (what ablations time)
    measure: str = field(default_factory=lambda: os.environ.get("EQIFORGE_MEASURE", "auto"))  # choice.py:
    #   "auto" times the program and the plan where the prediction does not decide, "always", or "never"
    #   (the predicted choice, deterministic; $EQIFORGE_MEASURE sets the default, the tests' is "never")
    measure_seconds: float = 2.0  # the time budget of one measured choice
    kernel_guide: float | None = 1.5  # triton: the kernel layer forms kernels for e-nodes priced within this
    #   factor of their e-class's best form's own price, after the algebra saturates (egraph/guide.py); None:
    #   for every e-node (a transformer layer's joint e-graph then stops on its limits). 1.25 loses a plan:
    #   LayerNorm then a linear layer with the normalisation in the GEMM's epilogue (tests/test_attention.py)

    def __post_init__(self):
        backends.resolve(self.backend)  # an unknown name is a clear error here
        if self.shapes not in SHAPES:
            raise EqiforgeError(f"unknown shapes policy {self.shapes!r}; available: {list(SHAPES)}")
        if not isinstance(self.limits, sat.Limits):
            raise EqiforgeError("limits must be an eqiforge.Limits(...)")
        if self.measure not in choice.MODES:
            raise EqiforgeError(f"unknown measure mode {self.measure!r}; available: {list(choice.MODES)}")
        if not self.measure_seconds >= 0:
            raise EqiforgeError("measure_seconds is a time budget in seconds (0: no timing); "
                                f"got {self.measure_seconds!r}")
        if not 0 <= self.min_gain < 1:
            raise EqiforgeError(f"min_gain is a fraction in [0, 1) (0.005: a plan must be predicted 0.5% faster); "
                                f"got {self.min_gain!r}")


def optimize(fn, example_inputs, example_kwargs=None, **options) -> OptimizedModule:
    """Optimize a function or nn.Module for the call ``fn(*example_inputs, **example_kwargs)``; returns a
    drop-in callable.

    Arguments are tensors, constants (int, float, bool, None, ...: traced as such) and containers of them:
    tuples, lists, dicts and registered pytree classes, transformers caches among them (``example_kwargs=
    {"cache": cache}`` optimizes a decoding step). Outputs are rebuilt in the program's structure (a
    ModelOutput holding a new DynamicCache; a cache passed in is not updated in place: use the returned one).

    Shapes: with ``shapes="specialize"`` (the default) a call whose tensors differ from a signature seen
    before only in some sizes gets one plan for every value of those dims (``generalize``; ``dynamic``
    names such dims up front); a call at another signature (dtypes, structure or constants, or sizes no
    symbolic plan serves) runs a plan built for it on first use, from ``fn`` with the same options, kept
    in a ``runtime.plan_cache.PlanCache``, for up to its capacity of signatures; later ones, and one whose
    plan cannot be built, run ``fn`` itself, with a warning. ``opt.shape_log`` says what was built, why and
    how long it took. With ``shapes="static"`` such a call is an error.
    """
    opts = Options(**normalise_options(options))
    optimized = _first_plan(fn, example_inputs, example_kwargs, opts)
    if opts.shapes == "specialize":
        optimized.plan_calls(optimized.call,
                             lambda args, kwargs, dynamic: _optimize_call(fn, args, kwargs, opts, dynamic), fn)
    return optimized


def _first_plan(fn, args, kwargs, opts: Options) -> OptimizedModule:
    """The example call's plan: for every value of the dims ``opts.dynamic`` names, where one holds at other
    values (else one for the example's sizes, with a warning: later calls at other sizes try again)."""
    if opts.dynamic:
        try:
            return _optimize_call(fn, args, kwargs, opts, opts.dynamic, isinstance(opts.dynamic, dict))
        except NoPlanForEverySize as err:
            why = str(err)
    optimized = _optimize_call(fn, args, kwargs, opts)
    if opts.dynamic:
        note = f"dynamic={opts.dynamic!r} asked for a plan for every size, but there is {why}; the example's " \
               "sizes got a plan of their own"
        optimized.shape_log.append(note)
        warnings.warn(f"eqiforge: {note}", stacklevel=3)
    return optimized


def _optimize_call(fn, args, kwargs, opts: Options, dynamic=None, declared: bool = False) -> OptimizedModule:
    """One plan, for the signature of the call ``fn(*args, **kwargs)``; with ``dynamic`` (tensor leaf ->
    dims, or ``Options.dynamic``), one plan for every value of those dims (``generalize``), or an
    EqiforgeError saying why not (NoPlanForEverySize where the plan does not hold at other sizes);
    ``declared``: the user named them (a dim the program fixes is an error). The calls EqiForge made itself
    while choosing (timing candidates) are not counted in ``calls``."""
    optimized = _plan_for_call(fn, args, kwargs, opts, dynamic, declared)
    optimized.reset_calls()
    return optimized


def _plan_for_call(fn, args, kwargs, opts: Options, dynamic, declared: bool) -> OptimizedModule:
    timer = StageTimer()
    kwargs = kwargs or {}
    backend, chooses_generator = backends.resolve(opts.backend)  # auto: torch code, Inductor measured after
    opts = replace(opts, backend=backend.name)
    with timer("capture"):
        captured = frontend.capture_symbolic(fn, args, kwargs, dynamic, fold_params=opts.fold_constants,
                                             declared=declared) if dynamic else None
        captured = captured or frontend.capture(fn, args, kwargs, fold_params=opts.fold_constants)
    program = captured.symbolic
    if program is not None and not backend.symbolic:
        raise EqiforgeError(f"a plan for every value of symbolic dims runs as torch code; backend={opts.backend!r} "
                            "specialises each shape")
    examples = list(captured.inputs) if program is None else examples_at(captured, program.hints)
    optimized = optimize_graph(captured.graph, captured.input_names, captured.out_spec, opts, timer,
                               bound=captured.param_inputs, examples=examples, title=program_title(fn),
                               written=captured.written,
                               next_plans=backend.timed and opts.measure != "never" and program is None)
    optimized.report.capture_fallback = captured.fallback
    optimized.plan_calls(captured.call)
    if program is not None:
        with timer("generalize"):
            generalize(optimized, captured, opts, program_title(fn))
        # buckets: a plan other than the hint's was predicted better at its size, whatever the hint's is worth
        why = None if isinstance(optimized.runner, BucketedPlan) else no_better(optimized, opts)
        if why:
            optimized.run_original(fn, why)
        elif chooses_generator and not _why_not_inductor(opts, captured, args, kwargs, plans_only=True):
            with timer("measure"):
                _measured_dynamic_inductor(optimized, captured, opts)
        return optimized
    no_inductor = _why_not_inductor(opts, captured, args, kwargs) if chooses_generator else "not asked"
    budget = opts.measure_seconds / (1 if no_inductor else 2)  # both stages share measure_seconds
    why = no_better(optimized, opts)
    compiled = None if no_inductor else compiled_original(fn)
    first = FirstRace(why)
    if backend.timed and measurable(optimized, opts):  # inductor: predicted (dynamo.py measures)
        with timer("measure"):  # in the report's stages
            first = _measured_choice(optimized, fn, args, kwargs, captured, opts, budget,
                                     compiled if _program_compile_may_win(optimized.report, opts, captured) else None)
    why = first.why
    if first.compiled_won:
        optimized.run_original(compiled, why, "the original program compiled by Inductor")
    elif why:
        optimized.run_original(backend.original(fn), why)
    elif isinstance(optimized.runner, InductorPlan):  # compiled once chosen, not when the original runs
        optimized.runner.compile(captured.inputs)
        optimized.report.lowering_notes += optimized.runner.notes
    if not no_inductor and not (why and first.compiled_raced):  # the program won a race its compile ran in
        with timer("measure"):
            _measured_generator(optimized, fn, args, kwargs, captured, opts, why, compiled, first.compiled_raced)
    elif no_inductor and chooses_generator and optimized.report.measured:
        optimized.report.measured += f"; Inductor not tried: {no_inductor}"
    optimized.next_plans = None  # the e-graph's alternatives are not kept with the module
    return optimized


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
    """``runner`` against the program converted at ``values``."""
    graph = captured.symbolic.graph_at(values)
    verdict = validate.PlanCheck(graph, captured.input_names, examples_at(captured, values), captured.param_inputs,
                                 opts.assume_finite)(runner)
    return SizeCheck(", ".join(f"{s}={v}" for s, v in values.items()), "" if verdict.ok else verdict.describe())


def _bucket(optimized, captured, values: dict[str, int], opts: Options, title: str):
    """(the runner of the plan extraction chooses with the e-graph priced at ``values``, or None when it is
    the hint's plan or does not hold; a note for the report)."""
    program, extraction = captured.symbolic, optimized.extraction
    where = ", ".join(f"{s}={v}" for s, v in values.items())
    snap = symbolic.snapshot_at(extraction.snapshot, program.lifter, values)
    node_cost = optimized.cost_model.predict(cost.snapshot_features(snap, opts.fold_constants))
    selection = extract(snap, node_cost, method=opts.extractor, time_limit=opts.extract_seconds, use_cache=opts.cache)
    if _reached(snap, selection.choice) == _reached(snap, extraction.selection.choice):
        return None, f"priced at {where}: the same plan"
    graph = program.graph_at(values, symbolic=True)
    plan = build_plan(snap, selection.choice, graph, optimized.cost_model, opts.fold_constants)
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


def backend_of(opts: Options) -> backends.Backend:
    """The backend entry of ``opts`` (auto: its torch entry, what a plan is lowered to before Inductor is timed)."""
    return backends.resolve(opts.backend)[0]


def measurable(optimized, opts: Options) -> bool:
    """Whether the program and the plan may be timed to choose: plans of PyTorch code (the torch and inductor
    backends), when the plan is EqiForge's own (not only calls it does not optimize) and the user did not ask
    for the plan whatever."""
    return (opts.measure != "never" and backend_of(opts).original is not None and opts.original_if_no_better
            and not nothing_to_optimize(optimized.report))


@dataclass
class FirstRace:
    """What the first measured choice decided: why the original runs (None: the plan), whether the program
    compiled by Inductor was one of its candidates, and whether it won."""

    why: str | None
    compiled_raced: bool = False
    compiled_won: bool = False


def _measured_choice(optimized, fn, args, kwargs, captured, opts: Options, budget: float,
                     compiled=None) -> FirstRace:
    """Time the program as written against the plan where the prediction does not decide (choice.py), and
    against ``compiled`` (the program compiled by Inductor) when given: the second stage would time it
    beside whichever of the two won, so it runs in this race, and a program that wins it needs no second
    race. The report's ``measured`` row says what was timed."""
    report = optimized.report
    unsafe = choice.unsafe_to_repeat(args, kwargs)
    if unsafe:
        report.measured = f"not measured ({unsafe}); runs: the predicted choice"
        return FirstRace(no_better(optimized, opts))
    sets = choice.input_sets(args, kwargs)
    best = min(report.predicted_after, _program_price(report) or report.predicted_after)
    alternatives = optimized.next_plans.plans(NEXT_PLANS, NEXT_PLANS_BAND * best) if optimized.next_plans else []
    others = {f"plan {i}": alternative for i, alternative in enumerate(alternatives, 2)}  # by candidate name
    with torch.no_grad():
        candidates = [
            choice.Candidate("program", choice.rotating(lambda a, k: fn(*a, **k), sets),
                             report.predicted_written or report.predicted_before, captured.graph.format()),
            choice.Candidate("plan", choice.rotating(lambda a, k: optimized(*a, **k), sets), report.predicted_after,
                             optimized.source, nodes=graph_nodes(optimized.plan.graph))]
        for name, (_, plan, runner, source) in others.items():
            module = optimized.alternative(runner, source, plan)
            candidates.append(choice.Candidate(name, choice.rotating(lambda a, k, m=module: m(*a, **k), sets),
                                               plan.predicted_seconds, source, nodes=graph_nodes(plan.graph)))
        if compiled is not None:
            candidates.append(_compiled_candidate(compiled, captured, args, kwargs, sets))
        decision = choice.choose(candidates, opts.measure, budget, opts.min_gain, opts.cache,
                                 key=captured.graph.format())
    report.measured = decision.describe()
    raced = compiled is not None and (COMPILED_PROGRAM in decision.medians or COMPILED_PROGRAM in decision.failed)
    if not decision.medians:  # not timed: the prediction decides, as with measure="never"
        return FirstRace(no_better(optimized, opts))
    if decision.runs in others:  # a next-best plan was measured faster: it is the plan now
        selection, plan, runner, source = others[decision.runs]
        optimized.use_plan(plan, runner, source)
        optimized.extraction.selection = selection
        report.predicted_after, report.ops_after = plan.predicted_seconds, plan.graph.op_counts()
    if decision.runs == "plan" or decision.runs in others:
        return FirstRace(None, raced)
    return FirstRace(f"measured: {decision.why}", raced, decision.runs == COMPILED_PROGRAM)


COMPILED_PROGRAM = "program under Inductor"


def _compiled_candidate(compiled, captured, args, kwargs, sets) -> choice.Candidate:
    """The program compiled by Inductor as a measured choice's candidate (compiled only if it is timed)."""
    return choice.Candidate(COMPILED_PROGRAM, choice.rotating(lambda a, k: compiled(*a, **k), sets), None,
                            captured.graph.format() + "\n# under Inductor", prepare=lambda: compiled(*args, **kwargs))


def _why_not_inductor(opts: Options, captured, args, kwargs, plans_only: bool = False) -> str:
    """Why backend="auto" does not time Inductor's compile of the program or plan ("": it does): only CPU
    tensors in inference are, when measuring is allowed, and the program only if repeating its calls is
    safe (``plans_only``: only plans are timed, and a plan never changes its inputs)."""
    if opts.measure == "never" or opts.measure_seconds <= 0:
        return "measure='never'" if opts.measure == "never" else "a budget of 0 s"
    tensors = [t for t in [*captured.inputs, *captured.param_inputs.values(), *captured.graph.params.values()]
               if isinstance(t, torch.Tensor)]
    if any(t.device.type != "cpu" for t in tensors):
        return "not a CPU program"
    if torch.is_grad_enabled() and any(t.requires_grad for t in captured.inputs):
        return "an input requires grad (optimize under torch.no_grad() for inference)"
    return "" if plans_only else choice.unsafe_to_repeat(args, kwargs)


def _measured_generator(optimized, fn, args, kwargs, captured, opts: Options, why: str | None, compiled,
                        compiled_raced: bool) -> None:
    """backend="auto": what runs now (the program as written, or the plan as torch code) against the same
    compiled by Inductor, timed (choice.py); the faster runs. Beside a plan, the program compiled by Inductor
    (``compiled``) too, unless the first race timed it (``compiled_raced``: the plan beat it there) or the plan
    is predicted decisively faster than the program (``_program_compile_may_win``): Inductor's fusion of the
    program as written can beat the plan however it is compiled. Inductor compiles only once timing needs it
    (a cached decision times and compiles nothing it does not run)."""
    report = optimized.report
    compile_program = (why or not compiled_raced) and _program_compile_may_win(report, opts, captured,
                                                                                predicted=not why)
    if why and not compile_program:  # the program runs as written, and Inductor would make the same calls
        report.measured = "; ".join(filter(None, [report.measured, "the program under Inductor not timed: it is "
                                                  "only library calls (products, convolutions, attention)"]))
        return
    program_sets = choice.input_sets(args, kwargs) if compile_program else None
    program = captured.graph.format()
    candidates = [] if program_sets is None else [
        _compiled_candidate(compiled, captured, args, kwargs, program_sets)]
    if why:
        candidates.insert(0, choice.Candidate("program", choice.rotating(lambda a, k: fn(*a, **k), program_sets),
                                              None, program))
    else:
        inductor, sets = InductorPlan.of(optimized.runner), choice.input_sets(*captured.inputs)
        candidates[:0] = [
            choice.Candidate("plan", choice.rotating(optimized.runner, sets), None, optimized.source),
            choice.Candidate("plan under Inductor", choice.rotating(inductor, sets), None,
                             optimized.source + "\n# under Inductor",
                             prepare=lambda: _compiled(inductor, captured.inputs))]
    with torch.no_grad():
        decision = choice.choose(candidates, "always", opts.measure_seconds / 2, opts.min_gain, opts.cache,
                                 key=program)
    report.measured = "; then ".join(filter(None, [report.measured, decision.describe()]))
    if decision.runs == COMPILED_PROGRAM:
        optimized.run_original(compiled, f"measured: {decision.why}", "the original program compiled by Inductor")
    elif decision.runs == "plan under Inductor":
        if inductor.graph is None:  # the decision came from the cache: compile now
            try:
                _compiled(inductor, captured.inputs)
            except EqiforgeError as err:
                report.measured += f" ({err}: the plan runs as torch code)"
                return
        optimized.run_plan_as(inductor, f"the plan, compiled by Inductor (measured: {decision.why})")
        report.lowering_notes += inductor.notes


def _program_compile_may_win(report, opts: Options, captured, predicted: bool = True) -> bool:
    """Whether the program compiled by Inductor is timed: always under ``measure="always"``; under "auto" not
    where the program is only library calls (products, convolutions, attention and views: Inductor makes
    the same calls, with nothing between them to fuse) nor, beside a plan that beat the program as written
    (``predicted``), where the plan is predicted ``choice.DECISIVE`` times faster than the program (an
    algebraic win; Inductor fuses the plan's graph as well as the program's, and the compile it would cost is
    about a torch.compile's first call)."""
    if opts.measure == "always":
        return True
    if library_calls_only(captured.written):
        return False
    program = _program_price(report)
    return not predicted or program is None or program < choice.DECISIVE * report.predicted_after


def _program_price(report) -> float | None:
    """The program's predicted seconds: the lower of its price as captured (decomposed) and as written."""
    return min(filter(None, (report.predicted_before, report.predicted_written)), default=None)


def _measured_dynamic_inductor(optimized, captured, opts: Options) -> None:
    """backend="auto" for a plan for every size: its torch code against the same compiled once by Inductor
    with dynamic shapes (``torch.compile(dynamic=True)``: one compile for every size), timed on the example
    call (choice.py); the faster runs."""
    runner, report = optimized.runner, optimized.report
    compiled = torch.compile(runner.forward, dynamic=True)
    sets = choice.input_sets(*captured.inputs)
    faster = choice.Candidate("plan under Inductor (dynamic shapes)", choice.rotating(compiled, sets), None,
                              optimized.source + "\n# under Inductor, dynamic shapes",
                              prepare=lambda: compiled(*captured.inputs))
    current = choice.Candidate("plan", choice.rotating(runner.forward, sets), None, optimized.source)
    with torch.no_grad():
        decision = choice.choose([current, faster], "always", opts.measure_seconds, opts.min_gain, opts.cache,
                                 key=captured.graph.format() + "\n# for every size")
    report.measured = decision.describe()
    if decision.runs == faster.name:  # a later move or copy of the module rebinds the torch code
        runner.forward = compiled
        optimized.run_plan_as(runner, f"the plan for every size, compiled by Inductor with dynamic shapes "
                                      f"(measured: {decision.why})")


def _compiled(plan: InductorPlan, inputs) -> None:
    """Compile ``plan`` for inference (grad mode runs its torch code); an error says why Inductor could not."""
    plan.compile(inputs, inference_only=True)
    if plan.graph is None:
        raise EqiforgeError(plan.notes[0])


def no_better(optimized, opts: Options) -> str | None:
    """Why the plan should not replace the program, or None. Only for the torch and inductor backends with
    ``original_if_no_better`` (a triton plan is what its user asked for): the plan is only PyTorch calls
    EqiForge does not optimize, or it is predicted faster by less than ``min_gain`` than the captured program
    (priced decomposed, so slower than the user's own calls) or than the program's calls as written, each one
    native kernel."""
    if backend_of(opts).original is None or not opts.original_if_no_better:
        return None
    report = optimized.report
    if nothing_to_optimize(report):
        extern = report.ops_after.get("Extern")
        return "the plan is PyTorch calls EqiForge does not optimize" if extern else "the plan computes nothing"
    written = " than the program's calls as written"
    for before, than in ((report.predicted_before, ""), (report.predicted_written, written)):
        if before and report.predicted_after * (1 + opts.min_gain) >= before:
            return _short_of(report.predicted_after, before, than, opts.min_gain)
    return None


def nothing_to_optimize(report) -> bool:
    """Whether the plan computes nothing but PyTorch calls EqiForge does not optimize (or nothing at all): no
    measured choice can find it faster than the program."""
    return {op for op, n in report.ops_after.items() if n and ops.get(op).kind != "leaf"} <= {"Extern"}


def _short_of(after: float, before: float, than: str, min_gain: float) -> str:
    """Why a plan predicted to take ``after`` seconds against the program's ``before`` (``than``: against the
    captured program when empty) is not run."""
    times = f"{after * 1e6:.1f} us vs {before * 1e6:.1f} us{'' if than else ' as captured'}"
    if after >= before:
        return f"the plan is predicted no faster{than}: {times}"
    return (f"the plan is predicted only {(before / after - 1) * 100:.2f}% faster{than} ({times}), less than "
            f"min_gain={min_gain}, within the cost model's error")


def default_device(backend: str, tensors) -> str | None:
    """The device a plan is priced for when none is named: this CPU, as measured (cost/calibrate.py), for a
    torch-backend plan of CPU tensors; the cost model's default GPU otherwise (a triton plan runs on one)."""
    cpu_priced = backends.resolve(backend)[0].cpu_priced
    if cpu_priced and all(t.device.type == "cpu" for t in tensors if isinstance(t, torch.Tensor)):
        return "cpu"
    return None


def priced_device(opts: Options, graph, examples=None, bound=None):
    """The device a plan of ``graph`` is priced for: the option, else $EQIFORGE_DEVICE, else the default."""
    return opts.device or os.environ.get("EQIFORGE_DEVICE") or default_device(
        opts.backend, [*(examples or []), *(bound or {}).values(), *graph.params.values()])


def program_title(fn) -> str:
    """How generated code names the program: a function's qualified name (past any enclosing function's),
    a module's class."""
    name = getattr(fn, "__qualname__", None) if not isinstance(fn, torch.nn.Module) else None
    return name.split("<locals>.")[-1] if name else type(fn).__name__


def optimize_graph(graph, input_names, out_spec, opts: Options, timer: StageTimer, bound=None,
                   examples=None, title: str = "a program", written=(), next_plans: bool = False) -> OptimizedModule:
    """The stages after capture, shared by ``optimize`` and the torch.compile backend. ``bound`` maps graph
    inputs that are not call arguments (live parameters) to their tensors; ``examples`` are the call's
    inputs the plan is checked on (None: random ones). With ``next_plans`` the module's ``next_plans`` can
    give the next-best plans (``NextPlans``) until the caller drops it."""
    graph.verify()
    kernels = backend_of(opts).kernels
    model = cost.get_cost_model(opts.cost_model, priced_device(opts, graph, examples, bound), kernels=kernels)
    layers = ("algebra", "kernel") if kernels else ("algebra",)
    schedule = sat.default_schedule(None if opts.rules is None else list(opts.rules), opts.limits, layers,
                                    kernel_guide=opts.kernel_guide if kernels else None)
    guide = sat.Guide(lambda snap: model.predict(cost.snapshot_features(snap, opts.fold_constants)),
                      repr((model.name, model.device, opts.fold_constants)))
    names = list(schedule.rulesets)
    if opts.check_rules:
        rulecheck.check_custom_rules(names)
    with _progress(opts.progress) as on_step:
        shared = blocks.optimize_once(graph, schedule, model, opts, timer, on_step, guide) \
            if opts.share_blocks else None
        if shared and shared.result:
            snap, saturation, node_cost, selection = shared.result
        else:
            with timer("saturate"):
                snap, saturation = sat.saturate(graph, schedule, on_step=on_step, assume_finite=opts.assume_finite,
                                                guide=guide,
                                                use_cache=opts.cache)
            with timer("extract"):
                node_cost = model.predict(cost.snapshot_features(snap, opts.fold_constants))
                selection = extract(snap, node_cost, method=opts.extractor, time_limit=opts.extract_seconds,
                                    use_cache=opts.cache)
    lowering = _Lowering(snap, graph, input_names, bound, model, opts, title, names)
    with timer("lower"):
        plan, runner, source, notes = lowering.lower(selection)
    validation = "off (validate=False)"
    if opts.validate:
        with timer("validate"):
            selection, plan, runner, source, notes, validation = lowering.checked(
                selection, plan, runner, source, notes, node_cost, examples)
    report = Report(
        rulesets=names,
        saturation=saturation, stage_seconds=timer.seconds,
        predicted_before=sum(price(graph, model).values()), predicted_after=plan.predicted_seconds,
        predicted_written=written_seconds(written, model.device) if written else 0.0,
        extraction_method=selection.method, extraction_cost=selection.cost, cost_model=model.name,
        ops_before=graph.op_counts(), ops_after=plan.graph.op_counts(), folded_constants=plan.folded,
        lowering_notes=notes, attention_notes=_attention_notes(snap, plan), validation=validation,
        repeated_blocks=shared.note if shared else "off (share_blocks=False)")
    specs = [(name, graph.nodes[i].shape, graph.nodes[i].dtype)
             for name in input_names for i in [_input_node(graph, name)]]
    optimized = OptimizedModule(runner, source, specs, out_spec, plan, report)
    optimized.extraction = Extraction(snap, list(node_cost), selection)
    optimized.cost_model, optimized.shared_blocks = model, bool(shared and shared.result)
    shared_plan = shared is not None and shared.result is not None  # a block's plan, repeated: no alternatives
    if next_plans and selection.choice and not shared_plan:
        optimized.next_plans = NextPlans(lowering, selection, source, node_cost, examples)
    return optimized


class NextPlans:
    """The next-best distinct plans of an extraction (the ILP with a no-good cut per plan found), lowered and
    checked like the best one: the measured choice's further candidates."""

    def __init__(self, lowering, first, first_source: str, node_cost, examples):
        self.lowering, self.first, self.first_source = lowering, first, first_source
        self.node_cost, self.examples = node_cost, examples

    def plans(self, count: int, ceiling: float) -> list[tuple]:
        """Up to ``count`` (selection, plan, runner, source), cheapest first, each predicted to take at most
        ``ceiling`` seconds, with code of its own, passing the plan check (with ``validate``)."""
        lowering, found, sources, plans = self.lowering, [self.first], {self.first_source}, []
        check = None
        for _ in range(3 * count):  # a plan whose code repeats one found (another view e-node) is cut too
            if len(plans) == count:
                break
            selection = next_best(lowering.snap, self.node_cost, found, time_limit=lowering.opts.extract_seconds)
            if selection is None or selection.cost > ceiling:
                break
            found.append(selection)
            plan, runner, source, _ = lowering.lower(selection)
            if source in sources:
                continue
            sources.add(source)
            if lowering.opts.validate:
                check = check or validate.PlanCheck(lowering.graph, lowering.input_names, self.examples,
                                                    lowering.bound, lowering.opts.assume_finite)
                if not check(runner).ok:
                    continue
            plans.append((selection, plan, runner, source))
        return plans


class _Lowering:
    """Extracted selections to runnable plans, and the plan check that decides which one is returned."""

    def __init__(self, snap, graph, input_names, bound, model, opts: Options, title: str, rulesets):
        self.snap, self.graph, self.input_names, self.bound = snap, graph, input_names, bound
        self.model, self.opts, self.title, self.rulesets = model, opts, title, rulesets

    def lower(self, selection):
        plan = build_plan(self.snap, selection.choice, self.graph, self.model, self.opts.fold_constants)
        plan.graph.verify()
        return (plan, *backend_of(self.opts).lower(plan, self.input_names, self.bound, self.title, self.rulesets))

    def checked(self, selection, plan, runner, source, notes, node_cost, examples):
        """The first of: this plan, plans extracted again without the e-nodes where a failing plan left the
        program's values, the captured program itself; that passes the check. A failure of all is an error."""
        interpreted = backend_of(self.opts).kernels and os.environ.get("TRITON_INTERPRET") == "1"
        check = validate.PlanCheck(self.graph, self.input_names, examples, self.bound, self.opts.assume_finite,
                                   slow_plans="the Triton interpreter" if interpreted else "")
        history = []
        problems = validate.check_encoding(self.snap, self.graph)
        if problems:
            history.append(f"the e-graph does not hold the program as encoded ({len(problems)} nodes; first: "
                           f"{problems[0]})")
        costs = list(node_cost)
        for attempt in range(1, validate.MAX_EXCLUSION_ROUNDS + 2 if not problems else 1):
            verdict = check(runner)
            if verdict.ok:
                return selection, plan, runner, source, notes, "; ".join(history + [verdict.describe()])
            history.append(f"plan {attempt}: {verdict.describe()}")
            culprits = check.culprits(plan, verdict.feeds, self.snap.bindings) if verdict.feeds else []
            enodes = {selection.choice[plan.eclass[p]] for p in culprits if p in plan.eclass}
            enodes = sorted(e for e in enodes if self.snap.node_op[e] not in ("Input", "Param"))
            if not enodes:
                break  # the plan graph computes the program: its lowering differs
            history.append(f"excluded {len(enodes)} e-nodes "
                           f"({', '.join(sorted({self.snap.node_op[e] for e in enodes}))}) and extracted again")
            for e in enodes:
                costs[e] = math.inf
            try:
                selection = extract(self.snap, costs, method=self.opts.extractor, time_limit=self.opts.extract_seconds,
                                    use_cache=self.opts.cache)
            except EqiforgeError as err:
                history.append(f"no plan without them ({err})")
                break
            plan, runner, source, notes = self.lower(selection)
        return self._captured_program(check, history)

    def _captured_program(self, check, history):
        """The program as captured, unoptimized, on the torch backend (what a failing plan falls back to)."""
        plan = Plan(self.graph, price(self.graph, self.model), self.model.name)
        header = provenance(plan, self.title, []) + ["the captured program, unoptimized: the plan failed its check"]
        runner = TorchPlan(to_torch_code(self.graph, self.input_names, self.bound, header))
        verdict = check(runner)
        if not verdict.ok:
            raise EqiforgeError(f"the captured program itself fails the plan check ({verdict.describe()}); "
                                f"before: {'; '.join(history)}")
        selection = Selection({}, 0.0, "none (the captured program: the plan failed its check)", 0.0)
        text = "; ".join(history + [f"fell back to the captured program, unoptimized: {verdict.describe()}"])
        return selection, plan, runner, runner.source, [], text


def _attention_notes(snap, plan) -> list[str]:
    """Why each softmax(S) V of the plan is not one attention kernel (lower/attention_notes.py)."""
    attention = {c for c, op in zip(snap.node_class, snap.node_op) if op == "AttentionK"}

    def kernel_found(node: int) -> bool:  # the e-graph held an attention kernel for this plan node
        return plan.eclass.get(node) in attention
    return unfused_attention(plan.graph, kernel_found)


def _input_node(graph, name: str) -> int:
    return next(i for i, n in enumerate(graph.nodes) if n.op == "Input" and n.attrs[0] == name)


def normalise_options(options: dict) -> dict:
    known = set(Options.__dataclass_fields__)
    unknown = sorted(set(options) - known)
    if unknown:
        raise EqiforgeError(f"unknown option(s) {unknown}; known: {sorted(known)}")
    if options.get("rules") is not None:
        rules = options["rules"]
        options["rules"] = (rules,) if isinstance(rules, str) else tuple(rules)
    return options


class _progress:
    """A tqdm bar over saturation steps when asked for, else a no-op callback."""

    def __init__(self, enabled: bool):
        self.enabled, self.bar = enabled, None

    def __enter__(self):
        if not self.enabled:
            return None
        from tqdm import tqdm
        self.bar = tqdm(desc="saturating", unit="step", leave=False, disable=None)  # off when not a terminal

        def on_step(s):
            self.bar.set_postfix_str(f"iter {s.iteration} {s.ruleset}: {s.enodes} e-nodes")
            self.bar.update(1)
        return on_step

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.close()
        return False
