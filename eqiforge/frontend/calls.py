"""A call's arguments as a pytree: the one flattening of capture time and call time.

``(args, kwargs)`` are flattened by ``torch.utils._pytree``, so tuples, dicts, dataclasses and registered
classes (Hugging Face caches: :func:`register_transformers_pytrees`) open into their leaves. Tensor leaves are
the program's inputs; the other leaves (ints, bools, None, dtypes, ...) are constants of the call
(:class:`CallSpec`), so a call with another constant needs another plan.
"""
from __future__ import annotations

import inspect
import keyword
import re
import sys
from dataclasses import dataclass

import torch
from torch.utils import _pytree as pytree

from ..errors import EqiforgeError

#: non-tensor leaves a call may hold: traced as constants, so a call with another value needs another plan
CONSTANT_TYPES = (bool, int, float, str, type(None), torch.dtype, torch.device, torch.layout, torch.memory_format)


class _Tensor:
    """The marker of a tensor leaf in :attr:`CallSpec.constants`."""

    def __repr__(self) -> str:
        return "<tensor>"


TENSOR = _Tensor()


def flatten_call(args, kwargs) -> tuple[list, pytree.TreeSpec]:
    """The leaves and tree of a call's ``(args, kwargs)``: the one flattening of capture and call time."""
    return pytree.tree_flatten((tuple(args), dict(kwargs or {})))


@dataclass(frozen=True)
class CallSpec:
    """How the example call's arguments flatten: its tree, and per leaf its constant value or ``TENSOR``.
    The plan takes the tensor leaves alone, in leaf order."""

    tree: pytree.TreeSpec
    constants: tuple

    @classmethod
    def positional(cls, n: int) -> CallSpec:
        """``n`` positional tensors, nothing else (what a torch.compile graph takes)."""
        return cls(flatten_call([TENSOR] * n, {})[1], (TENSOR,) * n)

    @property
    def arity(self) -> int | None:
        """The number of arguments when the call is positional tensors alone (the fast path), else None."""
        return len(self.constants) if self == CallSpec.positional(len(self.constants)) else None

    def tensors(self, leaves: list, tree: pytree.TreeSpec) -> list[torch.Tensor] | None:
        """The tensor leaves of a call flattened to ``leaves, tree``; None when the call has another
        structure, another constant, or a non-tensor where the example had a tensor."""
        if tree != self.tree:
            return None
        tensors = []
        for leaf, constant in zip(leaves, self.constants):
            if constant is TENSOR:
                if not isinstance(leaf, torch.Tensor):
                    return None
                tensors.append(leaf)
            elif type(leaf) is not type(constant) or leaf != constant:
                return None
        return tensors

    def rebuild(self, tensors) -> tuple[tuple, dict]:
        """``(args, kwargs)`` of a call with these tensor leaves and the example's constants."""
        values = iter(tensors)
        leaves = [next(values) if c is TENSOR else c for c in self.constants]
        return pytree.tree_unflatten(leaves, self.tree)


def flat_call(module: torch.nn.Module, example_inputs, example_kwargs) -> tuple[CallSpec, tuple, list[str]]:
    """The example call's spec, its tensor leaves (unaliased) and a name per tensor leaf."""
    if not isinstance(example_inputs, (tuple, list)):
        raise EqiforgeError("example_inputs must be a tuple or list (one entry per positional argument), got "
                            f"{type(example_inputs).__name__}; keyword arguments go in example_kwargs (a dict)")
    if example_kwargs is not None and not isinstance(example_kwargs, dict):
        raise EqiforgeError(f"example_kwargs must be a dict of keyword arguments, got {type(example_kwargs).__name__}")
    kwargs = dict(example_kwargs or {})
    register_transformers_pytrees(module, (example_inputs, kwargs))
    leaves, tree = flatten_call(example_inputs, kwargs)
    arguments = [*zip(_positional_names(module, len(example_inputs)), example_inputs), *kwargs.items()]
    owners = [(name, len(inner), j) for name, value in arguments
              for inner in [pytree.tree_leaves(value)] for j in range(len(inner))]  # per leaf, in leaf order
    constants, tensors, names = [], [], []
    for leaf, (name, count, j) in zip(leaves, owners):
        if isinstance(leaf, torch.Tensor):
            constants.append(TENSOR)
            tensors.append(leaf)
            names.append(_identifier(name if count == 1 else f"{name}_{j}"))
        elif isinstance(leaf, CONSTANT_TYPES):
            constants.append(leaf)
        else:
            raise EqiforgeError(
                f"example input {name!r} is or holds a {type(leaf).__name__}, which EqiForge cannot see into: pass "
                "tensors, constants (int, float, bool, None, ...) or containers of them (tuples, lists, dicts, "
                "classes registered with torch.utils._pytree.register_pytree_node), and bind other arguments with "
                "functools.partial or a closure")
    return CallSpec(tree, tuple(constants)), _unaliased(tensors), _unique(names)


def register_transformers_pytrees(module: torch.nn.Module, example) -> None:
    """Hugging Face caches (``DynamicCache`` and the other ``Cache`` classes, model-specific ones included)
    as pytree nodes, with the flattening transformers ships for torch.export, so a cache in the inputs or
    outputs opens into its tensors and is rebuilt as a real cache. Only where transformers is already
    imported and the program holds one of its models or the call one of its objects."""
    if "transformers" not in sys.modules:
        return
    try:
        from transformers import PreTrainedModel
        from transformers.exporters.exporter_dynamo import register_cache_pytrees_for_model
    except ImportError:  # a transformers without them: a cache in the outputs is then _Flat's clear error
        return
    owners = {type(m): m for m in module.modules() if isinstance(m, PreTrainedModel)}
    owners.update({type(leaf): leaf for leaf in pytree.tree_leaves(example)
                   if type(leaf).__module__.startswith("transformers.")})
    for owner in owners.values():
        register_cache_pytrees_for_model(owner)  # registers every Cache class, and *Cache classes of its module


def _positional_names(module: torch.nn.Module, n: int) -> list[str]:
    """Names for the first ``n`` positional arguments: the forward's parameter names (``args_<i>`` past a
    ``*args`` or where there is no signature)."""
    try:
        params = list(inspect.signature(module.forward).parameters.values())
    except (TypeError, ValueError):
        params = []
    names = []
    for p in params:
        if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            break
        names.append(p.name)
    return (names + [f"args_{i}" for i in range(len(names), n)])[:n]


def _identifier(name: str) -> str:
    name = re.sub(r"\W", "_", name)
    return name if name.isidentifier() and not keyword.iskeyword(name) else f"in_{name}"


def _unique(names: list[str]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for n in names:
        seen[n] = seen.get(n, -1) + 1
        out.append(n if not seen[n] else f"{n}_{seen[n]}")
    return out


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
