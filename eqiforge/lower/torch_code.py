"""The torch backend: a Plan becomes one straight-line Python function of PyTorch calls that runs anywhere.

One statement per IR node, written by the shared plan walker (lower/writer.py): algebra ops as the PyTorch
calls the triton backend's glue also uses (``pytorch_source.torch_call``), with overrides where PyTorch
has a cheaper form (a Python number for a scalar operand, 1-D products, means, implicit broadcasting);
re-formed composites as their native PyTorch op (eqiforge/ops/native.py), other kernel nodes through their
reference implementation (eqiforge/ops/kernel_semantics.py), externs as the calls they were. Parameters, externs
and implementations are globals of the function, and scalar ``Fill`` operands are Python numbers, so a
call is one Python frame with no attribute look-ups; views of parameters (reshapes, transposes, expands)
are made once, at module level, when the plan is bound to its tensors. That matters on small programs:
an FX GraphModule call (module dispatch, one ``__getattr__`` per parameter) measured 30-50 us more than
the same calls written by hand, per call on a CPU whose caches the previous call evicted
(bench/run_cpu.py), as much as a small matmul.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field, replace

import torch

from ..ops import kernel_semantics, native
from .. import ops
from ..dims import is_symbolic
from ..ir import Graph, call_extern, outputs_of, stored_dtype_differs
from .pytorch_source import GENERATED_VAR, REDUCTIONS, dtype_src, ident, literal, number_src, sizes, torch_call
from .writer import PlanWriter, drop_unused

#: elementwise ops whose PyTorch call broadcasts its operands
BROADCASTING = frozenset(name for name, o in ops.OPS.items()
                         if o.kind in ("binary", "compare", "where") and o.arity > 1)
#: ops computed element by element: on values of the same shape, any reshape of them alike
ELEMENTWISE = frozenset(name for name, o in ops.OPS.items()
                        if o.kind in ("unary", "binary", "compare", "where", "cast"))
#: a native row reduction's PyTorch call on its rows, without the kept dim
ROW_CALLS = {"sum": "{}.sum(-1)", "max": "{}.amax(-1)", "min": "{}.amin(-1)", "logsumexp": "torch.logsumexp({}, -1)"}
#: binary ops written infix when an operand is a Python number (PyTorch's functions want a tensor first)
INFIX = {"Add": "+", "Sub": "-", "Mul": "*", "Div": "/", "Pow": "**", "Eq": "==", "Ne": "!=", "Lt": "<",
         "Le": "<=", "Gt": ">", "Ge": ">="}


@dataclass
class TorchCode:
    """``source`` makes the views of parameters at module level and defines ``plan(<inputs>)`` returning a
    tuple of outputs; it reads ``torch``, ``constants`` (tensors: parameters, live inputs) and ``helpers``
    (callables, attributes) as globals."""
    source: str
    constants: dict[str, torch.Tensor] = field(default_factory=dict)
    helpers: dict[str, object] = field(default_factory=dict)


def _scalar(graph: Graph, i: int):
    """The Python number of a Fill node, typed like its dtype (so int/bool tensors stay int/bool)."""
    n = graph.nodes[i]
    value = n.a.value
    if n.dtype == "bool":
        return bool(value)
    if not torch.empty((), dtype=ops.DTYPES[n.dtype]).is_floating_point():
        return getattr(value, "size", None) or int(value)  # a symbolic size stays one (dims.SymFloat)
    return value


def _scalar_operands(graph: Graph, n) -> list | None:
    """The operands of a binary node with a Fill operand as Python numbers (the other one stays None), or
    None when the node is not written infix. Two Fill operands: the first stays a tensor."""
    if n.op not in INFIX or not any(graph.nodes[j].op == "Fill" for j in n.inputs):
        return None
    numbers = [_scalar(graph, j) if graph.nodes[j].op == "Fill" else None for j in n.inputs]
    if all(v is not None for v in numbers):
        numbers[0] = None
    return numbers


class _TorchWriter(PlanWriter):
    """The torch backend's renderings; collects the globals the statements need."""

    def __init__(self, graph: Graph, input_names: list[str], bound: dict[str, torch.Tensor]):
        super().__init__(graph, input_names, bound)
        self.code = TorchCode("")
        self.hoisted: list[str] = []  # module level: views of constants
        self.constant_nodes: set[int] = set()  # nodes whose value is a constant tensor (or a view of one)
        self.vectors: dict[int, tuple[str, int]] = {}  # [k, 1] / [1, k] node -> (its 1-D form, the unit dim)
        self.scalars: dict[int, str] = {}  # node of one element -> its 0-d form
        self.unshaped: dict[int, tuple[str, tuple]] = {}  # node -> (a variable, its shape) it is a reshape of
        self.users: dict[int, list[int]] = {}
        for i in graph.live_nodes():
            for j in graph.nodes[i].inputs:
                self.users.setdefault(j, []).append(i)

    def helper(self, prefix: str, value) -> str:
        """A global for ``value`` (one per distinct object), named ``prefix`` (numbered when taken)."""
        for name, existing in self.code.helpers.items():
            if existing is value:
                return name
        name = prefix if prefix not in self.code.helpers else f"{prefix}_{len(self.code.helpers)}"
        self.code.helpers[name] = value
        return name

    def made_once(self, i: int) -> bool:
        """Whether node ``i`` is a view of constants, made once at module level (which knows no call's sizes)."""
        n = self.graph.nodes[i]
        return ops.get(n.op).is_view() and bool(n.inputs) and all(j in self.constant_nodes for j in n.inputs) \
            and not is_symbolic((n.shape, n.attrs))

    def line(self, i: int, statement: str) -> None:
        """A statement computing a form of node ``i``: where node ``i`` itself is made."""
        (self.hoisted if self.made_once(i) else self.lines).append(statement)

    def assign(self, i: int, rhs: str) -> None:
        """``t<i> = rhs``: at module level for a view of constants, else in the body."""
        if self.made_once(i):
            self.names[i] = f"t{i}"
            self.constant_nodes.add(i)
            self.hoisted.append(f"t{i} = {rhs}")
        else:
            super().assign(i, rhs)

    def attr(self, value) -> str:
        return literal(value) or self.helper("attr", value)

    def tensor_fill(self, i: int) -> str:
        n = self.graph.nodes[i]
        device = f"{self.inputs[0]}.device" if self.inputs else "None"
        return f"torch.full({n.shape}, {number_src(n.a.value)}, dtype={dtype_src(n.dtype)}, device={device})"

    def operand(self, j: int) -> str:
        """The variable of node ``j``; a Fill read as a tensor is materialised at its first use."""
        if j not in self.names:
            self.names[j] = f"t{j}"
            self.lines.append(f"t{j} = {self.tensor_fill(j)}")
        return self.names[j]

    # ------------------------------------------------------------------------------------------ renderings
    def constant(self, i: int, n) -> None:
        """A parameter or a bound input: a tensor global of the function."""
        self.names[i] = f"{'param' if n.op == 'Param' else 'live'}_{ident(n.a.name)}"
        self.code.constants[self.names[i]] = (self.graph.params if n.op == "Param" else self.bound)[n.a.name]
        self.constant_nodes.add(i)
        if len(n.shape) == 2 and 1 in n.shape and not is_symbolic(n.shape):  # its 1-D or 0-d form, made once
            if n.shape == (1, 1):
                self.scalars[i] = f"s{i}"
                self.hoisted.append(f"s{i} = {self.names[i]}.reshape(())")
            else:
                self.vectors[i] = (f"v{i}", n.shape.index(1))
                self.hoisted.append(f"v{i} = {self.names[i]}.reshape({max(n.shape)})")
        return None

    def fill(self, i: int, n) -> None:
        return None  # a number where it is used, materialised only where a tensor is needed

    def extern_lines(self, var: str, key: str, args: list[str]) -> list[str]:
        ext = self.graph.externs[key]
        if is_symbolic((ext.args, ext.kwargs)):  # its sizes are the call's: written out, read when it runs
            parts = [self.value(a, args) for a in ext.args] + [f"{k}={self.value(v, args)}"
                                                                for k, v in ext.kwargs.items()]
            return [f"{var} = {self.helper('outputs_of', outputs_of)}({self.helper('extern_fn', ext.fn)}"
                    f"({', '.join(parts)}))"]
        call = self.helper("extern", functools.partial(call_extern, ext))
        return [f"{var} = {call}([{', '.join(args)}])"]

    def value(self, value, args: list[str]) -> str:
        """Source of an extern's argument: printed where it can be, else a global."""
        if isinstance(value, (list, tuple)) and literal(value, args) is None:
            inner = ", ".join(self.value(v, args) for v in value) + ("," if isinstance(value, tuple) else "")
            return f"[{inner}]" if isinstance(value, list) else f"({inner})"
        return literal(value, args) or self.helper("attr", value)

    def kernel(self, i: int, n) -> str:
        """A native PyTorch call where one computes the node (ops/native.py), else its reference implementation."""
        op = ops.get(n.op)
        native_call = native.is_native(n.op, n.attrs, [self.graph.nodes[j].shape for j in n.inputs])
        vector = self.matrix_vector_gemm(n) if native_call and n.op == "GemmK" else None
        if vector is not None:
            return self.with_vector(i, vector, 1)
        row = self.row_reduction(i, n) if native_call and n.op == "RowReduceK" else None
        if row is not None:
            return row
        args = [self.operand(j) for j in n.inputs]
        fn = native.CALLS[n.op] if native_call else op.torch_impl
        impl = self.helper(f"{'native' if native_call else 'reference'}_{fn.__name__}", fn)
        fixed = args[:op.arity] + [self.attr(a) for a in n.attrs]
        extras = [f"[{', '.join(args[op.arity:])}]"] if op.variadic else []
        cast = f".to(torch.{n.dtype})" if stored_dtype_differs(self.graph, n) else ""
        return f"{impl}({', '.join(fixed + extras)}){cast}"

    def row_reduction(self, i: int, n) -> str | None:
        """A native sum, max, min or logsumexp of rows as PyTorch's call, on the rows' form without unit dims
        where the plan has one, its result without the kept dim: a logsumexp of one row read as a total is
        then the call a person writes, not four views around it."""
        a, x = n.a, n.inputs[0]
        shape = self.graph.nodes[x].shape
        if a.kind not in ROW_CALLS or a.epilogue != native.ACC or len(n.inputs) != 1 or shape[-1] == 1 \
                or is_symbolic(shape) or stored_dtype_differs(self.graph, n):
            return None
        name = (self.squeezed_form(x) or (self.operand(x), shape))[0]
        return self.with_unshaped(i, ROW_CALLS[a.kind].format(name), _squeeze(n.shape))

    def matrix_vector_gemm(self, n) -> str | None:
        """A native GEMM of a matrix and a [k, 1] operand with a 1-D form (a folded weight's column sums,
        say), plus a bias of one element or none, as ``torch.mv`` on the 1-D form, plus the bias's 0-d form:
        addmm of a [k, 1] operand measured ~10% slower than the two calls on a 2048 x 512 activation."""
        a = ops.get(n.op).named(n.attrs)
        x, w, *extras = n.inputs
        unit = 1 if a.layout_b == "N" else 0
        if len(n.shape) != 2 or w not in self.vectors or self.vectors[w][1] != unit \
                or stored_dtype_differs(self.graph, n) or not self.same_dtype(n):
            return None
        matrix = f"{self.operand(x)}.mT" if a.layout_a == "T" else self.operand(x)
        product = f"torch.mv({matrix}, {self.vectors[w][0]})"
        if a.epilogue == native.ACC:
            return product
        bias = self.scalar_source(extras[0]) if a.epilogue == native.BIAS else None
        return f"{product} + {bias}" if bias else None

    def algebra(self, i: int, n) -> str | None:
        """``torch_call``, or a cheaper PyTorch form of the same value."""
        g = self.graph
        numbers = _scalar_operands(g, n)
        if numbers is not None:
            a, b = (number_src(v) if v is not None else self.operand(j) for v, j in zip(numbers, n.inputs))
            return self.mean(i, numbers) or self.vector_op(i, numbers) or f"{a} {INFIX[n.op]} {b}"
        if n.op == "Where" and [g.nodes[j].op == "Fill" for j in n.inputs[1:]].count(True) == 1:
            cond, a, b = (number_src(_scalar(g, j)) if g.nodes[j].op == "Fill" and k else self.operand(j)
                          for k, j in enumerate(n.inputs))
            return f"torch.where({cond}, {a}, {b})"  # a masking constant is not materialised
        if self._is_reshape(n):
            return self.reshape(i, n)
        vector = self.vector_form(i)
        if vector is not None:
            return vector
        squeezed = self.squeezed(i, n)
        if squeezed is not None:
            return squeezed
        if n.op == "Diagonal" and not is_symbolic(n.shape):
            x = n.inputs[0]  # a matrix's diagonal without dim arguments: ~0.3 us less a call
            call = f"{self.operand(x)}.diagonal()" if len(g.nodes[x].shape) == 2 else \
                f"{self.operand(x)}.diagonal(0, -2, -1)"
            return self.with_unshaped(i, call, n.shape[:-1])
        if n.op in REDUCTIONS and not is_symbolic(n.shape) and self.users.get(i) \
                and all(self._is_reshape(g.nodes[u]) for u in self.users[i]) and i not in g.outputs:
            dims = n.a.dims[0] if len(n.a.dims) == 1 else list(n.a.dims)  # only reshaped: no kept dims
            squeezed = tuple(s for d, s in enumerate(n.shape) if d not in n.a.dims)
            return self.with_unshaped(i, f"{self.operand(n.inputs[0])}.{REDUCTIONS[n.op]}({dims})", squeezed)
        if n.op == "MatMul" and len(g.nodes[n.inputs[0]].shape) >= 3 \
                and len(g.nodes[self._before_broadcast(n.inputs[1])].shape) == 2:
            return self.folded_matmul(n)
        if n.op == "MatMul" and len(g.nodes[n.inputs[1]].shape) >= 3 \
                and len(g.nodes[self._before_broadcast(n.inputs[0])].shape) == 2:  # PyTorch broadcasts the matrix
            return f"torch.matmul({self.operand(self._before_broadcast(n.inputs[0]))}, {self.operand(n.inputs[1])})"
        if n.op in BROADCASTING:
            return torch_call(n, self.broadcast_operands(n))
        if n.op == "BandMatMul":
            self.helper("band_matmul", kernel_semantics.band_matmul)
        return torch_call(n, [self.operand(j) for j in n.inputs])

    def _is_reshape(self, n) -> bool:
        """Whether ``n`` only reshapes its operand: a Reshape, or a Permute that moves unit dims alone (the
        other dims keep their order), at sizes known when the plan is written."""
        if n.op not in ("Reshape", "Permute") or is_symbolic((n.shape, self.graph.nodes[n.inputs[0]].shape)):
            return False
        if n.op == "Reshape":
            return True
        inner = self.graph.nodes[n.inputs[0]].shape
        moved = [d for d in n.a.perm if inner[d] != 1]
        return moved == sorted(moved)

    def reshape(self, i: int, n) -> str | None:
        """A chain of reshapes as one ``reshape`` of the value the chain starts from (a reshape of a reshape
        is the reshape of the first operand: row-major order is kept throughout), or no call at all when it
        gives that value's shape back: each view costs ~1 us of host time on a CPU, the whole cost of a
        plan of a few microseconds."""
        name, shape = self._reshape_source(n.inputs[0])
        if len(n.shape) == 2 and 1 in n.shape and len(shape) == 1:
            self.vectors[i] = (name, n.shape.index(1))  # a 1-D value as a [k, 1] or [1, k] matrix
        if tuple(shape) == tuple(n.shape) and (i not in self.graph.outputs or self._computed_per_call(name)):
            self.names[i] = name  # an output is never an input, a parameter or a view made once of one
            return None
        return f"{name}.reshape({sizes(n.shape)})"

    def _computed_per_call(self, name: str) -> bool:
        """Whether the variable ``name`` is computed by the plan's body (not an input, parameter or view of
        one made at module level)."""
        return bool(GENERATED_VAR.fullmatch(name)) and not any(h.startswith(f"{name} = ") for h in self.hoisted)

    def _reshape_source(self, j: int) -> tuple[str, tuple]:
        """(the variable, its shape) that node ``j`` is a reshape of, back through the chain of reshapes
        that made it, stopping at a value with a 1-D, 0-d or unit-dim-less form (that form) or a view made
        once at module level (itself)."""
        while True:
            if j in self.scalars:
                return self.scalars[j], ()
            if j in self.vectors:
                return self.vectors[j][0], (max(self.graph.nodes[j].shape),)
            if j in self.unshaped:
                return self.unshaped[j]
            if j in self.constant_nodes or not self._is_reshape(self.graph.nodes[j]):
                return self.operand(j), tuple(self.graph.nodes[j].shape)
            j = self.graph.nodes[j].inputs[0]

    def squeezed_form(self, j: int, unit_dims: bool = False) -> tuple[str, tuple] | None:
        """(a variable, its shape) that node ``j`` is a reshape of, of ``j``'s shape without its unit dims (or
        with unit dims anywhere, ``unit_dims``), or None."""
        name, shape = self._reshape_source(j)
        squeezed = _squeeze(self.graph.nodes[j].shape)
        return (name, tuple(shape)) if (_squeeze(shape) if unit_dims else tuple(shape)) == squeezed else None

    def squeezed(self, i: int, n) -> str | None:
        """A reduction or an elementwise op (also a batch of 1 x 1 products) of values with unit dims, as the
        frontend writes unsqueezed and broadcast operands, computed on the values without those dims that the
        plan already has: a sum over [128, 1, 256] costs 14 us where the same sum over [128, 256] costs 9 us
        on a CPU, and every view around it ~1 us. None when an operand has no such form (a value the plan
        made with its unit dims) or nothing would be saved."""
        if 1 not in n.shape or is_symbolic(n.shape) or any(is_symbolic(self.graph.nodes[j].shape) for j in n.inputs):
            return None
        if n.op in REDUCTIONS:
            return self.squeezed_reduction(i, n)
        if n.op == "MatMul" and [self.graph.nodes[j].shape for j in n.inputs] == [n.shape, n.shape] \
                and n.shape[-2:] == (1, 1):
            n = replace(n, op="Mul")  # a batch of 1 x 1 products: elementwise products
        return self.squeezed_elementwise(i, n) if n.op in ELEMENTWISE else None

    def squeezed_reduction(self, i: int, n) -> str | None:
        """A reduction on its operand's form without unit dims; kept dims only where a broadcast reads it (it
        then broadcasts as it is), none for a total (read as a 0-d tensor by what follows)."""
        shape = self.graph.nodes[n.inputs[0]].shape
        total = _squeeze(n.shape) == ()
        form = self.squeezed_form(n.inputs[0]) if 1 in shape or total else None
        kept = [d for d, s in enumerate(shape) if s != 1]
        dims = [kept.index(d) for d in n.a.dims if d in kept]
        if form is None or not dims:
            return None
        call = f"{form[0]}.{REDUCTIONS[n.op]}({dims[0] if len(dims) == 1 else dims}"
        if not total and any(self.graph.nodes[u].op == "Expand" for u in self.users.get(i, ())):
            return self.with_unshaped(i, f"{call}, True)", tuple(1 if d in dims else s
                                                                         for d, s in enumerate(form[1])))
        return self.with_unshaped(i, f"{call})", _squeeze(n.shape))

    def squeezed_elementwise(self, i: int, n) -> str | None:
        """An elementwise op on its operands' forms (unit dims anywhere), each seen in the frame of the result's
        dims without its unit dims (reshaped where it does not broadcast there by itself)."""
        kept = [d for d, s in enumerate(n.shape) if s != 1]
        args, saved = [], False
        for j in n.inputs:
            p = self.graph.nodes[j].inputs[0] if self.graph.nodes[j].op == "Expand" else j
            shape = self.graph.nodes[p].shape
            form = self.squeezed_form(p, unit_dims=True) if len(shape) == len(n.shape) else None
            if form is None or (form[1] == () and not self.same_dtype(n)):
                return None  # a 0-d tensor takes no part in type promotion: the op would change
            framed = tuple(shape[d] for d in kept)
            lead = len(framed) - len(form[1])
            implicit = framed[lead:] == form[1] and set(framed[:lead]) <= {1}
            args.append(form[0] if implicit else f"{form[0]}.reshape({sizes(framed)})")
            saved = saved or p != j or form[0] != self.operand(p)
        return self.with_unshaped(i, torch_call(n, args), _squeeze(n.shape)) if saved else None

    def folded_matmul(self, n) -> str:
        """A batch of rows times one matrix ([..., M, K] @ [K, N], the matrix as is or expanded over the
        batch, as the frontend writes F.linear) as one 2-D product, as F.linear computes it: ``torch.matmul``
        of an expanded matrix, or of a 3-D operand it cannot view as 2-D (a permuted activation), runs
        ``bmm`` on a CPU, a copy and a product per batch element: 1.2 ms against 0.1 ms in
        nn.MultiheadAttention's in-projection of 256 tokens. ``reshape`` copies only what no view gives. A batch
        of transposed matrices (its last two dims swapped) is the exception: ``torch.matmul`` runs it as
        ``bmm`` of the transposed batch, no copy (8 x 256 x 256, times 256 x 8: 0.44 ms, reshaped 0.74 ms)."""
        a, b = n.inputs
        *lead, k = self.graph.nodes[a].shape
        matrix = self.operand(self._before_broadcast(b))
        node = self.graph.nodes[a]
        rank = len(node.shape)
        if node.op == "Permute" and node.a.perm == (*range(rank - 2), rank - 1, rank - 2):
            return f"torch.matmul({self.operand(a)}, {matrix})"
        return f"torch.matmul({self.operand(a)}.reshape({math.prod(lead)}, {k}), {matrix}).reshape({sizes(n.shape)})"

    def broadcast_operands(self, n) -> list[str]:
        """The operands of an elementwise op, read past the Expands (and reshapes adding leading 1s) that
        only spell out broadcasting PyTorch does by itself, so no view is made per call; as they are when
        that would not give the op's shape."""
        g = self.graph
        sources = [self._before_broadcast(j) for j in n.inputs]
        scalars = [self.scalar_source(j) if self.same_dtype(n) else None for j in n.inputs]
        if any(scalars) and _broadcasts_to([() if s else g.nodes[j].shape for s, j in zip(scalars, sources)], n.shape):
            return [s or self.operand(j) for s, j in zip(scalars, sources)]  # a total read as a 0-d tensor
        implicit = _broadcasts_to([g.nodes[j].shape for j in sources], n.shape)
        return [self.operand(j) for j in (sources if implicit else n.inputs)]

    def _before_broadcast(self, j: int) -> int:
        node = self.graph.nodes[j]
        if node.op == "Expand":
            j, node = node.inputs[0], self.graph.nodes[node.inputs[0]]
        while node.op == "Reshape":
            inner = self.graph.nodes[node.inputs[0]].shape
            lead = len(node.shape) - len(inner)
            if lead < 0 or any(d != 1 for d in node.shape[:lead]) or tuple(node.shape[lead:]) != tuple(inner):
                break
            j, node = node.inputs[0], self.graph.nodes[node.inputs[0]]
        return j

    def mean(self, i: int, numbers: list) -> str | None:
        """A sum times 1/(the number of elements summed) as one ``mean`` call (the frontend decomposes
        means; the unused sum is dropped later)."""
        g, n = self.graph, self.graph.nodes[i]
        if n.op != "Mul" or not ops.DTYPES[n.dtype].is_floating_point:
            return None
        scale, sum_node = (numbers[0], n.inputs[1]) if numbers[0] is not None else (numbers[1], n.inputs[0])
        total = g.nodes[sum_node]
        if total.op != "Sum":
            return None
        dims, x = total.a.dims, total.inputs[0]
        if not math.isclose(scale, 1.0 / math.prod(g.nodes[x].shape[d] for d in dims), rel_tol=1e-12):
            return None
        if sum_node in self.scalars:  # a total: its mean is 0-d too
            form = self.vectors[x][0] if x in self.vectors else (self.squeezed_form(x) or (self.operand(x),))[0]
            return self.with_scalar(i, f"{form}.mean()")
        if sum_node in self.vectors:  # the sum's 1-D form: the mean's too
            return self.with_vector(i, f"{self.operand(x)}.mean({dims[0]})", self.vectors[sum_node][1])
        return f"{self.operand(x)}.mean({dims[0] if len(dims) == 1 else list(dims)}, True)"

    def vector_op(self, i: int, numbers: list) -> str | None:
        """A scalar op on a node with a 1-D form is computed on that form (its matrix form follows)."""
        n = self.graph.nodes[i]
        j = next(j for j, v in zip(n.inputs, numbers) if v is None)
        if j in self.unshaped and j not in self.vectors and j not in self.scalars:
            a, b = (number_src(v) if v is not None else self.unshaped[j][0] for v in numbers)
            return self.with_unshaped(i, f"{a} {INFIX[n.op]} {b}", self.unshaped[j][1])
        if j in self.scalars:
            a, b = (number_src(v) if v is not None else self.scalars[j] for v in numbers)
            return self.with_scalar(i, f"{a} {INFIX[n.op]} {b}")
        if j not in self.vectors:
            return None
        vec, unit = self.vectors[j]
        a, b = (number_src(v) if v is not None else vec for v in numbers)
        return self.with_vector(i, f"{a} {INFIX[n.op]} {b}", unit)

    def with_vector(self, i: int, call: str, unit: int) -> str:
        """Compute node ``i``'s 1-D form as ``v<i> = call``; its matrix form is that, unsqueezed."""
        self.line(i, f"v{i} = {call}")
        self.vectors[i] = (f"v{i}", unit)
        return f"v{i}.unsqueeze({unit})"

    def trace(self, j: int) -> str | None:
        """``torch.trace`` of a matrix whose diagonal node ``j`` is: one call that reads the diagonal in order,
        where a sum of the strided diagonal view measured ~1.7x slower on a 2048 x 2048 matrix."""
        n = self.graph.nodes[j]
        if n.op != "Diagonal" or len(self.graph.nodes[n.inputs[0]].shape) != 2:
            return None
        return f"torch.trace({self.operand(n.inputs[0])})"

    def with_unshaped(self, i: int, call: str, shape: tuple) -> str:
        """Compute node ``i`` as ``r<i> = call`` of ``shape`` (its own shape without the unit dims PyTorch's
        call does not keep, or with them where it keeps them); its own form is that, reshaped (dropped when
        only reshapes read it)."""
        self.line(i, f"r{i} = {call}")
        self.unshaped[i] = (f"r{i}", tuple(shape))
        if len(shape) == 1 and len(self.graph.nodes[i].shape) == 2:  # a [k, 1] or [1, k] node: its 1-D form
            self.vectors[i] = (f"r{i}", self.graph.nodes[i].shape.index(1))
        if shape == ():  # one element: its 0-d form
            self.scalars[i] = f"r{i}"
        return f"r{i}.reshape({sizes(self.graph.nodes[i].shape)})"

    def with_scalar(self, i: int, call: str) -> str:
        """Compute node ``i`` (one element) as the 0-d ``s<i> = call``; its [1, 1] form is that, reshaped."""
        self.line(i, f"s{i} = {call}")
        self.scalars[i] = f"s{i}"
        return f"s{i}.reshape({sizes(self.graph.nodes[i].shape)})"

    def scalar_source(self, j: int) -> str | None:
        """The 0-d form of the one element operand ``j`` repeats (a reshape or expand of a node that has
        one, as a broadcast total reaches an op), else None."""
        while j not in self.scalars and self.graph.nodes[j].op in ("Reshape", "Expand"):
            j = self.graph.nodes[j].inputs[0]
        return self.scalars.get(j)

    def same_dtype(self, n) -> bool:
        """Whether ``n`` and its operands share a dtype: only then is a 0-d operand in place of a [1, 1]
        one the same op (a 0-d tensor takes no part in type promotion against a tensor of its kind)."""
        return all(self.graph.nodes[j].dtype == n.dtype for j in n.inputs)

    def vector_form(self, i: int) -> str | None:
        """Matrix-vector products as ``torch.mv`` / vector-matrix products (a [k, 1] matrix operand costs
        ~5% more per product in PyTorch's CPU matmul, measured by bench/run_cpu.py on matmul_chain): the IR
        writes vectors as [k, 1] or [1, k] matrices, so nodes of those shapes keep their 1-D form beside
        them. Returns the node's right-hand side, or None when none of this applies (an unused matrix form
        is dropped later)."""
        g, n = self.graph, self.graph.nodes[i]
        shapes = [g.nodes[j].shape for j in n.inputs]
        if n.op == "Reshape" and len(n.shape) == 2 and 1 in n.shape and len(shapes[0]) == 1:
            self.vectors[i] = (self.operand(n.inputs[0]), n.shape.index(1))
        elif n.op == "Sum" and len(shapes[0]) == 2 and len(n.attrs[0]) == 1:
            dim, x = n.attrs[0][0], n.inputs[0]
            if x in self.vectors and self.vectors[x][1] != dim:  # a vector's total: a 0-d sum
                return self.with_scalar(i, self.trace(x) or f"{self.vectors[x][0]}.sum()")
            return self.with_vector(i, f"{self.operand(x)}.sum({dim})", dim)
        elif n.op == "MatMul" and len(n.shape) == 2:
            a, b = n.inputs
            if a in self.vectors and self.vectors[a][1] == 0 and b in self.vectors and self.vectors[b][1] == 1:
                return self.with_scalar(i, f"torch.dot({self.vectors[a][0]}, {self.vectors[b][0]})")
            if b in self.vectors and self.vectors[b][1] == 1:
                return self.with_vector(i, f"torch.mv({self.operand(a)}, {self.vectors[b][0]})", 1)
            if a in self.vectors and self.vectors[a][1] == 0:
                return self.with_vector(i, f"torch.matmul({self.vectors[a][0]}, {self.operand(b)})", 0)
        elif n.op in BROADCASTING and len(n.shape) == 2 and 1 in n.shape:
            return self.vector_elementwise(i, n)
        return None

    def vector_elementwise(self, i: int, n) -> str | None:
        """An elementwise op of [k, 1] (or [1, k]) operands with 1-D forms, or of [1, 1] ones broadcast to
        it, computed on the 1-D forms: an outer product's row sums, u * (v . x), are then the two calls a
        person writes instead of five views around them (~1 us each, the whole cost of such a plan)."""
        unit = n.shape.index(1) if n.shape != (1, 1) else None
        forms, full = [], False
        for j in n.inputs:
            src = self.graph.nodes[j].inputs[0] if self.graph.nodes[j].op == "Expand" else j
            shape = self.graph.nodes[src].shape
            if shape == (1, 1) and src in self.scalars and self.same_dtype(n):
                forms.append(self.scalars[src])
                continue
            if src not in self.vectors or (shape != (1, 1) and (shape != n.shape or self.vectors[src][1] != unit)):
                return None
            unit = self.vectors[src][1] if unit is None else unit
            full = full or shape == n.shape
            forms.append(self.vectors[src][0])
        if n.shape == (1, 1) and unit is None:  # every operand 0-d: so is the result
            return self.with_scalar(i, torch_call(n, forms))
        return self.with_vector(i, torch_call(n, forms), unit) if full else None


def _squeeze(shape) -> tuple:
    """``shape`` without its unit dims."""
    return tuple(s for s in shape if s != 1)


def _broadcasts_to(shapes: list, shape) -> bool:
    """Whether operands of ``shapes`` broadcast to ``shape`` by themselves."""
    try:
        return tuple(torch.broadcast_shapes(*shapes)) == tuple(shape)
    except RuntimeError:
        return False


def to_torch_code(graph: Graph, input_names: list[str], bound: dict[str, torch.Tensor] | None = None,
                  header: list[str] = (), prelude: list[str] = ()) -> TorchCode:
    """Lower ``graph`` to ``plan(<input_names>)``; inputs named in ``bound`` (live parameters, when
    constants are not folded) are read from those tensors instead of arguments. ``header``: comment lines
    that open the source (``writer.provenance``); ``prelude``: the body's first statements (a symbolic
    plan's sizes read from its inputs, lower/symbolic.py)."""
    w = _TorchWriter(graph, input_names, bound or {})
    w.lines.extend(prelude)
    w.write()
    needed: set[str] = set()
    body = w.function("plan", w.inputs, needed)
    hoisted = drop_unused(w.hoisted, needed)
    hoisted = ["# views of the parameters, made once when the plan is bound to its tensors", *hoisted, ""] \
        if hoisted else []
    w.code.source = "\n".join([f"# {line}" for line in header] + hoisted + body) + "\n"
    return w.code
