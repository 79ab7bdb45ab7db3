"""The plan walker both backends share: one pass over a plan's live nodes writing one Python function.

A backend subclasses ``PlanWriter`` and renders each kind of node: ``constant`` (a parameter, or an input
bound to a tensor), ``fill``, ``extern_lines``, ``kernel`` and ``algebra``; each returns the right-hand side
of the node's statement, or None when the node is only a name. The walker names values (``t<i>``; inputs by
their identifiers), calls a multi-output extern once, and writes the function: assignments nothing reads
are dropped and each intermediate is deleted after its last read, so the generated function frees memory
when eager PyTorch would (holding every intermediate to the end raises peak memory).
"""
from __future__ import annotations

import re
from abc import ABC, abstractmethod

from .. import ops
from ..ir import Graph
from .pytorch_source import GENERATED_VAR, ident

VARIABLE = re.compile(r"\b[a-z]\d+\b")


class PlanWriter(ABC):
    """Walks ``graph`` (``write``) into ``lines``; inputs named in ``bound`` are read like parameters."""

    def __init__(self, graph: Graph, input_names: list[str], bound=()):
        self.graph, self.bound = graph, bound
        self.inputs = [ident(name) for name in input_names if name not in bound]
        self.names: dict[int, str] = {}
        self.lines: list[str] = []
        self.extern_results: dict[str, str] = {}  # extern key -> the variable holding its outputs

    # -------------------------------------------------------------------------------- what backends render
    @abstractmethod
    def constant(self, i: int, n) -> str | None:
        """A parameter, or an input bound to a tensor."""

    @abstractmethod
    def fill(self, i: int, n) -> str | None:
        """A constant-filled tensor."""

    @abstractmethod
    def extern_lines(self, var: str, key: str, args: list[str]) -> list[str]:
        """Statements setting ``var`` to the tuple of outputs of extern ``key`` called on ``args``."""

    @abstractmethod
    def kernel(self, i: int, n) -> str | None:
        """A kernel-layer node."""

    @abstractmethod
    def algebra(self, i: int, n) -> str | None:
        """Any other op."""

    # --------------------------------------------------------------------------------------------- the walk
    def write(self) -> None:
        for i in self.graph.live_nodes():
            rhs = self.render(i, self.graph.nodes[i])
            if rhs is not None:
                self.assign(i, rhs)

    def render(self, i: int, n) -> str | None:
        if n.op == "Input" and n.a.name not in self.bound:
            self.names[i] = ident(n.a.name)
            return None
        if n.op in ("Input", "Param"):
            return self.constant(i, n)
        if n.op == "Fill":
            return self.fill(i, n)
        if n.op == "Extern":
            return self.extern(i, n)
        return self.kernel(i, n) if ops.get(n.op).kind == "kernel" else self.algebra(i, n)

    def assign(self, i: int, rhs: str) -> None:
        self.names[i] = f"t{i}"
        self.lines.append(f"t{i} = {rhs}")

    def operand(self, j: int) -> str:
        return self.names[j]

    def extern(self, i: int, n) -> str:
        key = n.a.key
        if key not in self.extern_results:
            self.extern_results[key] = f"e{i}"
            self.lines += self.extern_lines(f"e{i}", key, [self.operand(j) for j in n.inputs])
        return f"{self.extern_results[key]}[{n.a.output}]"

    def function(self, name: str, params: list[str], needed: set[str] | None = None) -> list[str]:
        """``def name(params)`` returning the outputs as a tuple; ``needed`` gains the names it reads."""
        outs = [self.operand(o) for o in self.graph.outputs]
        needed = set() if needed is None else needed
        needed.update(outs)
        body = release(drop_unused(self.lines, needed), outs)
        return [f"def {name}({', '.join(params)}):", *(f"    {line}" for line in body),
                f"    return ({''.join(f'{o}, ' for o in outs)})"]


def provenance(plan, title: str, rulesets) -> list[str]:
    """What a generated plan says about where it came from: the program, the rule sets that ran, the
    predicted time and the cost model that predicted it."""
    return [f"EqiForge plan of {title}: {len(plan.graph.live_nodes())} nodes, predicted "
            f"{plan.predicted_seconds * 1e6:.1f} us ({plan.cost_model or 'unpriced'})"
            + (f", {plan.folded} nodes folded into constants" if plan.folded else ""),
            f"rule sets: {', '.join(rulesets) or 'none'}"]


def drop_unused(lines: list[str], needed: set[str]) -> list[str]:
    """``lines`` without the assignments to generated variables that nothing reads (every op is pure;
    extern calls and statements that assign nothing, like kernel launches, are kept). ``needed`` gains the
    names the kept lines read."""
    kept = []
    for line in reversed(lines):
        target, rhs = line.split(" = ", 1) if " = " in line else ("", line)
        if target in needed or target.startswith("e") or not GENERATED_VAR.fullmatch(target):
            kept.append(line)
            needed.update(VARIABLE.findall(rhs))
    return kept[::-1]


def release(lines: list[str], outputs: list[str]) -> list[str]:
    """``lines`` with a ``del`` after the last read of each intermediate, so its memory goes back to the
    allocator when eager PyTorch would free it (and a new output can reuse the cache-warm block)."""
    assigned = dict.fromkeys(line.split(" = ", 1)[0] for line in lines if " = " in line)
    last_read = {}
    for k, line in enumerate(lines):
        for name in VARIABLE.findall(line.split(" = ", 1)[-1] if " = " in line else line):
            if name in assigned:
                last_read[name] = k
    dies_after: dict[int, list[str]] = {}
    for name in assigned:  # in assignment order, as the del statements list them
        if name in last_read and name not in outputs:
            dies_after.setdefault(last_read[name], []).append(name)
    released = []
    for k, line in enumerate(lines):
        released.append(line)
        if k in dies_after:
            released.append(f"del {', '.join(dies_after[k])}")
    return released
