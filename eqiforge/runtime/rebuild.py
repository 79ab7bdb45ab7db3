"""A plan's outputs put back in the program's output structure, at a decoding step's pace.

``pytree.tree_unflatten`` rebuilds a structure node by node through each node type's unflatten function; a
Hugging Face model's output (a ModelOutput holding a cache object) took ~80 us a decoding step that way
(transformers' cache unflatten resolves every class of its state by import path, and ModelOutput's
constructor runs its dataclass checks), a fifth of a small model's step. ``rebuilder(spec)`` unflattens once
with placeholder leaves and keeps the object graph as a template: a call copies the template's containers
and objects (``cls.__new__`` and their state, as those unflatten functions do), shares what is immutable,
and puts the leaves where the placeholders were. A template is used only where flattening its copy gives the
same spec and the leaves back in order (the pytree's own check that the copy is the structure); elsewhere, and
for a node holding anything else, the node's own unflatten runs.
"""
from __future__ import annotations

import collections
import enum
import types
from collections.abc import Callable

import torch
import torch.utils._pytree as pytree

Build = Callable[[list], object]  # the leaves of a call -> the structure (or a part of it)

_SHARED = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device, torch.Size, torch.layout,
           type, enum.Enum, types.FunctionType, types.BuiltinFunctionType)
_BUILTIN_MAPS = (collections.OrderedDict, collections.defaultdict, dict)


class _Unclonable(Exception):
    """A template holds an object whose copy this module cannot make."""


def rebuilder(spec: pytree.TreeSpec) -> Build:
    """A function of a call's output leaves (a list, in ``spec``'s order) that returns the structure
    ``pytree.tree_unflatten(leaves, spec)`` would."""
    return _node(spec, iter(range(spec.num_leaves)))


def _node(spec: pytree.TreeSpec, positions) -> Build:
    if spec.is_leaf():
        i = next(positions)
        return lambda leaves: leaves[i]
    children = [_node(child, positions) for child in spec.children_specs]
    if spec.type in (tuple, list):
        kind = spec.type
        return lambda leaves: kind([child(leaves) for child in children])
    if spec.type is dict:
        keys = list(spec.context)
        return lambda leaves: {k: child(leaves) for k, child in zip(keys, children)}
    return _templated(spec, children) or _unflattened(spec, children)


def _unflattened(spec: pytree.TreeSpec, children: list[Build]) -> Build:
    """The node built by its own unflatten function from its children."""
    unflatten, context = pytree.SUPPORTED_NODES[spec.type].unflatten_fn, spec.context
    return lambda leaves: unflatten([child(leaves) for child in children], context)


def _templated(spec: pytree.TreeSpec, children: list[Build]) -> Build | None:
    """The node built by copying a template of it, or None where the template cannot be copied or its copy does
    not flatten to ``spec`` with the leaves in their places."""
    slots = [torch.empty(0) for _ in children]  # placeholders: distinct tensors, as the node's leaves are
    node = pytree.TreeSpec(spec.type, spec.context, [pytree.LeafSpec() for _ in children])
    try:
        template = pytree.tree_unflatten(slots, node)
        copy = _copier(template, {id(s): i for i, s in enumerate(slots)})
        copied = copy(slots, {})
        leaves, again = pytree.tree_flatten(copied)
    except Exception:  # noqa: BLE001 - a node this module cannot copy is unflattened as pytree does
        return None
    if again != node or len(leaves) != len(slots) or any(a is not b for a, b in zip(leaves, slots)):
        return None
    return lambda leaves: copy([child(leaves) for child in children], {})


Copy = Callable[[list, dict], object]  # (the node's children, what this call copied so far by template id) -> copy


def _copier(value, slots: dict[int, int]) -> Copy:
    """A function of the node's children that copies ``value`` with each placeholder replaced by its child; an
    object the template holds in two places (a ModelOutput's item and attribute) is copied once per call."""
    if id(value) in slots:
        i = slots[id(value)]
        return lambda kids, made: kids[i]
    if isinstance(value, _SHARED):
        return lambda kids, made: value
    if isinstance(value, torch.Tensor):
        raise _Unclonable("a tensor that is not a leaf")
    kind, key = type(value), id(value)
    if kind in (list, tuple) or isinstance(value, tuple) and hasattr(kind, "_fields"):  # a namedtuple too
        items = [_copier(v, slots) for v in value]
        spread = kind is not list and kind is not tuple

        def copy_sequence(kids, made):
            if key not in made:
                copied = [item(kids, made) for item in items]
                made[key] = kind(*copied) if spread else kind(copied)
            return made[key]
        return copy_sequence
    if isinstance(value, dict) or hasattr(value, "__dict__"):
        return _object_copier(value, slots)
    raise _Unclonable(kind.__name__)


def _object_copier(value, slots: dict[int, int]) -> Copy:
    """A dict, or an object copied as unflatten functions make one: ``cls.__new__(cls)`` and its state set
    directly (no ``__init__``, no ``__setattr__`` hooks), its items too for a dict subclass."""
    kind, key = type(value), id(value)
    if getattr(kind, "__slots__", None) or kind.__new__ not in (object.__new__, *(m.__new__ for m in _BUILTIN_MAPS)):
        raise _Unclonable(kind.__name__)
    base = next((m for m in kind.__mro__ if m in _BUILTIN_MAPS), None)
    if base is collections.defaultdict:
        raise _Unclonable(kind.__name__)
    entries = [(k, _copier(v, slots)) for k, v in value.items()] if base else []
    state = [(k, _copier(v, slots)) for k, v in vars(value).items()] if hasattr(value, "__dict__") else []
    set_item = base.__setitem__ if base else None

    def copy(kids, made):
        if key in made:
            return made[key]
        new = made[key] = kind.__new__(kind)
        for k, entry in entries:
            set_item(new, k, entry(kids, made))
        if state:
            new.__dict__.update({k: entry(kids, made) for k, entry in state})
        return new
    return copy
