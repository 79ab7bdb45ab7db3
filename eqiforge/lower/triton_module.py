"""The triton backend: a Plan becomes one readable Python module of Triton kernels and torch glue.

The module imports only torch and triton, so a plan optimized here runs (and is timed) on a machine without
EqiForge. It defines one launcher per kernel node and ``forward(<inputs>, params)``: kernel nodes run their
generated Triton kernel; views, re-formed composites and remaining algebra ops run as PyTorch calls; externs
as the ATen calls they were. A kernel the templates cannot render runs as PyTorch code computing what its
kind means (eqiforge/ops/kernel_semantics.py, copied into the module), float64 in float64 as the templates do
(reported as a fallback). The walk over the plan is the one the torch backend uses (lower/writer.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..ops import fused
from ..ir import ExternCall, Graph
from .kernels import kernel_spec
from .plan import Plan
from .pytorch_source import dtype_src, extern_call, ident, kernel_source, number_src, semantics_source, torch_call
from .triton import PRELUDE, UnsupportedSpec, render
from .writer import PlanWriter, provenance


@dataclass
class GeneratedModule:
    source: str
    param_names: dict[str, str]  # module parameter key -> plan parameter name
    kernels: list[str] = field(default_factory=list)  # launcher names, in order
    fallbacks: dict[str, str] = field(default_factory=dict)  # kernel -> why it runs in PyTorch
    externs: dict[str, ExternCall] = field(default_factory=dict)  # key -> call, for unprintable externs


def describe(graph: Graph, i: int, seconds: float) -> str:
    """The kernel header: what it computes, the rule sets its form shows it came from (egglog keeps no
    per-node provenance, so they are inferred, and said so), its predicted time."""
    n = graph.nodes[i]
    a = n.a
    rules = ["fusion"]
    if n.op == "GemmK":
        what = f"GEMM {graph.nodes[n.inputs[0]].shape} x {graph.nodes[n.inputs[1]].shape} -> {n.shape}, " \
               f"epilogue {fused.format_expr(a.epilogue)}"
        rules += ["layout"] if "T" in (a.layout_a, a.layout_b) else []
        rules += ["tiling" + (f" (split-K {a.split_k})" if a.split_k > 1 else "")]
    elif n.op == "PointwiseK":
        what = f"pointwise {fused.format_expr(a.expr)} -> {n.shape}"
    elif n.op == "AttentionK":
        what = (f"attention softmax({a.scale:g} * q k^T{' + bias' if len(n.inputs) > 3 else ''}"
                f"{', causal' if a.causal else ''}) v -> {n.shape}")
        rules = ["composite", "attention"]
    else:
        what = (f"row {a.kind} of {fused.format_expr(a.prologue)}, epilogue {fused.format_expr(a.epilogue)} "
                f"-> {n.shape}")
        rules += [] if a.kind in ("sum", "max", "min") else ["composite"]  # those three: fusion rules
    return f"{what}\nrule sets (inferred from its form): {', '.join(rules)}\npredicted: {seconds * 1e6:.2f} us"


def kernel_name(n, number: int) -> str:
    """The launcher's name: the kernel kind (a row kernel's reduction) and its number in the module."""
    kind = {"GemmK": "gemm", "PointwiseK": "pointwise", "AttentionK": "attention"}.get(n.op)
    return f"{kind or 'row_' + n.a.kind}{number}"


class _TritonWriter(PlanWriter):
    """The triton backend's renderings: kernels are rendered Triton (or PyTorch code, ``in_torch``), the
    rest PyTorch calls; parameters (and bound inputs) are read from ``params``."""

    def __init__(self, plan: Plan, input_names: list[str], bound, in_torch: dict[str, str]):
        super().__init__(plan.graph, input_names, bound)
        self.plan, self.in_torch = plan, in_torch
        self.gen = GeneratedModule("", {})
        self.kernel_sources: list[str] = []
        self.device = f"{self.inputs[0]}.device" if self.inputs else "next(iter(params.values())).device"

    def constant(self, i: int, n) -> str:
        key = ident(n.a.name)
        self.gen.param_names[key] = n.a.name
        return f"params[{key!r}]"

    def fill(self, i: int, n) -> str:
        return f"torch.full({n.shape}, {number_src(n.a.value)}, dtype={dtype_src(n.dtype)}, device={self.device})"

    def extern_lines(self, var: str, key: str, args: list[str]) -> list[str]:
        call = extern_call(self.graph.externs[key], args)
        if call is None:
            self.gen.externs[key] = self.graph.externs[key]
            call = f"externs[{key!r}]({', '.join(args)})"
        return [f"{var} = {call}", f"{var} = {var} if isinstance({var}, (tuple, list)) else ({var},)"]

    def kernel(self, i: int, n) -> str | None:
        spec, operand_ids = kernel_spec(self.graph, i, self.plan.sms)
        operands = [self.operand(j) for j in operand_ids]
        name = kernel_name(n, len(self.gen.kernels) + len(self.gen.fallbacks))
        try:
            if name in self.in_torch:
                raise UnsupportedSpec(self.in_torch[name])
            self.kernel_sources.append(render(spec, name, describe(self.graph, i, self.plan.node_seconds.get(i, 0.0))))
        except UnsupportedSpec as err:
            self.gen.fallbacks[name] = str(err)
            return f"{kernel_source(spec, operands)}  # {name} in PyTorch: {err}"
        self.assign(i, f"torch.empty({n.shape}, dtype={dtype_src(n.dtype)}, device={self.device})")
        self.lines.append(f"{name}({self.names[i]}, {', '.join(operands)})")
        self.gen.kernels.append(name)
        return None

    def algebra(self, i: int, n) -> str:
        return torch_call(n, [self.operand(j) for j in n.inputs])


def generate(plan: Plan, input_names: list[str], title: str = "a program", bound: list[str] = (),
             in_torch: dict[str, str] | None = None, rulesets=()) -> GeneratedModule:
    """The standalone module for ``plan``: kernels first, then ``forward``. Inputs named in ``bound`` (live
    parameters, when constants are not folded) are read from ``params`` like parameters; kernels named in
    ``in_torch`` (name -> why) run as PyTorch code. ``title`` and ``rulesets`` go into its docstring."""
    w = _TritonWriter(plan, input_names, bound, in_torch or {})
    w.write()
    gen = w.gen
    kernels = f"{len(gen.kernels)} Triton kernel{'s' if len(gen.kernels) != 1 else ''}"
    in_pytorch = f" and {len(gen.fallbacks)} kernel{'s' if len(gen.fallbacks) != 1 else ''} in PyTorch" \
        if gen.fallbacks else ""
    first, *more = provenance(plan, title, rulesets)
    header = (f'"""{first}.\n{"".join(line + chr(10) for line in more)}{kernels}{in_pytorch}.\n\n'
              f'Generated code: imports only torch and triton. Call forward({", ".join(w.inputs + ["params"])}) '
              f'with params a dict of tensors.\n"""\n')
    forward = w.function("forward", w.inputs + ["params", "externs=None"])
    banded = any(plan.graph.nodes[i].op == "BandMatMul" for i in plan.graph.live_nodes())  # band_matmul
    parts = w.kernel_sources + ([semantics_source()] if gen.fallbacks or banded else [])
    gen.source = header + PRELUDE + "\n\n" + "\n\n".join(parts) + "\n\n" + "\n".join(forward) + "\n"
    return gen
