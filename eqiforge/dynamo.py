"""``torch.compile(model, backend="eqiforge")``: the registered torch.compile backend.

Dynamo hands over an FX graph; AOTAutograd decomposes it to core ATen and splits forward from backward.
The forward graph goes through the EqiForge pipeline, and the chosen plan is traced to an ATen graph and
compiled by Inductor (``runtime/inductor_plan.py``): EqiForge's algebra, Inductor's fused kernels.
``options={"backend": "torch"}`` runs the plan as EqiForge's torch code instead. A plan predicted no better
than the graph (``api.no_better``) gives Inductor the original graph (``Report.runs`` says which), so the
backend is never worse than torch.compile. The backward, and a forward EqiForge cannot take or fails on, is
compiled by Inductor (``fallback="eager"``: runs as AOTAutograd built it, op by op). No failure of EqiForge
fails the user's compile: it warns, saying why, and falls back.

Weights as constants in inference: where the graph needs no autograd (``torch.no_grad()``,
``inference_mode``, or no input requires grad), the module's parameters and buffers (the inputs Dynamo
marked static, less any the graph mutates or returns) are optimized as constants, as Inductor's freezing
does: weight-only sub-expressions (concatenated projections, folded norms, masks) are computed once. Each
call checks that every such input is the same tensor at the same version (``_version``, which in-place
updates, optimizer steps and ``load_state_dict`` advance); if one changed, the graph is optimized again
with the new weights, and past ``MAX_REBINDS`` changes it keeps them as inputs (live). Writes through
``.data`` do not advance the version (PyTorch gives ``.data`` its own counter) and are not seen: use
``options={"freeze": False}`` for a model whose weights are changed that way. In training the weights stay
graph inputs.

Options: ``torch.compile(model, backend="eqiforge", options={...})`` takes those of ``eqiforge.optimize``
(backend, rules, limits, device, ...) plus ``fallback`` ("inductor" or "eager"), ``max_shapes`` and
``freeze`` (True: weights as constants in inference).

Changing shapes: at a call with another shape Dynamo recompiles with those dims symbolic. Such a graph is
optimized once for every value of them (``_symbolic_plan``): converted to the IR at size hints, optimized
there, its plan lifted to the symbolic sizes, checked at other values (``api.generalize``) and run as torch
code that reads its sizes from its inputs. Where that cannot be (the reason is warned), the graph is
specialised per concrete shape at call time: on the first call at a shape it is re-traced at that shape
(make_fx) and optimized (in inference with the weights as constants, guarded as above), and the plan is
kept in a PlanCache keyed by the signature of the inputs with dynamic dims. Up to ``max_shapes`` shapes get
a plan each; later shapes, and a shape whose plan fails, run the fallback (Inductor compiles the dynamic
graph once, for all shapes). ``REPORTS`` holds the report of every plan built, ``SHAPE_PLANS`` every
graph with dynamic dims (which calls ran a plan, which the fallback and why), and ``call_counts()`` the
calls of every graph the backend compiled that ran an EqiForge plan and that ran anything else.
"""
from __future__ import annotations

import dataclasses
import warnings
from collections import Counter

import torch
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.aot_autograd import MutationType, make_boxed_func
from torch._inductor.compile_fx import compile_fx_inner
from torch._inductor.decomposition import select_decomp_table
from torch._subclasses.fake_tensor import unset_fake_temporarily
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.experimental.symbolic_shapes import optimization_hint

from . import api, frontend
from .decide import choice
from .dims import NotPolynomial, choose_hints
from .errors import EqiforgeError
from .frontend.symbolic import SizeEnv, SymbolicProgram, symbolic_sizes
from .pipeline.report import StageTimer
from .runtime import backends
from .runtime.inductor_plan import InductorPlan, laid_out
from .runtime.torch_plan import BucketedPlan
from .runtime.plan_cache import DEFAULT_CAPACITY, PlanCache, signature

#: reports of the plans built in this process, newest last
REPORTS: list = []
#: the graphs with dynamic dims compiled in this process (ShapePlans), newest last
SHAPE_PLANS: list = []
#: what a graph EqiForge does not optimize runs as, per ``fallback`` option
FALLBACKS = {"inductor": "compiled by Inductor", "eager": "unchanged, op by op"}
#: weight changes a graph with weights as constants is optimized again for; past them its weights stay inputs
MAX_REBINDS = 2
#: forward calls in this process of graphs this backend compiled: those that ran an EqiForge plan, and the rest
CALLS: Counter = Counter()


def call_counts() -> dict[str, int]:
    """Forward calls so far, in this process, of the graphs ``backend="eqiforge"`` compiled: ``"plan"``, those
    that ran an EqiForge plan; ``"fallback"``, those that ran anything else (the graph compiled by Inductor,
    or as it is)."""
    return {"plan": CALLS["plan"], "fallback": CALLS["fallback"]}


def eqiforge_backend(gm, example_inputs, options: dict | None = None, **kwargs):
    """torch.compile backend entry point. ``options`` (torch.compile's) and keyword arguments are those of
    ``eqiforge.optimize``, plus ``fallback``, ``max_shapes`` and ``freeze`` (see the module docstring)."""
    settings = {"backend": "inductor", **(options or {}), **kwargs}
    # auto: the graph and its plan are both timed compiled by Inductor already
    settings["backend"] = backends.resolve(settings["backend"], auto="inductor")[0].name
    fallback = settings.pop("fallback", "inductor")
    max_shapes = settings.pop("max_shapes", DEFAULT_CAPACITY)
    freeze = settings.pop("freeze", True)
    if fallback not in FALLBACKS:
        raise EqiforgeError(f"unknown fallback {fallback!r}; available: {list(FALLBACKS)}")
    if not isinstance(max_shapes, int) or max_shapes < 1:
        raise EqiforgeError(f"max_shapes is the number of shapes a graph gets a plan for, at least 1; got "
                            f"{max_shapes!r}")
    if not isinstance(freeze, bool):
        raise EqiforgeError(f"freeze is True (weights as constants in inference) or False; got {freeze!r}")
    live = api.Options(**api.normalise_options({**settings, "fold_constants": False}))
    # Dynamo's inputs: how many, and its module tensors (real) by position, the candidates for constants
    state = (len(example_inputs), {i: t for i, t in enumerate(example_inputs)
                                   if getattr(t, "_dynamo_static_input_type", None)})
    frozen = dataclasses.replace(live, fold_constants=settings.get("fold_constants", True))
    backend = aot_autograd(fw_compiler=_forward_compiler(live, fallback, max_shapes),
                           inference_compiler=_forward_compiler(live, fallback, max_shapes, frozen,
                                                                state if freeze else None),
                           bw_compiler=_fallback_compiler(fallback, is_backward=True),
                           decompositions=_decompositions())
    return backend(gm, example_inputs)


#: fused attention stays one PyTorch call (an extern of the plan) in every graph the backend takes. Inductor
#: lowers it to its flash-attention kernel, which a decomposed attention compiled by Inductor does not match
#: (a plain SDPA 1.22x torch.compile's time when decomposed, re-formed as two GEMMs and a softmax). And in
#: training, the backward AOTAutograd derives from the CPU flash decomposition is wrong in torch 2.13: a GPT-2
#: step got gradients 9x off upstream of the attention (found by bisecting the core-ATen table with
#: AOTAutograd and the graphs run as they are, no EqiForge).
KEPT_WHOLE = (torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default,)


def _decompositions() -> dict:
    """The frontend's decomposition table without the ops the backend keeps whole (KEPT_WHOLE)."""
    table = frontend.decomposition_table()
    for op in KEPT_WHOLE:
        table.pop(op, None)
    return table


def _fallback_compiler(fallback: str, is_backward: bool = False):
    """An AOTAutograd compiler for what EqiForge does not optimize: Inductor's, or the graph as it is."""
    def compile_graph(gm, example_inputs):
        if fallback == "inductor":
            try:  # decomposed again as Inductor expects (it lowers some core-ATen ops only after its own table)
                decomposed = make_fx(gm, decomposition_table=select_decomp_table(), tracing_mode="symbolic",
                                     _allow_non_fake_inputs=True)(*example_inputs)
                # make_fx keeps its ShapeEnv on the graph, and Inductor's cache key pickles the graph whole:
                # that pickle differs per process, so the key never matched and every process compiled the
                # graph anew (T5 encoder's first call: 7 s of codegen a warm cache would skip). Inductor
                # takes the same ShapeEnv from the inputs' fake mode when the graph has none.
                decomposed.shape_env = None
                return compile_fx_inner(decomposed, example_inputs, is_backward=is_backward)
            except Exception as err:  # noqa: BLE001 - as for EqiForge: never fail the user's compile
                warnings.warn(f"eqiforge: Inductor failed on this graph ({type(err).__name__}: {err}); it runs "
                              f"{FALLBACKS['eager']}", stacklevel=2)
        return make_boxed_func(gm.forward)
    return compile_graph


def _forward_compiler(opts: api.Options, fallback: str, max_shapes: int, frozen: api.Options | None = None,
                      state: tuple | None = None):
    """AOTAutograd's compiler for a forward graph; in inference (``frozen``: its options) the module tensors
    among Dynamo's inputs become constants (``state``: how many inputs Dynamo passed, its module tensors)."""
    def compile_forward(gm, example_inputs):
        dynamic = any(_symbolic(a) for a in example_inputs)

        def build(weights: dict):
            """What calls run, with ``weights`` (input position -> tensor) as constants."""
            options = frozen if weights else opts
            if not dynamic:
                return _static_plan(gm, example_inputs, options, fallback, weights)
            plans = ShapePlans(gm, example_inputs, options, fallback, max_shapes, weights)
            SHAPE_PLANS.append(plans)
            if plans.symbolic is None:
                warnings.warn(f"eqiforge: Dynamo made dims of this graph dynamic (it was called at another shape) "
                              f"and EqiForge has no plan for every size ({plans.symbolic_why}); it specialises the "
                              f"graph per shape at call time, a plan for each of up to {max_shapes} shapes, later "
                              f"ones run {FALLBACKS[fallback]}", stacklevel=2)
            return plans
        weights = _weights(len(example_inputs), *state) if state else {}
        return ConstantWeights(build, weights) if weights else build({})
    return compile_forward


def _weights(inputs: int, dynamo_inputs: int, state: dict) -> dict:
    """The forward graph's inputs that are module tensors it neither mutates nor returns, by position:
    AOTAutograd's static inputs, the first ones the parameters it lifted itself, then Dynamo's inputs."""
    context = torch._guards.TracingContext.try_get()
    if context is None or context.fw_metadata is None:
        return {}
    meta = context.fw_metadata
    lifted = list(context.params_flat or [])
    if len(lifted) + dynamo_inputs != inputs:
        return {}  # not the inputs as AOTAutograd passes them (a layout this does not know): keep them live
    kept = {o.base_idx for o in meta.output_info if o.base_idx is not None}
    kept |= {i for i, m in enumerate(meta.input_info) if m.mutation_type != MutationType.NOT_MUTATED}
    values = {i: t for i, t in enumerate(lifted)} | {i + len(lifted): t for i, t in state.items()}
    return {i: values[i] for i in meta.static_input_indices if i in values and i not in kept}


def _static_plan(gm, example_inputs, opts: api.Options, fallback: str, weights: dict | None = None):
    """AOTAutograd's callable (a list of inputs in, outputs out) for ``gm`` at static shapes: its plan, with
    ``weights`` (input position -> tensor) bound as constants, or the graph run by the fallback."""
    weights = weights or {}
    live = [i for i in range(len(example_inputs)) if i not in weights]
    examples = [_concrete(example_inputs[i]) for i in live]
    optimized, why = _optimize(gm, examples, opts, weights)
    if optimized is None:
        warnings.warn(f"eqiforge: {why}; the graph runs {FALLBACKS[fallback]}", stacklevel=3)
        return _Fallback(_fallback_compiler(fallback)(gm, example_inputs))
    strides = _output_strides(gm)
    why = api.no_better(optimized, opts)
    report = optimized.report
    timed = choice.untimed([("graph", _graph_price(report, fallback)), ("plan", report.predicted_after)],
                           opts.measure, opts.measure_seconds)
    if opts.measure == "never" or timed is not None or not api.measurable(optimized, opts):
        if timed is not None and opts.measure != "never" and api.measurable(optimized, opts):
            report.measured = timed.describe()
        return _predicted_choice(gm, example_inputs, optimized, examples, live, strides, fallback, why)
    return _measured_choice(gm, example_inputs, optimized, examples, live, weights, strides, opts, fallback, why)


def _predicted_choice(gm, example_inputs, optimized, examples, live, strides, fallback, why):
    """The plan, or the original graph where ``why`` says the plan is predicted no better."""
    if why:
        optimized.report.runs = f"the original graph, {FALLBACKS[fallback]} ({why})"
        return _Fallback(_fallback_compiler(fallback)(gm, example_inputs))
    return _plan_callable(optimized, examples, live, strides)


def _plan_callable(optimized, examples, live, strides):
    """The plan as AOTAutograd's callable (an inductor plan compiled now, at ``examples``)."""
    if isinstance(optimized.runner, InductorPlan):
        optimized.runner.compile(examples, strides)
        optimized.report.lowering_notes += optimized.runner.notes
    laid_out_by_plan = isinstance(optimized.runner, InductorPlan) and optimized.runner.graph is not None
    return _Selected(optimized.runner.forward, live, None if laid_out_by_plan else strides)


def _measured_choice(gm, example_inputs, optimized, examples, live, weights, strides, opts, fallback, why):
    """Both compiled, timed on the example inputs (choice.py): the faster runs; the simpler, the original
    graph as the fallback compiles it, unless the plan is faster beyond the measured spread."""
    report = optimized.report
    plan = _plan_callable(optimized, examples, live, strides)
    graph = _fallback_compiler(fallback)(gm, example_inputs)
    with unset_fake_temporarily(), torch.no_grad():
        sets = _timing_sets(len(example_inputs), weights, live, examples)
        candidates = [choice.Candidate("graph", choice.rotating(lambda *x: graph(list(x)), sets),
                                       _graph_price(report, fallback), gm.code),
                      choice.Candidate("plan", choice.rotating(lambda *x: plan.uncounted(list(x)), sets),
                                       report.predicted_after, optimized.source)]
        decision = choice.choose(candidates, opts.measure, opts.measure_seconds, opts.min_gain, opts.cache,
                                 key=gm.code, device=examples[0].device.type if examples else "cpu")
    report.measured = decision.describe()
    if decision.runs == "plan" if decision.medians else why is None:
        return plan
    report.runs = f"the original graph, {FALLBACKS[fallback]} (" + (
        f"measured: {decision.why})" if decision.medians else f"{why})")
    return _Fallback(graph)


def _graph_price(report, fallback: str) -> float | None:
    """The price of the graph as the fallback runs it, as a measured choice's candidate: op by op, the
    program as written; compiled by Inductor, none, so it is timed against the plan however far apart the
    prices are (the cost model cannot see Inductor's fusion): a cross-entropy's plan for every size predicted
    2x faster than the graph op by op ran 1.6x Inductor's time, and a bmm-softmax-bmm's plan 1.2x in two runs
    of four."""
    return None if fallback == "inductor" else report.predicted_written or report.predicted_before


def _timing_sets(count: int, fixed: dict, live: list[int], examples: list) -> list[list]:
    """Input lists of ``count`` for timed calls to take in turn: copies of ``examples`` (the inputs at
    ``live``, activations), the values of ``fixed`` (position -> weight or size) shared."""
    return [[fixed[i] if i in fixed else fresh[live.index(i)] for i in range(count)]
            for fresh in choice.input_sets(*examples)]


def _output_strides(gm) -> list:
    """The strides of the graph's tensor outputs as AOTAutograd traced them (None where unknown). The
    backward, compiled for the forward's saved tensors as traced, asserts them, and AOTAutograd rebuilds
    aliased outputs from them: a plan returning a transposed view where the traced forward returned a
    contiguous tensor (a decoder's cache keys and values) must give it that layout. An inductor plan's
    compiled graph writes them so itself; other plans' outputs are copied after the call."""
    (outputs,) = next(n for n in gm.graph.nodes if n.op == "output").args
    vals = [o.meta.get("val") if isinstance(o, torch.fx.Node) else None for o in outputs]
    return [tuple(v.stride()) if isinstance(v, torch.Tensor) else None for v in vals]


def _optimize(gm, examples: list, opts: api.Options, weights: dict | None = None,
              title: str = "a torch.compile graph"):
    """``gm`` (static shapes) through the pipeline, with the placeholders at the positions of ``weights``
    bound to those tensors (constants) and ``examples`` for the rest: (the optimized module, None), or
    (None, why not)."""
    placeholders = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    params = {placeholders[i]: t for i, t in (weights or {}).items()}
    names = [n for n in placeholders if n not in params]
    timer = StageTimer()
    try:
        # real tensors throughout (constant evaluation, folding, the plan check), also under Dynamo's fake mode
        with unset_fake_temporarily():
            with timer("capture"):
                graph = frontend.mark_structured_masks(frontend.fx_to_ir(gm, names, params))
            optimized = api.optimize_graph(graph, names, None, opts, timer, examples=examples, title=title)
    except EqiforgeError as err:
        return None, f"EqiForge cannot optimize this graph: {err}"
    except Exception as err:  # noqa: BLE001 - a bug in EqiForge must not fail the user's compile
        return None, f"EqiForge failed on this graph ({type(err).__name__}: {err}; please report it)"
    REPORTS.append(optimized.report)
    return optimized, None


class _Selected:
    """A plan as AOTAutograd's callable: the list of the graph's inputs in, the plan's outputs (its inputs:
    those at ``live``) out, each copied into its traced layout (``strides``; None: the plan's compiled graph
    writes them so itself)."""

    _boxed_call = True  # AOTAutograd passes the inputs as one list

    def __init__(self, run, live: list[int], strides: list | None = None):
        self.run, self.live, self.strides = run, live, strides

    def __call__(self, args):
        CALLS["plan"] += 1
        return self.uncounted(args)

    def uncounted(self, args):
        """A call (the measured choice's timing runs) that ``call_counts`` does not count."""
        outputs = self.run(*[args[i] for i in self.live])
        if self.strides is None:
            return outputs
        return [o if s is None else laid_out(o, s) for o, s in zip(outputs, self.strides)]


class _Fallback:
    """What a graph EqiForge did not optimize runs (AOTAutograd's boxed callable), counted as such."""

    _boxed_call = True

    def __init__(self, run):
        self.run = run

    def __call__(self, args):
        CALLS["fallback"] += 1
        return self.run(args)


class ConstantWeights:
    """A forward graph whose module weights are optimized as constants (the module docstring), guarded:
    each call checks they are the same tensors at the same versions, and a change re-optimizes the graph
    with the new weights, up to ``MAX_REBINDS`` times; then they stay inputs. ``rebinds`` lists the
    changes seen, ``runner`` is what calls run now."""

    _boxed_call = True

    def __init__(self, build, weights: dict):
        """``build(weights)`` returns what calls run with those inputs as constants (``{}``: none)."""
        self.build = build
        self.rebinds: list[str] = []
        self._bind(weights)

    def _bind(self, weights: dict) -> None:
        self.runner = self.build(weights)
        # plans hold the weights; the graph run by the fallback reads them as inputs
        bound = weights if isinstance(self.runner, (_Selected, ShapePlans)) else {}
        self.guards = [(i, t, t._version) for i, t in sorted(bound.items())]

    def __call__(self, args):
        for i, tensor, version in self.guards:
            if args[i] is not tensor or tensor._version != version:
                self._changed(args, f"input {i}, {'another tensor' if args[i] is not tensor else 'changed in place'}")
                break
        return self.runner(args)

    def _changed(self, args, what: str) -> None:
        self.rebinds.append(what)
        if len(self.rebinds) > MAX_REBINDS:
            warnings.warn(f"eqiforge: weights bound as constants changed {len(self.rebinds)} times (last: {what}); "
                          f"they stay inputs of this graph from now on", stacklevel=3)
            self.guards = []
            self.runner = self.build({})
            return
        warnings.warn(f"eqiforge: a weight bound as a constant changed ({what}); the graph is optimized again "
                      f"with the new weights", stacklevel=3)
        self._bind({i: args[i] for i, _, _ in self.guards})


def _symbolic(value) -> bool:
    """A symbolic size, or a tensor with a symbolic dim: what Dynamo passes for dims it made dynamic."""
    if isinstance(value, torch.Tensor):
        return any(isinstance(d, torch.SymInt) for d in value.shape)
    return isinstance(value, torch.SymInt)


def _at_hint(example):
    """A real value for a dynamic graph's input at the sizes Dynamo traced it with (its symbols' hints)."""
    if isinstance(example, torch.SymInt):
        return optimization_hint(example)
    if isinstance(example, torch.Tensor) and _symbolic(example):
        return _concrete(example, ([optimization_hint(d) for d in example.shape], example.dtype))
    return _concrete(example)


def _concrete(example, entry=None):
    """A real value for a graph input: ``example`` (Dynamo's) at the sizes of its signature ``entry``
    (None: the example's own, static ones, and its strides: Inductor compiles for the strides it is shown
    and asserts them at every call, and an input after a graph break may be a transposed view). Tensors
    are normal floats or zero integers (valid indices whatever they index), for the trace and the plan
    check; sizes stay as they are."""
    if not isinstance(example, torch.Tensor):
        return example if entry is None else entry
    with unset_fake_temporarily():
        if entry is None:
            value = torch.empty_strided(example.shape, example.stride(), dtype=example.dtype, device=example.device)
        else:
            value = torch.empty(entry[0], dtype=entry[1], device=example.device)
        return value.normal_() if value.dtype.is_floating_point else value.zero_()


class ShapePlans:
    """A forward graph with dynamic dims (the module docstring), with the inputs at the positions of
    ``weights`` bound to those tensors: one plan for every value of its symbolic dims, built once
    (``symbolic``; ``symbolic_why`` says why there is none), else a plan per concrete shape at call time.

    ``runs[key]`` counts the calls that ran an optimized plan, ``fallback_runs[key]`` those that ran the
    fallback, ``why[key]`` says why; ``key`` is the signature of the inputs with dynamic dims ("every size"
    for the symbolic plan's calls)."""

    _boxed_call = True  # AOTAutograd passes the inputs as one list

    def __init__(self, gm, example_inputs, opts: api.Options, fallback: str, capacity: int, weights: dict):
        self.gm, self.opts, self.fallback, self.weights = gm, opts, fallback, weights
        self.examples = list(example_inputs)  # fake; their static dims, dtypes and devices shape the traces
        self.dynamic = [i for i, a in enumerate(self.examples) if _symbolic(a)]
        self.cache = PlanCache(self._build, capacity)
        self.runs, self.fallback_runs, self.why = Counter(), Counter(), {}
        self._fallback_run = None
        self.symbolic, self.symbolic_why = _symbolic_plan(gm, self.examples, opts, weights)
        self.graph_every_size = None  # the graph as the fallback compiles it, where measured faster than the plan
        if self.symbolic is not None and opts.measure != "never":
            self._measure_every_size()

    def __call__(self, args):
        if self.graph_every_size is not None:
            self.fallback_runs["every size"] += 1
            CALLS["fallback"] += 1
            return self.graph_every_size(list(args))
        if self.symbolic is not None and self.symbolic.accepts(args):
            self.runs["every size"] += 1
            CALLS["plan"] += 1
            return self.symbolic(args)
        key = signature([args[i] for i in self.dynamic])
        if key not in self.why:
            quiet = False
            if self.cache.has_room(key):
                try:
                    plan = self.cache.get(key)
                except _NoPlan as err:
                    self.why[key], quiet = str(err), err.quiet
                else:
                    self.runs[key] += 1
                    CALLS["plan"] += 1
                    return plan(args)
            else:
                self.why[key] = f"past the {self.cache.capacity} shapes this graph gets a plan for (max_shapes)"
            if not quiet:
                warnings.warn(f"eqiforge: {self.why[key]}; this shape runs {FALLBACKS[self.fallback]}", stacklevel=2)
        self.fallback_runs[key] += 1
        CALLS["fallback"] += 1
        return self._fallback(args)

    def summary(self) -> str:
        """One line: plans cached, calls run by plans and by the fallback."""
        return (f"{self.cache.summary()}; {sum(self.runs.values())} call(s) ran a plan, "
                f"{sum(self.fallback_runs.values())} the fallback ({FALLBACKS[self.fallback]})")

    def _build(self, key) -> "_Specialised":
        """The plan for one signature: the graph re-traced at those sizes (random inputs), then optimized."""
        sizes = dict(zip(self.dynamic, key))
        args = [self.weights[i] if i in self.weights else _concrete(e, sizes[i]) if i in sizes else _concrete(e)
                for i, e in enumerate(self.examples)]
        positions = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
        outputs = []  # the graph's outputs at these sizes: sizes (for the backward) stay, tensors come from the plan

        def at_these_sizes(*tensors):
            full = list(args)
            for i, t in zip(positions, tensors):
                full[i] = t
            outs = self.gm(*full)
            outputs[:] = [None if isinstance(o, torch.Tensor) else o for o in outs]
            return [o for o in outs if isinstance(o, torch.Tensor)]

        try:
            traced = make_fx(at_these_sizes, decomposition_table=frontend.decomposition_table())(
                *[args[i] for i in positions])
        except Exception as err:  # noqa: BLE001 - a shape that cannot be traced runs the fallback
            raise _NoPlan(f"the graph could not be re-traced at input sizes {key} ({type(err).__name__}: "
                          f"{err})") from err
        weights = {k: self.weights[i] for k, i in enumerate(positions) if i in self.weights}  # by placeholder
        live = [i for i in positions if i not in self.weights]
        tensors = [args[i] for i in live]
        optimized, why = _optimize(traced, tensors, self.opts, weights,
                                   title=f"a torch.compile graph at input sizes {key}")
        if optimized is None:
            raise _NoPlan(why)
        why = api.no_better(optimized, self.opts)  # per shape, predicted: a measurement per shape would cost
        if why is None and isinstance(optimized.runner, InductorPlan):  # two compiles at every new size
            optimized.runner.compile(tensors)
            optimized.report.lowering_notes += optimized.runner.notes
        if why:
            optimized.report.runs = f"the original graph, {FALLBACKS[self.fallback]} ({why})"
            raise _NoPlan(why, quiet=True)
        optimized.report.runs = f"the plan for the dynamic inputs' signature {key}"
        return _Specialised(optimized.runner.forward, live, outputs)

    def _measure_every_size(self) -> None:
        """The plan for every size timed against the graph as the fallback compiles it (Inductor, dynamic
        shapes), once, at the traced call's sizes (choice.py's protocol and cache): where the graph is faster
        beyond the spread, it serves every size and no plan per shape is built."""
        report, compiled = self.symbolic.module.report, []

        def compile_graph():
            compiled.append(_fallback_compiler(self.fallback)(self.gm, self.examples))
        args = [self.weights[i] if i in self.weights else _at_hint(e) for i, e in enumerate(self.examples)]
        live = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor) and i not in self.weights]
        with unset_fake_temporarily(), torch.no_grad():
            sets = _timing_sets(len(args), {i: a for i, a in enumerate(args) if i not in live}, live,
                                [args[i] for i in live])
            candidates = [choice.Candidate("graph", choice.rotating(lambda *x: compiled[0](list(x)), sets),
                                           _graph_price(report, self.fallback), self.gm.code,
                                           prepare=compile_graph),
                          choice.Candidate("plan", choice.rotating(lambda *x: self.symbolic(list(x)), sets),
                                           report.predicted_after, self.symbolic.module.source)]
            decision = choice.choose(candidates, self.opts.measure, self.opts.measure_seconds, self.opts.min_gain,
                                     self.opts.cache, key=self.gm.code + "\n# every size",
                                     device=args[live[0]].device.type if live else "cpu")
        report.measured = decision.describe()
        if decision.medians and decision.runs == "graph":
            if not compiled:  # the decision came from the cache
                compile_graph()
            self.graph_every_size = compiled[0]
            report.runs = f"the original graph, {FALLBACKS[self.fallback]}, at every size (measured: {decision.why})"

    def _fallback(self, args):
        if self._fallback_run is None:
            self._fallback_run = (self.gm.forward if self.fallback == "eager"
                                  else torch.compile(self.gm, backend="inductor", dynamic=True))
        return self._fallback_run(*args)


class _EverySize:
    """A graph's plan for every value of its symbolic dims as AOTAutograd's callable: the call's tensors at
    ``positions`` in (Dynamo's size inputs are read from them), the plan's outputs out."""

    def __init__(self, module, positions: list[int]):
        self.module, self.positions = module, positions
        self.run = module.runner.forward

    def accepts(self, args) -> bool:
        return self.module.accepts([args[i] for i in self.positions])

    def __call__(self, args):
        return list(self.run(*[args[i] for i in self.positions]))


def _symbolic_plan(gm, examples: list, opts: api.Options, weights: dict) -> tuple[_EverySize | None, str]:
    """One plan for every value of the symbolic dims of Dynamo's dynamic graph ``gm`` (its ``examples`` are
    fake; ``weights``, input position -> tensor, are constants): the graph converted at size hints,
    optimized once, its plan lifted and checked at other sizes (api.generalize); runs as torch code. (None,
    why not) when it cannot be."""
    try:
        sizes = symbolic_sizes(gm)
    except NotPolynomial as err:  # a floor division or the like of a symbolic size
        return None, str(err)
    if sizes is None:
        return None, "no symbolic size in the graph"
    placeholders = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    params = {placeholders[i]: t for i, t in weights.items()}
    positions = [i for i, e in enumerate(examples) if isinstance(e, torch.Tensor) and i not in weights]
    names = [placeholders[i] for i in positions]

    def convert(env, lifter):
        graph = frontend.fx_to_ir(gm, names, params, sizes=env)
        graph.symbolic = lifter
        return frontend.mark_structured_masks(graph)
    program = SymbolicProgram(sizes, choose_hints(sizes.symbols, sizes.expressions, sizes.static, sizes.observed),
                              convert)
    options = dataclasses.replace(opts, backend="torch")
    title = "a torch.compile graph with symbolic dims"
    try:
        with unset_fake_temporarily():
            observed = SizeEnv(sizes.observed)
            inputs = tuple(_concrete(examples[i], ([observed.concrete(d) for d in examples[i].shape],
                                                   examples[i].dtype)) for i in positions)
            graph = program.graph_at(program.hints, symbolic=True)
            captured = frontend.Captured(graph, names, None, None, inputs=inputs, symbolic=program)
            timer = StageTimer()
            optimized = api.optimize_graph(graph, names, None, options, timer,
                                           examples=api.examples_at(captured, program.hints), title=title)
            with timer("generalize"):
                api.generalize(optimized, captured, options, title)
    except EqiforgeError as err:
        return None, str(err)
    except Exception as err:  # noqa: BLE001 - a bug in EqiForge must not fail the user's compile
        return None, f"EqiForge failed on it ({type(err).__name__}: {err})"
    why = None if isinstance(optimized.runner, BucketedPlan) else api.no_better(optimized, opts)
    optimized.report.runs = "the plan for every size" if why is None else f"per shape (the plan for every size: {why})"
    REPORTS.append(optimized.report)
    return (None, why) if why else (_EverySize(optimized, positions), "")


class _NoPlan(Exception):
    """A shape whose plan could not be built, or is no better than the graph (``quiet``: no warning)."""

    def __init__(self, why: str, quiet: bool = False):
        super().__init__(why)
        self.quiet = quiet


class _Specialised:
    """One shape's plan as the graph's callable: the call's tensors in, the graph's outputs out."""

    def __init__(self, run, positions: list[int], outputs: list):
        self.run, self.positions, self.outputs = run, positions, outputs

    def __call__(self, args):
        results = iter(self.run(*[args[i] for i in self.positions]))
        return [next(results) if o is None else o for o in self.outputs]
