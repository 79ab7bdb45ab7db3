"""Recognise constant structured masks (causal, diagonal, lower-triangular) by their value, so the e-graph can use them.

A causal mask is built from constants (``torch.ones(...).triu(1)``, ``arange`` comparisons, a registered
buffer sliced to the sequence length, SDPA's ``is_causal``), and a fused attention kernel can skip the tiles
above the diagonal instead of adding -inf. Whether a constant is that pattern depends on its value, which
egglog cannot compute, so it is checked here and stated as a fact of the IR graph (``Graph.facts``); the
encoder adds the facts to the e-graph, and a rule of ``rules/attention.egg`` makes a biased attention kernel
whose bias is causal the causal kernel there, where extraction and the report see it.

The pattern (the attention kernel's, see eqiforge/lower/kernels.py): on the last two dims [Sq, Sk], key j
is masked for query i when j > i + (Sk - Sq) (the bottom-right diagonal), and the leading dims are 1 (the
same for every batch). ``causal-bias``: a float tensor, 0 where seen and -inf where masked; ``causal-mask``:
a bool tensor true where masked (``masked_fill``'s mask). Both relations are declared in rules/schema.egg.
``diag-mask``: a bool tensor true exactly on the main diagonal of its square last two dims (``torch.eye``,
``arange`` compared with itself, what ``diag``/``diag_embed`` decompose to); rules/structure.egg turns a
product or a sum of an operand masked by it into work on that operand's diagonal. ``tril-mask``: a bool
tensor true on and below the main diagonal of its square last two dims (``tril``, ``j <= i``); a product by
it is a running sum. (Its complement, true strictly above, is the square causal mask.) ``band-mask lo hi``:
a bool tensor true exactly on the diagonals lo <= j - i <= hi (a tridiagonal matrix, a sliding window), and
``band-ones lo hi`` a float one, 1 there and 0 elsewhere: a product by a matrix so masked reads its band alone
(``BandMatMul``, one multiply-add per diagonal).

Cheap by construction: only nodes computed from Params and Fills through elementwise and data-movement ops
(no products, reductions or externs), float or bool, of rank >= 2 with size-1 leading dims, and read by an
Add, a Where, a Mul or a MatMul (directly or through data movement) are candidates; each is evaluated once
(with what it reads, and nothing else), and corners are looked at before the whole value is compared.
"""
from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import unset_fake_temporarily

from .. import ops
from ..ir import Graph, run_node

CAUSAL_BIAS = "causal-bias"
CAUSAL_MASK = "causal-mask"
DIAG_MASK = "diag-mask"
TRIL_MASK = "tril-mask"
BAND_MASK = "band-mask"
BAND_ONES = "band-ones"
#: the widest band stated (diagonals): a product by a wider one is left to the dense product
MAX_BAND_DIAGONALS = 64

#: op kinds a mask is computed with (leaves other than Input, elementwise ops, casts, data movement)
MASK_OP_KINDS = ("unary", "binary", "compare", "where", "cast", "movement")
FLOATS = ("float16", "bfloat16", "float32", "float64")


def mark_structured_masks(graph: Graph) -> Graph:
    """Add to ``graph.facts`` the live nodes whose constant value is a causal bias or mask, a diagonal, lower-
    triangular or banded mask, or a band of ones; returns it."""
    live = graph.live_nodes()
    constant: set[int] = set()
    structured: set[int] = set()  # constants that read a Param: a node of Fills alone holds one value throughout
    for i in live:  # topological: a node's operands are classified before it
        n = graph.nodes[i]
        if n.op in ("Param", "Fill") or (ops.get(n.op).kind in MASK_OP_KINDS and all(j in constant for j in n.inputs)):
            constant.add(i)
            if n.op == "Param" or any(j in structured for j in n.inputs):
                structured.add(i)
    applied = _applied_as_bias_or_mask(graph, live, ("Add", "Where"))
    applied |= {i for i in _applied_as_bias_or_mask(graph, live, ("Mul", "MatMul")) if _mask_like(graph, i)}
    values: dict[int, torch.Tensor] = {}
    with unset_fake_temporarily():  # real values, also where torch.compile hands the graph over in fake mode
        for i in live:
            n = graph.nodes[i]
            if i in structured and i in applied and _mask_shaped(n):
                fact = _structure_fact(_value(graph, i, values), n)
                if fact and fact not in graph.facts.get(i, ()):
                    graph.facts[i] = graph.facts.get(i, ()) + (fact,)
    return graph


def _applied_as_bias_or_mask(graph: Graph, live: list[int], readers: tuple[str, ...]) -> set[int]:
    """Nodes read by one of ``readers``, directly or through data-movement ops and logical negation (how a
    bias is added to the scores or a mask selects -inf or zero: Add, Where; how a 0/1 mask or a banded matrix
    multiplies: Mul, MatMul)."""
    users: dict[int, list[int]] = {i: [] for i in live}
    for i in live:
        for j in set(graph.nodes[i].inputs):
            users[j].append(i)
    applied: set[int] = set()
    for i in reversed(live):  # users first
        if any(graph.nodes[u].op in readers or (u in applied and (
                graph.nodes[u].op == "Not" or ops.get(graph.nodes[u].op).kind == "movement")) for u in users[i]):
            applied.add(i)
    return applied


def _mask_like(graph: Graph, i: int) -> bool:
    """Whether a constant a product reads is worth testing for a band: a parameter (its value is at hand), a
    bool, or a bool made 0/1 (a cast; a where of fills or of such wheres: ``ones.tril().triu(-3)``); a weight
    scaled or summed is never evaluated."""
    n = graph.nodes[i]
    return n.op == "Param" or n.dtype == "bool" or (n.op == "Cast" and graph.nodes[n.inputs[0]].dtype == "bool") \
        or (n.op == "Where" and all(graph.nodes[j].op == "Fill" or _mask_like(graph, j) for j in n.inputs[1:]))


def _mask_shaped(node) -> bool:
    """Float or bool, [..., Sq, Sk] with size-1 leading dims (one mask for every batch), not empty."""
    shape = node.shape
    return (len(shape) >= 2 and all(d == 1 for d in shape[:-2]) and 0 not in shape
            and node.dtype in FLOATS + ("bool",))


def _value(graph: Graph, i: int, values: dict[int, torch.Tensor]) -> torch.Tensor:
    """Constant node ``i``'s value, evaluating what it reads first (iteratively: chains can be long)."""
    stack = [i]
    while stack:
        j = stack[-1]
        missing = [k for k in graph.nodes[j].inputs if k not in values]
        if missing:
            stack.extend(missing)
            continue
        stack.pop()
        if j not in values and graph.nodes[j].op == "Param":  # at hand: nothing to compute
            values[j] = graph.params[graph.nodes[j].a.name]
        if j not in values:
            values[j] = run_node(graph, graph.nodes[j], [values[k] for k in graph.nodes[j].inputs], {})
    return values[i]


def _structure_fact(value: torch.Tensor, node) -> str | tuple | None:
    """CAUSAL_BIAS, CAUSAL_MASK, DIAG_MASK, TRIL_MASK, (BAND_MASK, lo, hi) or (BAND_ONES, lo, hi) when
    ``value`` is that pattern, else None."""
    sq, sk = node.shape[-2:]
    v = value.reshape(sq, sk)
    if node.dtype == "bool" and sq == sk > 1 and v[0, 0].item() and not v[0, -1].item():
        if v[-1, 0].item():
            lower = torch.ones(sq, sk, dtype=torch.bool, device=v.device).tril()
            return TRIL_MASK if torch.equal(v, lower) else None
        if torch.equal(v, torch.eye(sq, dtype=torch.bool, device=v.device)):
            return DIAG_MASK
        return _band(v, BAND_MASK)
    if node.dtype != "bool" and sq == sk > 2 and v[0, 0].item() == 1 and v[0, -1].item() == 0 \
            and v[-1, 0].item() == 0:
        return _band(v, BAND_ONES)
    masked, seen = (True, False) if node.dtype == "bool" else (float("-inf"), 0.0)
    if v[-1, -1].item() != seen or (sq > 1 and v[0, -1].item() != masked):  # most constants fail here
        return None
    above = torch.ones(sq, sk, dtype=torch.bool, device=v.device).triu(sk - sq + 1)
    if node.dtype == "bool":
        return CAUSAL_MASK if torch.equal(v, above) else None
    bias = torch.zeros(sq, sk, dtype=v.dtype, device=v.device).masked_fill(above, float("-inf"))
    return CAUSAL_BIAS if torch.equal(v, bias) else None


def _band(v: torch.Tensor, relation: str) -> tuple | None:
    """(relation, lo, hi) when the square ``v`` is nonzero exactly on the diagonals lo <= j - i <= hi (a
    float one also 1 there), more than the main diagonal alone and at most MAX_BAND_DIAGONALS; else None."""
    rows, cols = (v != 0).nonzero(as_tuple=True)
    offsets = cols - rows
    lo, hi = int(offsets.min()), int(offsets.max())
    if hi - lo + 1 > MAX_BAND_DIAGONALS or lo == hi == 0:  # the diagonal alone: diag-mask's rules scale rows
        return None
    n = v.shape[0]
    band = torch.ones(n, n, dtype=torch.bool, device=v.device).triu(lo).tril(hi)
    return (relation, lo, hi) if torch.equal(v, band.to(v.dtype)) else None
