"""Capture a PyTorch program (module, function or FX GraphModule) as an IR graph.

``torch.export`` (non-strict) traces the program at the given example inputs; its graph is decomposed to
core ATen (keeping whole the few composites the IR has as single ops, see ``aten.KEEP_WHOLE``) and converted
by :func:`fx_to_ir`. Shapes are specialised to the example inputs.

Parameters, buffers and lifted tensor constants become ``Param`` leaves when ``fold_params`` is true:
inference semantics, so the optimizer may fold them (precompute ``W1 @ W2``, say). The plan shares their
memory (no second copy of the weights); what it folded is computed once, so later changes to the module's
weights are only seen by the parts that were not folded: re-optimize after changing weights. With
``fold_params=False`` they stay graph inputs, and :attr:`Captured.param_inputs` holds the tensors to feed
them at call time.
"""
from __future__ import annotations

import inspect
import warnings
from dataclasses import dataclass, field

import torch
from torch.export.graph_signature import InputKind
from torch.utils import _pytree as pytree

from ..errors import EqiforgeError
from ..ir import Graph
from . import aten
from .as_written import WrittenCall, written_calls
from .constants import fold_constant_externs
from .fx_to_ir import fx_to_ir
from .masks import mark_causal_masks

STATE_KINDS = (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR)


@dataclass
class Captured:
    """A captured program: its IR graph and what is needed to call it like the original."""

    graph: Graph
    input_names: list[str]  # IR input names of the user's (flat, positional) inputs, in call order
    out_spec: pytree.TreeSpec  # rebuilds the user's output structure from ``graph.outputs``
    module: torch.nn.Module | None  # the source module; None for a plain function
    param_inputs: dict[str, torch.Tensor] = field(default_factory=dict)  # fold_params=False: IR input -> tensor
    written: list[WrittenCall] = field(default_factory=list)  # the program's calls before decomposition

    def feeds(self, *inputs: torch.Tensor) -> dict[str, torch.Tensor]:
        """IR inputs by name for a call with ``inputs`` (the weights included when they are not folded)."""
        if len(inputs) != len(self.input_names):
            raise EqiforgeError(f"expected {len(self.input_names)} inputs {self.input_names}, got {len(inputs)}")
        return {**self.param_inputs, **dict(zip(self.input_names, inputs))}

    def unflatten(self, outputs: list[torch.Tensor]):
        """The user's output structure (tensor, tuple, dict, ...) from the flat graph outputs."""
        return pytree.tree_unflatten(list(outputs), self.out_spec)


def capture(fn_or_module, example_inputs, *, fold_params: bool = True) -> Captured:
    """Trace ``fn_or_module`` (an ``nn.Module``, a ``torch.fx.GraphModule`` or a plain function taking
    tensors) at ``example_inputs`` (a tuple or list of tensors) and convert it to the IR."""
    module = _as_module(fn_or_module)
    inputs = _check_inputs(example_inputs)
    exported = _export(module, inputs, _name(fn_or_module))
    program = _decompose(exported)
    signature = program.graph_signature
    if signature.buffers_to_mutate or signature.user_inputs_to_mutate:
        mutated = list(signature.buffers_to_mutate.values()) + list(signature.user_inputs_to_mutate.values())
        raise EqiforgeError(f"the program updates {mutated} in place; EqiForge optimizes pure programs. For a "
                            "module in training mode (BatchNorm statistics, ...) call .eval() first, or return "
                            "new tensors instead of mutating inputs")
    state = {spec.arg.name: _state_value(program, spec.target)
             for spec in signature.input_specs if spec.kind in STATE_KINDS}
    if fold_params:
        graph = fx_to_ir(program.graph_module, params={k: v.detach() for k, v in state.items()})  # shared memory
        param_inputs = {}
    else:
        graph = fx_to_ir(program.graph_module)
        param_inputs = {k: v.detach() for k, v in state.items()}
    graph = mark_causal_masks(fold_constant_externs(graph))
    input_names = [spec.arg.name for spec in signature.input_specs if spec.kind == InputKind.USER_INPUT]
    source = fn_or_module if isinstance(fn_or_module, torch.nn.Module) else None
    return Captured(graph, input_names, program.call_spec.out_spec, source, param_inputs,
                    written_calls(exported.graph_module))


def _as_module(fn_or_module) -> torch.nn.Module:
    """Modules as they are; a function becomes a module whose ``forward`` is the function itself, so that
    torch.export names the graph inputs after the function's parameters (builtins such as ``torch.sin``
    have no signature and get a ``*args`` wrapper)."""
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


def _check_inputs(example_inputs) -> tuple[torch.Tensor, ...]:
    if not isinstance(example_inputs, (tuple, list)):
        raise EqiforgeError("example_inputs must be a tuple or list of tensors (one per positional argument), "
                            f"got {type(example_inputs).__name__}")
    for i, x in enumerate(example_inputs):
        if not isinstance(x, torch.Tensor):
            raise EqiforgeError(f"example_inputs[{i}] is of type {type(x).__name__}; EqiForge programs take tensors "
                                "only (bind other arguments with functools.partial or a closure)")
    return _unaliased(example_inputs)


def _unaliased(inputs) -> tuple[torch.Tensor, ...]:
    """The inputs, each sharing memory with no earlier one (those are copied): torch.export traces inputs
    that alias as one tensor, so f(t, t, t) would become a program of one input and compute f(v, v, v) for
    any (q, k, v) it is later called with."""
    seen: set[int] = set()
    out = []
    for x in inputs:
        storage = x.untyped_storage().data_ptr() if x.numel() else None
        out.append(x.clone() if storage in seen else x)
        seen.add(storage)
    return tuple(out)


def _name(fn_or_module) -> str:
    if isinstance(fn_or_module, torch.nn.Module):
        return type(fn_or_module).__name__
    return getattr(fn_or_module, "__qualname__", repr(fn_or_module))


def _export(module: torch.nn.Module, inputs: tuple, name: str) -> torch.export.ExportedProgram:
    """torch.export; tracing failures become an EqiforgeError naming the cause."""
    try:
        with warnings.catch_warnings():  # torch's own deprecation notices, not the user's concern
            warnings.simplefilter("ignore", FutureWarning)
            program = torch.export.export(module, inputs, strict=False)
    except Exception as err:  # torch raises many types here: UserError, GuardOnDataDependent..., TypeError
        cause = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise EqiforgeError(
            f"torch.export could not trace {name}: {type(err).__name__}: {cause}\nEqiForge captures programs "
            "with torch.export at static shapes: replace Python control flow that depends on tensor values "
            "(if x.sum() > 0, .item(), .tolist()) by torch.where or torch.cond, and check that the example "
            "inputs are valid for the program") from err
    return program


def _decompose(program: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    """Core-ATen decompositions, but for the composites the IR has whole (``aten.KEEP_WHOLE``)."""
    table = torch.export.default_decompositions()
    for op in aten.KEEP_WHOLE:
        table.pop(op, None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return program.run_decompositions(table)


def _state_value(program: torch.export.ExportedProgram, target: str) -> torch.Tensor:
    value = program.state_dict[target] if target in program.state_dict else program.constants[target]
    if not isinstance(value, torch.Tensor):
        raise EqiforgeError(f"module state {target!r} is a {type(value).__name__}, not a tensor")
    return value

