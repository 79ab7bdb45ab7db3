"""torch.compile graphs whose dims Dynamo made dynamic (eqiforge/dynamo.py's docstring): one plan for every
value of the symbolic dims where one holds, else a plan per concrete shape built at call time and kept in a
PlanCache, up to ``max_shapes``; later shapes, and a shape whose plan fails, run the fallback."""
from __future__ import annotations

import warnings
from collections import Counter

import torch
from torch._subclasses.fake_tensor import unset_fake_temporarily
from torch.fx.experimental.proxy_tensor import make_fx

from .. import frontend
from ..decide.graph import GRAPH, race
from ..decide.verdicts import no_better
from ..dims import NotPolynomial, choose_hints
from ..errors import EqiforgeError
from ..frontend.symbolic import SizeEnv, SymbolicProgram, symbolic_sizes
from ..pipeline.compile import compile_graph
from ..pipeline.options import Options
from ..pipeline.report import StageTimer
from ..runtime.aot import CALLS, FALLBACKS, REPORTS, at_hint, chosen, concrete, fallback_compiler, is_symbolic
from ..runtime.inductor_plan import InductorPlan
from ..runtime.plan_cache import PlanCache, signature
from ..runtime.torch_plan import BucketedPlan
from .generalize import examples_at, generalize


def optimize_fx(gm, examples: list, opts: Options, weights: dict | None = None,
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
            optimized = compile_graph(graph, names, None, opts, timer, examples=examples, title=title)
    except EqiforgeError as err:
        return None, f"EqiForge cannot optimize this graph: {err}"
    except Exception as err:  # noqa: BLE001 - a bug in EqiForge must not fail the user's compile
        return None, f"EqiForge failed on this graph ({type(err).__name__}: {err}; please report it)"
    REPORTS.append(optimized.report)
    return optimized, None



class ShapePlans:
    """A forward graph with dynamic dims (the module docstring), with the inputs at the positions of
    ``weights`` bound to those tensors: one plan for every value of its symbolic dims, built once
    (``symbolic``; ``symbolic_why`` says why there is none), else a plan per concrete shape at call time.

    ``runs[key]`` counts the calls that ran an optimized plan, ``fallback_runs[key]`` those that ran the
    fallback, ``why[key]`` says why; ``key`` is the signature of the inputs with dynamic dims ("every size"
    for the symbolic plan's calls)."""

    _boxed_call = True  # AOTAutograd passes the inputs as one list
    binds_weights = True  # its plans hold the weights bound as constants (ConstantWeights guards them)

    def __init__(self, gm, example_inputs, opts: Options, fallback: str, capacity: int, weights: dict):
        self.gm, self.opts, self.fallback, self.weights = gm, opts, fallback, weights
        self.examples = list(example_inputs)  # fake; their static dims, dtypes and devices shape the traces
        self.dynamic = [i for i, a in enumerate(self.examples) if is_symbolic(a)]
        self.cache = PlanCache(self._build, capacity)
        self.runs, self.fallback_runs, self.why = Counter(), Counter(), {}
        self.chosen: set = set()  # signatures whose graph was predicted no slower than their plan
        self._fallback_run = None
        self.symbolic, self.symbolic_why = _symbolic_plan(gm, self.examples, opts, weights)
        self.graph_every_size = None  # the graph as the fallback compiles it, where measured faster than the plan
        if self.symbolic is not None and opts.measuring.mode != "never":
            self._measure_every_size()

    def __call__(self, args):
        if self.graph_every_size is not None:
            self.fallback_runs["every size"] += 1
            CALLS[chosen(self.fallback)] += 1  # measured faster than the plan for every size
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
                    if err.quiet:  # predicted no better: the graph chosen, not a miss
                        self.chosen.add(key)
                else:
                    self.runs[key] += 1
                    CALLS["plan"] += 1
                    return plan(args)
            else:
                self.why[key] = f"past the {self.cache.capacity} shapes this graph gets a plan for (max_shapes)"
            if not quiet:
                warnings.warn(f"eqiforge: {self.why[key]}; this shape runs {FALLBACKS[self.fallback]}", stacklevel=2)
        self.fallback_runs[key] += 1
        CALLS[chosen(self.fallback) if key in self.chosen else "fallback"] += 1
        return self._fallback(args)

    def summary(self) -> str:
        """One line: plans cached, calls run by plans and by the fallback."""
        return (f"{self.cache.summary()}; {sum(self.runs.values())} call(s) ran a plan, "
                f"{sum(self.fallback_runs.values())} the fallback ({FALLBACKS[self.fallback]})")

    def _build(self, key) -> "_Specialised":
        """The plan for one signature: the graph re-traced at those sizes (random inputs), then optimized."""
        sizes = dict(zip(self.dynamic, key))
        args = [self.weights[i] if i in self.weights else concrete(e, sizes[i]) if i in sizes else concrete(e)
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
        optimized, why = optimize_fx(traced, tensors, self.opts, weights,
                                   title=f"a torch.compile graph at input sizes {key}")
        if optimized is None:
            raise _NoPlan(why)
        why = no_better(optimized, self.opts)  # per shape, predicted: a measurement per shape would cost
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
        shapes), once, at the traced call's sizes (decide/graph.py's race): where the plan is not faster
        beyond doubt, the graph serves every size and no plan per shape is built."""
        compiled = []

        def compile_fallback():
            compiled.append(fallback_compiler(self.fallback)(self.gm, self.examples))
        args = [self.weights[i] if i in self.weights else at_hint(e) for i, e in enumerate(self.examples)]
        live = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor) and i not in self.weights]
        decision = race(lambda x: compiled[0](x), self.symbolic, self.symbolic.module, self.opts,
                        self.fallback, self.gm.code, self.gm.code + "\n# every size",
                        {i: a for i, a in enumerate(args) if i not in live}, live, [args[i] for i in live],
                        prepare=compile_fallback)
        if decision.measured and decision.winner == GRAPH:
            if not compiled:  # the decision came from the cache
                compile_fallback()
            self.graph_every_size = compiled[0]
            self.symbolic.module.report.runs = (f"the original graph, {FALLBACKS[self.fallback]}, at every size "
                                                f"(measured: {decision.why})")

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


def _symbolic_plan(gm, examples: list, opts: Options, weights: dict) -> tuple[_EverySize | None, str]:
    """One plan for every value of the symbolic dims of Dynamo's dynamic graph ``gm`` (its ``examples`` are
    fake; ``weights``, input position -> tensor, are constants): the graph converted at size hints,
    optimized once, its plan lifted and checked at other sizes (shapes/generalize.py); runs as torch code. (None,
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
    options = opts.running_as("torch")
    title = "a torch.compile graph with symbolic dims"
    try:
        with unset_fake_temporarily():
            observed = SizeEnv(sizes.observed)
            inputs = tuple(concrete(examples[i], ([observed.concrete(d) for d in examples[i].shape],
                                                   examples[i].dtype)) for i in positions)
            graph = program.graph_at(program.hints, symbolic=True)
            captured = frontend.Captured(graph, names, None, None, inputs=inputs, symbolic=program)
            timer = StageTimer()
            optimized = compile_graph(graph, names, None, options, timer, examples=examples_at(captured, program.hints),
                                      title=title)
            with timer("generalize"):
                generalize(optimized, captured, options, title)
    except EqiforgeError as err:
        return None, str(err)
    except Exception as err:  # noqa: BLE001 - a bug in EqiForge must not fail the user's compile
        return None, f"EqiForge failed on it ({type(err).__name__}: {err})"
    why = None if isinstance(optimized.runner, BucketedPlan) else no_better(optimized, opts)
    optimized.report.runs = "the plan for every size" if why is None else f"per shape (the plan for every size: {why})"
    REPORTS.append(optimized.report)
    return (None, str(why)) if why else (_EverySize(optimized, positions), "")


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
