"""Core-ATen FX graph -> IR graph.

One pass over the FX nodes in order. Placeholders named in ``params`` become ``Param`` leaves (constants the
optimizer may fold), the others ``Input`` leaves named after the placeholder (or as the caller says). Calls
go through ``aten.TABLE``; an op missing from it, or one a builder declines, becomes an ``Extern`` that
replays the original call in PyTorch, so an unknown op never stops optimization. Outputs are flattened.

Shapes and dtypes come from each node's ``meta['val']`` (what torch.export, aot_autograd and make_fx
record); a graph without them is shape-propagated with fake tensors first. The IR's shapes are concrete: a
graph with symbolic sizes is converted at values of its symbols (``sizes``, frontend/symbolic.py), each
size the graph computes read at them; without ``sizes``, symbolic or data-dependent shapes are a clear
error rather than a silent guess.
"""
from __future__ import annotations

import operator
from typing import Any, Mapping, Sequence

import torch
import torch.fx as fx
from torch._subclasses.fake_tensor import unset_fake_temporarily
from torch.fx.passes.fake_tensor_prop import FakeTensorProp
from torch.utils import _pytree as pytree

from .. import ops
from ..errors import EqiforgeError
from ..ir import ExternCall, Graph, TensorArg
from . import aten
from .aten import Meta, Ref
from .symbolic import SYMBOLIC, SizeEnv

STATIC_SHAPES_HINT = (
    "EqiForge needs static shapes; keep data-dependent ops (nonzero, boolean-mask indexing, unique, .item(), "
    ".tolist()) outside the optimized program, or use shape-preserving forms such as torch.where")


def fx_to_ir(gm: fx.GraphModule, input_names: Sequence[str] | None = None,
             params: Mapping[str, torch.Tensor] | None = None, *,
             example_inputs: Sequence[torch.Tensor] | None = None, sizes: SizeEnv | None = None) -> Graph:
    """Convert ``gm`` (core-ATen ops, ``meta['val']`` on its nodes) to an IR graph.

    ``params`` maps placeholder names to constant tensors (weights, buffers); the remaining placeholders
    become graph inputs, named ``input_names`` in placeholder order (default: the placeholder names).
    ``example_inputs`` (values of those remaining placeholders, in order) are needed only when the nodes
    lack ``meta['val']``. ``sizes`` gives the values of the graph's symbols, if it has any.
    """
    params = dict(params or {})
    free = [n.name for n in gm.graph.nodes if n.op == "placeholder" and n.name not in params
            and not (sizes is not None and isinstance(n.meta.get("val"), SYMBOLIC))]  # a size input: read at sizes
    names = _check_names(list(input_names) if input_names is not None else free, free, set(params))
    if not _has_meta(gm):
        if example_inputs is None:
            raise EqiforgeError("the FX graph has no meta['val'] on its nodes; pass example_inputs so its "
                                "shapes can be propagated, or capture the program with eqiforge.frontend.capture")
        _propagate_meta(gm, params, example_inputs)
    with unset_fake_temporarily():  # a torch.compile backend calls us under its fake mode; we want real tensors
        return _Converter(gm, params, dict(zip(free, names)), sizes).run()


def _check_names(names: list[str], free: list[str], param_names: set[str]) -> list[str]:
    """IR input names must be unique identifiers, one per non-parameter placeholder, apart from params."""
    if len(names) != len(free):
        raise EqiforgeError(f"got {len(names)} input names for the {len(free)} non-parameter inputs {free}")
    bad = [n for n in names if not (isinstance(n, str) and n.isidentifier())]
    if bad or len(set(names)) != len(names) or set(names) & param_names:
        raise EqiforgeError(f"input names must be unique Python identifiers, distinct from the parameter names, "
                            f"got {names}")
    return names


def _has_meta(gm: fx.GraphModule) -> bool:
    return all("val" in n.meta for n in gm.graph.nodes
               if n.op == "placeholder" or (n.op == "call_function" and n.users))


def _propagate_meta(gm: fx.GraphModule, params: dict, example_inputs: Sequence[torch.Tensor]) -> None:
    """Record ``meta['val']`` on every node by running the graph on fake tensors (no real compute)."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    free = [n.name for n in placeholders if n.name not in params]
    if len(free) != len(example_inputs):
        raise EqiforgeError(f"the FX graph has {len(free)} non-parameter inputs {free} "
                            f"but {len(example_inputs)} example inputs were given")
    values = iter(example_inputs)
    FakeTensorProp(gm).propagate(*[params[n.name] if n.name in params else next(values) for n in placeholders])


def bind(target: torch._ops.OpOverload, args: tuple, kwargs: dict) -> dict[str, Any]:
    """Arguments by schema name, defaults filled in: builders read ``a["dim"]`` whatever the call spelled."""
    bound = {}
    for i, arg in enumerate(target._schema.arguments):
        if i < len(args) and not arg.kwarg_only:
            bound[arg.name] = args[i]
        elif arg.name in kwargs:
            bound[arg.name] = kwargs[arg.name]
        else:
            bound[arg.name] = arg.default_value if arg.has_default_value() else None
    return bound


def _meta(node: fx.Node, val, sizes: SizeEnv | None = None) -> Any:
    """``Meta`` for a tensor value (its sizes read at ``sizes``), a tuple of them for a sequence, None for
    anything else."""
    if isinstance(val, torch.Tensor):
        shape = tuple(val.shape) if sizes is None else tuple(sizes.concrete(d) for d in val.shape)
        if not all(isinstance(d, int) for d in shape):
            raise EqiforgeError(f"data-dependent or dynamic shape {tuple(val.shape)} at node {node.name!r} "
                                f"({node.target}). {STATIC_SHAPES_HINT}.")
        if val.dtype not in ops.DTYPE_NAMES:
            raise EqiforgeError(f"node {node.name!r} ({node.target}) has dtype {val.dtype}, which the IR does not "
                                f"support (supported: {sorted(ops.DTYPES)})")
        return Meta(shape, ops.DTYPE_NAMES[val.dtype])
    if isinstance(val, (list, tuple)):
        return tuple(_meta(node, v, sizes) for v in val)
    return None


def _metas(out) -> list[Meta]:
    return [out] if isinstance(out, Meta) else [m for m in out if isinstance(m, Meta)]


def _read(node: fx.Node, out) -> list:
    """The outputs of a call that the graph reads: all of a one-output call, the getitems of a multi-output
    one (inference batch norm's empty saved statistics are not, nor max-pool's indices in most programs)."""
    if not isinstance(out, tuple):
        return [out]
    read = {u.args[1] for u in node.users if u.target is operator.getitem}
    return [v for k, v in enumerate(out) if k in read or len(read) < len(node.users)]


class _Converter:
    """Holds the FX-node -> IR-value environment while walking one graph."""

    def __init__(self, gm: fx.GraphModule, params: dict[str, torch.Tensor], input_names: dict[str, str],
                 sizes: SizeEnv | None = None):
        self.gm, self.sizes = gm, sizes
        self.params = params
        self.input_names = input_names  # placeholder name -> IR input name
        self.graph = Graph()
        self.builder = aten.Builder(self.graph)
        self.env: dict[fx.Node, Any] = {}  # Ref, tuple of Ref | None (multi-output), or a non-tensor object

    def run(self) -> Graph:
        for node in self.gm.graph.nodes:
            handler = getattr(self, f"_{node.op}", None)
            if handler is None:
                raise EqiforgeError(f"FX node {node.name!r} is a {node.op}; fx_to_ir takes ATen-level graphs "
                                    "(from torch.export, aot_autograd or make_fx), or use frontend.capture()")
            self.env[node] = handler(node)
        return self.graph

    # ------------------------------------------------------------------------------------------- leaves
    def _placeholder(self, node: fx.Node) -> Ref:
        if self.sizes is not None and isinstance(node.meta.get("val"), SYMBOLIC):
            return self.sizes.concrete(node.meta["val"])  # a size Dynamo passes: its value at the hints
        meta = _meta(node, node.meta["val"], self.sizes)
        if not isinstance(meta, Meta):
            raise EqiforgeError(f"input {node.name!r} is not a tensor ({node.meta['val']!r}). {STATIC_SHAPES_HINT}.")
        if node.name in self.params:
            value = self.params[node.name]
            if tuple(value.shape) != meta.shape or ops.DTYPE_NAMES.get(value.dtype) != meta.dtype:
                raise EqiforgeError(f"parameter {node.name!r} is {value.dtype}{list(value.shape)}, the graph "
                                    f"expects {meta.dtype}{list(meta.shape)}")
            return self.builder.ref(self.graph.param(node.name, value))
        return self.builder.ref(self.graph.input(self.input_names[node.name], meta.shape, meta.dtype))

    def _get_attr(self, node: fx.Node) -> Any:
        """A tensor attribute is a constant (Param); anything else (a subgraph of torch.cond, ...) is passed
        through as a plain object to the Extern that uses it."""
        value = operator.attrgetter(node.target)(self.gm)
        if isinstance(value, torch.Tensor):
            return self.builder.ref(self.graph.param(node.name, value.detach()))
        return value

    def _output(self, node: fx.Node) -> None:
        for k, leaf in enumerate(pytree.tree_leaves(node.args[0])):
            value = self.env.get(leaf) if isinstance(leaf, fx.Node) else leaf
            if not isinstance(value, Ref):
                raise EqiforgeError(f"output {k} ({leaf}) is not a tensor; EqiForge programs return tensors only")
            self.graph.outputs.append(value.id)

    # -------------------------------------------------------------------------------------------- calls
    def _call_function(self, node: fx.Node) -> Any:
        if node.target is operator.getitem and isinstance(self.env.get(node.args[0]), tuple):
            return self.env[node.args[0]][node.args[1]]
        val = node.meta.get("val")
        if self.sizes is not None and isinstance(val, SYMBOLIC):
            return self.sizes.concrete(val)  # a size computation (sym_size, s0 + 1): its value at the hints
        out = _meta(node, val, self.sizes)
        if out is None:
            if node.users:
                raise EqiforgeError(f"node {node.name!r} ({node.target}) produces a non-tensor value "
                                    f"{node.meta.get('val')!r} that other nodes use. {STATIC_SHAPES_HINT}.")
            return None  # a runtime assertion or similar check: nothing to compute
        builder = aten.lookup(node.target)
        if builder is not None:
            args = bind(node.target, *fx.node.map_arg((node.args, node.kwargs), lambda a: self._operand(node, a)))
            refs = [v for v in pytree.tree_leaves(args) if isinstance(v, Ref)]
            refs = [] if getattr(builder, "drops_empty_operands", False) else refs
            if all(0 not in m.shape for m in _metas(_read(node, out)) + refs):  # the IR has no empty tensors
                try:
                    value = builder(self.builder, args, out)
                    if not any(v is None for v in _read(node, value)):  # a builder may skip outputs none reads
                        return value
                except aten.Unsupported:
                    pass
        return self._extern(node, out)

    def _operand(self, node: fx.Node, arg: fx.Node):
        """A tensor operand's Ref, or the value of a size the graph computed."""
        value = self.env[arg]
        return value if self.sizes is not None and isinstance(value, (int, float, bool)) else self._tensor(node, arg)

    def _tensor(self, node: fx.Node, arg: fx.Node) -> Ref:
        value = self.env[arg]
        if not isinstance(value, Ref):
            raise EqiforgeError(f"node {node.name!r} ({node.target}) uses {arg.name!r}, which is not a tensor")
        return value

    def _extern(self, node: fx.Node, out) -> Any:
        """Register the original call under the node's (unique) name; one Extern IR node per tensor output."""
        operands: list[Ref] = []

        def substitute(arg: fx.Node):
            if arg.op == "get_attr" and not isinstance(self.env[arg], Ref):
                return self.env[arg]  # a non-tensor object (e.g. a torch.cond branch), passed as is
            if self.sizes is not None and isinstance(self.env[arg], (int, float, bool)):
                return self.env[arg]  # a size, at the hints
            value = self._tensor(node, arg)
            if value not in operands:
                operands.append(value)
            return TensorArg(operands.index(value))

        args, kwargs = fx.node.map_arg((node.args, dict(node.kwargs)), substitute)
        self.graph.externs[node.name] = ExternCall(node.target, args, kwargs, label=str(node.target))
        ids = tuple(r.id for r in operands)

        def output(index: int, meta: Meta) -> Ref:
            return self.builder.ref(self.graph.add("Extern", ids, (node.name, index),
                                                   shape=meta.shape, dtype=meta.dtype))
        if isinstance(out, Meta):
            return output(0, out)
        return tuple(output(i, m) if isinstance(m, Meta) else None for i, m in enumerate(out))
