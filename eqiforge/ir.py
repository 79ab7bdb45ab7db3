"""The tensor-graph IR: a DAG of op-table nodes with static N-d shapes and dtypes.

Every stage speaks it: the frontend builds it, the e-graph encodes it, extraction returns one (the plan's
algebraic form), and the torch backend runs it. Nodes are hash-consed, so equal sub-expressions are one node.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from . import dims, ops
from .ops import fused


@dataclass(frozen=True)
class Node:
    """One op application. ``inputs`` are node ids of the same graph."""

    op: str
    inputs: tuple[int, ...]
    attrs: tuple
    shape: ops.Shape
    dtype: str

    @property
    def a(self):
        """The attributes by name (``node.a.causal``), as the op table names them."""
        return ops.get(self.op).named(self.attrs)


@dataclass
class ExternCall:
    """A PyTorch call kept as a black box: ``fn(*args, **kwargs)`` where ``TensorArg(i)`` marks operand i."""

    fn: Callable
    args: tuple
    kwargs: dict
    label: str

    @property
    def deterministic(self) -> bool:
        """An ATen op that draws no random numbers: on constants it may be evaluated once, ahead of time."""
        return isinstance(self.fn, torch._ops.OpOverload) and torch.Tag.nondeterministic_seeded not in self.fn.tags


@dataclass(frozen=True)
class TensorArg:
    index: int


class IRError(ValueError):
    """An IR graph that violates its invariants (a bug in whatever built it)."""


@dataclass
class Graph:
    """Nodes in topological order, named inputs, parameters (constant tensors) and outputs."""

    nodes: list[Node] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)
    params: dict[str, torch.Tensor] = field(default_factory=dict)
    externs: dict[str, ExternCall] = field(default_factory=dict)
    # what only values show, for the e-graph: node id -> relations of rules/schema.egg that hold for it (a
    # constant causal mask: frontend/masks.py), each a name or a (name, integer arguments...) tuple; the
    # encoder states them. A rebuilt graph starts without.
    facts: dict[int, tuple[str | tuple, ...]] = field(default_factory=dict)
    # a program with symbolic dims, converted at size hints: what recognises the sizes that change from call
    # to call (eqiforge/dims.py); a constant of such a size is never folded: its value is the call's
    symbolic: dims.Lifter | None = None
    _index: dict[Node, int] = field(default_factory=dict, repr=False)

    # ------------------------------------------------------------------------------------------ building
    def add(self, op: str, inputs: tuple[int, ...] = (), attrs: tuple = (), *,
            shape: ops.Shape | None = None, dtype: str | None = None) -> int:
        """Add (or find) a node; shape and dtype are inferred unless given (leaves and externs)."""
        inputs = tuple(inputs)
        if shape is None:
            shape = ops.infer_shape(op, [self.nodes[i].shape for i in inputs], attrs)
        if dtype is None:
            dtype = ops.infer_dtype(op, [self.nodes[i].dtype for i in inputs], attrs)
        node = Node(op, inputs, tuple(attrs), tuple(int(d) for d in shape), dtype)
        if node not in self._index:
            self._index[node] = len(self.nodes)
            self.nodes.append(node)
        return self._index[node]

    def input(self, name: str, shape, dtype: str) -> int:
        return self.add("Input", (), (name,), shape=shape, dtype=dtype)

    def param(self, name: str, value: torch.Tensor) -> int:
        self.params[name] = value
        return self.add("Param", (), (name,), shape=tuple(value.shape), dtype=ops.DTYPE_NAMES[value.dtype])

    def fill(self, value: float, shape, dtype: str) -> int:
        return self.add("Fill", (), (float(value), tuple(shape), dtype))

    # ------------------------------------------------------------------------------------------ queries
    @property
    def input_names(self) -> list[str]:
        return [n.attrs[0] for n in self.nodes if n.op == "Input"]

    def varies(self, n: Node) -> bool:
        """Whether a node's shape, or a leaf's value, holds a symbolic size (one that changes from call to
        call): a tensor of the sequence's length, a Fill of the cache's length, an ``arange`` up to it."""
        if self.symbolic is None:
            return False
        lift = self.symbolic.lift
        if dims.is_symbolic(lift(tuple(n.shape))) or (n.op == "Fill" and dims.is_symbolic(lift(n.attrs[:2]))):
            return True
        if n.op == "Extern":
            call = self.externs[n.attrs[0]]
            return dims.is_symbolic(lift((call.args, call.kwargs)))
        return False

    def live_nodes(self) -> list[int]:
        """Ids reachable from the outputs, in topological order."""
        live = set()
        stack = list(self.outputs)
        while stack:
            i = stack.pop()
            if i not in live:
                live.add(i)
                stack.extend(self.nodes[i].inputs)
        return sorted(live)

    def op_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for i in self.live_nodes():
            counts[self.nodes[i].op] = counts.get(self.nodes[i].op, 0) + 1
        return counts

    def verify(self) -> None:
        """Check topological order, shapes and dtypes of every node; raise IRError naming the culprit."""
        for i, n in enumerate(self.nodes):
            if any(j >= i for j in n.inputs):
                raise IRError(f"node {i} ({n.op}) uses a later node: {n.inputs}")
            if n.op in ("Input", "Param", "Extern"):
                continue
            try:
                shape = ops.infer_shape(n.op, [self.nodes[j].shape for j in n.inputs], n.attrs)
            except ops.ShapeError as err:
                raise IRError(f"node {i} ({n.op}): {err}") from None
            if shape != n.shape:
                raise IRError(f"node {i} ({n.op}) has shape {n.shape}, its operands give {shape}")
        for o in self.outputs:
            if not 0 <= o < len(self.nodes):
                raise IRError(f"output {o} is not a node")

    def format(self) -> str:
        """Readable listing of the live nodes, one per line."""
        lines = []
        for i in self.live_nodes():
            n = self.nodes[i]
            kinds = ops.get(n.op).attrs
            args = ", ".join([f"%{j}" for j in n.inputs] + [_format_attr(k, a) for k, a in zip(kinds, n.attrs)])
            lines.append(f"%{i} = {n.op}({args})  : {n.dtype}{list(n.shape)}")
        lines.append("return " + ", ".join(f"%{o}" for o in self.outputs))
        return "\n".join(lines)


def _format_attr(kind: str, value) -> str:
    if kind == "epi":
        return fused.format_expr(value)
    if kind == "tile":
        return "tile {}x{}x{} group {} warps {} stages {}".format(*value) if value else "untiled"
    return repr(value)


def run_node(graph: Graph, node: Node, args: list[torch.Tensor], inputs: dict[str, torch.Tensor]) -> Any:
    """Evaluate one node with PyTorch given its operand values (the reference semantics)."""
    op = ops.get(node.op)
    if node.op == "Input":
        return inputs[node.attrs[0]]
    if node.op == "Param":
        return graph.params[node.attrs[0]]
    if node.op == "Fill":  # one element seen through stride 0: a 16k x 16k mask constant costs no memory
        return torch.full((), node.attrs[0], dtype=ops.DTYPES[node.dtype]).expand(node.shape)
    if node.op == "Extern":
        return call_extern(graph.externs[node.attrs[0]], args)[node.attrs[1]]
    if op.variadic:
        out = op.torch_impl(*args[:op.arity], *node.attrs, list(args[op.arity:]))
    else:
        out = op.torch_impl(*args, *node.attrs)
    if op.kind == "kernel" and out.dtype != ops.DTYPES[node.dtype]:
        return out.to(ops.DTYPES[node.dtype])  # a kernel stores in its node's dtype (see stored_dtype_differs)
    return out


def stored_dtype_differs(graph: Graph, node: Node) -> bool:
    """Whether a kernel node's reference implementation computes another dtype than the node's: fusion may
    inline a producer that casts (T5's integer bucket indices computed from float logarithms), leaving a
    first operand of another dtype; the generated kernel stores in the node's dtype, and so must the rest."""
    in_dtypes = [graph.nodes[j].dtype for j in node.inputs]
    return ops.get(node.op).kind == "kernel" and ops.infer_dtype(node.op, in_dtypes, node.attrs) != node.dtype


def call_extern(ext: ExternCall, operands: list[torch.Tensor]) -> tuple:
    """Run an extern call; always returns a tuple of outputs."""
    def sub(a):
        if isinstance(a, TensorArg):
            return operands[a.index]
        if isinstance(a, (list, tuple)):
            return type(a)(sub(x) for x in a)
        return a
    return outputs_of(ext.fn(*sub(ext.args), **{k: sub(v) for k, v in ext.kwargs.items()}))


def outputs_of(out) -> tuple:
    """A call's result as the tuple of its outputs."""
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def evaluate(graph: Graph, inputs: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    """Run the graph node by node with PyTorch (reference semantics; also used for constant folding)."""
    values: dict[int, Any] = {}
    for i in graph.live_nodes():
        n = graph.nodes[i]
        values[i] = run_node(graph, n, [values[j] for j in n.inputs], inputs)
    return [values[o] for o in graph.outputs]
