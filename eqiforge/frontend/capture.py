"""Capture a PyTorch program (module, function or FX GraphModule) as an IR graph.

A call's arguments are a pytree (calls.py): tensor leaves are the program's inputs, the other leaves
(ints, bools, None, dtypes, ...) are traced as constants. The program is traced as a function of its tensor leaves alone
(:class:`_Flat`), and its outputs flattened the same way: the plan returns tensors, and :meth:`Captured.unflatten`
rebuilds the user's output structure (a ``ModelOutput`` holding a ``DynamicCache``, say) around them.

Three capture paths, tried in order (a failure of one falls back to the next; an error names every path
tried and the stage each failed at):

1. ``torch.export`` (non-strict), then ``run_decompositions`` to core ATen;
2. AOTAutograd's ``aot_export_module`` (make_fx with the same decomposition table, functionalized): it
   decomposes while tracing, so views see the strides of the decomposed ops (GPT-2's SDPA attention at
   batch 2 fails in ``run_decompositions`` with a view of a tensor whose strides changed, and captures here);
3. Dynamo's graph capture (torch.compile's, one graph: ``fullgraph=True``), then AOTAutograd as above on
   Dynamo's graph (dynamo_capture.py): code that checks for Dynamo skips what stops the others (GPT-2 with
   ``use_cache=False``: a data-dependent mask check in transformers).

All keep whole the few composites the IR has as single ops (``aten.KEEP_WHOLE``); :func:`fx_to_ir`
converts the graph. Shapes are specialised to the example inputs.

Parameters, buffers and lifted tensor constants become ``Param`` leaves when ``fold_params`` is true:
inference semantics, so the optimizer may fold them (precompute ``W1 @ W2``, say). The plan shares their
memory (no second copy of the weights); what it folded is computed once, so later changes to the module's
weights are only seen by the parts that were not folded: re-optimize after changing weights. With
``fold_params=False`` they stay graph inputs, and :attr:`Captured.param_inputs` holds the tensors to feed
them at call time.
"""
from __future__ import annotations

import inspect
import re
import warnings
from dataclasses import dataclass, field

import torch
import torch.fx as fx
from torch._decomp import core_aten_decompositions
from torch._functorch.aot_autograd import aot_export_module
from torch._subclasses.fake_tensor import DataDependentOutputException, DynamicOutputShapeException
from torch.export.graph_signature import InputKind
from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode
from torch.utils import _pytree as pytree

from ..dims import NotPolynomial, choose_hints
from ..errors import EqiforgeError, NoPlanForEverySize
from ..ir import Graph
from . import aten
from .as_written import WrittenCall, written_calls
from .calls import CallSpec, flat_call
from .constants import fold_constant_externs
from .dynamo_capture import one_graph
from .fx_to_ir import fx_to_ir
from .masks import mark_structured_masks
from .symbolic import SizeEnv, SymbolicProgram, symbolic_sizes

STATE_PREFIX = {InputKind.PARAMETER: "p", InputKind.BUFFER: "b", InputKind.CONSTANT_TENSOR: "c"}
DATA_DEPENDENT = (GuardOnDataDependentSymNode, DataDependentOutputException, DynamicOutputShapeException)
CONTROL_FLOW_HINT = (
    "the program branches on tensor values: replace Python control flow that depends on them (if x.sum() > 0, "
    ".item(), .tolist()) by torch.where or torch.cond, and check that the example inputs are valid for the program")


@dataclass
class Captured:
    """A captured program: its IR graph and what is needed to call it like the original."""

    graph: Graph
    input_names: list[str]  # IR input names of the call's tensor leaves, in leaf order
    out_spec: pytree.TreeSpec  # rebuilds the user's output structure from ``graph.outputs``
    module: torch.nn.Module | None  # the source module; None for a plain function
    param_inputs: dict[str, torch.Tensor] = field(default_factory=dict)  # fold_params=False: IR input -> tensor
    written: list[WrittenCall] = field(default_factory=list)  # the program's calls before decomposition
    call: CallSpec | None = None  # how the example call flattens (its tree and constants)
    inputs: tuple = ()  # the example call's tensor leaves (copies where they aliased), in leaf order
    fallback: str = ""  # why torch.export did not capture the program and which path did ("": it did)
    symbolic: SymbolicProgram | None = None  # traced with symbolic dims: ``graph`` is at its hints

    def feeds(self, *inputs: torch.Tensor) -> dict[str, torch.Tensor]:
        """IR inputs by name for a call with these tensor leaves (the weights included when not folded)."""
        if len(inputs) != len(self.input_names):
            raise EqiforgeError(f"expected {len(self.input_names)} inputs {self.input_names}, got {len(inputs)}")
        return {**self.param_inputs, **dict(zip(self.input_names, inputs))}

    def unflatten(self, outputs: list[torch.Tensor]):
        """The user's output structure (tensor, tuple, dict, ModelOutput, cache ...) from the graph outputs."""
        return pytree.tree_unflatten(list(outputs), self.out_spec)


def capture(fn_or_module, example_inputs, example_kwargs=None, *, fold_params: bool = True) -> Captured:
    """Trace ``fn_or_module`` (an ``nn.Module``, a ``torch.fx.GraphModule`` or a plain function) at the call
    ``fn_or_module(*example_inputs, **example_kwargs)`` and convert it to the IR. Arguments may be tensors,
    constants, or containers and registered classes (a transformers ``DynamicCache``) holding them."""
    module = _as_module(fn_or_module)
    name = _name(fn_or_module)
    call, inputs, input_names = flat_call(module, example_inputs, example_kwargs)
    flat = _Flat(module, call)
    traced = _trace(flat, inputs, name)
    if traced.mutated:
        raise EqiforgeError(f"the program updates {traced.mutated} in place; EqiForge optimizes pure programs. For "
                            "a module in training mode (BatchNorm statistics, ...) call .eval() first, or return "
                            "new tensors instead of mutating inputs")
    names = traced.rename(input_names)
    graph, param_inputs = _to_ir(traced, fold_params, name)
    source = fn_or_module if isinstance(fn_or_module, torch.nn.Module) else None
    return Captured(graph, names, flat.out_spec, source, param_inputs, traced.written, call, inputs, traced.fallback)


def capture_symbolic(fn_or_module, example_inputs, example_kwargs, dynamic: dict[int, tuple[int, ...]], *,
                     fold_params: bool = True, declared: bool = False) -> Captured | None:
    """Trace like :func:`capture`, with the dims ``dynamic[k]`` of tensor leaf ``k`` symbolic (torch.export's
    dynamic shapes; the other capture paths specialise). The graph is converted at distinctive hints
    (frontend/symbolic.py) and ``Captured.symbolic`` converts it at any other values. None when the
    program specialised every such dim (a size it branches on); with ``declared`` (the user named the
    dims) that is an error naming the dim and the line."""
    module = _as_module(fn_or_module)
    name = _name(fn_or_module)
    call, inputs, input_names = flat_call(module, example_inputs, example_kwargs)
    flat = _Flat(module, call)
    dynamic = _dims_by_leaf(dynamic, inputs, input_names)
    kind = torch.export.Dim.DYNAMIC if declared else torch.export.Dim.AUTO
    shapes = tuple({d: kind for d in dynamic.get(k, ())} or None for k in range(len(inputs)))
    try:
        traced = _by_export(flat, inputs, [], dynamic_shapes=(shapes,))
    except _StageFailed as failed:
        if declared and "Constraints violated" in str(failed.error):
            raise EqiforgeError(f"capturing {name}: a dim declared dynamic is specialised by the program (it "
                                f"branches on its value or fixes it): {failed.error}") from failed.error
        raise NoPlanForEverySize(f"no plan for every size: capturing {name} with symbolic dims: "
                                 f"{failed.describe()}") from failed.error
    if traced.mutated:
        raise EqiforgeError(f"the program updates {traced.mutated} in place; EqiForge optimizes pure programs")
    names = traced.rename(input_names)
    try:
        sizes = symbolic_sizes(traced.gm)
    except NotPolynomial as err:  # a floor division or the like of a symbolic size
        raise NoPlanForEverySize(f"no plan for every size: {err}") from None
    if sizes is None:
        if declared:
            raise EqiforgeError(f"capturing {name}: the dims declared dynamic {dynamic} are all specialised by "
                                "the program (it fixes their values)")
        return None
    hints = choose_hints(sizes.symbols, sizes.expressions, sizes.static, sizes.observed)

    def convert(env: SizeEnv, lifter):
        return _to_ir(traced, fold_params, name, env, lifter)[0]
    program = SymbolicProgram(sizes, hints, convert)
    try:
        graph, param_inputs = _to_ir(traced, fold_params, name, SizeEnv(hints), program.lifter)
    except (NotPolynomial, EqiforgeError) as err:  # at the hints, e.g. a size relation torch only guards
        raise NoPlanForEverySize(f"no plan for every size: at the size hints {hints}: {err}") from None
    source = fn_or_module if isinstance(fn_or_module, torch.nn.Module) else None
    written = [SizeEnv(hints).written(w) for w in traced.written]
    return Captured(graph, names, flat.out_spec, source, param_inputs, written, call, inputs, traced.fallback,
                    symbolic=program)


def _dims_by_leaf(dynamic, inputs: tuple, names: list[str]) -> dict[int, tuple[int, ...]]:
    """``dynamic`` (True: every dim of every tensor input over 1; or a dict from a tensor input's index or
    name to its dims) as leaf index -> dims; an unknown name or dim is an error naming what there is."""
    if dynamic is True:
        return {k: tuple(d for d, n in enumerate(t.shape) if n > 1) for k, t in enumerate(inputs)}
    out = {}
    for key, wanted in dynamic.items():
        k = names.index(key) if key in names else key
        if not isinstance(k, int) or not 0 <= k < len(inputs):
            raise EqiforgeError(f"dynamic names {key!r}, which is not a tensor input; the inputs are {names}")
        wanted = (wanted,) if isinstance(wanted, int) else tuple(wanted)
        rank = inputs[k].dim()
        if any(not -rank <= d < rank for d in wanted):
            raise EqiforgeError(f"dynamic dims {wanted} of input {names[k]!r}: it has {rank} dims")
        out[k] = tuple(sorted(d % rank for d in wanted))
    return out


def _to_ir(traced: _Traced, fold_params: bool, name: str, sizes: SizeEnv | None = None, lifter=None):
    """(IR graph, parameter inputs) of a traced program, with its constants folded and masks marked;
    ``sizes``/``lifter``: a symbolic graph's values and what recognises its varying sizes."""
    try:
        if fold_params:
            graph = fx_to_ir(traced.gm, params={k: v.detach() for k, v in traced.state.items()}, sizes=sizes)
            param_inputs = {}
        else:
            graph = fx_to_ir(traced.gm, sizes=sizes)
            param_inputs = {k: v.detach() for k, v in traced.state.items()}
    except EqiforgeError:
        raise
    except Exception as err:  # a converter bug, not the user's: say where it happened
        raise EqiforgeError(f"capturing {name}: converting the graph {traced.path} traced to the IR failed: "
                            f"{type(err).__name__}: {err}") from err
    graph.symbolic = lifter
    return mark_structured_masks(fold_constant_externs(graph)), param_inputs


def _as_module(fn_or_module) -> torch.nn.Module:
    """Modules as they are; a function becomes a module whose ``forward`` is the function itself (so its
    parameter names name the inputs; builtins such as ``torch.sin`` have no signature and get ``*args``)."""
    if isinstance(fn_or_module, torch.nn.Module):
        return fn_or_module
    if not callable(fn_or_module):
        raise EqiforgeError(f"expected an nn.Module or a function, got {type(fn_or_module).__name__}")
    try:
        inspect.signature(fn_or_module)
        forward = fn_or_module
    except (TypeError, ValueError):
        def forward(*args):
            return fn_or_module(*args)
    module = torch.nn.Module()
    module.forward = forward
    return module


def _name(fn_or_module) -> str:
    if isinstance(fn_or_module, torch.nn.Module):
        return type(fn_or_module).__name__
    return getattr(fn_or_module, "__qualname__", repr(fn_or_module)).split("<locals>.")[-1]


class _OutSpec:
    """Where :class:`_Flat` records the structure of the output it returned."""

    spec: pytree.TreeSpec | None = None


class _Flat(torch.nn.Module):
    """The program as a function of the call's tensor leaves, returning its output's tensor leaves; it
    records the output's structure while traced (outside the module: torch.export restores its attributes)."""

    def __init__(self, program: torch.nn.Module, call: CallSpec):
        super().__init__()
        self.program, self.call = program, call
        self.outputs = _OutSpec()

    @property
    def out_spec(self) -> pytree.TreeSpec:
        return self.outputs.spec

    def forward(self, *tensors):
        args, kwargs = self.call.rebuild(tensors)
        leaves, self.outputs.spec = pytree.tree_flatten(self.program(*args, **kwargs))
        unknown = [leaf for leaf in leaves if not isinstance(leaf, torch.Tensor)]
        if unknown:
            raise EqiforgeError(
                f"the program returns a {type(unknown[0]).__name__} among its outputs, which EqiForge cannot see "
                "into: return tensors or containers of them (tuples, lists, dicts, and classes registered with "
                "torch.utils._pytree.register_pytree_node, as transformers' ModelOutput and caches are), or wrap "
                "the program to return only its tensors")
        return tuple(leaves)


# --------------------------------------------------------------------------------------------- tracing

@dataclass
class _Traced:
    """A core-ATen graph of the flat program, from any capture path."""

    gm: fx.GraphModule
    state: dict[str, torch.Tensor]  # placeholder -> parameter, buffer or lifted constant
    state_names: dict[str, str]  # placeholder -> its name in the plan (``p_layers_0_weight``)
    user: list[str]  # the placeholders of the call's tensor leaves, in order
    mutated: list[str]
    written: list[WrittenCall]
    path: str
    fallback: str = ""  # why earlier paths failed and which one captured the program ("": the first did)

    def rename(self, input_names: list[str]) -> list[str]:
        """Name the placeholders after what they hold (the same names on every path); the IR input names."""
        nodes = {n.name: n for n in self.gm.graph.nodes if n.op == "placeholder"}
        for old, new in self.state_names.items():
            nodes[old]._rename(new)
        for old, new in zip(self.user, input_names):
            nodes[old]._rename(new)
        self.state = {nodes[k].name: v for k, v in self.state.items()}
        self.gm.recompile()
        return [nodes[k].name for k in self.user]


def _trace(flat: _Flat, inputs: tuple, name: str) -> _Traced:
    """The first capture path that succeeds; an EqiforgeError naming each path, its stage and cause if none."""
    failures: list[_StageFailed] = []
    for path in (_by_export, _by_aot, _by_dynamo):
        try:
            traced = path(flat, inputs, failures)
        except _StageFailed as failed:
            failures.append(failed)
            continue
        if failures:
            traced.fallback = "; ".join([f.describe() for f in failures] + [f"captured by {traced.path}"])
        return traced
    hint = CONTROL_FLOW_HINT if any(_data_dependent(f.error) for f in failures) else (
        "check that the program runs eagerly with the example inputs")
    tried = "\n".join(f"  - {f.describe()}" for f in failures)
    raise EqiforgeError(f"EqiForge could not capture {name} (stage: capture); every capture path failed:\n{tried}\n"
                        f"Hint: {hint}") from failures[0].error


class _StageFailed(Exception):
    """A capture path failed at one of its stages (tracing, decomposition) with a torch error."""

    def __init__(self, path: str, stage: str, error: Exception, written=()):
        super().__init__(path, stage, error)
        self.path, self.stage, self.error, self.written = path, stage, error, list(written)

    def describe(self) -> str:
        text = str(self.error).strip()
        return (f"{self.path} could not {self.stage}: {type(self.error).__name__}: "
                f"{text.splitlines()[0] if text else ''}")


def _data_dependent(err: BaseException | None) -> bool:
    seen = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, DATA_DEPENDENT):
            return True
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return False


def _run_stage(path: str, stage: str, fn, written=()):
    """``fn()``; a torch error becomes a _StageFailed naming the path and stage (EqiforgeErrors pass)."""
    try:
        with warnings.catch_warnings():  # torch's own deprecation notices, not the user's concern
            warnings.simplefilter("ignore", FutureWarning)
            return fn()
    except EqiforgeError:
        raise  # the program's own fault, said in EqiForge's words (an output it cannot see into)
    except Exception as err:  # torch raises many types here: UserError, GuardOnDataDependent..., ValueError
        raise _StageFailed(path, stage, err, written) from err


def decomposition_table() -> dict:
    """Core-ATen decompositions, but for the composites the IR has whole (``aten.KEEP_WHOLE``: a
    matrix-vector product stays one, so the algebra sees a product, not a multiply and a sum)."""
    table = core_aten_decompositions()
    for op in aten.KEEP_WHOLE:
        table.pop(op, None)
    return table


def _state_name(kind: InputKind, fqn: str) -> str:
    """``p_layers_0_weight`` for the parameter ``layers.0.weight`` (torch.export's naming, without _Flat's)."""
    return f"{STATE_PREFIX[kind]}_{re.sub(r'[^0-9a-zA-Z_]', '_', fqn.removeprefix('program.'))}"


#: a graph that threads effect tokens orders side-effecting calls (linalg.inv/solve/cholesky check their
#: input and raise): the IR has no call without a result, so such a program is not captured (said plainly)
EFFECTS_STAGE = "trace the program without effect tokens"
EFFECTS = ("the program calls an op with side effects (linalg.inv, solve and cholesky raise on singular input), "
           "which the IR cannot order; call it outside the optimized function")


def _by_export(flat: _Flat, inputs: tuple, _failures, dynamic_shapes=None) -> _Traced:
    path = "torch.export"
    exported = _run_stage(path, "trace the program", lambda: torch.export.export(
        flat, inputs, dynamic_shapes=dynamic_shapes, strict=False))
    written = written_calls(exported.graph_module)
    program = _run_stage(path, "decompose it to core ATen (run_decompositions)",
                         lambda: exported.run_decompositions(decomposition_table()), written)
    signature = program.graph_signature
    if any(spec.kind == InputKind.TOKEN for spec in signature.input_specs):
        raise _StageFailed(path, EFFECTS_STAGE, ValueError(EFFECTS), written)
    state, names = {}, {}
    for spec in signature.input_specs:
        if spec.kind in STATE_PREFIX:
            value = (program.state_dict[spec.target] if spec.target in program.state_dict
                     else program.constants[spec.target])
            if not isinstance(value, torch.Tensor):
                raise EqiforgeError(f"module state {spec.target!r} is a {type(value).__name__}, not a tensor")
            state[spec.arg.name], names[spec.arg.name] = value, _state_name(spec.kind, spec.target)
    user = [spec.arg.name for spec in signature.input_specs if spec.kind == InputKind.USER_INPUT]
    mutated = list(signature.buffers_to_mutate.values()) + list(signature.user_inputs_to_mutate.values())
    return _Traced(program.graph_module, state, names, user, mutated, written, path)


def _by_aot(flat: _Flat, inputs: tuple, failures) -> _Traced:
    path = "AOTAutograd (aot_export_module)"
    with torch.no_grad():  # inference: no joint graph, outputs need no grad
        gm, signature = _run_stage(path, "trace the program", lambda: aot_export_module(
            flat, list(inputs), trace_joint=False, decompositions=decomposition_table()))
    if getattr(signature, "input_tokens", None):
        raise _StageFailed(path, EFFECTS_STAGE, ValueError(EFFECTS))
    named = dict(flat.named_parameters(remove_duplicate=False)) | dict(flat.named_buffers(remove_duplicate=False))
    state, names = {}, {}
    for placeholder, target in signature.inputs_to_parameters.items():
        state[placeholder], names[placeholder] = named[target], _state_name(InputKind.PARAMETER, target)
    for placeholder, target in signature.inputs_to_buffers.items():
        state[placeholder], names[placeholder] = named[target], _state_name(InputKind.BUFFER, target)
    mutated = list(signature.buffers_to_mutate.values()) + list(signature.user_inputs_to_mutate.values())
    written = next((f.written for f in failures if f.written), [])  # the program as written, if export traced it
    return _Traced(gm, state, names, list(signature.user_inputs), mutated, written, path)


def _by_dynamo(flat: _Flat, inputs: tuple, failures) -> _Traced:
    path = "Dynamo (torch._dynamo graph capture)"
    graph = _run_stage(path, "capture the program as one graph (fullgraph=True)", lambda: one_graph(flat, inputs))
    try:  # Dynamo's graph reads the program's state as its own attributes, so it lowers as _Flat does
        traced = _by_aot(graph, inputs, failures)
    except _StageFailed as failed:
        raise _StageFailed(path, "lower its graph to core ATen (aot_export_module)", failed.error,
                           failed.written) from failed.error
    traced.path = path
    return traced
