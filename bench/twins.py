"""The twins suite: algebra programs EqiForge was not tuned on, each with its hand-rewritten twin (issue 25).

Every program has an algebraic win a person would take by hand, in six kinds: reductions through linear
maps, broadcast operands inside reductions, outer products, transposes, scalar factors, and low-rank and
merged products. The twin is the yardstick: EqiForge's plan should run within 10% of it. The suite was
written from the kinds alone, before looking at which rules EqiForge has, so a miss here is a missing rule.

Each program exists at two sizes: ``SUITE`` at benchmark size (an eager run takes ~0.3-20 ms on 2 cores)
and ``SMALL``, the same programs shrunk, for the correctness test. Inputs are standard normal.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from programs import Program


class Twin(NamedTuple):
    name: str
    doc: str
    build: Callable[[object], tuple[Callable, tuple[torch.Tensor, ...]]]  # size -> (program, inputs)
    hand: Callable[[Callable], Callable]  # the built program -> its twin
    full: object  # the benchmark size, as build takes it
    small: object  # the test size


def _randn(*shapes):
    return tuple(torch.randn(*s) for s in shapes)


def _fn(fn: Callable, hand: Callable, full: list[tuple], small: list[tuple]) -> Twin:
    """A plain function of standard-normal inputs of the given shapes, and its twin."""
    return Twin(fn.__name__, fn.__doc__, lambda shapes: (fn, _randn(*shapes)), lambda _: hand, full, small)


def _mod(cls: type, hand: Callable[[nn.Module], Callable], full: tuple[dict, list[tuple]],
         small: tuple[dict, list[tuple]]) -> Twin:
    """An nn.Module built from keyword arguments, on standard-normal inputs: a size is (kwargs, shapes)."""
    return Twin(cls.__name__, cls.__doc__, lambda size: (cls(**size[0]), _randn(*size[1])), hand, full, small)


def _frozen(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Weights a twin pre-combined by hand: detached constants."""
    return tuple(t.detach().clone() for t in tensors)


# --- reductions through linear maps ---

def batched_row_means(x, w):
    """Batched X W averaged over its columns = X (W's row means): a matrix-vector product per batch."""
    return (x @ w).mean(dim=-1)


def batched_col_sums(x, w):
    """Batched X W summed over its rows = (X's column sums) W."""
    return (x @ w).sum(dim=1)


class LinearFeatureSum(nn.Module):
    """A linear layer's outputs summed over the features = x (W's column sums) + the bias's sum."""

    def __init__(self, d_in=512, d_out=1024):
        super().__init__()
        self.proj = nn.Linear(d_in, d_out)

    def forward(self, x):
        return self.proj(x).sum(dim=-1)


def _linear_feature_sum_hand(m):
    w, b = _frozen(m.proj.weight.sum(dim=0), m.proj.bias.sum())
    return lambda x: x @ w + b


def weighted_row_sum(a, b, v):
    """Rows of A B weighted by a broadcast vector v and summed = A (B v): two matrix-vector products."""
    return ((a @ b) * v).sum(dim=-1)


def gram_row_sums(x):
    """Row sums of the Gram matrix X X^T = X (X's column sums): no n x n product."""
    return (x @ x.mT).sum(dim=-1)


# --- broadcast operands inside reductions ---

def row_bias_max(x, b):
    """Row maxima of x plus a per-row bias b = x's row maxima plus b: the bias is constant along each row."""
    return (x + b).amax(dim=-1)


def scaled_rows_mean(x, s):
    """Row means of x scaled per row by s = x's row means times s."""
    return (x * s).mean(dim=-1)


def broadcast_weighted_sum(x, c):
    """x times a broadcast row c, summed over the features = x c: one matrix-vector product."""
    return (x * c).sum(dim=-1)


def outer_sum_row_sums(u, v):
    """Row sums of the outer sum u_i + v_j = n u + sum(v): the n x n matrix is never needed."""
    return (u.unsqueeze(-1) + v).sum(dim=-1)


def bias_col_sums(x, b):
    """Column sums of x plus a broadcast bias row b = x's column sums plus rows * b."""
    return (x + b).sum(dim=0)


# --- outer products ---

def outer_matvec(u, v, x):
    """(u v^T) x = u (v . x): a dot product instead of a materialised outer product."""
    return (u.unsqueeze(-1) * v) @ x


def outer_row_sums(u, v):
    """Row sums of the outer product u v^T = u sum(v)."""
    return (u.unsqueeze(-1) * v).sum(dim=-1)


def rank_one_update_matvec(a, u, v, x):
    """(A + u v^T) x = A x + u (v . x): the rank-one update is never materialised."""
    return (a + u.unsqueeze(-1) * v) @ x


def outer_product_matmul(u, v, w):
    """(u v^T) W = u (v^T W): a vector-matrix product scaled per row instead of a full matrix product."""
    return (u.unsqueeze(-1) * v) @ w


# --- transposes ---

def transposed_product_row_sums(a, b):
    """Row sums of (A B)^T = column sums of A B = (A's column sums) B."""
    return (a @ b).mT.sum(dim=-1)


def gram_transpose_matvec(x, v):
    """(X^T X)^T v = X^T (X v): the transpose of a symmetric product, then reassociated."""
    return (x.mT @ x).mT @ v


def transposed_factors_chain(a, b, x):
    """(A^T B^T)^T X = B (A X) for a thin X: the transposes cancel and the chain reassociates."""
    return (a.mT @ b.mT).mT @ x


# --- scalar factors ---

def scalars_through_chain(a, b, x):
    """(2A)(3B) X = 6 A (B X): the scalars gather on the thin end and the chain reassociates."""
    return ((a * 2.0) @ (b * 3.0)) @ x


def negated_product_chain(a, b, x):
    """-(A B) X = -(A (B X)): the negation rides on the thin result."""
    return (-(a @ b)) @ x


def divided_product_mean(a, b):
    """(A B / 8) averaged over its rows = (A's row mean) B / 8."""
    return ((a @ b) / 8.0).mean(dim=0)


# --- low-rank and merged products ---

class LowRankSum(nn.Module):
    """x (U1 V1 + U2 V2): two low-rank weights summed before use = x U1 V1 + x U2 V2, each r/n of the work."""

    def __init__(self, n=1024, r=16):
        super().__init__()
        self.u1, self.u2 = nn.Parameter(torch.randn(n, r) / n ** 0.5), nn.Parameter(torch.randn(n, r) / n ** 0.5)
        self.v1, self.v2 = nn.Parameter(torch.randn(r, n) / r ** 0.5), nn.Parameter(torch.randn(r, n) / r ** 0.5)

    def forward(self, x):
        return x @ (self.u1 @ self.v1 + self.u2 @ self.v2)


def _low_rank_sum_hand(m):
    u1, v1, u2, v2 = _frozen(m.u1, m.v1, m.u2, m.v2)
    return lambda x: (x @ u1) @ v1 + (x @ u2) @ v2


def batched_low_rank(x, u, v):
    """Batched X (U V) with a rank-r weight materialised first = (X U) V."""
    return x @ (u @ v)


class ThreeLinears(nn.Module):
    """Three linear layers with no activation between = one linear layer of the combined weights."""

    def __init__(self, d_in=512, hidden=1024, d_out=128):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(d_in, hidden), nn.Linear(hidden, hidden), nn.Linear(hidden, d_out))

    def forward(self, x):
        return self.layers(x)


def _three_linears_hand(m):
    weight, bias = m.layers[0].weight, m.layers[0].bias
    for layer in m.layers[1:]:
        weight, bias = layer.weight @ weight, layer.weight @ bias + layer.bias
    weight, bias = _frozen(weight, bias)
    return lambda x: F.linear(x, weight, bias)


class GatedProjections(nn.Module):
    """Two projections of one input multiplied = one projection by the stacked weights, split in two."""

    def __init__(self, d=512, hidden=512):
        super().__init__()
        self.gate, self.up = nn.Linear(d, hidden), nn.Linear(d, hidden)

    def forward(self, x):
        return self.gate(x) * self.up(x)


def _gated_projections_hand(m):
    weight, bias = _frozen(torch.cat([m.gate.weight, m.up.weight]), torch.cat([m.gate.bias, m.up.bias]))

    def hand(x):
        gate, up = F.linear(x, weight, bias).chunk(2, dim=-1)
        return gate * up
    return hand


class TwoInputProjection(nn.Module):
    """Projections of two inputs summed = one projection of the inputs side by side, by the weights side by
    side, with the biases summed."""

    def __init__(self, d=256, d_out=512):
        super().__init__()
        self.a, self.b = nn.Linear(d, d_out), nn.Linear(d, d_out)

    def forward(self, x, y):
        return self.a(x) + self.b(y)


def _two_input_projection_hand(m):
    weight, bias = _frozen(torch.cat([m.a.weight, m.b.weight], dim=1), m.a.bias + m.b.bias)
    return lambda x, y: F.linear(torch.cat([x, y], dim=-1), weight, bias)


def shared_left_factor_concat(a, x, y):
    """[A X, A Y] = A [X, Y]: one matrix product instead of two."""
    return torch.cat([a @ x, a @ y], dim=-1)


TWINS: list[Twin] = [
    _fn(batched_row_means, lambda x, w: x @ w.mean(dim=-1), [(32, 128, 512), (512, 512)],
        [(2, 8, 16), (16, 24)]),
    _fn(batched_col_sums, lambda x, w: x.sum(dim=1) @ w, [(32, 256, 256), (256, 512)], [(2, 8, 16), (16, 24)]),
    _mod(LinearFeatureSum, _linear_feature_sum_hand, ({}, [(2048, 512)]), ({"d_in": 16, "d_out": 24}, [(8, 16)])),
    _fn(weighted_row_sum, lambda a, b, v: a @ (b @ v), [(512, 1024), (1024, 1024), (1024,)],
        [(8, 16), (16, 24), (24,)]),
    _fn(gram_row_sums, lambda x: x @ x.sum(dim=0), [(2048, 256)], [(24, 8)]),
    _fn(row_bias_max, lambda x, b: x.amax(dim=-1) + b.squeeze(-1), [(4096, 1024), (4096, 1)], [(8, 16), (8, 1)]),
    _fn(scaled_rows_mean, lambda x, s: x.mean(dim=-1) * s.squeeze(-1), [(4096, 1024), (4096, 1)],
        [(8, 16), (8, 1)]),
    _fn(broadcast_weighted_sum, lambda x, c: x @ c, [(4096, 1024), (1024,)], [(8, 16), (16,)]),
    _fn(outer_sum_row_sums, lambda u, v: u * v.shape[0] + v.sum(), [(4096,), (4096,)], [(8,), (16,)]),
    _fn(bias_col_sums, lambda x, b: x.sum(dim=0) + x.shape[0] * b, [(4096, 1024), (1024,)], [(8, 16), (16,)]),
    _fn(outer_matvec, lambda u, v, x: u * (v @ x), [(2048,)] * 3, [(8,), (16,), (16,)]),
    _fn(outer_row_sums, lambda u, v: u * v.sum(), [(4096,), (4096,)], [(8,), (16,)]),
    _fn(rank_one_update_matvec, lambda a, u, v, x: a @ x + u * (v @ x), [(2048, 2048), (2048,), (2048,), (2048,)],
        [(8, 16), (8,), (16,), (16,)]),
    _fn(outer_product_matmul, lambda u, v, w: u.unsqueeze(-1) * (v @ w), [(2048,), (2048,), (2048, 512)],
        [(8,), (16,), (16, 24)]),
    _fn(transposed_product_row_sums, lambda a, b: a.sum(dim=0) @ b, [(1024, 512), (512, 1024)],
        [(8, 16), (16, 24)]),
    _fn(gram_transpose_matvec, lambda x, v: x.mT @ (x @ v), [(2048, 512), (512,)], [(24, 8), (8,)]),
    _fn(transposed_factors_chain, lambda a, b, x: b @ (a @ x), [(1024, 1024), (1024, 1024), (1024, 4)],
        [(16, 16), (16, 16), (16, 2)]),
    _fn(scalars_through_chain, lambda a, b, x: 6.0 * (a @ (b @ x)), [(1024, 1024), (1024, 1024), (1024, 8)],
        [(16, 16), (16, 16), (16, 2)]),
    _fn(negated_product_chain, lambda a, b, x: -(a @ (b @ x)), [(1024, 1024), (1024, 1024), (1024, 8)],
        [(16, 16), (16, 16), (16, 2)]),
    _fn(divided_product_mean, lambda a, b: (a.mean(dim=0) @ b) / 8.0, [(2048, 512), (512, 1024)],
        [(8, 16), (16, 24)]),
    _mod(LowRankSum, _low_rank_sum_hand, ({}, [(512, 1024)]), ({"n": 32, "r": 4}, [(8, 32)])),
    _fn(batched_low_rank, lambda x, u, v: (x @ u) @ v, [(16, 256, 1024), (1024, 16), (16, 1024)],
        [(2, 8, 32), (32, 4), (4, 32)]),
    _mod(ThreeLinears, _three_linears_hand, ({}, [(1024, 512)]),
         ({"d_in": 16, "hidden": 32, "d_out": 8}, [(8, 16)])),
    _mod(GatedProjections, _gated_projections_hand, ({}, [(1024, 512)]), ({"d": 16, "hidden": 24}, [(8, 16)])),
    _mod(TwoInputProjection, _two_input_projection_hand, ({}, [(2048, 256), (2048, 256)]),
         ({"d": 16, "d_out": 24}, [(8, 16), (8, 16)])),
    _fn(shared_left_factor_concat, lambda a, x, y: a @ torch.cat([x, y], dim=-1),
        [(1024, 1024), (1024, 64), (1024, 64)], [(16, 16), (16, 4), (16, 4)]),
]


def _snake(name: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in name).lstrip("_")


def _program(twin: Twin, size) -> Program:
    return Program(_snake(twin.name), " ".join(twin.doc.split()), True, lambda: twin.build(size), twin.hand)


SUITE: dict[str, Program] = {p.name: p for p in (_program(t, t.full) for t in TWINS)}  # benchmark sizes
SMALL: dict[str, Program] = {p.name: p for p in (_program(t, t.small) for t in TWINS)}  # for the correctness test
