"""Translation validation: trust what was checked, not the libraries that produced it.

egglog 13.2 has stored an e-node with the wrong child and returned invalid matches, so two checks stand
between the e-graph and the user:

- ``check_encoding``: after saturation, every node of the captured program must still be in the e-class
  it was encoded into, with exactly its op, attributes and child e-classes.
- ``PlanCheck``: the lowered plan runs against the captured program (evaluated node by node with the op
  table's reference implementations) on the example inputs and on fresh random inputs of the same shapes.
  A difference beyond rounding is judged against a float64 evaluation of the program, so that a plan is
  not blamed for the rounding of the dtype it was asked to compute in; ``culprits`` then finds the
  chosen e-nodes where the plan's values first leave the program's, so they can be excluded and the
  e-graph extracted again.

Numerical contract (docs/numerics.md): for finite inputs whose program values are finite, a plan matches eager up
to rounding. With ``assume_finite`` (the default) positions where the program is NaN/inf are not compared;
without it they must be NaN/inf in the plan too, in the same places.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .. import ops
from ..errors import EqiforgeError
from ..ir import Graph, evaluate, run_node

#: a plan passes when its error against the program is at most this, relative to the output's largest
#: magnitude; past it the float64 evaluation decides (``ROUNDING_FACTOR``)
TOLERANCE = {"float64": 1e-12, "float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}
ROUNDING_FACTOR = 8.0  # a plan may be this many times further from float64 than eager itself is
#: the random-input check runs when the program's multiply-adds stay under this (a few CPU seconds)
RANDOM_CHECK_FLOPS = 2e10
MAX_EXCLUSION_ROUNDS = 3


# ----------------------------------------------------------------------------------------- the encoding

def _attr_key(kind: str, value):
    """An attribute as the snapshot decodes it (NaN equal to itself)."""
    if kind == "f64":
        return ("nan",) if math.isnan(value) else float(value)
    if kind == "i64":
        return int(value)
    if kind == "dims":
        return tuple(int(v) for v in value)
    return value


def check_encoding(snap, graph: Graph) -> list[str]:
    """Problems with the encoded program in the snapshot (empty: every IR node is where it was put)."""
    members = snap.class_nodes()
    problems = []
    for i in graph.live_nodes():
        n = graph.nodes[i]
        c = snap.bindings.get(i)
        if c is None:
            problems.append(f"node {i} ({n.op}) has no e-class")
            continue
        kinds = ops.get(n.op).attrs
        want = (n.op, tuple(_attr_key(k, a) for k, a in zip(kinds, n.attrs)),
                tuple(snap.bindings.get(j) for j in n.inputs))
        found = [(snap.node_op[e], tuple(_attr_key(k, a) for k, a in zip(kinds, snap.node_attrs[e])),
                  snap.node_children[e]) for e in members[c] if snap.node_op[e] == n.op]
        if want not in found:
            problems.append(f"node {i} ({n.op}) is not in its e-class as encoded: expected {want}, found {found[:3]}")
    return problems


# ----------------------------------------------------------------------------------------- comparing

@dataclass
class Difference:
    output: int
    error: float  # relative to the output's largest finite magnitude
    detail: str = ""


def relative_error(got: torch.Tensor, want: torch.Tensor, compare_nonfinite: bool) -> float:
    """Largest |got - want| over positions where ``want`` is finite, relative to max |want|; inf when shapes,
    dtypes or (with ``compare_nonfinite``) the NaN/inf pattern differ."""
    if got.shape != want.shape or got.dtype != want.dtype:
        return math.inf
    if not want.is_floating_point():
        return 0.0 if torch.equal(got, want) else math.inf
    g, w = got.detach().double(), want.detach().double()
    finite = torch.isfinite(w)
    if compare_nonfinite and not torch.equal(g[~finite].nan_to_num(nan=0.5), w[~finite].nan_to_num(nan=0.5)):
        return math.inf
    if not finite.any():
        return 0.0
    g, w = g[finite], w[finite]
    if not torch.isfinite(g).all():
        return math.inf
    return ((g - w).abs().max() / w.abs().max().clamp_min(1e-30)).item()


def _promoted(graph: Graph) -> Graph:
    """The program computed in float64: floating leaves, constants and casts become float64."""
    out = Graph(externs=dict(graph.externs))
    for name, value in graph.params.items():
        out.params[name] = value.double() if value.is_floating_point() else value
    for n in graph.nodes:
        dtype = "float64" if n.dtype in TOLERANCE else n.dtype
        attrs = n.attrs
        if n.op in ("Fill", "Cast") and n.a.dtype in TOLERANCE:
            attrs = tuple(n.a._replace(dtype="float64"))
        out.nodes.append(type(n)(n.op, n.inputs, attrs, n.shape, dtype))
    out.outputs = list(graph.outputs)
    return out


def evaluate_all(graph: Graph, feeds: dict[str, torch.Tensor], nodes=None) -> dict[int, torch.Tensor]:
    """Every live node's value (the reference semantics)."""
    values: dict[int, torch.Tensor] = {}
    for i in graph.live_nodes() if nodes is None else nodes:
        n = graph.nodes[i]
        values[i] = run_node(graph, n, [values[j] for j in n.inputs], feeds)
    return values


def random_feeds(like: dict[str, torch.Tensor], names: list[str], seed: int) -> dict[str, torch.Tensor]:
    """``like`` with the floating inputs ``names`` replaced by fresh normal values; integer and bool inputs
    are kept (indices and masks, whose valid values the program decides), and so are live weights."""
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for name, t in like.items():
        if name in names and t.is_floating_point():
            out[name] = torch.randn(t.shape, generator=gen, dtype=torch.float32).to(device=t.device, dtype=t.dtype)
        else:
            out[name] = t
    return out


def generated_inputs(graph: Graph, input_names: list[str]) -> list[torch.Tensor]:
    """Inputs for a program given without examples: normal floats, zero integers and booleans (valid
    indices whatever they index)."""
    gen = torch.Generator().manual_seed(1)
    shapes = {n.attrs[0]: (n.shape, ops.DTYPES[n.dtype]) for n in graph.nodes if n.op == "Input"}
    out = []
    for name in input_names:
        shape, dtype = shapes[name]
        out.append(torch.randn(shape, generator=gen).to(dtype) if dtype.is_floating_point
                   else torch.zeros(shape, dtype=dtype))
    return out


def program_flops(graph: Graph) -> float:
    total = 0.0
    for i in graph.live_nodes():
        n = graph.nodes[i]
        total += ops.get(n.op).flops([graph.nodes[j].shape for j in n.inputs], n.shape)
    return total


# ----------------------------------------------------------------------------------------- the plan

@dataclass
class Verdict:
    ok: bool
    inputs: str  # which input sets were checked
    worst: float = 0.0  # largest relative error seen (against eager, or float64 where that decided)
    failure: Difference | None = None
    feeds: dict | None = None  # the inputs of the failure

    def describe(self) -> str:
        if self.ok:
            return f"passed on {self.inputs} (largest relative error {self.worst:.1e})"
        f = self.failure
        return f"output {f.output} differs from the program by {f.error:.3g} (relative){f.detail}"


class PlanCheck:
    """Runs plans against the captured program ``graph`` on the example inputs and fresh random ones."""

    def __init__(self, graph: Graph, input_names: list[str], examples: list[torch.Tensor] | None,
                 bound: dict[str, torch.Tensor] | None, assume_finite: bool, slow_plans: str = ""):
        """``examples`` are the call's inputs (``input_names``; None: generated from the graph's input
        shapes); ``bound`` the live weights the plan reads; ``slow_plans`` says why plans run so slowly
        here that one input set must do (the Triton interpreter)."""
        self.graph, self.input_names = graph, input_names
        self.compare_nonfinite = not assume_finite
        label = "the example inputs" if examples is not None else "generated inputs"
        if examples is None:
            examples = generated_inputs(graph, input_names)
        example_feeds = {**(bound or {}), **dict(zip(input_names, examples))}
        self.feed_sets = [(label, example_feeds)]
        flops = program_flops(graph)
        if flops <= RANDOM_CHECK_FLOPS and not slow_plans:
            self.feed_sets.append(("random inputs", random_feeds(example_feeds, input_names, seed=0)))
        self.inputs = " and ".join(name for name, _ in self.feed_sets)
        if len(self.feed_sets) == 1:
            why = slow_plans or f"{flops:.1e} FLOPs, over {RANDOM_CHECK_FLOPS:.0e}"
            self.inputs += f" only ({why}: no random-input run)"
        with torch.no_grad():
            self.expected = [evaluate(graph, f) for _, f in self.feed_sets]
        self._float64: dict[int, list] = {}

    def __call__(self, runner) -> Verdict:
        """Run ``runner`` (``forward(*inputs) -> tuple``) on every input set and judge its outputs."""
        worst = 0.0
        for k, (_, feeds) in enumerate(self.feed_sets):
            try:
                with torch.no_grad():
                    got = list(runner.forward(*[feeds[n] for n in self.input_names]))
            except EqiforgeError:
                raise  # a plan that cannot run here (triton on a CPU without the interpreter): the user's to fix
            except Exception as err:  # noqa: BLE001 - a plan that cannot run is a failed plan
                return Verdict(False, self.inputs, math.inf,
                               Difference(0, math.inf, f": the plan raised {type(err).__name__}: {err}"), feeds)
            for o, (g, w) in enumerate(zip(got, self.expected[k])):
                err = relative_error(g, w, self.compare_nonfinite)
                tol = TOLERANCE.get(ops.DTYPE_NAMES.get(w.dtype), 0.0)
                if err > tol:
                    err, allowed = self._against_float64(k, o, g, w)
                    if err > allowed:
                        return Verdict(False, self.inputs, err, Difference(
                            o, err, f" against float64 on {self.feed_sets[k][0]}, where eager's own error is "
                                    f"{allowed / ROUNDING_FACTOR:.2g}"), feeds)
                worst = max(worst, err)
        return Verdict(True, self.inputs, worst)

    def _against_float64(self, k: int, o: int, got: torch.Tensor, want: torch.Tensor) -> tuple[float, float]:
        """(plan's error, the error allowed) against the program computed in float64."""
        if k not in self._float64:
            feeds = {n: t.double() if t.is_floating_point() else t for n, t in self.feed_sets[k][1].items()}
            try:
                with torch.no_grad():
                    graph = _promoted(self.graph)
                    values = evaluate_all(graph, feeds)
                    self._float64[k] = [values[i] for i in graph.outputs]
            except Exception:  # noqa: BLE001 - an extern without float64 support: judge against eager alone
                self._float64[k] = None
        exact = self._float64[k]
        tol = TOLERANCE.get(ops.DTYPE_NAMES.get(want.dtype), 0.0)
        if exact is None or not want.is_floating_point():
            return relative_error(got, want, self.compare_nonfinite), tol
        ref = exact[o]
        plan_err = relative_error(got.double(), ref, self.compare_nonfinite)
        eager_err = relative_error(want.double(), ref, False)
        return plan_err, max(ROUNDING_FACTOR * eager_err, tol)

    def culprits(self, plan, feeds: dict[str, torch.Tensor], bindings: dict[int, int]) -> list[int]:
        """Plan nodes where the plan's values first leave the program's: the lowest plan node whose e-class
        holds a program node of a different value, and the plan nodes below it down to program values that
        agree (their chosen e-nodes are what to exclude). Empty when the plan graph itself computes the
        program's values: then the lowering, not the e-graph, is wrong."""
        program_node = {}  # e-class -> a program node in it (``bindings``: program node -> e-class)
        for i in self.graph.live_nodes():
            program_node.setdefault(bindings.get(i), i)
        with torch.no_grad():
            want = evaluate_all(self.graph, feeds)
            got = evaluate_all(plan.graph, feeds)
        agrees = {}
        for p in plan.graph.live_nodes():
            i = program_node.get(plan.eclass.get(p))
            if i is not None and isinstance(got[p], torch.Tensor) and isinstance(want[i], torch.Tensor):
                dtype = ops.DTYPE_NAMES.get(want[i].dtype)
                agrees[p] = relative_error(got[p], want[i], self.compare_nonfinite) <= 10 * TOLERANCE.get(dtype, 0.0)
        wrong = next((p for p in plan.graph.live_nodes() if agrees.get(p) is False), None)
        if wrong is None:
            return []
        found, stack = [], [wrong]
        while stack:
            p = stack.pop()
            if p in found or agrees.get(p) is True or plan.graph.nodes[p].op == "Input":
                continue
            found.append(p)
            stack.extend(plan.graph.nodes[p].inputs)
        return found
