"""Which torch calls with algebraic content the IR sees into, and which rule sets apply: the op coverage table.

Every entry is a call a program writes (``torch.trace``, ``x.diagonal()``, ``einsum``), a small sample of it,
how the frontend captures it (``ir``: as IR ops, listed; ``opaque``: as an ``Extern``, a PyTorch call the
algebra cannot see into, with the reason), and the rule sets that rewrite what it becomes. An ``Extern`` is
where algebra stops, so the table is checked against the capture itself (tests/test_frontend.py: every
``ir`` sample captures without an Extern and with the listed ops, every ``opaque`` one with one) and
against ``docs/ops.md``, which shows :func:`markdown`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class Coverage:
    """One torch call: ``sample(*inputs)`` on random tensors of ``shapes`` is what is captured."""

    call: str  # as a program writes it
    group: str  # contraction | structure | reduction | view | order | linalg
    sample: Callable
    shapes: tuple[tuple[int, ...], ...]
    ir_ops: tuple[str, ...] = ()  # the IR ops it becomes (ir), empty when opaque
    rulesets: tuple[str, ...] = ()  # rule sets that rewrite those ops
    note: str = ""  # how it is captured, or why it stays opaque


def _ir(call, group, sample, shapes, ir_ops, rulesets, note=""):
    return Coverage(call, group, sample, shapes, tuple(ir_ops), tuple(rulesets), note)


def _opaque(call, group, sample, shapes, note):
    return Coverage(call, group, sample, shapes, note=note)


M, V, B3 = (5, 6), (6,), (2, 5, 6)
SQ = (6, 6)

TABLE: tuple[Coverage, ...] = (
    # products and contractions
    _ir("matmul, mm, bmm, @", "contraction", torch.matmul, (M, (6, 4)), ["MatMul"],
        ["matmul", "distributive", "reduction", "transpose", "layout", "tiling", "fusion"]),
    _ir("mv, dot", "contraction", torch.mv, (M, V), ["MatMul", "Reshape"], ["matmul", "reduction"],
        "kept whole, a product with a one-column operand"),
    _ir("linear, addmm, baddbmm", "contraction", F.linear, (M, (4, 6)), ["MatMul", "Permute"],
        ["matmul", "transpose", "fusion"], "bias adds are Add of an Expand"),
    _ir("einsum", "contraction", lambda a, b: torch.einsum("bij,bjk->bik", a, b), (B3, (2, 6, 3)),
        ["MatMul"], ["matmul", "reshape", "transpose"], "torch lowers it to bmm between permutes and reshapes"),
    _ir("tensordot", "contraction", lambda a, b: torch.tensordot(a, b, dims=([1], [0])), (M, (6, 3)),
        ["MatMul"], ["matmul", "reshape"], "lowered to a product of reshaped operands"),
    _ir("outer", "contraction", torch.outer, ((5,), (6,)), ["Mul", "Expand"], ["broadcast", "reduction"],
        "a product of broadcasts: a product after it or a sum over it is a contraction"),
    _ir("kron", "contraction", torch.kron, ((2, 3), (3, 2)), ["Mul", "Expand", "Reshape"], ["broadcast", "structure"],
        "a broadcast product reshaped; a product by kron(I, A) or kron(A, I) is a batched product by A"),
    _ir("block_diag", "contraction", lambda w, x: x @ torch.block_diag(w, w), ((3, 2), (4, 6)), ["BlockDiag", "MatMul"],
        ["structure", "transpose", "reshape"], "blocks of one shape: BlockDiag of their stack, and a product by it "
        "is a batched product by the blocks (one 2-d product for a repeated block); other blocks: zero-padded rows"),
    # structure: diagonals, identities, masks
    _ir("diagonal, trace, diag (of a matrix)", "structure", torch.trace, (SQ,), ["Diagonal", "Sum"],
        ["structure", "reduction"], "Diagonal: the diagonal of the last two dims, a view"),
    _ir("eye", "structure", lambda x: torch.eye(6) * x, (SQ,), ["Eq", "Where"], ["structure"],
        "index vectors compared; the constant mask is recognised as diagonal by value (diag-mask)"),
    _ir("diag (of a vector), diag_embed", "structure", lambda v, x: torch.diag(v) @ x, (V, (6, 3)),
        ["Eq", "Where", "MatMul"], ["structure"], "a diagonal mask over a broadcast vector"),
    _ir("where, masked_fill (constant masks)", "structure",
        lambda x: x.masked_fill(~torch.eye(6, dtype=torch.bool), 0.0), (SQ,), ["Where", "Not"],
        ["structure", "attention"], "causal, diagonal, triangular and banded masks are recognised by value"),
    _ir("tril, triu", "structure", torch.tril, (SQ,), ["Where", "Le"], ["structure", "attention"],
        "index comparisons and a Where; a product by a triangle of ones is a running sum, by a band (tril of "
        "triu) one multiply-add per diagonal or a sliding-window sum (BandMatMul, WindowSum)"),
    # reductions
    _ir("sum, mean", "reduction", lambda x: x.mean(dim=1), (M,), ["Sum", "Mul"],
        ["reduction", "broadcast", "concat"]),
    _ir("amax, amin, max/min over a dim (values)", "reduction", lambda x: x.max(dim=1).values, (M,),
        ["Amax"], ["reduction", "softmax"], "the indices, when read, stay a PyTorch call"),
    _ir("logsumexp", "reduction", lambda x: torch.logsumexp(x, dim=1), (M,), ["Amax", "Exp", "Sum", "Log"],
        ["reduction", "softmax"], "decomposed with its max shift; a term constant along the dim comes out, and a "
        "broadcast's logsumexp is computed once"),
    _ir("norm, linalg.vector_norm", "reduction", lambda x: x.norm(dim=1), (M,), ["Sum", "Sqrt"],
        ["reduction"], "orders 2, 1, inf, -inf and p > 0; order 0 (a count) stays a PyTorch call"),
    _ir("var, std, var_mean", "reduction", lambda x: x.var(dim=1), (M,), ["Sum", "Sub", "Div"], ["composite"]),
    _ir("softmax, log_softmax", "reduction", lambda x: x.softmax(dim=1), (M,), ["Amax", "Exp", "Sum", "Div"],
        ["softmax", "composite", "attention", "fusion"]),
    _ir("layer_norm", "reduction", lambda x: F.layer_norm(x, (6,)), (M,), ["Sum", "Rsqrt"],
        ["composite", "softmax", "fusion"]),
    _ir("cumsum", "reduction", lambda x: x.cumsum(dim=0), (M,), ["Cumsum"], ["structure", "synthesized"],
        "a running sum: a product by a lower triangle of ones is one, its neighbour differences the values; it "
        "moves through sums over other dims and through products"),
    _opaque("cumprod, cummax, logcumsumexp", "reduction", lambda x: x.cumprod(dim=0), (M,),
            "other scans: no rule uses them yet"),
    # views and data movement
    _ir("reshape, view, flatten, unflatten, squeeze, unsqueeze", "view", lambda x: x.reshape(3, 10), (M,),
        ["Reshape"], ["reshape"]),
    _ir("expand, broadcast_to, implicit broadcasting", "view", lambda x: x.expand(4, 5, 6), ((1, 5, 6),),
        ["Expand"], ["broadcast", "reduction"]),
    _ir("permute, transpose, t, mT", "view", lambda x: x.mT, (B3,), ["Permute"], ["transpose", "layout"]),
    _ir("cat, stack", "view", lambda x, y: torch.cat([x, y], dim=1), (M, M), ["Concat"], ["concat"]),
    _ir("split, chunk, unbind, narrow, select, slicing", "view", lambda x: x[:, 1:4], (M,), ["Slice"],
        ["concat"], "a step is views of a window where one fits"),
    _ir("repeat, tile", "view", lambda x: x.repeat(2, 1), (M,), ["Expand", "Reshape"], ["reduction", "broadcast"],
        "a broadcast of a size-1 dim merged into the repeated one; sums over it are sums of a broadcast"),
    _ir("flip", "order", lambda x: x.flip(0), (M,), ["Flip"], ["reorder", "synthesized"],
        "a copy: PyTorch has no reversed view; through a product it moves to the smaller operand"),
    _ir("roll", "order", lambda x: x.roll(1, 0), (M,), ["Roll"], ["reorder"],
        "kept whole (its decomposition gathers by a constant index); a roll of the flattened tensor stays a call"),
    _ir("sort (values)", "order", lambda x: x.sort(dim=1).values, (M,), ["Sort"], ["reorder"],
        "the indices, when read, stay a PyTorch call"),
    _opaque("topk, argmax, argmin, argsort", "order", lambda x: x.topk(2, dim=1).values, (M,),
            "order statistics with indices: no algebra the rules use"),
    # linear algebra
    _opaque("linalg.det, qr, svd, eigh", "linalg", torch.linalg.det, (SQ,),
            "factorisations; inverse laws hold only for well-conditioned inputs, so no rule uses them; inv, solve "
            "and cholesky raise on singular input (a side effect): capture refuses them with that reason"),
)


def markdown() -> str:
    """The table as docs/ops.md shows it."""
    rows = ["| call | group | captured as | rule sets | note |", "|---|---|---|---|---|"]
    for c in TABLE:
        captured = ", ".join(c.ir_ops) if c.ir_ops else "opaque (PyTorch call)"
        rows.append(f"| {c.call} | {c.group} | {captured} | {', '.join(c.rulesets) or '-'} | {c.note or '-'} |")
    return "\n".join(rows) + "\n"


def sample_inputs(entry: Coverage, seed: int = 0) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(s, generator=gen) for s in entry.shapes)
