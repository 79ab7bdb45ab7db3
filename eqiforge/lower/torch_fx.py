"""The torch backend: a Plan becomes an FX GraphModule of PyTorch calls that runs anywhere.

Each IR node becomes one call to its op-table implementation (re-formed composites: their native PyTorch
op, see eqiforge/native.py); parameters become buffers of the module;
scalar ``Fill`` operands of arithmetic become Python numbers (no tensor is materialised); each extern runs
once through a small submodule and its outputs are taken by index.
"""
from __future__ import annotations

import operator

import torch
import torch.fx as fx

from .. import native, ops
from ..ir import ExternCall, Graph, call_extern

#: binary ops that accept a Python scalar on either side
SCALAR_BINARY = {
    "Add": operator.add, "Sub": operator.sub, "Mul": operator.mul, "Div": operator.truediv,
    "Pow": operator.pow, "Eq": operator.eq, "Ne": operator.ne, "Lt": operator.lt, "Le": operator.le,
    "Gt": operator.gt, "Ge": operator.ge,
}


class ExternModule(torch.nn.Module):
    """Runs one extern PyTorch call; returns all its outputs as a tuple."""

    def __init__(self, ext: ExternCall):
        super().__init__()
        self.ext = ext

    def forward(self, *operands):
        return call_extern(self.ext, list(operands))

    def extra_repr(self) -> str:
        return self.ext.label


def _direct(g: fx.Graph, n, operands: list):
    """The node as a direct PyTorch call (no Python helper frame on the hot path), or None."""
    x = operands[0] if operands else None
    if n.op in ("Reshape", "Permute"):
        return g.call_function(torch.reshape if n.op == "Reshape" else torch.permute, (x, tuple(n.attrs[0])))
    if n.op == "Expand":
        return g.call_method("expand", (x, tuple(n.attrs[0])))
    if n.op == "Cast":
        return g.call_method("to", (x, ops.DTYPES[n.attrs[0]]))
    if n.op == "Slice":
        dim, start, end = n.attrs
        return g.call_function(torch.narrow, (x, dim, start, end - start))
    if n.op == "Concat":
        return g.call_function(torch.cat, (list(operands), n.attrs[0]))
    if n.op in REDUCTIONS:  # one dim as an int: PyTorch's list-of-dims path is measurably slower
        dims = n.attrs[0][0] if len(n.attrs[0]) == 1 else list(n.attrs[0])
        return g.call_function(REDUCTIONS[n.op], (x, dims), {"keepdim": True})
    if n.op == "GeluTanh":
        return g.call_function(torch.nn.functional.gelu, (x,), {"approximate": "tanh"})
    return None


REDUCTIONS = {"Sum": torch.sum, "Amax": torch.amax, "Amin": torch.amin}


def _scalar(graph: Graph, i: int):
    """The Python number of a Fill node, typed like its dtype (so int/bool tensors stay int/bool)."""
    n = graph.nodes[i]
    value = n.attrs[0]
    if n.dtype == "bool":
        return bool(value)
    if not torch.empty((), dtype=ops.DTYPES[n.dtype]).is_floating_point():
        return int(value)
    return value


def to_graph_module(graph: Graph, input_names: list[str], bound: dict[str, torch.Tensor] | None = None
                    ) -> fx.GraphModule:
    """Lower ``graph`` to a GraphModule taking tensors in ``input_names`` order; inputs named in ``bound``
    (live parameters, when constants are not folded) are read from those tensors instead."""
    root = torch.nn.Module()
    g = fx.Graph()
    env: dict[int, fx.Node] = {}
    placeholders = {name: g.placeholder(name) for name in input_names}
    for name, tensor in (bound or {}).items():
        root.register_buffer(f"live_{name}", tensor)
        placeholders[name] = g.get_attr(f"live_{name}")
    extern_calls: dict[str, fx.Node] = {}
    for i in graph.live_nodes():
        n = graph.nodes[i]
        op = ops.get(n.op)
        if n.op == "Input":
            env[i] = placeholders[n.attrs[0]]
        elif n.op == "Param":
            name = f"param_{n.attrs[0]}".replace(".", "_")
            root.register_buffer(name, graph.params[n.attrs[0]])
            env[i] = g.get_attr(name)
        elif n.op == "Fill":
            env[i] = g.call_function(torch.full, (n.shape, n.attrs[0]), {"dtype": ops.DTYPES[n.dtype]})
        elif n.op == "Extern":
            key = n.attrs[0]
            if key not in extern_calls:
                mod_name = f"extern_{len(extern_calls)}"
                root.add_module(mod_name, ExternModule(graph.externs[key]))
                extern_calls[key] = g.call_module(mod_name, tuple(env[j] for j in n.inputs))
            env[i] = g.call_function(operator.getitem, (extern_calls[key], n.attrs[1]))
        elif n.op in SCALAR_BINARY and any(graph.nodes[j].op == "Fill" for j in n.inputs):
            args = tuple(_scalar(graph, j) if graph.nodes[j].op == "Fill" else env[j] for j in n.inputs)
            if all(not isinstance(a, fx.Node) for a in args):
                args = (env[n.inputs[0]], args[1])
            env[i] = g.call_function(SCALAR_BINARY[n.op], args)
        elif (direct := _direct(g, n, [env[j] for j in n.inputs])) is not None:
            env[i] = direct
        else:
            operands = [env[j] for j in n.inputs]
            extras = (operands[op.arity:],) if op.variadic else ()
            shapes = [graph.nodes[j].shape for j in n.inputs]
            impl = native.CALLS[n.op] if native.is_native(n.op, n.attrs, shapes) else op.torch_impl
            env[i] = g.call_function(impl, tuple(operands[:op.arity]) + tuple(n.attrs) + extras)
    outs = [env[o] for o in graph.outputs]
    g.output(tuple(outs))
    for node in list(g.nodes):  # Fill nodes replaced by scalars everywhere are dead
        if node.op == "call_function" and node.target is torch.full and not node.users:
            g.erase_node(node)
    g.lint()
    return fx.GraphModule(root, g, class_name="EqiforgePlan")
