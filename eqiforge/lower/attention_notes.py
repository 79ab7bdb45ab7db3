"""Why a plan still computes softmax(S) V as a softmax and a product instead of one attention kernel.

The attention rules (rules/attention.egg) take scores S = scale * q k^T (+ bias), masked or not. A model that
writes its scores another way (Gemma 2's tanh soft-capping, a learned non-constant scale) keeps the
softmax and the product; the report says which op in the scores stood in the way, so the user (or the next
rule) knows why.
"""
from __future__ import annotations

from collections import deque

from ..ir import Graph

PRODUCTS = ("MatMul", "GemmK")
#: ops between q k^T and the softmax that the attention rules take (a scale, a bias, masks, views, casts)
TAKEN = frozenset({"Add", "Mul", "Div", "Where", "Cast", "Reshape", "Expand", "Permute", "Slice"})
MAX_DEPTH = 8  # ops searched back from the softmax for the product q k^T


def unfused_attention(graph: Graph, kernel_found=lambda node: False) -> list[str]:
    """One note per softmax-times-V product in ``graph`` (a plan's) that is not an attention kernel;
    ``kernel_found(node)`` says whether the e-graph held one for that product (the cost model chose the
    unfused form: on a CPU PyTorch's attention kernel can be slower than two products and a softmax)."""
    notes = []
    for i in graph.live_nodes():
        node = graph.nodes[i]
        if node.op not in PRODUCTS:
            continue
        probs = graph.nodes[node.inputs[0]]
        if probs.op == "Where":  # PyTorch's SDPA guards rows that are all -inf
            probs = graph.nodes[probs.inputs[2]]
        if probs.op == "RowReduceK" and probs.a.kind == "softmax":
            why = ("the attention kernel was found, and predicted slower here than the products and the softmax"
                   if kernel_found(i) else _why(graph, probs.inputs[0]))
            notes.append(f"softmax(S) V of shape {list(node.shape)} is not one attention kernel: {why}")
    return notes


def _why(graph: Graph, scores: int) -> str:
    path = _path_to_product(graph, scores)
    if path is None:
        return (f"its scores S are not a product q k^T within {MAX_DEPTH} ops (S is computed by "
                f"{graph.nodes[scores].op})")
    blockers = sorted({op for op in path if op not in TAKEN})
    if blockers:
        return (f"its scores pass through {', '.join(blockers)} between q k^T and the softmax (e.g. tanh "
                "soft-capping); the attention kernel takes a constant scale, an additive bias and masks only")
    between = f" -> {' -> '.join(path)}" if path else ""
    return (f"its scores q k^T{between} are a form the attention rules do not match "
            "(a scale that is not a constant, or a bias of another shape)")


def _path_to_product(graph: Graph, start: int) -> list[str] | None:
    """The ops from the matrix product nearest ``start`` (breadth first, going back) to ``start``, in the order
    they run, or None."""
    parents: dict[int, int | None] = {start: None}
    queue = deque([(start, 0)])
    while queue:
        i, depth = queue.popleft()
        if graph.nodes[i].op in PRODUCTS:
            path = []
            j = parents[i]
            while j is not None:
                path.append(graph.nodes[j].op)
                j = parents[j]
            return path
        if depth < MAX_DEPTH:
            for k in graph.nodes[i].inputs:
                if k not in parents:
                    parents[k] = i
                    queue.append((k, depth + 1))
    return None
