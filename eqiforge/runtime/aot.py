"""What AOTAutograd runs for the graphs of ``torch.compile(backend="eqiforge")`` (eqiforge/dynamo.py): a plan,
the graph as the fallback compiles it, a graph whose weights are bound as constants (guarded), and the
counters and registries a user reads (``call_counts``, ``REPORTS``, ``SHAPE_PLANS``)."""
from __future__ import annotations

import warnings
from collections import Counter

import torch
from torch._functorch.aot_autograd import make_boxed_func
from torch._inductor.compile_fx import compile_fx_inner
from torch._inductor.decomposition import select_decomp_table
from torch._subclasses.fake_tensor import unset_fake_temporarily
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.experimental.symbolic_shapes import optimization_hint

from .inductor_plan import laid_out

#: reports of the plans built in this process, newest last
REPORTS: list = []
#: the graphs with dynamic dims compiled in this process (shapes/graphs.py's ShapePlans), newest last
SHAPE_PLANS: list = []
#: what a graph EqiForge does not optimize runs as, per ``fallback`` option
FALLBACKS = {"inductor": "compiled by Inductor", "eager": "unchanged, op by op"}
#: weight changes a graph with weights as constants is optimized again for; past them its weights stay inputs
MAX_REBINDS = 2
#: forward calls in this process of graphs this backend compiled, by what served them (``call_counts``)
CALLS: Counter = Counter()


def call_counts() -> dict[str, int]:
    """Forward calls so far, in this process, of the graphs ``backend="eqiforge"`` compiled, by what served
    them: ``"plan"``, an EqiForge plan; ``"inductor"`` and ``"original"``, the graph compiled by Inductor or
    run op by op (the ``fallback`` option), chosen because it was predicted or measured no slower than its
    plan; ``"fallback"``, the graph as the fallback runs it because no plan could be made (the warning and
    ``REPORTS`` say why)."""
    return {served: CALLS[served] for served in ("plan", "inductor", "original", "fallback")}


def chosen(fallback: str) -> str:
    """``call_counts``'s name for the graph chosen over its plan, as the ``fallback`` option runs it."""
    return "inductor" if fallback == "inductor" else "original"


def fallback_compiler(fallback: str, is_backward: bool = False):
    """An AOTAutograd compiler for what EqiForge does not optimize: Inductor's, or the graph as it is."""
    def compile_graph(gm, example_inputs):
        if fallback == "inductor":
            try:  # decomposed again as Inductor expects (it lowers some core-ATen ops only after its own table)
                decomposed = make_fx(_Reshaping(gm).run, decomposition_table=select_decomp_table(),
                                     tracing_mode="symbolic", _allow_non_fake_inputs=True)(*example_inputs)
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


class _Reshaping(torch.fx.Interpreter):
    """The graph run with its views as reshapes (the same view wherever the strides allow one). A view was
    recorded for the strides the first decomposition gave; Inductor's table may give others: its ``cat`` of an
    empty past with a permuted key returns the key's own layout, where ATen's is contiguous, and a Bloom
    layer's ``view(8, -1, 16)`` of it failed the trace ("Cannot view a tensor with shape [2, 4, 64, 16] and
    strides (4096, 16, 64, 1)"), so the graph ran op by op where a plain torch.compile compiles it."""

    def call_function(self, target, args, kwargs):
        if target is torch.ops.aten.view.default:
            target = torch.ops.aten.reshape.default
        return super().call_function(target, args, kwargs)


def output_strides(gm) -> list:
    """The strides of the graph's tensor outputs as AOTAutograd traced them (None where unknown). The
    backward, compiled for the forward's saved tensors as traced, asserts them, and AOTAutograd rebuilds
    aliased outputs from them: a plan returning a transposed view where the traced forward returned a
    contiguous tensor (a decoder's cache keys and values) must give it that layout. An inductor plan's
    compiled graph writes them so itself; other plans' outputs are copied after the call. Strides Dynamo made
    symbolic (an input called in another layout) are unknown: those outputs come as the plan makes them."""
    (outputs,) = next(n for n in gm.graph.nodes if n.op == "output").args
    vals = [o.meta.get("val") if isinstance(o, torch.fx.Node) else None for o in outputs]
    return [tuple(v.stride()) if isinstance(v, torch.Tensor) and not any(isinstance(s, torch.SymInt) for s in
                                                                         v.stride()) else None for v in vals]



class Selected:
    """A plan as AOTAutograd's callable: the list of the graph's inputs in, the plan's outputs (its inputs:
    those at ``live``) out, each copied into its traced layout (``strides``; None: the plan's compiled graph
    writes them so itself)."""

    _boxed_call = True  # AOTAutograd passes the inputs as one list
    binds_weights = True  # the plan holds the weights bound as constants (ConstantWeights guards them)

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


class Fallback:
    """What a graph EqiForge did not optimize runs (AOTAutograd's boxed callable), counted as ``served``
    (``call_counts``: chosen over the plan, or "fallback" where no plan could be made)."""

    _boxed_call = True

    def __init__(self, run, served: str):
        self.run, self.served = run, served

    def __call__(self, args):
        CALLS[self.served] += 1
        return self.run(args)


class ConstantWeights:
    """A forward graph whose module weights are optimized as constants (eqiforge/dynamo.py's docstring), guarded:
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
        bound = weights if getattr(self.runner, "binds_weights", False) else {}
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


def is_symbolic(value) -> bool:
    """A symbolic size, or a tensor with a symbolic dim: what Dynamo passes for dims it made dynamic."""
    if isinstance(value, torch.Tensor):
        return any(isinstance(d, torch.SymInt) for d in value.shape)
    return isinstance(value, torch.SymInt)


def at_hint(example):
    """A real value for a dynamic graph's input at the sizes Dynamo traced it with (its symbols' hints)."""
    if isinstance(example, torch.SymInt):
        return optimization_hint(example)
    if isinstance(example, torch.Tensor) and is_symbolic(example):
        return concrete(example, ([optimization_hint(d) for d in example.shape], example.dtype))
    return concrete(example)


def _hinted(values) -> list[int]:
    """``values`` (sizes or strides) with each symbolic one at the value Dynamo traced it with."""
    return [optimization_hint(v) if isinstance(v, torch.SymInt) else v for v in values]


def concrete(example, entry=None):
    """A real value for a graph input: ``example`` (Dynamo's) at the sizes of its signature ``entry``
    (None: the example's own, static ones, and its strides: Inductor compiles for the strides it is shown
    and asserts them at every call, and an input after a graph break may be a transposed view). Tensors
    are normal floats or zero integers (valid indices whatever they index), for the trace and the plan
    check; sizes stay as they are. Sizes and strides Dynamo made symbolic take the values it traced with (a
    call in another layout makes the strides of a graph symbolic, not its sizes)."""
    if not isinstance(example, torch.Tensor):
        return example if entry is None else entry
    with unset_fake_temporarily():
        if entry is None:
            value = torch.empty_strided(_hinted(example.shape), _hinted(example.stride()), dtype=example.dtype,
                                        device=example.device)
        else:
            value = torch.empty(entry[0], dtype=entry[1], device=example.device)
        return value.normal_() if value.dtype.is_floating_point else value.zero_()

