"""``eqiforge.optimize(fn, example_inputs)``: capture the call, run the pipeline (pipeline/compile.py), decide
what runs (decide/), and wrap it as a drop-in module that re-plans calls at other input signatures.

    torch program --frontend--> IR graph --pipeline (search, lower, check)--> OptimizedModule
        --decide (predicted or measured)--> what calls run: the plan, the program, or either under Inductor
"""
from __future__ import annotations

import warnings

from . import frontend
from .decide.program import decide_every_size, decide_static
from .errors import EqiforgeError, NoPlanForEverySize
from .pipeline.compile import compile_graph, program_title
from .pipeline.options import Options
from .pipeline.report import StageTimer
from .runtime import OptimizedModule
from .shapes.generalize import examples_at, generalize

__all__ = ["Options", "optimize"]


def optimize(fn, example_inputs, example_kwargs=None, options: Options | None = None, **settings) -> OptimizedModule:
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

    Settings are keywords (``measure="never"``) or an ``Options`` object (``options=Options.of(...)``; keywords
    given beside it override it); pipeline/options.py lists them by stage.
    """
    opts = (options or Options()).with_(**settings).resolved()
    optimized = _first_plan(fn, example_inputs, example_kwargs, opts)
    if opts.shapes.policy == "specialize":
        optimized.plan_calls(optimized.call,
                             lambda args, kwargs, dynamic: _optimize_call(fn, args, kwargs, opts, dynamic), fn)
    return optimized


def _first_plan(fn, args, kwargs, opts: Options) -> OptimizedModule:
    """The example call's plan: for every value of the dims ``opts.shapes.dynamic`` names, where one holds at other
    values (else one for the example's sizes, with a warning: later calls at other sizes try again)."""
    if opts.shapes.dynamic:
        try:
            return _optimize_call(fn, args, kwargs, opts, opts.shapes.dynamic, isinstance(opts.shapes.dynamic, dict))
        except NoPlanForEverySize as err:
            why = str(err)
    optimized = _optimize_call(fn, args, kwargs, opts)
    if opts.shapes.dynamic:
        note = f"dynamic={opts.shapes.dynamic!r} asked for a plan for every size, but there is {why}; the example's " \
               "sizes got a plan of their own"
        optimized.shape_log.append(note)
        warnings.warn(f"eqiforge: {note}", stacklevel=3)
    return optimized


def _optimize_call(fn, args, kwargs, opts: Options, dynamic=None, declared: bool = False) -> OptimizedModule:
    """One plan, for the signature of the call ``fn(*args, **kwargs)``; with ``dynamic`` (tensor leaf ->
    dims, or the ``dynamic`` option), one plan for every value of those dims (``generalize``), or an
    EqiforgeError saying why not (NoPlanForEverySize where the plan does not hold at other sizes);
    ``declared``: the user named them (a dim the program fixes is an error). The calls EqiForge made itself
    while choosing (timing candidates) are not counted in ``calls``."""
    optimized = _plan_for_call(fn, args, kwargs, opts, dynamic, declared)
    optimized.reset_calls()
    return optimized


def _plan_for_call(fn, args, kwargs, opts: Options, dynamic, declared: bool) -> OptimizedModule:
    """Capture -> the pipeline -> (a plan for every size: generalize) -> decide what runs."""
    timer, kwargs = StageTimer(), kwargs or {}
    with timer("capture"):
        fold = opts.search.fold_constants
        captured = frontend.capture_symbolic(fn, args, kwargs, dynamic, fold_params=fold,
                                             declared=declared) if dynamic else None
        captured = captured or frontend.capture(fn, args, kwargs, fold_params=fold)
    program = captured.symbolic
    if program is not None and not opts.runtime.entry.symbolic:
        raise EqiforgeError(f"a plan for every value of symbolic dims runs as torch code; "
                            f"backend={opts.runtime.backend!r} specialises each shape")
    examples = list(captured.inputs) if program is None else examples_at(captured, program.hints)
    optimized = compile_graph(captured.graph, captured.input_names, captured.out_spec, opts, timer,
                              bound=captured.param_inputs, examples=examples, title=program_title(fn),
                              written=captured.written, next_plans=opts.runtime.entry.timed
                              and opts.measuring.mode != "never" and program is None)
    optimized.report.capture_fallback = captured.fallback
    optimized.plan_calls(captured.call)
    if program is None:
        decide_static(optimized, fn, args, kwargs, captured, opts, timer)
        return optimized
    with timer("generalize"):
        generalize(optimized, captured, opts, program_title(fn))
    decide_every_size(optimized, fn, args, kwargs, captured, opts, timer)
    return optimized
