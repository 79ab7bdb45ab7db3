"""``torch.compile(model, backend="eqiforge")``: the registered torch.compile backend.

Dynamo hands over an FX graph; AOTAutograd decomposes it to core ATen and splits forward from backward.
The forward graph goes through the EqiForge pipeline, and the chosen plan is traced to an ATen graph and
compiled by Inductor (``runtime/inductor_plan.py``): EqiForge's algebra, Inductor's fused kernels.
``options={"plan_backend": "torch"}`` runs the plan as EqiForge's torch code instead. A plan predicted or
measured no better than the graph (``decide/``) gives Inductor the original graph (``Report.runs`` says which):
then the graph runs as a plain torch.compile runs it. The backward, and a forward EqiForge cannot take or fails on, is
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
(rules, limits, priced_device, measure, ...; its ``backend`` is ``plan_backend`` here) plus ``fallback``
("inductor" or "eager"), ``max_shapes`` and ``freeze`` (True: weights as constants in inference).
torch.compile's ``mode="max-autotune"`` stands for ``measure="always"`` (``MODES``).

Changing shapes: at a call with another shape Dynamo recompiles with those dims symbolic. Such a graph is
optimized once for every value of them (``_symbolic_plan``): converted to the IR at size hints, optimized
there, its plan lifted to the symbolic sizes, checked at other values (``shapes/``) and run as torch
code that reads its sizes from its inputs. Where that cannot be (the reason is warned), the graph is
specialised per concrete shape at call time: on the first call at a shape it is re-traced at that shape
(make_fx) and optimized (in inference with the weights as constants, guarded as above), and the plan is
kept in a PlanCache keyed by the signature of the inputs with dynamic dims. Up to ``max_shapes`` shapes get
a plan each; later shapes, and a shape whose plan fails, run the fallback (Inductor compiles the dynamic
graph once, for all shapes). ``REPORTS`` holds the report of every plan built, ``SHAPE_PLANS`` every
graph with dynamic dims (which calls ran a plan, which the fallback and why), and ``call_counts()`` the
calls of every graph the backend compiled by what served them: a plan, the graph chosen over its plan
(compiled by Inductor, or op by op), or the fallback where no plan could be made.
"""
from __future__ import annotations

import warnings

import torch
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.aot_autograd import MutationType

from . import frontend
from .decide.graph import PLAN, predicted, race
from .decide.verdicts import no_better
from .errors import EqiforgeError
from .pipeline.options import DEPRECATED, Options, renamed
from .runtime.aot import (FALLBACKS, ConstantWeights, Fallback, Selected, chosen, concrete, fallback_compiler,
                          is_symbolic, output_strides)
from .runtime.aot import CALLS, MAX_REBINDS, REPORTS, SHAPE_PLANS, call_counts  # noqa: F401 - the backend's registries
from .runtime.inductor_plan import InductorPlan
from .runtime.plan_cache import DEFAULT_CAPACITY
from .shapes.graphs import ShapePlans, optimize_fx


#: torch.compile's ``mode`` -> the options it stands for under this backend (docs/usage.md): every candidate
#: timed, and Inductor's compiles of forward graphs autotuned as the mode has Inductor do (its settings for the
#: mode but CUDA graphs); "reduce-overhead" (CUDA graphs, which EqiForge's plans do not capture) is refused
MODES = {"default": {}, "max-autotune": {"measure": "always"}, "max-autotune-no-cudagraphs": {"measure": "always"}}
#: in torch.compile's options "backend" would name a second backend: the plan's is ``plan_backend``
COMPILE_DEPRECATED = {"backend": "plan_backend", **DEPRECATED}


def eqiforge_backend(gm, example_inputs, options: dict | None = None, mode: str | None = None, **kwargs):
    """torch.compile backend entry point. ``options`` (torch.compile's) and keyword arguments are those of
    ``eqiforge.optimize``, with ``plan_backend`` for its ``backend``, plus ``fallback``, ``max_shapes`` and
    ``freeze`` (see the module docstring); torch.compile's ``mode`` maps to options by ``MODES``."""
    settings = {**mode_options(mode), **renamed({**(options or {}), **kwargs}, COMPILE_DEPRECATED)}
    settings["backend"] = settings.pop("plan_backend", "inductor")
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
    # auto: the graph and its plan are both timed compiled by Inductor already
    live = Options.of(**{**settings, "fold_constants": False}).resolved(auto="inductor")
    frozen = live.with_(fold_constants=settings.get("fold_constants", True))
    # Dynamo's inputs: how many, and its module tensors (real) by position, the candidates for constants
    state = (len(example_inputs), {i: t for i, t in enumerate(example_inputs)
                                   if getattr(t, "_dynamo_static_input_type", None)})
    backend = aot_autograd(fw_compiler=_forward_compiler(live, fallback, max_shapes),
                           inference_compiler=_forward_compiler(live, fallback, max_shapes, frozen,
                                                                state if freeze else None),
                           bw_compiler=fallback_compiler(fallback, is_backward=True),
                           decompositions=_decompositions())
    with torch._inductor.config.patch(inductor_settings(mode)):
        return backend(gm, example_inputs)


def inductor_settings(mode: str | None) -> dict:
    """Inductor's settings for torch.compile's ``mode``, less CUDA graphs (``MODES``)."""
    return {k: v for k, v in torch._inductor.list_mode_options(mode).items() if "cudagraphs" not in k} \
        if mode in MODES else {}


def mode_options(mode: str | None) -> dict:
    """The options torch.compile's ``mode`` stands for; an EqiforgeError for a mode this backend does not take."""
    if mode is None or mode in MODES:
        return dict(MODES.get(mode, {}))
    if mode == "reduce-overhead":
        raise EqiforgeError("torch.compile's mode='reduce-overhead' captures CUDA graphs, which EqiForge's plans do "
                            "not; leave mode out, or use mode='max-autotune' (every candidate timed)")
    raise EqiforgeError(f"unknown torch.compile mode {mode!r} for backend='eqiforge'; it takes {sorted(MODES)}")


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


def _forward_compiler(opts: Options, fallback: str, max_shapes: int, frozen: Options | None = None,
                      state: tuple | None = None):
    """AOTAutograd's compiler for a forward graph; in inference (``frozen``: its options) the module tensors
    among Dynamo's inputs become constants (``state``: how many inputs Dynamo passed, its module tensors)."""
    def compile_forward(gm, example_inputs):
        dynamic = any(is_symbolic(a) for a in example_inputs)

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


def _static_plan(gm, example_inputs, opts: Options, fallback: str, weights: dict | None = None):
    """AOTAutograd's callable (a list of inputs in, outputs out) for ``gm`` at static shapes: its plan, with
    ``weights`` (input position -> tensor) bound as constants, or the graph run by the fallback: as predicted
    (``decide/verdicts.py``), or as timed where the prediction does not decide (``decide/graph.py``)."""
    weights = weights or {}
    live = [i for i in range(len(example_inputs)) if i not in weights]
    examples = [concrete(example_inputs[i]) for i in live]
    optimized, why = optimize_fx(gm, examples, opts, weights)
    if optimized is None:
        warnings.warn(f"eqiforge: {why}; the graph runs {FALLBACKS[fallback]}", stacklevel=3)
        return Fallback(fallback_compiler(fallback)(gm, example_inputs), "fallback")
    strides, why = output_strides(gm), no_better(optimized, opts)
    if predicted(optimized, opts, fallback):
        if why:
            optimized.report.runs = f"the original graph, {FALLBACKS[fallback]} ({why})"
            return Fallback(fallback_compiler(fallback)(gm, example_inputs), chosen(fallback))
        return _plan_callable(optimized, examples, live, strides)
    plan = _plan_callable(optimized, examples, live, strides)
    graph = fallback_compiler(fallback)(gm, example_inputs)
    decision = race(graph, lambda x: plan.uncounted(x), optimized, opts, fallback, gm.code, gm.code, weights, live,
                    examples)
    if decision.winner == PLAN if decision.measured else why is None:
        return plan
    optimized.report.runs = f"the original graph, {FALLBACKS[fallback]} (" + (
        f"measured: {decision.why})" if decision.measured else f"{why})")
    return Fallback(graph, chosen(fallback))


def _plan_callable(optimized, examples, live, strides):
    """The plan as AOTAutograd's callable (an inductor plan compiled now, at ``examples``)."""
    if isinstance(optimized.runner, InductorPlan):
        optimized.runner.compile(examples, strides)
        optimized.report.lowering_notes += optimized.runner.notes
    laid_out_by_plan = isinstance(optimized.runner, InductorPlan) and optimized.runner.graph is not None
    return Selected(optimized.runner.forward, live, None if laid_out_by_plan else strides)
